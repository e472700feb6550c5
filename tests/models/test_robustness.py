"""Numerical robustness and the variational inequalities as properties.

1. **float32 at S = 1000.**  One SVI ``loss_and_grads`` of every categorical pair and estimator (marginal, hard
   enum / sample, variational enum / sample, RWS), soft, relaxed and the continuous neighbours (Gaussian context,
   BAM, Gumbel with either KL) on a toy network (``T = 3``) and on region QA (``T = 1``, NaN in padded regions),
   each with ordinary and with extreme scores (weights scaled so that prior and inference-network scores reach
   about +-1e4): the loss and every gradient are finite; padded sources keep exactly zero prior, guide and sampled
   weight.  The exact log-likelihood by enumeration is finite, ``<= 0`` per token, and matches float64 to
   ``1e-5 + 1e-6 max|score|`` (on region QA, the toy network and Seq2Seq, whose kernels differ).
2. **Properties (hypothesis, float64)** over random sizes, padding patterns (not only suffixes) and network
   seeds::

       ELBO(q) <= log p(y | x)                    per example, variational and hard attention (enum)
       ELBO(q*) == log p(y | x)  (1e-8)           q* = the exact posterior (alignment_posterior)
       log p - ELBO(q) == sum_t KL(q || p(z | x, y))
       KL(q || p) >= 0                            categorical (with -inf logits, float32 +-1e4 logits),
                                                  Weibull || Gamma, LogNormal || Gamma
       padding invariance                         extra padded sources / targets / examples change no real
                                                  token's exact log-likelihood and no deterministic loss

The categorical model is the plate diagram of ``tests/models/test_exact.py`` (``z`` enumerated over the ``S`` sources,
padded ones with prior 0).
"""

from __future__ import annotations

import copy
import math
from contextlib import contextmanager
from dataclasses import replace

import pyro
import pyro.distributions as dist
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pyro import poutine
from torch.distributions import kl_divergence

from pyro_attention.data.region_qa import RegionBatch
from pyro_attention.data.translation import collate
from pyro_attention.inference import alignment_posterior, log_likelihood
from pyro_attention.models import MarginalLikelihood, VariationalAttention
from pyro_attention.networks import RegionQA, Seq2Seq
from pyro_attention.networks.base import Encoded
from pyro_attention.registry import make_pair
from tests.support.toy_network import ToyBatch, ToyNetwork

# ----------------------------------------------------------------------------------------------------------------
# 1. float32 at S = 1000, ordinary and extreme scores

S_BIG = 1000
#: (pair, estimator): every categorical pair and estimator, soft, relaxed and the continuous neighbours
ROWS = [
    ("soft", None),
    ("marginal", None),
    ("hard", "enum"),
    ("hard", "sample"),
    ("variational", "enum"),
    ("variational", "sample"),
    ("rws", None),
    ("relaxed", None),
    ("gaussian", None),
    ("bayesian", None),
    ("gumbel", "sampled"),
    ("gumbel", "categorical"),
]
SCALES = {"ordinary": 1.0, "extreme": 1e4}


def _big_toy(scale: float) -> tuple[ToyNetwork, ToyBatch]:
    """B=3, S=1000, T=3; examples 1 and 2 lose 7 and 300 sources and their last target to padding."""
    torch.manual_seed(0)
    net = ToyNetwork(hidden=4)
    g = torch.Generator().manual_seed(0)
    B, T = 3, 3
    source_mask = torch.ones(B, S_BIG, dtype=torch.bool)
    source_mask[1, -7:] = False
    source_mask[2, -300:] = False
    target_mask = torch.ones(B, T, dtype=torch.bool)
    target_mask[1:, -1] = False
    batch = ToyBatch(
        torch.randn(B, S_BIG, 3, generator=g), source_mask, torch.randint(4, (B, T), generator=g), target_mask
    )
    with torch.no_grad():  # prior scores position . key(values), posterior scores (e(y) + position) . key'(x)
        net.position.weight.mul_(scale)
        net.post_y.weight.mul_(scale)
    return net, batch


