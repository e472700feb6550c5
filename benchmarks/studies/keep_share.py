"""How much of an epoch's enumerated output layer is recomputed in the backward pass, for a row of an experiment
file and a few ``keep_gib`` (and ``chunk_size``) settings: counted from the training batches' shapes, nothing
trained.

The enumeration kernel (:func:`pyro_attention.distributions.kernels.observed_log_softmax`) evaluates the `tanh`
output layer at every pair of a real target token and a real source position (padded pairs are left out since
2026-12-06: ``benchmarks/studies/padding_skip.py``), ``chunk_size * B * T`` rows of ``V`` logits at a time, and
keeps the log-probabilities of the first chunks of each batch for the backward pass up to ``keep_gib``; the other
chunks are recomputed there.  Smaller chunks fill the budget a little more closely (``--chunk-size``: every size against
each budget; default the row's own).  A row kept costs three products with the layer's ``V x H`` weights
(forward; the two gradients), a row recomputed four.  For every setting this prints the share of the epoch's rows
recomputed, the products per row it implies (3 to 4) and the largest batch's log-probabilities (what would have
to be kept to recompute nothing).  The share is exact; what it does to a step's time depends on how much of the
step the output layer takes: ``--time N`` also times the row's loss and gradients (``loss_and_grads`` of its
ELBO, one torch thread, weights as initialised: the cost does not depend on them) on the training batch of median
size among those the smallest setting recomputes part of, N times per setting, the settings interleaved, and
prints the medians of the wall-clock and the CPU time (with other processes on the cores the CPU time of the one
thread is the steadier).
It measures and asserts nothing; say what else ran on the cores beside it.

    python benchmarks/studies/keep_share.py --config examples/configs/table1-iwslt14.toml --row va-enum --keep-gib 1 4 8
    python benchmarks/studies/keep_share.py --config examples/configs/table1-iwslt14.toml --row va-enum --keep-gib 1 8 \
        --time 3
    python benchmarks/studies/keep_share.py --config examples/configs/table1-iwslt14.toml --row va-enum --keep-gib 1 8 \
        --chunk-size 8 2 --time 3
"""

from __future__ import annotations

import argparse
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="experiment file (TOML or JSON)")
    parser.add_argument("--row", required=True, help="the row's label")
    parser.add_argument("--keep-gib", type=float, nargs="+", default=[1.0, 4.0, 8.0], help="settings to count")
    parser.add_argument("--chunk-size", type=int, nargs="+", default=None, metavar="N",
                        help="source positions per chunk to count (default: the row's chunk_size; 0: all at once)")
    parser.add_argument("--time", type=int, default=0, metavar="N",
                        help="also time loss and gradients on one batch N times per setting (default 0: do not)")
    return parser


def _time(config, src_vocab, tgt_vocab, batch, settings: list[tuple[int, float]], repeats: int  # noqa: ANN001
          ) -> dict[tuple[int, float], tuple[float, float]]:
    """Median wall-clock and CPU seconds of ``loss_and_grads`` of the row's ELBO on ``batch`` for each
    ``(chunk_size, keep_gib)``, interleaved (the CPU time of one thread is less disturbed by other processes on the
    cores)."""
    import statistics
    import time

    import pyro
    import torch

    from pyro_attention.tasks.translation.corpora import build_pair

    torch.set_num_threads(1)
    torch.manual_seed(0)
    pyro.clear_param_store()
    network, pair = build_pair(config, src_vocab, tgt_vocab)
    network.train()
    elbo = pair.elbo()
    seconds: dict[tuple[int, float], list[tuple[float, float]]] = {k: [] for k in settings}
    for _ in range(repeats):
        for chunk, keep in settings:
            network.chunk_size, network.keep_bytes = chunk or None, round(keep * 2**30)
            wall, cpu = time.perf_counter(), time.process_time()
            elbo.loss_and_grads(pair.model, pair.guide, batch)
            seconds[chunk, keep].append((time.perf_counter() - wall, time.process_time() - cpu))
            for p in network.parameters():
                p.grad = None
    return {k: tuple(statistics.median(x) for x in zip(*v, strict=True)) for k, v in seconds.items()}


