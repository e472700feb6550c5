"""Exact and estimated log-likelihoods, and predictions under the combination rules.

The public functions are thin wrappers over the pair's methods (:mod:`pyro_attention.pair`, "What a pair
answers"); :func:`traced_log_likelihood` is the base class's likelihood.

* :func:`log_likelihood` -- ``log p(y | x)`` per token and per example.  For pairs whose latent sites are all
  enumerable the value is exact: the model is traced under :func:`pyro.poutine.enum` and every factor is summed
  over the enumerated alignments (brute force over the enumerated dims, which is exact and cheap because the
  alignments of different target positions are independent given ``x``).  The structured pairs compute their own
  exactly.  Otherwise (the continuous pairs) it is an importance-weighted estimate
  ``log (1/K) sum_k p(y, z_k | x) / r(z_k)`` per token with draws ``z_k ~ r`` -- a stochastic lower bound in
  expectation, labelled as such, with its Monte Carlo standard error, effective sample size and PSIS k-hat per
  token (:class:`LogLikelihood`).  The proposal ``r`` is the pair's ``likelihood_proposal``: the defensive mixture
  ``(q + p) / 2`` of guide and prior for pairs with a guide (its weights are at most ``2 p(y | x, z)``: bounded,
  where ``q`` alone gives heavy-tailed ``p / q`` [1]), plain Monte Carlo over the prior otherwise.
* :func:`predict` -- ``p(y_t | x)`` as ``(B, T, V)`` probabilities under ``rule="marginal"``
  (:math:`\\mathbb{E}_{p(z \\mid x)}[p(y \\mid x, z)]`, exact for categorical pairs, sampled for the Dirichlet pair)
  or ``rule="soft"`` (:math:`p(y \\mid x, \\mathbb{E}_p[z])`).
* :func:`shared_enumeration` -- a scope in which the enumerated trace of a batch is made once and read by
  every function that needs it (the log-likelihood, the exact posterior and so the alignment entropies): a
  validation or test pass asks for all three of each batch, and the enumerated output layer is its main cost.

References:
[1] Hesterberg, "Weighted Average Importance Sampling and Defensive Mixture Distributions", Technometrics 1995.
[2] Vehtari, Simpson, Gelman, Yao, Gabry, "Pareto Smoothed Importance Sampling", JMLR 2024 (k-hat).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample
from torch import Tensor

from pyro_attention.checks import count
from pyro_attention.pair import MAX_PLATE_NESTING, AlignmentPair, Rule, observed_log_likelihood

__all__ = [
    "Rule",
    "EstimateError",
    "LogLikelihood",
    "enumerated_log_joint",
    "estimate_text",
    "guide_draw",
    "kmax_log_likelihood",
    "log_likelihood",
    "predict",
    "shared_enumeration",
    "traced_log_likelihood",
]
#: proposals of the importance-weighted estimate: q, the prior, or their defensive mixture (q + p) / 2
PROPOSALS = ("guide", "prior", "mixture")
#: above this PSIS k-hat an importance-weighted estimate is unreliable (its weights' tail is too heavy) [2]
KHAT_THRESHOLD = 0.7


@dataclass
class LogLikelihood:
    """Per-token and per-example ``log p(y | x)``, and for an estimate its Monte Carlo error.

    :param per_token: ``(B, T)``, zero at padded targets.
    :param per_example: ``(B,)``, the sum over targets.
    :param num_tokens: ``(B,)`` real target positions.
    :param exact: ``True`` when the value is exact, ``False`` for an estimate.
    :param method: how it was computed, e.g. ``"enumeration"`` or ``"importance sampling, K=100, proposal q"``.
    :param se: an estimate's Monte Carlo standard error per token ``(B, T)`` (delta method:
        ``sqrt(1 / ESS - 1 / K)`` for ``log`` of a mean of ``K`` weights); ``None`` when exact.  Tokens are drawn
        independently, so errors add in quadrature (:meth:`se_per_example`, :attr:`mc_variance`).
    :param ess: the importance weights' effective sample size per token ``(B, T)``; ``None`` when exact.
    :param khat: PSIS k-hat of the weights per token ``(B, T)`` (``nan`` where undefined: fewer than 25 draws, a
        tied tail, padding); ``None`` when exact.  Above :data:`KHAT_THRESHOLD` the estimate is unreliable.
    :param draws: an estimate's draws per token ``K`` (0 when exact).
    """

    per_token: Tensor
    per_example: Tensor
    num_tokens: Tensor
    exact: bool
    method: str
    se: Tensor | None = None
    ess: Tensor | None = None
    khat: Tensor | None = None
    draws: int = 0

    def se_per_example(self) -> Tensor:
        """Monte Carlo standard error of :attr:`per_example` ``(B,)`` (zeros when exact)."""
        if self.se is None:
            return torch.zeros_like(self.per_example)
        return self.se.pow(2).sum(-1).sqrt()

    @property
    def mc_variance(self) -> float:
        """Monte Carlo variance of the summed log-likelihood over all tokens (0 when exact)."""
        return 0.0 if self.se is None else float(self.se.pow(2).sum())

    def khat_values(self) -> Tensor:
        """The defined k-hat values of the real tokens, flat (empty when exact or undefined everywhere); ``inf``
        where a few weights dominate so that no tail can be fitted."""
        if self.khat is None:
            return torch.zeros(0)
        return self.khat[~torch.isnan(self.khat)]

    @property
    def error(self) -> EstimateError:
        """How good the summed value is (:class:`EstimateError`); errors of several batches add with ``+``."""
        if self.se is None:
            return EstimateError(exact=self.exact)
        khat = self.khat_values()
        return EstimateError(
            exact=False,
            estimated=True,
            variance=self.mc_variance,
            draws=self.draws,
            ess_min=float(self.ess.min()) if self.ess is not None else math.inf,  # padding's ESS is K: never the min
            khat_max=float(khat.max()) if khat.numel() else -math.inf,
            khat_defined=khat.numel(),
            khat_over=int((khat > KHAT_THRESHOLD).sum()),
        )

    @property
    def reliable(self) -> bool:
        """Whether the value can be trusted (:attr:`EstimateError.reliable`)."""
        return self.error.reliable

    def error_text(self) -> str:
        """How good the number is, in words (:meth:`EstimateError.text`)."""
        return self.error.text()


@dataclass(frozen=True)
class EstimateError:
    """How good a log-likelihood summed over tokens is: exact, a deterministic bound, or a Monte Carlo estimate
    with its variance and the diagnostics of its importance weights.  The errors of disjoint sets of tokens (other
    batches) add with ``+``: variances add (tokens are drawn independently), the worst diagnostics are kept.

    :param exact: every part exact (``False`` for an estimate or a deterministic bound such as K-max).
    :param estimated: some part is a Monte Carlo estimate (the rest of the fields describe those parts).
    :param variance: Monte Carlo variance of the sum (nats squared).
    :param draws: the fewest draws per token of an estimated part (0: none estimated).
    :param ess_min: the smallest effective sample size of a token's weights.
    :param khat_max: the largest defined PSIS k-hat (``-inf``: none defined; ``inf``: a few weights dominate).
    :param khat_defined: tokens whose k-hat is defined; ``khat_over`` of them above :data:`KHAT_THRESHOLD`.
    """

    exact: bool = True
    estimated: bool = False
    variance: float = 0.0
    draws: int = 0
    ess_min: float = math.inf
    khat_max: float = -math.inf
    khat_defined: int = 0
    khat_over: int = 0

    def __add__(self, other: EstimateError) -> EstimateError:
        if not isinstance(other, EstimateError):
            return NotImplemented
        draws = [e.draws for e in (self, other) if e.estimated]
        return EstimateError(
            exact=self.exact and other.exact,
            estimated=self.estimated or other.estimated,
            variance=self.variance + other.variance,
            draws=min(draws) if draws else 0,
            ess_min=min(self.ess_min, other.ess_min),
            khat_max=max(self.khat_max, other.khat_max),
            khat_defined=self.khat_defined + other.khat_defined,
            khat_over=self.khat_over + other.khat_over,
        )

    @property
    def se(self) -> float:
        """Monte Carlo standard error of the sum (0 when not estimated)."""
        return self.variance**0.5

    @property
    def khat_over_fraction(self) -> float | None:
        """The fraction of tokens with a defined k-hat above :data:`KHAT_THRESHOLD` (``None``: none defined)."""
        return self.khat_over / self.khat_defined if self.khat_defined else None

    @property
    def reliable(self) -> bool:
        """Whether the value can be trusted: exact (or a deterministic bound, with no Monte Carlo error), or an
        estimate from at least :data:`~pyro_attention.inference.arviz_generation.MIN_PSIS_DRAWS` draws per token
        (enough to fit k-hat) with no real token's k-hat above :data:`KHAT_THRESHOLD`.  A token whose tail weights
        are all equal (k-hat undefined: the weights do not vary) does not count against it; too few draws to tell
        does, as in ``az.compare``'s warning."""
        from pyro_attention.inference.arviz_generation import MIN_PSIS_DRAWS

        return not self.estimated or (self.draws >= MIN_PSIS_DRAWS and self.khat_over == 0)

    def diagnostics_text(self) -> str:
        """The importance weights' diagnostics in words (smallest ESS, largest k-hat, and ``UNRELIABLE`` with the
        reason where the value is not :attr:`reliable`); ``""`` when nothing was estimated."""
        from pyro_attention.inference.arviz_generation import MIN_PSIS_DRAWS

        if not self.estimated:
            return ""
        parts = [] if math.isinf(self.ess_min) else [f"ESS >= {self.ess_min:.0f}"]
        parts.append(f"max k-hat {self.khat_max:.2f}" if self.khat_defined else "k-hat undefined")
        if self.khat_over:
            parts.append(f"UNRELIABLE (k-hat > {KHAT_THRESHOLD} on {self.khat_over_fraction:.1%} of tokens)")
        elif self.draws < MIN_PSIS_DRAWS:
            parts.append(f"UNRELIABLE (K={self.draws} draws: k-hat needs at least {MIN_PSIS_DRAWS})")
        return "; ".join(parts)

    def text(self) -> str:
        """How good the number is, in words: ``"exact"``, ``"a deterministic bound"``, or for an estimate the Monte
        Carlo standard error of the sum and :meth:`diagnostics_text`."""
        if not self.estimated:
            return "exact" if self.exact else "a deterministic bound (no Monte Carlo error)"
        return f"MC s.e. of the sum {self.se:.3g}; " + self.diagnostics_text()


