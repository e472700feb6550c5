"""The benchmark command: cost of every estimator, measured in one run, written to ``docs/performance.md``.

    python benchmarks/run.py                 # quick (default): region QA, translation small, short curves
    python benchmarks/run.py --full          # + translation mid and large (S=T=50, V=1k / 10k), curves S = 10 ... 200
    python benchmarks/run.py --device cuda   # every tensor (networks, batches, timings, memory) on that device

What one run measures (all variants of a size interleaved step by step, the starting variant rotating, so that
a slow drift of a shared machine hits every variant; medians reported; ratios are within one run):

* **steps** -- for each size and each pair (soft, marginal, hard-enum, hard-sample, va-enum, va-sample): the
  SVI step of the Pyro pair as ``fit`` and the translation trainer take it (``DataParallelSVI(pair.model,
  pair.guide, pyro.optim.Adam, pair.elbo()).step``: ``SVI.step`` with gradients reset to ``None``) and a
  hand-written pure-torch step of the same loss and gradients (``benchmarks/handwritten.py``, ``torch.optim.Adam``);
  the ratio pyro / torch; sampled pairs also against Pyro soft attention.  At the large size also the
  *straightforward* torch step (all ``S * B * T * V`` logits at once, ``handwritten.straightforward_*``).
  Before timing (sizes marked ``check``), Pyro's loss and gradients are compared with the hand-written ones.
* **peak memory** of each step: the peak of tensor memory allocated during one (untimed) step above what was
  live when it started.  CUDA: ``torch.cuda.max_memory_allocated() - memory_allocated()`` before the step.  CPU:
  a ``TorchDispatchMode`` that adds every new tensor storage and subtracts it when the storage is freed (the
  allocator's cache and Python objects are not counted; forward, backward and optimiser ops all dispatch).
* **matmul limit** -- ``torch.mm`` FLOP rate on this device (float32, median of repeats; the larger of a square
  2048 product and one shaped like the output layer), and for every enumerated step the FLOPs of the output
  layer's ``H x V`` product over all ``S`` positions (forward + backward = 3x the forward ``2 N H V``,
  ``N = S B T``) per second, as a fraction of that limit.
* **curves** -- step time and memory against ``S`` (translation, ``T = 20``, ``V = 1k``) for exact
  (``MarginalLikelihood``), sample (``VariationalAttention("sample")``) and soft, and evaluation time of exact
  and K-max (K = 5) log-likelihoods.
* **evaluation throughput** -- target tokens per second of ``inference.log_likelihood`` (exact, by enumeration)
  and ``inference.kmax_log_likelihood`` (K = 5), no gradients.

* **output layers** (``--outputs``: this section alone) -- the paper's ``tanh`` layer against the product of
  experts (``Seq2Seq(output=ProductOfExperts)``) at the ``multi30k`` size (B=64, S=13, T=14, embeddings 256, BiLSTM
  2 x 256, decoder 512, attention 256, vocabularies 7,859 / 5,921, dropout 0.3 in training mode: a standard
  toolkit's configuration on Multi30k De-En) and, with ``--full``, the ``large`` size (S=T=50, V=10k): every
  pair's step over the soft step *of the same layer*, and peak memory, all variants of a size interleaved, once
  per thread count of ``--output-threads``.
* **the Transformer** (``--transformer``: this section alone) -- the same on ``TransformerSeq2Seq`` (width 256,
  4 heads, feed-forward 1,024, 3 layers, dropout 0.1) at the ``multi30k`` batch.

Outputs: ``docs/performance-<mode>.json``, a markdown block between ``<!-- benchmark:<mode>:begin/end -->`` in
``docs/performance.md`` (the prose around it is kept) and plots ``docs/performance/<mode>-*.png``.  Nothing is
asserted about times: the command measures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyro
import pyro.optim
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import handwritten  # noqa: E402  (benchmarks/ is not a package)
from measure import interleave, matmul_rate  # noqa: E402
from report import markdown, outputs_markdown, plot, size_label, write_markdown  # noqa: E402
from step_time import PAIRS  # noqa: E402
from workloads import (  # noqa: E402
    KMAX,
    OUTPUT_LAYERS,
    OUTPUT_PAIRS,
    Workload,
    check_pair,
    make_workload,
    output_workload,
    pyro_step,
    torch_step,
)

from pyro_attention import models  # noqa: E402
from pyro_attention.inference import evaluate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: the issue's sizes; ``check``: compare Pyro's loss and gradients with the hand-written ones before timing
#: (``"full"``: only with ``--full``)
SIZES: dict[str, dict[str, Any]] = {
    "qa": dict(task="qa", B=64, S=36, D=512, A=3000, F=64, Q=32, check=True),
    "small": dict(task="mt", B=32, S=20, T=20, D=256, V=1000, check=True),
    "mid": dict(task="mt", B=32, S=50, T=50, D=256, V=1000, check="full"),
    "large": dict(task="mt", B=32, S=50, T=50, D=256, V=10_000, check=False),
}
#: tiny stand-ins (``--tiny``, for the test of this script)
TINY: dict[str, dict[str, Any]] = {
    "qa": dict(task="qa", B=4, S=5, D=16, A=7, F=6, Q=3, check=True),
    "small": dict(task="mt", B=3, S=4, T=4, D=8, V=20, check=True),
    "mid": dict(task="mt", B=3, S=6, T=5, D=8, V=20, check=True),
    "large": dict(task="mt", B=3, S=6, T=5, D=8, V=50, check=True),
}
#: the output-layer section's sizes (``--outputs``); ``large`` only with ``--full``
OUTPUT_SIZES: dict[str, dict[str, Any]] = {
    "multi30k": dict(B=64, S=13, T=14, E=256, enc=256, dec=512, att=256, Vs=7859, V=5921, dropout=0.3),
    "large": dict(B=32, S=50, T=50, E=256, enc=128, dec=256, att=256, Vs=10_000, V=10_000, dropout=0.0),
}
OUTPUT_TINY: dict[str, dict[str, Any]] = {
    "multi30k": dict(B=3, S=4, T=5, E=8, enc=4, dec=8, att=8, Vs=30, V=20, dropout=0.3),
    "large": dict(B=2, S=6, T=6, E=8, enc=4, dec=8, att=8, Vs=40, V=50, dropout=0.0),
}
#: the Transformer section's size (``--transformer``): the multi30k batch on a 3-layer Transformer of width 256
TRANSFORMER_SIZES: dict[str, dict[str, Any]] = {
    "multi30k": dict(B=64, S=13, T=14, d=256, heads=4, ff=1024, layers=3, att=256, Vs=7859, V=5921, dropout=0.1),
}
TRANSFORMER_TINY: dict[str, dict[str, Any]] = {
    "multi30k": dict(B=3, S=4, T=5, d=8, heads=2, ff=16, layers=2, att=8, Vs=30, V=20, dropout=0.1),
}
CURVE = dict(task="mt", B=32, T=20, D=256, V=1000, check=False)
CURVE_TINY = dict(task="mt", B=2, T=3, D=8, V=20, check=False)
MODES = {
    #          sizes                     curve S                  repeats warmup  throughput sizes
    "quick": (["qa", "small"], [10, 25, 50], 5, 1, ["small"]),
    "full": (["qa", "small", "mid", "large"], [10, 25, 50, 100, 200], 10, 1, ["small", "mid", "large"]),
}
#: fewer steps where one step takes tens of seconds on a CPU
LARGE_REPEATS = 2
CURVE_VARIANTS = {"exact": "marginal", "sample": "va-sample", "soft": "soft"}




























# -- the sections ----------------------------------------------------------------------------------------------
def run_steps(workload: Workload, args: argparse.Namespace, repeats: int, warmup: int) -> dict[str, Any]:
    """Every pair's Pyro and torch step at one size, interleaved; plus the straightforward exact step (large)."""
    checks = {}
    check = workload.spec["check"]
    if (check is True or (check == "full" and args.full)) and not args.no_check:
        for name in args.pairs:
            checks[name] = check_pair(workload, name)
        failed = [n for n, c in checks.items() if not c["passed"]]
        if failed:
            raise AssertionError(f"{workload.name}: Pyro and hand-written steps differ for {failed}: {checks}")
    steps: dict[str, Callable[[], float]] = {}
    for name in args.pairs:
        loss_fn = PAIRS[name][1]
        steps[f"pyro/{name}"] = pyro_step(workload, name, args.lr)
        steps[f"torch/{name}"] = torch_step(workload, loss_fn, args.lr)
    if workload.name == "large" or args.straightforward:
        straightforward = handwritten.straightforward_marginal_loss
        steps["torch-straightforward/marginal"] = torch_step(workload, straightforward, args.lr)
    with pyro.validation_enabled(False):
        times, memory = interleave(steps, warmup, repeats, args.device)
    pyro.clear_param_store()
    return {"checks": checks, "times": times, "memory": memory}


