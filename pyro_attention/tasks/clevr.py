"""Every pair on real CLEVR scenes: the paper's VQA comparison with objects as regions.

The paper's second experiment attends over 36 image regions of VQA 2.0.  Here the regions are the 3-10 objects
of real CLEVR v1.0 scene graphs (features from their attributes and coordinates, see
:mod:`pyro_attention.data.clevr`), and the questions are the original CLEVR-template questions plus seeded
questions of the same template families generated over the same scenes.  Every row of
:data:`~pyro_attention.tasks.region_qa.ROWS` is trained on the original + generated training questions with
:func:`~pyro_attention.tasks.region_qa.run_region_qa`, then evaluated separately on the original validation questions
and on generated validation questions: NLL per answer (exact by enumeration, ``~`` for the Dirichlet pair's
importance-weighted estimate), accuracy, entropies of prior / exact posterior / q, and, on the questions whose
template defines one attended object (queries), how often each argmax is that object.

References:

1. Deng, Kim, Chiu, Guo, Rush. "Latent Alignment and Variational Attention." NeurIPS 2018 (VQA 2.0 columns).
2. Johnson et al. "CLEVR: A Diagnostic Dataset for Compositional Language and Elementary Visual Reasoning."
   CVPR 2017.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyro

from pyro_attention.data.clevr import ClevrSplits, clevr_splits
from pyro_attention.tasks.common import OptimConfig, option, with_default
from pyro_attention.tasks.region_qa import (
    RegionQAConfig,
    RegionTraining,
    Row,
    evaluate_pair,
    format_table,
    run_region_qa,
)

#: the paper's VQA 2.0 columns (Deng et al. 2018, Table 2): label -> (NLL, accuracy %)
PAPER_VQA: dict[str, tuple[float, float]] = {
    "soft": (1.76, 58.93),
    "marginal": (1.69, 60.33),
    "hard (enum)": (1.78, 57.60),
    "variational (enum)": (1.69, 58.44),
    "variational (sample)": (1.75, 57.52),
}


@dataclass
class ClevrConfig(RegionTraining):
    """Data and training settings of the CLEVR comparison (defaults: the documented run); ``num_epochs``, the old
    name of ``epochs``, is still taken."""

    epochs: int = with_default(OptimConfig, "epochs", 15)
    data_dir: str | None = option(None, "folder holding clevr-scenes/ (default: $PYRO_ATTENTION_DATA or "
                                        "../shared/data)")
    generated_train: int = option(8000, "questions generated on training scenes", low=0)
    generated_val: int = option(1000, "questions generated on validation scenes", low=0)
    question_seed: int = option(0, "seed of the question generator (validation: seed + 1)", low=0)
    #: ``None``: every row of the paper's table; else :class:`~pyro_attention.registry.PairSpec` or
    #: ``(name, estimator)`` rows
    rows: list[Any] | None = None


@dataclass
class ClevrResult:
    """Rows on the original validation questions and on generated ones, the splits, and the wall time."""

    original: list[Row]
    generated: list[Row]
    splits: ClevrSplits
    seconds: float = 0.0
    sizes: dict[str, int] = field(default_factory=dict)


def resolve_data_dir(data_dir: str | None = None) -> Path:
    """``data_dir``, else ``$PYRO_ATTENTION_DATA``, else ``../shared/data`` beside the working directory or checkout."""
    from pyro_attention.data.corpora import DATA_ENV
    from pyro_attention.data.corpora import data_dir as _data_dir

    try:
        return _data_dir(data_dir)
    except FileNotFoundError:
        if data_dir is not None:
            raise
        for fallback in (Path("..") / "shared" / "data", Path(__file__).resolve().parents[3] / "shared" / "data"):
            if fallback.is_dir():
                return fallback
        raise FileNotFoundError(
            f"CLEVR data not found: pass --data-dir PATH (the folder holding clevr-scenes/), set {DATA_ENV}, or "
            f"run from a checkout with ../shared/data beside it"
        ) from None


def run_clevr(config: ClevrConfig, progress: bool = True, log=print) -> ClevrResult:  # noqa: ANN001
    """Build the splits, train every row, evaluate on both validation sets."""
    start = time.perf_counter()
    splits = clevr_splits(
        resolve_data_dir(config.data_dir),
        generated_train=config.generated_train,
        generated_val=config.generated_val,
        seed=config.question_seed,
    )
    sizes = {
        "train": len(splits.train),
        "train_original": sum(q.source == "original" for q in splits.train.questions),
        "val_original": len(splits.val_original),
        "val_generated": len(splits.val_generated) if splits.val_generated is not None else 0,
        "vocab": len(splits.vocab),
    }
    log(
        f"CLEVR: {sizes['train']} training questions ({sizes['train_original']} original + "
        f"{sizes['train'] - sizes['train_original']} generated), {sizes['val_original']} original / "
        f"{sizes['val_generated']} generated validation questions, vocabulary {sizes['vocab']} words"
    )
    rq = RegionQAConfig(**{f.name: getattr(config, f.name) for f in dataclasses.fields(RegionTraining)})
    if config.rows is not None:
        rq.rows = list(config.rows)
    rows, _ = run_region_qa(rq, progress=progress, log=log, train=splits.train, val=splits.val_original)
    generated = []
    if splits.val_generated is not None:
        for r in rows:
            pyro.clear_param_store()  # every pair registers its network as "network"
            scores = evaluate_pair(r.pair, splits.val_generated, config.num_samples)
            generated.append(Row(**vars(scores), name=r.name, seconds=r.seconds, pair=r.pair))
    return ClevrResult(rows, generated, splits, time.perf_counter() - start, sizes)


def format_paper_table(labels: list[str] | None = None) -> str:
    """The paper's VQA 2.0 numbers for reference (a different task: 36 image regions, 3,000 answers)."""
    lines = ["| pair | paper VQA NLL | paper VQA accuracy (%) |", "|---|---|---|"]
    for label, (nll, acc) in PAPER_VQA.items():
        if labels is None or label in labels:
            lines.append(f"| {label} | {nll:.2f} | {acc:.2f} |")
    return "\n".join(lines)


def format_clevr(result: ClevrResult) -> str:
    """Both tables and the paper's reference numbers, in Markdown."""
    s = result.sizes
    gold_orig = int((result.splits.val_original.data.gold >= 0).sum())
    parts = [
        f"Original CLEVR validation questions ({s['val_original']}; gold object on {gold_orig}):",
        "",
        format_table(result.original),
    ]
    if result.generated:
        gold_gen = int((result.splits.val_generated.data.gold >= 0).sum())
        parts += [
            "",
            f"Generated validation questions ({s['val_generated']}, same scenes and families; gold object on "
            f"{gold_gen}):",
            "",
            format_table(result.generated),
        ]
    parts += ["", "The paper's VQA 2.0 columns, for reference only (a different task):", "", format_paper_table()]
    return "\n".join(parts)
