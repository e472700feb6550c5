"""ArviZ views of a pair's alignments: ``to_inference_data`` and a diagnostics table.

Built on :func:`arviz.from_dict` through :mod:`pyro_attention.inference.arviz_generation`, so it gives an
``InferenceData`` on ArviZ 0.2x (Python 3.10 / 3.11) and an ``xarray.DataTree`` on ArviZ >= 1 (Python >= 3.12),
with the same groups, variables, dims, coords and attributes.  ``arviz.from_pyro`` is not used: it accepts MCMC
objects only (and is gone from ArviZ 1.x) and, for an enumerated model, fills ``log_likelihood`` with the
likelihood at an alignment drawn from the prior.

What is random, and what ArviZ is given.  The network parameters are a point estimate: there are no posterior
draws of them.  The only unknowns with a distribution are the alignments ``z``, one per target token.  For a
categorical alignment that distribution is *exact* and small (``S`` numbers per token), so it is stored exactly
and not as Monte Carlo draws: 0/1 draws of a discrete variable are constant wherever the posterior is confident,
and ArviZ's ``summary`` divides 0 by 0 on every constant column (one ``RuntimeWarning`` each).  Draws are exported
only where they are the representation: a continuous alignment (the Dirichlet / simplex pairs, the Gaussian
context), drawn from ``q`` (no exact posterior there) and split into ``num_chains`` chains of independent draws.

* ``posterior`` -- continuous alignments only: ``weights`` (chain, draw, example, target, source), simplex draws
  from ``q``, or ``context`` (..., feature); padded targets and padded sources are ``NaN`` (not variables);
* ``prior`` -- the same variable drawn from ``p(z | x)``;
* ``observed_data`` -- ``y`` (example, target) and ``target_mask``;
* ``constant_data`` -- ``prior_probs``, ``posterior_probs`` (exact, categorical pairs) and ``q_probs`` (the
  guide's probabilities or mean weights), each (example, target, source), and ``source_mask``;
* ``marginal_log_likelihood`` -- ``y`` (token): ``log p(y_t | x, y_<t)`` of every *real* target token with the
  alignment summed out (padding dropped; ``token_example`` / ``token_position`` coordinates say where each comes
  from); exact by enumeration, an importance-weighted estimate for the continuous pairs
  (``attrs["log_likelihood_method"]``), then with ``mc_se`` (its Monte Carlo standard error) and ``khat`` (PSIS
  k-hat of its weights) per token.  Not ArviZ's ``log_likelihood`` group, on purpose: ``az.loo`` needs
  draws of the parameters (one per row of ``log_likelihood``) and here there is one point estimate, so PSIS-LOO
  has nothing to importance-sample; without the group ``az.loo`` and ``az.compare`` stop at once with ArviZ's
  "log likelihood not found" instead of an ``IndexError`` deep in ``psislw``.  Held-out comparison of pairs:
  :func:`pyro_attention.inference.compare`;
* ``sample_stats`` -- per example (dims ``example`` only): ``elbo`` and ``kl`` (``KL(q || p(z | x, y))``,
  exact for categorical pairs: ``log p - ELBO``) and PSIS ``khat`` of q (``nan`` where fewer than 25 draws or
  fewer than 10 distinct weights leave no tail to fit); and ``log_weight`` (chain, draw, example),
  ``log p(y, z | x) - log q(z | x, y)`` for the draws ``z ~ q`` (pairs with a guide).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import xarray as xr
from pyro import poutine

from pyro_attention.checks import count
from pyro_attention.inference import arviz_generation as azg
from pyro_attention.inference.evaluate import guide_draw, log_likelihood
from pyro_attention.inference.posterior import alignment_posterior, entropy
from pyro_attention.pair import AlignmentPair


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


def _has_guide(pair: AlignmentPair, batch: Any) -> bool:
    with torch.no_grad():
        return "align" in poutine.trace(pair.guide).get_trace(batch).nodes


def _draws(pair: AlignmentPair, batch: Any, probs: dict, num_samples: int) -> dict[str, torch.Tensor]:
    """Prior draws of a continuous alignment (``pair.prior``) and, for pairs with a guide, draws from q with
    their log importance weights ``(N, B)``; nothing for deterministic pairs.  Categorical alignments get no
    prior draws: their prior is exact (``prior_probs``)."""
    out = {}
    with torch.no_grad():
        enc = pair.network.encode(batch)
        if pair.continuous is not None:
            out["prior"] = pair.prior(enc).sample((num_samples,))
        if _has_guide(pair, batch):
            guided = [guide_draw(pair, batch) for _ in range(num_samples)]
            out["q"] = torch.stack([pair.alignment_weights(enc, z) for z, _ in guided])
            out["log_weight"] = torch.stack([w.sum(-1) for _, w in guided])
    return out


#: fewer distinct importance weights than this leave PSIS nothing to fit a tail to
MIN_DISTINCT_WEIGHTS = 10


def _khat(draws: dict) -> np.ndarray | None:
    """PSIS k-hat per example of the draws from q (``nan`` where fewer than 25 draws, or fewer than 10 distinct
    weights, leave no tail to fit: a discrete q with few support points, or q equal to the posterior, gives tied
    weights)."""
    if "log_weight" not in draws:
        return None
    log_w = _np(draws["log_weight"]).T.astype(np.float64)  # (B, N)
    khat = azg.psis_khat(log_w)
    distinct = np.array([len(np.unique(np.round(row, 10))) for row in log_w])
    return np.where(distinct >= MIN_DISTINCT_WEIGHTS, khat, np.nan)


#: the kinds of continuous alignment (``pair.continuous``): the only ones exported as draws (``posterior`` /
#: ``prior``), under these variable names
CONTINUOUS = ("weights", "context")

#: the group holding the pointwise ``log p(y_t | x)``; deliberately not ArviZ's ``log_likelihood`` (see module doc)
LOG_LIKELIHOOD_GROUP = "marginal_log_likelihood"

#: why ``az.loo`` / ``az.compare`` are not offered, stored in every group's attributes
NO_LOO = (
    "no PSIS-LOO: the network parameters are a point estimate (one 'draw'), so there is nothing to importance-"
    "sample; the alignment is integrated out exactly in marginal_log_likelihood. Compare pairs on held-out data "
    "with pyro_attention.inference.compare (exact held-out log predictive density per token, standard errors)."
)


def _chains(x: np.ndarray, num_chains: int) -> np.ndarray:
    """``(N, ...)`` independent draws as ``(num_chains, N // num_chains, ...)`` (the remainder dropped)."""
    per_chain = x.shape[0] // num_chains
    return x[: per_chain * num_chains].reshape((num_chains, per_chain) + x.shape[1:])


def _padded_nan(
    x: torch.Tensor, source_mask: torch.Tensor, target_mask: torch.Tensor, over_sources: bool
) -> np.ndarray:
    """Draws ``(N, B, T, S | F)`` with padded targets (and, for weights over the source, padded sources) set to
    NaN: they are not variables, and ArviZ skips NaN cells instead of dividing 0 by 0 on their constant zeros."""
    out = _np(x).astype(np.float64)
    out[:, ~_np(target_mask)] = np.nan
    if over_sources:
        out[..., ~_np(source_mask)[:, None, :].repeat(out.shape[2], 1)] = np.nan
    return out


_DIMS = {
    "weights": ["example", "target", "source"],
    "align_probs": ["example", "target", "source"],
    "attention_weights": ["example", "target", "source"],
    "context": ["example", "target", "feature"],
    "y": ["example", "target"],
    "target_mask": ["example", "target"],
    "prior_probs": ["example", "target", "source"],
    "posterior_probs": ["example", "target", "source"],
    "q_probs": ["example", "target", "source"],
    "source_mask": ["example", "source"],
    "log_weight": ["example"],
}
#: the ``posterior_source`` attribute: where the posterior group comes from
_POSTERIOR_SOURCES = {
    "exact": "exact posterior p(z|x,y): posterior.align_probs, one draw (the parameters are a point "
    "estimate; the probabilities are exact, not sampled)",
    "exact-categorical": "exact posterior p(z|x,y) of the underlying categorical model (pair.categorical()):"
    " constant_data.posterior_probs",
    "guide": "draws from the guide q(z|x,y) (no exact posterior)",
    "guide-probs": "guide q(z|x,y): constant_data.q_probs",
    "none": "none (deterministic attention: posterior.attention_weights, one draw, holds its attention "
    "weights)",
}


def _posterior_source(probs: dict, guide_draws: bool, continuous: bool) -> str:
    """The key of :data:`_POSTERIOR_SOURCES` for a pair's posterior group."""
    if guide_draws:
        return "guide"
    if "posterior" in probs:
        # a continuous pair's exact posterior is that of its underlying categorical model (pair.categorical())
        return "exact-categorical" if continuous else "exact"
    return "guide-probs" if "guide" in probs else "none"


def _add_per_token_and_example(idata: Any, ll: Any, ex_idx: np.ndarray, pos_idx: np.ndarray,
                               per_example: dict) -> None:
    """The log-likelihood group and the per-example statistics (ELBO, KL, k-hat) of :func:`to_inference_data`."""
    # one entry per *real* target token (padding dropped), with where it comes from as coordinates; no chain /
    # draw dimensions: it is one number per token, not a set of posterior draws
    tokens = {"token": np.arange(len(ex_idx)), "token_example": ("token", ex_idx), "token_position": ("token", pos_idx)}
    at_tokens = {"y": ll.per_token, "mc_se": ll.se, "khat": ll.khat}  # the last two for an estimate only
    variables = {name: (("token",), _np(value)[ex_idx, pos_idx].astype(np.float64))
                 for name, value in at_tokens.items() if value is not None}
    azg.set_group(idata, LOG_LIKELIHOOD_GROUP, xr.Dataset(variables, coords=tokens))
    # per-example statistics have no draw dimension: added after from_dict, which would force (chain, draw)
    num_examples = len(per_example["elbo"])
    stats = xr.Dataset({k: (("example",), v) for k, v in per_example.items()},
                       coords={"example": np.arange(num_examples)})
    azg.update_group(idata, "sample_stats", stats)


def _add_labels(idata: Any, source_labels: Any, target_labels: Any, shape: tuple[int, int, int]) -> None:
    """Source / target tokens (or region names) as ``constant_data.source_label`` / ``target_label``."""
    B, T, S = shape
    for name, labels, dim in (("source_label", source_labels, "source"), ("target_label", target_labels, "target")):
        if labels is not None:
            table = np.full((B, S if dim == "source" else T), "", dtype=object)
            for i, row in enumerate(labels):
                table[i, : len(row)] = list(row)[: table.shape[1]]
            azg.update_group(idata, "constant_data", {name: (("example", dim), table.astype(str))})


def _point_posterior(pair: AlignmentPair, probs: dict, enc: Any) -> dict | None:
    """The posterior group of a pair without draws: one draw, the exact posterior (or a deterministic pair's
    attention weights); the parameters are a point estimate, and these probabilities are a function of them."""
    name, value = ("align_probs", probs["posterior"]) if "posterior" in probs else ("attention_weights", None)
    if value is None and pair.deterministic:
        value = probs["prior"]
    if value is None:
        return None
    return {name: _padded_nan(value[None], enc.source_mask, enc.target_mask, True)[None]}


def _attrs(pair: AlignmentPair, ll: Any, posterior_source: str) -> dict:
    """The attributes of every group: the pair, its estimator, how its log-likelihood was computed, its latent kind,
    where the posterior group comes from and why there is no LOO."""
    return {
        "pair": type(pair).__name__,
        "estimator": str(pair.estimator) if pair.has_estimator_choice() else "",
        "log_likelihood_method": ll.method,
        "log_likelihood_exact": int(ll.exact),
        "latent": pair.latent,
        "posterior_source": _POSTERIOR_SOURCES[posterior_source],
        "loo": NO_LOO,
    }


def to_inference_data(
    pair: AlignmentPair,
    batch: Any,
    num_samples: int = 100,
    source_labels: Sequence[Sequence[str]] | None = None,
    target_labels: Sequence[Sequence[str]] | None = None,
    num_importance_samples: int = 100,
    num_chains: int = 4,
) -> Any:
    """ArviZ data of ``pair``'s alignments on ``batch``: an ``InferenceData`` on ArviZ 0.2x, an ``xarray.DataTree``
    on ArviZ >= 1 (groups as in the module doc).  Save it with :func:`~pyro_attention.inference.save_netcdf`.

    :param num_samples: draws in all (split into ``num_chains`` chains of independent draws) for the ``posterior``
        and ``prior`` groups of a continuous alignment, and the draws from q behind ``log_weight`` and k-hat.
    :param source_labels: optional per-example source tokens / region names, stored as ``source_label`` coords.
    :param target_labels: optional per-example target tokens, stored as ``target_label`` coords.
    :param num_chains: chains the independent draws are split into, so that ArviZ's R-hat is defined (and ~1);
        fewer where ``num_samples`` leaves less than 4 draws per chain.
    """
    for name, value in (("num_samples", num_samples), ("num_importance_samples", num_importance_samples),
                        ("num_chains", num_chains)):
        count(value, f"to_inference_data: {name}")
    if num_chains < 1:
        raise ValueError(f"num_chains must be >= 1, got {num_chains}")
    if num_samples < 2:
        raise ValueError(f"num_samples must be >= 2, got {num_samples}")
    num_chains = min(num_chains, max(1, num_samples // 4))  # ArviZ's diagnostics need 4 draws per chain
    enc = pair.network.encode(batch)
    B, T, S = enc.shape
    probs = alignment_posterior(pair, batch)
    draws = _draws(pair, batch, probs, num_samples)
    draws_name = pair.continuous
    continuous = draws_name is not None
    post = draws.get("q") if continuous else None
    posterior_source = _posterior_source(probs, continuous and post is not None, continuous)
    ll = log_likelihood(pair, batch, num_samples=num_importance_samples)
    mask = _np(enc.target_mask)
    ex_idx, pos_idx = np.nonzero(mask)
    elbo, kl = _elbo_and_kl(pair, batch, probs, ll, draws)
    khat = _khat(draws)
    per_example = {"elbo": _np(elbo), "kl": _np(kl)}
    if khat is not None:
        per_example["khat"] = khat

    def group(z: torch.Tensor | None) -> dict | None:
        if z is None or not continuous:
            return None
        over_sources = draws_name == "weights"
        return {draws_name: _chains(_padded_nan(z, enc.source_mask, enc.target_mask, over_sources), num_chains)}

    posterior = group(post)
    if posterior is None and not continuous:
        posterior = _point_posterior(pair, probs, enc)

    coords = {"example": np.arange(B), "target": np.arange(T), "source": np.arange(S)}
    real = enc.target_mask.unsqueeze(-1).to(probs["prior"].dtype)  # padded targets: rows of zeros, as padded sources
    constant = {"prior_probs": _np(probs["prior"] * real), "source_mask": _np(enc.source_mask)}
    constant.update({name: _np(probs[k] * real) for k, name in (("guide", "q_probs"), ("posterior", "posterior_probs"))
                     if k in probs})
    log_weight = None
    if "log_weight" in draws:
        log_weight = {"log_weight": _chains(_np(draws["log_weight"]).astype(np.float64), num_chains)}
    idata = azg.from_dict(
        {
            "posterior": posterior,
            "prior": group(draws.get("prior")),
            "observed_data": {"y": _np(enc.target), "target_mask": mask},
            "constant_data": constant,
            "sample_stats": log_weight,
        },
        coords=coords,
        dims=_DIMS,
    )
    _add_per_token_and_example(idata, ll, ex_idx, pos_idx, per_example)
    azg.update_attrs(idata, _attrs(pair, ll, posterior_source))
    _add_labels(idata, source_labels, target_labels, (B, T, S))
    return idata


def _elbo_and_kl(pair: AlignmentPair, batch: Any, probs: dict, ll: Any, draws: dict) -> tuple:
    """Per-example ELBO and KL(q || p(z | x, y)): exact for categorical pairs, a Monte Carlo estimate otherwise."""
    log_p = ll.per_example
    kl_tok = pair.guide_kl(probs)  # exact where q and the posterior are over one discrete alignment
    if kl_tok is not None:
        kl = (kl_tok * pair.network.encode(batch).target_mask).sum(-1)
        return log_p - kl, kl
    if "log_weight" not in draws:  # no guide (exact or deterministic pairs): the ELBO is the exact log-likelihood
        return log_p, torch.zeros_like(log_p)
    elbo = draws["log_weight"].mean(0)
    return elbo, log_p - elbo


def diagnostics(pair: AlignmentPair, batch: Any, num_samples: int = 100) -> dict[str, float]:
    """One row of the diagnostics table: PSIS k-hat of q, ELBO gap, entropies and argmax agreement."""
    enc = pair.network.encode(batch)
    mask = enc.target_mask
    probs = alignment_posterior(pair, batch)
    draws = _draws(pair, batch, probs, num_samples)
    khat = _khat(draws)
    ll = log_likelihood(pair, batch, num_samples=num_samples)
    elbo, kl = _elbo_and_kl(pair, batch, probs, ll, draws)
    tokens = float(mask.sum())
    row = {"log_p_per_token": float(ll.per_example.sum()) / tokens, "elbo_gap_per_token": float(kl.sum()) / tokens}
    if khat is not None:
        defined = khat[~np.isnan(khat)]  # inf: a few weights dominate (unreliable), nan: undefined
        row["khat_defined"] = float(len(defined)) / len(khat)
        if len(defined):
            row.update({"khat_mean": float(defined.mean()), "khat_gt_0.7": float(np.mean(defined > 0.7))})
    for key, value in probs.items():
        row[f"H({key})"] = float((entropy(value) * mask).sum()) / tokens
    argmax = {k: v.argmax(-1) for k, v in probs.items()}
    reference = "posterior" if "posterior" in argmax else "guide" if "guide" in argmax else None
    if reference:
        for key in argmax:
            if key != reference:
                row[f"agree({key},{reference})"] = float(((argmax[key] == argmax[reference]) & mask).sum()) / tokens
    return row


COLUMNS = [
    "log_p_per_token",
    "elbo_gap_per_token",
    "khat_defined",
    "khat_mean",
    "khat_gt_0.7",
    "H(prior)",
    "H(posterior)",
    "H(guide)",
    "agree(prior,posterior)",
    "agree(guide,posterior)",
    "agree(prior,guide)",
]


def format_diagnostics(rows: dict[str, dict[str, float]]) -> str:
    """A Markdown table, one row per pair, the union of columns."""
    present = {c for row in rows.values() for c in row}
    columns = [c for c in COLUMNS if c in present] + sorted(present - set(COLUMNS))
    lines = ["| pair | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, row in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{row[c]:.3f}" if c in row else "-" for c in columns) + " |")
    return "\n".join(lines)