def _big_region(scale: float) -> tuple[RegionQA, RegionBatch]:
    """B=4, S=1000 regions, example b loses 3b regions to padding (their features are NaN)."""
    B, F, A, V = 4, 5, 7, 10
    g = torch.Generator().manual_seed(1)
    regions = torch.randn(B, S_BIG, F, generator=g)
    mask = torch.ones(B, S_BIG, dtype=torch.bool)
    for b in range(1, B):
        mask[b, S_BIG - 3 * b :] = False
    regions[~mask] = float("nan")
    question = torch.randint(1, V, (B, 3), generator=g)
    question[0, 2] = 0
    torch.manual_seed(1)
    net = RegionQA(F, A, vocab_size=V, hidden_size=4)
    with torch.no_grad():  # scores = v^T tanh(...): |score| <= scale * |v|_1
        net.att_v.weight.mul_(scale)
        net.post_v.weight.mul_(scale)
    return net, RegionBatch(regions, mask, question, torch.randint(A, (B,), generator=g))


BIG = {"toy": _big_toy, "region": _big_region}


def _real_scores(enc: Encoded) -> torch.Tensor:
    return enc.prior_scores[enc.source_mask.unsqueeze(1).expand_as(enc.prior_scores)]


@pytest.mark.parametrize("scale", list(SCALES), ids=str)
@pytest.mark.parametrize("network", list(BIG))
@pytest.mark.parametrize("name,estimator", ROWS, ids=[f"{n}-{e}" if e else n for n, e in ROWS])
def test_float32_loss_and_gradients_finite_at_s1000(name, estimator, network, scale):
    assert torch.get_default_dtype() == torch.float32
    net, batch = BIG[network](SCALES[scale])
    enc = net.encode(batch)
    if scale == "extreme":
        assert _real_scores(enc).abs().max() > 1e3  # the scores really are extreme (+-1e4 on the toy network)
    pair = make_pair(name, net, estimator)
    loss = pair.elbo().loss_and_grads(pair.model, pair.guide, batch)
    assert math.isfinite(loss), loss
    params = dict(pyro.get_param_store().named_parameters())
    assert params
    for key, p in params.items():
        assert p.grad is None or torch.isfinite(p.grad).all(), key
    if scale == "ordinary":
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in params.values())

    # padded sources: exactly zero mass under the prior, the guide and in a guide draw
    padded = ~enc.source_mask.unsqueeze(1).expand(enc.shape)
    with torch.no_grad():
        weights = {"prior": pair.attention_prior(enc)}
        if (probs := pair.guide_probs(enc)) is not None:
            weights["guide"] = probs
        for what, w in weights.items():
            assert torch.isfinite(w).all() and (w[padded] == 0).all(), what
            real_rows = enc.target_mask if what == "guide" else torch.ones_like(enc.target_mask)
            assert torch.allclose(w.sum(-1)[real_rows], torch.ones(()), atol=1e-4), what
        site = poutine.trace(pair.guide).get_trace(batch).nodes.get("align")
        if site is not None and "_enumerate_dim" not in site["infer"]:
            z = site["value"]
            if not z.is_floating_point():  # a drawn position: never a padded one
                assert enc.source_mask.gather(1, z.reshape(z.shape[0], -1)).all()
            elif z.shape[-1] == S_BIG:  # drawn weights over the sources (not the Gaussian context vector)
                assert torch.isfinite(z).all() and (z[padded] == 0).all()


