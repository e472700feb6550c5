"""Attention scores ``a_{t,s} = score(h_t, x_s)``: the prior's unnormalised logits over source positions.

* :class:`MLPScore` -- ``w^T tanh(W_h h_t + W_x x_s)`` (Bahdanau et al. 2015; the paper's);
* :class:`GeneralScore` -- ``h_t^T W_a x_s`` (Luong et al. 2015, "general"; OpenNMT-py's default);
* :class:`DotScore` -- ``h_t^T x_s`` (Luong's "dot"; needs the decoder size to equal the value size);
* :class:`ScaledDotScore` -- ``(W_q h_t)^T (W_k x_s) / sqrt(A)``: one head of a Transformer's scaled dot-product
  attention (Vaswani et al. 2017), :class:`~pyro_attention.networks.TransformerSeq2Seq`'s default.

Each precomputes what depends on the source only (:meth:`AttentionScore.keys`, once per sentence) and scores
one decoder step against it (:meth:`AttentionScore.scores`) or every target position at once
(:meth:`AttentionScore.table`, for a decoder whose states are computed in parallel).  A network takes the class
(``Seq2Seq(attention=GeneralScore)``); :data:`ATTENTION_SCORES` maps the names of configs and the command line
(``--attention-type``) to the classes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class AttentionScore(nn.Module):
    """Base class: ``keys(values)`` once per source, ``scores(h, keys)`` per decoder step."""

    name: str = ""

    def keys(self, values: Tensor) -> Tensor:  # pragma: no cover - interface
        """``(B, S, D)`` source values -> ``(B, S, K)`` keys."""
        raise NotImplementedError

    def scores(self, h: Tensor, keys: Tensor) -> Tensor:  # pragma: no cover - interface
        """Decoder states ``(N, H)`` and keys ``(N, S, K)`` -> unmasked scores ``(N, S)``."""
        raise NotImplementedError

    def table(self, h: Tensor, keys: Tensor) -> Tensor:
        """Decoder states ``(B, T, H)`` and keys ``(B, S, K)`` -> unmasked scores ``(B, T, S)``: :meth:`scores` at
        every target position (by default on the keys repeated per position; the scores here do better)."""
        B, T, _ = h.shape
        return self.scores(h.flatten(0, 1), keys.repeat_interleave(T, dim=0)).view(B, T, -1)


class MLPScore(AttentionScore):
    """``a_{t,s} = w^T tanh(W_h h_t + b + W_x x_s)``; parameters ``att_h``, ``att_x``, ``att_v``."""

    name = "mlp"

    def __init__(self, query_size: int, value_size: int, attention_size: int) -> None:
        super().__init__()
        self.att_h = nn.Linear(query_size, attention_size)
        self.att_x = nn.Linear(value_size, attention_size, bias=False)
        self.att_v = nn.Linear(attention_size, 1, bias=False)

    def keys(self, values: Tensor) -> Tensor:
        return self.att_x(values)

    def scores(self, h: Tensor, keys: Tensor) -> Tensor:
        return self.att_v(torch.tanh(self.att_h(h).unsqueeze(1) + keys)).squeeze(-1)

    def table(self, h: Tensor, keys: Tensor) -> Tensor:
        return self.att_v(torch.tanh(self.att_h(h).unsqueeze(2) + keys.unsqueeze(1))).squeeze(-1)


class DotProductScore(AttentionScore):
    """Base class of the scores that are a dot product ``a_{t,s} = query(h_t)^T k_s`` with precomputed keys: one
    batched product a step, one ``einsum`` for every target position at once."""

    def query(self, h: Tensor) -> Tensor:
        """What of the decoder states ``(..., H)`` meets the keys (the states themselves by default)."""
        return h

    def scores(self, h: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(keys, self.query(h).unsqueeze(-1)).squeeze(-1)

    def table(self, h: Tensor, keys: Tensor) -> Tensor:
        return torch.einsum("btk,bsk->bts", self.query(h), keys)


class GeneralScore(DotProductScore):
    """``a_{t,s} = h_t^T W_a x_s``; the keys ``W_a x_s`` are precomputed, a step is one batched dot product."""

    name = "general"

    def __init__(self, query_size: int, value_size: int, attention_size: int | None = None) -> None:
        super().__init__()
        self.att_w = nn.Linear(value_size, query_size, bias=False)

    def keys(self, values: Tensor) -> Tensor:
        return self.att_w(values)


class DotScore(DotProductScore):
    """``a_{t,s} = h_t^T x_s`` (no parameters)."""

    name = "dot"

    def __init__(self, query_size: int, value_size: int, attention_size: int | None = None) -> None:
        super().__init__()
        if query_size != value_size:
            raise ValueError(
                f"attention 'dot' needs the decoder size to equal the value size (2 x encoder size): got decoder "
                f"{query_size}, values {value_size}; use attention 'general' or 'mlp', or change the sizes"
            )

    def keys(self, values: Tensor) -> Tensor:
        return values


class ScaledDotScore(DotProductScore):
    """``a_{t,s} = (W_q h_t)^T (W_k x_s) / sqrt(A)``: a single head of scaled dot-product attention; parameters
    ``att_q`` and ``att_k`` (the scale is folded into the keys)."""

    name = "scaled"

    def __init__(self, query_size: int, value_size: int, attention_size: int) -> None:
        super().__init__()
        self.att_q = nn.Linear(query_size, attention_size, bias=False)
        self.att_k = nn.Linear(value_size, attention_size, bias=False)

    def keys(self, values: Tensor) -> Tensor:
        return self.att_k(values) / self.att_k.out_features**0.5

    def query(self, h: Tensor) -> Tensor:
        return self.att_q(h)


#: ``attention=`` names -> score classes
ATTENTION_SCORES: dict[str, type[AttentionScore]] = {"mlp": MLPScore, "general": GeneralScore, "dot": DotScore,
                                                     "scaled": ScaledDotScore}
