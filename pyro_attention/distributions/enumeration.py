r"""The enumeration kernel: the output layer under every hard alignment, read at the observed tokens.

When the alignment ``z_t`` is enumerated it takes every source position ``s``, and the observation site needs

.. math::

    \ell[b, t, s] = \log p(y_t \mid x, z_t = s) = \log \mathrm{softmax}\big(f(h_t, x_s)\big)[y_t],

a ``(B, T, S)`` table (:func:`observed_table`; :class:`~pyro_attention.distributions.AlignedCategorical` reads its
log-probabilities from it).  Computed the straightforward way it keeps ``S B T V`` logits and their softmax alive
for the backward pass (3.2 GB each at ``S = T = 50``, ``B = 32``, ``V = 10k``).  The kernel computes it from a task
network's output layer alone -- the public methods of
:class:`~pyro_attention.networks.base.AttentionNetwork` -- taking the fastest path the network offers:

1. ``output_experts(enc)`` -- the logits split as ``u_t + v_s`` (a product of experts): the normalisers of every
   ``(t, s)`` are one ``(T x V)(V x S)`` product per example
   (:func:`~pyro_attention.distributions.kernels.product_log_normalizer`); with ``u == 0`` (the lexical expert) one
   ``V``-way normaliser per source value, or per distinct source word where the network gives ``rows``.
2. ``output_hidden`` and ``output_layer`` -- the final linear layer and its input: the hidden layer for all ``S``
   source values (``output_hidden_at_values(enc)`` where the network computes it faster, else on gathered
   contexts), then the fused observed-token log-softmax
   (:func:`~pyro_attention.distributions.kernels.observed_log_softmax`) ``chunk_size * B * T`` rows of logits at a
   time, up to ``keep_bytes`` of log-probabilities kept for the backward pass, the other chunks recomputed there;
   only the pairs of a real target token and a real source position are computed (a padded pair's entry is 0 on
   every path, and no pair reads it).
3. ``output_logits`` alone -- :func:`gathered_table`: the context ``x_s`` of every source position gathered, the
   full logits, ``log_softmax`` at the observed token; ``chunk_size`` source positions at a time, each chunk
   recomputed in the backward pass (activation checkpointing), so at most ``chunk_size * B * T * V`` logits are
   alive.

A fast path is taken only where the network defines it no higher in its class hierarchy than ``output_logits``
(:func:`follows_output_logits`): a subclass that overrides only ``output_logits`` does not get its parent's layers.
Every path gives the same values and gradients (tested against each other and against brute force).

**Memory settings** are the kernel's arguments: ``chunk_size`` (source positions per chunk; ``None``: all at once)
and ``keep_bytes`` (default :data:`KEEP_BYTES`).  The pairs pass the network's
:attr:`~pyro_attention.networks.base.AttentionNetwork.chunk_size` and
:attr:`~pyro_attention.networks.base.AttentionNetwork.keep_bytes`, plain attributes the network carries for them
(``Seq2Seq(chunk_size=..., keep_bytes=...)``, ``TranslationConfig.chunk_size`` / ``keep_gib``, ``--chunk-size`` /
``--keep-gib``) and never reads itself.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from pyro_attention.distributions.kernels import observed_log_softmax, product_log_normalizer
from pyro_attention.networks.base import AttentionNetwork, Encoded, ExpertLogits, gather_context

__all__ = ["KEEP_BYTES", "experts_table", "follows_output_logits", "gathered_table", "logits_at_values",
           "observed_table", "padded_positions"]

#: Bytes of output log-probabilities the fused path may keep for the backward pass by default (1 GiB).
KEEP_BYTES = 2**30


def observed_table(
    network: AttentionNetwork, enc: Encoded, chunk_size: int | None = None, keep_bytes: int | None = None
) -> Tensor:
    """``log p(y_t | x, z_t = s)`` at the observed tokens ``enc.target``, ``(B, T, S)``, by the fastest path the
    network offers (the module docstring); 0 where ``t`` or ``s`` is padding (the fused path does not compute
    those: about a quarter of a length-bucketed IWSLT14 batch's pairs, ``benchmarks/studies/padding_skip.py``).

    :param chunk_size: source positions per chunk (fused path: ``chunk_size * B * T`` rows of logits at once;
        generic path: ``chunk_size`` positions per checkpointed chunk); ``None``: all at once.
    :param keep_bytes: bytes of log-probabilities the fused path may keep for the backward pass (``None``:
        :data:`KEEP_BYTES`); the other chunks' logits are recomputed there.
    """
    padding = padded_positions(enc)
    experts = network.output_experts(enc) if follows_output_logits(network, "output_experts") else None
    if experts is not None:
        return experts_table(experts, enc.target).masked_fill(padding, 0.0)
    if network.output_layer is not None and follows_output_logits(network, "output_hidden"):
        hidden = _hidden_at_values(network, enc)
        if hidden is not None:  # (S, B, T, H)
            B, T, S = enc.shape
            N = S * B * T
            rows = N if chunk_size is None else max(1, chunk_size) * B * T
            target = enc.target.expand(S, B, T).reshape(N)
            hidden = hidden.reshape(N, -1)
            real = (~padding).permute(2, 0, 1).reshape(N)  # (S, B, T) order, as hidden's rows
            index = None if bool(real.all()) else real.nonzero().squeeze(-1)
            if index is not None:  # the output layer at real (target, source) pairs only
                hidden, target = hidden.index_select(0, index), target.index_select(0, index)
            layer = network.output_layer
            keep = KEEP_BYTES if keep_bytes is None else keep_bytes
            ll = observed_log_softmax(hidden, layer.weight, layer.bias, target, rows, keep)
            if index is not None:
                ll = ll.new_zeros(N).index_copy(0, index, ll)
            return ll.view(S, B, T).permute(1, 2, 0)
    return gathered_table(network, enc, chunk_size).masked_fill(padding, 0.0)


def padded_positions(enc: Encoded) -> Tensor:
    """``(B, T, S)`` boolean: ``True`` where the target position ``t`` or the source position ``s`` is padding (the
    positions :func:`observed_table` gives 0)."""
    return ~(enc.target_mask.unsqueeze(-1) & enc.source_mask.unsqueeze(-2))


def gathered_table(network: AttentionNetwork, enc: Encoded, chunk_size: int | None = None) -> Tensor:
    """:func:`observed_table` by ``output_logits`` alone (the generic path): gathered contexts, full logits,
    ``chunk_size`` source positions at a time, each chunk recomputed in the backward pass when gradients are on."""
    S = enc.shape[2]
    if chunk_size is None or chunk_size >= S:
        return _gathered_chunk(network, enc, 0, S)
    chunk = max(1, chunk_size)
    pieces = []
    for start in range(0, S, chunk):
        stop = min(S, start + chunk)
        if torch.is_grad_enabled():
            pieces.append(checkpoint(_gathered_chunk, network, enc, start, stop, use_reentrant=False))
        else:
            pieces.append(_gathered_chunk(network, enc, start, stop))
    return torch.cat(pieces, dim=-1)


def logits_at_values(network: AttentionNetwork, enc: Encoded) -> Tensor:
    """The output logits with every source value as the context, ``(S, B, T, V)`` (all at once: for prediction on
    small problems)."""
    S = enc.values.shape[1]
    index = torch.arange(S, device=enc.values.device).view(S, 1, 1)
    return network.output_logits(enc, gather_context(enc.values, index))


def follows_output_logits(network: AttentionNetwork, name: str) -> bool:
    """Whether method ``name`` of ``network`` is defined no higher in its class hierarchy than ``output_logits``
    (so that the class defining ``name`` defined it for the same function as ``output_logits``)."""

    def owner(attr: str) -> type:
        return next(k for k in type(network).__mro__ if attr in vars(k))

    return issubclass(owner(name), owner("output_logits"))


def _hidden_at_values(network: AttentionNetwork, enc: Encoded) -> Tensor | None:
    """``output_hidden`` at every source value, ``(S, B, T, H)``: the network's own fast path, else on gathered
    contexts (``None`` where the network does not expose its hidden layer)."""
    if follows_output_logits(network, "output_hidden_at_values"):
        hidden = network.output_hidden_at_values(enc)
        if hidden is not None:
            return hidden
    S = enc.values.shape[1]
    index = torch.arange(S, device=enc.values.device).view(S, 1, 1)
    return network.output_hidden(enc, gather_context(enc.values, index))


def _gathered_chunk(network: AttentionNetwork, enc: Encoded, start: int, stop: int) -> Tensor:
    """``log p(y_t | x, z_t = s)`` for ``s`` in ``[start, stop)``, ``(B, T, stop - start)``."""
    index = torch.arange(start, stop, device=enc.values.device).view(-1, 1, 1)
    logits = network.output_logits(enc, gather_context(enc.values, index))  # (s, B, T, V)
    picked = logits.gather(-1, enc.target.unsqueeze(-1).expand(logits.shape[:-1] + (1,))).squeeze(-1)
    return (picked - torch.logsumexp(logits, dim=-1)).permute(1, 2, 0)


def experts_table(experts: ExpertLogits, target: Tensor) -> Tensor:
    """``u_t[y_t] + v_s[y_t] - log sum_y exp(u_t[y] + v_s[y])``, ``(B, T, S)``, for observed ``target`` ``(B, T)``."""
    B, T = target.shape
    if experts.u is None:  # the lexical expert: log softmax(v_s)[y_t], one normaliser per row of v
        log_t = torch.log_softmax(experts.v, -1)
        if experts.rows is not None:  # (U, V): one row per distinct source item
            return log_t[experts.rows.unsqueeze(1), target.unsqueeze(2)]
        S = log_t.shape[1]
        return log_t.gather(-1, target.unsqueeze(1).expand(B, S, T)).transpose(1, 2)
    v = experts.v if experts.rows is None else experts.v[experts.rows]  # (B, S, V)
    u = experts.u.expand(B, T, experts.u.shape[-1])
    S = v.shape[1]
    picked_u = u.gather(-1, target.unsqueeze(-1))  # (B, T, 1)
    picked_v = v.gather(-1, target.unsqueeze(1).expand(B, S, T)).transpose(1, 2)  # (B, T, S)
    return picked_u + picked_v - product_log_normalizer(u, v)
