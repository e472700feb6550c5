"""Data-parallel SVI over ``torch.distributed`` processes (``torchrun``), for every estimator of the package.

Each process computes ``loss_and_grads`` of the pair's own ELBO on its shard of the global batch; the gradients
are then **summed** across processes with ``all_reduce`` before one optimiser step that every process takes
identically.  Because every loss here is a sum over the examples of a batch (full ``"batch"`` plates, no
subsampling), the sum of the shards' gradients is exactly the gradient of the global batch's loss -- what a
single process computes on the whole batch.  (Averaging, as ``DistributedDataParallel`` does, would need every
shard's loss scaled by the number of processes; summing is the same thing without the scale.)  This works for
every ELBO, including those without a ``differentiable_loss`` (``TraceGraph_ELBO`` and the REINFORCE estimator
:class:`~pyro_attention.inference.elbo.ReinforceKL_ELBO`), because it reduces gradients, not losses.

A parameter that received no gradient on any process keeps ``grad = None`` (so Adam leaves its state alone,
exactly as in a single process); one that received a gradient somewhere gets the sum, zeros counted for the
processes whose shard did not reach it.

A loss whose importance weights belong to the whole batch's trace (Pyro's own ``ReweightedWakeSleep``,
``AlignmentRWS(per_token=False)``, ``RenyiELBO``) does not sum over examples; :class:`DataParallelSVI` refuses it
with more than one process (:func:`sums_over_examples`).

Launch: ``torchrun --nproc_per_node=N -m pyro_attention train ...`` (``gloo`` on CPU, ``nccl`` on CUDA).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import pyro
import torch
import torch.distributed as dist
from pyro import poutine

from pyro_attention.precision import autocast_calls


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process; ``(0, 1)`` outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_from_env(backend: str | None = None) -> tuple[int, int]:
    """Join the process group ``torchrun`` describes in the environment (``WORLD_SIZE`` > 1); no-op otherwise.

    :param backend: ``None`` picks ``nccl`` when CUDA is available, else ``gloo``.
    :returns: ``(rank, world_size)``.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if not dist.is_available():  # pragma: no cover - torch built without distributed
            raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
        dist.init_process_group(backend or ("nccl" if torch.cuda.is_available() else "gloo"))
    return world()


def end_process(status: int) -> None:
    """End a process of a data-parallel run (no-op outside a process group): flush the output streams, then
    ``os._exit(status)``.  Leaving the group alive to the interpreter's exit made gloo's threads abort the process
    now and then ("terminate called without an active exception", torch 2.1-2.13), and ``destroy_process_group``
    before exit hung one rank now and then (torch 2.1, 2.4); every file of the run is written and closed by
    then."""
    if dist.is_available() and dist.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def shard(batch: Any, rank: int, world_size: int) -> Any:
    """Rows ``rank, rank + world_size, ...`` of ``batch`` (anything indexable by a long tensor)."""
    if world_size == 1:
        return batch
    return batch[torch.arange(rank, len(batch), world_size)]


def _params() -> list[tuple[str, torch.Tensor]]:
    return sorted(pyro.get_param_store().named_parameters(), key=lambda item: item[0])


