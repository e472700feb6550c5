"""The choices in :class:`~pyro_attention.networks.seq2seq.Seq2Seq`'s decoder recurrence, as objects.

* its initial state, a :class:`Bridge` (``Seq2Seq(bridge=...)``): :class:`MeanBridge` ``h_0 = tanh(W mean_s x_s)``,
  ``c_0 = 0`` (``"mean"``, default), or :class:`FinalBridge`, the encoder's final states with both directions
  concatenated (``"final"``, OpenNMT-py's; needs ``decoder_size = 2 * encoder_size``);
* what it is fed besides the previous word, an :class:`InputFeed` (``input_feed=...``): :class:`ContextFeed` the
  prior's soft context ``c_{t-1} = sum_s p(z_{t-1} = s) x_s`` (``"context"``, default), or
  :class:`AttentionalFeed` Luong et al.'s (2015) attentional state ``tanh(W_o [h_{t-1}; c_{t-1}] + b)``, the output
  layer's hidden vector at the soft context (``"attentional"``, OpenNMT-py's ``input_feed 1``).

Both see only the source and the prior's soft context, never a sampled alignment, so the target positions stay
conditionally independent given ``(x, y_<t)`` and the alignment can be enumerated per token.  :data:`BRIDGES` and
:data:`INPUT_FEEDS` map the names of configs, checkpoints and the command line to the classes ``Seq2Seq`` takes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pyro_attention.networks.output import OutputLayer

#: an LSTM state per decoder layer
States = list[tuple[Tensor, Tensor]]


class Bridge(nn.Module):
    """Base class: the decoder's initial LSTM states from the encoded source."""

    #: the name in :data:`BRIDGES` (and in configs and checkpoints)
    name: str = ""
    #: whether :meth:`initial` reads the encoder's final states (else the encoding need not keep them)
    uses_final_states: bool = False

    @staticmethod
    def check_sizes(value_size: int, decoder_size: int) -> None:
        """A ``ValueError`` where the bridge cannot join values of ``value_size`` to a decoder of ``decoder_size``
        (checked before anything is built)."""

    def initial(self, values: Tensor, source_mask: Tensor, final_h: Tensor | None,
                final_c: Tensor | None) -> States:  # pragma: no cover - interface
        """Values ``(B, S, D)``, their mask ``(B, S)`` and the encoder's final states ``(B, layers, D)`` -> one
        ``(h, c)`` pair ``(B, H)`` per decoder layer."""
        raise NotImplementedError


class MeanBridge(Bridge):
    """``h_0 = tanh(W mean_s x_s)`` (split over the layers), ``c_0 = 0``; parameter ``init_h``."""

    name = "mean"

    def __init__(self, value_size: int, decoder_size: int, layers: int) -> None:
        super().__init__()
        self.layers = layers
        self.init_h = nn.Linear(value_size, decoder_size * layers)

    def initial(self, values: Tensor, source_mask: Tensor, final_h: Tensor | None, final_c: Tensor | None) -> States:
        mask = source_mask.unsqueeze(-1).to(values.dtype)
        mean = (values * mask).sum(1) / mask.sum(1)
        return [(h, torch.zeros_like(h)) for h in torch.tanh(self.init_h(mean)).chunk(self.layers, dim=-1)]


class FinalBridge(Bridge):
    """The encoder's final states, both directions concatenated, layer by layer (no parameters)."""

    name = "final"
    uses_final_states = True

    def __init__(self, value_size: int, decoder_size: int, layers: int) -> None:
        super().__init__()
        self.check_sizes(value_size, decoder_size)
        self.layers = layers

    @staticmethod
    def check_sizes(value_size: int, decoder_size: int) -> None:
        if decoder_size != value_size:
            raise ValueError(
                f"bridge 'final' needs decoder_size = 2 x encoder_size (the encoder's final states, both directions), "
                f"got decoder_size {decoder_size} and encoder_size {value_size // 2}; use bridge 'mean'"
            )

    def initial(self, values: Tensor, source_mask: Tensor, final_h: Tensor | None, final_c: Tensor | None) -> States:
        if final_h is None or final_c is None:
            raise ValueError("bridge 'final': the source encoding holds no final encoder states")
        return [(final_h[:, i], final_c[:, i]) for i in range(self.layers)]


class InputFeed(nn.Module):
    """Base class: the vector fed to the next decoder step from its state ``h`` and the prior's soft context."""

    #: the name in :data:`INPUT_FEEDS` (and in configs and checkpoints)
    name: str = ""

    @staticmethod
    def size(value_size: int, decoder_size: int) -> int:  # pragma: no cover - interface
        """The fed vector's size."""
        raise NotImplementedError

    def forward(self, h: Tensor, context: Tensor, head: OutputLayer) -> Tensor:  # pragma: no cover - interface
        """Decoder states ``(N, H)`` and soft contexts ``(N, D)`` -> the fed vectors ``(N, size)``; ``head`` is the
        network's output layer (passed, not owned: its weights stay the head's)."""
        raise NotImplementedError

    def logits(self, h: Tensor, fed: Tensor, head: OutputLayer) -> Tensor | None:
        """``head``'s logits at the soft context that :meth:`forward` turned into ``fed`` (for states ``h``), where
        ``fed`` determines them without dropout (decoding: ``eval()`` mode), so that decoding does not compute the
        context or the head's hidden layer a second time; else ``None``."""
        return None


class ContextFeed(InputFeed):
    """The prior's soft context itself."""

    name = "context"

    def __init__(self, value_size: int, decoder_size: int, head: OutputLayer, dropout: float) -> None:
        super().__init__()

    @staticmethod
    def size(value_size: int, decoder_size: int) -> int:
        return value_size

    def forward(self, h: Tensor, context: Tensor, head: OutputLayer) -> Tensor:
        return context

    def logits(self, h: Tensor, fed: Tensor, head: OutputLayer) -> Tensor:
        return head.logits(head.query(h), fed)


class AttentionalFeed(InputFeed):
    """``tanh(W_o [h; c] + b)``: the output layer's hidden vector at the soft context, or, for an output layer without
    one (the product of experts), a layer of its own (parameter ``proj``)."""

    name = "attentional"

    def __init__(self, value_size: int, decoder_size: int, head: OutputLayer, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(decoder_size + value_size, decoder_size) if head.layer is None else None

    @staticmethod
    def size(value_size: int, decoder_size: int) -> int:
        return decoder_size

    def forward(self, h: Tensor, context: Tensor, head: OutputLayer) -> Tensor:
        if self.proj is not None:
            return torch.tanh(self.proj(torch.cat([self.dropout(h), self.dropout(context)], dim=-1)))
        return head.hidden(head.query(h), context)

    def logits(self, h: Tensor, fed: Tensor, head: OutputLayer) -> Tensor | None:
        return head.layer(fed) if self.proj is None else None


BRIDGES: dict[str, type[Bridge]] = {"mean": MeanBridge, "final": FinalBridge}
INPUT_FEEDS: dict[str, type[InputFeed]] = {"context": ContextFeed, "attentional": AttentionalFeed}
