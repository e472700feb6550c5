"""Bad input to the metrics, AER and plots: this layer's entries of the bad-input catalogue, each a mistake committed
once that must get a clear error (:func:`tests.support.mistakes.check_mistake`; docs/troubleshooting.md lists every
layer's)."""

from __future__ import annotations

import torch

from pyro_attention.aer import alignment_error_rate, combine_posteriors, links_from_probs, symmetrize
from pyro_attention.files import WriteError
from pyro_attention.metrics import bleu, perplexity
from pyro_attention.plots import alignment_heatmaps
from tests.support import mistakes as m

CATALOGUE: list[m.Mistake] = [
    m.Mistake(
        "aer-count-mismatch", m.GOLD, "scoring a different number of predicted alignments than gold ones",
        lambda: alignment_error_rate([{(0, 0)}, {(1, 1)}], [{(0, 0)}]),
        ValueError, r"alignment_error_rate: 2 predicted alignments for 1 gold ones",
        "Predict one alignment per gold sentence pair, in the same order.",
    ),
    m.Mistake(
        "unknown-symmetrize-method", m.NAMES, "an unknown symmetrisation heuristic",
        lambda: symmetrize([{(0, 0)}], [{(0, 0)}], "grow-diagonal"),
        ValueError, r"symmetrize: unknown method 'grow-diagonal'; allowed: 'intersection', 'union', 'grow-diag', "
        r"'grow-diag-final', 'grow-diag-final-and'",
        "Use one of the listed heuristics.",
    ),
    m.Mistake(
        "unknown-posterior-combination", m.NAMES, "an unknown way to combine both directions' posteriors",
        lambda: combine_posteriors(torch.ones(2, 3), torch.ones(3, 2), "posterior-max"),
        ValueError, r"combine_posteriors: unknown method 'posterior-max'; allowed: 'posterior-mean', "
        r"'posterior-product'",
        "Use one of the listed combinations.",
    ),
    m.Mistake(
        "posterior-combination-shapes", m.NAMES, "combining two directions' posteriors of different sentence pairs",
        lambda: combine_posteriors(torch.ones(2, 3), torch.ones(2, 3)),
        ValueError, r"combine_posteriors: forward \(2, 3\) \(T, S\) needs backward \(S, T\) = \(3, 2\), got \(2, 3\)",
        "Pass the reverse model's matrix of the same pair, `(S, T)`: source words over target words.",
    ),
    m.Mistake(
        "bleu-count-mismatch", m.SIZES, "BLEU of a different number of hypotheses than references",
        lambda: bleu(["a b", "c"], ["a b"]),
        ValueError, r"bleu: 2 hypotheses but 1 references",
        "Give one hypothesis per reference, in the same order.",
    ),
    m.Mistake(
        "perplexity-no-tokens", m.SIZES, "perplexity over zero tokens",
        lambda: perplexity(-3.0, 0),
        ValueError, r"perplexity needs a positive token count, got 0",
        "Count the real target tokens (`target_mask.sum()`).",
    ),
    m.Mistake(
        "alignment-probs-shape", m.SIZES, "alignment probabilities of the wrong rank for link extraction",
        lambda: links_from_probs(torch.rand(2, 2, 3, 4)),
        ValueError, r"links_from_probs: probs must be \(T, S\) or \(B, T, S\), got shape \(2, 2, 3, 4\)",
        "Give (T, S) for one sentence or (B, T, S) for a batch.",
    ),
    m.Mistake(
        "figure-not-writable", m.WRITES, "a heatmap written where no folder can be made (a raw `OSError` from "
        "matplotlib)",
        lambda: alignment_heatmaps(
            {"prior": torch.full((1, 1, 2), 0.5)}, [0], [["a", "b"]], ["t"], m.work_file("b-file", "x\n") / "figs/a.png"
        ),
        WriteError, r"cannot write .*b-file/figs/a\.png: Not a directory \(errno 20\)",
        "Give a folder you can write to.",
    ),
    m.Mistake(
        "bleu-one-string", m.SIZES, "`bleu` given one string instead of a list of sentences (it scored each character "
        "as a sentence)",
        lambda: bleu("a dog", "a dog"),
        TypeError, r"bleu: hypotheses must be a list \(or other iterable\) of sentences, got one str 'a dog'",
        "Wrap a single sentence in a list.",
    ),
    m.Mistake(
        "perplexity-nan", m.SIZES, "`perplexity` of a NaN log-likelihood (it returned inf)",
        lambda: perplexity(float("nan"), 10),
        ValueError, r"perplexity: the summed log-likelihood is NaN",
        "Find the NaN upstream: a diverged model, or NaN inputs.",
    ),
]  # fmt: skip


test_mistake_gets_a_clear_error = m.mistake_test(CATALOGUE)
