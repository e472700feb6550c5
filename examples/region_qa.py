"""Every pair on synthetic region question answering: the paper's comparison, small, and its neighbours.

Trains soft attention, exact marginal likelihood, hard attention (enumerated and sampled), categorical
variational attention (enumerated and sampled) and relaxed Dirichlet attention -- and, unless ``--paper-only``,
the neighbours: structured attention (segmentation and syntactic, expected representations; the segmentation
chain marginalised), Gaussian context, Bayesian attention modules, Gumbel-softmax and reweighted wake-sleep --
on the same synthetic scenes (:func:`pyro_attention.data.make_region_qa`), then prints for held-out scenes: the
NLL per answer (exact by enumeration or dynamic programme; ``~`` marks an importance-weighted estimate), answer
accuracy under each pair's own prediction rule, the entropies of prior, exact posterior and ``q``, and how often
the argmax of each hits the gold region.  ``--markdown FILE`` also writes the table.  ``--compare`` then ranks
the pairs by held-out log predictive density per answer (:func:`pyro_attention.inference.compare`: paired standard
errors; an estimate's Monte Carlo error).

    python examples/region_qa.py --epochs 12
    python examples/region_qa.py --pairs soft "gumbel (categorical)" rws
    python examples/region_qa.py --pairs soft marginal "variational (enum)" relaxed --compare

References:
[1] Deng, Kim, Chiu, Guo, Rush, "Latent Alignment and Variational Attention", NeurIPS 2018.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from pyro_attention.cli.common import add_config_options, add_run_options, config_values, rows_flag
from pyro_attention.inference import compare, format_comparison
from pyro_attention.registry import PAPER_ROWS
from pyro_attention.tasks.region_qa import ALL_ROWS, RegionQAConfig, format_table, run_region_qa

#: the flags of the comparison's config (generated from its fields: help, type, default)
OPTIONS = ("train_size", "val_size", "hidden_size", "epochs", "batch_size", "lr", "warmup_steps", "ambiguity", "seed")


def main(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    chosen = rows_flag(args.pairs)
    default = PAPER_ROWS if args.paper_only else ALL_ROWS
    config = RegionQAConfig(**config_values(RegionQAConfig, args), rows=chosen or list(default))
    rows, val = run_region_qa(config, progress=not args.quiet)
    table = format_table(rows)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
        print(f"wrote {args.markdown}")
    if args.compare:
        ranked = compare({r.name: r.pair for r in rows}, val.data, num_samples=config.num_samples)
        print(f"\nheld-out log predictive density per answer ({len(val)} scenes):")
        print(format_comparison(ranked))
    return {r.name: r for r in rows}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_options(parser, RegionQAConfig, OPTIONS)
    parser.add_argument("--pairs", nargs="*", default=[], help="subset of rows, e.g. 'soft' 'hard (enum)'")
    parser.add_argument("--paper-only", action="store_true", help="only the rows of Deng et al. (2018)")
    parser.add_argument("--compare", action="store_true", help="also rank the pairs with inference.compare")
    add_run_options(parser)
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
