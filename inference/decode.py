"""The old path of greedy and beam-search decoding, which moved to
:mod:`pyro_attention.tasks.translation.decoding` (#16): decoding a translation is a task's, and ``inference/``
knows no task.  Every name of that module (``translate``, ``greedy``, ``DECODE_RULES``, ``IncrementalDecoder``,
private ones too) is still read here, resolved on first use so that importing ``pyro_attention.inference`` imports
no task (``tests/test_style.py::test_layers`` lists this module as the one such alias).
"""

from __future__ import annotations

import importlib
from typing import Any

from pyro_attention.pair import DECODE_RULES  # the pairs' rules: the command line's choices import no task

# the other names are resolved by __getattr__
__all__ = ["DECODE_RULES", "IncrementalDecoder", "SourceMemory", "greedy", "translate"]  # noqa: F822

_NEW_PATH = "pyro_attention.tasks.translation.decoding"


def __getattr__(name: str) -> Any:
    try:
        return getattr(importlib.import_module(_NEW_PATH), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(dir(importlib.import_module(_NEW_PATH))))
