"""``KL(Categorical || Categorical)`` that stays differentiable with ``-inf`` logits (padded positions).

torch's registered KL computes ``p.probs * (p.logits - q.logits)`` and then overwrites the entries where
``p.probs == 0``; with ``-inf`` logits on both sides the difference is ``nan`` there, and its gradient
(``0 * nan``) poisons every parameter.  This version masks the difference *before* the product, so padded
positions contribute exactly zero to the value and to the gradient.  It is registered for Pyro's
:class:`pyro.distributions.Categorical` (more specific than torch's class, so it takes precedence for Pyro
distributions and leaves torch's own untouched); values are identical to torch's wherever torch's are finite.
Support is read from the logits, not the probabilities: in float32 a probability underflows to 0 once its
logit is ~100 below the largest, and torch then returns ``inf`` for a finite KL (e.g. logits ``[0, -200]``
against ``[-200, 0]``: the KL is 200).  Here ``inf`` means a real ``-inf`` logit of ``q`` where ``p``'s is finite.
"""

from __future__ import annotations

import torch
from pyro.distributions import Categorical
from torch import Tensor
from torch.distributions.kl import register_kl


@register_kl(Categorical, Categorical)
def kl_categorical_categorical(p: Categorical, q: Categorical) -> Tensor:
    """``sum_k p_k (log p_k - log q_k)``; ``0`` where ``p_k = 0``, ``inf`` where ``q_k = 0 < p_k`` (by logits)."""
    support = p.logits > float("-inf")  # p_k > 0 (p.probs may underflow to 0 while the logit is finite)
    impossible = support & (q.logits == float("-inf"))
    diff = torch.where(support & ~impossible, p.logits - q.logits, torch.zeros_like(p.logits))
    kl = (p.probs * diff).sum(-1)
    return torch.where(impossible.any(-1), torch.full_like(kl, float("inf")), kl)
