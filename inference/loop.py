"""One training loop, with behaviour added by callbacks (Lightning's ``Trainer`` is the model).

:class:`Trainer` runs epochs of steps: each epoch it asks ``batches(epoch)`` for the epoch's batches, skips the
``position`` already done (a run resumed in the middle of an epoch), and for each batch calls
``step(trainer, batch)``, which trains on it and returns ``(loss per token, tokens)``.  The loop keeps the counters
(``epoch``, ``step``, ``position``, ``epoch_loss`` / ``epoch_tokens``, ``seen``) and knows nothing else: logging,
validation, learning-rate schedules, early stopping, checkpoints and stop requests are :class:`Callback` objects,
called in the order given at

* ``on_fit_start`` -- before the first epoch (a callback may :meth:`Trainer.stop` already);
* ``on_epoch_start`` -- before each epoch's batches are drawn;
* ``on_step_end`` -- after every step, the counters updated (``trainer.loss``, ``trainer.tokens``);
* ``on_epoch_end`` -- after an epoch's last step, with ``epoch`` already counting it, ``position`` reset and
  ``train_loss`` the epoch's mean loss per token;
* ``on_fit_end`` -- always, also when a step or a callback raised (release files, bars, signal handlers).

A callback stops training with :meth:`Trainer.stop`: in ``on_step_end`` the loop ends after that step (the epoch
left unfinished, ``on_epoch_end`` not called); in ``on_epoch_start`` before the epoch; in ``on_epoch_end`` after the
epoch.  A callback may also raise (a stop request that must not look like a finished run, a diverged loss).

Generic pieces live here: :class:`SVIStep` (one SVI step per batch, the warm-up guide first, at a float32 matrix
product precision of its own: :func:`float32_matmul_precision`), :class:`ProgressBar`,
:class:`CsvLogger`, :class:`PlateauDecay` (learning rate times a factor when a metric did not improve, through the
Pyro optimiser), :class:`EarlyStopping` and :func:`stop_requests` (SIGINT / SIGTERM as a flag).  Task-specific
callbacks (translation's checkpoints, for instance) live with the task.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import Any

import torch
from tqdm.auto import tqdm

from pyro_attention.files import writing
from pyro_attention.inference.optim import set_lr

#: ``step(trainer, batch) -> (loss per token, tokens)``
StepFn = Callable[["Trainer", Any], tuple[float, int]]


class Callback:
    """Behaviour added to :class:`Trainer`; every hook is a no-op here (override the ones you need)."""

    def on_fit_start(self, trainer: Trainer) -> None:
        """Before the first epoch."""

    def on_epoch_start(self, trainer: Trainer) -> None:
        """Before an epoch's batches are drawn (``trainer.epoch``: the epoch about to run, from 0)."""

    def on_step_end(self, trainer: Trainer) -> None:
        """After every step (``trainer.loss``, ``trainer.tokens``, counters updated)."""

    def on_epoch_end(self, trainer: Trainer) -> None:
        """After an epoch (``trainer.epoch``: epochs done; ``trainer.train_loss``: its mean loss per token)."""

    def on_fit_end(self, trainer: Trainer) -> None:
        """Always at the end, also after an exception (``trainer.failed``)."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the callback to resume it (Lightning's convention; nothing here)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s ``state``."""


