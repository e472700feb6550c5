"""The paper's translation table (Deng et al. 2018, Table 1), CPU-sized: every pair trained and evaluated.

For each row -- soft attention, exact marginal likelihood, hard attention (enum / sample), categorical
variational attention (enum / sample), relaxed Dirichlet attention, and (unless ``--paper-only``) the
neighbours: structured attention (segmentation, syntactic, the segmentation chain marginalised), Gaussian
context, Bayesian attention modules, Gumbel-softmax, reweighted wake-sleep --
:func:`pyro_attention.tasks.translation.train` trains a :class:`~pyro_attention.networks.Seq2Seq` on the chosen
corpus and
:func:`pyro_attention.tasks.translation.evaluate` reports on the test split: perplexity (exact for the categorical
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
from dataclasses import dataclass
from pathlib import Path

import torch

from pyro_attention.cli.common import add_config_options, add_run_options, config_values, rows_flag
from pyro_attention.inference import estimate_text
from pyro_attention.registry import PAPER_ROWS
from pyro_attention.tasks.region_qa import ALL_ROWS
from pyro_attention.tasks.translation import BeamSearch, Evaluation, TranslationConfig, evaluate, train

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


#: the flags of the rows' config (generated from its fields: help, type, default) and the example's own defaults
OPTIONS = ("data", "data_dir", "src", "tgt", "train_size", "val_size", "test_size", "max_len", "min_freq", "embedding",
           "encoder", "decoder", "attention", "dropout", "epochs", "batch_size", "lr", "seed", "threads")
DEFAULTS = {"train_size": 2000, "val_size": 200, "test_size": 200, "max_len": 30, "epochs": 5}


@dataclass
class Row:
    """One row of the table: what :func:`~pyro_attention.tasks.translation.evaluate` measured, and the training."""

    scores: Evaluation
    seconds: float
    epochs: int
    best_epoch: int


def main(args: argparse.Namespace) -> dict[str, Row]:
    torch.set_num_threads(args.threads)
    chosen = rows_flag(args.pairs)
    rows = chosen or (PAPER_ROWS if args.paper_only else ALL_ROWS)
    results = {}
    signature = ""
    for spec in rows:
        label = spec.label
        config = TranslationConfig(**dict(  # the flags, this row's pair and its own folder under --out
            config_values(TranslationConfig, args),
            model=spec.name,
            estimator=spec.estimator,
            options=dict(spec.options) or None,
            out=str(Path(args.out) / "".join(c for c in label if c.isalnum() or c in "-_.=,")),
        ))
        start = time.perf_counter()
        trained = train(config, progress=not args.quiet, overwrite=True, log=None if args.quiet else print)
        seconds = time.perf_counter() - start
        report = evaluate(Path(config.out_dir) / "best.pt", "test", search=BeamSearch(beam=args.beam),
                          size=args.test_size)
        signature = report.bleu_signature or signature
        results[label] = Row(report, seconds, trained.epoch, trained.best_epoch)
        print(f"{label:<44} PPL {ppl_text(report)}  BLEU {report.bleu:.2f}  H(prior) {report.prior_entropy:.2f}  "
              f"{seconds:.0f} s")
    table = format_table(results)
    print(table)
    if signature:
        print(f"BLEU signature: {signature}")
    if args.markdown:
        Path(args.markdown).write_text(table + (f"\n\nBLEU signature: `{signature}`\n" if signature else "\n"))
    return results


def ppl_text(scores: Evaluation) -> str:
    """The perplexity as the tables print it: exact, or ``~value ± s.e.`` (`` !`` where unreliable)."""
    if not scores.error.estimated:
        return f"{scores.ppl:.2f}"
    return estimate_text(f"{scores.ppl:.2f}", f"{scores.ppl_mc_se:.2f}", scores.ppl_reliable)


def format_table(results: dict[str, Row]) -> str:
    lines = ["| pair | PPL | BLEU | prior entropy | train s | paper PPL | paper BLEU |", "|" + "---|" * 7]
    for label, r in results.items():
        paper = [f"{v:.2f}" for v in PAPER[label]] if label in PAPER else ["-", "-"]
        lines.append(
            f"| {label} | {ppl_text(r.scores)} | {r.scores.bleu:.2f} | {r.scores.prior_entropy:.2f} | "
            f"{r.seconds:.0f} | {paper[0]} | {paper[1]} |"
        )
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_options(parser, TranslationConfig, OPTIONS, defaults=DEFAULTS)
    parser.add_argument("--beam", type=int, default=5, help="beam size of the BLEU translations")
    parser.add_argument("--pairs", nargs="*", default=[], help="subset of rows, e.g. 'soft' 'variational (enum)'")
    parser.add_argument("--paper-only", action="store_true", help="only the rows of Deng et al. (2018)")
    parser.add_argument("--out", default="runs/table1", help="folder of the rows' runs")
    add_run_options(parser, threads=False)
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
