"""The old path of :mod:`pyro_attention.tasks.inspect` (a checkpoint's alignments): every name it had, re-exported."""

# ruff: noqa: F401 - a re-export module
from __future__ import annotations

from pyro_attention.tasks.inspect import (
    inspect_checkpoint,
)