class Trainer:
    """The training loop.

    :param step: ``step(trainer, batch) -> (loss per token, tokens)``: trains on ``batch``.
    :param batches: ``batches(epoch)``: the batches of ``epoch`` (from 0), in their order.
    :param epochs: train until ``epoch == epochs`` (or a callback stops it).
    :param callbacks: called in this order at every hook.

    A resumed run continues from a checkpoint's :meth:`state_dict` (:meth:`load_state_dict`): epochs done, steps
    done, batches done in the current epoch, and that epoch's summed ``loss * tokens`` and tokens.
    """

    def __init__(
        self,
        step: StepFn,
        batches: Callable[[int], Iterable[Any]],
        epochs: int,
        callbacks: Sequence[Callback] = (),
    ) -> None:
        self.step_fn, self.batches, self.epochs, self.callbacks = step, batches, epochs, list(callbacks)
        self.epoch, self.step, self.position = 0, 0, 0
        self.epoch_loss, self.epoch_tokens = 0.0, 0
        self.loss, self.tokens, self.train_loss = math.nan, 0, math.nan
        self.seen, self.start = 0, 0.0  # tokens trained on by this run, and when it started (perf_counter)
        self.epoch_length: int | None = None  # batches in the current epoch, when they have a length
        self.should_stop, self.failed = False, False

    def state_dict(self) -> dict[str, Any]:
        """The counters a checkpoint keeps: ``epoch``, ``step``, ``position``, ``epoch_loss``, ``epoch_tokens``."""
        return {"epoch": self.epoch, "step": self.step, "position": self.position, "epoch_loss": self.epoch_loss,
                "epoch_tokens": self.epoch_tokens}

    def load_state_dict(self, state: dict[str, Any]) -> Trainer:
        """Continue from :meth:`state_dict`'s ``state`` (returns ``self``)."""
        self.epoch, self.step, self.position = int(state["epoch"]), int(state["step"]), int(state["position"])
        self.epoch_loss, self.epoch_tokens = float(state["epoch_loss"]), int(state["epoch_tokens"])
        return self

    @property
    def elapsed(self) -> float:
        """Seconds since :meth:`fit` started."""
        return time.perf_counter() - self.start

    @property
    def mid_epoch(self) -> bool:
        """Whether batches of the current epoch are left (``True`` when the epoch's length is unknown)."""
        return self.epoch_length is None or self.position < self.epoch_length

    def steps_left(self, epoch_length: int) -> int:
        """The steps :meth:`fit` has still to take, from where the loop is (:meth:`load_state_dict`), with epochs of
        ``epoch_length`` batches and no early stop."""
        return max(max(self.epochs - self.epoch, 0) * epoch_length - self.position, 0)

    def stop(self) -> None:
        """Ask the loop to stop (after this step, before this epoch, or after this epoch: where it is called)."""
        self.should_stop = True

    def fit(self) -> Trainer:
        """Run the loop; returns ``self`` (its counters say where it stopped)."""
        self.start = time.perf_counter()
        try:
            self._call("on_fit_start")
            while not self.should_stop and self.epoch < self.epochs:
                self._call("on_epoch_start")
                if self.should_stop:
                    break
                if not self._run_epoch():
                    break
                self._call("on_epoch_end")
        except BaseException:
            self.failed = True
            raise
        finally:
            self._call("on_fit_end")
        return self

    def _run_epoch(self) -> bool:
        """The current epoch's remaining steps; ``False`` when a callback stopped the loop during them."""
        batches = self.batches(self.epoch)
        self.epoch_length = len(batches) if isinstance(batches, Sized) else None
        for batch in itertools.islice(batches, self.position, None):
            self.loss, self.tokens = self.step_fn(self, batch)
            self.step += 1
            self.position += 1
            self.seen += self.tokens
            self.epoch_loss += self.loss * self.tokens
            self.epoch_tokens += self.tokens
            self._call("on_step_end")
            if self.should_stop:
                return False
        self.train_loss = self.epoch_loss / max(self.epoch_tokens, 1)
        self.epoch += 1
        self.position, self.epoch_loss, self.epoch_tokens = 0, 0.0, 0
        return True

    def _call(self, hook: str) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self)


