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
with Pyro's :func:`~pyro.infer.infer_discrete`.
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


@torch.no_grad()
def map_alignment(pair: AlignmentPair, batch: Any) -> Tensor:
    """The exact MAP alignment ``argmax_z p(z | x, y)`` per token, ``(B, T)``, via ``infer_discrete``:
    ``pair.map_alignment(batch)`` (pairs without a categorical alignment refuse)."""
    return pair.map_alignment(batch)
