"""What translation training adds to the package's training loop: validation perplexity, the history
(``history.csv``), checkpoints, TensorBoard, the epoch line and Ctrl-C / SIGTERM, as
:class:`~pyro_attention.inference.loop.Callback` objects."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import math
import os
import platform
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyro
import torch

from pyro_attention import __version__
from pyro_attention.data.text import Vocab
from pyro_attention.data.translation import TranslationBatch
from pyro_attention.files import writing
from pyro_attention.inference.distributed import broadcast_object, gather_objects
from pyro_attention.inference.loop import Callback, PlateauDecay, Trainer, stop_requests
from pyro_attention.networks import Seq2Seq
from pyro_attention.pair import AlignmentPair
from pyro_attention.tasks.translation.checkpoints import capture_rng_state, save_checkpoint, tensorboard_writer
from pyro_attention.tasks.translation.config import ALIGNMENT_FIELDS, CHECKPOINT_FORMAT, CSV_FIELDS, on_cpu
from pyro_attention.tasks.translation.migration import FORMAT_VERSION

if TYPE_CHECKING:  # the run the callbacks share is built by training.py, which imports this module
    from pyro_attention.tasks.translation.training import TrainingRun


@dataclass
class Validation:
    """Validation perplexity of one pass: exact, or an importance-weighted bound (``exact=False``); and, in nats
    per target token, the mean entropy of the prior ``p(z_t | x, y_<t)`` (how peaked the attention has become), of
    the exact posterior ``p(z_t | x, y)`` and of the guide ``q(z_t | x, y)``, and the guide's exact
    ``KL(q || p(z_t | x, y))`` (``None`` where the pair has no such distribution: :func:`~pyro_attention.inference.
    entropy_sums`)."""

    nll: float
    ppl: float
    exact: bool
    method: str
    tokens: int
    prior_entropy: float | None = None
    posterior_entropy: float | None = None
    guide_entropy: float | None = None
    guide_kl: float | None = None

    def label(self) -> str:
        return "PPL" if self.exact else "PPL bound (importance-weighted; an upper bound in expectation)"


def validate(pair: AlignmentPair, batches: Iterable[TranslationBatch], num_samples: int = 20) -> Validation:
    """Perplexity over ``batches`` with the network in eval mode: exact by enumeration for the categorical pairs
    and soft attention; for the Dirichlet pair the ``num_samples``-sample importance-weighted bound.  Also the
    alignment distributions' mean entropies and the guide's KL from the exact posterior
    (:func:`~pyro_attention.inference.entropy_sums`, those the pair has).
    """
    from pyro_attention.inference import entropy_sums, log_likelihood, shared_enumeration

    net = pair.network
    was_training = net.training
    net.eval()
    total, tokens, exact, method, sums = 0.0, 0, True, "", Counter()
    try:
        with torch.no_grad(), shared_enumeration():  # likelihood and posterior from one enumerated pass
            for batch in batches:
                ll = log_likelihood(pair, batch, num_samples=num_samples)
                total += float(ll.per_example.sum())
                tokens += int(ll.num_tokens.sum())
                exact, method = exact and ll.exact, ll.method
                sums.update(entropy_sums(pair, batch, batch.target_mask))  # Counter.update adds
    finally:
        net.train(was_training)
    nll = -total / max(tokens, 1)
    means = {ALIGNMENT_FIELDS[key]: value / max(tokens, 1) for key, value in sums.items()}
    return Validation(nll, math.exp(nll) if nll < _MAX_EXP else math.inf, exact, method, tokens, **means)


#: ``math.exp`` overflows above this (a diverged model's perplexity is infinite, not an ``OverflowError``)
_MAX_EXP = math.log(torch.finfo(torch.float64).max)


@dataclass
class TrainResult:
    """What :func:`train` leaves: the trained pair (last epoch's weights), vocabularies and counters."""

    pair: AlignmentPair
    network: Seq2Seq
    src_vocab: Vocab
    tgt_vocab: Vocab
    out: Path
    epoch: int
    step: int
    best_metric: float
    best_epoch: int
    lr: float
    history: dict[str, Any]
    stopped_early: bool = False


def empty_history() -> dict[str, Any]:
    return {"steps": {k: [] for k in ("epoch", "step", "loss", "tokens", "lr", "seconds")},
            "epochs": {k: [] for k in ("epoch", "step", "val_nll", "val_ppl", "val_exact", "val_prior_entropy",
                                       "val_posterior_entropy", "val_guide_entropy", "val_guide_kl", "lr", "seconds")}}


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator that orders the batches of ``epoch``: a function of ``(seed, epoch)`` only."""
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch)


def write_history_csv(path: Path, history: dict[str, Any]) -> None:
    """Rewrite the CSV from ``history`` (step rows and epoch rows, in the order they happened).

    A resumed run starts from the checkpoint's history, so rows of an interrupted epoch are dropped.
    """
    rows = []
    steps, epochs = history["steps"], history["epochs"]
    for i in range(len(steps["step"])):
        rows.append(_csv_row("step", **{k: v[i] for k, v in steps.items()}))
    for i in range(len(epochs["epoch"])):
        rows.append(_csv_row("epoch", **{k: v[i] for k, v in epochs.items()}))
    rows.sort(key=lambda r: (r["step"], r["kind"] == "epoch"))
    tmp = path.with_name(path.name + ".tmp")
    with writing(path):
        try:
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, CSV_FIELDS)
                writer.writeheader()
                writer.writerows(rows)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise


def _csv_row(kind: str, **values: Any) -> dict[str, Any]:
    """A row of ``history.csv``; its ``epoch`` counts from 1, as the log lines and the progress bar do (the
    ``history`` dict keeps the epoch's index, from 0: a step's epoch in progress, an epoch row's epoch done)."""
    row = {k: "" for k in CSV_FIELDS}
    row["kind"] = kind
    if "epoch" in values:
        values["epoch"] += 1
    for key, value in values.items():
        row[key] = f"{value:.9g}" if isinstance(value, float) else value
    return row


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by SIGINT (Ctrl-C) or SIGTERM after the current step, with ``last.pt`` written.

    :ivar checkpoint: the path of the checkpoint that was written.
    :ivar signal_name: ``"SIGINT"`` or ``"SIGTERM"``.
    :ivar epoch: the epochs completed (the message counts epochs from 1, as the log and the progress bar do).
    :ivar step: the steps completed.
    """

    def __init__(self, checkpoint: Path, signal_name: str, epoch: int, step: int, position: int = 0) -> None:
        where = f"in epoch {epoch + 1}, {position} batches in" if position else f"after epoch {epoch}"
        super().__init__(f"{signal_name}: stopped after step {step} ({where}); {checkpoint} written")
        self.checkpoint, self.signal_name, self.epoch, self.step = checkpoint, signal_name, epoch, step


def last_row(kind: str, columns: dict[str, list]) -> dict[str, Any]:
    """The last entry of a history table as a ``history.csv`` row (``epoch`` counted from 1)."""
    return _csv_row(kind, **{k: v[-1] for k, v in columns.items()})


class Validate(Callback):
    """After every epoch: validation perplexity (computed by process 0, shared with the others) as ``run.val``."""

    def __init__(self, run: TrainingRun) -> None:
        self.run = run

    def on_epoch_end(self, trainer: Trainer) -> None:
        run = self.run
        run.val = broadcast_object(validate(run.pair, run.val_batches, run.config.num_samples) if run.rank == 0
                                   else None)


class History(Callback):
    """The history a checkpoint keeps (and ``history.csv`` shows): a row per step and per epoch."""

    def __init__(self, run: TrainingRun, plateau: PlateauDecay) -> None:
        self.run, self.plateau = run, plateau

    def _append(self, table: str, values: tuple) -> None:
        for key, value in zip(self.run.history[table], values, strict=True):
            self.run.history[table][key].append(value)

    def on_step_end(self, trainer: Trainer) -> None:
        self._append("steps", (trainer.epoch, trainer.step, trainer.loss, trainer.tokens, self.plateau.lr,
                               trainer.elapsed))

    def on_epoch_end(self, trainer: Trainer) -> None:
        val = self.run.val
        self._append("epochs", (trainer.epoch - 1, trainer.step, val.nll, val.ppl, val.exact, val.prior_entropy,
                                val.posterior_entropy, val.guide_entropy, val.guide_kl, self.plateau.lr,
                                trainer.elapsed))


class Checkpointing(Callback):
    """``last.pt`` inside an epoch every ``checkpoint_every`` steps and once ``checkpoint_minutes`` have passed since
    the last write, and after every epoch; ``best.pt`` when the epoch improved.  Every process builds the state
    (gathering random states is a collective); process 0 writes."""

    def __init__(self, run: TrainingRun, plateau: PlateauDecay) -> None:
        self.run, self.plateau = run, plateau
        self.written = 0.0  # trainer.elapsed when last.pt was last written (this sitting's clock)

    def on_step_end(self, trainer: Trainer) -> None:
        if trainer.mid_epoch and self._due(trainer):
            state = self.state(trainer, None)
            if self.run.rank == 0:
                save_checkpoint(state, self.run.last_path)
            self.written = trainer.elapsed

    def _due(self, trainer: Trainer) -> bool:
        every, minutes = self.run.config.checkpoint_every, self.run.config.checkpoint_minutes
        if every and trainer.step % every == 0:
            return True
        # process 0's clock decides for all, so that every process takes part in the state's collective
        return bool(minutes) and broadcast_object(trainer.elapsed - self.written >= 60 * minutes)

    def on_epoch_end(self, trainer: Trainer) -> None:
        state = self.state(trainer, self.run.val)
        if self.run.rank == 0:
            save_checkpoint(state, self.run.last_path)
            if self.plateau.improved:
                save_checkpoint(state, self.run.out / "best.pt")
        self.written = trainer.elapsed

    def state(self, trainer: Trainer, val: Validation | None) -> dict[str, Any]:
        """The checkpoint's contents now (``val``: the epoch's validation; ``None`` inside an epoch)."""
        run, plateau = self.run, self.plateau
        rng_ranks = gather_objects(capture_rng_state())  # a collective: every process takes part
        return {
            "format": CHECKPOINT_FORMAT,
            "format_version": FORMAT_VERSION,
            "package_version": __version__,
            "torch_version": str(torch.__version__),
            "pyro_version": str(pyro.__version__),
            "python_version": platform.python_version(),
            "config": run.config.to_dict(),
            "src_vocab": run.src_vocab.to_json(),
            "tgt_vocab": run.tgt_vocab.to_json(),
            "network": on_cpu(run.network.state_dict()),
            "pair_modules": {name: on_cpu(m.state_dict()) for name, m in run.pair.owned_modules().items()},
            "param_store": {name: p.detach().cpu().clone() for name, p in pyro.get_param_store().named_parameters()},
            "optim": on_cpu(run.optim.get_state()),
            "rng": rng_ranks[0],
            "rng_ranks": rng_ranks if run.world_size > 1 else None,
            "world_size": run.world_size,
            "trainer": trainer.state_dict(),
            "epoch_batches": len(run.train_batches),  # for `experiment status`, before the first epoch has ended
            "metric": "val_ppl",
            "plateau": plateau.state_dict(),
            "val": dataclasses.asdict(val) if val is not None else None,
            "history": run.history,
        }


class TensorBoardLog(Callback):
    """Process 0: loss, learning rate and tokens per second every step, validation every epoch, under
    ``out/tensorboard`` (when ``config.tensorboard`` asks for it: see :func:`tensorboard_writer`)."""

    def __init__(self, run: TrainingRun) -> None:
        self.run, self.board = run, None

    def on_fit_start(self, trainer: Trainer) -> None:
        with writing(self.run.out / "tensorboard"):
            self.board = tensorboard_writer(self.run.config, self.run.out)

    def on_step_end(self, trainer: Trainer) -> None:
        if self.board is not None:
            steps = self.run.history["steps"]
            self.board.add_scalar("train/loss_per_token", trainer.loss, trainer.step)
            self.board.add_scalar("train/lr", steps["lr"][-1], trainer.step)
            self.board.add_scalar("train/tokens_per_s", trainer.seen / max(steps["seconds"][-1], 1e-9), trainer.step)

    def on_epoch_end(self, trainer: Trainer) -> None:
        if self.board is not None:
            self.board.add_scalar("val/nll_per_token", self.run.val.nll, trainer.step)
            self.board.add_scalar("val/ppl", self.run.val.ppl, trainer.step)
            for field in ALIGNMENT_FIELDS.values():
                if getattr(self.run.val, field) is not None:
                    self.board.add_scalar(f"val/{field}", getattr(self.run.val, field), trainer.step)
            self.board.flush()

    def on_fit_end(self, trainer: Trainer) -> None:
        if self.board is not None:
            self.board.close()


class EpochLog(Callback):
    """The line every epoch logs: train loss, validation, best or the learning-rate decay."""

    def __init__(self, run: TrainingRun, plateau: PlateauDecay) -> None:
        self.run, self.plateau = run, plateau

    def on_epoch_end(self, trainer: Trainer) -> None:
        val, plateau = self.run.val, self.plateau
        self.run.log(
            f"epoch {trainer.epoch}/{trainer.epochs} step {trainer.step}: train loss/token "
            f"{trainer.train_loss:.4f}, validation NLL/token {val.nll:.4f}, {val.label()} "
            f"{val.ppl:.4f}" + (" (best)" if plateau.improved else f", no improvement ({plateau.bad}); lr -> "
                                f"{plateau.lr:.3g}")
            + "".join(f"; {name} {value:.3f} nats" for name, value in (
                ("prior entropy", val.prior_entropy), ("posterior entropy", val.posterior_entropy),
                ("guide entropy", val.guide_entropy), ("KL(guide || posterior)", val.guide_kl)) if value is not None)
        )


class StopOnSignal(Callback):
    """SIGINT / SIGTERM (one process) stop training after the current step: ``last.pt`` written (inside an epoch:
    with the position in it), :class:`TrainingInterrupted` raised.  A second signal abandons the step at once."""

    def __init__(self, run: TrainingRun, checkpoints: Checkpointing) -> None:
        self.run, self.checkpoints = run, checkpoints
        self.requests: Any = None
        self.flag: dict[str, str | None] = {"signal": None}

    def on_fit_start(self, trainer: Trainer) -> None:
        self.requests = stop_requests(self.run.world_size == 1)  # several processes: the launcher's handling
        self.flag = self.requests.__enter__()

    def on_step_end(self, trainer: Trainer) -> None:
        name, run = self.flag["signal"], self.run
        if name is not None and trainer.mid_epoch:
            save_checkpoint(self.checkpoints.state(trainer, None), run.last_path)
            run.log(f"{name}: stopped after step {trainer.step} (batch {trainer.position}/{trainer.epoch_length} of "
                    f"epoch {trainer.epoch + 1}/{trainer.epochs}); wrote {run.last_path}")
            raise TrainingInterrupted(run.last_path, name, trainer.epoch, trainer.step, trainer.position)

    def on_epoch_end(self, trainer: Trainer) -> None:
        name = self.flag["signal"]
        if name is not None and not trainer.should_stop and trainer.epoch < trainer.epochs:
            # arrived during the epoch's last step or its validation: the epoch's checkpoint is written
            self.run.log(f"{name}: stopped after epoch {trainer.epoch}/{trainer.epochs} (step {trainer.step}); wrote "
                         f"{self.run.last_path}")
            raise TrainingInterrupted(self.run.last_path, name, trainer.epoch, trainer.step)

    def on_fit_end(self, trainer: Trainer) -> None:
        if self.requests is not None:
            self.requests.__exit__(None, None, None)
