"""``fit``: stochastic variational inference for any pair, with Pyro's own ELBO and optimiser.

Each step is ``SVI(pair.model, guide, FusedClippedAdam, pair.elbo()).step(batch)`` (Pyro's ``ClippedAdam`` update
in one fused pass; as
:class:`~pyro_attention.inference.distributed.DataParallelSVI` takes it in one process); ``guide`` is
``pair.warmup_guide`` for the first ``warmup_steps`` steps when the pair has one (the Dirichlet pair's warm
start on ``E_p[log p(y | x, z)]``), and ``pair.guide`` after.  ``fit`` owns Pyro's global parameter store: it
clears it and registers the pair's network afresh, so training several pairs one after the other is safe.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyro
import torch
from tqdm.auto import tqdm

from pyro_attention.inference.distributed import DataParallelSVI
from pyro_attention.inference.evaluate import log_likelihood
from pyro_attention.inference.optim import FusedClippedAdam, check_lr
from pyro_attention.outputs import writing
from pyro_attention.pair import AlignmentPair


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
    with torch.no_grad():
        return int(pair.network.encode(batch).target_mask.sum())


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


def _write(log: tuple[csv.DictWriter, Any] | None, **values: Any) -> None:
    """One CSV row, flushed (so a crashed run keeps every row it wrote)."""
    if log is not None:
        with writing(log[1].name):  # a full disk: "cannot write PATH: No space left on device (errno 28)"
            log[0].writerow({k: f"{v:.9g}" if isinstance(v, float) else v for k, v in values.items()})
            log[1].flush()


def fit(
    pair: AlignmentPair,
    train: Iterable[Any],
    val: Iterable[Any] | None = None,
    *,
    num_epochs: int = 1,
    batch_size: int = 32,
    lr: float = 1e-3,
    clip_norm: float = 5.0,
    warmup_steps: int = 0,
    seed: int = 0,
    progress: bool = True,
    num_samples: int = 20,
    log_csv: str | os.PathLike | None = None,
) -> FitResult:
    """Train ``pair`` by SVI on ``pair.elbo()``.

    :param train: a dataset with ``batches(batch_size, shuffle, generator)`` or an iterable of batches.
    :param val: optional validation data; its mean per-token NLL is computed after every epoch.
    :param clip_norm: per-parameter gradient norm clipping of :class:`pyro.optim.ClippedAdam`.
    :param warmup_steps: steps with ``pair.warmup_guide`` first (pairs that define one).
    :param num_samples: importance samples for validation of pairs without an exact likelihood.
    :param log_csv: also write one CSV row per step (``kind=step``: epoch, step, loss per token, tokens, seconds)
        and per validation (``kind=val``: ``val_nll``) to this file, flushed as it goes.
    """
    if num_epochs < 0 or batch_size < 1 or warmup_steps < 0:
        raise ValueError(
            f"fit: need num_epochs >= 0, batch_size >= 1, warmup_steps >= 0; got "
            f"num_epochs={num_epochs}, batch_size={batch_size}, warmup_steps={warmup_steps}"
        )
    try:
        lr = check_lr(lr)
    except ValueError as e:
        raise ValueError(f"fit: {e}") from None
    if warmup_steps and not pair.has_warmup:
        raise ValueError(f"fit: warmup_steps={warmup_steps} but {type(pair).__name__} has no warmup_guide")
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    optim = FusedClippedAdam({"lr": lr, "clip_norm": clip_norm})
    elbo = pair.elbo()
    svi = DataParallelSVI(pair.model, pair.guide, optim, elbo, distributed=False)
    warm = DataParallelSVI(pair.model, pair.warmup_guide, optim, elbo, distributed=False) if warmup_steps else None
    result = FitResult()
    start = time.perf_counter()
    bar = tqdm(total=None, disable=None if progress else True, desc=type(pair).__name__, unit="step", leave=False)
    seen = 0
    with writing(log_csv or ""):
        log_file = None if log_csv is None else open(log_csv, "w", newline="", encoding="utf-8")  # closed below
    log = None if log_file is None else (csv.DictWriter(log_file, CSV_FIELDS), log_file)
    if log is not None:
        log[0].writeheader()
    try:
        for epoch in range(num_epochs):
            for batch in _batches(train, batch_size, generator):
                tokens = _num_tokens(pair, batch)
                step = warm if (warm is not None and result.steps < warmup_steps) else svi
                loss = step.step(batch) / max(tokens, 1)
                if not math.isfinite(loss):
                    raise FloatingPointError(
                        f"fit: training diverged: non-finite loss {loss} at step {result.steps} (epoch {epoch + 1}); "
                        f"lower lr (it is {lr:g})"
                    )
                result.losses.append(loss)
                result.steps += 1
                seen += tokens
                bar.update(1)
                elapsed = time.perf_counter() - start
                bar.set_postfix(epoch=f"{epoch + 1}/{num_epochs}", loss=f"{loss:.3f}", tok_s=f"{seen / elapsed:.0f}")
                _write(log, kind="step", epoch=epoch, step=result.steps, loss=loss, tokens=tokens,
                       seconds=time.perf_counter() - start)
            if result.steps == 0:
                bar.close()
                raise ValueError(
                    f"fit: the training data ({type(train).__name__}) holds no batches; nothing to train on"
                )
            if val is not None:
                result.val_nll.append(evaluate_nll(pair, val, num_samples=num_samples))
                _write(log, kind="val", epoch=epoch, step=result.steps, val_nll=result.val_nll[-1],
                       seconds=time.perf_counter() - start)
                if progress:
                    bar.write(f"{type(pair).__name__} epoch {epoch}: validation NLL/token {result.val_nll[-1]:.4f}")
    finally:
        if log_file is not None:
            log_file.close()
    bar.close()
    result.seconds = time.perf_counter() - start
    return result
