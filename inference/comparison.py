"""``compare``: several trained pairs ranked by held-out log predictive density per token, like ``az.compare``.

``az.compare`` ranks models by PSIS-LOO, which needs posterior draws of the parameters; a trained pair is one
point estimate, and on *held-out* data no leave-one-out correction is needed at all: the network never saw
those tokens, so the expected log predictive density is estimated directly by the mean of
``log p(y_t | x, y_<t)`` over the held-out tokens, exact where the alignment is enumerated
(:func:`~pyro_attention.inference.log_likelihood`).  The standard errors are the usual ones of a mean over
independent units (tokens, or examples with ``by="example"``: tokens of one sentence are not independent), and the
difference to the best pair is *paired* over the same units, as ``az.compare``'s ``elpd_diff`` / ``dse``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from pyro_attention.checks import count
from pyro_attention.inference.evaluate import EstimateError, estimate_text, log_likelihood
from pyro_attention.pair import AlignmentPair

UNITS = ("token", "example")

COLUMNS = ["rank", "elpd_per_token", "se", "elpd_diff", "dse", "mc_se", "khat_max", "n_tokens", "n_examples", "exact",
           "warning", "method"]


def _batches(data: Any) -> list[Any]:
    if isinstance(data, (list, tuple)):
        if not data:
            raise ValueError("compare: data is an empty list of batches")
        return list(data)
    return [data]


def _check_vocabularies(pairs: Mapping[str, AlignmentPair]) -> None:
    """Every pair must score the same output vocabulary (and, where the network says, the same input one)."""
    for attr in ("num_classes", "vocab_size"):
        sizes = {name: getattr(pair.network, attr, None) for name, pair in pairs.items()}
        known = {name: size for name, size in sizes.items() if size is not None}
        if len(set(known.values())) > 1:
            raise ValueError(
                f"compare: the pairs have different vocabularies ({attr}: {known}); log-likelihoods of different "
                "vocabularies are not comparable -- compare pairs trained on the same vocabulary"
            )


def _ratio_se(totals: np.ndarray, counts: np.ndarray) -> float:
    """Standard error of ``sum(totals) / sum(counts)`` over independent units (the ratio estimator)."""
    m = len(totals)
    if m < 2:
        return float("nan")
    ratio = totals.sum() / counts.sum()
    resid = totals - ratio * counts
    return float(math.sqrt((resid**2).sum() / (m * (m - 1))) / counts.mean())


def _check_pairs(pairs: Any, by: str) -> None:
    """``pairs`` a non-empty mapping of names to pairs and ``by`` a unit; else the error :func:`compare` raises."""
    if not isinstance(pairs, Mapping):
        raise TypeError(
            f"compare: pairs must be a dict of name -> trained pair (as az.compare takes a dict of models), "
            f"got {type(pairs).__name__}"
        )
    if not pairs:
        raise ValueError("compare: pairs is empty; give at least one name -> trained pair")
    for name, pair in pairs.items():
        if not isinstance(pair, AlignmentPair):
            raise TypeError(f"compare: pairs[{name!r}] is a {type(pair).__name__}, not an AlignmentPair")
    if by not in UNITS:
        raise ValueError(f"compare: by must be one of {UNITS}, got {by!r}")


def _scores(pairs: Mapping[str, AlignmentPair], batches: list, num_samples: int) -> tuple:
    """Per pair the log-likelihoods of the real target tokens of every batch, the example of each token (numbered
    across batches), the pair's method and the error of its summed log-likelihood (:class:`EstimateError`)."""
    values: dict[str, list[np.ndarray]] = {name: [] for name in pairs}
    example_of: list[np.ndarray] = []
    method: dict[str, str] = {}
    error = dict.fromkeys(pairs, EstimateError())
    offset = 0
    for batch in batches:
        mask = None
        for name, pair in pairs.items():
            ll = log_likelihood(pair, batch, num_samples=num_samples)
            token_mask = pair.network.encode(batch).target_mask.cpu().numpy().astype(bool)
            if mask is None:
                mask = token_mask
            elif mask.shape != token_mask.shape or (mask != token_mask).any():
                raise ValueError(f"compare: pair {name!r} sees different target tokens of the same data")
            values[name].append(ll.per_token.double().cpu().numpy()[mask])
            method[name] = ll.method
            error[name] += ll.error
        ex, _ = np.nonzero(mask)
        example_of.append(ex + offset)
        offset += mask.shape[0]
    return values, example_of, method, error


