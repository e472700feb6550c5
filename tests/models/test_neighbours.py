"""The neighbours of the paper's pairs: Gaussian context, Bayesian attention modules (BAM), Gumbel-softmax, RWS.

KL(Weibull || Gamma) and KL(LogNormal || Gamma) against Monte Carlo; every pair trains (finite loss and
gradients), is invariant to padding (same latent -> same per-token weight), and has guide = prior at padded
targets; the annealing schedule; the masked Concrete density and its gradients under padding; RWS with SVI.
"""

from __future__ import annotations

import math
import re

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from torch.distributions import kl_divergence

from pyro_attention.distributions.weibull_gamma import MaskedVector
from pyro_attention.inference import fit, log_likelihood, predict
from pyro_attention.inference.elbo import AlignmentRWS
from pyro_attention.models import MarginalLikelihood
from pyro_attention.models.bayesian import BayesianAttention
from pyro_attention.models.gaussian_context import GaussianContextAttention
from pyro_attention.models.gumbel import GumbelAttention, MaskedConcrete
from pyro_attention.models.rws import RWSAttention
from tests.support.toy_network import ToyNetwork, make_toy_batch, pad_batch

PAIRS = {
    "gaussian": lambda net: GaussianContextAttention(net),
    "gaussian-mean-posterior": lambda net: GaussianContextAttention(net, prior="mean", guide_mean="posterior"),
    "bam-weibull-contextual": lambda net: BayesianAttention(net),
    "bam-weibull-constant-prior-scores": lambda net: BayesianAttention(net, prior="constant", guide_scores="prior"),
    "bam-lognormal-learned": lambda net: BayesianAttention(net, family="lognormal", prior="learned"),
    "gumbel": lambda net: GumbelAttention(net),
    "gumbel-st": lambda net: GumbelAttention(net, straight_through=True),
    "gumbel-categorical-kl": lambda net: GumbelAttention(net, estimator="categorical"),
    "rws": lambda net: RWSAttention(net, num_particles=3),
}
CONTINUOUS = [k for k in PAIRS if k != "rws"]


# ----------------------------------------------------------------------------------------------------------------
# closed-form KL divergences against Monte Carlo


def _weibull(k: float, lam: float) -> dist.Distribution:
    return dist.Weibull(torch.tensor(lam), torch.tensor(k))


def _lognormal(mu: float, sigma: float) -> dist.Distribution:
    return dist.LogNormal(torch.tensor(mu), torch.tensor(sigma))


