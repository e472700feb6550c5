"""Alignment distributions of a trained pair: prior, exact posterior and guide, as ``(B, T, S)`` probabilities.

* ``"prior"`` -- :math:`p(z_t \\mid x)`: ``pair.attention_prior`` (the attention weights of a deterministic
  pair, the normalised marginals of structured attention, the mean weights of a Dirichlet prior, BAM's test-time
  mean weights);
* ``"posterior"`` -- ``pair.posterior_probs(batch)``: the exact :math:`p(z_t \\mid x, y) \\propto p(z_t \\mid x)\\,
  p(y_t \\mid x, z_t)` by enumeration (categorical pairs; for the Gumbel pair, of its underlying categorical model
  ``pair.categorical()``), or the segmentation chain's read position by its dynamic programme;
* ``"guide"`` -- ``pair.guide_probs``: :math:`q(z_t \\mid x, y)`, or the normalised mean weights of a continuous
  guide (Dirichlet, Concrete, BAM's Weibull / lognormal), where the guide has weights over source positions (the
  Gaussian-context pair's guide draws a context vector, so it has none).

Padded source positions hold exactly zero in every array.  :func:`map_alignment` gives the exact MAP alignment
with Pyro's :func:`~pyro.infer.infer_discrete`; :func:`entropy_sums` sums the three distributions' entropies and the
guide's exact ``KL(q || p(z | x, y))`` over the real target tokens (what training curves record).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyro_attention.pair import AlignmentPair


@torch.no_grad()
def alignment_posterior(pair: AlignmentPair, batch: Any) -> dict[str, Tensor]:
    """Prior, exact posterior and guide alignment probabilities (those the pair has), each ``(B, T, S)``:
    ``pair.alignment_posterior(batch)``."""
    return pair.alignment_posterior(batch)


def entropy(probs: Tensor) -> Tensor:
    """Entropy in nats over the last dim, with ``0 log 0 = 0``."""
    return -(probs * probs.clamp(min=torch.finfo(probs.dtype).tiny).log()).sum(-1)


def entropy_sums(pair: AlignmentPair, batch: Any, target_mask: Tensor) -> dict[str, float]:
    """Sums over the real target tokens (``target_mask`` ``(B, T)``) of the entropy in nats of every distribution
    :func:`alignment_posterior` gives (keys ``"prior"``, ``"posterior"``, ``"guide"``, those the pair has) and,
    where the guide and the exact posterior are over the same discrete alignment, of ``KL(q || p(z | x, y))``
    (key ``"guide_kl"``: per token, ``log p(y_t | ...) - ELBO_t``, how far the guide is from the posterior).
    Divide by ``target_mask.sum()`` for means per token."""
    probs = alignment_posterior(pair, batch)
    mask = target_mask.to(probs["prior"].dtype)
    sums = {key: float((entropy(value) * mask).sum()) for key, value in probs.items()}
    kl = pair.guide_kl(probs)
    if kl is not None:
        sums["guide_kl"] = float((kl * mask).sum())
    return sums


@torch.no_grad()
def map_alignment(pair: AlignmentPair, batch: Any) -> Tensor:
    """The exact MAP alignment ``argmax_z p(z | x, y)`` per token, ``(B, T)``, via ``infer_discrete``:
    ``pair.map_alignment(batch)`` (pairs without a categorical alignment refuse)."""
    return pair.map_alignment(batch)
