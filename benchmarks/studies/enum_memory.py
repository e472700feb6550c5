"""Peak memory and time of one exact (enumerated) training step on translation: chunked vs straightforward.

``MarginalLikelihood`` on :class:`~pyro_attention.networks.Seq2Seq` enumerates the alignment of every target
token over all ``S`` source positions.  A straightforward output layer keeps ``S * B * T * V`` logits (and their
softmax) alive for the backward pass; with ``Seq2Seq(chunk_size=...)`` the enumeration kernel
(``pyro_attention/distributions/enumeration.py``) computes the observed-token table a few source positions at a time
and recomputes each chunk in the backward pass.

Each configuration runs in a fresh subprocess (one torch thread) so that its peak resident set size
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) is its own; it times ``--steps`` SVI steps after one warm-up step
and reports the median.  Nothing is asserted: it measures.

    python benchmarks/studies/enum_memory.py                          # B=32, S=T=50, D=256, V=10,000
    python benchmarks/studies/enum_memory.py --chunks 0 8 --steps 1
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def _child(args: argparse.Namespace) -> dict:
    import pyro
    import torch

    from pyro_attention.data.translation import TranslationBatch
    from pyro_attention.models import MarginalLikelihood
    from pyro_attention.networks import Seq2Seq

    torch.set_num_threads(1)
    torch.manual_seed(0)
    pyro.enable_validation(False)
    B, S, T, V = args.batch_size, args.length, args.length, args.vocab
    net = Seq2Seq(
        V,
        V,
        embedding_size=args.hidden,
        encoder_size=args.hidden // 2,
        decoder_size=args.hidden,
        attention_size=args.hidden,
        chunk_size=args.chunk or None,
    )
    ids = torch.randint(4, V, (B, S))
    tgt = torch.randint(4, V, (B, T))
    batch = TranslationBatch(ids, torch.ones(B, S, dtype=torch.bool), tgt, tgt, torch.ones(B, T, dtype=torch.bool))
    pair = MarginalLikelihood(net)
    svi = pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": 1e-3}), pair.elbo())
    svi.step(batch)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        svi.step(batch)
        times.append(time.perf_counter() - start)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"chunk": args.chunk, "step_s": statistics.median(times), "peak_gib": peak_kib / 2**20}


def main(args: argparse.Namespace) -> list[dict]:
    rows = []
    print(
        f"exact step (MarginalLikelihood, Seq2Seq): B={args.batch_size} S=T={args.length} D={args.hidden} "
        f"V={args.vocab}, 1 torch thread, median of {args.steps} step(s) after 1 warm-up, fresh process each"
    )
    print(f"{'chunk_size':>12} {'step [s]':>10} {'peak RSS [GiB]':>15}")
    for chunk in args.chunks:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            "--chunk",
            str(chunk),
            "--batch-size",
            str(args.batch_size),
            "--length",
            str(args.length),
            "--hidden",
            str(args.hidden),
            "--vocab",
            str(args.vocab),
            "--steps",
            str(args.steps),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        label = "none (all S)" if not chunk else str(chunk)
        print(f"{label:>12} {row['step_s']:>10.2f} {row['peak_gib']:>15.2f}")
    return rows


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=50, help="source and target length S = T")
    parser.add_argument("--hidden", type=int, default=256, help="D: values, decoder and attention size")
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--chunks", type=int, nargs="+", default=[0, 8, 4], help="chunk sizes; 0 = no chunking")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser


if __name__ == "__main__":
    parsed = make_parser().parse_args()
    if parsed.child:
        print(json.dumps(_child(parsed)))
    else:
        main(parsed)
