"""A runs folder's curves and figures: each row's validation perplexity and alignment entropies per epoch, read from
its ``history.csv`` (the clock running on across sittings), and the figure of them that ``pyro-attention experiment``
draws beside ``table.json`` (``experiment plot TABLE.json`` for a table merged by hand, e.g. ``docs/results/``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyro_attention.files import writing
from pyro_attention.tasks.translation.config import ALIGNMENT_FIELDS
from pyro_attention.tasks.translation.rowfiles import read_json, sittings_of


def epoch_curves(history_csv: Path) -> dict[str, list]:
    """A row's curves from one read of its ``history.csv``, under the row keys ``wall_s_per_epoch`` (the clock
    runs on across sittings: each sitting's ``seconds`` restarts at zero and is added to the previous sittings'
    total), ``val_ppl_per_epoch`` and, in nats per target token, ``val_prior_entropy_per_epoch``,
    ``val_posterior_entropy_per_epoch``, ``val_guide_entropy_per_epoch`` and ``val_guide_kl_per_epoch`` (``None``
    for an epoch that did not record it: trained before the trainer recorded it, a pair without that distribution,
    or a file without the column)."""
    epochs = _epoch_records(history_csv)
    return {"wall_s_per_epoch": [clock for clock, _ in epochs],
            "val_ppl_per_epoch": [float(rec["val_ppl"]) for _, rec in epochs],
            **{f"val_{name}_per_epoch": [float(rec[f"val_{name}"]) if rec.get(f"val_{name}") else None
                                         for _, rec in epochs] for name in ALIGNMENT_FIELDS.values()}}


def validation_curve(history_csv: Path) -> tuple[list[float], list[float]]:
    """``(wall-clock seconds, validation PPL)`` after every epoch of a row's ``history.csv``
    (:func:`epoch_curves`)."""
    curves = epoch_curves(history_csv)
    return curves["wall_s_per_epoch"], curves["val_ppl_per_epoch"]


def entropy_curve(history_csv: Path) -> list[float | None]:
    """The validation prior entropy after every epoch of a row's ``history.csv`` (:func:`epoch_curves`)."""
    return epoch_curves(history_csv)["val_prior_entropy_per_epoch"]


#: the validation columns :func:`curve_table` prints where a row recorded them, and their headers
CURVE_COLUMNS = {"val_prior_entropy": "H(prior)", "val_posterior_entropy": "H(exact posterior)",
                 "val_guide_entropy": "H(guide)", "val_guide_kl": "KL(guide ‖ posterior)"}


def curve_table(history_csv: Path) -> str | None:
    """A row's validation after every epoch of its ``history.csv`` as a markdown table: epoch, step, learning
    rate, validation perplexity (``**`` a new best; ``~`` a bound, not exact), the alignment entropies and the
    guide's KL in nats per target token where the row recorded them, and the training clock in hours, summed over
    sittings (:func:`epoch_curves`).  ``None`` when no epoch has finished."""
    epochs = _epoch_records(history_csv)
    if not epochs:
        return None
    shown = [key for key in CURVE_COLUMNS if any(rec.get(key) for _, rec in epochs)]
    lines = ["| epoch | step | lr | val PPL | " + "".join(f"{CURVE_COLUMNS[k]} | " for k in shown) + "clock [h] |",
             "|---|---|---|---|" + "---|" * len(shown) + "---|"]
    best = float("inf")
    for clock, rec in epochs:
        ppl = float(rec["val_ppl"])
        text = ("" if rec.get("val_exact", "True") == "True" else "~") + f"{ppl:.3f}"
        if ppl < best:
            best, text = ppl, f"**{text}**"
        cells = "".join(f"{float(rec[k]):.3f} | " if rec.get(k) else "- | " for k in shown)
        lines.append(f"| {rec['epoch']} | {rec['step']} | {float(rec['lr']):.3g} | {text} | {cells}"
                     f"{clock / 3600:.2f} |")
    return "\n".join(lines)


def _epoch_records(history_csv: Path) -> list[tuple[float, dict[str, str]]]:
    """``(clock, row)`` for every epoch row of ``history.csv``, the clock summed over sittings."""
    import csv

    with open(history_csv, newline="", encoding="utf-8") as f:
        sittings = sittings_of((float(rec["seconds"]), rec) for rec in csv.DictReader(f))
    offset, epochs = 0.0, []
    for sitting in sittings:
        epochs += [(offset + seconds, rec) for seconds, rec in sitting if rec["kind"] == "epoch"]
        offset += sitting[-1][0]
    return epochs


def plot_curves(runs: Path, labels: Sequence[str], path: Path) -> Path | None:
    """Validation perplexity against epochs and wall-clock training time for every row with a ``history.csv``
    (:func:`plot_rows` of their curves), one PNG; ``None`` when no row has finished an epoch."""
    rows = []
    for label in labels:
        if (runs / label / "history.csv").is_file():
            rows.append({"label": label, **epoch_curves(runs / label / "history.csv")})
    return plot_rows(rows, path, f"validation perplexity per epoch: {runs.name}")


