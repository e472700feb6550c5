"""Translation training: :func:`train` builds or restores a run and composes the package's one training loop
(:class:`~pyro_attention.inference.loop.Trainer`) with the generic and the translation callbacks."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyro
import torch

from pyro_attention.data.text import Vocab
from pyro_attention.data.translation import TranslationBatch
from pyro_attention.files import writing
from pyro_attention.inference.distributed import DataParallelSVI, broadcast_parameters, init_from_env, shard
from pyro_attention.inference.loop import (
    CsvLogger,
    EarlyStopping,
    PlateauDecay,
    ProgressBar,
    ProgressLines,
    SVIStep,
    Trainer,
    bar_shows,
)
from pyro_attention.inference.optim import FusedClippedAdam, SubsetOptim
from pyro_attention.networks import Seq2Seq
from pyro_attention.pair import AlignmentPair
from pyro_attention.precision import AUTOCAST_DTYPES
from pyro_attention.tasks.translation.callbacks import (
    Checkpointing,
    EpochLog,
    History,
    StopOnSignal,
    TensorBoardLog,
    TrainResult,
    Validate,
    Validation,
    empty_history,
    epoch_generator,
    last_row,
    write_history_csv,
)
from pyro_attention.tasks.translation.checkpoints import (
    check_compatible,
    check_param_store,
    load_weights,
    read_checkpoint,
    restore_rng_state,
    warm_start,
)
from pyro_attention.tasks.translation.config import (
    CSV_FIELDS,
    Log,
    TranslationConfig,
    log_to_stdout,
    resolve_device,
    tqdm_disabled,
)
from pyro_attention.tasks.translation.corpora import build_pair, build_vocabs, load_corpora, make_batches
from pyro_attention.tasks.translation.rowfiles import run_lock


def train(
    config: TranslationConfig,
    progress: bool = True,
    *,
    resume: bool = False,
    overwrite: bool = False,
    log: Log | None = log_to_stdout,
) -> TrainResult:
    """Train ``config``'s pair by SVI and write checkpoints and ``history.csv`` to ``config.out_dir``.

    Every epoch: the length-bucketed batches in an order drawn from ``(seed, epoch)``, one
    ``SVI(pair.model, pair.guide, FusedClippedAdam, pair.elbo()).step`` each (``pair.warmup_guide`` for the first
    ``warmup_steps``; model and guide under ``config.autocast``); then validation perplexity; the learning rate is
    multiplied by ``lr_decay`` when it did not improve on the best; ``last.pt`` is written, and ``best.pt`` when it
    improved; training stops early after ``patience`` epochs in a row without improvement.

    :param resume: continue from ``last.pt`` in the output folder, restoring network, optimiser, RNG states,
        counters and history; the checkpoint must have the same model, estimator, sizes and vocabularies.
    :param overwrite: start afresh even if the output folder holds a checkpoint (otherwise refused).
        A fresh run with ``config.init_from`` starts from that checkpoint's network weights
        (:func:`~pyro_attention.tasks.translation.checkpoints.warm_start`); a resumed one refuses another.
    :raises FileNotFoundError: ``resume`` without a ``last.pt``; an ``init_from`` that does not exist.
    :raises FileExistsError: a fresh run into a folder that holds ``last.pt`` without ``overwrite``.
    :raises ValueError: a checkpoint that does not fit this run (naming every difference).
    :raises TrainingInterrupted: on SIGINT (Ctrl-C) or SIGTERM (one process): the current step is finished,
        ``last.pt`` written with the position in the epoch, and the run resumes exactly from there with
        ``resume=True``.  A second signal abandons the step at once (the previous ``last.pt`` is intact).
    """
    rank = init_from_env()[0]
    with run_lock(config.out_dir) if rank == 0 else contextlib.nullcontext():
        return _train(config, progress, resume=resume, overwrite=overwrite, log=log)


def _train(
    config: TranslationConfig,
    progress: bool,
    *,
    resume: bool,
    overwrite: bool,
    log: Log | None,
) -> TrainResult:
    """The run: prepared by :func:`_prepare`, trained by the one loop (:class:`~pyro_attention.inference.loop.
    Trainer`) with translation's callbacks."""
    run, saved = _prepare(config, resume=resume, overwrite=overwrite, log=log)
    plateau = PlateauDecay(run.optim, config.lr, config.lr_decay, lambda _: run.val.ppl)
    if saved is not None:
        plateau.load_state_dict(saved["plateau"])
    early = EarlyStopping(plateau, config.patience, run.log)
    checkpoints = Checkpointing(run, plateau)
    bar = ProgressBar(type(run.pair).__name__, disable=tqdm_disabled(progress and run.rank == 0), dynamic_ncols=True)
    callbacks = [Validate(run), plateau, History(run, plateau), checkpoints]
    if run.rank == 0:
        callbacks.append(CsvLogger(run.csv_path, CSV_FIELDS, append=True,
                                   step_row=lambda _: last_row("step", run.history["steps"]),
                                   epoch_row=lambda _: last_row("epoch", run.history["epochs"])))
        callbacks.append(TensorBoardLog(run))
    callbacks += [bar, EpochLog(run, plateau), early, StopOnSignal(run, checkpoints)]
    if run.rank == 0 and not bar_shows(progress):
        callbacks.append(ProgressLines(run.log, epoch_lines=False))  # no bar shows: a line a minute within an epoch
    trainer = Trainer(_svi_step(run, plateau), run.epoch_batches, config.epochs, callbacks)
    if saved is not None:
        trainer.load_state_dict(saved["trainer"])
    bar.total = 0 if early.reached() else trainer.steps_left(len(run.train_batches))
    if bar.total == 0 and not early.reached():
        run.log(f"nothing to do: {trainer.epoch} of {config.epochs} epochs done (raise --epochs to train further)")
    trainer.fit()
    run.log(f"best validation PPL {plateau.best:.4f} at epoch {plateau.best_epoch + 1}; checkpoints in {run.out}")
    return TrainResult(run.pair, run.network, run.src_vocab, run.tgt_vocab, run.out, trainer.epoch, trainer.step,
                       plateau.best, plateau.best_epoch, plateau.lr, run.history, early.stopped)


