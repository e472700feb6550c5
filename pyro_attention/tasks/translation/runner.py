"""``pyro-attention experiment``: a table of translation rows, trained to convergence, resumable row by row.

An experiment file (TOML or JSON) has one table of shared settings and a list of rows; every key is an option of
:class:`~pyro_attention.tasks.translation.TranslationConfig` (the ``train`` flags), a row's keys win over the shared
ones, and every row has a unique ``label``::

    [shared]
    data = "multi30k"
    epochs = 30        # an upper bound: early stopping on validation perplexity (patience) ends a row
    patience = 3
    lr_decay = 0.5     # on a plateau

    [[rows]]
    label = "soft"
    model = "soft"

    [[rows]]
    label = "marginal-product"
    model = "marginal"
    output = "product"

Each row lives in ``RUNS/<label>/`` (the trainer's ``last.pt``, ``best.pt``, ``history.csv``), and

* a finished row (``result.json`` there) is skipped;
* a trained row (``trained.json``) is only evaluated;
* a half-trained row (``last.pt``) resumes where it stopped -- bit-exactly, as ``train --resume`` does;
* ``max_epochs`` limits the epochs one call trains per row (a table built over several sittings);
* ``evaluate_paused`` trains nothing and evaluates each half-trained row's ``best.pt`` as it is, into
  ``RUNS/<label>/result-paused.json`` (``"finished": false``), so a sitting that must end -- its machine to be
  replaced, say -- keeps what the row has reached; the row still resumes later, and its ``result.json`` then
  supersedes it;
* :func:`~pyro_attention.tasks.translation.status.experiment_status` (``experiment status``) reads where every row
  stands and trains nothing.

A process training or evaluating a row holds the folder's ``.lock`` (a second process working on the same row is
refused, naming the first one's PID; ``experiment status`` reads the lock to tell a row being worked on now).

A trained row is evaluated from ``best.pt``: validation and test perplexity (exact where the pair allows,
:func:`~pyro_attention.tasks.translation.evaluate`), BLEU with beam 5 (sacreBLEU on detokenised output against the
raw references, signature stored; and ``bleu_tok_none``: the tokenised output against the tokenised reference
with ``tokenize="none"``, as a toolkit trained on the tokenised text is scored), K-max (K=5) BLEU for the
categorical rows, and the prior's entropy.  ``RUNS/table.json`` (a list of rows) and ``RUNS/table.md`` are
rewritten after every finished row.  Every file is written atomically.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyro_attention.files import write_text, writing
from pyro_attention.inference.distributed import init_from_env
from pyro_attention.inference.evaluate import estimate_text
from pyro_attention.pair import Rule
from pyro_attention.tasks.translation import (
    TrainingInterrupted,
    TranslationConfig,
    evaluate,
    load_checkpoint,
    load_split,
    train,
)
from pyro_attention.tasks.translation.checkpoints import read_checkpoint
from pyro_attention.tasks.translation.config import ALIGNMENT_FIELDS, normalise_keys, toml_module
from pyro_attention.tasks.translation.curves import curve_label, epoch_curves, plot_curves
from pyro_attention.tasks.translation.evaluation import Evaluation
from pyro_attention.tasks.translation.rowfiles import (
    RESULT_KEYS,
    TRAINED_KEYS,
    evaluated_result,
    read_json,
    read_record,
    read_sittings,
    run_lock,
    unrecorded_sittings,
    write_json,
)
from pyro_attention.tasks.translation.translating import BeamSearch, DecodeCache, checkpoint_key, decode_batches

Log = Callable[[str], None]
#: the fields of one row of ``table.json``
ROW_FIELDS = (
    "label", "pair", "estimator", "output", "attention_type", "train_sentences", "val_ppl", "test_ppl", "ppl_exact",
    "ppl_method", "test_ppl_mc_se", "test_khat_max", "ppl_reliable", "bleu", "bleu_signature", "bleu_tok_none",
    "bleu_kmax5", "prior_entropy", "posterior_entropy",
    "guide_entropy", "guide_kl", "epochs", "best_epoch", "stopped_early", "wall_s", "tokens_per_s", "device",
    "threads", "decode_sentences_per_s", "finished",
)  # fmt: skip
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=,+-]*$")


class ExperimentFileError(ValueError):
    """The experiment file, or the rows asked of it, cannot be run: found before anything is trained or read from
    the runs folder, so the command line treats it as an error of the call (exit status 2, as ``train --config``'s
    bad file)."""


def read_experiment(path: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The shared settings and the rows of an experiment file, every row checked as a ``TranslationConfig``.

    :raises ExperimentFileError: naming the file (and the row) for a missing or unreadable file, a missing,
        duplicate or unsafe label, an unknown key or a bad value.
    """
    from pyro_attention.data.corpora import require_file

    try:
        path = require_file(path, "experiment file")
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text) if path.suffix.lower() == ".json" else toml_module().loads(text)
    except FileNotFoundError as e:  # require_file's message names the file and what is wrong with it
        raise ExperimentFileError(str(e)) from None
    except OSError as e:
        raise ExperimentFileError(f"{path}: {e.strerror} (errno {e.errno})") from None
    except ValueError as e:  # not UTF-8, not TOML / JSON
        raise ExperimentFileError(f"{path}: {e}") from None
    unknown = set(raw) - {"shared", "rows"}
    if unknown or not isinstance(raw.get("rows"), list) or not raw["rows"]:
        raise ExperimentFileError(f"{path}: an experiment file holds a table [shared] and a non-empty list [[rows]]"
                                  + (f"; unknown top-level keys {sorted(unknown)}" if unknown else ""))
    try:
        shared = normalise_keys(dict(raw.get("shared", {})), unlisted=("out",))
    except ValueError as e:
        raise ExperimentFileError(f"{path}: [shared]: {e}") from None
    rows, seen = [], set()
    for i, row in enumerate(raw["rows"], 1):
        row = dict(row)
        label = row.pop("label", None)
        where = f"{path}: row {i}" + (f" ({label!r})" if label else "")
        if not isinstance(label, str) or not _LABEL.match(label):
            raise ExperimentFileError(f"{where}: needs a label of letters, digits and _ . = , + - (it names the "
                                      f"row's folder), got {label!r}")
        if label in seen:
            raise ExperimentFileError(f"{where}: the label {label!r} is used twice")
        seen.add(label)
        if "out" in row or "out" in shared:
            raise ExperimentFileError(f"{where}: 'out' is set by the runner (RUNS/<label>); remove it")
        try:
            settings = normalise_keys(row, unlisted=("out",))
            TranslationConfig.from_dict({**shared, **settings})
        except (ValueError, TypeError) as e:
            raise ExperimentFileError(f"{where}: {e}") from None
        rows.append({"label": label, **settings})
    return shared, rows


