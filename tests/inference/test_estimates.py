"""Estimated log-likelihoods against known answers, and their reported Monte Carlo error.

The continuous pairs' ``log p(y | x)`` is an importance-weighted estimate (inference/evaluate.py).  Here it meets
numbers known independently of it:

* an output network that ignores the alignment: every pair's ``log p(y | x)`` is soft attention's exact value;
* one token over S = 2 or 3 source positions: the integral over the simplex by numerical quadrature (scipy), the
  Dirichlet pairs (relaxed, BAM) and the Concrete pair (Gumbel) through the law of their weights;
* the Gaussian context with an output that sees the context along one direction: Gauss-Hermite quadrature.

and the reported standard error is checked against the spread of repeated estimates.
"""

from __future__ import annotations

import math

import numpy as np
import pyro
import pytest
import torch
from scipy import integrate, special

from pyro_attention.inference import log_likelihood
from pyro_attention.models import (
    BayesianAttention,
    GaussianContextAttention,
    GumbelAttention,
    RelaxedAttention,
    SoftAttention,
)
from pyro_attention.pair import observed_log_likelihood
from tests.support.toy_network import ToyNetwork, make_toy_batch

ESTIMATED = {"relaxed": RelaxedAttention, "gumbel": GumbelAttention, "bayesian": BayesianAttention,
             "gaussian": GaussianContextAttention}


def _network(scale: float = 1.0, seed: int = 0) -> ToyNetwork:
    torch.manual_seed(seed)
    net = ToyNetwork()
    with torch.no_grad():
        net.out_hidden.weight.mul_(scale)  # how strongly the output depends on the alignment
        net.out.weight.mul_(3.0)
    return net


@pytest.mark.parametrize("name", list(ESTIMATED))
def test_an_output_that_ignores_the_alignment_gives_soft_attentions_exact_value(float64, name):
    """With ``out_hidden`` zeroed, ``p(y | x, z)`` is the same for every ``z``: the exact ``log p(y | x)`` is soft
    attention's.  The estimate (the pair's own proposal, K = 400) is within 4 of its reported standard errors of
    it on every token (the mixture's weights ``2p / (q + p)`` vary; the prior proposal's are constant: error 0)."""
    net = _network(scale=0.0)
    batch = make_toy_batch(B=3, S=4, T=3)
    exact = log_likelihood(SoftAttention(net), batch).per_token
    pyro.set_rng_seed(0)
    ll = log_likelihood(ESTIMATED[name](net), batch, num_samples=400)
    assert not ll.exact and ll.se is not None and ll.reliable
    real = batch.target_mask
    error = (ll.per_token - exact).abs()[real]
    # measured: the largest of the 7 tokens' errors is 1.4 s.e. (relaxed), 2.5 s.e. (Gumbel), 4e-16 (prior proposal)
    assert (error <= 4 * ll.se[real] + 1e-9).all(), (error, ll.se[real])
    assert (ll.se[~real] == 0).all() and (ll.per_token[~real] == 0).all()


def test_q_alone_as_proposal_is_caught_by_k_hat(float64):
    """The case the issue reproduced: q as the only proposal is 1.2 nats off (heavy-tailed ``p / q``); its k-hat
    says so (above 0.7), while the defensive mixture is within its error and reliable."""
    net = _network(scale=0.0)
    batch = make_toy_batch(B=3, S=4, T=3)
    exact = log_likelihood(SoftAttention(net), batch).per_token
    pyro.set_rng_seed(0)
    alone = log_likelihood(RelaxedAttention(net), batch, num_samples=200, proposal="guide")
    assert (alone.per_token - exact).abs().max() > 0.5  # measured: 1.19
    assert not alone.reliable and "UNRELIABLE" in alone.error_text()
    pyro.set_rng_seed(0)
    mixture = log_likelihood(RelaxedAttention(net), batch, num_samples=200, proposal="mixture")
    assert mixture.reliable and (mixture.per_token - exact).abs().max() < 0.2  # measured: 0.10 (s.e. 0.06)


def _one_token(S: int, scale: float, seed: int = 0):
    """One example, one target token, ``S`` real sources; an output that depends strongly on the alignment."""
    net = _network(scale=scale, seed=seed)
    with torch.no_grad():
        net.out.weight.mul_(2.0)  # corners far apart: p(y | x, z) from about 0.05 to 0.75 over the simplex
    batch = make_toy_batch(B=1, S=S, T=1, seed=seed)
    return net, batch