def estimate_text(value: str, se: str | None = None, reliable: bool = True) -> str:
    """How every table prints an estimated number (already formatted): ``~value``, then ``± se`` (its Monte Carlo
    standard error) where known, then `` !`` where it is not :attr:`~LogLikelihood.reliable`."""
    return f"~{value}" + ("" if se is None else f" ± {se}") + ("" if reliable else " !")


def importance_estimate(log_w: Tensor, mask: Tensor, method: str) -> LogLikelihood:
    """The importance-weighted ``log p(y_t | x)`` of ``K`` log weights per token ``(K, B, T)``, with its Monte Carlo
    standard error, ESS and PSIS k-hat per token (padded targets: value 0, error 0, k-hat ``nan``)."""
    from pyro_attention.inference.arviz_generation import psis_khat

    K = log_w.shape[0]
    total = log_w.logsumexp(0)
    per_token = (total - math.log(K)) * mask
    normalised = (log_w - total).exp()
    ess = 1.0 / normalised.pow(2).sum(0)
    se = (1.0 / ess - 1.0 / K).clamp(min=0).sqrt() * mask
    rows = log_w.detach().reshape(K, -1).T.double().cpu().numpy()
    khat = torch.as_tensor(psis_khat(rows), dtype=log_w.dtype).reshape(mask.shape).to(log_w.device)
    khat = torch.where(mask, khat, torch.full_like(khat, math.nan))
    return LogLikelihood(per_token, per_token.sum(-1), mask.sum(-1), False, method, se, torch.where(mask, ess, K), khat,
                         draws=K)


