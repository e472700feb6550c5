r"""Hand-written pure-torch losses of the categorical pairs, for ``benchmarks/step_time.py``.

Each function takes a task network (:class:`~pyro_attention.networks.RegionQA` or any
:class:`~pyro_attention.networks.AttentionNetwork`) and a batch, and returns the scalar loss whose gradient
equals the gradient Pyro computes for the pair's ELBO (``pair.elbo().loss_and_grads(pair.model, pair.guide,
batch)``).  They call the network's own methods (``encode``, ``output_logits``, ``posterior_scores``), the
enumeration kernel (``observed_table``) and the same helpers (``mask_scores``, ``expected_context``,
``gather_context``), so the
tensor work is the pair's; what differs is only the Pyro machinery around it.  The one structural
difference: a hand-written step encodes the batch **once**, while Pyro runs ``encode`` in the model and again
in the guide (pairs with a non-empty guide).

With :math:`\ell_s = \log p(y_t \mid x, z_t = s)` (the observed-token table, masked at padded targets),
:math:`p` the prior and :math:`q` the inference network (both zero at padded sources):

* soft: :math:`-\sum_t \log p(y_t \mid x, c_t = \mathbb{E}_p[x_z])`;
* marginal: :math:`-\sum_t \log \sum_s p(s)\, e^{\ell_s}`;
* hard enum: :math:`-\sum_t \sum_s p(s)\, \ell_s` (Pyro's enumerated guide term
  :math:`\sum_s q(s)[\log p(s) - \log q(s)]` with ``q = p`` is identically 0, in value and gradient);
* VA enum: :math:`-\sum_t \sum_s q(s)\,[\ell_s + \log p(s) - \log q(s)]
  = -(\mathbb{E}_q[\ell] - \mathrm{KL}(q \| p))`;
* hard / VA sample: ``ReinforceKL_ELBO``'s surrogate for one draw ``z ~ q`` per token with the
  soft-attention log-likelihood ``b`` (detached) as ``baseline_value`` and the KL in closed form:

  .. math::

      -\Big[\sum_t \ell_{z_t} - \mathrm{KL}(q_t \| p_t)
             + \log q(z_t)\, \mathrm{sg}\big(\ell_{z_t} - b_t\big)\Big].

  For hard attention ``q = p`` (the KL is 0 in value and gradient).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.distributions import Categorical

from pyro_attention.distributions.enumeration import logits_at_values, observed_table
from pyro_attention.networks.base import (
    AttentionNetwork,
    Encoded,
    expected_context,
    gather_context,
    mask_scores,
)

__all__ = [
    "hard_enum_loss",
    "hard_sample_loss",
    "marginal_loss",
    "soft_loss",
    "straightforward_marginal_loss",
    "straightforward_table",
    "straightforward_va_enum_loss",
    "va_enum_loss",
    "va_sample_loss",
]


# -- pieces --------------------------------------------------------------------------------------------------
def prior_logits(enc: Encoded) -> Tensor:
    """Prior attention logits ``(B, T, S)``, ``-inf`` at padded sources."""
    return mask_scores(enc.prior_scores, enc.source_mask)


def posterior_logits(net: AttentionNetwork, enc: Encoded) -> Tensor:
    """Inference-network logits ``(B, T, S)``: ``-inf`` at padded sources, the prior's at padded targets."""
    scores = torch.where(enc.target_mask.unsqueeze(-1), net.posterior_scores(enc), enc.prior_scores)
    return mask_scores(scores, enc.source_mask)


def token_log_likelihood(logits: Tensor, enc: Encoded) -> Tensor:
    """``log softmax(logits)`` at the observed targets, ``(..., B, T)``, zero at padded targets."""
    picked = logits.gather(-1, enc.target.unsqueeze(-1).expand(logits.shape[:-1] + (1,))).squeeze(-1)
    return (picked - torch.logsumexp(logits, -1)) * enc.target_mask


def soft_log_likelihood(net: AttentionNetwork, enc: Encoded) -> Tensor:
    """``log p(y_t | x, c_t = E_p[x_z])`` per token ``(B, T)`` (soft attention with the prior's weights)."""
    weights = torch.softmax(prior_logits(enc), dim=-1)
    return token_log_likelihood(net.output_logits(enc, expected_context(weights, enc.values)), enc)


def aligned_table(net: AttentionNetwork, enc: Encoded) -> Tensor:
    """``log p(y_t | x, z_t = s)`` ``(B, T, S)``, zero at padded targets."""
    return observed_table(net, enc, net.chunk_size) * enc.target_mask.unsqueeze(-1)