def _estimate(pair, batch) -> tuple[float, float]:
    """The single token's estimated ``log p(y | x)`` (K = 4000, seed 0) and its reported standard error."""
    pyro.set_rng_seed(0)
    ll = log_likelihood(pair, batch, num_samples=4000)
    return float(ll.per_token[0, 0]), float(ll.se[0, 0])


def _likelihood_at(pair, enc, z: np.ndarray) -> float:
    """``p(y | x, z)`` of the single token at weights ``z`` (S,)."""
    weights = torch.as_tensor(z, dtype=torch.float64).reshape(1, 1, -1)
    logits = pair.network.output_logits(enc, pair.sample_context(enc, weights))
    return float(observed_log_likelihood(logits, enc).exp())


def _dirichlet_quadrature(pair, enc, alpha: np.ndarray) -> float:
    """``log of the integral of Dirichlet(z; alpha) p(y | x, z)`` over the simplex, S = 2 or 3 (scipy's QUADPACK with
    the algebraic end-point weights of the Dirichlet's singularities at concentrations below 1)."""
    norm = special.gammaln(alpha.sum()) - special.gammaln(alpha).sum()
    if len(alpha) == 2:
        value, _ = integrate.quad(lambda t: _likelihood_at(pair, enc, np.array([t, 1 - t])), 0, 1, weight="alg",
                                  wvar=(alpha[0] - 1, alpha[1] - 1), epsabs=1e-13, epsrel=1e-11)
        return math.log(value) + norm

    def inner(t1: float) -> float:  # over t2 in [0, 1 - t1], the weight t2^(a2-1) (1 - t1 - t2)^(a3-1)
        f = lambda t2: _likelihood_at(pair, enc, np.array([t1, t2, 1 - t1 - t2]))  # noqa: E731
        return integrate.quad(f, 0, 1 - t1, weight="alg", wvar=(alpha[1] - 1, alpha[2] - 1),
                              epsabs=1e-13, epsrel=1e-10)[0]

    value, _ = integrate.quad(inner, 0, 1, weight="alg", wvar=(alpha[0] - 1, 0), epsabs=1e-12, epsrel=1e-9,
                              limit=200)
    return math.log(value) + norm


@pytest.mark.parametrize("S", [2, 3])
@pytest.mark.parametrize("name", ["relaxed", "bayesian"])
def test_dirichlet_pairs_match_quadrature(float64, name, S):
    """The relaxed pair (proposal: the defensive mixture of q and the prior) and BAM (the prior) on one token over
    S sources, whose normalised weights are Dirichlet under the prior: the estimate (K = 4000) is within 3
    standard errors of the quadrature, the standard error is small, and soft attention is many errors away (so
    the test can tell an estimate of the integral from one of something else)."""
    net, batch = _one_token(S, scale=4.0)
    pair = ESTIMATED[name](net)
    with torch.no_grad():
        enc = net.encode(batch)
        alpha = pair.prior(enc).concentration[0, 0].numpy()
        exact = _dirichlet_quadrature(pair, enc, alpha)
    estimate, se = _estimate(pair, batch)
    assert abs(estimate - exact) <= 3 * se, (estimate, exact, se)  # measured: 0.6-1.7 s.e.
    assert se < 0.02  # measured: 0.003-0.011
    soft = float(log_likelihood(SoftAttention(net), batch).per_token[0, 0])
    assert abs(soft - exact) > 5 * se  # measured: 10-29 s.e. apart


def test_gumbel_matches_quadrature(float64):
    """The Concrete over S = 2 at temperature tau: ``z_1 = sigmoid((l_1 - l_2 + L) / tau)`` with ``L`` standard
    logistic, so ``p(y | x)`` is a 1-D integral over ``L``; the estimate (K = 4000) is within 3 standard errors."""
    net, batch = _one_token(2, scale=4.0)
    pair = GumbelAttention(net, temperature=0.5)
    with torch.no_grad():
        enc = net.encode(batch)
        prior = pair.prior(enc)
        delta = float(prior.logits[0, 0, 0] - prior.logits[0, 0, 1])
        tau = prior.temperature

        def integrand(l: float) -> float:
            z1 = special.expit((delta + l) / tau)
            return _likelihood_at(pair, enc, np.array([z1, 1 - z1])) * special.expit(l) * special.expit(-l)

        exact = math.log(integrate.quad(integrand, -60, 60, epsabs=1e-13, epsrel=1e-11, limit=200)[0])
    estimate, se = _estimate(pair, batch)
    assert abs(estimate - exact) <= 3 * se, (estimate, exact, se)  # measured: 0.94 s.e.
    assert se < 0.02  # measured: 0.005


