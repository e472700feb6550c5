"""``pyro-attention experiment status``: where every row of an experiment file stands, read from its run folder
alone (``result.json``, ``trained.json``, ``last.pt``, ``sittings.json``, ``history.csv``), so it is safe while rows
train."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyro_attention.tasks.translation import TranslationConfig
from pyro_attention.tasks.translation.checkpoints import read_checkpoint
from pyro_attention.tasks.translation.curves import curve_table
from pyro_attention.tasks.translation.rowfiles import (
    RESULT_KEYS,
    TRAINED_KEYS,
    read_record,
    read_sittings,
    run_busy,
    unrecorded_sittings,
)
from pyro_attention.tasks.translation.runner import chosen_rows, ppl_cell, read_experiment, row_config

__all__ = ["experiment_curves", "experiment_status", "row_status", "status_table"]


def experiment_status(
    path: str | os.PathLike, runs: str | os.PathLike, *, only: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Where every row of the experiment file ``path`` stands in ``runs``, read from its files alone (nothing is
    trained or evaluated, so it is safe while rows train): one :func:`row_status` per row (``only``: these); a
    ``runs`` folder that does not exist is an error."""
    return [row_status(config, label) for config, label in _row_configs(path, runs, only)]


def _row_configs(
    path: str | os.PathLike, runs: str | os.PathLike, only: Sequence[str] | None
) -> list[tuple[TranslationConfig, str]]:
    """``(config, label)`` of every chosen row of the experiment file ``path`` in ``runs``, which must exist."""
    shared, rows = read_experiment(path)
    chosen = chosen_rows(path, rows, only)
    if not Path(runs).is_dir():  # most likely a mistyped --out: said, rather than every row "not started"
        raise ValueError(f"{runs}: no such runs folder (no row of {path} has started there)")
    return [(row_config(shared, row, Path(runs)), row["label"]) for row in chosen]


def experiment_curves(
    path: str | os.PathLike, runs: str | os.PathLike, *, only: Sequence[str] | None = None
) -> str:
    """Every row's validation after each epoch so far (:func:`~pyro_attention.tasks.translation.curves.curve_table`
    of its ``history.csv``), one markdown table per row under its label, read from its files alone (safe while
    rows train); a row without a finished epoch, or not started, says so."""
    parts = []
    for config, label in _row_configs(path, runs, only):
        history = config.out_dir / "history.csv"
        said = (curve_table(history) or "no epoch finished yet") if history.is_file() else "not started"
        parts.append(f"{label}:\n\n{said}")
    return "\n\n".join(parts)