@dataclass
class TrainingRun:
    """A translation run being trained: what :func:`_train`'s callbacks share."""

    config: TranslationConfig
    rank: int
    world_size: int
    log: Log
    src_vocab: Vocab
    tgt_vocab: Vocab
    network: Seq2Seq
    pair: AlignmentPair
    optim: FusedClippedAdam
    train_batches: list[TranslationBatch]
    val_batches: list[TranslationBatch]
    history: dict[str, Any]
    val: Validation | None = None  # of the epoch just finished

    @property
    def out(self) -> Path:
        return self.config.out_dir

    @property
    def last_path(self) -> Path:
        return self.out / "last.pt"

    @property
    def csv_path(self) -> Path:
        return self.out / "history.csv"

    def epoch_batches(self, epoch: int) -> list[TranslationBatch]:
        """The batches of ``epoch`` in its order (drawn from ``(seed, epoch)``), the network in training mode."""
        self.network.train()
        order = torch.randperm(len(self.train_batches), generator=epoch_generator(self.config.seed, epoch)).tolist()
        return [self.train_batches[i] for i in order]


def _prepare(
    config: TranslationConfig, *, resume: bool, overwrite: bool, log: Log | None
) -> tuple[TrainingRun, dict[str, Any]]:
    """Data, vocabularies, the pair and its optimiser, restored from ``last.pt`` when resuming; the output folder
    made and ``history.csv`` (re)written.  Returns the run and the checkpoint it resumes (``None``: a fresh run),
    whose ``trainer`` and ``plateau`` states the loop continues from."""
    rank, world_size = init_from_env()
    device = resolve_device(config.device, int(os.environ.get("LOCAL_RANK", rank)) if world_size > 1 else None)
    log = (log or (lambda _: None)) if rank == 0 else (lambda _: None)  # only process 0 logs and writes
    if config.threads:
        torch.set_num_threads(config.threads)
    saved = _saved_state(config, resume=resume, overwrite=overwrite)
    if saved is None and config.init_from and not Path(config.init_from).exists():  # before loading the corpus
        raise FileNotFoundError(f"{config.init_from}: no such checkpoint (init_from)")
    corpora = load_corpora(config, log)
    src_vocab, tgt_vocab = build_vocabs(config, corpora.train)
    if saved is not None:
        check_compatible(saved, config, src_vocab, tgt_vocab)
        if config.init_from and config.init_from != saved["config"].get("init_from"):
            raise ValueError(f"init_from: a resumed run continues from its last.pt; --init-from {config.init_from} "
                             "only starts a fresh run's weights (drop it, or start afresh with --overwrite)")
        changed = [k for k, v in config.to_dict().items() if saved["config"].get(k) != v and k != "init_from"]
        if changed:
            log("note: changed since the checkpoint, applied from here on: " + ", ".join(
                f"{k} {saved['config'].get(k)!r} -> {getattr(config, k)!r}" for k in changed)
                + (" (the learning rate restarts at the new --lr)" if "lr" in changed else ""))
    log(f"vocabularies: source {len(src_vocab)}, target {len(tgt_vocab)} (min_freq {config.min_freq}, "
        f"max_vocab {config.max_vocab})")
    train_batches = [b.to(device) for b in make_batches(corpora.train, src_vocab, tgt_vocab, config.batch_size)]
    val_batches = [b.to(device) for b in make_batches(corpora.val, src_vocab, tgt_vocab, max(config.batch_size, 64))]
    pyro.clear_param_store()
    pyro.set_rng_seed(config.seed)
    network, pair = build_pair(config, src_vocab, tgt_vocab)
    if saved is None and config.init_from:
        loaded, fresh = warm_start(pair, config.init_from, src_vocab, tgt_vocab)
        log(f"init_from {config.init_from}: {len(loaded)} of {len(loaded) + len(fresh)} weights copied"
            + (f"; as initialised: {', '.join(fresh[:8])}{' ...' if len(fresh) > 8 else ''}" if fresh else ""))
    for name, module in pair.modules().items():  # every parameter in the store before the first step
        module.to(device)
        pyro.module(name, module)
    if saved is not None:
        load_weights(pair, saved)
        check_param_store(saved)
        pair.set_step(saved["trainer"]["step"])  # KL annealing continues where it stopped (a no-op for the others)
        if saved["config"]["lr"] != config.lr:
            saved["plateau"]["lr"] = config.lr  # a new --lr replaces the saved (possibly decayed) one
    broadcast_parameters()
    optim = _optimiser(config, saved["plateau"]["lr"] if saved is not None else config.lr, saved)
    run = TrainingRun(config, rank, world_size, log, src_vocab, tgt_vocab, network, pair, optim, train_batches,
                      val_batches, saved["history"] if saved is not None else empty_history())
    if saved is not None:
        _restore_rng(run, saved)
    _make_out(run)
    return run, saved