def test_gaussian_context_matches_gauss_hermite(float64):
    """Gaussian context ``c ~ N(m, I)`` seen by the output through one direction ``v`` (``out_hidden`` of rank one,
    ``u v^T``): ``p(y | x)`` is a 1-D Gaussian expectation over ``s = v . c ~ N(v . m, |v|^2)``, computed by
    Gauss-Hermite quadrature (80 nodes).  The estimate (plain Monte Carlo over the prior, K = 4000) is within 3
    standard errors of it."""
    net, batch = _one_token(3, scale=1.0)
    torch.manual_seed(1)
    u, v = torch.randn(net.value_size), torch.randn(net.value_size)
    with torch.no_grad():
        net.out_hidden.weight.copy_(2.0 * torch.outer(u, v))
    pair = GaussianContextAttention(net)
    with torch.no_grad():
        enc = net.encode(batch)
        pair.soft_context(enc)  # builds any lazily sized head before the prior is read
        loc = pair.prior(enc).mean[0, 0]
        nodes, weights = np.polynomial.hermite_e.hermegauss(80)
        mean, sd = float(v @ loc), float(v.norm())
        values = [_likelihood_at(pair, enc, ((mean + sd * x) * v / v.dot(v)).numpy()) for x in nodes]
        exact = math.log(float(np.dot(weights, values)) / math.sqrt(2 * math.pi))
    estimate, se = _estimate(pair, batch)
    assert abs(estimate - exact) <= 3 * se, (estimate, exact, se)  # measured: 0.46 s.e.
    assert se < 0.05  # measured: 0.024


def test_the_reported_standard_error_matches_the_spread_of_repeated_estimates(float64):
    """Forty independent estimates (K = 100) of one token's ``log p``: their standard deviation and the mean
    reported standard error agree within a factor of 1.5 (measured: ratio 1.00)."""
    net, batch = _one_token(3, scale=4.0)
    pair = RelaxedAttention(net)
    estimates, reported = [], []
    for seed in range(40):
        pyro.set_rng_seed(seed)
        ll = log_likelihood(pair, batch, num_samples=100)
        estimates.append(float(ll.per_token[0, 0]))
        reported.append(float(ll.se[0, 0]))
    ratio = np.std(estimates, ddof=1) / np.mean(reported)
    assert 1 / 1.5 < ratio < 1.5, ratio


def test_exact_pairs_report_no_error(float64):
    net = _network()
    batch = make_toy_batch(B=2, S=3, T=2)
    ll = log_likelihood(SoftAttention(net), batch)
    assert ll.exact and ll.se is None and ll.reliable and ll.error_text() == "exact"
    assert ll.mc_variance == 0.0 and torch.equal(ll.se_per_example(), torch.zeros(2, dtype=torch.float64))


def test_one_rule_for_an_estimate_that_can_be_trusted(float64):
    """``LogLikelihood.reliable`` is the one rule: exact or a deterministic bound; or an estimate from at least 25
    draws per token with no k-hat above 0.7.  Constant weights (the prior proposal on an output that ignores the
    alignment: k-hat undefined, a tied tail) are trusted; too few draws to fit k-hat are not, whatever the weights."""
    from pyro_attention.inference.evaluate import kmax_log_likelihood
    from pyro_attention.models import MarginalLikelihood

    batch = make_toy_batch(B=3, S=4, T=3)
    constant = log_likelihood(BayesianAttention(_network(scale=0.0)), batch, num_samples=30)
    assert not constant.exact and constant.khat_values().numel() == 0 and constant.reliable
    assert "k-hat undefined" in constant.error_text() and "UNRELIABLE" not in constant.error_text()
    few = log_likelihood(BayesianAttention(_network(scale=0.0)), batch, num_samples=24)
    assert few.draws == 24 and not few.reliable and "UNRELIABLE (K=24 draws: k-hat needs at least 25)" in (
        few.error_text())
    bound = kmax_log_likelihood(MarginalLikelihood(_network()), batch, 1)
    assert not bound.exact and bound.se is None and bound.reliable
    assert bound.error_text() == "a deterministic bound (no Monte Carlo error)"


