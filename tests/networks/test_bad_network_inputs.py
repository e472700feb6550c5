"""Bad input to the networks' constructors: this layer's entries of the bad-input catalogue, each a mistake committed
once that must get a clear error (:func:`tests.support.mistakes.check_mistake`; docs/troubleshooting.md lists every
layer's)."""

from __future__ import annotations

import pytest

from pyro_attention.networks import Seq2Seq
from tests.support.mistakes import (
    SIZES,
    Mistake,
    check_mistake,
)

pytestmark = pytest.mark.usefixtures("mistake_work_dir")

CATALOGUE: list[Mistake] = [
    Mistake(
        "network-size-zero", SIZES, "a network with a zero-sized vocabulary or layer",
        lambda: Seq2Seq(0, 12),
        ValueError, r"Seq2Seq: source_vocab must be >= 4, got 0",
        "Build the network from the vocabulary: `Seq2Seq(len(src_vocab), len(tgt_vocab), ...)`.",
    ),
]  # fmt: skip


@pytest.mark.parametrize("mistake", CATALOGUE, ids=[m.id for m in CATALOGUE])
def test_mistake_gets_a_clear_error(mistake: Mistake):
    check_mistake(mistake)
