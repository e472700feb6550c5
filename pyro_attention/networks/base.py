"""The interface between task networks and model/guide pairs.

A task network is deterministic: it turns a batch into an :class:`Encoded` record (the source values that
attention averages, the masks, the observed targets and the prior's attention scores) and it maps a context
vector to output logits.  It knows nothing of the random object; the pairs in :mod:`pyro_attention.models`
decide how the scores parameterise a distribution over alignments and what is combined at prediction.

Shapes: ``B`` examples, ``S`` source positions (regions or source tokens), ``T`` target positions (a QA
example has ``T = 1``), ``D`` value size, ``V`` output classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from pyro_attention.networks.kernels import observed_log_softmax


@dataclass
class Encoded:
    """What a task network exposes to a model/guide pair for one batch.

    :param values: ``(B, S, D)`` source representations that attention averages.
    :param source_mask: ``(B, S)`` bool, ``True`` at real source positions.
    :param target: ``(B, T)`` long, the observed output ids (padding holds any valid id).
    :param target_mask: ``(B, T)`` bool, ``True`` at real target positions.
    :param prior_scores: ``(B, T, S)`` unnormalised prior attention scores (not yet masked).
    :param state: network-specific query states used by :meth:`AttentionNetwork.output_logits`.
    """

    values: Tensor
    source_mask: Tensor
    target: Tensor
    target_mask: Tensor
    prior_scores: Tensor
    state: Any = None
    batch: Any = None

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(B, T, S)``."""
        return tuple(self.prior_scores.shape)  # type: ignore[return-value]


def mask_scores(scores: Tensor, source_mask: Tensor) -> Tensor:
    """Set scores of padded source positions to ``-inf`` (after any scaling, so gradients stay finite).

    ``scores`` is ``(..., B, T, S)``; ``source_mask`` is ``(B, S)``.
    """
    return scores.masked_fill(~source_mask.unsqueeze(-2), float("-inf"))


def gather_context(values: Tensor, index: Tensor) -> Tensor:
    """Pick the value vector of one source position per target position.

    :param values: ``(B, S, D)``.
    :param index: ``(..., B, T)`` long source positions (for example an enumerated alignment ``(S, 1, 1)``).
    :returns: ``(..., B, T, D)``.
    """
    batch_index = torch.arange(values.shape[0], device=values.device).unsqueeze(-1)
    return values[batch_index, index]


def expected_context(weights: Tensor, values: Tensor) -> Tensor:
    """``sum_s weights[..., b, t, s] * values[b, s]``: ``(..., B, T, S) x (B, S, D) -> (..., B, T, D)``."""
    return torch.einsum("...bts,bsd->...btd", weights, values)