def _trace(fn: Any, *args: Any, **kwargs: Any) -> poutine.Trace:
    trace = poutine.trace(fn).get_trace(*args, **kwargs)
    trace.compute_log_prob(site_filter=lambda name, site: not site_is_subsample(site))
    return trace


def _latent_sites(trace: poutine.Trace) -> list[str]:
    return [name for name in trace.stochastic_nodes if not site_is_subsample(trace.nodes[name])]


class _Scope:
    """The last enumerated trace made inside one :func:`shared_enumeration` block, with its pair and batch."""

    def __init__(self) -> None:
        self.key: tuple[AlignmentPair, Any] | None = None
        self.value: tuple[poutine.Trace, bool] | None = None


_SCOPES: list[_Scope] = []


@contextlib.contextmanager
def shared_enumeration() -> Iterator[None]:
    """Inside the block, the enumerated trace of ``(pair, batch)`` is made once and reused: by
    :func:`log_likelihood` (the base class's), ``pair.posterior_probs`` and so :func:`~pyro_attention.inference.
    entropy_sums` and :func:`~pyro_attention.inference.alignment_posterior`.  Only while gradients are off (a trace
    that is part of a graph is never shared), and only for the same pair and batch objects, the last one seen: use
    it around a pass that scores each batch several ways with the weights fixed and the network in eval mode
    (validation, test scoring).  The numbers are the same as without it; the categorical pairs' validation runs
    their enumerated output layer once per batch instead of twice."""
    _SCOPES.append(_Scope())
    try:
        yield
    finally:
        _SCOPES.pop()


