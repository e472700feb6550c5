"""``pyro-attention demo``: every pair on synthetic region QA (``--task clevr``: real CLEVR scenes), the
comparison table and a heatmap of prior / exact posterior / q alignments."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from pyro_attention.cli.common import (
    _int_at_least,
)


def _demo(args: argparse.Namespace) -> int:
    from pyro_attention.outputs import writing

    with writing(args.out):  # the figure's folder, before minutes of training: a read-only --out fails now
        Path(args.out).mkdir(parents=True, exist_ok=True)
        if not os.access(args.out, os.W_OK):
            raise PermissionError(13, "Permission denied")
    if args.task == "clevr":
        return _demo_clevr(args)
    from pyro_attention.inference import alignment_posterior
    from pyro_attention.plots import alignment_heatmaps
    from pyro_attention.tasks.region_qa import RegionQAConfig, format_table, run_region_qa

    if args.threads:
        torch.set_num_threads(args.threads)
    config = RegionQAConfig(
        train_size=args.train_size,
        val_size=args.val_size,
        num_epochs=args.epochs,
        hidden_size=args.hidden,
        seed=args.seed,
    )
    if args.neighbours:
        config.rows = _all_rows()
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
        post,
        examples,
        val.region_names,
        titles,
        Path(args.out) / "alignments.png",
        gold=val.data.gold,
        suptitle=f"{variational.name}, {type(variational.pair.network).__name__} network, synthetic region QA, "
        "held-out split",
        soft=variational.pair.deterministic,
    )
    print(
        f"\nWrote the prior / posterior / q heatmaps of {variational.name} for {len(examples)} held-out "
        f"examples to {path.resolve()}"
    )
    print(f"Total time {time.perf_counter() - start:.1f} s")
    return 0


def _demo_clevr(args: argparse.Namespace) -> int:
    """``demo --task clevr``: every pair on real CLEVR scenes (original and generated questions)."""
    from pyro_attention.inference import alignment_posterior
    from pyro_attention.plots import alignment_heatmaps
    from pyro_attention.tasks.clevr import ClevrConfig, format_clevr, run_clevr

    if args.threads:
        torch.set_num_threads(args.threads)
    config = ClevrConfig(
        data_dir=args.data_dir,
        generated_train=args.train_size,
        generated_val=args.val_size,
        num_epochs=args.epochs,
        hidden_size=args.hidden,
        seed=args.seed,
    )
    if args.neighbours:
        config.rows = _all_rows()
    print(
        f"pyro-attention demo --task clevr: original CLEVR questions + {config.generated_train} generated training / "
        f"{config.generated_val} generated validation questions, {config.num_epochs} epochs, hidden "
        f"{config.hidden_size}, seed {config.seed}, {torch.get_num_threads()} thread(s)"
    )
    start = time.perf_counter()
    try:
        result = run_clevr(config, progress=not args.quiet)
    except (FileNotFoundError, ValueError) as error:
        print(f"pyro-attention demo --task clevr: {error}", file=sys.stderr)
        return 2
    print()
    print(format_clevr(result))
    val = result.splits.val_original
    variational = next((r for r in result.original if r.name.startswith("variational")), result.original[-1])
    examples = [i for i in range(len(val)) if int(val.data.gold[i]) >= 0][: args.num_plots]
    if examples:
        post = alignment_posterior(variational.pair, val.data)
        titles = [f"#{i}: {val.questions[i].text} -> {val.answers[int(val.data.answer[i])]}" for i in examples]
        path = alignment_heatmaps(
            post,
            examples,
            val.region_names,
            titles,
            Path(args.out) / "clevr_alignments.png",
            gold=val.data.gold,
            suptitle=f"{variational.name}, {type(variational.pair.network).__name__} network, CLEVR, original "
            "validation split",
            soft=variational.pair.deterministic,
        )
        print(f"\nWrote the prior / posterior / q heatmaps of {variational.name} to {path.resolve()}")
    print(f"Total time {time.perf_counter() - start:.1f} s")
    return 0


def _all_rows() -> list:
    """``demo --neighbours``: the paper's rows and the neighbours'."""
    from pyro_attention.tasks.region_qa import ALL_ROWS

    return list(ALL_ROWS)


def _ambiguous(val, i: int) -> bool:  # noqa: ANN001
    """Two regions of the asked kind: only the answer can tell which one the question means."""
    kind = val.vocab[int(val.data.question[i, 1])]
    return sum(name.endswith(" " + kind) for name in val.region_names[i]) > 1



def add_demo(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    """``pyro-attention demo``."""
    demo = sub.add_parser("demo", help="train every pair on synthetic region QA and print the comparison")
    demo.add_argument(
        "--task",
        choices=["synthetic", "clevr"],
        default="synthetic",
        help="synthetic scenes, or real CLEVR scene graphs (needs --data-dir or $PYRO_ATTENTION_DATA)",
    )
    demo.add_argument("--data-dir", default=None, help="clevr: folder holding clevr-scenes/ (default: see README)")
    demo.add_argument(
        "--train-size", type=_int_at_least(1), default=2000, help="training scenes (clevr: generated questions)"
    )
    demo.add_argument(
        "--val-size", type=_int_at_least(1), default=500, help="held-out scenes (clevr: generated questions)"
    )
    demo.add_argument("--epochs", type=_int_at_least(1), default=12, help="training epochs of every pair")
    demo.add_argument("--hidden", type=_int_at_least(1), default=64, help="hidden size of the region-QA network")
    demo.add_argument("--seed", type=_int_at_least(0), default=0, help="seed of data, weights and sampling")
    demo.add_argument(
        "--threads", type=_int_at_least(0), default=1, help="torch threads (1 avoids oversubscription; 0: torch's)"
    )
    demo.add_argument("--num-plots", type=_int_at_least(0), default=4, help="held-out examples in the heatmap")
    demo.add_argument("--out", default="pyro-attention-demo", help="folder for the figure")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.add_argument(
        "--neighbours", action="store_true", help="also the neighbours (structured, Gaussian, BAM, Gumbel, RWS)"
    )
    demo.set_defaults(func=_demo)
