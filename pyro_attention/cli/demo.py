"""``pyro-attention demo``: every pair on synthetic region QA (``--task clevr``: real CLEVR scenes), the
comparison table and a heatmap of prior / exact posterior / q alignments."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pyro_attention.cli.common import add_command, add_config_options, config_values, int_at_least


def _demo(args: argparse.Namespace) -> int:
    from pyro_attention.files import writing

    with writing(args.out):  # the figure's folder, before minutes of training: a read-only --out fails now
        Path(args.out).mkdir(parents=True, exist_ok=True)
        if not os.access(args.out, os.W_OK):
            raise PermissionError(13, "Permission denied")
    if args.task == "clevr":
        return _demo_clevr(args)
    from pyro_attention.tasks.region_qa import RegionQAConfig, format_table, run_region_qa

    config = _demo_config(args, RegionQAConfig, train_size=args.train_size, val_size=args.val_size)
    print(
        f"pyro-attention demo: {config.train_size} training / {config.val_size} held-out synthetic scenes, "
        f"{config.epochs} epochs, hidden {config.hidden_size}, seed {config.seed}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    start = time.perf_counter()
    rows, val = run_region_qa(config, progress=not args.quiet)
    print()
    print("Held-out results (NLL per answer in nats; '~' = importance-weighted estimate, not exact):")
    print(format_table(rows))
    variational = next((r for r in rows if r.name.startswith("variational")), rows[-1])
    ambiguous = [i for i in range(len(val)) if len(set(val.region_names[i])) and _ambiguous(val, i)]
    examples = (ambiguous[:2] + [i for i in range(len(val)) if i not in ambiguous[:2]])[: args.num_plots]
    titles = [f"#{i}: {val.question_text(i)} -> {val.answers[int(val.data.answer[i])]}" for i in examples]
    path = _heatmaps(variational, val, examples, titles, Path(args.out) / "alignments.png",
                     "synthetic region QA, held-out split")
    print(
        f"\nWrote the prior / posterior / q heatmaps of {variational.name} for {len(examples)} held-out "
        f"examples to {path.resolve()}"
    )
    print(f"Total time {time.perf_counter() - start:.1f} s")
    return 0


def _demo_clevr(args: argparse.Namespace) -> int:
    """``demo --task clevr``: every pair on real CLEVR scenes (original and generated questions)."""
    from pyro_attention.tasks.clevr import ClevrConfig, format_clevr, run_clevr

    sizes = dict(data_dir=args.data_dir, generated_train=args.train_size, generated_val=args.val_size)
    config = _demo_config(args, ClevrConfig, **sizes)
    print(
        f"pyro-attention demo --task clevr: original CLEVR questions + {config.generated_train} generated training / "
        f"{config.generated_val} generated validation questions, {config.epochs} epochs, hidden "
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
        titles = [f"#{i}: {val.questions[i].text} -> {val.answers[int(val.data.answer[i])]}" for i in examples]
        path = _heatmaps(variational, val, examples, titles, Path(args.out) / "clevr_alignments.png",
                         "CLEVR, original validation split")
        print(f"\nWrote the prior / posterior / q heatmaps of {variational.name} to {path.resolve()}")
    print(f"Total time {time.perf_counter() - start:.1f} s")
    return 0


def _demo_config(args: argparse.Namespace, make: Callable, **sizes: Any) -> Any:
    """The torch threads set and the config of a demo run, ``make(**sizes, ...)`` with the run's epochs, hidden size
    and seed (the flags of :class:`~pyro_attention.tasks.region_qa.RegionTraining`); every row, neighbours
    included, with ``--neighbours``."""
    if args.threads:
        torch.set_num_threads(args.threads)
    from pyro_attention.tasks.region_qa import RegionTraining

    config = make(**sizes, **config_values(RegionTraining, args))
    if args.neighbours:
        config.rows = _all_rows()
    return config


def _heatmaps(row: Any, val: Any, examples: list[int], titles: list[str], path: Path, where: str) -> Path:
    """The prior / exact posterior / q heatmaps of ``row``'s pair on the ``examples`` of ``val``."""
    from pyro_attention.inference import alignment_posterior
    from pyro_attention.plots import alignment_heatmaps

    return alignment_heatmaps(
        alignment_posterior(row.pair, val.data),
        examples,
        val.region_names,
        titles,
        path,
        gold=val.data.gold,
        suptitle=f"{row.name}, {type(row.pair.network).__name__} network, {where}",
        soft=row.pair.deterministic,
    )


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
    demo = add_command(sub, "demo", _demo, "train every pair on synthetic region QA and print the comparison")
    demo.add_argument(
        "--task",
        choices=["synthetic", "clevr"],
        default="synthetic",
        help="synthetic scenes, or real CLEVR scene graphs (needs --data-dir or $PYRO_ATTENTION_DATA)",
    )
    demo.add_argument("--data-dir", default=None, help="clevr: folder holding clevr-scenes/ (default: see README)")
    demo.add_argument(
        "--train-size", type=int_at_least(1), default=2000, help="training scenes (clevr: generated questions)"
    )
    demo.add_argument(
        "--val-size", type=int_at_least(1), default=500, help="held-out scenes (clevr: generated questions)"
    )
    from pyro_attention.tasks.region_qa import RegionTraining

    add_config_options(demo, RegionTraining, ("epochs", "hidden_size", "seed"))
    demo.add_argument(
        "--threads", type=int_at_least(0), default=1, help="torch threads (1 avoids oversubscription; 0: torch's)"
    )
    demo.add_argument("--num-plots", type=int_at_least(0), default=4, help="held-out examples in the heatmap")
    demo.add_argument("--out", default="pyro-attention-demo", help="folder for the figure")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.add_argument(
        "--neighbours", action="store_true", help="also the neighbours (structured, Gaussian, BAM, Gumbel, RWS)"
    )
