"""The old path of :mod:`pyro_attention.tasks.align` (alignment error rates, ``pyro-attention align``): every name
it had, re-exported."""

# ruff: noqa: F401 - a re-export module
from __future__ import annotations

from pyro_attention.aer import merge_json
from pyro_attention.data.text import data_dir as resolve_data_dir
from pyro_attention.tasks.align import *  # noqa: F403 - every public name
from pyro_attention.tasks.align import __all__
from pyro_attention.tasks.align.corpus import _lower, _read_side
from pyro_attention.tasks.align.networks import (
    _SEQ2SEQ_KEYS,
    _Bitext,
    _ibm1,
    _ibm1_rank,
    _training_text,
    _write,
)
