"""The old path of :mod:`pyro_attention.tasks.translation.runner` (experiment files: tables of translation
rows) and of its curves and figures (now :mod:`pyro_attention.tasks.translation.curves`): every name it had,
re-exported."""

# ruff: noqa: F401 - a re-export module
from __future__ import annotations

from pyro_attention.outputs import write_text as _write_text  # the runner's own writer until it used this one
from pyro_attention.tasks.translation.curves import (
    entropy_curve,
    epoch_curves,
    plot_curves,
    plot_rows,
    plot_table,
    validation_curve,
)
from pyro_attention.tasks.translation.runner import (
    _LABEL,
    ROW_FIELDS,
    Log,
    _read_json,
    _train_pairs,
    _train_row,
    _write_json,
    evaluate_row,
    markdown_table,
    read_experiment,
    row_config,
    run_experiment,
)