def row_config(shared: dict[str, Any], row: dict[str, Any], runs: Path,
               overrides: dict[str, Any] | None = None) -> TranslationConfig:
    """The row's ``TranslationConfig``, writing to ``runs / label``; ``overrides`` (e.g. ``{"device": "cuda"}``)
    win over the file's shared and row settings."""
    settings = {k: v for k, v in row.items() if k != "label"}
    return TranslationConfig.from_dict({**shared, **settings, **(overrides or {}), "out": str(runs / row["label"])})


def run_experiment(
    path: str | os.PathLike,
    runs: str | os.PathLike,
    *,
    only: Sequence[str] | None = None,
    max_epochs: int | None = None,
    progress: bool = True,
    log: Log | None = print,
    bleu: bool = True,
    overrides: dict[str, Any] | None = None,
    evaluate_paused: bool = False,
) -> list[dict[str, Any]]:
    """Train, evaluate and tabulate every row of the experiment file ``path`` in ``runs`` (see the module doc).

    :param only: labels of the rows to work on (default: all); the table lists every finished row, and every
        row evaluated while paused (``"finished": false``) that has not finished since.
    :param max_epochs: train at most this many epochs per row in this call (``None``: to the end).
    :param evaluate_paused: train nothing; evaluate the ``best.pt`` of every half-trained row as it is.
    :param overrides: settings that win over the file's for every row, e.g. ``{"device": "cuda", "threads": 4}``
        (only settings a row may change when it resumes; a structural one is refused as ``train --resume`` does).
    :returns: the finished rows (``table.json``'s content).
    """
    log = log or (lambda _: None)
    if evaluate_paused and max_epochs is not None:
        raise ValueError(f"max_epochs: {max_epochs} epochs of training, but --evaluate-paused trains nothing (drop one "
                         "of them)")
    shared, rows = read_experiment(path)
    chosen = chosen_rows(path, rows, only)
    runs = Path(runs)
    with writing(runs):  # "cannot write RUNS: ..." rather than the bare reason
        runs.mkdir(parents=True, exist_ok=True)
    for row in chosen:
        config = row_config(shared, row, runs, overrides)
        folder = config.out_dir
        if (folder / "result.json").is_file():
            log(f"[{row['label']}] finished: {folder / 'result.json'}")
            continue
        if evaluate_paused and not (folder / "trained.json").is_file() and not (
                (folder / "last.pt").is_file() and (folder / "best.pt").is_file()):
            log(f"[{row['label']}] not started: nothing to evaluate")  # and no folder made for it
            continue
        with run_lock(folder) if init_from_env()[0] == 0 else contextlib.nullcontext():  # trained and evaluated
            _work_on_row(config, folder, row["label"], max_epochs, progress, log, bleu, evaluate_paused)
    table = []
    for r in rows:  # a finished row's result, else the one evaluated while it was paused
        found = evaluated_result(runs / r["label"])
        if found is not None:
            table.append(read_record(found, RESULT_KEYS))
    write_json(runs / "table.json", table)
    write_text(runs / "table.md", markdown_table(table) + "\n")
    figure = plot_curves(runs, [r["label"] for r in rows], runs / "val_ppl.png")
    log(f"{len(table)} of {len(rows)} rows finished; table: {runs / 'table.json'}, {runs / 'table.md'}"
        + (f"; curves: {figure}" if figure else ""))
    return table


