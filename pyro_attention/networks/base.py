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

from pyro_attention.precision import full_precision


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

    def __post_init__(self) -> None:
        # a network run under torch.autocast hands its values and scores over in float32 (the pairs' precision)
        self.values, self.prior_scores = full_precision(self.values), full_precision(self.prior_scores)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(B, T, S)``."""
        return tuple(self.prior_scores.shape)  # type: ignore[return-value]


def check_part(owner: str, name: str, part: Any, base: type, known: dict[str, type]) -> None:
    """A ``TypeError`` unless ``part`` is a subclass of ``base`` (a network's part, given as the class it builds),
    naming the classes of ``known`` (the config names' registry) and, for a name, the class it stands for."""
    if isinstance(part, type) and issubclass(part, base):
        return
    choices = ", ".join(c.__name__ for c in known.values())
    hint = f"; the name {part!r} stands for {known[part].__name__}" if isinstance(part, str) and part in known else ""
    raise TypeError(f"{owner}: {name} must be a subclass of {base.__name__} ({choices}), got {part!r}{hint}")


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


@dataclass
class ExpertLogits:
    """Output logits that split into a part of the target position and a part of the context: for every source
    value ``x_s`` as the context, ``output_logits(enc, x_s)[b, t] = u[b, t] + v[b, s]`` (a product of experts).

    :param u: ``(B, T, V)`` (or broadcastable to it, e.g. ``(B, 1, V)``) the target position's part, or ``None``
        when it is zero (the lexical expert: the output depends on the context alone).
    :param v: ``(B, S, V)`` the part of every source value; with ``rows``, ``(U, V)``: one row per distinct source
        item (IBM Model 1's words), ``x_s`` of example ``b`` using row ``rows[b, s]``.
    :param rows: ``(B, S)`` long, or ``None``.
    """

    u: Tensor | None
    v: Tensor
    rows: Tensor | None = None


class AttentionNetwork(nn.Module):
    """Base class of task networks.

    Subclasses implement :meth:`encode`, :meth:`output_logits` and :meth:`posterior_scores`.  A network may expose
    its output layer further -- the final linear layer and its input (:meth:`output_hidden`, :attr:`output_layer`),
    that input at every source value at once (:meth:`output_hidden_at_values`), logits that split into a target and
    a context part (:meth:`output_experts`) -- so that code evaluating the output layer at many contexts at once (the
    enumeration kernel, :mod:`pyro_attention.distributions.enumeration`) can do it faster; every such method
    computes the same function as :meth:`output_logits`.
    """

    num_classes: int
    #: ``D``, the size of the source values (and so of every context vector).
    value_size: int
    #: A memory setting the network carries for the code that evaluates its output layer with every source value as
    #: the context at once (the enumeration kernel, :func:`~pyro_attention.distributions.enumeration.observed_table`,
    #: which the pairs call with it): source positions per chunk, ``None`` all at once.  The network never reads it.
    chunk_size: int | None = None
    #: The other memory setting of that code: bytes of the enumerated log-probabilities it may keep for the backward
    #: pass (the rest is recomputed there: a fourth product with the output layer's weights); ``None``: its default.
    keep_bytes: int | None = None

    def encode(self, batch: Any) -> Encoded:  # pragma: no cover - interface
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        """Where the network's parameters are (a batch must be there too); the CPU for a network without any."""
        first = next(self.parameters(), None)
        return torch.device("cpu") if first is None else first.device

    def output_logits(self, enc: Encoded, context: Tensor) -> Tensor:  # pragma: no cover - interface
        """Map a context ``(..., B, T, D)`` to output logits ``(..., B, T, V)``."""
        raise NotImplementedError

    def posterior_scores(self, enc: Encoded) -> Tensor:  # pragma: no cover - interface
        """Inference-network scores ``(B, T, S)`` that may look at the observed targets."""
        raise NotImplementedError

    def inference_parameters(self) -> list[nn.Parameter]:
        """The parameters only :meth:`posterior_scores` uses (the inference network's own), for training the guide
        alone; none by default."""
        return []

    def own_posteriors(self, batch: Any) -> dict[str, Tensor]:
        """Alignment distributions ``(B, T, S)`` the network computes itself besides its pair's, by name (an HMM
        prior's smoothed posterior, :class:`~pyro_attention.networks.lexical.HMMNetwork`); none by default."""
        return {}

    def output_hidden(self, enc: Encoded, context: Tensor) -> Tensor | None:
        """The input ``(..., B, T, H)`` of the final linear layer :attr:`output_layer`, or ``None`` when the
        network does not expose it."""
        return None

    #: The final ``nn.Linear`` of :meth:`output_logits`, ``output_logits = output_layer(output_hidden)``.
    output_layer: nn.Linear | None = None

    def output_hidden_at_values(self, enc: Encoded) -> Tensor | None:
        """:meth:`output_hidden` with every source value ``x_s = enc.values[:, s]`` as the context, ``(S, B, T, H)``,
        where the network computes it faster than on gathered contexts; ``None`` (the default) otherwise."""
        return None

    def output_experts(self, enc: Encoded) -> ExpertLogits | None:
        """:meth:`output_logits` at every source value as ``u_t + v_s`` (:class:`ExpertLogits`) where the output
        layer is a product of experts; ``None`` (the default) otherwise."""
        return None


class HeadNetwork(AttentionNetwork):
    """A task network whose output layer is an :class:`~pyro_attention.networks.output.OutputLayer` at ``self.head``,
    with the layer's per-position part :meth:`OutputLayer.query` kept in ``enc.state["query"]``.

    The output methods delegate to the head.
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

    def output_hidden_at_values(self, enc: Encoded) -> Tensor | None:
        return self.head.hidden_at_values(enc.state["query"], enc.values)

    def output_experts(self, enc: Encoded) -> ExpertLogits | None:
        return self.head.experts(enc.state["query"], enc.values)
