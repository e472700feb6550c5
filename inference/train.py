"""``fit``: stochastic variational inference for any pair, with Pyro's own ELBO and optimiser.

``fit`` is a use of the one training loop, :class:`~pyro_attention.inference.loop.Trainer` (its step an
:class:`~pyro_attention.inference.loop.SVIStep`; recording, validation, the progress bar and the CSV log are
callbacks).  Each step is ``SVI(pair.model, guide, FusedClippedAdam, pair.elbo()).step(batch)`` (Pyro's
``ClippedAdam`` update in one fused pass; as :class:`~pyro_attention.inference.distributed.DataParallelSVI`
takes it in one process); ``guide`` is
``pair.warmup_guide`` for the first ``warmup_steps`` steps when the pair has one (the Dirichlet pair's warm
start on ``E_p[log p(y | x, z)]``), and ``pair.guide`` after.  ``fit`` owns Pyro's global parameter store: it
clears it and registers the pair's network afresh, so training several pairs one after the other is safe.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyro
import torch

from pyro_attention.checks import count
from pyro_attention.inference.distributed import DataParallelSVI
from pyro_attention.inference.evaluate import log_likelihood
from pyro_attention.inference.loop import (
    Callback,
    CsvLogger,
    ProgressBar,
    ProgressLines,
    SVIStep,
    Trainer,
    bar_shows,
    check_matmul_precision,
)
from pyro_attention.inference.optim import FusedClippedAdam, check_lr
from pyro_attention.pair import AlignmentPair
from pyro_attention.precision import check_autocast


@dataclass
class FitResult:
    """What :func:`fit` measured: loss per step (the negative ELBO per target token) and validation per epoch."""

    losses: list[float] = field(default_factory=list)
    val_nll: list[float] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0


def _batches(data: Any, batch_size: int, generator: torch.Generator) -> Iterator[Any]:
    if hasattr(data, "batches"):
        return iter(data.batches(batch_size, shuffle=True, generator=generator))
    return iter(data)


def _num_tokens(pair: AlignmentPair, batch: Any) -> int:
    """The batch's target tokens, from its ``target_mask`` (every batch of the package has one); a batch type
    without one is encoded (under ``no_grad``) to read the network's mask."""
    mask = getattr(batch, "target_mask", None)
    if mask is None:
        with torch.no_grad():
            mask = pair.network.encode(batch).target_mask
    return int(mask.sum())


def evaluate_nll(pair: AlignmentPair, data: Any, batch_size: int = 256, num_samples: int = 20) -> float:
    """Mean ``-log p(y | x)`` per target token over ``data`` (exact where the pair allows it)."""
    total, tokens = 0.0, 0
    batches = data.batches(batch_size) if hasattr(data, "batches") else data
    for batch in batches:
        ll = log_likelihood(pair, batch, num_samples=num_samples)
        total -= float(ll.per_example.sum())
        tokens += int(ll.num_tokens.sum())
    return total / max(tokens, 1)


CSV_FIELDS = ("kind", "epoch", "step", "loss", "tokens", "val_nll", "seconds")


def fit(
    pair: AlignmentPair,
    train: Iterable[Any],
    val: Iterable[Any] | None = None,
    *,
    num_epochs: int = 1,
    batch_size: int = 32,
    lr: float = 1e-3,
    param_lr: dict[str, float] | None = None,
    clip_norm: float = 5.0,
    warmup_steps: int = 0,
    seed: int = 0,
    progress: bool = True,
    num_samples: int = 20,
    log_csv: str | os.PathLike | None = None,
    matmul_precision: str | None = None,
    autocast: torch.dtype | None = None,
    log: Callable[[str], None] | None = None,
) -> FitResult:
    """Train ``pair`` by SVI on ``pair.elbo()``.

    :param train: a dataset with ``batches(batch_size, shuffle, generator)`` or an iterable of batches.
    :param val: optional validation data; its mean per-token NLL is computed after every epoch.
    :param param_lr: learning rates by parameter name prefix, the network's own names (``{"lexical.": 0.1}``: every
        parameter under the submodule ``lexical``); the longest matching prefix wins, the others get ``lr``.
        Passed to Pyro's optimiser as its per-parameter ``optim_args`` function.
    :param clip_norm: per-parameter gradient norm clipping of :class:`pyro.optim.ClippedAdam`.
    :param warmup_steps: steps with ``pair.warmup_guide`` first (pairs that define one).
    :param num_samples: importance samples for validation of pairs without an exact likelihood.
    :param log_csv: also write one CSV row per step (``kind=step``: epoch, step, loss per token, tokens, seconds)
        and per validation (``kind=val``: ``val_nll``) to this file, flushed as it goes.
    :param matmul_precision: ``torch.set_float32_matmul_precision`` for the training steps alone (``"medium"``:
        bfloat16 products, 1.5-1.7x per step of the exact ``tanh`` translation rows on a CPU with AMX); validation
        keeps the process's (:func:`~pyro_attention.inference.loop.float32_matmul_precision`); ``None``: the
        process's throughout.
    :param autocast: ``torch.bfloat16``: the training steps' model and guide calls under ``torch.autocast`` on the
        network's device (:func:`~pyro_attention.precision.autocast_calls`: its products in bfloat16, the likelihood,
        the kernels and the ELBO in float32); validation keeps float32; ``None`` (default): float32 throughout.
    :param log: also a line through this function at every epoch's end and every minute
        (:class:`~pyro_attention.inference.loop.ProgressLines`), for a log where no bar shows.
    """
    for name, value in dict(num_epochs=num_epochs, batch_size=batch_size, warmup_steps=warmup_steps,
                            num_samples=num_samples, seed=seed).items():
        count(value, f"fit: {name}")
    if num_epochs < 0 or batch_size < 1 or warmup_steps < 0:
        raise ValueError(f"fit: need num_epochs >= 0, batch_size >= 1, warmup_steps >= 0; got num_epochs={num_epochs}, "
                         f"batch_size={batch_size}, warmup_steps={warmup_steps}")
    try:
        lr = check_lr(lr)
        if matmul_precision is not None:
            check_matmul_precision(matmul_precision)
        check_autocast(autocast)
        rates = {prefix: check_lr(rate, f"param_lr[{prefix!r}]") for prefix, rate in (param_lr or {}).items()}
    except ValueError as e:
        raise ValueError(f"fit: {e}") from None
    if warmup_steps and not pair.has_warmup:
        raise ValueError(f"fit: warmup_steps={warmup_steps} but {type(pair).__name__} has no warmup_guide")
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    optim = FusedClippedAdam(adam_args(lr, rates, clip_norm))
    elbo = pair.elbo()
    svi = functools.partial(DataParallelSVI, optim=optim, loss=elbo, distributed=False, autocast=autocast,
                            device_type=pair.network.device.type)
    step = SVIStep(
        svi(pair.model, pair.guide),
        tokens=lambda batch: _num_tokens(pair, batch),
        diverged=lambda loss, trainer: (f"fit: training diverged: non-finite loss {loss} at step {trainer.step} "
                                        f"(epoch {trainer.epoch + 1}); lower lr (it is {lr:g})"),
        warmup=svi(pair.model, pair.warmup_guide) if warmup_steps else None,
        warmup_steps=warmup_steps,
        matmul_precision=matmul_precision,
    )
    result = FitResult()
    callbacks = _fit_callbacks(pair, train, val, result, progress, num_samples, log_csv, log)
    trainer = Trainer(step, lambda _: _batches(train, batch_size, generator), num_epochs, callbacks).fit()
    result.seconds = trainer.elapsed
    return result


