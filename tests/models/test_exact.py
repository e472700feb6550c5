"""Exactness of the categorical pairs against brute-force enumeration on tiny problems.

Plate diagram of every categorical pair (``B`` examples, ``T`` targets; ``z`` enumerated over ``S``)::

    +-- batch (B) ---------------------------+
    |  +-- target (T) ---------------------+ |
    |  |   z_bt  ~ Categorical(p(. | x))   | |
    |  |   y_bt  ~ p(y | x, z_bt)   (obs)  | |
    |  +-----------------------------------+ |
    +----------------------------------------+
"""

from __future__ import annotations

import itertools

import pyro
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pyro import poutine

from pyro_attention.distributions.enumeration import logits_at_values, observed_table
from pyro_attention.inference import alignment_posterior, entropy, log_likelihood, map_alignment, predict
from pyro_attention.inference.elbo import ReinforceKL_ELBO
from pyro_attention.models import HardAttention, MarginalLikelihood, SoftAttention, VariationalAttention
from tests.support.toy_network import ToyNetwork, make_toy_batch, pad_batch, region_case, toy_case

CATEGORICAL = [
    (MarginalLikelihood, {}),
    (HardAttention, {"estimator": "enum"}),
    (VariationalAttention, {"estimator": "enum"}),
    (HardAttention, {"estimator": "sample"}),
    (VariationalAttention, {"estimator": "sample"}),
]
GUIDED_ENUM = [(HardAttention, {"estimator": "enum"}), (VariationalAttention, {"estimator": "enum"})]


def _joint_at(pair, batch, z: torch.Tensor) -> torch.Tensor:
    """log p(y, z | x) summed over the batch, for a fully specified alignment ``z`` (B, T)."""
    trace = poutine.trace(poutine.condition(pair.model, data={"align": z})).get_trace(batch)
    return trace.log_prob_sum()


@pytest.mark.parametrize("make", [toy_case, region_case], ids=["toy-T2", "region-qa"])
@pytest.mark.parametrize("cls,kw", CATEGORICAL, ids=lambda v: getattr(v, "__name__", str(v)))
def test_log_likelihood_equals_sum_over_all_alignments(float64, make, cls, kw):
    net, batch = make()
    pair = cls(net, **kw)
    enc = net.encode(batch)
    B, T, S = enc.shape
    terms = [_joint_at(pair, batch, torch.tensor(z).view(B, T)) for z in itertools.product(range(S), repeat=B * T)]
    brute = torch.logsumexp(torch.stack(terms), 0)
    ll = log_likelihood(pair, batch)
    assert ll.exact and ll.method == "enumeration"
    assert torch.allclose(ll.per_example.sum(), brute, atol=1e-10)
    # per token: the independent formula log sum_s p(s) p(y | s)
    per_token = (pair.prior_logits(enc).log_softmax(-1) + observed_table(net, enc)).logsumexp(-1)
    assert torch.allclose(ll.per_token, per_token * enc.target_mask, atol=1e-10)
    assert (ll.per_token[~enc.target_mask] == 0).all()


@pytest.mark.parametrize("make", [toy_case, region_case], ids=["toy-T2", "region-qa"])
def test_exact_posterior_is_bayes_rule(float64, make):
    net, batch = make()
    pair = VariationalAttention(net)
    enc = net.encode(batch)
    B, T, S = enc.shape
    rows = []
    for s in range(S):
        trace = poutine.trace(poutine.condition(pair.model, data={"align": torch.full((B, T), s)})).get_trace(batch)
        trace.compute_log_prob()
        rows.append(trace.nodes["align"]["log_prob"] + trace.nodes["y"]["log_prob"])  # masked: prior at padded targets
    bayes = torch.stack(rows, -1).softmax(-1)
    post = alignment_posterior(pair, batch)
    assert torch.allclose(post["posterior"], bayes, atol=1e-10)
    assert torch.allclose(post["posterior"].sum(-1), torch.ones(B, T, dtype=bayes.dtype))
    assert torch.equal(map_alignment(pair, batch), post["posterior"].argmax(-1))