@pytest.mark.parametrize(
    "make, params, alpha, beta",
    [(_weibull, (10.0, 0.3), 1.0, 1.0), (_weibull, (2.0, 1.5), 0.3, 2.0), (_weibull, (0.8, 0.5), 2.0, 0.5),
     (_weibull, (30.0, 0.05), 0.2, 1.0), (_lognormal, (-1.0, 0.5), 1.0, 1.0), (_lognormal, (0.3, 1.2), 0.3, 2.0),
     (_lognormal, (-3.0, 0.1), 2.0, 0.5)],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_kl_to_gamma_matches_monte_carlo(float64, make, params, alpha, beta):
    """KL(Weibull(k, lam) || Gamma) and KL(LogNormal(mu, sigma) || Gamma) in closed form against Monte Carlo."""
    q = make(*params)
    p = dist.Gamma(torch.tensor(alpha), torch.tensor(beta))
    x = q.sample((200_000,))
    ratio = q.log_prob(x) - p.log_prob(x)
    se = float(ratio.std()) / math.sqrt(len(ratio))
    assert float(kl_divergence(q, p)) == pytest.approx(float(ratio.mean()), abs=5 * se + 1e-6)


def test_masked_vector_drops_padded_coordinates(float64):
    mask = torch.tensor([[True, True, False], [False, False, False]])
    lam = torch.tensor([[0.5, 1.0, 7.0], [1.0, 2.0, 3.0]], requires_grad=True)
    q = MaskedVector(dist.Weibull(lam, torch.full_like(lam, 3.0)), mask)
    p = MaskedVector(dist.Gamma(torch.full_like(lam, 0.5), torch.ones_like(lam)), mask)
    w = q.rsample()
    assert (w[~mask] == 0).all() and (w[mask] > 0).all()
    expected = q.base.log_prob(w.clamp(min=1e-300))[0, :2].sum()
    assert torch.allclose(q.log_prob(w)[0], expected) and q.log_prob(w)[1] == 0  # a point mass at 0
    kl = kl_divergence(q, p)
    assert torch.allclose(kl[0], kl_divergence(q.base, p.base)[0, :2].sum()) and kl[1] == 0
    (w.sum() + kl.sum()).backward()
    assert torch.isfinite(lam.grad).all() and (lam.grad[~mask] == 0).all()


# ----------------------------------------------------------------------------------------------------------------
# the masked Concrete distribution


def test_masked_concrete_is_the_concrete_on_real_positions(float64):
    logits = torch.randn(4, 5)
    tau = 0.5
    full = MaskedConcrete(tau, logits, torch.ones(4, 5, dtype=torch.bool))
    z = full.rsample()
    ref = dist.RelaxedOneHotCategorical(torch.tensor(tau), logits=logits)
    assert torch.allclose(full.log_prob(z), ref.log_prob(z))
    mask = torch.tensor([True, True, True, False, False])
    masked = MaskedConcrete(tau, logits + 100 * (~mask), mask)  # junk at padded logits is ignored
    z = masked.rsample()
    assert (z[:, 3:] == 0).all() and torch.allclose(z.sum(-1), torch.ones(4))
    ref = dist.RelaxedOneHotCategorical(torch.tensor(tau), logits=logits[:, :3])
    assert torch.allclose(masked.log_prob(z), ref.log_prob(z[:, :3]))
    # the carried log-sample and the fallback (log of the value) agree where nothing underflows
    assert torch.allclose(masked.log_prob(z), masked.log_prob(z.detach().clone()))


@pytest.mark.parametrize("straight_through", [False, True])
def test_masked_concrete_gradients_finite_at_low_temperature(straight_through):
    """float32, tau = 0.1, padded positions, large logits: value, density and gradients stay finite."""
    torch.manual_seed(0)
    logits = (30 * torch.randn(64, 6)).requires_grad_()
    mask = torch.rand(64, 6) < 0.6
    mask[:, 0] = True
    p = MaskedConcrete(0.1, logits, mask, straight_through)
    q = MaskedConcrete(0.1, logits.detach() * 0.5, mask, straight_through)
    z = p.rsample()
    loss = (z * torch.randn(6)).sum() + (p.log_prob(z) - q.log_prob(z)).sum()
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert (logits.grad[~mask] == 0).all() and (z[~mask] == 0).all()
    if straight_through:
        assert ((z == 0) | (z == 1)).all()


# ----------------------------------------------------------------------------------------------------------------
# every pair: training, padding, guide = prior at padded targets


@pytest.mark.parametrize("name", list(PAIRS))
def test_pair_trains_with_finite_loss_and_gradients(name):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    pair = PAIRS[name](net)
    elbo = pair.elbo()
    loss = elbo.loss_and_grads(pair.model, pair.guide, batch)
    assert math.isfinite(loss)
    params = [p for _, p in pyro.get_param_store().named_parameters()]
    assert params and all(p.grad is None or torch.isfinite(p.grad).all() for p in params)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    result = fit(pair, [batch, pad_batch(batch)] * 3, num_epochs=1, lr=1e-2, progress=False)
    assert result.steps == 6 and all(math.isfinite(v) for v in result.losses)


def _per_token_log_weight(pair, batch, value):
    """``log p(y, z | x) - log q(z | x, y)`` per token ``(B, T)`` at a fixed latent ``z = value``."""
    model = poutine.trace(poutine.condition(pair.model, {"align": value})).get_trace(batch)
    guide = poutine.trace(poutine.condition(pair.guide, {"align": value})).get_trace(batch)
    model.compute_log_prob()
    guide.compute_log_prob()
    return model.nodes["y"]["log_prob"] + model.nodes["align"]["log_prob"] - guide.nodes["align"]["log_prob"]


@pytest.mark.parametrize("name", CONTINUOUS)
def test_pair_padding_invariance(float64, name):
    """Extra padded sources and targets (filled with garbage) change no per-token importance weight."""
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    pair = PAIRS[name](net)
    padded = pad_batch(batch)
    pyro.set_rng_seed(3)
    z_pad = poutine.trace(pair.guide).get_trace(padded).nodes["align"]["value"].detach()
    if not name.startswith("gaussian"):
        assert (z_pad[..., 4:] == 0).all()  # padded sources: exactly zero weight
    z = z_pad[:, :3, :4] if not name.startswith("gaussian") else z_pad[:, :3]
    w = _per_token_log_weight(pair, batch, z)
    w_pad = _per_token_log_weight(pair, padded, z_pad)
    assert torch.isfinite(w).all()
    assert torch.allclose(w, w_pad[:, :3], atol=1e-9)
    assert (w_pad[:, 3] == 0).all()  # a padded target contributes exactly nothing


@pytest.mark.parametrize("name", CONTINUOUS)
def test_guide_equals_prior_at_padded_targets(float64, name):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=2, S=3, T=2)
    pair = PAIRS[name](net)
    guide = poutine.trace(pair.guide).get_trace(batch)
    model = poutine.trace(poutine.replay(pair.model, trace=guide)).get_trace(batch)
    guide.compute_log_prob()
    model.compute_log_prob()
    diff = model.nodes["align"]["log_prob"] - guide.nodes["align"]["log_prob"]
    assert diff[1, 1] == 0 and model.nodes["y"]["log_prob"][1, 1] == 0  # example 1 has its last target padded
    try:
        kl = kl_divergence(guide.nodes["align"]["fn"], model.nodes["align"]["fn"])
    except NotImplementedError:  # Concrete: no closed form; the sampled difference above is the whole story
        return
    assert kl[1, 1].abs() < 1e-12 and (kl[0] > 0).all()


