"""Training in bfloat16 where the network multiplies, float32 where a distribution is built.

:func:`autocast_calls` wraps a pair's model and guide (:class:`~pyro_attention.inference.distributed.DataParallelSVI`
does so given ``autocast=``) so that each call runs under ``torch.autocast``: the network's products (``linear``,
``mm``, ``bmm``, LSTM layers, ...) then run in bfloat16, 2.0-2.3x as many tokens per second as float32 on a CPU with
AVX512-BF16 (docs/performance.md), slower on a CPU without bfloat16 instructions.  Everything a network hands to a
pair comes back to float32 by :func:`full_precision` (the :class:`~pyro_attention.networks.base.Encoded` record, the
output distribution), and the enumeration kernels (:mod:`~pyro_attention.distributions.kernels`) run with autocast
off.  The ELBO's own work (the sites' log-densities, their sum and the enumerated contraction, the backward pass)
runs after the calls return, outside autocast: the likelihood, the KL terms and the normalisers are computed at full
precision from products rounded to bfloat16.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch
from torch import Tensor

__all__ = [
    "AUTOCAST_DTYPES", "REDUCED_PRECISION", "autocast", "autocast_calls", "check_autocast", "full_precision",
]

F = TypeVar("F", bound=Callable)

#: the dtypes ``torch.autocast`` computes in, cast up by :func:`full_precision`
REDUCED_PRECISION = (torch.bfloat16, torch.float16)

#: the ``autocast`` option's values (configs and flags) and the dtype each stands for
AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"none": None, "bfloat16": torch.bfloat16}


def full_precision(t: Tensor) -> Tensor:
    """``t`` in float32 where it is bfloat16 or float16 (computed under ``torch.autocast``), else ``t`` itself
    (float32 and float64 pass unchanged)."""
    return t.float() if t.dtype in REDUCED_PRECISION else t


def check_autocast(dtype: torch.dtype | None, name: str = "autocast") -> torch.dtype | None:
    """``dtype`` when it is ``None`` or one of :data:`REDUCED_PRECISION`, else a ``ValueError`` naming ``name`` and
    the value (a config's ``"bfloat16"`` is the name; :data:`AUTOCAST_DTYPES` maps it to the dtype)."""
    if dtype is not None and dtype not in REDUCED_PRECISION:
        raise ValueError(f"{name} must be None, torch.bfloat16 or torch.float16, got {dtype!r}")
    return dtype


@contextlib.contextmanager
def autocast(dtype: torch.dtype | None, device_type: str = "cpu") -> Iterator[None]:
    """Run the block under ``torch.autocast(device_type, dtype=dtype)``; ``None`` changes nothing."""
    if dtype is None:
        yield
        return
    with torch.autocast(device_type, dtype=dtype):
        yield


def autocast_calls(fn: F, dtype: torch.dtype | None, device_type: str = "cpu") -> F:
    """``fn`` with every call run under :func:`autocast` ``(dtype, device_type)``; ``fn`` itself for ``None``.

    A pair's model and guide wrapped so: what they compute runs in ``dtype``, what Pyro's ELBO does with their
    traces afterwards does not (module docstring)."""
    check_autocast(dtype)
    if dtype is None:
        return fn

    @functools.wraps(fn)
    def under_autocast(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - fn's own signature
        with autocast(dtype, device_type):
            return fn(*args, **kwargs)

    return under_autocast  # type: ignore[return-value]