def curve_label(row: dict[str, Any]) -> str:
    """A row's legend entry: its label, marked with the device it ran on when that is not the CPU, and where the row
    says it did not finish (``"finished": false``)."""
    marks = [str(row["device"])] if row.get("device") not in (None, "cpu") else []
    marks += ["unfinished"] if row.get("finished") is False else []
    return f"{row.get('label')} ({', '.join(marks)})" if marks else str(row.get("label"))


def plot_rows(rows: Sequence[dict[str, Any]], path: Path, title: str) -> Path | None:
    """The validation curves of table rows (``val_ppl_per_epoch``; ``wall_s_per_epoch`` and
    ``val_prior_entropy_per_epoch`` where they were measured), one PNG with three panels: perplexity against the
    epoch (every row with a curve) and against wall-clock time (the rows whose clock is known for every epoch),
    and the prior's entropy (solid) and the guide's (dashed, ``val_guide_entropy_per_epoch``) against the epoch (the
    epochs that recorded them).  ``None`` when no row has a curve.

    :raises ValueError: naming the row whose ``wall_s_per_epoch`` and ``val_ppl_per_epoch`` differ in length.
    """
    curves = [r for r in rows if r.get("val_ppl_per_epoch")]
    if not curves:
        return None
    for r in curves:
        walls = r.get("wall_s_per_epoch")
        if walls is not None and len(walls) != len(r["val_ppl_per_epoch"]):
            raise ValueError(f"row {r.get('label')!r}: wall_s_per_epoch has {len(walls)} entries, "
                             f"val_ppl_per_epoch {len(r['val_ppl_per_epoch'])}")
    import matplotlib
    import matplotlib.ticker
    from matplotlib.figure import Figure

    fig = Figure(figsize=(16, 4.5))
    by_epoch, by_clock, entropy = fig.subplots(1, 3)
    by_clock.sharey(by_epoch)
    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(curves):
        ppls, colour = r["val_ppl_per_epoch"], colours[i % len(colours)]
        label = curve_label(r)
        by_epoch.plot(range(1, len(ppls) + 1), ppls, marker="o", markersize=3, color=colour, label=label)
        if r.get("wall_s_per_epoch"):
            by_clock.plot([x / 60 for x in r["wall_s_per_epoch"]], ppls, marker="o", markersize=3, color=colour,
                          label=label)
        for key, style in (("val_prior_entropy_per_epoch", "-"), ("val_guide_entropy_per_epoch", "--")):
            measured = [(e, h) for e, h in enumerate(r.get(key) or [], 1) if h is not None]
            if measured:
                entropy.plot(*zip(*measured, strict=True), linestyle=style, marker="o", markersize=3, color=colour,
                             label=label if style == "-" else None)
    by_epoch.set_xlabel("epoch")
    by_clock.set_xlabel("training wall-clock time [min] (validation included)")
    totals = [r["wall_s_per_epoch"][-1] for r in curves if r.get("wall_s_per_epoch")]
    if totals and max(totals) > 20 * max(min(totals), 1e-9):  # rows of different devices: minutes and hours
        by_clock.set_xscale("log")
        by_clock.set_xlabel("training wall-clock time [min, log scale] (validation included)")
    by_epoch.set_ylabel("validation perplexity (exact; relaxed: bound)")
    for ax in (by_epoch, by_clock):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.grid(True, which="both", alpha=0.3)
    entropy.set_xlabel("epoch")
    entropy.set_ylabel("validation entropy [nats per target token]\nprior: solid; guide q(z | x, y): dashed")
    entropy.grid(True, alpha=0.3)
    by_epoch.legend(fontsize=8)
    for ax, empty in ((by_clock, "no row with a clock for every epoch"),
                      (entropy, "no row recorded its prior entropy per epoch")):
        if not ax.lines:
            ax.text(0.5, 0.5, empty, ha="center", transform=ax.transAxes)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.png")
    try:
        with writing(path):
            fig.savefig(tmp, dpi=100)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def plot_table(table: str | os.PathLike, path: str | os.PathLike | None = None) -> Path | None:
    """:func:`plot_rows` of a ``table.json`` (a list of rows, e.g. ``docs/results/table1-multi30k.json``), to
    ``path`` (default: beside it, ``<name>-val_ppl.png``).

    :raises ValueError: naming the file when it is not a list of rows.
    """
    from pyro_attention.data.corpora import require_file

    table = require_file(table, "table")
    rows = read_json(table, None)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{table}: a table is a JSON list of rows (objects), as the runner's table.json")
    path = Path(path) if path is not None else table.with_name(f"{table.stem}-val_ppl.png")
    return plot_rows(rows, path, f"validation perplexity per epoch: {table.name}")