@pytest.mark.parametrize("cls,kw", GUIDED_ENUM, ids=lambda v: getattr(v, "__name__", str(v)))
def test_elbo_below_log_likelihood_and_gap_is_kl(float64, cls, kw):
    net, batch = toy_case(seed=3)
    pair = cls(net, **kw)
    log_p = log_likelihood(pair, batch).per_example.sum()
    elbo = -pair.elbo().loss(pair.model, pair.guide, batch)
    assert elbo <= log_p + 1e-12
    post = alignment_posterior(pair, batch)
    mask = net.encode(batch).target_mask
    q, p = post["guide"], post["posterior"]
    kl = (q * (q.clamp(min=1e-300).log() - p.clamp(min=1e-300).log())).sum(-1)
    assert torch.allclose(torch.as_tensor(log_p - elbo), (kl * mask).sum(), atol=1e-9)
    if cls is VariationalAttention:
        assert log_p - elbo > 1e-3  # an untrained q is not the posterior


def test_marginal_loss_is_exact_negative_log_likelihood(float64):
    net, batch = toy_case(seed=4)
    pair = MarginalLikelihood(net)
    loss = pair.elbo().loss(pair.model, pair.guide, batch)
    assert abs(loss + float(log_likelihood(pair, batch).per_example.sum())) < 1e-9


@pytest.mark.parametrize("cls", [SoftAttention, MarginalLikelihood, HardAttention, VariationalAttention])
def test_padding_gets_zero_mass_and_changes_nothing(float64, cls):
    net, batch = toy_case(seed=5, B=3, S=4, T=3)
    pair = cls(net)
    padded = pad_batch(batch, extra_source=2, extra_target=2)
    ll, ll_pad = log_likelihood(pair, batch), log_likelihood(pair, padded)
    assert torch.allclose(ll.per_example, ll_pad.per_example, atol=1e-10)
    assert torch.allclose(ll_pad.per_token[:, :3], ll.per_token, atol=1e-10)
    loss = pair.elbo().loss(pair.model, pair.guide, batch)
    loss_pad = pair.elbo().loss(pair.model, pair.guide, padded)
    assert abs(loss - loss_pad) < 1e-9
    post = alignment_posterior(pair, padded)
    enc = net.encode(padded)
    for name, probs in post.items():
        assert (probs[~enc.source_mask.unsqueeze(1).expand_as(probs)] == 0).all(), name
        assert torch.allclose(probs[:, :3, :4], alignment_posterior(pair, batch)[name], atol=1e-10), name


def test_predict_rules(float64):
    net, batch = toy_case(seed=6)
    pair = MarginalLikelihood(net)
    enc = net.encode(batch)
    prior = pair.attention_prior(enc)
    marg = predict(pair, batch, "marginal")
    brute = sum(prior[..., s, None] * logits_at_values(net, enc)[s].softmax(-1) for s in range(enc.shape[2]))
    assert torch.allclose(marg, brute, atol=1e-12)
    soft = predict(pair, batch, "soft")
    assert torch.allclose(soft.sum(-1), torch.ones_like(soft[..., 0]))
    assert (marg - soft).abs().max() > 1e-4  # f(E[z]) != E[f(z)] for a nonlinear network
    with pytest.raises(ValueError, match="rule must be one of"):
        predict(pair, batch, "mean")
    with pytest.raises(ValueError, match="no latent alignment"):
        predict(SoftAttention(net), batch, "marginal")


def test_soft_log_likelihood_is_its_own_likelihood(float64):
    net, batch = toy_case(seed=7)
    pair = SoftAttention(net)
    ll = log_likelihood(pair, batch)
    assert ll.exact and "deterministic" in ll.method
    enc = net.encode(batch)
    assert torch.allclose(ll.per_token, pair.soft_log_likelihood(enc), atol=1e-12)
    assert abs(pair.elbo().loss(pair.model, pair.guide, batch) + float(ll.per_example.sum())) < 1e-9


def test_entropy_handles_zeros():
    p = torch.tensor([[0.5, 0.5, 0.0]])
    assert torch.allclose(entropy(p), torch.tensor([0.6931471805599453], dtype=p.dtype))


def _grads(pair, elbo, batch) -> torch.Tensor:
    pyro.clear_param_store()
    for p in pair.network.parameters():
        p.grad = None
    elbo.loss_and_grads(pair.model, pair.guide, batch)
    return torch.cat(
        [
            p.grad.flatten() if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype)
            for p in pair.network.parameters()
        ]
    )