def _work_on_row(config: TranslationConfig, folder: Path, label: str, max_epochs: int | None, progress: bool,
                 log: Log, bleu: bool, evaluate_paused: bool) -> None:
    """Train one row not yet finished (or resume it) and evaluate it once trained; with ``evaluate_paused``,
    evaluate a half-trained row's ``best.pt`` as it is instead."""
    if not (folder / "trained.json").is_file():
        if evaluate_paused:  # a row with last.pt and best.pt (run_experiment passes over the others)
            log(f"[{label}] evaluating the paused row's {folder / 'best.pt'} (unfinished)")
            write_json(folder / "result-paused.json",
                        evaluate_row(config, folder, label, bleu=bleu, trained=_paused(folder)))
            return
        if not _train_row(config, folder, max_epochs, progress, log, label):
            return
    log(f"[{label}] evaluating {folder / 'best.pt'}")
    write_json(folder / "result.json", evaluate_row(config, folder, label, bleu=bleu))


def chosen_rows(
    path: str | os.PathLike, rows: list[dict[str, Any]], only: Sequence[str] | None
) -> list[dict[str, Any]]:
    """The rows labelled in ``only`` (all when it is empty), in the file's order; a label the file lacks is an error
    naming the file, the closest labels and all the rows (:class:`ExperimentFileError`)."""
    labels = [r["label"] for r in rows]
    missing = [x for x in only or () if x not in labels]
    if missing:
        close = [m for x in missing for m in difflib.get_close_matches(x, labels, n=1)]
        raise ExperimentFileError(f"{path}: no row labelled {missing}"
                                  + (f" (did you mean {close}?)" if close else "") + f"; the rows are {labels}")
    return [r for r in rows if not only or r["label"] in only]


