r"""Output layers ``p(y | h, c)``: how a query state ``h`` and a context ``c`` become output logits.

A task network holds one of these objects; the pairs never see which.  Each computes, for a context ``c`` (a hard
``x_z``, a soft or a relaxed average), the logits of ``y``; some also say how to evaluate them with every source
value as the context at once (:meth:`OutputLayer.hidden_at_values`, :meth:`OutputLayer.experts`), which the
enumeration kernel (:mod:`pyro_attention.distributions.enumeration`) uses for the ``(B, T, S)`` table of
``log p(y_t | x, z_t = s)`` at the observed tokens.

* :class:`TanhOutput` -- the paper's layer, ``logits = U tanh(W_h h_t + W_c c + b)``.  Under enumeration the
  ``V``-way normaliser is needed for every ``(t, s)``: ``S T H V`` multiply-adds, ``S`` times soft attention's.
* :class:`ProductOfExperts` -- ``logits = u_t + v(c)`` with ``u_t = U_h h_t + b`` (the decoder's expert) and
  ``v(c) = U_x c`` (the expert of the attended source word):

  .. math::

      p(y_t \mid x, y_{<t}, z_t = s) = \frac{\exp(u_t[y_t] + v_s[y_t])}{\sum_{y} \exp(u_t[y] + v_s[y])},
      \qquad v_s = U_x x_s .

  The normalisers of all ``(t, s)`` are one ``(T x V) (V x S)`` product per example after row-wise max shifts
  (:func:`~pyro_attention.distributions.kernels.product_log_normalizer`): ``S T V`` multiply-adds instead of
  ``S T H V``, so exact enumeration costs about one soft step.  The model stays a latent-alignment model -- the
  softmax is nonlinear in ``c``, so ``p(y | E[c]) != E[p(y | c)]``.  With a uniform prior and ``u == 0`` it is
  IBM Model 1's likelihood (Brown et al. 1993) with a neural lexical table ``t(y | x_s) = softmax(U_x x_s)[y]``:
  ``p(y_t | x) = (1 / S) sum_s t(y_t | x_s)``.

A network takes its layer as a class (``Seq2Seq(output=ProductOfExperts)``) and builds it with its own sizes
(:meth:`OutputLayer.build`); :data:`OUTPUT_LAYERS` maps the names of configs and the command line to the classes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pyro_attention.networks.base import ExpertLogits


class OutputLayer(nn.Module):
    """Base class.  ``query(h)`` is computed once per target position; ``logits(query, context)`` per context."""

    #: the name of the layer in :data:`OUTPUT_LAYERS` (and in configs and checkpoints)
    name: str = ""

    @classmethod
    def build(cls, query_size: int, value_size: int, num_classes: int, dropout: float = 0.0,
              question_queries: bool = False) -> OutputLayer:  # pragma: no cover - interface
        """The layer a network asks for by its sizes: queries ``h`` of ``query_size``, contexts of ``value_size``,
        ``num_classes`` outputs; ``question_queries``: one query per example (``(B, Q)``, region QA) rather than
        one per target position.  A ``ValueError`` where the layer cannot serve."""
        raise NotImplementedError

    def query(self, h: Tensor) -> Tensor:  # pragma: no cover - interface
        """The per-target-position part of the layer, from query states ``h`` ``(..., H)``."""
        raise NotImplementedError

    def logits(self, query: Tensor, context: Tensor) -> Tensor:  # pragma: no cover - interface
        """Output logits ``(..., V)`` for :meth:`query` output and contexts ``(..., D)`` (broadcast)."""
        raise NotImplementedError

    def hidden(self, query: Tensor, context: Tensor) -> Tensor | None:
        """The input of the final linear layer :attr:`layer`, or ``None`` when the layer has none."""
        return None

    #: the final ``nn.Linear`` (``logits = layer(hidden)``), or ``None``
    layer: nn.Linear | None = None

    def hidden_at_values(self, query: Tensor, values: Tensor) -> Tensor | None:
        """:meth:`hidden` for every target position and every source value ``values`` ``(B, S, D)`` as the context,
        ``(S, B, T, H)``, where the layer computes it faster than on gathered contexts; else ``None``."""
        return None

    def experts(self, query: Tensor, values: Tensor) -> ExpertLogits | None:
        """:meth:`logits` for every target position and every source value as the context, as ``u_t + v_s``
        (:class:`~pyro_attention.networks.base.ExpertLogits`) where the layer is a product of experts; else
        ``None``."""
        return None


class TanhOutput(OutputLayer):
    """``logits = U tanh(W_h h + W_c c + b)`` (Deng et al. 2018), with dropout on ``h`` and on ``c``.

    Parameters ``out_h`` (``W_h``, ``b``), ``out_c`` (``W_c``) and ``out`` (``U`` and its bias).
    """

    name = "tanh"

    def __init__(self, query_size: int, value_size: int, hidden_size: int, num_classes: int,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out_h = nn.Linear(query_size, hidden_size)
        self.out_c = nn.Linear(value_size, hidden_size, bias=False)
        self.out = nn.Linear(hidden_size, num_classes)

    @classmethod
    def build(cls, query_size: int, value_size: int, num_classes: int, dropout: float = 0.0,
              question_queries: bool = False) -> TanhOutput:
        """A hidden layer of ``query_size`` (the decoder's); one query per target position only."""
        if question_queries:
            raise ValueError("TanhOutput: one query per target position; for one per example use ConcatTanhOutput")
        return cls(query_size, value_size, query_size, num_classes, dropout)

    def query(self, h: Tensor) -> Tensor:
        return self.out_h(self.dropout(h))

    def hidden(self, query: Tensor, context: Tensor) -> Tensor:
        return torch.tanh(query + self.out_c(self.dropout(context)))

    def logits(self, query: Tensor, context: Tensor) -> Tensor:
        return self.out(self.hidden(query, context))

    @property
    def layer(self) -> nn.Linear:
        return self.out

    def hidden_at_values(self, query: Tensor, values: Tensor) -> Tensor | None:
        """``tanh(W_h h_t + W_c x_s + b)`` for every ``(s, b, t)``, ``(S, B, T, H)``, computing ``W_c x_s`` once per
        source position rather than once per target position (the same values).  ``None`` under active dropout,
        which draws a mask per copy of the context: then the contexts are gathered."""
        if self.training and self.dropout.p > 0:
            return None
        projected = self.out_c(values).transpose(0, 1).unsqueeze(2)  # (S, B, 1, H)
        return torch.tanh(query + projected)


class ConcatTanhOutput(OutputLayer):
    """``logits = U tanh(W [q; c] + b)`` with one joint ``W`` (``out_hidden``) and ``U`` (``out``): the region-QA
    form of :class:`TanhOutput` (same function, its own parameterisation and initialisation)."""

    name = "tanh"

    def __init__(self, query_size: int, value_size: int, hidden_size: int, num_classes: int) -> None:
        super().__init__()
        self.query_size = query_size
        self.out_hidden = nn.Linear(query_size + value_size, hidden_size)
        self.out = nn.Linear(hidden_size, num_classes)

    @classmethod
    def build(cls, query_size: int, value_size: int, num_classes: int, dropout: float = 0.0,
              question_queries: bool = False) -> ConcatTanhOutput:
        """A hidden layer of ``query_size``; one query per example only, without dropout."""
        if not question_queries or dropout:
            raise ValueError("ConcatTanhOutput: one query per example (region QA), no dropout; for a decoder use "
                             "TanhOutput")
        return cls(query_size, value_size, query_size, num_classes)

    def query(self, h: Tensor) -> Tensor:
        """``W[:, :Q] q`` for questions ``(B, Q)``, shaped ``(B, 1, H)`` (one target position)."""
        return (self.out_hidden.weight[:, : self.query_size] @ h.unsqueeze(-1)).squeeze(-1).unsqueeze(1)

    def hidden(self, query: Tensor, context: Tensor) -> Tensor:
        return torch.tanh(query + context @ self.out_hidden.weight[:, self.query_size :].T + self.out_hidden.bias)

    def logits(self, query: Tensor, context: Tensor) -> Tensor:
        return self.out(self.hidden(query, context))

    @property
    def layer(self) -> nn.Linear:
        return self.out


class ProductOfExperts(OutputLayer):
    """``logits = u + v(c)``, ``u = U_h h + b`` (``query_expert``), ``v(c) = U_x c`` (``source_expert``).

    Dropout acts on ``h`` and on ``c``; under enumeration on the source values ``x_s`` (one mask per source
    position, shared by the target positions, so that ``v_s`` is computed once per source position).

    :param question_queries: ``query(q)`` for a ``(B, Q)`` question gives ``(B, 1, V)`` (one target position).
    """

    name = "product"

    def __init__(self, query_size: int, value_size: int, num_classes: int, dropout: float = 0.0,
                 question_queries: bool = False) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.question_queries = question_queries
        self.query_expert = nn.Linear(query_size, num_classes)
        self.source_expert = nn.Linear(value_size, num_classes, bias=False)

    @classmethod
    def build(cls, query_size: int, value_size: int, num_classes: int, dropout: float = 0.0,
              question_queries: bool = False) -> ProductOfExperts:
        return cls(query_size, value_size, num_classes, dropout, question_queries=question_queries)

    def query(self, h: Tensor) -> Tensor:
        u = self.query_expert(self.dropout(h))
        return u.unsqueeze(1) if self.question_queries else u

    def logits(self, query: Tensor, context: Tensor) -> Tensor:
        return query + self.source_expert(self.dropout(context))

    def experts(self, query: Tensor, values: Tensor) -> ExpertLogits:
        """``u_t`` = :meth:`query` output, ``v_s = U_x x_s`` ``(B, S, V)`` (dropout: one mask per source position)."""
        return ExpertLogits(query, self.source_expert(self.dropout(values)))


class LexicalExpert(ProductOfExperts):
    r"""The product of experts with the decoder's expert switched off, ``u == 0``: ``logits = U_x c``.

    ``p(y_t | x, z_t = s) = softmax(U_x x_s)[y_t]`` depends on the aligned source value alone -- a (low-rank)
    neural lexical table ``t(y | x_s)``.  With a uniform prior and ``x_s`` the source word's own embedding this is
    IBM Model 1 (:class:`~pyro_attention.networks.lexical.IBM1Network`).  Its observed-token table needs one
    ``V``-way normaliser per *source* position (``B S V``), not per ``(t, s)`` (its :meth:`experts` say ``u == 0``).
    """

    name = "lexical"

    def __init__(self, query_size: int, value_size: int, num_classes: int, dropout: float = 0.0) -> None:
        super().__init__(query_size, value_size, num_classes, dropout)
        del self.query_expert  # no decoder expert: u == 0

    @classmethod
    def build(cls, query_size: int, value_size: int, num_classes: int, dropout: float = 0.0,
              question_queries: bool = False) -> LexicalExpert:
        return cls(query_size, value_size, num_classes, dropout)

    def query(self, h: Tensor) -> Tensor:
        """``u == 0``, shaped ``(..., 1)`` to broadcast over the classes (and to carry the target positions)."""
        return h.new_zeros(h.shape[:-1] + (1,))

    def experts(self, query: Tensor, values: Tensor) -> ExpertLogits:
        """``u == 0`` (``None``) and ``v_s = U_x x_s`` ``(B, S, V)``."""
        return ExpertLogits(None, self.source_expert(self.dropout(values)))


#: the ``output`` names of configs and the command line (``--output``) -> a decoder's layer classes
OUTPUT_LAYERS: dict[str, type[OutputLayer]] = {"tanh": TanhOutput, "product": ProductOfExperts}