def _enumerated_trace(pair: AlignmentPair, batch: Any) -> tuple[poutine.Trace, bool]:
    """The model traced with every enumerable latent site enumerated in parallel, and whether all were (reused
    inside :func:`shared_enumeration`)."""
    scope = _SCOPES[-1] if _SCOPES and not torch.is_grad_enabled() else None
    if scope is not None and scope.key is not None and scope.key[0] is pair and scope.key[1] is batch:
        return scope.value
    trace = _trace(poutine.enum(pair.model, first_available_dim=-1 - MAX_PLATE_NESTING), batch)
    enumerated = all(trace.nodes[name]["infer"].get("_enumerate_dim") is not None for name in _latent_sites(trace))
    if scope is not None:
        scope.key, scope.value = (pair, batch), (trace, enumerated)
    return trace, enumerated


def _log_joint(trace: poutine.Trace) -> Tensor:
    total = 0.0
    for site in trace.nodes.values():
        if site["type"] == "sample" and not site_is_subsample(site):
            total = total + site["log_prob"]
    return torch.as_tensor(total)


def enumerated_log_joint(pair: AlignmentPair, batch: Any) -> tuple[Tensor, poutine.Trace]:
    """``log p(y, z | x)`` with every latent site enumerated in parallel.

    :returns: the joint, shaped ``(E_k, ..., E_1, B, T)`` (enumeration dims first), and the trace.
    :raises ValueError: if some latent site of the model cannot be enumerated.
    """
    trace, enumerated = _enumerated_trace(pair, batch)
    if not enumerated:
        raise ValueError(f"{type(pair).__name__}: some latent site of the model is not enumerable")
    return _log_joint(trace), trace


