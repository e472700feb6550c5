"""The old path of :mod:`pyro_attention.tasks.region_qa` (the region-QA experiment): every name it had, re-exported."""

# ruff: noqa: F401 - a re-export module
from __future__ import annotations

from pyro_attention.tasks.region_qa import (
    ALL_ROWS,
    ROWS,
    RegionQAConfig,
    Row,
    _cell,
    evaluate_pair,
    format_table,
    make_pair,
    row_label,
    rows_by_label,
    run_region_qa,
)