class SVIStep:
    """``step(trainer, batch)`` for :class:`Trainer`: one SVI step, the loss divided by the batch's target tokens.

    :param svi: has ``step(batch) -> loss`` (:class:`~pyro_attention.inference.distributed.DataParallelSVI`).
    :param warmup: the same with the warm-up guide, used while ``trainer.step < warmup_steps``.
    :param tokens: ``tokens(batch)``: the target tokens of the (global) batch.
    :param shard: ``shard(batch)``: the part this process trains on (data parallelism); default: all of it.
    :param diverged: ``diverged(loss, trainer)``: the message of the ``FloatingPointError`` raised on a
        non-finite loss.
    :param guide_only: the same SVI stepping the guide's own parameters alone
        (:class:`~pyro_attention.inference.optim.SubsetOptim`), taken ``guide_steps`` times on each batch before its
        step while ``trainer.step < guide_steps_for`` (``0``: always) -- the inference network trained ahead of
        the model, as He et al. (ICLR 2019) train a lagging one.
    :param matmul_precision: ``torch.set_float32_matmul_precision`` while the steps run (``"highest"``, ``"high"``
        or ``"medium"``; ``None``: the process's own), restored after each: the training steps may multiply in a
        lower precision while validation and evaluation, which run between them, keep the process's
        (:func:`float32_matmul_precision`).
    """

    def __init__(
        self,
        svi: Any,
        tokens: Callable[[Any], int],
        diverged: Callable[[float, Trainer], str],
        warmup: Any = None,
        warmup_steps: int = 0,
        shard: Callable[[Any], Any] | None = None,
        guide_only: Any = None,
        guide_steps: int = 0,
        guide_steps_for: int = 0,
        matmul_precision: str | None = None,
    ) -> None:
        if matmul_precision is not None:
            check_matmul_precision(matmul_precision)
        self.svi, self.tokens, self.diverged = svi, tokens, diverged
        self.warmup, self.warmup_steps, self.shard = warmup, warmup_steps, shard
        self.guide_only, self.guide_steps, self.guide_steps_for = guide_only, guide_steps, guide_steps_for
        self.matmul_precision = matmul_precision

    def __call__(self, trainer: Trainer, batch: Any) -> tuple[float, int]:
        tokens = self.tokens(batch)
        part = batch if self.shard is None else self.shard(batch)
        with float32_matmul_precision(self.matmul_precision):
            if self.guide_only is not None and (not self.guide_steps_for or trainer.step < self.guide_steps_for):
                for _ in range(self.guide_steps):
                    self.guide_only.step(part)
            runner = self.warmup if self.warmup is not None and trainer.step < self.warmup_steps else self.svi
            loss = runner.step(part) / max(tokens, 1)
        if not math.isfinite(loss):
            raise FloatingPointError(self.diverged(loss, trainer))
        return loss, tokens


#: the values of ``torch.set_float32_matmul_precision``, from the most exact
MATMUL_PRECISIONS = ("highest", "high", "medium")


def check_matmul_precision(precision: str, name: str = "matmul_precision") -> str:
    """``precision`` when it is one of :data:`MATMUL_PRECISIONS`, else a ``ValueError`` naming ``name``, the value
    and the allowed ones."""
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"{name} must be one of {', '.join(MATMUL_PRECISIONS)}, got {precision!r}")
    return precision


@contextlib.contextmanager
def float32_matmul_precision(precision: str | None) -> Iterator[None]:
    """Run the block at ``torch.set_float32_matmul_precision(precision)`` and restore the process's afterwards (also
    when the block raises); ``None`` changes nothing.

    ``"highest"`` multiplies float32 in float32.  ``"medium"`` lets a float32 product be computed in bfloat16 with
    float32 accumulation and results: on a CPU through oneDNN (fast where the CPU has AMX or AVX512-BF16) and on a
    GPU; ``"high"`` allows TF32 (a GPU's; torch 2.13 on this project's CPU runs it at float32 speed).  Tensors stay
    float32 either way; only the products' inputs are rounded (to 8 significant bits for bfloat16).
    """
    if precision is None:
        yield
        return
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(check_matmul_precision(precision))
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


