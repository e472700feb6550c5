"""Training in bfloat16 where the network multiplies, float32 where a distribution is built.

:func:`autocast` runs a block (the training steps: :class:`~pyro_attention.inference.loop.SVIStep`) under
``torch.autocast``: the network's products (``linear``, ``mm``, ``bmm``, LSTM layers, ...) then run in bfloat16,
its weights cast once per block: 2.0-2.3x as many tokens per second as float32 on a CPU with AVX512-BF16
(docs/performance.md), slower on a CPU without bfloat16 instructions.  Everything a
network hands to a pair comes back to float32 by :func:`full_precision` (the :class:`~pyro_attention.networks.base.
Encoded` record, the output distribution), and the enumeration kernels (:mod:`~pyro_attention.distributions.kernels`)
run with autocast off, so the likelihood, the KL terms and the normalisers are computed at full precision from
products rounded to bfloat16.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor

__all__ = ["AUTOCAST_DTYPES", "REDUCED_PRECISION", "autocast", "check_autocast", "full_precision"]

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
    """Run the block under ``torch.autocast(device_type, dtype=dtype)`` (module docstring); ``None`` changes
    nothing."""
    if dtype is None:
        yield
        return
    with torch.autocast(device_type, dtype=dtype):
        yield