def row_status(config: TranslationConfig, label: str) -> dict[str, Any]:
    """Where one row stands in its folder ``config.out_dir``.

    ``state`` is ``"finished"`` (``result.json``), ``"trained"`` (``trained.json``: its evaluation is still to
    come), ``"training"`` (a ``last.pt`` to resume), ``"started"`` (a first epoch under way: a ``history.csv`` and
    no ``last.pt`` yet), ``"not started"`` or ``"unreadable"`` (a ``last.pt`` that cannot be read; ``error`` says
    why).  With it: ``epochs`` done of ``max_epochs``; where a half-trained row resumes
    (``position`` batches into the next epoch, of ``epoch_batches``; ``step``); ``best_val_ppl`` at ``best_epoch``
    (counted from 1), the last epoch's ``last_val_ppl`` and validation ``prior_entropy``; ``bad_epochs`` of
    ``patience`` (epochs without improvement: early stopping at ``patience``); ``lr``; ``wall_s`` and the number of
    ``sittings`` so far (``sittings.json``, and for a half-trained row any sitting it does not record yet -- one
    killed outright, or the one running now -- counted up to its ``last.pt``); ``paused_result`` when
    ``--evaluate-paused`` left one; for a finished row ``test_ppl``, ``ppl_exact``, ``test_ppl_mc_se`` and
    ``ppl_reliable`` (an estimate's Monte Carlo error and whether it can be trusted) and ``bleu``; and the last
    line of ``history.csv``, which a running row appends after every step: ``logged_epoch`` (from 1),
    ``logged_step``, ``logged_kind`` (a ``"step"`` or an ``"epoch"`` line) and ``logged_age_s`` (seconds since the
    file was written: a few for a row training now), with ``s_per_step``, the pace of its last 50 steps, and for a
    step line of a half-trained row ``logged_batch``, the batch of its epoch that step was; ``busy``: whether a
    process holds the folder's ``.lock`` now (training or evaluating the row; ``None`` where that cannot be told).
    ``None`` where a state has no such number.
    """
    folder = config.out_dir
    sittings = read_sittings(folder)
    status: dict[str, Any] = {
        "label": label, "state": "not started", "error": None, "epochs": 0, "max_epochs": config.epochs,
        "position": 0, "epoch_batches": None, "step": 0, "best_val_ppl": None, "best_epoch": None,
        "last_val_ppl": None, "prior_entropy": None, "bad_epochs": None, "patience": config.patience, "lr": None,
        "wall_s": sum(s["wall_s"] for s in sittings), "sittings": len(sittings),
        "paused_result": (folder / "result-paused.json").is_file(), "test_ppl": None, "ppl_exact": None,
        "test_ppl_mc_se": None, "ppl_reliable": None, "bleu": None, "stopped_early": None, "logged_batch": None,
        **_last_logged(folder / "history.csv"),
        "busy": run_busy(folder),
    }  # fmt: skip
    row = read_record(folder / "result.json", RESULT_KEYS)
    trained = read_record(folder / "trained.json", TRAINED_KEYS)
    if row is not None:
        curve = row.get("val_ppl_per_epoch") or [None]
        entropy = (row.get("val_prior_entropy_per_epoch") or [None])[-1]
        status.update(state="finished", epochs=row["epochs"], best_val_ppl=row["val_ppl"],
                      best_epoch=row["best_epoch"], last_val_ppl=curve[-1], prior_entropy=entropy,
                      test_ppl=row["test_ppl"], ppl_exact=row["ppl_exact"], test_ppl_mc_se=row.get("test_ppl_mc_se"),
                      ppl_reliable=row.get("ppl_reliable", True), bleu=row["bleu"],
                      stopped_early=row["stopped_early"])
    elif trained is not None:
        status.update(state="trained", epochs=trained["epochs"], best_val_ppl=trained["best_val_ppl"],
                      best_epoch=trained["best_epoch"], step=trained["steps"], stopped_early=trained["stopped_early"])
    if status["state"] in ("finished", "trained"):
        return status
    if not (folder / "last.pt").is_file():
        return {**status, "state": "started" if status["logged_step"] else "not started"}
    try:
        state = read_checkpoint(folder / "last.pt")
    except ValueError as error:  # a damaged file: said in the row, the other rows still listed
        return {**status, "state": "unreadable", "error": str(error)}
    epochs = state["history"]["epochs"]
    lost = unrecorded_sittings(sittings, state)  # a killed sitting, or the one running now, to its last.pt
    trainer, plateau = state["trainer"], state["plateau"]
    status.update(state="training", epochs=int(trainer["epoch"]), position=int(trainer["position"]),
                  step=int(trainer["step"]), bad_epochs=int(plateau["bad"]), lr=float(plateau["lr"]),
                  wall_s=status["wall_s"] + sum(s["wall_s"] for s in lost), sittings=len(sittings) + len(lost))
    if state["epoch_batches"]:
        status.update(epoch_batches=int(state["epoch_batches"]))
        if status["logged_kind"] == "step":  # every epoch has the same batches, so the step says where it is
            status.update(logged_batch=status["logged_step"] - (status["logged_epoch"] - 1) * status["epoch_batches"])
    if epochs["val_ppl"]:  # before the first validation best_metric is still the trainer's infinity
        status.update(best_val_ppl=float(plateau["best"]),
                      best_epoch=int(plateau["best_epoch"]) + 1, last_val_ppl=epochs["val_ppl"][-1],
                      prior_entropy=(epochs["val_prior_entropy"] or [None])[-1])
    return status


def _last_logged(history_csv: Path, window: int = 50) -> dict[str, Any]:
    """``logged_epoch``, ``logged_step``, ``logged_kind`` (``"step"`` or ``"epoch"``) and ``logged_age_s`` of the
    last whole line of ``history_csv`` (a line cut short by a kill is passed over; ``None`` when there is no such
    file or line), and ``s_per_step``: the mean seconds between the last ``window`` pairs of successive training
    steps (a validation between them, or a new sitting, is not counted; ``None`` before two steps in a row)."""
    import csv
    from collections import deque

    last, previous, gaps = None, None, deque(maxlen=window)
    if history_csv.is_file():
        with open(history_csv, newline="", encoding="utf-8") as f:
            for line in csv.DictReader(f):
                try:
                    last = int(line.get("epoch") or ""), int(line.get("step") or ""), line.get("kind")
                    now = (last[1], float(line.get("seconds") or "")) if line.get("kind") == "step" else None
                except ValueError:
                    previous = None
                    continue
                if now and previous and now[0] == previous[0] + 1 and now[1] > previous[1]:
                    gaps.append(now[1] - previous[1])
                previous = now
    if last is None:
        return {"logged_epoch": None, "logged_step": None, "logged_kind": None, "logged_age_s": None,
                "s_per_step": None}
    return {"logged_epoch": last[0], "logged_step": last[1], "logged_kind": last[2],
            "logged_age_s": max(time.time() - history_csv.stat().st_mtime, 0.0),
            "s_per_step": sum(gaps) / len(gaps) if gaps else None}


