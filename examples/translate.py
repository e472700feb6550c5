"""The paper's translation table (Deng et al. 2018, Table 1), CPU-sized: every pair trained and evaluated.

For each row -- soft attention, exact marginal likelihood, hard attention (enum / sample), categorical
variational attention (enum / sample), relaxed Dirichlet attention, and (unless ``--paper-only``) the
neighbours: structured attention (segmentation, syntactic, the segmentation chain marginalised), Gaussian
context, Bayesian attention modules, Gumbel-softmax, reweighted wake-sleep -- :func:`pyro_attention.translation.train`
trains a :class:`~pyro_attention.networks.Seq2Seq` on the chosen corpus and
:func:`pyro_attention.translation.evaluate` reports on the test split: perplexity (exact for the categorical
pairs and soft attention; an importance-weighted bound, marked ``~``, for relaxed), BLEU of beam search under
the pair's prediction rule (sacreBLEU, detokenised, signature printed), the prior's entropy per target token,
and the training time.  The neighbours run with the settings of :data:`pyro_attention.registry.NEIGHBOUR_ROWS`.
The paper's numbers (IWSLT14 De-En, full size) are printed beside for reference.

    python examples/translate.py --data multi30k --train-size 5000 --epochs 3 --markdown table.md

References:
[1] Deng, Kim, Chiu, Guo, Rush, "Latent Alignment and Variational Attention", NeurIPS 2018.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from pyro_attention.experiment import ALL_ROWS, rows_by_label
from pyro_attention.registry import PAPER_ROWS
from pyro_attention.translation import TranslationConfig, evaluate, train

#: Deng et al. (2018), Table 1, IWSLT14 De-En: (PPL, BLEU); prior entropy where Table 2 reports it
PAPER = {
    "soft": (7.17, 32.77),
    "marginal": (6.34, 33.29),
    "hard (enum)": (7.37, 31.40),
    "hard (sample)": (7.38, 31.00),
    "variational (enum)": (6.08, 33.68),
    "variational (sample)": (6.17, 33.30),
    "relaxed": (7.58, 30.05),
}


def main(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    try:
        chosen = rows_by_label(args.pairs)
    except ValueError as e:
        raise SystemExit(f"--pairs: {e}") from None
    rows = chosen or (PAPER_ROWS if args.paper_only else ALL_ROWS)
    results = {}
    signature = ""
    for spec in rows:
        label = spec.label
        config = TranslationConfig(
            data=args.data,
            data_dir=args.data_dir,
            src=args.src,
            tgt=args.tgt,
            train_size=args.train_size,
            val_size=args.val_size,
            test_size=args.test_size,
            max_len=args.max_len,
            min_freq=args.min_freq,
            model=spec.name,
            estimator=spec.estimator,
            options=dict(spec.options) or None,
            embedding=args.embedding,
            encoder=args.encoder,
            decoder=args.decoder,
            attention=args.attention,
            dropout=args.dropout,
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            seed=args.seed,
            threads=args.threads,
            out=str(Path(args.out) / "".join(c for c in label if c.isalnum() or c in "-_.=,")),
        )
        start = time.perf_counter()
        trained = train(config, progress=not args.quiet, overwrite=True, log=None if args.quiet else print)
        seconds = time.perf_counter() - start
        report = evaluate(Path(config.out_dir) / "best.pt", "test", beam=args.beam, size=args.test_size)
        signature = report.get("bleu_signature", signature)
        results[label] = {**report, "seconds": seconds, "epochs": trained.epoch, "best_epoch": trained.best_epoch}
        print(
            f"{label:<44} PPL {'' if report['ppl_exact'] else '~'}{report['ppl']:.2f}  BLEU {report['bleu']:.2f}  "
            f"H(prior) {report['prior_entropy']:.2f}  {seconds:.0f} s"
        )
    table = format_table(results)
    print(table)
    if signature:
        print(f"BLEU signature: {signature}")
    if args.markdown:
        Path(args.markdown).write_text(table + (f"\n\nBLEU signature: `{signature}`\n" if signature else "\n"))
    return results


def format_table(results: dict) -> str:
    lines = ["| pair | PPL | BLEU | prior entropy | train s | paper PPL | paper BLEU |", "|" + "---|" * 7]
    for label, r in results.items():
        paper = [f"{v:.2f}" for v in PAPER[label]] if label in PAPER else ["-", "-"]
        ppl = ("" if r["ppl_exact"] else "~") + f"{r['ppl']:.2f}"
        lines.append(
            f"| {label} | {ppl} | {r['bleu']:.2f} | {r['prior_entropy']:.2f} | {r['seconds']:.0f} | "
            f"{paper[0]} | {paper[1]} |"
        )
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="synthetic", choices=["synthetic", "multi30k"])
    parser.add_argument("--data-dir", default=None, help="data folder (default: $PYRO_ATTENTION_DATA)")
    parser.add_argument("--src", default="de")
    parser.add_argument("--tgt", default="en")
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--val-size", type=int, default=200)
    parser.add_argument("--test-size", type=int, default=200)
    parser.add_argument("--max-len", type=int, default=30)
    parser.add_argument("--min-freq", type=int, default=1)
    parser.add_argument("--embedding", type=int, default=64)
    parser.add_argument("--encoder", type=int, default=64)
    parser.add_argument("--decoder", type=int, default=128)
    parser.add_argument("--attention", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--pairs", nargs="*", default=[], help="subset of rows, e.g. 'soft' 'variational (enum)'")
    parser.add_argument("--paper-only", action="store_true", help="only the rows of Deng et al. (2018)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="runs/table1")
    parser.add_argument("--markdown", default="")
    parser.add_argument("--quiet", action="store_true")
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