@torch.no_grad()
def log_likelihood(
    pair: AlignmentPair, batch: Any, num_samples: int = 100, proposal: str | None = None
) -> LogLikelihood:
    """``log p(y | x)`` per token and per example: ``pair.log_likelihood(batch, num_samples, proposal)``, exact
    where the pair can sum the alignment out (``exact`` and ``method`` of the result say which).

    :param num_samples: importance samples ``K`` for pairs with a continuous alignment.
    :param proposal: for those pairs, ``"guide"`` (``q``) or ``"prior"`` (``z ~ pair.prior(enc)``, the average of
        ``p(y | x, z)``); ``None``: the pair's :attr:`~pyro_attention.pair.AlignmentPair.likelihood_proposal`,
        fixed per pair in advance (the prior for BAM and the Gaussian context, whose ``q`` sits far from the prior
        when the KL is down-weighted -- docs/neighbours.md).
    """
    count(num_samples, "log_likelihood: num_samples", 1)
    return pair.log_likelihood(batch, num_samples=num_samples, proposal=proposal)


def traced_log_likelihood(
    pair: AlignmentPair, batch: Any, num_samples: int = 100, proposal: str | None = None
) -> LogLikelihood:
    """The base class's :meth:`~pyro_attention.pair.AlignmentPair.log_likelihood`: the model traced with every
    enumerable latent site enumerated -- exact when all are -- else an importance-weighted estimate (see
    :func:`log_likelihood`).  A model with more than one enumerated site (whose dims ``pyro.markov`` may reuse)
    is refused rather than summed wrongly: such a pair defines its own ``log_likelihood`` (a dynamic programme).
    """
    trace, enumerated = _enumerated_trace(pair, batch)
    enumerated_sites = [n for n in _latent_sites(trace) if trace.nodes[n]["infer"].get("_enumerate_dim") is not None]
    if len(enumerated_sites) > 1:
        raise ValueError(
            f"{type(pair).__name__}: {len(enumerated_sites)} enumerated sites ({enumerated_sites[:3]}...); "
            "log_likelihood sums one enumerated alignment per token -- define pair.log_likelihood(batch)"
        )
    mask = trace.nodes["y"]["mask"]
    if enumerated:
        joint = _log_joint(trace)
        per_token = joint.reshape((-1,) + joint.shape[-2:]).logsumexp(0)
        method = "enumeration" if _latent_sites(trace) else "deterministic (no latent alignment)"
    else:
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        proposal = proposal or pair.likelihood_proposal
        if proposal not in PROPOSALS:
            raise ValueError(f"proposal must be one of {PROPOSALS}, got {proposal!r}")
        if proposal == "prior":
            enc = pair.network.encode(batch)  # once: the K draws share the encoding
            log_w = torch.stack([_prior_log_likelihood(pair, enc) for _ in range(num_samples)])
        else:
            draw = _log_weight if proposal == "guide" else _mixture_log_weight
            log_w = torch.stack([draw(pair, batch) for _ in range(num_samples)])
        what = {"guide": "q", "prior": "the prior (plain Monte Carlo over p(z | x))",
                "mixture": "(q + prior) / 2 (defensive mixture)"}[proposal]
        method = f"importance sampling, K={num_samples}, proposal {what} (an estimate; a lower bound in expectation)"
        return importance_estimate(log_w, mask.bool(), method)
    per_token = per_token * mask
    return LogLikelihood(per_token, per_token.sum(-1), mask.sum(-1), enumerated, method)


def _prior_log_likelihood(pair: AlignmentPair, enc: Any) -> Tensor:
    """``log p(y_t | x, z)`` per token for one draw ``z ~ pair.prior(enc)``, ``(B, T)`` (padded targets: 0)."""
    z = pair.prior(enc).sample()
    return observed_log_likelihood(pair.network.output_logits(enc, pair.sample_context(enc, z)), enc)


def _log_weight(pair: AlignmentPair, batch: Any) -> Tensor:
    """``log p(y, z | x) - log q(z | x, y)`` per token for one draw ``z ~ q``, ``(B, T)``."""
    return guide_draw(pair, batch)[1]


