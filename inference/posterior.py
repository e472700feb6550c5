"""Alignment distributions of a trained pair: prior, exact posterior and guide, as ``(B, T, S)`` probabilities.

* ``"prior"`` -- :math:`p(z_t \\mid x)` (the attention weights of a deterministic pair; the mean weights of a
  Dirichlet prior);
* ``"posterior"`` -- the exact :math:`p(z_t \\mid x, y) \\propto p(z_t \\mid x)\\, p(y_t \\mid x, z_t)` by
  enumeration (categorical pairs only; Bayes' rule on the enumerated joint);
* ``"guide"`` -- :math:`q(z_t \\mid x, y)` (the mean weights for a Dirichlet guide) where the pair has one.

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


def _probs(fn: Any) -> Tensor:
    if isinstance(fn, dist.Categorical):
        return fn.probs
    return fn.mean


@torch.no_grad()
def alignment_posterior(pair: AlignmentPair, batch: Any) -> dict[str, Tensor]:
    """Prior, exact posterior (categorical pairs) and guide alignment probabilities, each ``(B, T, S)``."""
    enc = pair.network.encode(batch)
    out = {"prior": pair.attention_prior(enc)}
    if pair.latent == "categorical":
        joint, trace = enumerated_log_joint(pair, batch)  # (S, B, T)
        support = trace.nodes["align"]["value"].reshape(-1)
        if not torch.equal(support, torch.arange(len(support), device=support.device)):
            raise RuntimeError("unexpected enumeration support for site 'align'")
        out["posterior"] = joint.softmax(0).permute(1, 2, 0)
    guide_trace = poutine.trace(pair.guide).get_trace(batch)
    if "align" in guide_trace.nodes:
        out["guide"] = _probs(guide_trace.nodes["align"]["fn"])
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