def broadcast_parameters(src: int = 0) -> None:
    """Copy every parameter of Pyro's param store from process ``src`` to all others (same start everywhere)."""
    if world()[1] == 1:
        return
    with torch.no_grad():
        for _, p in _params():
            dist.broadcast(p.data, src)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` of process ``src`` on every process (identity outside a process group)."""
    if world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src)
    return box[0]


def gather_objects(obj: Any) -> list[Any]:
    """Every process's ``obj``, in rank order (``[obj]`` outside a process group)."""
    if world()[1] == 1:
        return [obj]
    out: list[Any] = [None] * world()[1]
    dist.all_gather_object(out, obj)
    return out


def all_reduce_gradients(params: Iterable[torch.Tensor]) -> None:
    """Sum ``.grad`` over processes in place; a parameter without a gradient anywhere keeps ``None``."""
    params = list(params)
    if world()[1] == 1 or not params:
        return
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float64, device=params[0].device)
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    dist.all_reduce(has)
    dist.all_reduce(flat)
    offset = 0
    for p, flag in zip(params, has.tolist(), strict=True):
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone() if flag > 0 else None
        offset += n


def sums_over_examples(loss: Any) -> bool:
    """Whether ``loss`` is a sum of per-example terms, each from that example's own draws -- what makes the sum of
    the shards' gradients the global batch's.  False for importance weights of the whole batch's trace: Pyro's
    :class:`~pyro.infer.ReweightedWakeSleep` (:class:`~pyro_attention.inference.elbo.AlignmentRWS` only with
    ``per_token=False``) and :class:`~pyro.infer.RenyiELBO`."""
    if isinstance(loss, pyro.infer.ReweightedWakeSleep):
        return bool(getattr(loss, "per_token", False))
    return not isinstance(loss, pyro.infer.RenyiELBO)


class DataParallelSVI:
    """``pyro.infer.SVI`` whose step sums the gradients of every process's shard before the optimiser step.

    :param model, guide: the pair's model and guide.
    :param optim: a :class:`pyro.optim.PyroOptim` (e.g. ``ClippedAdam``).
    :param loss: a Pyro ELBO with ``loss_and_grads``.
    :param distributed: reduce over the process group (when there is one); ``False``: this process alone.
    :param autocast: ``torch.bfloat16``: every call of ``model`` and ``guide`` runs under ``torch.autocast(device_type,
        torch.bfloat16)`` (:func:`~pyro_attention.precision.autocast_calls`), the ELBO's contraction and the backward
        pass outside it; ``None``: float32 throughout.

    Every parameter must be in Pyro's param store on every process before the first step (register the
    pair's modules with ``pyro.module`` first), so that all processes reduce the same list in the same order.
    With one process the step is ``SVI.step``, except that gradients are reset to ``None`` rather than to zeros
    (the next backward pass then writes them instead of adding to a tensor of zeros; the same numbers).
    This is the step :func:`~pyro_attention.inference.fit` and the translation trainer take.

    :raises ValueError: with several processes, for a loss that does not sum over examples
        (:func:`sums_over_examples`): its shards' gradients would not add up to the global batch's.
    """

    def __init__(
        self,
        model: Callable,
        guide: Callable,
        optim: Any,
        loss: Any,
        distributed: bool = True,
        autocast: torch.dtype | None = None,
        device_type: str = "cpu",
    ) -> None:
        world_size = world()[1] if distributed else 1
        if world_size > 1 and not sums_over_examples(loss):
            raise ValueError(
                f"{type(loss).__name__}: its importance weights are those of the whole batch's trace, so the "
                f"gradients of {world_size} processes' shards would not add up to the global batch's; train it in "
                f"one process (or use per-token weights: AlignmentRWS(per_token=True), the default)"
            )
        self.model = autocast_calls(model, autocast, device_type)
        self.guide = autocast_calls(guide, autocast, device_type)
        self.optim, self.loss = optim, loss
        self.distributed = distributed

    def step(self, batch: Any) -> float:
        """One step on this process's shard ``batch`` (may be empty); returns the loss of the *global* batch."""
        world_size = world()[1] if self.distributed else 1
        empty = batch is None or (hasattr(batch, "__len__") and len(batch) == 0)
        if not empty:
            with poutine.trace(param_only=True) as capture:
                loss = float(self.loss.loss_and_grads(self.model, self.guide, batch))
            touched = {site["value"].unconstrained() for site in capture.trace.nodes.values()}
        else:
            loss, touched = 0.0, set()
        if world_size > 1:
            params = [p for _, p in _params()]
            all_reduce_gradients(params)
            total = torch.tensor([loss], dtype=torch.float64)
            dist.all_reduce(total)
            loss = float(total)
            active = [p for p in params if p.grad is not None]
        else:
            active = list(touched)
        self.optim(active)
        for p in active:  # None, not zeros (Pyro's zero_grads): the next backward assigns instead of adding
            p.grad = None
        return loss