class ProgressBar(Callback):
    """A ``tqdm`` bar: one tick a step, with the epoch (from 1), the loss and tokens per second."""

    def __init__(self, desc: str, total: int | None = None, disable: bool | None = None, **options: Any) -> None:
        self.desc, self.total, self.disable, self.options = desc, total, disable, options
        self.bar: Any = None

    def on_fit_start(self, trainer: Trainer) -> None:
        self.bar = tqdm(total=self.total, disable=self.disable, desc=self.desc, unit="step", **self.options)

    def on_step_end(self, trainer: Trainer) -> None:
        self.bar.update(1)
        self.bar.set_postfix(epoch=f"{trainer.epoch + 1}/{trainer.epochs}", loss=f"{trainer.loss:.3f}",
                             tok_s=f"{trainer.seen / max(trainer.elapsed, 1e-9):.0f}", refresh=False)

    def write(self, text: str) -> None:
        """Print ``text`` above the bar."""
        self.bar.write(text)

    def on_fit_end(self, trainer: Trainer) -> None:
        if self.bar is not None:
            self.bar.close()


def bar_shows(progress: bool) -> bool:
    """Whether a :class:`ProgressBar` with ``disable=None if progress else True`` shows: tqdm draws on a terminal
    only (its output, stderr)."""
    return progress and sys.stderr.isatty()


class ProgressLines(Callback):
    """Progress for a log that is not a terminal (where a bar shows nothing): a line whenever ``every`` seconds have
    passed since the last and, with ``epoch_lines``, one at the end of every epoch, each with the epoch, the step,
    the mean loss per token of the epoch so far and the tokens per second, through ``log``."""

    def __init__(self, log: Callable[[str], None], label: str = "", every: float = 60.0,
                 epoch_lines: bool = True) -> None:
        self.log, self.prefix, self.every, self.epoch_lines = log, f"{label} " if label else "", every, epoch_lines
        self.last = 0.0

    def _line(self, trainer: Trainer, epoch: str, loss: float) -> None:
        self.log(f"{self.prefix}epoch {epoch}/{trainer.epochs} step {trainer.step}: loss/token {loss:.4f}, "
                 f"{trainer.seen / max(trainer.elapsed, 1e-9):.0f} tokens/s, {trainer.elapsed:.0f} s")
        self.last = trainer.elapsed

    def on_fit_start(self, trainer: Trainer) -> None:
        self.last = 0.0

    def on_step_end(self, trainer: Trainer) -> None:
        if trainer.elapsed - self.last >= self.every:
            self._line(trainer, f"{trainer.epoch + 1} (in progress)", trainer.epoch_loss / max(trainer.epoch_tokens, 1))

    def on_epoch_end(self, trainer: Trainer) -> None:
        if self.epoch_lines:
            self._line(trainer, str(trainer.epoch), trainer.train_loss)
        else:
            self.last = trainer.elapsed


class CsvLogger(Callback):
    """Rows of a CSV file, flushed one by one (a crashed run keeps every row it wrote).

    :param fields: the columns; a row leaves out what it lacks (empty), floats are written with ``.9g``.
    :param step_row, epoch_row: ``row(trainer)``: the row written after each step / epoch (``None``: none).
    :param append: add to an existing file (its header already written) instead of starting a new one.

    A file that cannot be made or written is a :class:`~pyro_attention.files.WriteError` naming it.
    """

    def __init__(
        self,
        path: Any,
        fields: Sequence[str],
        step_row: Callable[[Trainer], dict[str, Any] | None] | None = None,
        epoch_row: Callable[[Trainer], dict[str, Any] | None] | None = None,
        append: bool = False,
    ) -> None:
        self.path, self.fields, self.step_row, self.epoch_row, self.append = path, fields, step_row, epoch_row, append
        self.file: Any = None
        self.writer: csv.DictWriter | None = None

    def on_fit_start(self, trainer: Trainer) -> None:
        with writing(self.path):  # "cannot write PATH: CAUSE"
            self.file = open(self.path, "a" if self.append else "w", newline="", encoding="utf-8")  # closed at the end
            self.writer = csv.DictWriter(self.file, self.fields)
            if not self.append:
                self.writer.writeheader()

    def write(self, row: dict[str, Any]) -> None:
        """Write ``row`` and flush it."""
        with writing(self.path):  # a full disk: "cannot write PATH: No space left on device (errno 28)"
            self.writer.writerow({k: f"{v:.9g}" if isinstance(v, float) else v for k, v in row.items()})
            self.file.flush()

    def on_step_end(self, trainer: Trainer) -> None:
        row = self.step_row(trainer) if self.step_row is not None else None
        if row is not None:
            self.write(row)

    def on_epoch_end(self, trainer: Trainer) -> None:
        row = self.epoch_row(trainer) if self.epoch_row is not None else None
        if row is not None:
            self.write(row)

    def on_fit_end(self, trainer: Trainer) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):  # every row was flushed (and checked) as it was written
                self.file.close()