def test_rws_padding_invariance_and_exact_likelihood(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    pair = RWSAttention(net)
    ll, ll_pad = log_likelihood(pair, batch), log_likelihood(pair, pad_batch(batch))
    assert ll.exact and torch.allclose(ll.per_example, ll_pad.per_example)
    assert torch.allclose(ll.per_example, log_likelihood(MarginalLikelihood(net), batch).per_example)


# ----------------------------------------------------------------------------------------------------------------
# KL annealing


def test_annealing_schedule_values():
    net = ToyNetwork()
    lin = GaussianContextAttention(net, anneal_steps=10)
    assert [lin.kl_weight(s) for s in (0, 5, 10, 20)] == [0.0, 0.5, 1.0, 1.0]
    tanh = BayesianAttention(net, anneal_steps=10, schedule="tanh")
    values = [tanh.kl_weight(s) for s in range(12)]
    assert values[0] == 0.0 and values[10] == 1.0 and values[11] == 1.0
    assert tanh.kl_weight(5) == pytest.approx(0.5)
    assert all(a < b for a, b in zip(values[:10], values[1:11], strict=True))
    assert values[1] < 0.1 * 0.5  # slow start (the linear schedule is at 0.1 there)
    assert GaussianContextAttention(net).kl_weight(0) == 1.0  # no annealing by default
    lin.set_step(7)
    assert lin.step == 7 and lin.kl_weight() == pytest.approx(0.7)
    scaled = BayesianAttention(net, anneal_steps=10, schedule="tanh", kl_scale=0.01)
    assert scaled.kl_weight(5) == pytest.approx(0.005) and scaled.kl_weight(30) == pytest.approx(0.01)
    assert GaussianContextAttention(net, kl_scale=0.1).kl_weight(0) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="schedule"):
        GaussianContextAttention(net, schedule="cosine")


def test_annealing_scales_only_the_training_step(float64):
    """At weight 0 the step's loss is -E_q[log p(y | z)]; evaluation sees the unscaled model; the counter runs."""
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    pair = GaussianContextAttention(net, context_size=5, anneal_steps=4)  # the scale head built now, not mid-trace
    elbo = pair.elbo()
    pyro.set_rng_seed(5)
    annealed = elbo.loss_and_grads(pair.model, pair.guide, batch)
    assert pair.step == 1
    pyro.set_rng_seed(5)
    guide = poutine.trace(pair.guide).get_trace(batch)
    model = poutine.trace(poutine.replay(pair.model, trace=guide)).get_trace(batch)
    model.compute_log_prob()
    assert annealed == pytest.approx(-float(model.nodes["y"]["log_prob"].detach().sum()))
    assert model.nodes["align"]["scale"] == 1.0  # outside the training step the model is unscaled
    pyro.set_rng_seed(5)
    full = elbo.loss(pair.model, pair.guide, batch)  # evaluation: weight 1, counter unchanged
    kl = kl_divergence(guide.nodes["align"]["fn"], model.nodes["align"]["fn"]).sum()
    assert full == pytest.approx(annealed + float(kl.detach())) and pair.step == 1
    pair.set_step(2)  # weight 0.5: poutine.scale on the latent site, in the model and the guide
    with pair.annealed():
        trace = poutine.trace(pair.model).get_trace(batch)
    assert trace.nodes["align"]["scale"] == 0.5