def _fit_callbacks(pair: AlignmentPair, train: Any, val: Any, result: FitResult, progress: bool, num_samples: int,
                   log_csv: str | os.PathLike | None, log: Callable[[str], None] | None) -> list[Callback]:
    """What :func:`fit` does around its steps: the record, the bar, validation, the CSV rows, the progress lines."""
    bar = ProgressBar(type(pair).__name__, disable=None if progress else True, leave=False)
    callbacks: list[Callback] = [RecordFit(result, train), bar]
    if val is not None:
        callbacks.append(_Validate(pair, val, num_samples, result, bar if progress else None))
    if log_csv is not None:
        callbacks.append(CsvLogger(
            log_csv, CSV_FIELDS,
            step_row=lambda t: dict(kind="step", epoch=t.epoch, step=t.step, loss=t.loss, tokens=t.tokens,
                                    seconds=t.elapsed),
            epoch_row=lambda t: None if val is None else dict(kind="val", epoch=t.epoch - 1, step=t.step,
                                                              val_nll=result.val_nll[-1], seconds=t.elapsed),
        ))
    if log is not None:  # with a bar on the terminal, a line per epoch only
        callbacks.append(ProgressLines(log, type(pair).__name__, every=math.inf if bar_shows(progress) else 60.0))
    return callbacks


def adam_args(lr: float, rates: dict[str, float], clip_norm: float) -> Any:
    """Pyro's ``optim_args``: one dict, or with per-prefix rates a function ``(module_name, param_name) -> dict``."""
    if not rates:
        return {"lr": lr, "clip_norm": clip_norm}

    def args(module_name: str, param_name: str) -> dict[str, float]:
        matches = [prefix for prefix in rates if param_name.startswith(prefix)]
        return {"lr": rates[max(matches, key=len)] if matches else lr, "clip_norm": clip_norm}

    return args


class RecordFit(Callback):
    """``fit``'s record: every step's loss and the step count; an epoch without a step is refused."""

    def __init__(self, result: FitResult, train: Any) -> None:
        self.result, self.train = result, train

    def on_step_end(self, trainer: Trainer) -> None:
        self.result.losses.append(trainer.loss)
        self.result.steps = trainer.step

    def on_epoch_end(self, trainer: Trainer) -> None:
        if trainer.step == 0:
            raise ValueError(
                f"fit: the training data ({type(self.train).__name__}) holds no batches; nothing to train on"
            )


class _Validate(Callback):
    """``fit``'s validation after every epoch: the mean NLL per token, printed above the bar when there is one."""

    def __init__(self, pair: AlignmentPair, val: Any, num_samples: int, result: FitResult,
                 bar: ProgressBar | None) -> None:
        self.pair, self.val, self.num_samples, self.result, self.bar = pair, val, num_samples, result, bar

    def on_epoch_end(self, trainer: Trainer) -> None:
        self.result.val_nll.append(evaluate_nll(self.pair, self.val, num_samples=self.num_samples))
        if self.bar is not None:
            self.bar.write(f"{type(self.pair).__name__} epoch {trainer.epoch - 1}: validation NLL/token "
                           f"{self.result.val_nll[-1]:.4f}")