def straightforward_table(net: AttentionNetwork, enc: Encoded) -> Tensor:
    """The same table as :func:`aligned_table`, computed the straightforward way: all ``(S, B, T, V)`` logits
    at once (``logits_at_values``), ``log_softmax`` and ``gather``; autograd keeps the logits and their
    softmax for the backward pass.  The reference the memory-bounded kernel is measured against."""
    logits = logits_at_values(net, enc)  # (S, B, T, V)
    index = enc.target.unsqueeze(-1).expand(logits.shape[:-1] + (1,))
    table = torch.log_softmax(logits, dim=-1).gather(-1, index).squeeze(-1).permute(1, 2, 0)
    return table * enc.target_mask.unsqueeze(-1)


def _expected(weights_log: Tensor, cost: Tensor, source_mask: Tensor) -> Tensor:
    """``sum exp(weights_log) * cost`` over real sources (padded terms are exactly 0, as in Pyro's Dice)."""
    return (weights_log.exp() * torch.where(source_mask.unsqueeze(-2), cost, 0.0)).sum()


def _reinforce(net: AttentionNetwork, enc: Encoded, prior: Tensor, guide: Tensor | None) -> Tensor:
    """``ReinforceKL_ELBO``'s surrogate loss for one draw per token from ``guide`` (``None``: the prior)."""
    baseline = soft_log_likelihood(net, enc).detach()
    p = Categorical(logits=prior)
    q = p if guide is None else Categorical(logits=guide)
    z = q.sample()  # (B, T)
    ll = token_log_likelihood(net.output_logits(enc, gather_context(enc.values, z)), enc)
    kl = (q.probs * torch.where(q.probs > 0, q.logits - p.logits, 0.0)).sum(-1)  # 0 at padded sources
    surrogate = ll.sum() - kl.sum() + (q.log_prob(z) * (ll - baseline).detach()).sum()
    return -surrogate


# -- one function per pair -----------------------------------------------------------------------------------
def soft_loss(net: AttentionNetwork, batch: Any) -> Tensor:
    """:class:`SoftAttention` (``Trace_ELBO``, empty guide): ``-sum_t log p(y_t | x, E_p[z_t])``."""
    enc = net.encode(batch)
    return -soft_log_likelihood(net, enc).sum()


def marginal_loss(net: AttentionNetwork, batch: Any, table: Any = aligned_table) -> Tensor:
    """:class:`MarginalLikelihood` (``TraceEnum_ELBO``, empty guide): ``-sum_t log sum_s p(s) p(y_t | s)``."""
    enc = net.encode(batch)
    log_prior = torch.log_softmax(prior_logits(enc), dim=-1)
    return -(torch.logsumexp(log_prior + table(net, enc), dim=-1) * enc.target_mask).sum()


def hard_enum_loss(net: AttentionNetwork, batch: Any) -> Tensor:
    """``HardAttention("enum")`` (``TraceEnum_ELBO``, enumerated prior guide): ``-sum_t sum_s p(s) l_s``."""
    enc = net.encode(batch)
    log_prior = torch.log_softmax(prior_logits(enc), dim=-1)
    return -_expected(log_prior, aligned_table(net, enc), enc.source_mask)


def va_enum_loss(net: AttentionNetwork, batch: Any, table: Any = aligned_table) -> Tensor:
    """``VariationalAttention("enum")``: ``-sum_t sum_s q(s) [l_s + log p(s) - log q(s)]``."""
    enc = net.encode(batch)
    log_prior = torch.log_softmax(prior_logits(enc), dim=-1)
    log_q = torch.log_softmax(posterior_logits(net, enc), dim=-1)
    return -_expected(log_q, table(net, enc) + log_prior - log_q, enc.source_mask)


def straightforward_marginal_loss(net: AttentionNetwork, batch: Any) -> Tensor:
    """:func:`marginal_loss` with the :func:`straightforward_table` (all ``S * B * T * V`` logits alive)."""
    return marginal_loss(net, batch, straightforward_table)


def straightforward_va_enum_loss(net: AttentionNetwork, batch: Any) -> Tensor:
    """:func:`va_enum_loss` with the :func:`straightforward_table`."""
    return va_enum_loss(net, batch, straightforward_table)


def hard_sample_loss(net: AttentionNetwork, batch: Any) -> Tensor:
    """``HardAttention("sample")`` (``ReinforceKL_ELBO``): REINFORCE, ``z ~ p``, soft-attention baseline."""
    enc = net.encode(batch)
    return _reinforce(net, enc, prior_logits(enc), None)


def va_sample_loss(net: AttentionNetwork, batch: Any) -> Tensor:
    """``VariationalAttention("sample")`` (``ReinforceKL_ELBO``): REINFORCE with ``z ~ q``, analytic KL."""
    enc = net.encode(batch)
    return _reinforce(net, enc, prior_logits(enc), posterior_logits(net, enc))
