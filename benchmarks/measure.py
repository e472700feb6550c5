"""Timing and memory for the benchmarks: peak tensor memory on any device (a dispatch mode that follows storages),
interleaved timing of what is compared, the machine's matmul rate."""

from __future__ import annotations

import gc
import math
import statistics
import time
import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary


# -- measuring -------------------------------------------------------------------------------------------------
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def storages_are_tracked() -> bool:
    """Whether this torch keeps one Python object per tensor storage, which :class:`TensorMemory` needs to see a
    storage freed (torch 2.13 does; 2.1 makes a new object at every ``untyped_storage()`` call)."""
    probe = torch.empty(1)
    return probe.untyped_storage() is probe.untyped_storage()


class TensorMemory(TorchDispatchMode):
    """Peak bytes of tensor storages allocated while active (CPU stand-in for ``cuda.max_memory_allocated``).

    Every op's outputs are inspected: a storage not seen before, and not shared with one of the op's inputs
    (a view of a tensor that existed before), is counted with its size and subtracted when freed.
    """

    def __init__(self) -> None:
        if not storages_are_tracked():
            raise RuntimeError(
                f"CPU memory is measured by following tensor storages, and torch {torch.__version__} gives a new "
                "Python object for a storage at every untyped_storage() call, so a freed storage cannot be seen; "
                "use a newer torch (2.13 works) or --device cuda"
            )
        super().__init__()
        self.sizes: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.current = 0
        self.peak = 0

    def _free(self, nbytes: int) -> None:
        self.current -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's signature
        out = func(*args, **(kwargs or {}))
        inputs = None
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            nbytes = storage.nbytes()
            old = self.sizes.get(storage)
            if old is None:
                if inputs is None:
                    leaves = tree_flatten((args, kwargs))[0]
                    inputs = {x.untyped_storage().data_ptr() for x in leaves if isinstance(x, torch.Tensor)}
                self.sizes[storage] = nbytes
                if storage.data_ptr() in inputs:  # a view of something that was already there
                    continue
                self.current += nbytes
                weakref.finalize(storage, TensorMemory._free, self, nbytes)
            elif nbytes > old:  # resized in place
                self.sizes[storage] = nbytes
                self.current += nbytes - old
            self.peak = max(self.peak, self.current)
        return out


def measure_peak(step: Callable[[], float], device: torch.device) -> tuple[float, int]:
    """Run ``step`` once; its loss and the peak tensor bytes allocated above those live at its start."""
    gc.collect()
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        loss = step()
        synchronize(device)
        return loss, torch.cuda.max_memory_allocated(device) - base
    with TensorMemory() as tracker:
        loss = step()
    return loss, tracker.peak


def interleave(
    steps: dict[str, Callable[[], float]], warmup: int, repeats: int, device: torch.device
) -> tuple[dict[str, float], dict[str, int]]:
    """Median seconds per call of every step and their peak memory (measured on the first, untimed call).

    Round ``i`` runs every step once, starting at the ``i``-th (rotating), so drifts hit all of them.
    """
    names = list(steps)
    times: dict[str, list[float]] = {n: [] for n in names}
    memory: dict[str, int] = {}
    for i in range(max(1, warmup) + repeats):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            if i == 0:
                loss, memory[name] = measure_peak(steps[name], device)
            else:
                synchronize(device)
                start = time.perf_counter()
                loss = steps[name]()
                synchronize(device)
                elapsed = time.perf_counter() - start
                if i >= max(1, warmup):
                    times[name].append(elapsed)
            if not math.isfinite(loss):
                raise FloatingPointError(f"{name}: non-finite loss {loss} in round {i}")
    return {n: statistics.median(t) for n, t in times.items()}, memory


def matmul_rate(device: torch.device, shapes: list[tuple[int, int, int]], repeats: int = 5) -> dict[str, float]:
    """``torch.mm`` FLOP/s (float32) for each ``(n, k, m)``, median of ``repeats``."""
    out = {}
    for n, k, m in shapes:
        a = torch.randn(n, k, device=device)
        b = torch.randn(k, m, device=device)
        torch.mm(a, b)
        times = []
        for _ in range(repeats):
            synchronize(device)
            start = time.perf_counter()
            torch.mm(a, b)
            synchronize(device)
            times.append(time.perf_counter() - start)
        out[f"{n}x{k}x{m}"] = 2 * n * k * m / statistics.median(times)
    return out