def _mixture_log_weight(pair: AlignmentPair, batch: Any) -> Tensor:
    """``log p(y, z | x) - log r(z)`` per token for one draw ``z ~ r = (q + p) / 2``, ``(B, T)``: each token's
    alignment comes from the guide or the prior with probability 1/2 (the site ``"align"`` is per token)."""
    guide_trace = _trace(pair.guide, batch)
    prior_fn = _trace(poutine.replay(pair.model, trace=guide_trace), batch).nodes["align"]["fn"]
    guide_fn = guide_trace.nodes["align"]["fn"]
    from_q = guide_trace.nodes["align"]["value"]
    from_p = prior_fn.sample()
    event = (1,) * len(prior_fn.event_shape)
    use_q = torch.rand(prior_fn.batch_shape, device=from_q.device) < 0.5
    z = torch.where(use_q.reshape(use_q.shape + event), from_q, from_p)
    model_trace = _trace(poutine.condition(pair.model, data={"align": z}), batch)
    log_r = torch.logaddexp(guide_fn.log_prob(z), prior_fn.log_prob(z)) - math.log(2.0)
    return _log_joint(model_trace) - log_r


def guide_draw(pair: AlignmentPair, batch: Any) -> tuple[Tensor, Tensor]:
    """One draw ``z ~ q(z | x, y)`` of site ``"align"`` and its log importance weight per token,
    ``log p(y, z | x) - log q(z | x, y)`` ``(B, T)`` (padded targets: 0)."""
    guide_trace = _trace(pair.guide, batch)
    model_trace = _trace(poutine.replay(pair.model, trace=guide_trace), batch)
    log_w = _log_joint(model_trace)
    for name in _latent_sites(guide_trace):
        log_w = log_w - guide_trace.nodes[name]["log_prob"]
    return guide_trace.nodes["align"]["value"], log_w


@torch.no_grad()
def kmax_log_likelihood(pair: AlignmentPair, batch: Any, k: int) -> LogLikelihood:
    """``log sum_{s in top-K} p(z_t = s | x) p(y_t | x, z_t = s)`` per token: the marginal over the ``K`` most
    probable alignments under the prior (Deng et al. 2018, K-max).  A lower bound on the exact value, equal to
    it when ``K`` covers every real source position.  ``pair.kmax_log_likelihood(batch, k)``: pairs without a
    categorical alignment refuse (``ValueError``).
    """
    count(k, "kmax_log_likelihood: k", 1)
    return pair.kmax_log_likelihood(batch, k)


@torch.no_grad()
def predict(
    pair: AlignmentPair, batch: Any, rule: Rule | str | None = Rule.MARGINAL, num_samples: int = 100, k: int = 5
) -> Tensor:
    """Predictive probabilities ``(B, T, V)`` of the next output under a combination rule:
    ``pair.predict(batch, rule, num_samples, k)``.

    :param rule: a :class:`~pyro_attention.pair.Rule` or its name: ``"marginal"`` -- :math:`\\sum_s p(z_t = s \\mid
        x) p(y_t \\mid x, z_t = s)` (exact for categorical and structured pairs; a ``num_samples`` Monte Carlo average
        over the prior for continuous alignments); ``"soft"`` -- :math:`p(y_t \\mid x, c_t)`, the network run once on
        the pair's soft context (the expected context; the structured pairs' own context); ``"kmax"`` -- the marginal
        over the ``k`` most probable prior alignments, renormalised over them (categorical pairs). ``None`` -- the
        pair's default, the first of its :attr:`~pyro_attention.pair.AlignmentPair.rules`. A rule the pair does not
        allow is refused with a ``ValueError`` (:class:`~pyro_attention.pair.RuleError`).
    """
    count(num_samples, "predict: num_samples", 1)
    count(k, "predict: k")
    return pair.predict(batch, rule, num_samples=num_samples, k=k)
