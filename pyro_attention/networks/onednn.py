"""Decoding's products through oneDNN: the network's ``nn.Linear`` and ``nn.LSTMCell`` layers, for the length of a
``with`` block, replaced by twins that multiply by oneDNN's prepacked float32 kernels.

A decoder step is matrix products of a few hundred rows with fixed weights (the LSTM cell's gates, the attentional
layer, the ``V``-way output layer).  torch computes a float32 ``nn.Linear`` on a CPU with the BLAS it was built with
(MKL), which packs the weight anew at every call and, on CPUs it does not tune for, runs far below the core's rate.
oneDNN (``torch.ops.mkldnn._linear_pointwise``, the kernel torch's own compiler calls for a CPU's linear layers)
multiplies by a weight reordered once per block (``torch.ops.mkldnn._reorder_linear_weight``), taking and giving
ordinary tensors: the same float32 products (float32 inputs, float32 accumulation), summed in another order, so each
logit moves by float32 rounding only (``tests/networks/test_onednn.py``).  The LSTM cell's twin computes
``[x; h] W^T + (b_ih + b_hh)`` as one product, then torch's gate equations.

:func:`onednn_inference` is a no-op where it cannot apply: a network on another device or in another dtype, with
gradients wanted, or a torch without oneDNN.  Training never uses it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

__all__ = ["OneDNNLSTMCell", "OneDNNLinear", "onednn_inference"]


def _packed(weight: Tensor) -> Tensor:
    """``weight`` ``(out, in)`` reordered once into oneDNN's layout for :func:`_linear`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous())


def _linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``x @ W^T + b`` for ``x`` ``(..., K)`` through oneDNN (``weight``: :func:`_packed`'s)."""
    shape = x.shape
    y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, shape[-1]).contiguous(), weight, bias, "none", [], "")
    return y.view(*shape[:-1], y.shape[-1])


class OneDNNLinear(nn.Module):
    """``linear``'s map, its weight and bias reordered once for oneDNN (the originals stay its ``weight`` /
    ``bias``)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._weight = _packed(linear.weight)
        self._bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: Tensor) -> Tensor:
        return _linear(x, self._weight, self._bias)


class OneDNNLSTMCell(nn.Module):
    """``cell``'s step: the gates ``[x; h] [W_ih; W_hh]^T + b_ih + b_hh`` as one oneDNN product, then
    ``c' = sigmoid(f) c + sigmoid(i) tanh(g)``, ``h' = sigmoid(o) tanh(c')`` (torch's gate order ``i, f, g, o``)."""

    def __init__(self, cell: nn.LSTMCell) -> None:
        super().__init__()
        self.input_size, self.hidden_size = cell.input_size, cell.hidden_size
        self.weight_ih, self.weight_hh = cell.weight_ih, cell.weight_hh
        weight = torch.cat([cell.weight_ih.detach(), cell.weight_hh.detach()], dim=1)
        biases = [b.detach() for b in (cell.bias_ih, cell.bias_hh) if b is not None]
        self._weight, self._bias = _packed(weight), sum(biases[1:], biases[0]) if biases else None

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if state is None:
            zeros = x.new_zeros(x.shape[0], self.hidden_size)
            state = zeros, zeros
        h, c = state
        i, f, g, o = _linear(torch.cat([x, h], dim=-1), self._weight, self._bias).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


#: the layers :func:`onednn_inference` replaces, and their twins
_TWINS: dict[type[nn.Module], type[nn.Module]] = {nn.Linear: OneDNNLinear, nn.LSTMCell: OneDNNLSTMCell}


def usable(module: nn.Module) -> bool:
    """Whether :func:`onednn_inference` applies to ``module``: oneDNN's linear kernels in this torch, no gradient
    wanted, and every parameter a float32 CPU tensor."""
    params = list(module.parameters())
    kernels = torch.backends.mkldnn.is_available() and all(
        hasattr(torch.ops.mkldnn, op) for op in ("_linear_pointwise", "_reorder_linear_weight"))
    return (kernels and not torch.is_grad_enabled() and bool(params)
            and all(p.device.type == "cpu" and p.dtype == torch.float32 for p in params))


@contextlib.contextmanager
def onednn_inference(module: nn.Module) -> Iterator[None]:
    """Inside the block, every ``nn.Linear`` and ``nn.LSTMCell`` of ``module`` is its oneDNN twin (module docstring);
    the originals are put back on exit, also when the block raises.  A no-op where :func:`usable` is false.  The
    weights must not change inside the block (the twins hold reordered copies)."""
    if not usable(module):
        yield
        return
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    try:
        for parent in list(module.modules()):
            for name, child in list(parent.named_children()):
                twin = _TWINS.get(type(child))
                if twin is not None:
                    setattr(parent, name, twin(child))
                    swapped.append((parent, name, child))
        yield
    finally:
        for parent, name, child in reversed(swapped):
            setattr(parent, name, child)