def run_curves(args: argparse.Namespace, lengths: list[int], repeats: int, warmup: int) -> dict[str, Any]:
    """Step time / memory of exact, sample and soft, and exact / K-max evaluation time, against ``S``."""
    rows = []
    base = CURVE_TINY if args.tiny else CURVE
    for S in lengths:
        w = make_workload(f"S={S}", dict(base, S=S), args.device)
        steps = {label: pyro_step(w, pair, args.lr) for label, pair in CURVE_VARIANTS.items()}
        pair = models.MarginalLikelihood(w.make_network().eval())

        def exact_eval(pair: Any = pair, w: Workload = w) -> float:
            return float(evaluate.log_likelihood(pair, w.batch).per_example.sum())

        def kmax_eval(pair: Any = pair, w: Workload = w) -> float:
            return float(evaluate.kmax_log_likelihood(pair, w.batch, KMAX).per_example.sum())

        steps["exact eval"], steps[f"K-max eval (K={KMAX})"] = exact_eval, kmax_eval
        with pyro.validation_enabled(False):
            times, memory = interleave(steps, warmup, repeats, args.device)
        pyro.clear_param_store()
        rows.append({"S": S, "times": times, "memory": memory, "tokens": w.tokens})
        print(f"  curve S={S}: " + ", ".join(f"{k} {v:.3f}s" for k, v in times.items()), flush=True)
    return {"spec": {k: v for k, v in base.items() if k != "check"}, "rows": rows}