def main(args: argparse.Namespace) -> list[dict]:
    from pyro_attention.tasks.translation.corpora import build_vocabs, load_corpora, make_batches
    from pyro_attention.tasks.translation.runner import chosen_rows, read_experiment, row_config

    shared, rows = read_experiment(args.config)
    (row,) = chosen_rows(args.config, rows, [args.row])
    config = row_config(shared, row, Path("unused"))
    corpora = load_corpora(config, None)
    src_vocab, tgt_vocab = build_vocabs(config, corpora.train)
    batches = make_batches(corpora.train, src_vocab, tgt_vocab, config.batch_size)
    V, element = len(tgt_vocab), 4  # float32 log-probabilities
    # (B, S, T, R): R the pairs of a real target token and a real source position, the rows the kernel computes
    shapes = [(b.source.shape[0], b.source.shape[1], b.target.shape[1],
               int((b.source_mask.sum(1) * b.target_mask.sum(1)).sum())) for b in batches]

    def recomputed_rows(B: int, S: int, T: int, R: int, chunk: int, keep_gib: float) -> int:
        """The kernel's own rule, chunk by chunk: a chunk is kept while it fits what is left of the budget."""
        left, rows_all, step, out = round(keep_gib * 2**30), R, max(1, chunk or S) * B * T, 0
        for start in range(0, rows_all, step):
            size = (min(rows_all, start + step) - start) * V * element
            if size <= left:
                left -= size
            else:
                out += size // (V * element)
        return out

    total = sum(R for *_, R in shapes)
    chunks = args.chunk_size if args.chunk_size is not None else [config.chunk_size]
    if any(c < 0 for c in chunks):
        raise SystemExit(f"--chunk-size must be >= 0 (0: all source positions at once), not {min(chunks)}")
    settings = [(chunk, keep) for chunk in chunks for keep in args.keep_gib]
    out = []
    for chunk, keep_gib in settings:
        share = sum(recomputed_rows(*shape, chunk, keep_gib) for shape in shapes) / total
        out.append({"chunk_size": chunk, "keep_gib": keep_gib, "recomputed_share": share,
                    "products_per_row": 3 + share,
                    "largest_batch_gb": max(R for *_, R in shapes) * V * element / 1e9})
    print(f"{args.config} row {args.row}: {len(batches)} batches, target vocabulary {V}, the row's chunks: "
          f"{config.chunk_size or 'all'} source positions")
    if args.time:
        touched = sorted((R, i) for i, (B, S, T, R) in enumerate(shapes)
                         if recomputed_rows(B, S, T, R, chunks[0], min(args.keep_gib)))
        if touched:
            i = touched[len(touched) // 2][1]
            B, S, T, R = shapes[i]
            seconds = _time(config, src_vocab, tgt_vocab, batches[i], settings, args.time)
            for r in out:
                key = r["chunk_size"], r["keep_gib"]
                r.update(timed_batch=[B, S, T], seconds=seconds[key][0], cpu_seconds=seconds[key][1],
                         timed_recomputed=recomputed_rows(B, S, T, R, *key) / R)
            print(f"timed: batch {i} (B={B}, S={S}, T={T}), loss and gradients, one thread, median of {args.time}")
    print("| chunk_size | keep_gib | rows recomputed | products per row (3-4) | largest batch's log-probabilities "
          "[GB] |" + (" timed batch: recomputed | seconds | CPU seconds |" if "seconds" in out[0] else ""))
    print("|---|---|---|---|---|" + ("---|---|---|" if "seconds" in out[0] else ""))
    for r in out:
        print(f"| {r['chunk_size'] or 'all'} | {r['keep_gib']:g} | {r['recomputed_share']:.1%} | "
              f"{r['products_per_row']:.2f} | "
              f"{r['largest_batch_gb']:.1f} |"
              + (f" {r['timed_recomputed']:.0%} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} |" if "seconds" in r
                 else ""))
    return out


if __name__ == "__main__":
    main(make_parser().parse_args())