def _train_row(config: TranslationConfig, folder: Path, max_epochs: int | None, progress: bool, log: Log,
               label: str) -> bool:
    """Train (or resume) one row; ``True`` when its training is complete."""
    resume = (folder / "last.pt").is_file()
    done = 0
    if resume:
        state = read_checkpoint(folder / "last.pt")  # no network built just to read a counter
        done = int(state["trainer"]["epoch"])
        recorded = read_sittings(folder)
        lost = unrecorded_sittings(recorded, state)
        if lost:
            log(f"[{label}] {len(lost)} sitting(s) ended without a record (killed, not stopped): their "
                f"{sum(s['wall_s'] for s in lost):.0f} s up to the last checkpoint are added to sittings.json")
            write_json(folder / "sittings.json", recorded + lost)
    target = config.epochs if max_epochs is None else min(config.epochs, done + max_epochs)
    log(f"[{label}] {'resuming at epoch ' + str(done) if resume else 'training'} (this sitting: up to epoch "
        f"{target} of {config.epochs})")
    start = time.perf_counter()
    try:
        result = train(config.replace(epochs=target), progress, resume=resume, log=lambda m: log(f"[{label}] {m}"))
    except TrainingInterrupted as stop:  # the sitting's time still counts
        sittings = read_sittings(folder)
        sittings.append({"wall_s": time.perf_counter() - start, "until_epoch": stop.epoch, "until_step": stop.step,
                         "threads": config.threads, "matmul_precision": config.matmul_precision,
                         "autocast": config.autocast, "interrupted": stop.signal_name})
        write_json(folder / "sittings.json", sittings)
        raise
    sittings = read_sittings(folder)
    steps = result.history["steps"]
    sittings.append({"wall_s": time.perf_counter() - start, "until_epoch": result.epoch, "until_step": result.step,
                     "threads": config.threads, "matmul_precision": config.matmul_precision,
                     "autocast": config.autocast})
    write_json(folder / "sittings.json", sittings)
    finished = result.stopped_early or result.epoch >= config.epochs
    if finished:
        write_json(folder / "trained.json", {
            "epochs": result.epoch, "best_epoch": result.best_epoch + 1, "best_val_ppl": result.best_metric,
            "stopped_early": result.stopped_early, "steps": result.step, "target_tokens": sum(steps["tokens"]),
            "wall_s": sum(s["wall_s"] for s in sittings),
        })
    else:
        log(f"[{label}] paused after epoch {result.epoch}; run the same command again to continue")
    return finished


def _paused(folder: Path) -> dict[str, Any]:
    """What ``trained.json`` says of a finished row, for a half-trained one: from its ``last.pt`` (epochs, best
    epoch, steps, target tokens) and ``sittings.json`` (wall-clock seconds), ``"finished": false``."""
    state = read_checkpoint(folder / "last.pt")
    sittings = read_sittings(folder)
    sittings += unrecorded_sittings(sittings, state)
    trainer, plateau = state["trainer"], state["plateau"]
    return {"epochs": int(trainer["epoch"]), "best_epoch": int(plateau["best_epoch"]) + 1,
            "best_val_ppl": float(plateau["best"]), "stopped_early": False, "steps": int(trainer["step"]),
            "target_tokens": sum(state["history"]["steps"]["tokens"]),
            "wall_s": sum(s["wall_s"] for s in sittings), "finished": False}