def run_throughput(workload: Workload, args: argparse.Namespace, repeats: int) -> dict[str, Any]:
    """Target tokens per second of the exact and K-max log-likelihoods (no gradients)."""
    pair = models.MarginalLikelihood(workload.make_network().eval())
    steps = {
        "exact": lambda: float(evaluate.log_likelihood(pair, workload.batch).per_example.sum()),
        f"K-max (K={KMAX})": lambda: float(evaluate.kmax_log_likelihood(pair, workload.batch, KMAX).per_example.sum()),
    }
    with pyro.validation_enabled(False):
        times, memory = interleave(steps, 1, repeats, args.device)
    return {n: {"seconds": t, "tokens_per_s": workload.tokens / t, "memory": memory[n]} for n, t in times.items()}




def run_outputs(args: argparse.Namespace, table: dict[str, dict[str, Any]], sizes: list[str], repeats: int,
                warmup: int) -> dict[str, Any]:
    """Every pair on both output layers at each size of ``table``, interleaved; per thread count of
    ``--output-threads``."""
    out: dict[str, Any] = {}
    for threads in args.output_threads:
        torch.set_num_threads(threads)
        for size in sizes:
            spec = table[size]
            steps = {}
            for output in OUTPUT_LAYERS:
                w = output_workload(spec, output, args.device)
                for name in OUTPUT_PAIRS:
                    steps[f"{output}/{name}"] = pyro_step(w, name, args.lr)
            reps = args.large_repeats if size == "large" and not args.tiny else repeats
            with pyro.validation_enabled(False):
                times, memory = interleave(steps, warmup, reps, args.device)
            pyro.clear_param_store()
            key = f"{size}@{threads}"
            out[key] = {"size": size, "threads": threads, "spec": spec, "times": times, "memory": memory,
                        "repeats": reps, "tokens": spec["B"] * spec["T"]}
            print(f"  outputs {key}: " + ", ".join(f"{k} {v:.3f}s" for k, v in times.items()), flush=True)
    torch.set_num_threads(args.threads)
    return out














