"""The ``pyro-attention`` command.

``pyro-attention demo`` trains every pair of the paper on synthetic region-QA scenes (a few minutes on two
CPU cores), prints the comparison table and writes a heatmap of prior / exact posterior / q alignments.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch


def _demo(args: argparse.Namespace) -> int:
    from pyro_attention.experiment import RegionQAConfig, format_table, run_region_qa
    from pyro_attention.inference import alignment_posterior
    from pyro_attention.plots import alignment_heatmaps

    if args.threads:
        torch.set_num_threads(args.threads)
    config = RegionQAConfig(
        train_size=args.train_size,
        val_size=args.val_size,
        num_epochs=args.epochs,
        hidden_size=args.hidden,
        seed=args.seed,
    )
    print(
        f"pyro-attention demo: {config.train_size} training / {config.val_size} held-out synthetic scenes, "
        f"{config.num_epochs} epochs, hidden {config.hidden_size}, seed {config.seed}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    start = time.perf_counter()
    rows, val = run_region_qa(config, progress=not args.quiet)
    print()
    print("Held-out results (NLL per answer in nats; '~' = importance-weighted estimate, not exact):")
    print(format_table(rows))
    variational = next((r for r in rows if r.name.startswith("variational")), rows[-1])
    post = alignment_posterior(variational.pair, val.data)
    ambiguous = [i for i in range(len(val)) if len(set(val.region_names[i])) and _ambiguous(val, i)]
    examples = (ambiguous[:2] + [i for i in range(len(val)) if i not in ambiguous[:2]])[: args.num_plots]
    titles = [f"#{i}: {val.question_text(i)} -> {val.answers[int(val.data.answer[i])]}" for i in examples]
    path = alignment_heatmaps(
        post, examples, val.region_names, titles, Path(args.out) / "alignments.png", gold=val.data.gold
    )
    print(
        f"\nWrote the prior / posterior / q heatmaps of {variational.name} for {len(examples)} held-out "
        f"examples to {path.resolve()}"
    )
    print(f"Total time {time.perf_counter() - start:.1f} s")
    return 0


def _ambiguous(val, i: int) -> bool:  # noqa: ANN001
    """Two regions of the asked kind: only the answer can tell which one the question means."""
    kind = val.vocab[int(val.data.question[i, 1])]
    return sum(name.endswith(" " + kind) for name in val.region_names[i]) > 1


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyro-attention", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train every pair on synthetic region QA and print the comparison")
    demo.add_argument("--train-size", type=int, default=2000)
    demo.add_argument("--val-size", type=int, default=500)
    demo.add_argument("--epochs", type=int, default=12)
    demo.add_argument("--hidden", type=int, default=64)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--threads", type=int, default=1, help="torch threads (1 avoids oversubscription; 0: torch's)")
    demo.add_argument("--num-plots", type=int, default=4, help="held-out examples in the heatmap")
    demo.add_argument("--out", default="pyro-attention-demo", help="folder for the figure")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
