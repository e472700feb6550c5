"""Every pair of Deng et al. (2018) on real CLEVR scenes: the paper's VQA comparison with objects as regions.

Reads the CLEVR v1.0 scene graphs and original template questions under ``--data-dir`` (the folder holding
``clevr-scenes/``; default ``$PYRO_ATTENTION_DATA`` or ``../shared/data``), generates more questions of the same
five template families over the same scenes (seeded by ``--question-seed``), trains soft attention, exact
marginal likelihood, hard attention (enumerated and sampled), categorical variational attention (enumerated and
sampled) and relaxed Dirichlet attention on original + generated training questions, and prints two tables --
original validation questions and generated validation questions -- of NLL per answer, accuracy, entropies of
prior / exact posterior / q, and alignment accuracy against the gold object (questions whose template reads the
answer from one object).  The paper's VQA 2.0 numbers are printed beside for reference.  ``--markdown FILE``
also writes the tables.

    python examples/clevr_qa.py                   # the documented run (docs/results.md)

References:
[1] Deng, Kim, Chiu, Guo, Rush, "Latent Alignment and Variational Attention", NeurIPS 2018.
[2] Johnson et al., "CLEVR: A Diagnostic Dataset for Compositional Language and Elementary Visual Reasoning",
    CVPR 2017.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from pyro_attention.cli.common import add_config_options, add_run_options, config_values, rows_flag
from pyro_attention.tasks.clevr import ClevrConfig, ClevrResult, format_clevr, run_clevr
from pyro_attention.tasks.region_qa import ALL_ROWS

#: the flags of the run's config (generated from its fields: help, type, default)
OPTIONS = ("data_dir", "generated_train", "generated_val", "question_seed", "hidden_size", "epochs", "batch_size", "lr",
           "warmup_steps", "seed")


def main(args: argparse.Namespace) -> ClevrResult:
    torch.set_num_threads(args.threads)
    chosen = rows_flag(args.pairs)
    rows = chosen or (list(ALL_ROWS) if args.neighbours else None)
    config = ClevrConfig(**config_values(ClevrConfig, args), rows=rows)
    start = time.perf_counter()
    try:
        result = run_clevr(config, progress=not args.quiet)
    except FileNotFoundError as error:
        raise SystemExit(str(error)) from None
    text = format_clevr(result)
    print(text)
    print(f"Total time {time.perf_counter() - start:.1f} s ({torch.get_num_threads()} torch thread(s))")
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
        print(f"wrote {args.markdown}")
    return result


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_options(parser, ClevrConfig, OPTIONS)
    parser.add_argument("--pairs", nargs="*", default=[], help="subset of rows, e.g. 'soft' 'hard (enum)' 'rws'")
    parser.add_argument("--neighbours", action="store_true", help="also the neighbours' rows (registry.NEIGHBOUR_ROWS)")
    add_run_options(parser, "the tables")
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