# -- main ------------------------------------------------------------------------------------------------------
def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="every size (large too) and the long curves")
    parser.add_argument("--device", default="cpu", help="torch device of every tensor (cpu, cuda, cuda:1, ...)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU)")
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), help="override the mode's sizes")
    parser.add_argument("--curve-lengths", type=int, nargs="*", help="override the mode's curve S values")
    parser.add_argument("--repeats", type=int, help="timed steps per variant (default: the mode's)")
    parser.add_argument("--warmup", type=int, help="untimed steps per variant, the first measures memory")
    parser.add_argument("--pairs", nargs="+", choices=list(PAIRS), default=list(PAIRS), help="pairs to time")
    parser.add_argument("--large-repeats", type=int, default=LARGE_REPEATS, help="timed steps at the large size")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--no-check", action="store_true", help="skip the Pyro vs hand-written loss/gradient check")
    parser.add_argument("--straightforward", action="store_true", help="straightforward exact step at every size")
    parser.add_argument("--tiny", action="store_true", help="tiny stand-in sizes (for tests)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder of performance.md, JSON, plots")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--outputs", action="store_true",
                        help="only the output-layer section (tanh vs product of experts; --full adds large)")
    parser.add_argument("--transformer", action="store_true",
                        help="only the Transformer section: TransformerSeq2Seq at the multi30k size, both output "
                             "layers, every pair over the soft step")
    parser.add_argument("--output-threads", type=int, nargs="+", default=[1, 2],
                        help="thread counts of the output-layer section (default 1 2)")
    return parser


def main(args: argparse.Namespace, argv: list[str] | None = None) -> dict[str, Any]:
    """Run the mode's sections, write JSON, the markdown block and plots; ``argv`` only labels the output."""
    started = time.perf_counter()
    if args.outputs or args.transformer:
        return main_outputs(args, argv, started, "transformer" if args.transformer else "outputs")
    mode = "full" if args.full else "quick"
    sizes, lengths, repeats, warmup, throughput_sizes = MODES[mode]
    sizes = args.sizes or sizes
    lengths = lengths if args.curve_lengths is None else args.curve_lengths
    repeats = args.repeats or repeats
    warmup = warmup if args.warmup is None else args.warmup
    args.device = torch.device(args.device)
    table = TINY if args.tiny else SIZES
    old_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    result: dict[str, Any] = {"mode": mode, "repeats": repeats, "warmup": warmup, "tiny": args.tiny}
    result["command"] = " ".join(["python benchmarks/run.py", *(argv or [])])
    result["large_repeats"] = args.large_repeats
    try:
        result["machine"] = _machine(args)
        result["memory_method"] = _memory_method(args.device)
        print(f"benchmarks/run.py ({mode}): device {args.device}, {torch.get_num_threads()} thread(s)", flush=True)
        shapes = [(256, 256, 256)] if args.tiny else [(2048, 2048, 2048), (4096, 256, 10_000)]
        result["matmul"] = matmul_rate(args.device, shapes)
        result["matmul_limit"] = max(result["matmul"].values())
        print("  torch.mm: " + ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in result["matmul"].items()))
        result["steps"] = {}
        for size in sizes:
            w = make_workload(size, table[size], args.device)
            r = run_steps(w, args, args.large_repeats if size == "large" and not args.tiny else repeats, warmup)
            r.update(label=size_label(size, table[size]), output_flops=w.output_flops, tokens=w.tokens)
            result["steps"][size] = r
            print(f"  {size}: " + ", ".join(f"{k} {v:.4f}s" for k, v in r["times"].items()), flush=True)
        result["throughput"] = {}
        for size in throughput_sizes if args.sizes is None else [s for s in args.sizes if table[s]["task"] == "mt"]:
            w = make_workload(size, table[size], args.device)
            r = run_throughput(w, args, args.large_repeats if size == "large" and not args.tiny else repeats)
            r["label"] = size_label(size, table[size])
            result["throughput"][size] = r
            print(f"  eval {size}: " + ", ".join(f"{k} {v['tokens_per_s']:,.0f} tok/s" for k, v in r.items()
                                                  if k != "label"), flush=True)  # fmt: skip
        result["curves"] = run_curves(args, lengths, repeats, warmup) if lengths else None
    finally:
        torch.set_num_threads(old_threads)
    args.out.mkdir(parents=True, exist_ok=True)
    result["plots"] = [] if args.no_plots else plot(result, args.out / "performance", mode, args.out)
    return _write_results(args, result, mode, markdown, started)


