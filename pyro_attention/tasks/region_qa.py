"""The region-QA comparison of every pair: the table printed by ``examples/region_qa.py`` and ``pyro-attention
demo``.

For each pair it trains with :func:`~pyro_attention.inference.fit` on synthetic scenes, then measures on held-out
scenes: the NLL per answer (exact by enumeration for categorical pairs and soft attention; an importance-weighted
estimate for the continuous pairs, marked ``~`` and printed with its Monte Carlo standard error, and ``!`` where
PSIS k-hat of its weights exceeds 0.7 on some answer), answer accuracy under the pair's own prediction rule (soft: one
network run on ``E_p[z]``; the others: ``E_p[p(y | x, z)]``), the mean entropy (nats) of the prior, of the exact
posterior and of ``q``, and how often the argmax of each hits the gold region.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pyro_attention import registry
from pyro_attention.data import RegionQADataset, make_region_qa
from pyro_attention.inference import alignment_posterior, entropy, fit, log_likelihood, predict
from pyro_attention.inference.evaluate import estimate_text
from pyro_attention.networks import RegionQA
from pyro_attention.pair import AlignmentPair
from pyro_attention.registry import NEIGHBOUR_ROWS, PAPER_ROWS, PairSpec
from pyro_attention.tasks.common import OptimConfig, option, with_default

#: (pair name, estimator) rows of the paper's tables, in order (:data:`pyro_attention.registry.PAPER_ROWS`)
ROWS: list[tuple[str, str | None]] = [(spec.name, spec.estimator) for spec in PAPER_ROWS]
#: the paper's rows, then the neighbours' (structured attention, Gaussian context, BAM, Gumbel, RWS)
ALL_ROWS: list[PairSpec] = PAPER_ROWS + NEIGHBOUR_ROWS


@dataclass
class RegionTraining(OptimConfig):
    """What a region-QA network is trained with, on any scenes (:class:`RegionQAConfig`, the CLEVR run's config):
    the optimisation settings, the network's hidden size, the relaxed pair's warm-up and the importance samples of
    an estimated NLL."""

    epochs: int = with_default(OptimConfig, "epochs", 12)
    hidden_size: int = option(64, "hidden size of the region-QA network", low=1,
                              flag={"name": "--hidden", "dest": "hidden_size"})
    warmup_steps: int = option(0, "relaxed pair: steps with the prior as guide", low=0)
    num_samples: int = option(200, "importance samples of an estimated NLL (PSIS k-hat needs about 200)", low=1)


@dataclass
class RegionQAConfig(RegionTraining):
    """Sizes and optimisation settings of the comparison (defaults: the demo's small size); ``num_epochs``, the old
    name of ``epochs``, is still taken."""

    train_size: int = option(2000, "training scenes", low=1)
    val_size: int = option(500, "held-out scenes", low=1)
    num_regions: tuple[int, int] = (3, 6)
    ambiguity: float = option(0.3, "share of scenes with two regions of a kind")
    #: rows: :class:`~pyro_attention.registry.PairSpec` or ``(name, estimator[, options])`` tuples
    rows: list[Any] = field(default_factory=lambda: list(PAPER_ROWS))


@dataclass
class Evaluation:
    """What :func:`evaluate_pair` measures on held-out scenes."""

    #: NLL per answer: exact, or an importance-weighted estimate (``nll_exact`` False)
    nll: float
    nll_exact: bool
    #: an estimate's Monte Carlo standard error (0 when exact) and the largest PSIS k-hat of its weights (``nan``:
    #: exact, or undefined)
    nll_se: float
    khat_max: float
    #: exact, or an estimate that can be trusted (:attr:`~pyro_attention.inference.LogLikelihood.reliable`)
    nll_reliable: bool
    accuracy: float
    entropy: dict[str, float]
    gold: dict[str, float]


@dataclass
class Row(Evaluation):
    """One line of the table: a pair's :class:`Evaluation`, its name, training time and the trained pair."""

    name: str = ""
    seconds: float = 0.0
    pair: AlignmentPair | None = None


def rows_by_label(labels: Sequence[str]) -> list[PairSpec]:
    """The rows of :data:`ALL_ROWS` with these labels (e.g. ``"hard (enum)"``), in the order given.

    :raises ValueError: naming the unknown labels and listing the known ones.
    """
    known = {spec.label: spec for spec in ALL_ROWS}
    unknown = [label for label in labels if label not in known]
    if unknown:
        raise ValueError(f"unknown {unknown}; choose from {list(known)}")
    return [known[label] for label in labels]


def make_pair(name: str, estimator: str | None, network: RegionQA, **options: Any) -> AlignmentPair:
    """Build the pair ``name`` (a key of :data:`~pyro_attention.registry.ALL_PAIRS`)."""
    return registry.make_pair(name, network, estimator, **options)


def row_label(name: str, estimator: str | None) -> str:
    return PairSpec(name, estimator).label


def evaluate_pair(pair: AlignmentPair, data: RegionQADataset, num_samples: int = 200) -> Evaluation:
    """NLL (with its Monte Carlo error where estimated), accuracy under the pair's own rule, entropies and gold
    hits of ``pair`` on ``data``."""
    batch = data.data
    ll = log_likelihood(pair, batch, num_samples=num_samples)
    tokens = float(ll.num_tokens.sum())
    nll = -float(ll.per_example.sum()) / tokens
    predicted = predict(pair, batch, None, num_samples=num_samples)[:, 0].argmax(-1)  # the pair's own rule
    accuracy = float((predicted == batch.answer).float().mean())
    post = alignment_posterior(pair, batch)
    ent = {k: float(entropy(v).mean()) for k, v in post.items()}
    gold = {}
    if batch.gold is not None and bool((batch.gold >= 0).any()):
        known = batch.gold >= 0  # a gold region of -1 means "no single attended region" (not scored)
        gold = {
            k: float((v[known, 0].argmax(-1) == batch.gold[known]).float().mean()) for k, v in post.items()
        }
    err = ll.error
    khat_max = err.khat_max if err.khat_defined else math.nan
    return Evaluation(nll, ll.exact, err.se / tokens, khat_max, err.reliable, accuracy, ent, gold)


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
    for spec in map(PairSpec.of, config.rows):
        torch.manual_seed(config.seed)
        net = RegionQA(
            train.feature_size, len(train.answers), vocab_size=len(train.vocab), hidden_size=config.hidden_size
        )
        pair = spec.build(net)
        start = time.perf_counter()
        fit(
            pair,
            train,
            num_epochs=config.epochs,
            batch_size=config.batch_size,
            lr=config.lr,
            warmup_steps=config.warmup_steps if pair.has_warmup else 0,
            seed=config.seed,
            progress=progress,
        )
        seconds = time.perf_counter() - start
        rows.append(Row(**vars(evaluate_pair(pair, val, config.num_samples)), name=spec.label, seconds=seconds,
                        pair=pair))
        log(
            f"  trained {rows[-1].name:<22} in {seconds:5.1f} s: NLL {nll_cell(rows[-1])}, "
            f"accuracy {rows[-1].accuracy:.3f}"
        )
    return rows, val


def _cell(value: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def nll_cell(r: Evaluation) -> str:
    """An exact NLL as a number; an estimate as ``~NLL ± s.e.`` (Monte Carlo), with ``!`` where unreliable."""
    if r.nll_exact:
        return _cell(r.nll)
    return estimate_text(_cell(r.nll), _cell(r.nll_se), r.nll_reliable)


def format_table(rows: list[Row]) -> str:
    """The comparison as a Markdown table (``~`` marks an importance-weighted estimate, not an exact NLL, with its
    Monte Carlo standard error; ``!``: the estimate is unreliable, PSIS k-hat above 0.7 on some answer or too few
    draws to fit it)."""
    head = "| pair | NLL | accuracy | H(prior) | H(posterior) | H(q) | gold@prior | gold@posterior | gold@q | train s |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        nll = nll_cell(r)
        lines.append(
            f"| {r.name} | {nll} | {_cell(r.accuracy)} | {_cell(r.entropy.get('prior'))} | "
            f"{_cell(r.entropy.get('posterior'))} | {_cell(r.entropy.get('guide'))} | {_cell(r.gold.get('prior'))} | "
            f"{_cell(r.gold.get('posterior'))} | {_cell(r.gold.get('guide'))} | {r.seconds:.1f} |"
        )
    return "\n".join(lines)
