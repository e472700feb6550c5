"""Alignment distributions of a trained pair: prior, exact posterior and guide, as ``(B, T, S)`` probabilities.

* ``"prior"`` -- :math:`p(z_t \\mid x)`: ``pair.attention_prior`` (the attention weights of a deterministic
  pair, the normalised marginals of structured attention, the mean weights of a Dirichlet prior, BAM's test-time
  mean weights);
* ``"posterior"`` -- the exact :math:`p(z_t \\mid x, y) \\propto p(z_t \\mid x)\\, p(y_t \\mid x, z_t)` by
  enumeration (categorical pairs; for the Gumbel pair, of its underlying categorical model ``pair.categorical()``),
  or from a pair's own ``posterior_probs(batch)`` (the segmentation chain's read position, by its dynamic
  programme);
* ``"guide"`` -- ``pair.guide_probs``: :math:`q(z_t \\mid x, y)`, or the normalised mean weights of a continuous
  guide (Dirichlet, Concrete, BAM's Weibull / lognormal), where the guide has weights over source positions (the
  Gaussian-context pair's guide draws a context vector, so it has none).

Padded source positions hold exactly zero in every array.  :func:`map_alignment` gives the exact MAP alignment
with Pyro's :func:`~pyro.infer.infer_discrete`.
"""

from __future__ import annotations

from typing import Any

import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import infer_discrete
from torch import Tensor

from pyro_attention.inference.evaluate import enumerated_log_joint
from pyro_attention.pair import MAX_PLATE_NESTING, AlignmentPair


def _probs(fn: Any) -> Tensor | None:
    if isinstance(fn, dist.Categorical):
        return fn.probs
    if isinstance(fn, dist.Dirichlet):
        return fn.mean
    return None


def _exact_posterior(pair: AlignmentPair, batch: Any) -> Tensor:
    joint, trace = enumerated_log_joint(pair, batch)  # (S, B, T)
    support = trace.nodes["align"]["value"].reshape(-1)
    if not torch.equal(support, torch.arange(len(support), device=support.device)):
        raise RuntimeError("unexpected enumeration support for site 'align'")
    return joint.softmax(0).permute(1, 2, 0)


@torch.no_grad()
def alignment_posterior(pair: AlignmentPair, batch: Any) -> dict[str, Tensor]:
    """Prior, exact posterior and guide alignment probabilities (those the pair has), each ``(B, T, S)``."""
    enc = pair.network.encode(batch)
    out = {"prior": pair.attention_prior(enc)}
    if pair.latent == "categorical":
        out["posterior"] = _exact_posterior(pair, batch)
    elif hasattr(pair, "categorical"):
        out["posterior"] = _exact_posterior(pair.categorical(), batch)
    elif hasattr(pair, "posterior_probs"):
        out["posterior"] = pair.posterior_probs(batch)
    guide = pair.guide_probs(enc)
    if guide is None:  # a user's pair without guide_probs: read the guide's distribution if it has weights
        site = poutine.trace(pair.guide).get_trace(batch).nodes.get("align")
        guide = None if site is None else _probs(site["fn"])
    if guide is not None:
        out["guide"] = guide
    mask = enc.source_mask.unsqueeze(-2)
    return {k: v * mask for k, v in out.items()}


def entropy(probs: Tensor) -> Tensor:
    """Entropy in nats over the last dim, with ``0 log 0 = 0``."""
    return -(probs * probs.clamp(min=torch.finfo(probs.dtype).tiny).log()).sum(-1)


@torch.no_grad()
def map_alignment(pair: AlignmentPair, batch: Any) -> Tensor:
    """The exact MAP alignment ``argmax_z p(z | x, y)`` per token, ``(B, T)``, via ``infer_discrete``."""
    if pair.latent != "categorical":
        raise ValueError(f"{type(pair).__name__} has no categorical alignment to decode")
    model = infer_discrete(pair.model, first_available_dim=-1 - MAX_PLATE_NESTING, temperature=0)
    return poutine.trace(model).get_trace(batch).nodes["align"]["value"]
