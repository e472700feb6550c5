"""The old path of :mod:`pyro_attention.tasks.translation.runner` (experiment files: tables of translation
rows): every name it had, re-exported."""

# ruff: noqa: F401 - a re-export module
from __future__ import annotations

from pyro_attention.outputs import write_text as _write_text  # the runner's own writer until it used this one
from pyro_attention.tasks.translation.runner import (
    _LABEL,
    ROW_FIELDS,
    Log,
    _read_json,
    _train_pairs,
    _train_row,
    _write_json,
    entropy_curve,
    epoch_curves,
    evaluate_row,
    markdown_table,
    plot_curves,
    plot_rows,
    plot_table,
    read_experiment,
    row_config,
    run_experiment,
    validation_curve,
)
