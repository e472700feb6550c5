"""Bad input to the networks' constructors: this layer's entries of the bad-input catalogue, each a mistake committed
once that must get a clear error (:func:`tests.support.mistakes.check_mistake`; docs/troubleshooting.md lists every
layer's)."""

from __future__ import annotations

from pyro_attention.networks import Seq2Seq, TransformerSeq2Seq
from tests.support import mistakes as m

CATALOGUE: list[m.Mistake] = [
    m.Mistake(
        "network-size-zero", m.SIZES, "a network with a zero-sized vocabulary or layer",
        lambda: Seq2Seq(0, 12),
        ValueError, r"Seq2Seq: source_vocab must be >= 4, got 0",
        "Build the network from the vocabulary: `Seq2Seq(len(src_vocab), len(tgt_vocab), ...)`.",
    ),
    m.Mistake(
        "transformer-heads-do-not-divide", m.SIZES, "a Transformer whose width its heads do not divide",
        lambda: TransformerSeq2Seq(12, 12, model_size=10, heads=4),
        ValueError, r"TransformerSeq2Seq: model_size must be even and a multiple of heads, got model_size 10 and "
        r"heads 4",
        "Choose `heads` dividing `model_size` (each head gets `model_size / heads` dimensions).",
    ),
]  # fmt: skip


test_mistake_gets_a_clear_error = m.mistake_test(CATALOGUE)