def _saved_state(config: TranslationConfig, *, resume: bool, overwrite: bool) -> dict[str, Any] | None:
    """``last.pt`` of the output folder when resuming; a fresh run into a folder that holds one is refused
    (unless ``overwrite``)."""
    last_path = config.out_dir / "last.pt"
    if resume:
        if not last_path.is_file():
            raise FileNotFoundError(f"cannot resume: {last_path} does not exist (train without --resume first)")
        return read_checkpoint(last_path)
    if last_path.exists() and not overwrite:
        raise FileExistsError(
            f"{config.out_dir} already holds a checkpoint ({last_path}); pass --resume to continue it, --overwrite to "
            f"start afresh, or choose another --out"
        )
    return None


def _optimiser(config: TranslationConfig, lr: float, saved: dict[str, Any] | None) -> FusedClippedAdam:
    """The optimiser at ``lr``, its state restored from ``saved`` with this run's ``lr`` and ``clip_norm``."""
    optim = FusedClippedAdam({"lr": lr, "clip_norm": config.clip_norm})
    if saved is not None:  # Pyro's public state: each parameter's optimiser state dict, whose groups carry the settings
        optim.set_state({name: {**state, "param_groups": [{**group, "lr": lr, "clip_norm": config.clip_norm}
                                                          for group in state["param_groups"]]}
                         for name, state in saved["optim"].items()})
    return optim


