"""The small files of an experiment row's folder -- ``result.json``, ``trained.json``, ``sittings.json``,
``scored-*.json`` -- read with errors that name the file (one edited or cut short by hand), written atomically;
the accounting of the row's sittings (a sitting killed outright writes no ``sittings.json`` entry; its time is
recovered from ``last.pt``); and the folder's ``.lock``, held by the one process working in it.  A leaf module:
training, the runner, ``experiment status`` and the figures all go through it."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pyro_attention.files import write_error, write_text

T = TypeVar("T")


def read_json(path: Path, default: Any) -> Any:
    """The JSON value in ``path`` (``default`` when there is no such file).

    :raises ValueError: naming the file when it is not JSON (edited or cut short by hand: the runner writes its own
        atomically)."""
    if not path.is_file():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{path}: not readable as JSON ({e})") from None


#: the keys of ``result.json`` (and ``result-paused.json``) that the table and ``experiment status`` read
RESULT_KEYS = ("label", "pair", "estimator", "output", "val_ppl", "test_ppl", "ppl_exact", "bleu", "bleu_tok_none",
               "bleu_kmax5", "prior_entropy", "epochs", "best_epoch", "stopped_early", "wall_s", "tokens_per_s")
#: the keys of ``trained.json``
TRAINED_KEYS = ("epochs", "best_epoch", "best_val_ppl", "stopped_early", "steps", "target_tokens", "wall_s")


def read_record(path: Path, keys: Sequence[str]) -> dict[str, Any] | None:
    """The JSON object in ``path`` (``None`` when there is no such file).

    :raises ValueError: naming the file when it is not JSON, or not an object with ``keys`` (edited by hand)."""
    if not path.is_file():
        return None
    record = read_json(path, None)
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a JSON object as the runner writes it; it is {json.dumps(record)[:80]}")
    missing = [k for k in keys if k not in record]
    if missing:
        named = ", ".join(map(repr, missing[:4])) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise ValueError(f"{path}: lacks {named} of the keys the runner writes there")
    return record


def read_sittings(folder: Path) -> list[dict[str, Any]]:
    """The row's ``sittings.json``: one entry per sitting, each with its ``wall_s`` (seconds) and ``until_step``
    (``[]`` when there is no such file).

    :raises ValueError: naming the file and the entry when it is JSON of another shape (edited by hand)."""
    path = folder / "sittings.json"
    sittings = read_json(path, [])

    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    def bad(where: str, value: Any) -> ValueError:
        return ValueError(f"{path}: not a list of sittings ({{\"wall_s\": seconds, \"until_step\": step, ...}} "
                          f"each): {where} is {json.dumps(value)[:80]}")

    if not isinstance(sittings, list):
        raise bad("the file", sittings)
    for i, entry in enumerate(sittings):
        if not (isinstance(entry, dict) and number(entry.get("wall_s")) and number(entry.get("until_step"))):
            raise bad(f"entry {i}", entry)
    return sittings


def evaluated_result(folder: Path) -> Path | None:
    """The row's evaluation: its ``result.json``, else the ``result-paused.json`` of an evaluation while it was
    paused (``"finished": false``); ``None`` when it has neither."""
    return next((p for p in (folder / "result.json", folder / "result-paused.json") if p.is_file()), None)


def write_json(path: Path, value: Any) -> None:
    write_text(path, json.dumps(value, indent=1, default=str) + "\n")


def sittings_of(records: Iterable[tuple[float, T]]) -> list[list[tuple[float, T]]]:
    """``(seconds, record)`` pairs in training order, where ``seconds`` is the clock of the sitting that wrote the
    record (restarting at zero in each), split into one list per sitting: a new one wherever the clock goes back."""
    out: list[list[tuple[float, T]]] = []
    for seconds, record in records:
        if not out or seconds < out[-1][-1][0]:
            out.append([])
        out[-1].append((seconds, record))
    return out


def unrecorded_sittings(sittings: list[dict[str, Any]], state: dict[str, Any]) -> list[dict[str, Any]]:
    """The sittings that trained the steps of ``last.pt`` (its ``state``) past the last one ``sittings.json``
    records: a sitting killed outright (SIGKILL, its machine lost) writes no entry, but its checkpoints keep its
    clock.  Each is read from the checkpoint's history (:func:`sittings_of`) and counted up to its last checkpoint
    -- the steps after that are trained again, so their time is not in the row's cost; ``"interrupted":
    "unrecorded"``."""
    recorded = max((int(s["until_step"]) for s in sittings), default=0)
    steps, epochs = state["history"]["steps"], state["history"]["epochs"]
    rows = [(step, 0, seconds, done) for step, seconds, done in  # done: the epochs done by then
            zip(steps["step"], steps["seconds"], steps["epoch"], strict=True)]
    rows += [(step, 1, seconds, epoch + 1) for step, seconds, epoch in
             zip(epochs["step"], epochs["seconds"], epochs["epoch"], strict=True)]
    rows = sorted(r for r in rows if r[0] > recorded and r[2] is not None)  # None: a column an old checkpoint lacked
    lost = [{"wall_s": float(seconds), "until_epoch": int(epoch), "until_step": int(step), "threads": None,
             "interrupted": "unrecorded"} for *_, (seconds, (step, epoch)) in
            sittings_of((seconds, (step, epoch)) for step, _, seconds, epoch in rows)]
    if lost:
        lost[-1].update(until_epoch=int(state["trainer"]["epoch"]), until_step=int(state["trainer"]["step"]))
    return lost


#: the run folders whose ``.lock`` this process holds (an inner :func:`run_lock` block of the same folder takes nothing)
_held: set[Path] = set()


@contextlib.contextmanager
def run_lock(out: Path, retry_s: float = 1.0) -> Iterator[None]:
    """Hold ``out/.lock`` (``flock``, released when the process ends, however it ends) while this process works in
    ``out``; a second process is refused with the holder's PID.  Reentrant within a process: the runner holds a
    row's folder for its training and evaluation, and the training it calls takes the same lock again.

    :param retry_s: how long to keep trying while the lock is held (:func:`run_busy` of ``experiment status`` holds
        it for an instant).
    :raises FileExistsError: another process holds the lock.
    :raises WriteError: the folder or its ``.lock`` cannot be created."""
    key = Path(os.path.abspath(out))
    if key in _held:  # the outer block holds it and releases it
        yield
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        yield
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        handle = open(out / ".lock", "a+", encoding="utf-8")
    except OSError as e:
        raise write_error(out / ".lock", e) from None
    try:
        deadline = time.monotonic() + retry_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "unknown"
                    raise FileExistsError(
                        f"{out} is being written by another training process (PID {holder}, lock {out / '.lock'}); "
                        "wait for it to finish, stop it, or use another --out"
                    ) from None
                time.sleep(0.05)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        _held.add(key)
        try:
            yield
        finally:
            _held.discard(key)
    finally:
        handle.close()  # releases the lock


def run_busy(out: Path) -> bool | None:
    """Whether a process holds ``out/.lock`` now (:func:`run_lock`: training or evaluating the row): ``None`` where
    this cannot be told (no ``flock``, an unreadable ``.lock``).  Tried with a shared lock taken and released at
    once, which a process starting in that instant waits out (``retry_s``)."""
    if Path(os.path.abspath(out)) in _held:
        return True
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    try:
        handle = open(out / ".lock", encoding="utf-8")
    except FileNotFoundError:
        return False
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False