class AttentionNetwork(nn.Module):
    """Base class of task networks.

    Subclasses implement :meth:`encode`, :meth:`output_logits` and :meth:`posterior_scores`.
    :meth:`aligned_log_likelihood` is the memory-conscious kernel used under enumeration: the
    log-probability of the *observed* target token for every source position, ``(B, T, S)``.
    """

    num_classes: int
    #: ``D``, the size of the source values (and so of every context vector).
    value_size: int
    #: Source positions processed at once by :meth:`aligned_log_likelihood` (``None``: all).
    chunk_size: int | None = None
    #: Bytes of output log-probabilities :meth:`aligned_log_likelihood` may keep for the backward pass (fused
    #: kernel only); chunks beyond it are recomputed there.
    keep_logits_bytes: int = 2**30

    def encode(self, batch: Any) -> Encoded:  # pragma: no cover - interface
        raise NotImplementedError

    def output_logits(self, enc: Encoded, context: Tensor) -> Tensor:  # pragma: no cover - interface
        """Map a context ``(..., B, T, D)`` to output logits ``(..., B, T, V)``."""
        raise NotImplementedError

    def posterior_scores(self, enc: Encoded) -> Tensor:  # pragma: no cover - interface
        """Inference-network scores ``(B, T, S)`` that may look at the observed targets."""
        raise NotImplementedError

    def aligned_logits(self, enc: Encoded) -> Tensor:
        """Output logits for every hard alignment, ``(S, B, T, V)`` (for prediction on small problems)."""
        S = enc.values.shape[1]
        index = torch.arange(S, device=enc.values.device).view(S, 1, 1)
        return self.output_logits(enc, gather_context(enc.values, index))

    def output_hidden(self, enc: Encoded, context: Tensor) -> Tensor | None:
        """The input ``(..., B, T, H)`` of the final linear layer :attr:`output_layer`, or ``None`` when the
        network does not expose it (then :meth:`aligned_log_likelihood` differentiates :meth:`output_logits`)."""
        return None

    #: The final ``nn.Linear`` of :meth:`output_logits`, ``output_logits = output_layer(output_hidden)``.
    output_layer: nn.Linear | None = None

    def aligned_hidden(self, enc: Encoded) -> Tensor | None:
        """:meth:`output_hidden` for every hard alignment, ``(S, B, T, H)`` (subclasses may compute it faster)."""
        S = enc.values.shape[1]
        index = torch.arange(S, device=enc.values.device).view(S, 1, 1)
        return self.output_hidden(enc, gather_context(enc.values, index))

    def aligned_log_likelihood(self, enc: Encoded) -> Tensor:
        """``log p(y_t | x, z_t = s)`` at the observed tokens, ``(B, T, S)``.

        Networks that expose :meth:`output_hidden` and :attr:`output_layer` use the fused kernel
        :func:`~pyro_attention.networks.kernels.observed_log_softmax`: the hidden layer is computed for all ``S``
        alignments, the ``V``-sized logits ``chunk_size * B * T`` rows at a time (all at once without
        ``chunk_size``); up to :attr:`keep_logits_bytes` of log-probabilities are kept for the backward pass,
        which recomputes the other chunks.  Otherwise, with
        ``chunk_size`` set, the ``S`` source positions are processed ``chunk_size`` at a time and, when
        gradients are needed, each chunk is recomputed in the backward pass (activation checkpointing), so at
        most ``chunk_size * B * T * V`` logits are alive at once instead of ``S * B * T * V``.
        """
        B, T, S = enc.shape
        if self.output_layer is not None and self._hidden_matches_logits():
            hidden = self.aligned_hidden(enc)
            if hidden is not None:  # (S, B, T, H)
                N = S * B * T
                rows = N if self.chunk_size is None else max(1, self.chunk_size) * B * T
                target = enc.target.expand(S, B, T).reshape(N)
                layer = self.output_layer
                h = hidden.reshape(N, -1)
                ll = observed_log_softmax(h, layer.weight, layer.bias, target, rows, self.keep_logits_bytes)
                return ll.view(S, B, T).permute(1, 2, 0)
        if self.chunk_size is None or self.chunk_size >= S:
            return self._observed_log_likelihood(enc, 0, S)
        chunk = max(1, self.chunk_size)
        pieces = []
        for start in range(0, S, chunk):
            stop = min(S, start + chunk)
            if torch.is_grad_enabled():
                pieces.append(checkpoint(self._observed_log_likelihood, enc, start, stop, use_reentrant=False))
            else:
                pieces.append(self._observed_log_likelihood(enc, start, stop))
        return torch.cat(pieces, dim=-1)

    def _hidden_matches_logits(self) -> bool:
        """Whether :meth:`output_hidden` is defined no higher in the class hierarchy than :meth:`output_logits`:
        a subclass that overrides only ``output_logits`` must not get its parent's fused layers."""
        return self._owns("output_hidden")

    def _owns(self, name: str) -> bool:
        """Whether method ``name`` is defined no higher in the class hierarchy than :meth:`output_logits` (so a
        fast path of the class that defines it computes the same function as ``output_logits``)."""

        def owner(attr: str) -> type:
            return next(k for k in type(self).__mro__ if attr in vars(k))

        return issubclass(owner(name), owner("output_logits"))

    def _observed_log_likelihood(self, enc: Encoded, start: int, stop: int) -> Tensor:
        """``log p(y_t | x, z_t = s)`` for ``s`` in ``[start, stop)``, ``(B, T, stop - start)``."""
        index = torch.arange(start, stop, device=enc.values.device).view(-1, 1, 1)
        logits = self.output_logits(enc, gather_context(enc.values, index))  # (s, B, T, V)
        picked = logits.gather(-1, enc.target.unsqueeze(-1).expand(logits.shape[:-1] + (1,))).squeeze(-1)
        return (picked - torch.logsumexp(logits, dim=-1)).permute(1, 2, 0)


class HeadNetwork(AttentionNetwork):
    """A task network whose output layer is an :class:`~pyro_attention.networks.output.OutputLayer` at ``self.head``,
    with the layer's per-position part :meth:`OutputLayer.query` kept in ``enc.state["query"]``.

    The output methods delegate to the head; :meth:`aligned_log_likelihood` uses the head's own kernel where it
    has one (the product of experts), else the fused or chunked path of :class:`AttentionNetwork`.
    """

    head: nn.Module

    def output_logits(self, enc: Encoded, context: Tensor) -> Tensor:
        return self.head.logits(enc.state["query"], context)

    def output_hidden(self, enc: Encoded, context: Tensor) -> Tensor | None:
        """The input of the final layer :attr:`output_layer` (``tanh(W [h; c] + b)`` for ``"tanh"``)."""
        return self.head.hidden(enc.state["query"], context)

    @property
    def output_layer(self) -> nn.Linear | None:
        return self.head.layer

    def aligned_log_likelihood(self, enc: Encoded) -> Tensor:
        """``log p(y_t | x, z_t = s)`` ``(B, T, S)``: the output layer's own kernel (``"product"``: one
        ``(T x V) (V x S)`` product per example), else the fused or chunked path of the base class."""
        own = self._owns("aligned_log_likelihood")
        table = self.head.aligned_log_likelihood(enc.state["query"], enc.values, enc.target) if own else None
        return super().aligned_log_likelihood(enc) if table is None else table


def rename_legacy_keys(module: nn.Module, renames: dict[str, str]) -> None:
    """Let ``module.load_state_dict`` read weights saved under older parameter names: a key whose name below the
    module starts with an old prefix (``"att_h."``) is loaded as the new one (``"score.att_h."``)."""

    def hook(state_dict: dict, prefix: str, *args: Any) -> None:
        for key in list(state_dict):
            if key.startswith(prefix):
                rest = key[len(prefix):]
                old = next((o for o in renames if rest.startswith(o)), None)
                if old is not None:
                    state_dict[prefix + renames[old] + rest[len(old):]] = state_dict.pop(key)

    module._register_load_state_dict_pre_hook(hook)
