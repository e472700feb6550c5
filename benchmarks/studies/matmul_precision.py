"""Training steps at ``torch.set_float32_matmul_precision("highest")`` against ``"medium"`` (bfloat16 products with
float32 results, oneDNN; AMX on this project's CPU): the record behind docs/performance.md's row "bfloat16
products in training (``matmul_precision = "medium"``)".

For each of ``--batches`` training batches of a translation run (drawn at random with ``--seed``), one
``elbo.loss_and_grads`` of the run's pair at each precision, the order alternating from batch to batch, the same
Pyro seed for both (the same dropout masks and samples), the network in training mode.  Per batch: the loss per
target token at each precision and their difference; the gradients' relative difference ``|g_medium - g_highest| /
|g_highest|`` and cosine (float64, all parameters as one vector); the seconds of each call.  Then the medians.

``--checkpoint`` is a run's ``last.pt`` or ``best.pt`` (its config and vocabularies say which corpus; the data
must be where the config says): a trained model, the case that matters.  Without it, a fresh network on the
package's synthetic corpus (``--model``, tiny sizes: what the test runs).  It measures and asserts nothing; say
what else ran on the cores beside it.

    python benchmarks/studies/matmul_precision.py --checkpoint ~/runs/table1-multi30k/hard-enum/last.pt --batches 6
    python benchmarks/studies/matmul_precision.py --model marginal --batches 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import pyro
import torch

from pyro_attention.inference.loop import float32_matmul_precision
from pyro_attention.tasks.translation import TranslationConfig
from pyro_attention.tasks.translation.checkpoints import load_checkpoint
from pyro_attention.tasks.translation.corpora import build_pair, build_vocabs, load_corpora, make_batches

PRECISIONS = ("highest", "medium")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="a run's last.pt or best.pt (default: a fresh run)")
    parser.add_argument("--model", default="hard", help="without --checkpoint: the pair (estimator enum)")
    parser.add_argument("--batches", type=int, default=4, help="training batches timed")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0, help="which batches; the Pyro seed of every call")
    return parser


def _setup(args: argparse.Namespace) -> tuple[Any, list, str]:
    if args.checkpoint is not None:
        ck = load_checkpoint(args.checkpoint)
        corpora = load_corpora(ck.config, log=None)
        batches = make_batches(corpora.train, ck.src_vocab, ck.tgt_vocab, ck.config.batch_size)
        return ck.pair, batches, f"{args.checkpoint} (epoch {ck.state['epoch']}, step {ck.state['step']})"
    config = TranslationConfig(model=args.model, train_size=256, val_size=16, test_size=16, batch_size=32)
    corpora = load_corpora(config, log=None)
    src, tgt = build_vocabs(config, corpora.train)
    _, pair = build_pair(config, src, tgt)
    return pair, make_batches(corpora.train, src, tgt, config.batch_size), f"fresh {args.model} on synthetic data"


def _grads(pair: Any, batch: Any, seed: int) -> tuple[float, torch.Tensor, float]:
    """Loss of one ``loss_and_grads`` call, its gradients as one float64 vector, its seconds."""
    elbo = pair.elbo()
    pyro.set_rng_seed(seed)
    with pyro.poutine.trace(param_only=True) as params:
        start = time.perf_counter()
        loss = elbo.loss_and_grads(pair.model, pair.guide, batch)
        seconds = time.perf_counter() - start
    values = [site["value"].unconstrained() for site in params.trace.nodes.values()]
    grads = torch.cat([v.grad.flatten().double() for v in values if v.grad is not None])
    for v in values:
        v.grad = None
    return float(loss), grads, seconds


def main(args: argparse.Namespace) -> list[dict[str, float]]:
    torch.set_num_threads(args.threads)
    pair, batches, what = _setup(args)
    for module in pair.modules().values():
        module.train()
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(args.seed))[: args.batches].tolist()
    print(f"{what}; {len(order)} batches; {torch.get_num_threads()} thread(s); torch {torch.__version__}")
    print("| batch | tokens | loss/token highest | medium - highest | grad rel. diff | grad cosine | s highest | "
          "s medium | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for k, i in enumerate(order):
        batch, got = batches[i], {}
        for precision in PRECISIONS if k % 2 == 0 else PRECISIONS[::-1]:
            with float32_matmul_precision(precision):
                got[precision] = _grads(pair, batch, args.seed)
        (l0, g0, t0), (l1, g1, t1) = got["highest"], got["medium"]
        tokens = int(batch.target_mask.sum())
        row = {"tokens": tokens, "loss": l0 / tokens, "diff": (l1 - l0) / tokens,
               "rel": float((g1 - g0).norm() / g0.norm()), "cos": float(torch.dot(g0, g1) / (g0.norm() * g1.norm())),
               "highest_s": t0, "medium_s": t1}
        rows.append(row)
        print(f"| {i} | {tokens} | {row['loss']:.5f} | {row['diff']:+.1e} | {row['rel']:.1e} | {row['cos']:.6f} | "
              f"{t0:.2f} | {t1:.2f} | {t0 / t1:.2f} |", flush=True)
    med = {key: statistics.median(r[key] for r in rows) for key in ("rel", "highest_s", "medium_s")}
    total = sum(r["highest_s"] for r in rows) / sum(r["medium_s"] for r in rows)
    print(f"medians: gradient rel. diff {med['rel']:.1e}; {med['highest_s']:.2f} s highest, {med['medium_s']:.2f} s "
          f"medium; total time highest / medium {total:.2f}")
    return rows


if __name__ == "__main__":
    main(make_parser().parse_args())