def _age(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else (
        f"{seconds / 3600:.1f} h")


def status_table(rows: list[dict[str, Any]]) -> str:
    """:func:`experiment_status`'s rows as a markdown table."""
    lines = [
        "| row | state | epochs | best val PPL (epoch) | last val PPL | H(prior) val | lr | no gain / patience | "
        "test PPL | BLEU | wall [h] | sittings | last logged |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def num(x: Any, fmt: str = ".3f") -> str:
        return "-" if x is None else format(x, fmt)

    for r in rows:
        state = r["state"]
        if state == "training":
            state = (f"resumes in epoch {r['epochs'] + 1} at batch {r['position']}"
                     + (f"/{r['epoch_batches']}" if r["epoch_batches"] else "")
                     if r["position"] else f"resumes after epoch {r['epochs']}")
            if _live(r):  # where its last.pt stands is where it would resume if stopped outright now
                state = "training now; last.pt " + state.removeprefix("resumes ")
        elif state in ("trained", "finished"):
            state += " (stopped early)" if r["stopped_early"] else " (epoch limit)"
            if r["state"] == "trained":
                state += ", being evaluated now" if r["busy"] else ", not yet evaluated"
        elif state == "started":
            state = ("first epoch stopped before its first last.pt (starts afresh)" if r["busy"] is False
                     else "first epoch under way, no last.pt yet")
        elif state == "unreadable":
            state = f"unreadable: {r['error']}"
        if r["paused_result"] and r["state"] != "finished":
            state += "; evaluated while paused"
        best = "-" if r["best_val_ppl"] is None else f"{r['best_val_ppl']:.3f} ({r['best_epoch']})"
        gain = "-" if r["bad_epochs"] is None else f"{r['bad_epochs']} / {r['patience']}"
        logged = "-" if r["logged_step"] is None else (
            f"step {r['logged_step']} (epoch {r['logged_epoch']}"
            + ("" if r["logged_batch"] is None else f", batch {r['logged_batch']}/{r['epoch_batches']}")
            + f"), {_age(r['logged_age_s'])} ago"
            + ("" if r["s_per_step"] is None else f", {_pace(r['s_per_step'])} s/step") + _epoch_end(r))
        test = ppl_cell(r)
        lines.append(
            f"| {r['label']} | {state} | {r['epochs']} / {r['max_epochs']} | {best} | {num(r['last_val_ppl'])} | "
            f"{num(r['prior_entropy'])} | {num(r['lr'], '.3g')} | {gain} | {test} | {num(r['bleu'], '.2f')} | "
            f"{r['wall_s'] / 3600:.2f} | {r['sittings']} | {logged} |"
        )
    return "\n".join(lines)


def _pace(seconds: float) -> str:
    """Seconds per step to two significant digits below 10 (``0.62``, ``5.3``), to a tenth above (``123.4``)."""
    return f"{seconds:.2g}" if seconds < 10 else f"{seconds:.1f}"


def _live(row: dict[str, Any]) -> bool:
    """Whether a half-trained row is training now: a process holds its folder's lock (:func:`run_busy`), or where
    that cannot be told, its last step was logged within five steps' time, or two minutes."""
    if row["busy"] is not None:
        return row["busy"]
    pace = row["s_per_step"]
    return (row["logged_kind"] == "step" and pace is not None and row["logged_age_s"] is not None
            and row["logged_age_s"] <= max(120.0, 5 * pace))


def _epoch_end(row: dict[str, Any]) -> str:
    """``, epoch ends in ~N min`` at the row's pace for a row training now (:func:`_live`); validation and
    evaluation not counted.  Empty otherwise."""
    batch = row["logged_batch"]
    if batch is None or not _live(row):
        return ""
    return f", epoch ends in ~{_age((row['epoch_batches'] - batch) * row['s_per_step'])}"