def _seq2seq_big() -> tuple[Seq2Seq, object]:
    torch.manual_seed(2)
    net = Seq2Seq(6, 6, embedding_size=3, encoder_size=2, decoder_size=4, attention_size=3, chunk_size=256)
    g = torch.Generator().manual_seed(2)
    pairs = [
        (torch.randint(3, 6, (n,), generator=g).tolist(), torch.randint(3, 6, (2,), generator=g).tolist())
        for n in (S_BIG, S_BIG - 13)
    ]
    return net, collate(pairs)


def _to_float64(net, batch):
    net64 = copy.deepcopy(net).double()
    if isinstance(batch, ToyBatch):
        return net64, replace(batch, source=batch.source.double())
    if isinstance(batch, RegionBatch):
        return net64, replace(batch, regions=batch.regions.double())
    return net64, batch  # token ids


@pytest.mark.parametrize(
    "make",
    [lambda: _big_toy(1.0), lambda: _big_toy(1e4), lambda: _big_region(1.0), lambda: _big_region(1e4), _seq2seq_big],
    ids=["toy", "toy-extreme", "region", "region-extreme", "seq2seq"],
)
def test_float32_exact_log_likelihood_at_s1000_matches_float64(make):
    net, batch = make()
    enc = net.encode(batch)
    ll = log_likelihood(MarginalLikelihood(net), batch)
    assert ll.exact and ll.per_token.dtype == torch.float32
    assert torch.isfinite(ll.per_token).all()
    assert (ll.per_token <= 0).all()
    assert (ll.per_token[~enc.target_mask] == 0).all()
    net64, batch64 = _to_float64(net, batch)
    ll64 = log_likelihood(MarginalLikelihood(net64), batch64)
    assert ll64.per_token.dtype == torch.float64
    tol = 1e-5 + 1e-6 * float(_real_scores(enc).detach().abs().max())  # float32 rounding of the scores themselves
    assert (ll.per_token.double() - ll64.per_token).abs().max() <= tol
    # the enumerated training losses agree: marginal = -log p, hard and variational ELBOs <= log p
    log_p = float(ll.per_example.sum())
    tol = tol * int(enc.target_mask.sum())
    for name in ("marginal", "hard", "variational"):
        pair = make_pair(name, net)
        elbo = -pair.elbo().loss(pair.model, pair.guide, batch)
        assert math.isfinite(elbo) and elbo <= log_p + tol, name
        if name == "marginal":
            assert elbo == pytest.approx(log_p, abs=tol)


def test_categorical_kl_finite_when_float32_probabilities_underflow():
    """Regression: with logits 200 apart, float32 probabilities underflow to 0; the KL was reported ``inf``
    (torch's and ours, which read support from ``probs``), so variational attention (sample) and the Gumbel pair
    with the categorical KL had an infinite loss at extreme scores.  The KL is finite: here exactly 200."""
    p = dist.Categorical(logits=torch.tensor([0.0, -200.0, float("-inf")]))
    q = dist.Categorical(logits=torch.tensor([-200.0, 0.0, float("-inf")]))
    assert float(kl_divergence(p, q)) == pytest.approx(200.0)
    # a real zero of q where p has mass is still infinite
    assert kl_divergence(q, dist.Categorical(logits=torch.tensor([0.0, float("-inf"), 0.0]))) == float("inf")


def test_bayesian_guide_probs_zero_at_padded_sources():
    """Regression: BAM's guide_probs normalised exp(phi) with phi = 0 (not -inf) at padded sources, so every padded
    source got the weight of a certain one (alignment_posterior masked it afterwards; guide_probs did not)."""
    torch.manual_seed(0)
    net = ToyNetwork()
    batch = ToyBatch(
        torch.randn(2, 4, 3),
        torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool),
        torch.tensor([[0, 1], [2, 3]]),
        torch.tensor([[1, 1], [1, 0]], dtype=torch.bool),
    )
    enc = net.encode(batch)
    probs = make_pair("bayesian", net).guide_probs(enc)
    assert (probs[1, :, 2:] == 0).all()
    assert torch.allclose(probs.sum(-1), torch.ones(2, 2))


