"""SVI step time of the categorical pairs: Pyro versus a hand-written pure-torch step of the same loss.

What is measured, per pair (soft, marginal, hard-enum, hard-sample, va-enum, va-sample), on one synthetic
:class:`~pyro_attention.data.RegionBatch` (``B`` examples of ``S`` region slots with ``F`` random features,
each example with between ``S // 2`` and ``S`` real regions, a random question vector and a random answer
among ``A`` classes) and a :class:`~pyro_attention.networks.RegionQA` network of hidden size ``D``:

* **pyro**: ``pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": lr}), pair.elbo()).step(batch)``;
* **torch**: ``zero_grad``; the loss of ``benchmarks/handwritten.py`` (same network methods, same loss and
  gradient); ``backward``; ``torch.optim.Adam(lr)`` step.  No gradient clipping on either side.

Both sides start from a fresh network built with the same seed (Pyro's parameter store is cleared before each
pair); steps of the two sides alternate (the side that goes first alternates too) so that slow drifts of the
machine hit both; after ``--warmup`` untimed steps each, the median of ``--repeats`` timed steps is reported,
with the ratio pyro / torch.  Pyro's validation is off while timing (``pyro.enable_validation(False)``).

Before any timing, a fairness check (validation on, float32): for every deterministic pair (soft, marginal,
enum) ``pair.elbo().loss(pair.model, pair.guide, batch)`` must equal the hand-written loss to a relative
``1e-4``, and for every pair the gradients of ``elbo.loss_and_grads`` and of the hand-written loss must agree
(sampled pairs draw the same alignment from the same seed); the script raises if either fails.

Run (the whole default size takes a few minutes on 2 cores)::

    python benchmarks/step_time.py                       # B=64 S=36 D=512 A=3000, 1 thread
    python benchmarks/step_time.py --pairs soft va-enum --threads 2 --repeats 10
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pyro
import pyro.optim
import torch
from pyro.infer import SVI

from pyro_attention import models
from pyro_attention.data.region_qa import RegionBatch
from pyro_attention.networks.region_qa import RegionQA


def _load_handwritten() -> ModuleType:
    """``benchmarks/handwritten.py``, loaded by path (``benchmarks/`` is not a package)."""
    name = "_pyro_attention_benchmarks_handwritten"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().with_name("handwritten.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


handwritten = _load_handwritten()

#: name -> (pair factory, hand-written loss, deterministic loss?)
PAIRS: dict[str, tuple[Callable[[RegionQA], Any], Callable[[RegionQA, RegionBatch], torch.Tensor], bool]] = {
    "soft": (models.SoftAttention, handwritten.soft_loss, True),
    "marginal": (models.MarginalLikelihood, handwritten.marginal_loss, True),
    "hard-enum": (lambda net: models.HardAttention(net, "enum"), handwritten.hard_enum_loss, True),
    "hard-sample": (lambda net: models.HardAttention(net, "sample"), handwritten.hard_sample_loss, False),
    "va-enum": (lambda net: models.VariationalAttention(net, "enum"), handwritten.va_enum_loss, True),
    "va-sample": (lambda net: models.VariationalAttention(net, "sample"), handwritten.va_sample_loss, False),
}

#: relative tolerance of the loss check and of the gradient check (float32)
LOSS_RTOL = 1e-4
GRAD_RTOL = 1e-4


def make_batch(args: argparse.Namespace) -> RegionBatch:
    """A seeded synthetic batch; example ``b`` has between ``S // 2`` and ``S`` real regions."""
    g = torch.Generator().manual_seed(args.seed)
    B, S, F = args.batch_size, args.regions, args.features
    lengths = torch.randint(max(1, S // 2), S + 1, (B,), generator=g)
    mask = torch.arange(S).unsqueeze(0) < lengths.unsqueeze(1)
    regions = torch.randn(B, S, F, generator=g) * mask.unsqueeze(-1)
    question = torch.randn(B, args.question_size, generator=g)
    answer = torch.randint(args.answers, (B,), generator=g)
    batch = RegionBatch(regions, mask, question, answer)
    batch.validate(args.answers)
    return batch


def make_network(args: argparse.Namespace) -> RegionQA:
    """A fresh network; the same seed gives the same weights."""
    torch.manual_seed(args.seed)
    return RegionQA(args.features, args.answers, question_size=args.question_size, hidden_size=args.hidden)


def _grads(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: (torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()) for n, p in net.named_parameters()}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def check_pair(name: str, args: argparse.Namespace, batch: RegionBatch) -> dict[str, Any]:
    """Compare Pyro's ELBO loss (deterministic pairs) and gradients with the hand-written loss."""
    factory, loss_fn, deterministic = PAIRS[name]
    out: dict[str, Any] = {"deterministic": deterministic}
    with pyro.validation_enabled(True):
        pyro.clear_param_store()
        net_pyro = make_network(args)
        pair = factory(net_pyro)
        net_torch = make_network(args)
        if deterministic:
            loss_pyro = float(pair.elbo().loss(pair.model, pair.guide, batch))
            with torch.no_grad():
                loss_torch = float(loss_fn(net_torch, batch))
            out.update(loss_pyro=loss_pyro, loss_torch=loss_torch, loss_rel_err=_rel(loss_torch, loss_pyro))
        pyro.set_rng_seed(args.seed)
        pair.elbo().loss_and_grads(pair.model, pair.guide, batch)
        torch.manual_seed(args.seed)
        loss_fn(net_torch, batch).backward()
        g_pyro, g_torch = _grads(net_pyro), _grads(net_torch)
        num = math.sqrt(sum(float((g_pyro[n] - g_torch[n]).pow(2).sum()) for n in g_pyro))
        den = math.sqrt(sum(float(g.pow(2).sum()) for g in g_pyro.values()))
        out["grad_rel_err"] = num / max(den, 1e-30)
        pyro.clear_param_store()
    out["passed"] = out["grad_rel_err"] < GRAD_RTOL and (not deterministic or out["loss_rel_err"] < LOSS_RTOL)
    return out


def time_pair(name: str, args: argparse.Namespace, batch: RegionBatch) -> dict[str, float]:
    """Median step time of each side (alternating steps) and their ratio."""
    factory, loss_fn, _ = PAIRS[name]
    pyro.clear_param_store()
    pair = factory(make_network(args))
    svi = SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": args.lr}), pair.elbo())
    net = make_network(args)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)

    def torch_step() -> float:
        optimizer.zero_grad()
        loss = loss_fn(net, batch)
        loss.backward()
        optimizer.step()
        return loss.item()

    def pyro_step() -> float:
        return svi.step(batch)

    times: dict[str, list[float]] = {"pyro": [], "torch": []}
    steps = {"pyro": pyro_step, "torch": torch_step}
    with pyro.validation_enabled(False):
        for i in range(args.warmup + args.repeats):
            order = ("pyro", "torch") if i % 2 == 0 else ("torch", "pyro")
            for side in order:
                start = time.perf_counter()
                loss = steps[side]()
                elapsed = time.perf_counter() - start
                if not math.isfinite(loss):
                    raise FloatingPointError(f"{name}: non-finite {side} loss {loss} at step {i}")
                if i >= args.warmup:
                    times[side].append(elapsed)
    pyro.clear_param_store()
    p, t = statistics.median(times["pyro"]), statistics.median(times["torch"])
    return {"pyro": p, "torch": t, "ratio": p / t}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=64, help="B, examples per batch")
    parser.add_argument("--regions", type=int, default=36, help="S, region slots (real: S // 2 .. S)")
    parser.add_argument("--hidden", type=int, default=512, help="D, hidden size of RegionQA")
    parser.add_argument("--answers", type=int, default=3000, help="A, answer classes")
    parser.add_argument("--features", type=int, default=64, help="F, region feature size")
    parser.add_argument("--question-size", type=int, default=32, help="size of the random question vectors")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (both sides)")
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per side (median reported)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per side first")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--pairs", nargs="+", choices=list(PAIRS), default=list(PAIRS), help="pairs to run")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(args: argparse.Namespace) -> dict[str, Any]:
    """Run the fairness checks, then the timings; print both tables and return them."""
    if args.repeats < 1 or args.warmup < 0 or args.threads < 1:
        raise ValueError(
            f"need repeats >= 1, warmup >= 0, threads >= 1; got {args.repeats}, {args.warmup}, {args.threads}"
        )
    old_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        batch = make_batch(args)
        real = batch.region_mask.sum(-1)
        print("SVI step time: Pyro vs a hand-written torch step of the same loss (float32, CPU)")
        print(
            f"torch {torch.__version__}, pyro-ppl {pyro.__version__}, Python {platform.python_version()}, "
            f"threads {torch.get_num_threads()} (torch.set_num_threads)"
        )
        print(
            f"B={args.batch_size} S={args.regions} (real regions {int(real.min())}..{int(real.max())}) "
            f"D={args.hidden} A={args.answers} F={args.features} question={args.question_size} "
            f"lr={args.lr:g} seed={args.seed}"
        )
        print("Adam on both sides (pyro.optim.Adam / torch.optim.Adam), no clipping")
        print()
        print(
            f"fairness check (Pyro validation on): loss rel err < {LOSS_RTOL:g} (deterministic pairs), "
            f"gradient rel err < {GRAD_RTOL:g}"
        )
        print(f"{'pair':<12} {'pyro loss':>14} {'torch loss':>14} {'loss rel err':>12} {'grad rel err':>12}  ok")
        checks = {}
        for name in args.pairs:
            c = checks[name] = check_pair(name, args, batch)
            if c["deterministic"]:
                cols = f"{c['loss_pyro']:>14.6f} {c['loss_torch']:>14.6f} {c['loss_rel_err']:>12.2e}"
            else:
                cols = f"{'(sampled)':>14} {'':>14} {'':>12}"
            print(f"{name:<12} {cols} {c['grad_rel_err']:>12.2e}  {'yes' if c['passed'] else 'NO'}")
        failed = [n for n, c in checks.items() if not c["passed"]]
        if failed:
            raise AssertionError(f"fairness check failed for {failed}: {checks}")
        print()
        print(
            f"step time, median of {args.repeats} after {args.warmup} warmup steps "
            f"(Pyro validation off: pyro.enable_validation(False))"
        )
        print(f"{'pair':<12} {'pyro [s]':>10} {'torch [s]':>10} {'pyro/torch':>11}")
        times = {}
        for name in args.pairs:
            t = times[name] = time_pair(name, args, batch)
            print(f"{name:<12} {t['pyro']:>10.4f} {t['torch']:>10.4f} {t['ratio']:>10.2f}x", flush=True)
    finally:
        torch.set_num_threads(old_threads)
    return {
        "threads": args.threads,
        "torch_version": torch.__version__,
        "pyro_version": pyro.__version__,
        "validation": False,
        "checks": checks,
        "times": times,
    }


if __name__ == "__main__":
    main(make_parser().parse_args())
