"""Translation metrics: perplexity, prior entropy and BLEU (sacreBLEU on detokenised text).

BLEU follows the usual protocol: hypotheses are undone from BPE (``@@ ``), Moses-unescaped and detokenised with
``sacremoses``, then scored by ``sacrebleu`` against the *raw* references; the returned signature says how
(e.g. ``nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0``).  Use ``lowercase=True`` when the model was
trained on lower-cased text and the references are cased.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pyro_attention.checks import count, texts


@dataclass
class BleuResult:
    """A corpus BLEU score and the sacreBLEU signature that says how it was computed."""

    score: float
    signature: str
    text: str


def perplexity(total_log_likelihood: float, num_tokens: int) -> float:
    """``exp(-sum log p / tokens)``; raises for an empty count and for a NaN sum (``inf`` for a sum of ``-inf``: a
    token the model gives probability 0)."""
    count(num_tokens, "perplexity: num_tokens")
    if math.isnan(total_log_likelihood):
        raise ValueError("perplexity: the summed log-likelihood is NaN (a diverged model, or NaN inputs upstream)")
    if num_tokens <= 0:
        raise ValueError(f"perplexity needs a positive token count, got {num_tokens}")
    nll = -total_log_likelihood / num_tokens
    return math.exp(nll) if nll < math.log(sys.float_info.max) else math.inf  # a diverged model: inf, no OverflowError


def prior_entropy(prior: Tensor, target_mask: Tensor) -> tuple[float, int]:
    """Sum over real target tokens of the entropy (nats) of ``p(z_t | x, y_<t)`` ``(B, T, S)``, and the count."""
    ent = -(prior * prior.clamp(min=torch.finfo(prior.dtype).tiny).log()).sum(-1)
    return float((ent * target_mask).sum()), int(target_mask.sum())


def detokenize(tokens: Sequence[str], lang: str = "en") -> str:
    """Undo BPE and Moses escapes, then Moses-detokenise (``sacremoses``)."""
    from sacremoses import MosesDetokenizer

    from pyro_attention.data.text import undo_bpe, unescape_moses

    text = unescape_moses(undo_bpe(" ".join(texts(tokens, "detokenize: tokens", "one token"))))
    return MosesDetokenizer(lang=lang).detokenize(text.split())


def bleu(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False, tokenize: str = "13a"
         ) -> BleuResult:
    """Corpus BLEU of detokenised ``hypotheses`` against raw ``references`` (one reference per segment)."""
    import sacrebleu

    hypotheses, references = texts(hypotheses, "bleu: hypotheses"), texts(references, "bleu: references")
    if len(hypotheses) != len(references):
        raise ValueError(f"bleu: {len(hypotheses)} hypotheses but {len(references)} references")
    metric = sacrebleu.metrics.BLEU(lowercase=lowercase, tokenize=tokenize)
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return BleuResult(result.score, str(metric.get_signature()), str(result))
