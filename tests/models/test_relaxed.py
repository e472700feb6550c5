"""The Dirichlet pair and its MaskedDirichlet; the observation distribution's two paths."""

from __future__ import annotations

import pyro
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributions import Dirichlet, kl_divergence

from pyro_attention.distributions import AlignedCategorical, MaskedDirichlet
from pyro_attention.distributions.enumeration import observed_table
from pyro_attention.inference import alignment_posterior, fit, log_likelihood, predict
from pyro_attention.models import MarginalLikelihood, RelaxedAttention, SoftAttention, VariationalAttention
from tests.support.toy_network import ToyNetwork, make_toy_batch, pad_batch


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 4), pad=st.integers(0, 3), seed=st.integers(0, 1000))
def test_masked_dirichlet_equals_dirichlet_on_real_positions(n, pad, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(n, generator=g, dtype=torch.float64) * 3 + 0.1
    b = torch.rand(n, generator=g, dtype=torch.float64) * 3 + 0.1
    junk = torch.rand(pad, generator=g, dtype=torch.float64) * 50
    mask = torch.tensor([True] * n + [False] * pad)
    p, q = MaskedDirichlet(torch.cat([a, junk]), mask), MaskedDirichlet(torch.cat([b, junk + 1]), mask)
    x = p.rsample()
    assert (x[n:] == 0).all() and torch.allclose(x.sum(), torch.tensor(1.0, dtype=x.dtype))
    if n > 1:
        assert torch.allclose(p.log_prob(x), Dirichlet(a).log_prob(x[:n]))
        assert torch.allclose(p.entropy(), Dirichlet(a).entropy())
        assert torch.allclose(kl_divergence(p, q), kl_divergence(Dirichlet(a), Dirichlet(b)))
    assert torch.allclose(p.mean[:n], a / a.sum())
    assert kl_divergence(p, p).abs() < 1e-12


def test_masked_dirichlet_rsample_has_gradients():
    alpha = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x = MaskedDirichlet(alpha, torch.tensor([True, True, False])).rsample()
    x[0].backward()
    assert torch.isfinite(alpha.grad).all() and alpha.grad[:2].abs().sum() > 0 and alpha.grad[2] == 0


def test_masked_dirichlet_rejects_empty_mask():
    with pytest.raises(ValueError, match="no unmasked position"):
        MaskedDirichlet(torch.ones(2, 3), torch.tensor([[True, False, False], [False, False, False]]))


def test_relaxed_likelihood_is_a_labelled_estimate_and_padding_invariant(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=3)
    pair = RelaxedAttention(net)
    pyro.set_rng_seed(1)
    ll = log_likelihood(pair, batch, num_samples=2000)
    assert not ll.exact and "importance sampling, K=2000" in ll.method
    assert (ll.per_token[~net.encode(batch).target_mask] == 0).all()
    # padding invariance, draw by draw: the same alignment z (zero on padded sources) has the same weight
    padded = pad_batch(batch)
    z_pad = pyro.poutine.trace(pair.guide).get_trace(padded).nodes["align"]["value"]  # (3, 4, 5)
    z = z_pad[:, :3, :4]
    assert (z_pad[..., 4:] == 0).all()
    weights = []
    for b, zz in ((batch, z), (padded, z_pad)):
        model = pyro.poutine.trace(pyro.poutine.condition(pair.model, {"align": zz})).get_trace(b)
        guide = pyro.poutine.trace(pyro.poutine.condition(pair.guide, {"align": zz})).get_trace(b)
        weights.append(model.log_prob_sum() - guide.log_prob_sum())
    assert torch.allclose(weights[0], weights[1], atol=1e-10)
    # the ELBO (one-sample estimate averaged) lies below the importance-weighted estimate
    elbo = -sum(pair.elbo().loss(pair.model, pair.guide, batch) for _ in range(200)) / 200
    assert elbo < float(ll.per_example.sum())
    post = alignment_posterior(pair, batch)
    assert set(post) == {"prior", "guide"}
    probs = predict(pair, batch, "marginal", num_samples=50)
    assert torch.allclose(probs.sum(-1), torch.ones_like(probs[..., 0]))


def test_relaxed_padded_target_contributes_nothing(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=2, S=3, T=2)
    pair = RelaxedAttention(net)
    pyro.set_rng_seed(0)
    guide_trace = pyro.poutine.trace(pair.guide).get_trace(batch)
    model_trace = pyro.poutine.trace(pyro.poutine.replay(pair.model, trace=guide_trace)).get_trace(batch)
    model_trace.compute_log_prob()
    guide_trace.compute_log_prob()
    diff = model_trace.nodes["align"]["log_prob"] - guide_trace.nodes["align"]["log_prob"]
    assert (diff[1, 1] == 0) and (model_trace.nodes["y"]["log_prob"][1, 1] == 0)


def test_relaxed_warm_start_and_training_run(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=2)
    pair = RelaxedAttention(net)
    result = fit(pair, [batch] * 6, num_epochs=1, warmup_steps=3, lr=1e-2, progress=False)
    assert result.steps == 6 and all(torch.isfinite(torch.tensor(result.losses)))


def test_fit_reports_validation_and_reduces_loss(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=3, S=4, T=2)
    pair = MarginalLikelihood(net)
    before = -float(log_likelihood(pair, batch).per_example.sum())
    result = fit(pair, [batch] * 50, val=[batch], num_epochs=2, lr=3e-2, progress=False)
    assert len(result.val_nll) == 2 and result.steps == 100
    after = -float(log_likelihood(pair, batch).per_example.sum())
    assert after < before
    assert result.val_nll[-1] == pytest.approx(after / 4)  # 2 + 1 + 1 real target tokens


def test_aligned_categorical_paths_agree(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch()
    enc = net.encode(batch)
    S = enc.shape[2]
    z = torch.arange(S).view(S, 1, 1)
    table = observed_table(net, enc)
    fast = AlignedCategorical(z, net, enc, table)
    slow = AlignedCategorical(z, net, enc)
    real = enc.source_mask.t().unsqueeze(-1) & enc.target_mask  # (S, B, T): a real source and target position
    assert not real.all()  # the batch is padded
    assert torch.allclose(fast.log_prob(enc.target)[real], slow.log_prob(enc.target)[real])
    assert (fast.log_prob(enc.target)[~real] == 0).all()  # the table's padded pairs, never read (test_kernels.py)
    other = (enc.target + 1) % net.num_classes
    assert torch.allclose(fast.log_prob(other), slow.log_prob(other))
    draw = AlignedCategorical(torch.zeros_like(enc.target), net, enc).sample()
    assert draw.shape == enc.target.shape and (draw < net.num_classes).all()
    assert torch.allclose(observed_table(net, enc, chunk_size=2), table)  # chunked table equals the one-shot table


@pytest.mark.parametrize("cls", [SoftAttention, MarginalLikelihood, VariationalAttention, RelaxedAttention])
def test_predictive_generates_answers(float64, cls):
    """Predictive on the unconditioned model samples alignments from the prior and outputs from the network."""
    torch.manual_seed(0)
    net, batch = ToyNetwork(num_classes=50), make_toy_batch(B=3, T=4, num_classes=50)
    pair = cls(net)
    samples = pyro.infer.Predictive(pyro.poutine.uncondition(pair.model), num_samples=20)(batch)
    assert samples["y"].shape == (20, 3, 4)
    assert (samples["y"] != batch.target).any()  # generated, not copied from the observations
    assert ("align" in samples) == (cls is not SoftAttention)
