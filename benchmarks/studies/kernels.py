"""Forward + backward of the enumerated output layer alone (the observed-token table), one variant per way to
compute it -- the record behind docs/performance.md's "what was tried".

Variants, on one Seq2Seq network and batch (interleaved rounds, medians, peak memory of the first call):

* ``straightforward``: all ``S B T V`` logits at once, ``log_softmax``, ``gather`` (autograd keeps them);
* ``checkpointed``: the generic path -- ``chunk_size`` source positions at a time, each chunk recomputed in the
  backward pass by activation checkpointing (``gathered_table``; the code before the fused kernel);
* ``fused-recompute``: ``observed_log_softmax`` with nothing kept (every chunk recomputed in the backward pass);
* ``fused``: the default -- up to ``keep_bytes`` (``KEEP_BYTES``, 1 GiB) of log-probabilities kept, the rest
  recomputed.

(All in ``pyro_attention/distributions/enumeration.py`` and ``kernels.py``.)

    python benchmarks/studies/kernels.py                       # B=32, S=T=50, D=256, V=1k
    python benchmarks/studies/kernels.py --vocab 10000 --repeats 1 --variants fused fused-recompute checkpointed
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from pyro_attention.distributions.enumeration import KEEP_BYTES, gathered_table, observed_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness it times
import handwritten  # noqa: E402
from measure import interleave  # noqa: E402
from workloads import make_workload  # noqa: E402

VARIANTS = ("straightforward", "checkpointed", "fused-recompute", "fused")


def table_step(net: torch.nn.Module, batch: object, variant: str) -> float:
    enc = net.encode(batch)
    if variant == "straightforward":
        table = handwritten.straightforward_table(net, enc)
    elif variant == "checkpointed":
        table = gathered_table(net, enc, net.chunk_size)  # the kernel's generic path
    else:
        table = observed_table(net, enc, net.chunk_size, 0 if variant == "fused-recompute" else KEEP_BYTES)
    loss = -(table * enc.target_mask.unsqueeze(-1)).sum()
    loss.backward()
    return loss.item()


def main(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    spec = dict(task="mt", B=args.batch_size, S=args.length, T=args.length, D=args.hidden, V=args.vocab)
    w = make_workload("kernels", spec, torch.device(args.device))
    net = w.make_network(chunk_size=args.chunk)
    steps = {v: (lambda v=v: table_step(net, w.batch, v)) for v in args.variants}
    times, memory = interleave(steps, 1, args.repeats, torch.device(args.device))
    flops = 3 * w.output_flops
    print(
        f"observed-token table, forward + backward: B={args.batch_size} S=T={args.length} D={args.hidden} "
        f"V={args.vocab} chunk_size={args.chunk}, {torch.get_num_threads()} thread(s), median of {args.repeats}"
    )
    print(f"{'variant':<18} {'seconds':>9} {'GFLOP/s':>9} {'peak memory':>14}")
    for v in args.variants:
        print(f"{v:<18} {times[v]:>9.3f} {flops / times[v] / 1e9:>9.1f} {memory[v] / 2**20:>10,.0f} MiB")
    return {"times": times, "memory": memory}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=50, help="S = T")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=8, help="chunk_size (source positions)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