# ----------------------------------------------------------------------------------------------------------------
# 2. properties (float64)


@st.composite
def problems(draw, max_b: int = 3, max_s: int = 4, max_t: int = 3):
    """A random toy problem: sizes, padding masks (any pattern with >= 1 real position), seeds, sharpness."""
    B = draw(st.integers(1, max_b))
    S = draw(st.integers(1, max_s))
    T = draw(st.integers(1, max_t))

    def mask(n: int) -> list[bool]:
        m = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        return m if any(m) else [True] + m[1:]

    source_mask = torch.tensor([mask(S) for _ in range(B)])
    target_mask = torch.tensor([mask(T) for _ in range(B)])
    seed = draw(st.integers(0, 2**16))
    sharpness = draw(st.sampled_from([0.3, 1.0, 4.0]))
    return source_mask, target_mask, seed, sharpness


def _toy_problem(source_mask, target_mask, seed, sharpness) -> tuple[ToyNetwork, ToyBatch]:
    B, S = source_mask.shape
    torch.manual_seed(seed)
    net = ToyNetwork()
    with torch.no_grad():
        net.position.weight.mul_(sharpness)
        net.post_y.weight.mul_(sharpness)
    g = torch.Generator().manual_seed(seed)
    source = torch.randn(B, S, 3, generator=g, dtype=torch.float64)
    source[~source_mask] = 100.0  # garbage at padded sources
    target = torch.randint(4, target_mask.shape, generator=g)
    return net, ToyBatch(source, source_mask, target, target_mask)


def _elbo(pair, batch) -> float:
    return -pair.elbo().loss(pair.model, pair.guide, batch)


class ExactPosteriorAttention(VariationalAttention):
    """Variational attention whose guide is the exact posterior ``p(z | x, y)`` of ``batch`` (detached)."""

    def __init__(self, network: ToyNetwork, batch: ToyBatch) -> None:
        super().__init__(network, estimator="enum")
        posterior = alignment_posterior(MarginalLikelihood(network), batch)["posterior"]
        self.exact_logits = posterior.detach().log()  # -inf at padded sources

    def guide_logits(self, enc: Encoded) -> torch.Tensor:
        return self.exact_logits


SETTINGS = settings(max_examples=100, deadline=None)


@contextmanager
def double():
    """float64 for one hypothesis example (its fixtures would run once per test, not per example), fresh params."""
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    pyro.clear_param_store()
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)


@SETTINGS
@given(problem=problems(), name=st.sampled_from(["variational", "hard"]))
def test_property_elbo_below_log_likelihood_per_example(problem, name):
    with double():
        net, batch = _toy_problem(*problem)
        pair = make_pair(name, net, "enum")
        log_p = log_likelihood(pair, batch).per_example
        for b in range(len(log_p)):
            assert _elbo(pair, batch[b : b + 1]) <= float(log_p[b]) + 1e-10
        # and the gap is the KL from q to the exact posterior, summed over real tokens
        post = alignment_posterior(pair, batch)
        q, p = dist.Categorical(probs=post["guide"]), dist.Categorical(probs=post["posterior"])
        gap = float(log_p.sum()) - _elbo(pair, batch)
        kl = (kl_divergence(q, p) * batch.target_mask).sum()
        assert gap == pytest.approx(float(kl), abs=1e-9)


@SETTINGS
@given(problem=problems())
def test_property_elbo_equals_log_likelihood_for_the_exact_posterior(problem):
    with double():
        net, batch = _toy_problem(*problem)
        pair = ExactPosteriorAttention(net, batch)
        log_p = float(log_likelihood(pair, batch).per_example.sum())
        assert _elbo(pair, batch) == pytest.approx(log_p, abs=1e-8)
        assert _elbo(VariationalAttention(net), batch) < log_p + 1e-10  # an untrained q: at most log p