def evaluate_row(config: TranslationConfig, folder: Path, label: str, bleu: bool = True,
                 trained: dict[str, Any] | None = None) -> dict[str, Any]:
    """The table row of a trained row folder (``best.pt``, ``trained.json``).

    :param trained: what to say of its training instead of ``trained.json`` (a paused row: :func:`_paused`,
        whose ``"finished": false`` the row carries)."""
    import sacrebleu

    from pyro_attention import metrics

    trained = trained if trained is not None else read_record(folder / "trained.json", TRAINED_KEYS)
    if trained is None:
        raise ValueError(f"{folder / 'trained.json'}: not found; the row has not been trained to its end")
    best = folder / "best.pt"
    ckpt = load_checkpoint(best, device=config.device)  # read once: both splits and the decoding use it
    val = _scored(folder / "scored-val.json", best, lambda: evaluate(ckpt, "val", kmax=0, bleu=False))
    test = _scored(folder / "scored-test.json", best, lambda: evaluate(ckpt, "test", kmax=5, bleu=False))
    kmax_decoding = Rule.KMAX in ckpt.pair.decoding_rules()
    row: dict[str, Any] = {
        "label": label, "pair": config.model, "estimator": config.estimator, "output": config.output,
        "attention_type": config.attention_type, "options": config.options,
        "train_sentences": _train_sentences(config), "val_ppl": val["ppl"], "test_ppl": test["ppl"],
        "ppl_exact": bool(test["ppl_exact"]), "ppl_method": test["ppl_method"], "test_kmax5_ppl": test["kmax_ppl"],
        # an estimate's Monte Carlo error and PSIS k-hat (scores kept before they were recorded: None)
        "test_ppl_mc_se": test.get("ppl_mc_se"), "test_khat_max": test.get("khat_max"),
        "ppl_reliable": test.get("ppl_reliable", True) and val.get("ppl_reliable", True),
        "bleu": None, "bleu_signature": None, "bleu_tok_none": None, "bleu_kmax5": None,
        "decode_sentences_per_s": None,
        **{name: test.get(name) for name in ALIGNMENT_FIELDS.values()},  # scores kept before a field existed: None
        "epochs": trained["epochs"], "best_epoch": trained["best_epoch"],
        "stopped_early": trained["stopped_early"], "wall_s": trained["wall_s"],
        "tokens_per_s": trained["target_tokens"] / max(trained["wall_s"], 1e-9),
        "device": config.device, "threads": config.threads, "config": config.to_dict(),
        "finished": trained.get("finished", True),
    }
    if (folder / "history.csv").is_file():  # the row's curve travels with it (docs tables merge run folders)
        row.update(epoch_curves(folder / "history.csv"))
    if bleu:
        data = load_split(config, "test", size=config.test_size, references=True)
        rule = ckpt.pair.rule(decoding=True)
        row["decode_rule"] = str(rule)
        cache = DecodeCache(folder / f"decoded-{rule}.jsonl")  # a stopped evaluation goes on where it stopped
        hyps = decode_batches(ckpt, data.source, BeamSearch(rule=rule), cache=cache)
        row["decode_sentences_per_s"] = cache.sentences / max(cache.seconds, 1e-9)
        scored = metrics.bleu([metrics.detokenize(h, config.tgt) for h in hyps], data.references,
                              lowercase=config.lowercased)
        row["bleu"], row["bleu_signature"] = scored.score, scored.signature
        refs = [" ".join(t) for t in data.target]
        row["bleu_tok_none"] = sacrebleu.corpus_bleu([" ".join(h) for h in hyps], [refs], tokenize="none").score
        if kmax_decoding:
            kmax = decode_batches(ckpt, data.source, BeamSearch(rule=Rule.KMAX),
                                  cache=DecodeCache(folder / "decoded-kmax.jsonl"))
            text = [metrics.detokenize(h, config.tgt) for h in kmax]
            row["bleu_kmax5"] = metrics.bleu(text, data.references, lowercase=config.lowercased).score
    return row


def _scored(path: Path, checkpoint: Path, score: Callable[[], Evaluation]) -> dict[str, Any]:
    """``score()`` as JSON (:meth:`Evaluation.to_dict`), kept in ``path`` for the checkpoint file as it is now
    (path, size, modification time): an evaluation stopped after scoring a split does not score it again for the
    same ``best.pt``."""
    key = checkpoint_key(checkpoint)
    kept = read_json(path, None)
    if isinstance(kept, dict) and kept.get("key") == key:
        return kept["scores"]
    scores = score().to_dict(hypotheses=False)
    write_json(path, {"key": key, "scores": scores})
    return scores


