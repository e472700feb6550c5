"""The enumeration table with padded (target, source) pairs skipped against computed: the record behind
docs/performance.md's row "padded pairs skipped by the fused table".

:func:`~pyro_attention.distributions.enumeration.observed_table` evaluates the output layer at every (target token,
source position) pair of a batch. A length-bucketed batch is padded to its longest source and target; the fused path
skips the padded pairs (their entries are 0, which no pair reads: ``tests/distributions/test_kernels.py``). For
``--batches`` training batches of a run (drawn at random with ``--seed``) this prints the share of the pairs that are
padding and times the work two ways, alternating from batch to batch, after one untimed call of each: as it runs
(padding skipped) and with every position of the encoded batch marked real for the table (all ``S x T`` pairs
computed, what the table did before; the entries at padded pairs are then the layer's values, which no pair reads).
Timed: ``observed_table`` forward and backward (a weighted sum as the loss), or with ``--step`` the whole training
step of the run's pair (``loss_and_grads`` of its ELBO, the same Pyro seed both ways; the losses and the gradients'
relative difference are printed: they agree up to the rounding of products grouped otherwise). Seconds are CPU
seconds of the process (steadier than wall-clock time beside other jobs) and wall-clock seconds, the network in
training mode, at ``--matmul-precision``.

``--checkpoint`` is a run's ``last.pt`` or ``best.pt`` (its corpus must be where its config says). Without it, a
fresh ``marginal`` run on the package's synthetic corpus (tiny sizes: what the test runs). It measures and asserts
nothing; say what else ran on the cores beside it.

    python benchmarks/studies/padding_skip.py --checkpoint ~/runs/table1-iwslt14/va-enum/last.pt --batches 6
    python benchmarks/studies/padding_skip.py --checkpoint ~/runs/table1-iwslt14/va-enum/last.pt --batches 6 --step
    python benchmarks/studies/padding_skip.py --batches 2 --step

"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import time
from collections.abc import Iterator
from typing import Any

import pyro
import torch

import pyro_attention.models._categorical as categorical
import pyro_attention.models.structured as structured
from pyro_attention.distributions.enumeration import observed_table
from pyro_attention.inference.loop import check_matmul_precision, float32_matmul_precision
from pyro_attention.tasks.translation import TranslationConfig
from pyro_attention.tasks.translation.checkpoints import load_checkpoint
from pyro_attention.tasks.translation.corpora import build_pair, build_vocabs, load_corpora, make_batches

WAYS = ("skipped", "computed")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="a run's last.pt or best.pt (default: a fresh run)")
    parser.add_argument("--batches", type=int, default=4, help="training batches timed")
    parser.add_argument("--step", action="store_true", help="time the whole training step, not the table alone")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0, help="which batches; the Pyro seed of every step")
    parser.add_argument("--matmul-precision", default="medium", help="highest, high or medium (default medium)")
    return parser


def _setup(checkpoint: str | None) -> tuple[Any, list, str]:
    if checkpoint is not None:
        ck = load_checkpoint(checkpoint)
        corpora = load_corpora(ck.config, log=None)
        batches = make_batches(corpora.train, ck.src_vocab, ck.tgt_vocab, ck.config.batch_size)
        return ck.pair, batches, f"{checkpoint} (epoch {ck.state['epoch']}, step {ck.state['step']})"
    config = TranslationConfig(model="marginal", train_size=256, val_size=16, test_size=16, batch_size=32)
    corpora = load_corpora(config, log=None)
    src, tgt = build_vocabs(config, corpora.train)
    _, pair = build_pair(config, src, tgt)
    return pair, make_batches(corpora.train, src, tgt, config.batch_size), "fresh marginal on synthetic data"


def _every_pair(enc: Any) -> Any:
    """``enc`` with every source and target position marked real (the table then computes every pair)."""
    return dataclasses.replace(enc, source_mask=torch.ones_like(enc.source_mask),
                               target_mask=torch.ones_like(enc.target_mask))


@contextlib.contextmanager
def _tables_of_every_pair() -> Iterator[None]:
    """The pairs' ``observed_table`` computing every (target, source) pair while inside."""
    def table(network: Any, enc: Any, *args: Any) -> torch.Tensor:
        return observed_table(network, _every_pair(enc), *args)

    modules = (categorical, structured)
    for module in modules:
        module.observed_table = table
    try:
        yield
    finally:
        for module in modules:
            module.observed_table = observed_table