def _logits(n: int, low: float, high: float, dtype: torch.dtype):
    """Rows of ``n`` logits in ``[low, high]`` or ``-inf``, at least one finite."""
    entry = st.one_of(st.floats(low, high), st.just(-math.inf))
    return st.lists(entry, min_size=n, max_size=n).map(
        lambda v: torch.tensor(v if any(math.isfinite(x) for x in v) else [0.0] + v[1:], dtype=dtype)
    )


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(1, 6))
def test_property_categorical_kl_nonnegative(data, n):
    with double():
        lp = data.draw(_logits(n, -50.0, 50.0, torch.float64)).requires_grad_()
        lq = data.draw(_logits(n, -50.0, 50.0, torch.float64))
        p, q = dist.Categorical(logits=lp), dist.Categorical(logits=lq)
        kl = kl_divergence(p, q)
        assert kl >= -1e-12
        impossible = bool(((lp > -math.inf) & (lq == -math.inf)).any())
        assert math.isinf(kl) == impossible
        if not impossible:  # the definition, and finite gradients through -inf logits
            real = lp > -math.inf
            brute = (p.probs[real] * (p.logits[real] - q.logits[real])).sum()
            assert float(kl) == pytest.approx(float(brute), abs=1e-10)
            kl.backward()
            assert torch.isfinite(lp.grad).all() and (lp.grad[~real] == 0).all()
        if kl == 0:
            assert torch.allclose(p.probs, q.probs)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), n=st.integers(1, 50))
def test_property_categorical_kl_float32_extreme_logits(data, n):
    """float32, logits within +-1e4 (probabilities underflow): the KL is finite, >= 0 and equal to the float64 KL
    up to the rounding of the normalised logits (``logits - logsumexp``: about ``eps_32 max|logit|``, e.g. -2e-4
    for ``p = [4096, 4093]``, ``q = [3, 0]``, the same distribution)."""
    lp = data.draw(_logits(n, -1e4, 1e4, torch.float32))
    lq = data.draw(_logits(n, -1e4, 1e4, torch.float32))
    lq = torch.where(lp > -math.inf, lq.nan_to_num(neginf=-1e4), lq)  # q has mass wherever p does
    kl = kl_divergence(dist.Categorical(logits=lp), dist.Categorical(logits=lq))
    kl64 = kl_divergence(dist.Categorical(logits=lp.double()), dist.Categorical(logits=lq.double()))
    rounding = 1e-6 * (1.0 + float(torch.cat([lp, lq])[torch.cat([lp, lq]) > -math.inf].abs().max()))
    assert torch.isfinite(kl) and kl >= -rounding
    assert float(kl) == pytest.approx(float(kl64), rel=1e-4, abs=rounding)


positive = st.floats(1e-2, 1e2)


@settings(max_examples=150, deadline=None)
@given(
    k=st.floats(0.2, 50.0),
    lam=positive,
    alpha=positive,
    beta=positive,
    mu=st.floats(-5.0, 5.0),
    sigma=st.floats(0.05, 3.0),
)
def test_property_weibull_and_lognormal_gamma_kl_nonnegative(k, lam, alpha, beta, mu, sigma):
    with double():
        p = dist.Gamma(torch.tensor(alpha), torch.tensor(beta))
        weibull, lognormal = dist.Weibull(torch.tensor(lam), torch.tensor(k)), dist.LogNormal(torch.tensor(mu), sigma)
        for q in (weibull, lognormal):
            kl = kl_divergence(q, p)
            assert not torch.isnan(kl)
            assert kl >= -1e-9 * (1.0 + abs(alpha * math.log(beta)) + abs(math.lgamma(alpha))), (q, kl)


