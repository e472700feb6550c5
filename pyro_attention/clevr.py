"""The old path of :mod:`pyro_attention.tasks.clevr` (the CLEVR experiment): every name it had, re-exported."""

# ruff: noqa: F401 - a re-export module
from __future__ import annotations

from pyro_attention.tasks.clevr import (
    PAPER_VQA,
    ClevrConfig,
    ClevrResult,
    format_clevr,
    format_paper_table,
    resolve_data_dir,
    run_clevr,
)