@pytest.mark.parametrize("elbo_class", [ReinforceKL_ELBO, pyro.infer.TraceGraph_ELBO])
@pytest.mark.parametrize("cls", [HardAttention, VariationalAttention])
def test_reinforce_gradient_matches_enumerated_gradient(float64, cls, elbo_class):
    """The "sample" estimator (analytic KL) and Pyro's TraceGraph_ELBO (sampled KL) are both unbiased."""
    net, batch = toy_case(seed=8)
    exact = _grads(cls(net, estimator="enum"), cls(net, estimator="enum").elbo(), batch)
    pair = cls(net, estimator="sample")
    assert type(pair.elbo()) is ReinforceKL_ELBO
    elbo = elbo_class(num_particles=500, vectorize_particles=True, max_plate_nesting=2)
    runs = torch.stack([_grads(pair, elbo, batch) for _ in range(20)])
    mean, se = runs.mean(0), runs.std(0) / runs.shape[0] ** 0.5
    z = (mean - exact).abs() / (se + 1e-12)
    moving = se > 1e-9
    assert moving.sum() > 10
    # 5 standard errors on every coordinate (measured: at most 1.04 with the analytic KL, 3.19 with TraceGraph's
    # sampled KL); and the vectors agree overall within ~10x the relative error measured (0.10 % and 2.3 %)
    assert (z[moving] < 5).all(), z.max()
    assert (mean - exact).norm() < (0.01 if elbo_class is ReinforceKL_ELBO else 0.05) * exact.norm()


@pytest.mark.parametrize("cls", [HardAttention, VariationalAttention])
def test_reinforce_kl_loss_estimates_the_elbo(float64, cls):
    net, batch = toy_case(seed=9)
    exact = cls(net, estimator="enum")
    exact_loss = exact.elbo().loss(exact.model, exact.guide, batch)
    pair = cls(net, estimator="sample")
    elbo = ReinforceKL_ELBO(num_particles=20000, vectorize_particles=True, max_plate_nesting=2)
    # measured over 10 seeds: relative error at most 2.3e-4 (standard deviation 1.3e-4)
    assert elbo.loss(pair.model, pair.guide, batch) == pytest.approx(exact_loss, rel=2e-3)
    # differentiable_loss exists (TraceGraph_ELBO has none) and matches loss in value
    pyro.set_rng_seed(3)
    value = float(elbo.differentiable_loss(pair.model, pair.guide, batch).detach())
    pyro.set_rng_seed(3)
    assert value == pytest.approx(elbo.loss(pair.model, pair.guide, batch))


@settings(max_examples=100, deadline=None)
@given(
    B=st.integers(1, 3),
    S=st.integers(2, 4),
    T=st.integers(1, 3),
    pad_source=st.integers(0, 1),
    pad_target=st.integers(0, 1),
    seed=st.integers(0, 10_000),
)
def test_enumeration_properties_hypothesis(B, S, T, pad_source, pad_target, seed):
    """On random sizes and paddings: per-token log p = log sum_s p(s) p(y | s) computed independently,
    ELBO <= log p with equality gap KL(q || posterior), and the posterior sums to one over real sources."""
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(seed)
        net = ToyNetwork()
        batch = make_toy_batch(B, S, T, seed=seed, pad_source=min(pad_source, S - 1), pad_target=min(pad_target, T - 1))
        pair = VariationalAttention(net)
        enc = net.encode(batch)
        ll = log_likelihood(pair, batch)
        direct = (pair.prior_logits(enc).log_softmax(-1) + observed_table(net, enc)).logsumexp(-1)
        assert torch.allclose(ll.per_token, direct * enc.target_mask, atol=1e-10)
        elbo = -pair.elbo().loss(pair.model, pair.guide, batch)
        post = alignment_posterior(pair, batch)
        q, p = post["guide"], post["posterior"]
        kl = (torch.where(q > 0, q * (q.log() - p.log()), 0.0).sum(-1) * enc.target_mask).sum()
        assert float(ll.per_example.sum()) - elbo == pytest.approx(float(kl), abs=1e-9)
        assert kl >= -1e-12
        assert torch.allclose(p.sum(-1), torch.ones_like(p[..., 0]))
        assert (p[~enc.source_mask.unsqueeze(1).expand_as(p)] == 0).all()
    finally:
        torch.set_default_dtype(torch.float32)
