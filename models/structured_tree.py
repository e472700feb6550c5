r"""Syntactic attention (Kim et al. 2017): a projective dependency tree over the source, used in expectation.

A tree over the real source positions (single root, no crossing arcs) has the Gibbs distribution

.. math::

    p(\text{tree} \mid x) \propto \exp\Big(\sum_{(h \to m) \in \text{tree}} s_{hm} + \rho_{\text{root child}}\Big),
    \qquad s_{hm} = \frac{(P x_h)^\top (C x_m)}{\sqrt{D}}, \qquad \rho_m = w^\top x_m + b,

with the arc scorer :math:`(P, C, w, b)` owned by the pair (``pyro.module("structure", ...)``).  The arc
marginals :math:`\mu_{hm} = p(h \to m \mid x)` come from Eisner's inside algorithm
(:func:`~pyro_attention.distributions.structures.tree_marginals`).  Each source position is represented together
with its *expected parent*, and a target step attends softly over these structured representations with the
network's prior scores:

.. math::

    \tilde x_m = x_m + \sum_h \mu_{hm}\, x_h, \qquad
    \alpha_t = \mathrm{softmax}(a_t), \qquad c_t = \sum_m \alpha_{t,m} \tilde x_m, \qquad
    y_t \sim p(y_t \mid x, y_{<t}, c_t).

The root is the zero vector: a word attached to the root (probability :math:`p(\text{root} \to m)`) gets no
parent term.  SAN *concatenates* :math:`[x_m; \sum_h \mu_{hm} x_h]` (struct-attn ``models-entail.lua``); we add
instead, because every task network here maps a context of the values' size ``D`` to outputs, and addition
keeps that interface (a concatenating variant needs a network whose output layer takes ``2D``).

* **What is random:** nothing in the model; the tree enters through its arc marginals (no ``"align"`` site).
* **What the prior and the posterior see:** the tree sees the source only (it is shared by all target
  positions); the attention over structured representations sees the source and the query / target prefix.
  There is no posterior.
* **What is combined at prediction:** representations: expected parents, then an expected context.
* **Training and prediction:** maximum likelihood; ``Trace_ELBO`` with the empty guide is exactly
  ``-log p(y | x)``.  Prediction runs the network once on :math:`c_t` (the pair's
  :meth:`~SyntacticAttention.soft_context`, so ``predict(rule="soft")``, its only rule, sees the tree).

References: [1] Kim, Denton, Hoang, Rush, "Structured Attention Networks", ICLR 2017. [2] Eisner, "Three New
Probabilistic Models for Dependency Parsing", COLING 1996. [3] Dozat, Manning, "Deep Biaffine Attention for
Neural Dependency Parsing", ICLR 2017 (the bilinear arc score).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pyro
import torch
from torch import Tensor, nn

from pyro_attention.distributions.aligned import OutputCategorical
from pyro_attention.distributions.structures import tree_marginals
from pyro_attention.models.structured import ExpectedRepresentation
from pyro_attention.networks.base import AttentionNetwork, Encoded, expected_context
from pyro_attention.pair import AlignmentPair

__all__ = ["ArcScorer", "SyntacticAttention"]


class ArcScorer(nn.Module):
    """Bilinear arc scores :math:`s_{hm} = (P x_h)^\\top (C x_m) / \\sqrt{D}` and root scores
    :math:`\\rho_m = w^\\top x_m + b` over source values ``(B, S, D)``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.parent = nn.Linear(size, size, bias=False)
        self.child = nn.Linear(size, size, bias=False)
        self.root = nn.Linear(size, 1)
        self.size = size

    def forward(self, values: Tensor) -> tuple[Tensor, Tensor]:
        arc = self.parent(values) @ self.child(values).transpose(-1, -2) / math.sqrt(self.size)
        return arc, self.root(values).squeeze(-1)


class SyntacticAttention(ExpectedRepresentation, AlignmentPair):
    """SAN syntactic attention: soft attention over source values enriched with their expected parents.

    :param value_size: ``D`` of the network's values; ``None`` creates the arc scorer at the first batch.
    """

    latent: ClassVar[str] = "none"
    label: ClassVar[str] = "syntactic"
    paper_row: ClassVar[str] = "Structured Attention Networks: syntactic attention"

    def __init__(self, network: AttentionNetwork, value_size: int | None = None) -> None:
        super().__init__(network)
        self.scorer: ArcScorer | None = None if value_size is None else ArcScorer(value_size)

    def owned_modules(self) -> dict[str, nn.Module]:
        return {} if self.scorer is None else {"structure": self.scorer}

    def arc_scorer(self, enc: Encoded) -> ArcScorer:
        """The arc scorer, created on first use with the values' size, dtype and device."""
        values = enc.values
        if self.scorer is None:
            self.scorer = ArcScorer(values.shape[-1]).to(dtype=values.dtype, device=values.device)
        elif self.scorer.size != values.shape[-1]:
            raise ValueError(f"SyntacticAttention: values have size {values.shape[-1]}, arc scorer {self.scorer.size}")
        return self.scorer

    def tree_marginals(self, enc: Encoded) -> tuple[Tensor, Tensor]:
        """Arc marginals ``p(h -> m | x)`` ``(B, S, S)`` and root marginals ``(B, S)`` (0 at padding)."""
        arc, root = self.arc_scorer(enc)(enc.values)
        return tree_marginals(arc, root, enc.source_mask)

    def structured_values(self, enc: Encoded) -> Tensor:
        """:math:`\\tilde x_m = x_m + \\sum_h p(h \\to m) x_h` ``(B, S, D)``."""
        arcs, _ = self.tree_marginals(enc)
        return enc.values + torch.einsum("bhm,bhd->bmd", arcs, enc.values)

    def soft_context(self, enc: Encoded) -> Tensor:
        return expected_context(self.attention_prior(enc), self.structured_values(enc))

    def output_logits(self, enc: Encoded) -> Tensor:
        return self.network.output_logits(enc, self.soft_context(enc))

    def model(self, batch: Any) -> None:
        enc = self.encode(batch)
        pyro.module("structure", self.arc_scorer(enc))
        logits = self.output_logits(enc)
        with self.plates(enc):
            self.observe(enc, OutputCategorical(logits))