class PlateauDecay(Callback):
    """After every epoch, ``metric(trainer)`` (lower is better): a new best resets the count of epochs without
    improvement; otherwise the count grows and the learning rate of ``optim`` (a Pyro optimiser) is multiplied by
    ``factor``.  Its state (:meth:`state_dict`): ``best``, ``best_epoch`` (from 0), ``bad`` and ``lr``."""

    def __init__(self, optim: Any, lr: float, factor: float, metric: Callable[[Trainer], float]) -> None:
        self.optim, self.lr, self.factor, self.metric = optim, lr, factor, metric
        self.best, self.best_epoch, self.bad = math.inf, -1, 0
        self.improved = False

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_epoch": self.best_epoch, "bad": self.bad, "lr": self.lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; its learning rate becomes the optimiser's."""
        self.best, self.best_epoch, self.bad = float(state["best"]), int(state["best_epoch"]), int(state["bad"])
        self.lr = float(state["lr"])
        set_lr(self.optim, self.lr)

    def on_epoch_end(self, trainer: Trainer) -> None:
        value = self.metric(trainer)
        self.improved = value < self.best
        if self.improved:
            self.best, self.best_epoch, self.bad = value, trainer.epoch - 1, 0
        else:
            self.bad += 1
            self.lr *= self.factor
            set_lr(self.optim, self.lr)


class EarlyStopping(Callback):
    """Stop after ``patience`` epochs in a row without improvement (``plateau.bad``; ``patience`` 0: never);
    a resumed run that already reached it does not start.  Says so through ``log``."""

    def __init__(self, plateau: PlateauDecay, patience: int, log: Callable[[str], None] = lambda _: None) -> None:
        self.plateau, self.patience, self.log = plateau, patience, log
        self.stopped = False

    def reached(self) -> bool:
        """Whether ``patience`` epochs in a row went without improvement."""
        return bool(self.patience) and self.plateau.bad >= self.patience

    def on_fit_start(self, trainer: Trainer) -> None:
        if self.reached():
            self.stopped = True
            trainer.stop()
            self.log(f"early stopping already reached ({self.plateau.bad} epochs without improvement, patience "
                     f"{self.patience})")

    def on_epoch_end(self, trainer: Trainer) -> None:
        if self.reached():
            self.stopped = True
            trainer.stop()
            self.log(f"early stopping: {self.plateau.bad} epochs without improvement (patience {self.patience})")


@contextlib.contextmanager
def stop_requests(enabled: bool) -> Iterator[dict[str, str | None]]:
    """While active, SIGINT and SIGTERM set ``flag["signal"]`` (their name) instead of raising; a second one
    raises ``KeyboardInterrupt`` at once.  Not ``enabled`` (several processes: the launcher's signal handling) or
    outside the main thread: the flag stays ``None``."""
    flag: dict[str, str | None] = {"signal": None}
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if flag["signal"] is not None:
            raise KeyboardInterrupt(f"second {name}: abandoned without saving the step")
        flag["signal"] = name
        # said at once: the step (or an epoch's validation) in progress may take minutes to finish
        print(f"{name}: stopping after the step or validation in progress, then saving; a second {name} "
              "abandons it without saving", file=sys.stderr, flush=True)

    # a signal the process ignores stays ignored (a shell starts background jobs with SIGINT ignored)
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)
           if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield flag
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