def _restore_rng(run: TrainingRun, saved: dict[str, Any]) -> None:
    """This process's random states of the checkpoint (written by as many processes as resume it), and say so."""
    ranks, written_by = saved["rng_ranks"], saved["world_size"]
    if written_by != run.world_size:
        raise ValueError(
            f"{run.last_path}: written by {written_by} process(es), resumed by {run.world_size}: the shards and "
            "sampling streams cannot continue exactly; resume with the same number of processes"
        )
    restore_rng_state(ranks[run.rank] if run.world_size > 1 else saved["rng"])
    trainer, plateau, epochs = saved["trainer"], saved["plateau"], run.config.epochs
    epoch, position = trainer["epoch"], trainer["position"]
    run.log(  # epochs counted from 1, as in the progress bar and the "epoch E/N" lines
        f"resumed from {run.last_path}: "
        + (f"in epoch {epoch + 1}/{epochs}, {position} batches in" if position else f"after epoch {epoch}/{epochs}")
        + f" (step {trainer['step']}), best validation {plateau['best']:.4g}, lr {plateau['lr']:.3g}"
    )


def _make_out(run: TrainingRun) -> None:
    """Process 0: the output folder, without the temporary files of an interrupted save, and ``history.csv``
    rewritten from the history (a resumed run drops the rows of an interrupted epoch)."""
    if run.rank != 0:
        return
    with writing(run.out):
        run.out.mkdir(parents=True, exist_ok=True)
    for stale in run.out.glob(".*.pt.*.tmp"):  # a save that a crash interrupted (the checkpoint itself is intact)
        with contextlib.suppress(OSError):
            stale.unlink(missing_ok=True)
    write_history_csv(run.csv_path, run.history)


def _svi_step(run: TrainingRun, plateau: PlateauDecay) -> SVIStep:
    """One SVI step on this process's shard of a batch (the warm-up guide first), per token of the global batch."""
    config, elbo, pair = run.config, run.pair.elbo(), run.pair
    return SVIStep(
        _svi(run, pair.guide, run.optim, elbo),
        tokens=lambda batch: int(batch.target_mask.sum()),  # of the global batch: every process shards the same one
        diverged=lambda loss, t: (
            f"training diverged: non-finite loss {loss} at step {t.step + 1} (epoch {t.epoch + 1}) with lr "
            f"{plateau.lr:g}; lower --lr (or --clip-norm) and start again with --overwrite, or --resume from "
            f"{run.last_path} with the lower --lr"
        ),
        warmup=_svi(run, pair.warmup_guide, run.optim, elbo) if config.warmup_steps else None,
        warmup_steps=config.warmup_steps,
        shard=lambda batch: shard(batch, run.rank, run.world_size),
        guide_only=_guide_only(run, elbo),
        guide_steps=config.guide_steps,
        guide_steps_for=config.guide_steps_for,
        matmul_precision=config.matmul_precision,
    )


def _svi(run: TrainingRun, guide: Any, optim: Any, elbo: Any) -> DataParallelSVI:
    """The SVI of the pair's model with ``guide``, the model and guide under the config's ``autocast``."""
    return DataParallelSVI(run.pair.model, guide, optim, elbo, autocast=AUTOCAST_DTYPES[run.config.autocast],
                           device_type=torch.device(run.config.device).type)


def _guide_only(run: TrainingRun, elbo: Any) -> DataParallelSVI | None:
    """The SVI of ``guide_steps``: the guide's own parameters stepped alone (``None`` without ``guide_steps``)."""
    if not run.config.guide_steps:
        return None
    own = run.pair.guide_parameters()
    if not own:
        raise ValueError(f"guide_steps: {type(run.pair).__name__} has no parameters of its guide's own to train alone "
                         "(pair.guide_parameters() is empty; the variational pair's are its network's "
                         "inference_parameters())")
    return _svi(run, run.pair.guide, SubsetOptim(run.optim, own), elbo)
