"""Checks of what a user passes to the Python API, one per kind of value, each raising where the value enters with a
message that names it: a count that is not a whole number (``nan``, ``"10"``, ``2.5``, ``True``), token ids given as
text, ``None`` among sentences, tensors on another device than the network (or on the ``meta`` device, which holds
no values).  Used by the public functions of every layer (readers, batches, pairs, ``fit``, the tasks)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import torch


def count(value: Any, name: str, low: int | None = None) -> int:
    """``value`` as an ``int``, if it is a whole number (a Python or NumPy integer, not a ``bool``), of at least
    ``low`` where given.

    :raises TypeError: naming ``name`` for anything else (a float -- ``nan`` included --, a string, ``None``).
    :raises ValueError: naming ``name`` for a whole number below ``low``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        shown = "nan" if isinstance(value, float) and math.isnan(value) else repr(value)
        raise TypeError(f"{name} must be a whole number (an int), got {shown} ({type(value).__name__})")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def token_ids(sequence: Any, name: str) -> None:
    """A ``TypeError`` naming ``name`` unless ``sequence`` is a sequence of whole numbers (token ids), not text."""
    if isinstance(sequence, (str, bytes)):
        raise TypeError(f"{name} must be token ids (a list of ints), got the text {sequence[:40]!r}; encode it with "
                        f"the vocabulary first (Vocab.encode(text.split()))")
    if not isinstance(sequence, Iterable) or isinstance(sequence, Mapping):
        raise TypeError(f"{name} must be token ids (a list of ints), got {type(sequence).__name__}")
    if isinstance(sequence, list) and all(type(token) is int for token in sequence):
        return  # the common case, without the abstract-class checks below
    for i, token in enumerate(sequence):
        if isinstance(token, bool) or not isinstance(token, numbers.Integral):
            raise TypeError(f"{name}[{i}] must be a token id (an int), got {token!r} ({type(token).__name__})")


def texts(items: Any, name: str, what: str = "one sentence") -> list[str]:
    """``items`` as a list of strings (sentences or lines).

    :raises TypeError: naming ``name`` and the position of the first item that is not a string (``None``, a token
        list), or for one string given instead of a list of them.
    """
    if isinstance(items, (str, bytes)):
        raise TypeError(f"{name} must be a list (or other iterable) of sentences, got one {type(items).__name__} "
                        f"{items[:40]!r}; wrap a single sentence in a list: [{items[:40]!r}]")
    if not isinstance(items, Iterable):
        raise TypeError(f"{name} must be a list (or other iterable) of strings, got {items!r} ({type(items).__name__})")
    out = list(items)
    for i, entry in enumerate(out):
        if not isinstance(entry, str):
            raise TypeError(f"{name}[{i}] must be a string ({what}), got {entry!r} ({type(entry).__name__})")
    return out


def same_device(tensors: Mapping[str, torch.Tensor | None], device: torch.device, owner: str) -> None:
    """A ``ValueError`` naming the first tensor of ``tensors`` that is not on ``device`` (the network's), and for a
    network on the ``meta`` device (parameters without values), saying so."""
    if device.type == "meta":
        raise ValueError(f"{owner}: the network's parameters are on the meta device (shapes without values); "
                         "build it on a real device, or load weights into it first (module.to_empty(device=...) "
                         "then load_state_dict)")
    for name, tensor in tensors.items():
        if tensor is None or tensor.device == device:
            continue
        if tensor.device.type == "meta":
            raise ValueError(f"{owner}: {name} is on the meta device (a shape without values); give real data")
        raise ValueError(f"{owner}: {name} is on {tensor.device}, the network on {device}; move the batch first "
                         f"(batch.to({str(device)!r}))")


def weight_differences(have: Mapping[str, torch.Tensor], saved: Mapping[str, Any], strict: bool = True,
                       most: int = 4) -> list[str]:
    """How saved weights ``saved`` (a ``state_dict``) fail to fit a module whose own are ``have``, in words: weights
    of the same name and another shape, and with ``strict`` the weights either side lacks (``most`` names of each
    kind); empty when they fit.  What ``load_state_dict`` would raise, said before it raises."""

    def some(names: list[str]) -> str:
        return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")

    out = []
    shapes = [f"{k} is {tuple(v.shape)} there, {tuple(have[k].shape)} here" for k, v in saved.items()
              if k in have and isinstance(v, torch.Tensor) and tuple(v.shape) != tuple(have[k].shape)]
    if shapes:
        out.append(f"{len(shapes)} of another size ({'; '.join(shapes[:most])}"
                   + (f"; and {len(shapes) - most} more" if len(shapes) > most else "") + ")")
    if strict:
        missing = [k for k in have if k not in saved]
        extra = [k for k in saved if k not in have]
        if missing:
            out.append(f"{len(missing)} missing ({some(missing)})")
        if extra:
            out.append(f"{len(extra)} this module has no place for ({some(extra)})")
    return out
