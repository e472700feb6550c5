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

from pyro_attention.clevr import ClevrConfig, ClevrResult, format_clevr, run_clevr
from pyro_attention.experiment import ALL_ROWS, rows_by_label


def main(args: argparse.Namespace) -> ClevrResult:
    torch.set_num_threads(args.threads)
    try:
        chosen = rows_by_label(args.pairs)
    except ValueError as e:
        raise SystemExit(f"--pairs: {e}") from None
    config = ClevrConfig(
        data_dir=args.data_dir,
        generated_train=args.generated_train,
        generated_val=args.generated_val,
        question_seed=args.question_seed,
        hidden_size=args.hidden,
        num_epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        seed=args.seed,
        rows=chosen or (list(ALL_ROWS) if args.neighbours else None),
    )
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
    parser.add_argument("--data-dir", default=None, help="folder holding clevr-scenes/ (default: see above)")
    parser.add_argument("--generated-train", type=int, default=8000, help="questions generated on training scenes")
    parser.add_argument("--generated-val", type=int, default=1000, help="questions generated on validation scenes")
    parser.add_argument("--question-seed", type=int, default=0, help="seed of the generator (val: seed + 1)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup-steps", type=int, default=0, help="relaxed pair: steps on E_p[log p] first")
    parser.add_argument("--pairs", nargs="*", default=[], help="subset of rows, e.g. 'soft' 'hard (enum)' 'rws'")
    parser.add_argument("--neighbours", action="store_true", help="also the neighbours' rows (registry.NEIGHBOUR_ROWS)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--markdown", default="", help="also write the tables to this file")
    parser.add_argument("--quiet", action="store_true")
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