def test_weibull_gamma_kl_zero_where_they_coincide(float64):
    """Weibull(k=1, lambda) = Exponential(1 / lambda) = Gamma(1, 1 / lambda): the KL is 0."""
    for lam in (0.01, 1.0, 70.0):
        q = dist.Weibull(torch.tensor(lam), torch.tensor(1.0))
        assert abs(float(kl_divergence(q, dist.Gamma(torch.tensor(1.0), torch.tensor(1.0 / lam))))) < 1e-12


#: pairs with an exact log-likelihood; those whose loss is deterministic (no sampled site) also compare losses
EXACT_LL = ["soft", "marginal", "hard", "variational", "rws", "segmentation", "syntactic", "segmentation-marginal"]
SEQUENCE_STRUCTURES = {"segmentation", "syntactic", "segmentation-marginal"}


def _prefix(mask: torch.Tensor) -> torch.Tensor:
    """The length mask with as many real positions per row as ``mask``."""
    return torch.arange(mask.shape[1]) < mask.sum(-1, keepdim=True)


DETERMINISTIC_LOSS = {"soft", "marginal", "hard", "variational", "segmentation", "syntactic", "segmentation-marginal"}


def _pad(batch: ToyBatch, extra_source: int, extra_target: int, extra_examples: int, seed: int) -> ToyBatch:
    """Append padded sources (garbage features), padded targets (random ids) and examples whose targets are all
    padded (real sources)."""
    g = torch.Generator().manual_seed(seed)
    B, S, F = batch.source.shape
    T = batch.target.shape[1]
    source = torch.cat([batch.source, 100 * torch.randn(B, extra_source, F, generator=g, dtype=torch.float64)], 1)
    source_mask = torch.cat([batch.source_mask, torch.zeros(B, extra_source, dtype=torch.bool)], 1)
    target = torch.cat([batch.target, torch.randint(4, (B, extra_target), generator=g)], 1)
    target_mask = torch.cat([batch.target_mask, torch.zeros(B, extra_target, dtype=torch.bool)], 1)
    E = extra_examples
    S2, T2 = S + extra_source, T + extra_target
    return ToyBatch(
        torch.cat([source, torch.randn(E, S2, F, generator=g, dtype=torch.float64)]),
        torch.cat([source_mask, torch.ones(E, S2, dtype=torch.bool)]),
        torch.cat([target, torch.randint(4, (E, T2), generator=g)]),
        torch.cat([target_mask, torch.zeros(E, T2, dtype=torch.bool)]),
    )


@settings(max_examples=100, deadline=None)
@given(
    problem=problems(),
    name=st.sampled_from(EXACT_LL),
    extra=st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 1)).filter(any),
)
def test_property_padding_invariance(problem, name, extra):
    with double():
        if name in SEQUENCE_STRUCTURES:  # they need length masks (True on a prefix), and say so otherwise
            problem = (_prefix(problem[0]), _prefix(problem[1]), *problem[2:])
        net, batch = _toy_problem(*problem)
        padded = _pad(batch, *extra, seed=problem[2])
        pair = make_pair(name, net)
        B, T = batch.target.shape
        ll, ll_pad = log_likelihood(pair, batch), log_likelihood(pair, padded)
        assert ll.exact and ll_pad.exact
        assert torch.allclose(ll_pad.per_token[:B, :T], ll.per_token, atol=1e-10)
        assert (ll_pad.per_token[~padded.target_mask] == 0).all()
        assert (ll_pad.per_example[B:] == 0).all()
        post, post_pad = alignment_posterior(pair, batch), alignment_posterior(pair, padded)
        S = batch.source.shape[1]
        for key, probs in post.items():  # prior / exact posterior / guide of real tokens over real sources
            assert torch.allclose(post_pad[key][:B, :T, :S], probs, atol=1e-10), key
            assert (post_pad[key][:B, :, S:] == 0).all(), key
        if name in DETERMINISTIC_LOSS:
            assert pair.elbo().loss(pair.model, pair.guide, padded) == pytest.approx(
                pair.elbo().loss(pair.model, pair.guide, batch), abs=1e-9
            )