# ----------------------------------------------------------------------------------------------------------------
# pair-specific behaviour


def test_bayesian_weights_normalise_over_real_sources(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    for pair in (BayesianAttention(net), BayesianAttention(net, prior="constant")):
        enc = net.encode(batch)
        mean = pair.attention_prior(enc)
        assert torch.allclose(mean.sum(-1), torch.ones(3, 3)) and (mean[1:, :, 3] == 0).all()
        probs = predict(pair, batch, "marginal", num_samples=20)
        assert torch.allclose(probs.sum(-1), torch.ones_like(probs[..., 0]))
    assert torch.allclose(BayesianAttention(net, prior="constant").attention_prior(enc)[1, 0, :3], torch.ones(3) / 3)
    # contextual prior: alpha_t = beta * softmax(a_t), so E_p[w_t] = alpha_t / beta = softmax(a_t): soft attention
    pair = BayesianAttention(net, prior="contextual", beta=2.0)
    assert torch.allclose(pair.attention_prior(enc), torch.softmax(pair.prior_logits(enc), -1))
    assert torch.allclose(pair.prior_alpha(enc)[0].sum(-1), torch.full((3,), 2.0))
    assert torch.allclose(pair.weight_prior(enc).mean[0], torch.softmax(pair.prior_logits(enc), -1)[0])
    # the guide's mean weights sum to one over real sources: E_q[w] = exp(phi) = softmax(b)
    assert torch.allclose(pair.weight_guide(enc).mean.sum(-1), enc.target_mask.to(torch.float64))


def test_the_choices_of_the_continuous_pairs_are_objects_and_bad_names_are_refused():
    """Each string option becomes an object of the pair (its behaviour there, not a string compared in every method);
    a bad one is a ValueError naming the option and the allowed names."""
    from pyro_attention.models._continuous import PosteriorScores, PriorScores
    from pyro_attention.models.bayesian import ContextualShape, LearnedShape, LogNormalWeights, WeibullWeights
    from pyro_attention.models.gaussian_context import SourceMeanPrior, StandardPrior

    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    enc = net.encode(batch)
    bam = BayesianAttention(net, family="lognormal", prior="learned", guide_scores="prior", alpha=2.0)
    assert isinstance(bam.weights, LogNormalWeights) and isinstance(bam.shape, LearnedShape)
    assert isinstance(bam.guide_scores, PriorScores) and not bam.guide_scores.sees_target
    assert list(bam.owned_modules()) == ["bam_prior"] and torch.allclose(bam.shape.shapes(enc), torch.tensor(2.0))
    assert repr(bam) == "BayesianAttention(family='lognormal', prior='learned', guide_scores='prior')"
    bam = BayesianAttention(net)
    assert isinstance(bam.weights, WeibullWeights) and isinstance(bam.shape, ContextualShape)
    assert bam.guide_scores.sees_target and bam.owned_modules() == {}
    gauss = GaussianContextAttention(net, prior="mean", guide_mean="posterior")
    assert isinstance(gauss.prior_mean, SourceMeanPrior) and isinstance(gauss.guide_mean, PosteriorScores)
    assert isinstance(GaussianContextAttention(net).prior_mean, StandardPrior)
    for make, option, allowed in (
        (lambda v: BayesianAttention(net, family=v), "family", "('weibull', 'lognormal')"),
        (lambda v: BayesianAttention(net, prior=v), "prior", "('constant', 'learned', 'contextual')"),
        (lambda v: BayesianAttention(net, guide_scores=v), "guide_scores", "('prior', 'posterior')"),
        (lambda v: GaussianContextAttention(net, prior=v), "prior", "('standard', 'mean')"),
        (lambda v: GaussianContextAttention(net, guide_mean=v), "guide_mean", "('prior', 'posterior')"),
    ):
        with pytest.raises(ValueError, match=re.escape(f"{option} must be one of {allowed}, got 'gamma'")):
            make("gamma")


def test_gaussian_context_scale_head_is_registered_and_prediction_is_the_mean_context(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    pair = GaussianContextAttention(net)
    pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": 1e-2}), pair.elbo()).step(batch)
    assert any(name.startswith("context_scale$$$") for name in pyro.get_param_store().keys())
    enc = net.encode(batch)
    guide = poutine.trace(pair.guide).get_trace(batch).nodes["align"]["fn"]
    real = enc.target_mask
    assert torch.allclose(guide.mean[real], pair.context_mean(enc)[real]) and (guide.mean[~real] == 0).all()
    expected = net.output_logits(enc, pair.context_mean(enc)).softmax(-1)
    assert torch.allclose(predict(pair, batch, "soft"), expected)


def test_gumbel_categorical_view_is_exact(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    pair = GumbelAttention(net)
    exact = log_likelihood(pair.categorical(), batch)
    assert exact.exact and torch.allclose(exact.per_example, log_likelihood(MarginalLikelihood(net), batch).per_example)
    estimate = log_likelihood(pair, batch, num_samples=20)
    assert not estimate.exact and torch.isfinite(estimate.per_example).all()


def test_gumbel_categorical_kl_estimator(float64):
    """estimator="categorical": -loss = log p(y | x, z) at the relaxed draw minus the closed-form categorical KL."""
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    pair = GumbelAttention(net, estimator="categorical")
    pyro.set_rng_seed(2)
    loss = pair.elbo().loss(pair.model, pair.guide, batch)
    pyro.set_rng_seed(2)
    guide = poutine.trace(pair.guide).get_trace(batch)
    model = poutine.trace(poutine.replay(pair.model, trace=guide)).get_trace(batch)
    model.compute_log_prob()
    enc = net.encode(batch)
    kl = kl_divergence(
        dist.Categorical(logits=pair.posterior_logits(enc)), dist.Categorical(logits=pair.prior_logits(enc))
    )
    assert kl[1, 2] == 0  # a padded target: q = p
    assert loss == pytest.approx(float((kl.sum() - model.nodes["y"]["log_prob"].sum()).detach()))


def test_gumbel_training_gradients_finite_with_padding():
    """float32 end to end on a padded batch at tau = 0.1 (the paper's temperature)."""
    torch.manual_seed(0)
    net, batch = ToyNetwork(), pad_batch(make_toy_batch(B=4, S=5, T=3, pad_source=2), extra_source=2)
    for st, kl in ((False, "sampled"), (True, "sampled"), (False, "categorical")):
        pyro.clear_param_store()
        pair = GumbelAttention(net, straight_through=st, estimator=kl)
        for seed in range(5):
            pyro.set_rng_seed(seed)
            loss = pair.elbo().loss_and_grads(pair.model, pair.guide, batch)
            grads = [p.grad for p in net.parameters() if p.grad is not None]
            assert math.isfinite(loss) and grads and all(torch.isfinite(g).all() for g in grads)
            net.zero_grad()


def test_rws_loss_is_finite_and_works_with_svi(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    pair = RWSAttention(net, num_particles=50)
    elbo = pair.elbo()
    assert isinstance(elbo, pyro.infer.ReweightedWakeSleep)
    svi = pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": 1e-2}), elbo)
    theta = svi.step(batch)
    assert math.isfinite(theta) and math.isfinite(elbo.last_phi_loss)
    # the wake-theta loss is the negative per-token IWAE bound: above -log p(y | x), close to it with K = 50
    exact = -float(log_likelihood(pair, batch).per_example.sum())
    bounds = [elbo.loss(pair.model, pair.guide, batch) for _ in range(20)]
    assert exact - 0.05 < sum(bounds) / len(bounds) < exact + 0.5
    # Pyro's own estimator (whole-trace weights) and Pyro's tuple both run under SVI
    tuple_rws = AlignmentRWS(num_particles=3, per_token=False, return_tuple=True)
    out = pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": 1e-2}), tuple_rws).step(batch)
    assert isinstance(out, tuple) and all(math.isfinite(v) for v in out)
    with pytest.raises(ValueError, match="num_particles"):
        RWSAttention(net, num_particles=1)