@torch.no_grad()
def compare(pairs: Mapping[str, AlignmentPair], data: Any, by: str = "token", num_samples: int = 100) -> Any:
    """A ranked ``pandas.DataFrame`` of held-out log predictive density per token, one row per pair.

    :param pairs: name -> trained pair; all on the same vocabulary.
    :param data: one batch (e.g. ``make_region_qa(...).data`` or a collated translation batch) or a list of
        batches; every pair is scored on the same real target tokens.
    :param by: the independent unit of the standard errors: ``"token"`` (each real target token) or
        ``"example"`` (each example's tokens together; the per-token mean is then a ratio estimator).
    :param num_samples: importance samples for pairs whose log-likelihood is estimated (not enumerable).
    :returns: index = pair names, best first; columns ``rank`` (0 = best), ``elpd_per_token`` (mean
        ``log p(y_t | x, y_<t)``, nats), ``se`` (its standard error), ``elpd_diff`` (best minus this pair, per
        token, >= 0), ``dse`` (standard error of the paired differences over the same units),
        ``mc_se`` (an estimate's Monte Carlo standard error of ``elpd_per_token``; 0 when exact), ``khat_max`` (the
        largest PSIS k-hat of its importance weights; ``nan`` when exact or undefined), ``n_tokens``,
        ``n_examples``, ``exact`` (``False``: an importance-weighted estimate), ``warning`` (``True`` where an
        estimate cannot be trusted: k-hat above 0.7 on some token, or undefined with too few draws) and
        ``method``.
    :raises TypeError: if ``pairs`` is not a mapping of names to pairs.
    :raises ValueError: no pairs, empty data, pairs on different vocabularies, or an unknown ``by``.
    """
    import pandas as pd

    _check_pairs(pairs, by)
    count(num_samples, "compare: num_samples", 1)
    _check_vocabularies(pairs)
    values, example_of, method, error = _scores(pairs, _batches(data), num_samples)
    per_token = {name: np.concatenate(v) for name, v in values.items()}
    examples = np.concatenate(example_of)
    n = len(examples)
    if n == 0:
        raise ValueError("compare: data has no real target tokens (empty data or every target padded)")
    units, counts = np.unique(examples, return_counts=True)

    def unit_totals(x: np.ndarray) -> np.ndarray:
        return np.bincount(np.searchsorted(units, examples), weights=x, minlength=len(units))

    def mean_se(x: np.ndarray) -> float:
        if by == "example":
            return _ratio_se(unit_totals(x), counts.astype(np.float64))
        return float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")

    elpd = {name: float(x.mean()) for name, x in per_token.items()}
    order = sorted(pairs, key=lambda name: -elpd[name])
    best = per_token[order[0]]
    rows = []
    for rank, name in enumerate(order):
        diff = best - per_token[name]
        rows.append(
            {
                "rank": rank,
                "elpd_per_token": elpd[name],
                "se": mean_se(per_token[name]),
                "elpd_diff": float(diff.mean()),
                "dse": 0.0 if rank == 0 else mean_se(diff),
                "mc_se": error[name].se / n,
                "khat_max": error[name].khat_max if error[name].khat_defined else float("nan"),
                "n_tokens": n,
                "n_examples": len(units),
                "exact": error[name].exact,
                # as az.compare's: the estimate cannot be trusted (k-hat above 0.7, or too few draws to tell)
                "warning": not error[name].reliable,
                "method": method[name],
            }
        )
    table = pd.DataFrame(rows, index=pd.Index(order, name="pair"), columns=COLUMNS)
    table.attrs.update({"scale": "log", "unit": by, "per": "token"})
    return table


def format_comparison(table: Any, digits: int = 3) -> str:
    """The :func:`compare` table as Markdown (``~`` marks an estimated, not exact, log-likelihood, followed by its
    Monte Carlo standard error; ``!``: the estimate's ``warning``)."""
    lines = ["| rank | pair | elpd / token | se | elpd_diff | dse |", "|---|---|---|---|---|---|"]
    for name, row in table.iterrows():
        value = f"{row['elpd_per_token']:.{digits}f}"
        if not row["exact"]:
            value = estimate_text(value, f"{row['mc_se']:.{digits}f}", not row["warning"])
        lines.append(
            f"| {row['rank']} | {name} | {value} | {row['se']:.{digits}f} | "
            f"{row['elpd_diff']:.{digits}f} | {row['dse']:.{digits}f} |"
        )
    return "\n".join(lines)


__all__ = ["compare", "format_comparison"]