def _table(pair: Any, batch: Any, way: str) -> tuple[float, float, float, torch.Tensor | None]:
    """Seconds (CPU, wall) of encoding ``batch`` and the table forward and backward; no loss, no gradients."""
    network = pair.network
    cpu, wall = time.process_time(), time.perf_counter()
    enc = network.encode(batch)
    table = observed_table(network, enc if way == "skipped" else _every_pair(enc), network.chunk_size,
                           network.keep_bytes)
    weights = torch.rand(table.shape, generator=torch.Generator().manual_seed(0), dtype=table.dtype)
    (table * weights).sum().backward()
    seconds = time.process_time() - cpu, time.perf_counter() - wall
    network.zero_grad(set_to_none=True)
    return (*seconds, float("nan"), None)


def _step(pair: Any, batch: Any, way: str, seed: int) -> tuple[float, float, float, torch.Tensor]:
    """Seconds (CPU, wall) of one ``loss_and_grads`` of the pair's ELBO, its loss, its gradients as one vector."""
    elbo = pair.elbo()
    pyro.set_rng_seed(seed)
    with contextlib.ExitStack() as stack:
        if way == "computed":
            stack.enter_context(_tables_of_every_pair())
        params = stack.enter_context(pyro.poutine.trace(param_only=True))
        cpu, wall = time.process_time(), time.perf_counter()
        loss = elbo.loss_and_grads(pair.model, pair.guide, batch)
        seconds = time.process_time() - cpu, time.perf_counter() - wall
    values = [site["value"].unconstrained() for site in params.trace.nodes.values()]
    grads = torch.cat([v.grad.flatten().double() for v in values if v.grad is not None])
    for v in values:
        v.grad = None
    return (*seconds, float(loss), grads)


def main(args: argparse.Namespace) -> list[dict[str, float]]:
    check_matmul_precision(args.matmul_precision)
    torch.set_num_threads(args.threads)
    pair, batches, what = _setup(args.checkpoint)
    for module in pair.modules().values():
        module.train()
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(args.seed))[: args.batches].tolist()

    def run(batch: Any, way: str) -> tuple[float, float, float, torch.Tensor | None]:
        with float32_matmul_precision(args.matmul_precision):
            return _step(pair, batch, way, args.seed) if args.step else _table(pair, batch, way)

    print(f"{what}; {len(order)} batches; timed: {'the training step' if args.step else 'the table'}; "
          f"{torch.get_num_threads()} thread(s); matmul precision {args.matmul_precision}; torch {torch.__version__}")
    print("| batch | B x S x T | padded pairs | CPU s, skipped | CPU s, computed | wall s, skipped | wall s, computed "
          "| loss skipped - computed | grad rel. diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    for way in WAYS:  # warm-up: first calls allocate and initialise
        run(batches[order[0]], way)
    rows = []
    for k, i in enumerate(order):
        batch = batches[i]
        B, S = batch.source.shape
        T = batch.target.shape[1]
        real = float((batch.source_mask.sum(1) * batch.target_mask.sum(1)).sum())
        got = {way: run(batch, way) for way in (WAYS if k % 2 == 0 else WAYS[::-1])}
        (c0, w0, l0, g0), (c1, w1, l1, g1) = got["skipped"], got["computed"]
        rel = float("nan") if g0 is None else float((g0 - g1).norm() / g1.norm())
        row = {"padded": 1 - real / (B * S * T), "cpu_skipped": c0, "cpu_computed": c1, "wall_skipped": w0,
               "wall_computed": w1, "loss_diff": l0 - l1, "grad_rel": rel}
        rows.append(row)
        print(f"| {i} | {B} x {S} x {T} | {row['padded']:.1%} | {c0:.2f} | {c1:.2f} | {w0:.2f} | {w1:.2f} | "
              f"{row['loss_diff']:+.2e} | {rel:.1e} |", flush=True)
    cpu = sum(r["cpu_computed"] for r in rows) / sum(r["cpu_skipped"] for r in rows)
    wall = sum(r["wall_computed"] for r in rows) / sum(r["wall_skipped"] for r in rows)
    padded = statistics.median(r["padded"] for r in rows)
    print(f"median padded share {padded:.1%}; total time computed / skipped: CPU {cpu:.2f}, wall {wall:.2f}")
    return rows


if __name__ == "__main__":
    main(make_parser().parse_args())
