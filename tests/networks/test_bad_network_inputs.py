"""Bad input to the networks' constructors: this layer's entries of the bad-input catalogue, each a mistake committed
once that must get a clear error (:func:`tests.support.mistakes.check_mistake`; docs/troubleshooting.md lists every
layer's)."""

from __future__ import annotations

from pyro_attention.networks import Seq2Seq
from tests.support import mistakes as m

CATALOGUE: list[m.Mistake] = [
    m.Mistake(
        "network-size-zero", m.SIZES, "a network with a zero-sized vocabulary or layer",
        lambda: Seq2Seq(0, 12),
        ValueError, r"Seq2Seq: source_vocab must be >= 4, got 0",
        "Build the network from the vocabulary: `Seq2Seq(len(src_vocab), len(tgt_vocab), ...)`.",
    ),
]  # fmt: skip


test_mistake_gets_a_clear_error = m.mistake_test(CATALOGUE)