def _write_results(args: argparse.Namespace, result: dict[str, Any], mode: str,
                   render: Callable[[dict[str, Any]], str], started: float) -> dict[str, Any]:
    """Stamp ``result``, write ``performance-<mode>.json`` and its markdown block, print the block."""
    result["seconds"] = time.perf_counter() - started
    result["date"] = time.strftime("%Y-%m-%d")
    args.out.mkdir(parents=True, exist_ok=True)
    md, data = args.out / "performance.md", args.out / f"performance-{mode}.json"
    data.write_text(json.dumps(result, indent=1, default=str) + "\n")
    block = render(result)
    write_markdown(md, mode, block)
    print(block)
    print(f"wrote {md} and {data} in {result['seconds']:.0f} s")
    return result


def _machine(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "device": str(args.device),
        "device_name": torch.cuda.get_device_name(args.device) if args.device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "pyro": pyro.__version__,
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
    }


def _memory_method(device: torch.device) -> str:
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated above the allocation at the step's start"
    return "CPU: peak bytes of tensor storages allocated during the step, tracked by a TorchDispatchMode"


def main_outputs(args: argparse.Namespace, argv: list[str] | None, started: float, mode: str) -> dict[str, Any]:
    """``--outputs`` (the output-layer section) or ``--transformer`` (the same on the Transformer), alone, written
    to ``performance-<mode>.json`` and its block."""
    args.device = torch.device(args.device)
    repeats = args.repeats or 5
    warmup = 1 if args.warmup is None else args.warmup
    if mode == "transformer":
        table, sizes = (TRANSFORMER_TINY if args.tiny else TRANSFORMER_SIZES), ["multi30k"]
    else:
        table, sizes = (OUTPUT_TINY if args.tiny else OUTPUT_SIZES), (["multi30k", "large"] if args.full else
                                                                     ["multi30k"])
    result: dict[str, Any] = {"mode": mode, "repeats": repeats, "warmup": warmup, "tiny": args.tiny,
                              "command": " ".join(["python benchmarks/run.py", *(argv or [])])}
    old_threads = torch.get_num_threads()
    try:
        result["machine"] = _machine(args)
        result["memory_method"] = _memory_method(args.device)
        print(f"benchmarks/run.py ({mode}): device {args.device}, threads {args.output_threads}", flush=True)
        result["outputs"] = run_outputs(args, table, sizes, repeats, warmup)
    finally:
        torch.set_num_threads(old_threads)
    return _write_results(args, result, mode, outputs_markdown, started)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(make_parser().parse_args(), sys.argv[1:])
