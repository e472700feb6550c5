r"""``FusedClippedAdam``: Pyro's :class:`~pyro.optim.ClippedAdam` with every parameter updated in one fused pass.

Pyro keeps one torch optimiser per parameter, and :class:`pyro.optim.clipped_adam.ClippedAdam` updates each with
eight whole-tensor passes in Python (clamp, two moment updates, square root, add, divide, ...).  On a CPU that is
memory traffic: at a standard translation size (11 M parameters) it is 5 % of a training step.  This optimiser
keeps Pyro's objects -- the same per-parameter optimisers, state (``step``, ``exp_avg``, ``exp_avg_sq``),
``get_state`` / ``set_state`` and learning-rate groups, so checkpoints and schedules are unchanged -- and only
replaces the arithmetic of a step by ``torch._foreach_clamp_*`` and torch's fused Adam kernel
(``torch._fused_adam_``, one pass per tensor), for all parameters at once.

It computes Pyro's update: with the gradient clamped elementwise to ``[-clip_norm, clip_norm]``,

.. math::

    m \leftarrow \beta_1 m + (1 - \beta_1) g, \quad v \leftarrow \beta_2 v + (1 - \beta_2) g^2, \quad
    \theta \leftarrow \theta - \frac{\mathrm{lr} \sqrt{1 - \beta_2^k}}{1 - \beta_1^k} \frac{m}{\sqrt v + \epsilon},

which is torch's Adam, ``lr / (1 - beta_1^k) * m / (sqrt(v) / sqrt(1 - beta_2^k) + eps')``, with
``eps' = eps / sqrt(1 - beta_2^k)``: parameters are grouped by step count ``k`` (and hyper-parameters) and each
group gets its ``eps'``.  Values equal Pyro's up to float rounding (tested); ``lrd`` decays every group's ``lr``
at every step as Pyro's does.  Options the fused kernel lacks (``centered_variance``, sparse gradients, devices
other than CPU and CUDA) and torch < 2.4 fall back to Pyro's step.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import pyro
import torch
from pyro.optim import PyroOptim
from pyro.optim.clipped_adam import ClippedAdam as TorchClippedAdam
from pyro.optim.optim import _load_state_dict
from torch.torch_version import TorchVersion

#: torch's fused Adam kernel runs on CPU tensors from torch 2.4 on
_FUSED_CPU = hasattr(torch, "_fused_adam_") and TorchVersion(torch.__version__) >= "2.4"

#: the largest learning rate accepted where a user gives one (``--lr``, config files, ``fit``, ``train``): Adam
#: moves every weight by about ``lr`` per step, so a rate above 1 only diverges (1e30 overflowed the perplexity)
MAX_LR = 1.0
#: the allowed range of a learning rate, as the messages print it
LR_RANGE = f"(0, {MAX_LR:g}]"


def check_lr(lr: Any, name: str = "lr") -> float:
    """``lr`` as a float when it is a number in ``(0, MAX_LR]``; else a ``ValueError`` naming ``name`` and the range."""
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0.0 < lr <= MAX_LR:
        raise ValueError(
            f"{name} must be a learning rate in {LR_RANGE} (Adam's step: about how far every weight moves per step; "
            f"1e-3 to 3e-3 is typical), got {lr!r}"
        )
    return float(lr)


class FusedClippedAdam(PyroOptim):
    """Drop-in for ``pyro.optim.ClippedAdam(optim_args)``: the same ``PyroOptim`` of
    :class:`pyro.optim.clipped_adam.ClippedAdam` objects (arguments, state, checkpoints), a fused step."""

    def __init__(self, optim_args: dict[str, Any]) -> None:
        super().__init__(TorchClippedAdam, optim_args)

    def __call__(self, params: Any, *args: Any, **kwargs: Any) -> None:
        params = list(params)
        if not _FUSED_CPU:  # pragma: no cover - torch < 2.4 has no fused Adam on the CPU
            return super().__call__(params, *args, **kwargs)
        groups: dict[tuple, list[torch.Tensor]] = defaultdict(list)
        fallback = []
        for p in params:
            self._ensure(p)
            optimizer = self.optim_objs[p]
            group = optimizer.param_groups[0]
            if self.grad_clip[p] is not None:
                self.grad_clip[p](p)
            group["lr"] *= group["lrd"]  # as ClippedAdam.step does, whether or not the parameter has a gradient
            if p.grad is None:
                continue
            if (group.get("centered_variance") or len(optimizer.param_groups) != 1 or p.grad.is_sparse
                    or p.device.type not in ("cpu", "cuda")):
                group["lr"] /= group["lrd"]  # Pyro's own step applies it
                fallback.append(p)
                continue
            state = optimizer.state[p]
            if len(state) == 0:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            state["step"] += 1
            key = (state["step"], group["lr"], tuple(group["betas"]), group["eps"], group["weight_decay"],
                   group["clip_norm"], p.device, p.dtype)
            groups[key].append(p)
        for (step, lr, (beta1, beta2), eps, weight_decay, clip, device, _), ps in groups.items():
            grads = [p.grad for p in ps]
            torch._foreach_clamp_min_(grads, -clip)
            torch._foreach_clamp_max_(grads, clip)
            states = [self.optim_objs[p].state[p] for p in ps]
            steps = [torch.tensor(float(step), device=device) for _ in ps]  # the fused kernel's device
            torch._fused_adam_(
                [p.data for p in ps], grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
                steps, lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay,
                eps=eps / math.sqrt(1 - beta2**step), amsgrad=False, maximize=False,
            )
        for p in fallback:
            self.optim_objs[p].step()

    def _ensure(self, p: torch.Tensor) -> None:
        """Create ``p``'s optimiser as :meth:`pyro.optim.PyroOptim.__call__` does (restoring waiting state)."""
        if p in self.optim_objs:
            return
        optimizer = self.optim_objs[p] = self._get_optim(p)
        self.grad_clip[p] = self._get_grad_clip(p)
        param_name = pyro.get_param_store().param_name(p)
        state = self._state_waiting_to_be_consumed.pop(param_name, None)
        if state is not None:
            _load_state_dict(optimizer, state)


def set_lr(optim: PyroOptim, lr: float) -> None:
    """Set the learning rate of a Pyro optimiser: of the optimisers it holds and of those it creates later."""
    optim.pt_optim_args["lr"] = lr
    for opt in optim.optim_objs.values():
        for group in opt.param_groups:
            group["lr"] = lr


class SubsetOptim:
    """An optimiser as Pyro's SVI calls it, ``optim(params)``, that updates only the parameters of ``keep``: SVI
    with it takes a step of those alone (a guide-only step: the model's parameters get gradients but stay as they
    are; the SVI object clears every gradient afterwards).  The updates, their state and the learning rate are
    ``optim``'s own, shared with the full steps that ``optim`` takes elsewhere.

    :param optim: a Pyro optimiser (e.g. :class:`FusedClippedAdam`).
    :param keep: the parameters to update (compared by identity: the tensors Pyro's param store holds).
    """

    def __init__(self, optim: PyroOptim, keep: list[torch.Tensor]) -> None:
        if not keep:
            raise ValueError("SubsetOptim: no parameters to update")
        self.optim, self.keep = optim, {id(p) for p in keep}

    def __call__(self, params: Any, *args: Any, **kwargs: Any) -> None:
        return self.optim([p for p in params if id(p) in self.keep], *args, **kwargs)
