"""The region-QA comparison of every pair: the table printed by ``examples/region_qa.py`` and ``pyro-attention
demo``.

For each pair it trains with :func:`~pyro_attention.inference.fit` on synthetic scenes, then measures on held-out
scenes: the NLL per answer (exact by enumeration for categorical pairs and soft attention; an importance-weighted
estimate for the Dirichlet pair, marked ``~``), answer accuracy under the pair's own prediction rule (soft: one
network run on ``E_p[z]``; the others: ``E_p[p(y | x, z)]``), the mean entropy (nats) of the prior, of the exact
posterior and of ``q``, and how often the argmax of each hits the gold region.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from pyro_attention.data import RegionQADataset, make_region_qa
from pyro_attention.inference import alignment_posterior, entropy, fit, log_likelihood, predict
from pyro_attention.models import PAIRS
from pyro_attention.networks import RegionQA
from pyro_attention.pair import AlignmentPair

#: (pair name, estimator) rows of the paper's tables, in order
ROWS: list[tuple[str, str | None]] = [
    ("soft", None),
    ("marginal", None),
    ("hard", "enum"),
    ("hard", "sample"),
    ("variational", "enum"),
    ("variational", "sample"),
    ("relaxed", None),
]


@dataclass
class RegionQAConfig:
    """Sizes and optimisation settings of the comparison (defaults: the demo's small size)."""

    train_size: int = 2000
    val_size: int = 500
    num_regions: tuple[int, int] = (3, 6)
    ambiguity: float = 0.3
    hidden_size: int = 64
    num_epochs: int = 12
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 0
    num_samples: int = 50
    seed: int = 0
    rows: list[tuple[str, str | None]] = field(default_factory=lambda: list(ROWS))


@dataclass
class Row:
    """One line of the table."""

    name: str
    nll: float
    nll_exact: bool
    accuracy: float
    entropy: dict[str, float]
    gold: dict[str, float]
    seconds: float
    pair: AlignmentPair | None = None


def make_pair(name: str, estimator: str | None, network: RegionQA) -> AlignmentPair:
    """Build the pair ``name`` (a key of :data:`~pyro_attention.models.PAIRS`)."""
    if name not in PAIRS:
        raise ValueError(f"unknown pair {name!r}; choose from {sorted(PAIRS)}")
    return PAIRS[name](network, estimator=estimator) if estimator else PAIRS[name](network)


def row_label(name: str, estimator: str | None) -> str:
    return f"{name} ({estimator})" if estimator else name


def evaluate_pair(
    pair: AlignmentPair, data: RegionQADataset, num_samples: int = 50
) -> tuple[float, bool, float, dict, dict]:
    batch = data.data
    ll = log_likelihood(pair, batch, num_samples=num_samples)
    nll = -float(ll.per_example.sum()) / float(ll.num_tokens.sum())
    rule = "soft" if pair.latent == "none" else "marginal"
    accuracy = float(
        (predict(pair, batch, rule, num_samples=num_samples)[:, 0].argmax(-1) == batch.answer).float().mean()
    )
    post = alignment_posterior(pair, batch)
    ent = {k: float(entropy(v).mean()) for k, v in post.items()}
    gold = {}
    if batch.gold is not None and bool((batch.gold >= 0).any()):
        known = batch.gold >= 0  # a gold region of -1 means "no single attended region" (not scored)
        gold = {
            k: float((v[known, 0].argmax(-1) == batch.gold[known]).float().mean()) for k, v in post.items()
        }
    return nll, ll.exact, accuracy, ent, gold


def run_region_qa(
    config: RegionQAConfig,
    progress: bool = True,
    log=print,  # noqa: ANN001
    train: RegionQADataset | None = None,
    val: RegionQADataset | None = None,
) -> tuple[list[Row], RegionQADataset]:
    """Train and evaluate every row of ``config.rows``; returns the rows and the held-out data.

    ``train`` / ``val`` default to synthetic scenes made from ``config``; pass any :class:`RegionQADataset`
    (e.g. CLEVR scenes) to run the same comparison on other data.
    """
    if train is None:
        train = make_region_qa(
            config.train_size, num_regions=config.num_regions, ambiguity=config.ambiguity, seed=config.seed
        )
    if val is None:
        val = make_region_qa(
            config.val_size, num_regions=config.num_regions, ambiguity=config.ambiguity, seed=config.seed + 1
        )
    rows = []
    for name, estimator in config.rows:
        torch.manual_seed(config.seed)
        net = RegionQA(
            train.feature_size, len(train.answers), vocab_size=len(train.vocab), hidden_size=config.hidden_size
        )
        pair = make_pair(name, estimator, net)
        start = time.perf_counter()
        fit(
            pair,
            train,
            num_epochs=config.num_epochs,
            batch_size=config.batch_size,
            lr=config.lr,
            warmup_steps=config.warmup_steps if hasattr(pair, "warmup_guide") else 0,
            seed=config.seed,
            progress=progress,
        )
        seconds = time.perf_counter() - start
        nll, exact, acc, ent, gold = evaluate_pair(pair, val, config.num_samples)
        rows.append(Row(row_label(name, estimator), nll, exact, acc, ent, gold, seconds, pair))
        log(
            f"  trained {rows[-1].name:<22} in {seconds:5.1f} s: NLL {'' if exact else '~'}{nll:.3f}, "
            f"accuracy {acc:.3f}"
        )
    return rows, val


def _cell(value: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def format_table(rows: list[Row]) -> str:
    """The comparison as a Markdown table (``~`` marks an importance-weighted estimate, not an exact NLL)."""
    head = "| pair | NLL | accuracy | H(prior) | H(posterior) | H(q) | gold@prior | gold@posterior | gold@q | train s |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        nll = ("" if r.nll_exact else "~") + _cell(r.nll)
        lines.append(
            f"| {r.name} | {nll} | {_cell(r.accuracy)} | {_cell(r.entropy.get('prior'))} | "
            f"{_cell(r.entropy.get('posterior'))} | {_cell(r.entropy.get('guide'))} | {_cell(r.gold.get('prior'))} | "
            f"{_cell(r.gold.get('posterior'))} | {_cell(r.gold.get('guide'))} | {r.seconds:.1f} |"
        )
    return "\n".join(lines)