@pytest.mark.parametrize("num_samples", [24, 200])
def test_every_table_marks_the_same_estimates(num_samples):
    """The region-QA table's ``!``, ``compare``'s ``warning`` and the translation ``evaluate``'s ``ppl_reliable``
    follow ``LogLikelihood.reliable``: with fewer draws than k-hat needs they all say the estimate is not trusted."""
    from pyro_attention.data import make_region_qa
    from pyro_attention.inference import compare
    from pyro_attention.networks import RegionQA
    from pyro_attention.tasks.region_qa import evaluate_pair, nll_cell

    data = make_region_qa(6, num_regions=(2, 4), num_kinds=4, seed=0)
    torch.manual_seed(0)
    net = RegionQA(data.feature_size, len(data.answers), vocab_size=len(data.vocab), hidden_size=6)
    pair = BayesianAttention(net)
    pyro.set_rng_seed(0)
    ll = log_likelihood(pair, data.data, num_samples=num_samples)
    pyro.set_rng_seed(0)
    row = evaluate_pair(pair, data, num_samples=num_samples)
    pyro.set_rng_seed(0)
    table = compare({"bam": pair, "soft": SoftAttention(net)}, data.data, num_samples=num_samples)
    assert ll.reliable == row.nll_reliable == (not table.loc["bam", "warning"])
    assert nll_cell(row).endswith(" !") != row.nll_reliable
    assert ll.reliable == (num_samples >= 25)  # measured at 200 draws: max k-hat -0.64


def test_an_estimate_whose_weights_one_draw_dominates_is_not_trusted(float64):
    """k-hat ``inf`` (one weight above all others by e^50: no tail to fit) counts as above the threshold."""
    from pyro_attention.inference.evaluate import importance_estimate

    log_w = torch.cat([torch.full((99, 1, 1), -50.0), torch.zeros(1, 1, 1)])
    ll = importance_estimate(log_w, torch.ones(1, 1, dtype=torch.bool), "test")
    assert ll.khat_values().tolist() == [math.inf] and not ll.reliable and "UNRELIABLE (k-hat > 0.7" in ll.error_text()


def test_errors_of_batches_add_up_to_the_error_of_their_union(float64):
    """``LogLikelihood.error`` of two batches added with ``+`` is the error of the batch they make together:
    variances add, the smallest ESS and the largest k-hat are kept, k-hats above 0.7 are counted; an exact value
    adds nothing, and a deterministic bound makes the sum inexact without making it an estimate."""
    from pyro_attention.inference import EstimateError
    from pyro_attention.inference.evaluate import importance_estimate

    torch.manual_seed(0)
    log_w = torch.randn(40, 5, 3) * torch.tensor([0.1, 1.0, 4.0, 8.0, 0.5]).view(1, 5, 1)  # light to heavy tails
    mask = torch.ones(5, 3, dtype=torch.bool)
    mask[4, 2] = False
    whole = importance_estimate(log_w, mask, "test").error
    parts = importance_estimate(log_w[:, :2], mask[:2], "test").error + importance_estimate(
        log_w[:, 2:], mask[2:], "test").error
    assert whole.khat_over > 0 and not whole.reliable and whole.estimated and not whole.exact  # heavy rows: k-hat > 0.7
    assert parts.variance == pytest.approx(whole.variance, rel=1e-12)
    assert (parts.ess_min, parts.khat_max, parts.khat_defined, parts.khat_over, parts.draws) == (
        whole.ess_min, whole.khat_max, whole.khat_defined, whole.khat_over, whole.draws)
    assert whole + EstimateError() == whole and EstimateError() + EstimateError() == EstimateError()
    bound = EstimateError(exact=False)
    assert not (bound + EstimateError()).exact and not (bound + EstimateError()).estimated
    assert (bound + EstimateError()).text() == "a deterministic bound (no Monte Carlo error)"
    assert (whole + bound).text() == whole.text()