def _train_sentences(config: TranslationConfig) -> int | None:
    try:
        return len(load_split(config, "train", max_len=config.max_len, size=config.train_size, references=False))
    except (OSError, ValueError):  # pragma: no cover - data moved since training
        return None


def merge_rows(table: str | os.PathLike, runs: str | os.PathLike, *, only: Sequence[str] | None = None,
               note: str | None = None) -> list[tuple[str, str]]:
    """Put the evaluated rows of the runs folder ``runs`` into the table file ``table`` (a JSON list of rows, such
    as ``docs/results/table1-multi30k.json``, built from several runs folders and machines): a row replaces the
    table's row of the same label in place, else it is added at the end.  A row is its ``result.json``, or, for
    a row evaluated while paused, its ``result-paused.json`` (``"finished": false``).

    :param only: these rows (default: every evaluated row in ``runs``).
    :param note: kept in each merged row as ``"note"`` (where and how it was trained); without it a merged row
        has none, since the note of the row it replaces described another run.
    :returns: ``(label, "replaced" | "added")`` for each merged row.
    :raises ValueError: naming the file or folder: a table that is not a list of rows, a row of ``only`` not
        evaluated, no evaluated row at all.
    """
    table, runs = Path(table), Path(runs)
    rows = read_json(table, [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "label" in r for r in rows):
        raise ValueError(f"{table}: a table is a JSON list of rows (objects with a \"label\"), as the runner's "
                         "table.json")
    if not runs.is_dir():
        raise ValueError(f"{runs}: no such runs folder")
    labels = list(only) if only else sorted(p.name for p in runs.iterdir() if p.is_dir())
    merged = []
    for label in labels:
        found = evaluated_result(runs / label)
        if found is None:
            if only:
                raise ValueError(f"{runs / label}: no result.json (nor result-paused.json): the row has not been "
                                 "evaluated; 'pyro-attention experiment status' says where it stands")
            continue
        row = read_record(found, RESULT_KEYS)
        row.pop("note", None)
        if note is not None:
            row["note"] = note
        at = next((i for i, r in enumerate(rows) if r["label"] == row["label"]), None)
        if at is None:
            rows.append(row)
        else:
            rows[at] = row
        merged.append((row["label"], "added" if at is None else "replaced"))
    if not merged:
        raise ValueError(f"{runs}: no evaluated row (a result.json in a row's folder)")
    write_json(table, rows)
    return merged


def ppl_cell(row: dict[str, Any], key: str = "test_ppl") -> str:
    """A row's perplexity: exact as a number; an estimate as ``~PPL`` with ``± s.e.`` (Monte Carlo, where the row
    recorded it: test only) and `` !`` where it is not reliable (PSIS k-hat above 0.7, or too few draws)."""
    value = row.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if row["ppl_exact"]:
        return f"{value:.2f}"
    se = row.get("test_ppl_mc_se") if key == "test_ppl" else None
    return estimate_text(f"{value:.2f}", None if se is None else f"{se:.2f}", row.get("ppl_reliable", True))


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table (``~``: a perplexity that is an estimate, not exact, with its Monte Carlo
    standard error; ``!``: an estimate that is not reliable; a row evaluated while paused is marked unfinished)."""
    lines = [
        "| row | pair | estimator | output | val PPL | test PPL | BLEU | BLEU tok none | K-max BLEU | H(prior) | "
        "epochs | wall [s] | tok/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def num(x: Any, fmt: str = ".2f") -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)

    for r in rows:
        lines.append(
            f"| {curve_label(r)} | {r['pair']} | {r['estimator'] or '-'} | {r['output']} | "
            f"{ppl_cell(r, 'val_ppl')} | {ppl_cell(r)} | {num(r['bleu'])} | "
            f"{num(r['bleu_tok_none'])} | {num(r['bleu_kmax5'])} | "
            f"{num(r['prior_entropy'], '.3f')} | {r['epochs']} | {num(r['wall_s'], '.0f')} | "
            f"{num(r['tokens_per_s'], ',.0f')} |"
        )
    return "\n".join(lines)
