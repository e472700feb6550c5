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
  experts (``Seq2Seq(output="product")``) at the ``multi30k`` size (B=64, S=13, T=14, embeddings 256, BiLSTM
  2 x 256, decoder 512, attention 256, vocabularies 7,859 / 5,921, dropout 0.3 in training mode: a standard
  toolkit's configuration on Multi30k De-En) and, with ``--full``, the ``large`` size (S=T=50, V=10k): every
  pair's step over the soft step *of the same layer*, and peak memory, all variants of a size interleaved, once
  per thread count of ``--output-threads``.

Outputs: ``docs/performance-<mode>.json``, a markdown block between ``<!-- benchmark:<mode>:begin/end -->`` in
``docs/performance.md`` (the prose around it is kept) and plots ``docs/performance/<mode>-*.png``.  Nothing is
asserted about times: the command measures.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import platform
import statistics
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyro
import pyro.optim
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

sys.path.insert(0, str(Path(__file__).resolve().parent))
import handwritten  # noqa: E402  (benchmarks/ is not a package)
from step_time import PAIRS  # noqa: E402

from pyro_attention import models  # noqa: E402
from pyro_attention.data.region_qa import RegionBatch  # noqa: E402
from pyro_attention.data.translation import TranslationBatch  # noqa: E402
from pyro_attention.inference import evaluate  # noqa: E402
from pyro_attention.inference.distributed import DataParallelSVI  # noqa: E402
from pyro_attention.networks import RegionQA, Seq2Seq  # noqa: E402

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
OUTPUT_PAIRS = ("soft", "marginal", "hard-enum", "va-enum", "va-sample")
OUTPUT_LAYERS = ("tanh", "product")
CURVE = dict(task="mt", B=32, T=20, D=256, V=1000, check=False)
CURVE_TINY = dict(task="mt", B=2, T=3, D=8, V=20, check=False)
MODES = {
    #          sizes                     curve S                  repeats warmup  throughput sizes
    "quick": (["qa", "small"], [10, 25, 50], 5, 1, ["small"]),
    "full": (["qa", "small", "mid", "large"], [10, 25, 50, 100, 200], 10, 1, ["small", "mid", "large"]),
}
#: fewer steps where one step takes tens of seconds on a CPU
LARGE_REPEATS = 2
KMAX = 5
CURVE_VARIANTS = {"exact": "marginal", "sample": "va-sample", "soft": "soft"}


# -- measuring -------------------------------------------------------------------------------------------------
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def storages_are_tracked() -> bool:
    """Whether this torch keeps one Python object per tensor storage, which :class:`TensorMemory` needs to see a
    storage freed (torch 2.13 does; 2.1 makes a new object at every ``untyped_storage()`` call)."""
    probe = torch.empty(1)
    return probe.untyped_storage() is probe.untyped_storage()


class TensorMemory(TorchDispatchMode):
    """Peak bytes of tensor storages allocated while active (CPU stand-in for ``cuda.max_memory_allocated``).

    Every op's outputs are inspected: a storage not seen before, and not shared with one of the op's inputs
    (a view of a tensor that existed before), is counted with its size and subtracted when freed.
    """

    def __init__(self) -> None:
        if not storages_are_tracked():
            raise RuntimeError(
                f"CPU memory is measured by following tensor storages, and torch {torch.__version__} gives a new "
                "Python object for a storage at every untyped_storage() call, so a freed storage cannot be seen; "
                "use a newer torch (2.13 works) or --device cuda"
            )
        super().__init__()
        self.sizes: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.current = 0
        self.peak = 0

    def _free(self, nbytes: int) -> None:
        self.current -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's signature
        out = func(*args, **(kwargs or {}))
        inputs = None
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            nbytes = storage.nbytes()
            old = self.sizes.get(storage)
            if old is None:
                if inputs is None:
                    leaves = tree_flatten((args, kwargs))[0]
                    inputs = {x.untyped_storage().data_ptr() for x in leaves if isinstance(x, torch.Tensor)}
                self.sizes[storage] = nbytes
                if storage.data_ptr() in inputs:  # a view of something that was already there
                    continue
                self.current += nbytes
                weakref.finalize(storage, TensorMemory._free, self, nbytes)
            elif nbytes > old:  # resized in place
                self.sizes[storage] = nbytes
                self.current += nbytes - old
            self.peak = max(self.peak, self.current)
        return out


def measure_peak(step: Callable[[], float], device: torch.device) -> tuple[float, int]:
    """Run ``step`` once; its loss and the peak tensor bytes allocated above those live at its start."""
    gc.collect()
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        loss = step()
        synchronize(device)
        return loss, torch.cuda.max_memory_allocated(device) - base
    with TensorMemory() as tracker:
        loss = step()
    return loss, tracker.peak


def interleave(
    steps: dict[str, Callable[[], float]], warmup: int, repeats: int, device: torch.device
) -> tuple[dict[str, float], dict[str, int]]:
    """Median seconds per call of every step and their peak memory (measured on the first, untimed call).

    Round ``i`` runs every step once, starting at the ``i``-th (rotating), so drifts hit all of them.
    """
    names = list(steps)
    times: dict[str, list[float]] = {n: [] for n in names}
    memory: dict[str, int] = {}
    for i in range(max(1, warmup) + repeats):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            if i == 0:
                loss, memory[name] = measure_peak(steps[name], device)
            else:
                synchronize(device)
                start = time.perf_counter()
                loss = steps[name]()
                synchronize(device)
                elapsed = time.perf_counter() - start
                if i >= max(1, warmup):
                    times[name].append(elapsed)
            if not math.isfinite(loss):
                raise FloatingPointError(f"{name}: non-finite loss {loss} in round {i}")
    return {n: statistics.median(t) for n, t in times.items()}, memory


def matmul_rate(device: torch.device, shapes: list[tuple[int, int, int]], repeats: int = 5) -> dict[str, float]:
    """``torch.mm`` FLOP/s (float32) for each ``(n, k, m)``, median of ``repeats``."""
    out = {}
    for n, k, m in shapes:
        a = torch.randn(n, k, device=device)
        b = torch.randn(k, m, device=device)
        torch.mm(a, b)
        times = []
        for _ in range(repeats):
            synchronize(device)
            start = time.perf_counter()
            torch.mm(a, b)
            synchronize(device)
            times.append(time.perf_counter() - start)
        out[f"{n}x{k}x{m}"] = 2 * n * k * m / statistics.median(times)
    return out


# -- workloads -----------------------------------------------------------------------------------------------
@dataclass
class Workload:
    """One size: a seeded network factory, a batch, and the output layer's forward FLOPs over all ``S``."""

    name: str
    spec: dict[str, Any]
    make_network: Callable[..., Any]
    batch: Any
    tokens: int
    output_flops: float
    info: dict[str, Any] = field(default_factory=dict)


def _lengths(g: torch.Generator, B: int, L: int) -> torch.Tensor:
    return torch.randint(max(1, L // 2), L + 1, (B,), generator=g)


def make_workload(name: str, spec: dict[str, Any], device: torch.device, seed: int = 0) -> Workload:
    """A synthetic batch of the size (``S // 2 .. S`` real sources, ``T // 2 .. T`` real targets) and a network."""
    g = torch.Generator().manual_seed(seed)
    B, S, D = spec["B"], spec["S"], spec["D"]
    if spec["task"] == "qa":
        F, A = spec["F"], spec["A"]
        mask = torch.arange(S).unsqueeze(0) < _lengths(g, B, S).unsqueeze(1)
        regions = torch.randn(B, S, F, generator=g) * mask.unsqueeze(-1)
        batch = RegionBatch(
            regions.to(device), mask.to(device), torch.randn(B, spec["Q"], generator=g).to(device),
            torch.randint(A, (B,), generator=g).to(device),
        )  # fmt: skip

        def make_network(chunk_size: int | None = None) -> RegionQA:
            torch.manual_seed(seed)
            return RegionQA(F, A, question_size=spec["Q"], hidden_size=D).to(device)

        # the output layer's final product U (A x D) for every (b, s)
        return Workload(name, spec, make_network, batch, B, 2.0 * B * S * D * A)
    T, V = spec["T"], spec["V"]
    smask = torch.arange(S).unsqueeze(0) < _lengths(g, B, S).unsqueeze(1)
    tmask = torch.arange(T).unsqueeze(0) < _lengths(g, B, T).unsqueeze(1)
    source = torch.randint(4, V, (B, S), generator=g) * smask
    target = torch.randint(4, V, (B, T), generator=g) * tmask
    target_in = torch.cat([torch.full((B, 1), 2), target[:, :-1]], 1) * tmask
    batch = TranslationBatch(*(x.to(device) for x in (source, smask, target_in, target, tmask)))

    def make_network(chunk_size: int | None = 8) -> Seq2Seq:
        torch.manual_seed(seed)
        net = Seq2Seq(
            V, V, embedding_size=D, encoder_size=D // 2, decoder_size=D, attention_size=D, chunk_size=chunk_size
        )
        return net.to(device)

    # the output layer's final product U (V x D) for every (s, b, t)
    return Workload(name, spec, make_network, batch, int(tmask.sum()), 2.0 * S * B * T * D * V)


def pyro_step(workload: Workload, pair_name: str, lr: float) -> Callable[[], float]:
    factory = PAIRS[pair_name][0]
    pair = factory(workload.make_network())
    svi = DataParallelSVI(pair.model, pair.guide, pyro.optim.Adam({"lr": lr}), pair.elbo(), distributed=False)

    def step() -> float:
        # each variant owns its network; Pyro's global store must hold this one's parameters (pyro.module
        # re-registers them; Adam's state is keyed by the parameter tensors and survives the clearing)
        pyro.clear_param_store()
        return svi.step(workload.batch)

    return step


def torch_step(workload: Workload, loss_fn: Callable[..., torch.Tensor], lr: float) -> Callable[[], float]:
    net = workload.make_network()
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)

    def step() -> float:
        optimizer.zero_grad()
        loss = loss_fn(net, workload.batch)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def _grads(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: (torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()) for n, p in net.named_parameters()}


def check_pair(workload: Workload, pair_name: str, seed: int = 0) -> dict[str, Any]:
    """Pyro's loss (deterministic pairs) and gradients against the hand-written ones (validation on)."""
    factory, loss_fn, deterministic = PAIRS[pair_name]
    out: dict[str, Any] = {}
    with pyro.validation_enabled(True):
        pyro.clear_param_store()
        net_pyro, net_torch = workload.make_network(), workload.make_network()
        pair = factory(net_pyro)
        if deterministic:
            loss_pyro = float(pair.elbo().loss(pair.model, pair.guide, workload.batch))
            with torch.no_grad():
                loss_torch = float(loss_fn(net_torch, workload.batch))
            out["loss_rel_err"] = abs(loss_pyro - loss_torch) / max(abs(loss_pyro), 1e-30)
        pyro.set_rng_seed(seed)
        pair.elbo().loss_and_grads(pair.model, pair.guide, workload.batch)
        torch.manual_seed(seed)
        loss_fn(net_torch, workload.batch).backward()
        gp, gt = _grads(net_pyro), _grads(net_torch)
        num = math.sqrt(sum(float((gp[n] - gt[n]).pow(2).sum()) for n in gp))
        den = math.sqrt(sum(float(g.pow(2).sum()) for g in gp.values()))
        out["grad_rel_err"] = num / max(den, 1e-30)
        pyro.clear_param_store()
    out["passed"] = out["grad_rel_err"] < 1e-4 and out.get("loss_rel_err", 0.0) < 1e-4
    return out


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


def output_workload(spec: dict[str, Any], output: str, device: torch.device, seed: int = 0) -> Workload:
    """A full-length batch (every source S, every target T tokens) and a ``Seq2Seq`` with ``output`` layer."""
    g = torch.Generator().manual_seed(seed)
    B, S, T, V = spec["B"], spec["S"], spec["T"], spec["V"]
    source = torch.randint(4, spec["Vs"], (B, S), generator=g)
    target = torch.randint(4, V, (B, T), generator=g)
    target_in = torch.cat([torch.full((B, 1), 2), target[:, :-1]], 1)
    ones = torch.ones(B, S, dtype=torch.bool), torch.ones(B, T, dtype=torch.bool)
    batch = TranslationBatch(*(x.to(device) for x in (source, ones[0], target_in, target, ones[1])))

    def make_network(chunk_size: int | None = 8) -> Seq2Seq:
        torch.manual_seed(seed)
        net = Seq2Seq(spec["Vs"], V, embedding_size=spec["E"], encoder_size=spec["enc"], decoder_size=spec["dec"],
                      attention_size=spec["att"], dropout=spec["dropout"], chunk_size=chunk_size, output=output)
        return net.to(device).train()

    return Workload(f"{output}", spec, make_network, batch, B * T, 2.0 * S * B * T * spec["dec"] * V)


def run_outputs(args: argparse.Namespace, sizes: list[str], repeats: int, warmup: int) -> dict[str, Any]:
    """Every pair on both output layers at each size, interleaved; per thread count of ``--output-threads``."""
    table = OUTPUT_TINY if args.tiny else OUTPUT_SIZES
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


def outputs_markdown(result: dict[str, Any]) -> str:
    """The markdown block of the output-layer section."""
    m = result["machine"]
    lines = [
        f"Device `{m['device']}`; torch {m['torch']}, pyro-ppl {m['pyro']}, Python {m['python']}; "
        f"{m['processor']}.  Written by `{result['command']}` in {result['seconds']:.0f} s on {result['date']}.",
        "",
        "**Output layers**: Pyro SVI step (as the trainers take it) of every pair on the paper's `tanh` layer and "
        "on the product of experts (`product`); `/soft`: over the soft step *of the same layer*, in the same "
        "interleaved run (median of the repeats); memory: peak tensor bytes of one step "
        f"({result['memory_method']}).",
        "",
        "| size | threads | pair | tanh [s] | tanh /soft | tanh mem | product [s] | product /soft | product mem | "
        "product / tanh |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["outputs"].values():
        t, mem, spec = r["times"], r["memory"], r["spec"]
        label = (f"{r['size']} (B={spec['B']}, S={spec['S']}, T={spec['T']}, V={spec['Vs']:,}/{spec['V']:,}, "
                 f"H={spec['dec']}, dropout {spec['dropout']}, {r['repeats']} repeats)")
        for name in OUTPUT_PAIRS:
            a, b = t[f"tanh/{name}"], t[f"product/{name}"]
            lines.append(
                f"| {label} | {r['threads']} | {name} | {a:.3f} | {a / t['tanh/soft']:.2f} | "
                f"{_mem(mem[f'tanh/{name}'])} | {b:.3f} | {b / t['product/soft']:.2f} | "
                f"{_mem(mem[f'product/{name}'])} | {b / a:.2f} |"
            )
    return "\n".join(lines)


# -- reporting ---------------------------------------------------------------------------------------------------
def _mem(nbytes: float) -> str:
    if nbytes < 10 * 2**20:
        return f"{nbytes / 2**20:.1f} MiB"
    return f"{nbytes / 2**20:,.0f} MiB" if nbytes < 2**30 else f"{nbytes / 2**30:.2f} GiB"


def size_label(name: str, spec: dict[str, Any]) -> str:
    if spec["task"] == "qa":
        return f"{name} (B={spec['B']}, S={spec['S']}, D={spec['D']}, A={spec['A']})"
    return f"{name} (B={spec['B']}, S={spec['S']}, T={spec['T']}, D={spec['D']}, V={spec['V']})"


def markdown(result: dict[str, Any]) -> str:
    """The markdown block for ``docs/performance.md``."""
    m = result["machine"]
    limit = result["matmul_limit"]
    shaped = list(result["matmul"].values())[-1]
    lines = [
        f"Mode `{result['mode']}`; device `{m['device']}`; {m['threads']} torch thread(s); torch {m['torch']}, "
        f"pyro-ppl {m['pyro']}, Python {m['python']}; {m['processor']}.  Written by `{result['command']}` in "
        f"{result['seconds']:.0f} s on {result['date']}.",
        "",
        "`torch.mm` (float32): "
        + ", ".join(f"{k}: {v / 1e9:.1f} GFLOP/s" for k, v in result["matmul"].items())
        + f"; the limit used below is {limit / 1e9:.1f} GFLOP/s (in brackets: against the last, output-layer-shaped"
        " rate).",
        "",
        f"**SVI step time** (median of {result['repeats']} interleaved steps; large: {result['large_repeats']}) and "
        f"peak memory of one step ({result['memory_method']}).  `pyro/torch`: the Pyro pair over the hand-written "
        "torch step of the same loss and gradients (target <= 1.05 at small and mid).  `/soft`: over Pyro soft "
        "attention at the same size (target for the sampled pairs <= 1.5).  `matmul`: FLOPs of the output layer's "
        "H x V product over all S positions (forward + backward, 3 x 2 S B T H V) per second of the whole step, as "
        "a fraction of the `torch.mm` limit.",
        "",
        "| size | pair | pyro [s] | torch [s] | pyro/torch | /soft | pyro mem | torch mem | matmul |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["steps"].values():
        t, mem = r["times"], r["memory"]
        soft = t.get("pyro/soft", math.nan)
        flops = 3 * r["output_flops"]
        for name in [n for n in PAIRS if f"pyro/{n}" in t]:
            p, h = t[f"pyro/{name}"], t[f"torch/{name}"]
            enum = name in ("marginal", "hard-enum", "va-enum")
            eff = f"{flops / p / limit:.0%} ({flops / p / shaped:.0%})" if enum else ""
            lines.append(
                f"| {r['label']} | {name} | {p:.4f} | {h:.4f} | {p / h:.2f} | {p / soft:.2f} | "
                f"{_mem(mem[f'pyro/{name}'])} | {_mem(mem[f'torch/{name}'])} | {eff} |"
            )
        key = "torch-straightforward/marginal"
        if key in t:
            lines.append(
                f"| {r['label']} | marginal, straightforward torch (all S*B*T*V logits) | | {t[key]:.4f} | | | | "
                f"{_mem(mem[key])} | {flops / t[key] / limit:.0%} ({flops / t[key] / shaped:.0%}) |"
            )
    lines += ["", "Fairness checks (Pyro validation on; relative errors of loss and gradients vs hand-written):", ""]
    for r in result["steps"].values():
        if r["checks"]:
            worst_l = max((c.get("loss_rel_err", 0.0) for c in r["checks"].values()), default=0.0)
            worst_g = max(c["grad_rel_err"] for c in r["checks"].values())
            ok = all(c["passed"] for c in r["checks"].values())
            verdict = "passed" if ok else "FAILED"
            lines.append(f"- {r['label']}: worst loss {worst_l:.1e}, worst gradient {worst_g:.1e}, {verdict}")
        else:
            lines.append(f"- {r['label']}: not checked in this mode (`--full` checks mid; large is too slow to check)")
    if result.get("throughput"):
        lines += ["", "**Evaluation throughput** (target tokens/s, no gradients, median):", ""]
        lines += ["| size | exact log p(y \\| x) | K-max (K=5) | exact mem | K-max mem |", "|---|---|---|---|---|"]
        for r in result["throughput"].values():
            e, k = r["exact"], r[f"K-max (K={KMAX})"]
            lines.append(
                f"| {r['label']} | {e['tokens_per_s']:,.0f} | {k['tokens_per_s']:,.0f} | {_mem(e['memory'])} | "
                f"{_mem(k['memory'])} |"
            )
    curves = result.get("curves")
    if curves:
        spec = curves["spec"]
        names = list(curves["rows"][0]["times"])
        lines += [
            "",
            f"**Against S** (translation B={spec['B']}, T={spec['T']}, D={spec['D']}, V={spec['V']}; Pyro steps; "
            "time [s] / peak memory):",
            "",
            "| S | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for row in curves["rows"]:
            cells = [f"{row['times'][n]:.3f} / {_mem(row['memory'][n])}" for n in names]
            lines.append(f"| {row['S']} | " + " | ".join(cells) + " |")
    if result.get("plots"):
        lines += ["", " ".join(f"![{Path(p).stem}]({p})" for p in result["plots"])]
    return "\n".join(lines)


def write_markdown(path: Path, mode: str, block: str) -> None:
    """Replace the ``mode`` block of ``path`` (created with a heading if missing), keeping everything else."""
    begin, end = f"<!-- benchmark:{mode}:begin -->", f"<!-- benchmark:{mode}:end -->"
    text = path.read_text() if path.exists() else "# Performance\n"
    new = f"{begin}\n{block}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + new + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## Measured: `{mode}`\n\n{new}\n"
    path.write_text(text)


def plot(result: dict[str, Any], folder: Path, mode: str, relative_to: Path) -> list[str]:
    """Step time and memory against S; written as PNGs, returned as paths relative to the markdown file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = result.get("curves")
    if not curves:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    S = [r["S"] for r in curves["rows"]]
    names = list(curves["rows"][0]["times"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name in names:
        axes[0].plot(S, [r["times"][name] for r in curves["rows"]], marker="o", label=name)
        axes[1].plot(S, [r["memory"][name] / 2**20 for r in curves["rows"]], marker="o", label=name)
    for ax, ylabel in zip(axes, ["seconds per step / evaluation", "peak memory [MiB]"], strict=True):
        ax.set_xlabel("source length S")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    spec = curves["spec"]
    fig.suptitle(f"Pyro steps against S (B={spec['B']}, T={spec['T']}, D={spec['D']}, V={spec['V']})")
    fig.tight_layout()
    path = folder / f"{mode}-curves.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    paths = [path]
    fig, ax = plt.subplots(figsize=(9, 4))
    labels, ratios = [], []
    for size, r in result["steps"].items():
        for name in [n for n in PAIRS if f"pyro/{n}" in r["times"]]:
            labels.append(f"{size}\n{name}")
            ratios.append(r["times"][f"pyro/{name}"] / r["times"][f"torch/{name}"])
    ax.bar(range(len(ratios)), ratios)
    ax.axhline(1.05, color="red", linestyle="--", label="target 1.05")
    ax.set_xticks(range(len(ratios)), labels, fontsize=6, rotation=90)
    ax.set_ylabel("pyro / hand-written torch step")
    ax.legend()
    fig.tight_layout()
    path = folder / f"{mode}-ratios.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    paths.append(path)
    return [str(p.resolve().relative_to(relative_to.resolve())) for p in paths]


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
    parser.add_argument("--output-threads", type=int, nargs="+", default=[1, 2],
                        help="thread counts of the output-layer section (default 1 2)")
    return parser


def main(args: argparse.Namespace, argv: list[str] | None = None) -> dict[str, Any]:
    """Run the mode's sections, write JSON, the markdown block and plots; ``argv`` only labels the output."""
    started = time.perf_counter()
    if args.outputs:
        return main_outputs(args, argv, started)
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


def main_outputs(args: argparse.Namespace, argv: list[str] | None, started: float) -> dict[str, Any]:
    """``--outputs``: the output-layer section alone, written to ``performance-outputs.json`` and its block."""
    args.device = torch.device(args.device)
    repeats = args.repeats or 5
    warmup = 1 if args.warmup is None else args.warmup
    sizes = ["multi30k", "large"] if args.full else ["multi30k"]
    result: dict[str, Any] = {"mode": "outputs", "repeats": repeats, "warmup": warmup, "tiny": args.tiny,
                              "command": " ".join(["python benchmarks/run.py", *(argv or [])])}
    old_threads = torch.get_num_threads()
    try:
        result["machine"] = _machine(args)
        result["memory_method"] = _memory_method(args.device)
        print(f"benchmarks/run.py (outputs): device {args.device}, threads {args.output_threads}", flush=True)
        result["outputs"] = run_outputs(args, sizes, repeats, warmup)
    finally:
        torch.set_num_threads(old_threads)
    return _write_results(args, result, "outputs", outputs_markdown, started)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(make_parser().parse_args(), sys.argv[1:])
