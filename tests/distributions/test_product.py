"""The product-of-experts output layer: its normaliser kernel and every enumerated pair on it, against brute force.

Per target token the enumerated pairs need, for every source position ``s``,

    log p(y_t | z_t = s) = u_t[y_t] + v_s[y_t] - log sum_y exp(u_t[y] + v_s[y]),

checked here three ways: the kernel (one (T x V)(V x S) product per example), the naive all-(t, s)
``logsumexp`` over the gathered logits (the network's generic path), and full brute-force enumeration of the
joint ``p(y, z | x)`` through the Pyro model.
"""

from __future__ import annotations

import pyro
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyro_attention.data import make_region_qa
from pyro_attention.data.translation import collate
from pyro_attention.distributions.enumeration import gathered_table, observed_table, padded_positions
from pyro_attention.distributions.kernels import product_log_normalizer
from pyro_attention.inference import alignment_posterior, log_likelihood
from pyro_attention.models import PAIRS, HardAttention, MarginalLikelihood, VariationalAttention
from pyro_attention.networks import AttentionNetwork, RegionQA, Seq2Seq
from pyro_attention.networks.attention import DotScore, GeneralScore
from pyro_attention.networks.output import ConcatTanhOutput, ProductOfExperts, TanhOutput
from tests.support.exactness import brute_force_log_likelihood

V = 5
ENUMERATED = [(MarginalLikelihood, {}), (HardAttention, {"estimator": "enum"}),
              (VariationalAttention, {"estimator": "enum"})]
IDS = ["marginal", "hard-enum", "va-enum"]


def _naive(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(u.unsqueeze(2) + v.unsqueeze(1), -1)  # (B, T, S, V) -> (B, T, S)


def _seq2seq(seed: int = 0, **kw) -> tuple[Seq2Seq, object]:
    """B=2, S=3, T=3, V=5; the second pair is padded on both sides."""
    torch.manual_seed(seed)
    net = Seq2Seq(V, V, embedding_size=4, encoder_size=3, decoder_size=5, attention_size=4, output=ProductOfExperts,
                  **kw)
    return net, collate([([4, 3, 4], [3, 4]), ([3, 4], [4])])


def _region(seed: int = 0) -> tuple[RegionQA, object]:
    torch.manual_seed(seed)
    ds = make_region_qa(3, num_regions=(2, 4), num_kinds=4, seed=seed)
    net = RegionQA(ds.feature_size, len(ds.answers), vocab_size=len(ds.vocab), hidden_size=6, output=ProductOfExperts)
    return net, ds.data


MAKERS = [_seq2seq, _region]
MAKER_IDS = ["seq2seq", "region-qa"]


def _generic(net: AttentionNetwork, enc) -> torch.Tensor:  # noqa: ANN001
    """The generic path: gather every x_s, full logits, log_softmax at the observed token; 0 at a padded (target,
    source) pair, as :func:`observed_table` gives it."""
    return gathered_table(net, enc).masked_fill(padded_positions(enc), 0.0)


# -- the kernel ------------------------------------------------------------------------------------------------
def test_kernel_equals_naive_logsumexp_in_value_and_gradient(float64):
    torch.manual_seed(0)
    u = (3 * torch.randn(2, 4, 7)).requires_grad_()
    v = (3 * torch.randn(2, 3, 7)).requires_grad_()
    assert torch.allclose(product_log_normalizer(u, v), _naive(u, v), atol=1e-12)
    assert torch.autograd.gradcheck(product_log_normalizer, (u, v))


def test_float32_stays_exact_and_finite_where_the_experts_disagree_by_hundreds_of_nats():
    """u peaks at word 0, v_s at word 1: every shifted product e^(u-m) e^(v-n) underflows to 0 in float32."""
    B, T, S, Vb = 1, 2, 3, 6
    u = torch.full((B, T, Vb), -300.0)
    u[..., 0] = 0.0
    v = torch.full((B, S, Vb), -300.0)
    v[..., 1] = 0.0
    v[0, 2] = torch.linspace(-3, 3, Vb)  # one agreeable expert: its entries need no recomputation
    u.requires_grad_(), v.requires_grad_()
    got = product_log_normalizer(u, v)
    want = _naive(u.double(), v.double())
    assert torch.isfinite(got).all()
    assert torch.allclose(got.double(), want, rtol=1e-6)
    gu, gv = torch.autograd.grad(got.sum(), (u, v))
    wu, wv = torch.autograd.grad(want.sum(), (u, v))  # float64 reference through the same leaves
    assert torch.isfinite(gu).all() and torch.isfinite(gv).all()
    assert torch.allclose(gu.double(), wu.double(), atol=1e-6) and torch.allclose(gv.double(), wv.double(), atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 4), S=st.integers(1, 4), Vb=st.integers(2, 9),
       scale=st.sampled_from([0.1, 1.0, 10.0, 60.0, 200.0]), seed=st.integers(0, 10_000))
def test_kernel_float32_matches_float64_at_any_scale(B, T, S, Vb, scale, seed):
    g = torch.Generator().manual_seed(seed)
    u = scale * torch.randn(B, T, Vb, generator=g, dtype=torch.float64)
    v = scale * torch.randn(B, S, Vb, generator=g, dtype=torch.float64)
    got = product_log_normalizer(u.float(), v.float())
    want = _naive(u, v)
    assert torch.isfinite(got).all()
    assert torch.allclose(got.double(), want, rtol=2e-6, atol=1e-5 * (1 + scale))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shifted_exp_has_no_subnormal_entry_and_is_exact_above_the_floor(dtype):
    """Subnormal factors would slow the products 20-100 times on the CPU: ``shifted_exp`` raises them to ``e`` times
    the smallest normal number and leaves every other entry exactly ``exp(x - shift)``."""
    from pyro_attention.distributions.kernels import probability_floor, shifted_exp

    x = torch.linspace(-2000.0, 0.0, 20001, dtype=dtype).view(1, -1)
    e = shifted_exp(x, torch.zeros(1, 1, dtype=dtype))
    tiny = torch.finfo(dtype).tiny
    assert ((e == 0) | (e >= tiny)).all() and (e > 0).all()
    above = x >= probability_floor(dtype)
    assert torch.equal(e[above], torch.exp(x[above])) and (e[~above] < 3 * tiny).all()


def test_kernel_shape_errors():
    with pytest.raises(ValueError, match=r"expected u \(B, T, V\) and v \(B, S, V\), got \(2, 3, 4\) and \(2, 3, 5\)"):
        product_log_normalizer(torch.zeros(2, 3, 4), torch.zeros(2, 3, 5))


# -- the networks ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", MAKERS, ids=MAKER_IDS)
def test_table_equals_the_generic_path_in_value_and_gradient(float64, make):
    net, batch = make()
    net.double()
    enc = net.encode(batch)
    fast, slow = observed_table(net, enc), _generic(net, enc)
    assert net.output_experts(enc) is not None  # the product-of-experts path is what runs
    assert isinstance(net.head, ProductOfExperts) and net.output_layer is None
    assert torch.allclose(fast, slow, atol=1e-12)
    w = torch.randn(fast.shape)
    g1 = torch.autograd.grad((fast * w).sum(), list(net.parameters()), allow_unused=True)
    g2 = torch.autograd.grad((_generic(net, net.encode(batch)) * w).sum(), list(net.parameters()), allow_unused=True)
    for a, b in zip(g1, g2, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("make", MAKERS, ids=MAKER_IDS)
@pytest.mark.parametrize("cls,kw", ENUMERATED, ids=IDS)
def test_log_likelihood_equals_brute_force_enumeration(float64, make, cls, kw):
    net, batch = make()
    net.double()
    pair = cls(net, **kw)
    ll = log_likelihood(pair, batch)
    assert ll.exact
    enc = net.encode(batch)
    assert torch.allclose(brute_force_log_likelihood(pair, batch), ll.per_example, atol=1e-10)
    naive = (pair.prior_logits(enc).log_softmax(-1) + _generic(net, enc)).logsumexp(-1) * enc.target_mask
    assert torch.allclose(ll.per_token, naive, atol=1e-10)


@pytest.mark.parametrize("make", MAKERS, ids=MAKER_IDS)
def test_posterior_is_bayes_rule_with_zero_mass_at_padding(float64, make):
    net, batch = make()
    net.double()
    pair = VariationalAttention(net)
    enc = net.encode(batch)
    joint = pair.prior_logits(enc).log_softmax(-1) + _generic(net, enc)
    post = alignment_posterior(pair, batch)["posterior"]
    real_t = enc.target_mask.unsqueeze(-1).expand_as(post)
    assert torch.allclose(post[real_t], joint.softmax(-1)[real_t], atol=1e-10)
    assert (post[~enc.source_mask.unsqueeze(1).expand_as(post)] == 0).all()


@pytest.mark.parametrize("make", MAKERS, ids=MAKER_IDS)
@pytest.mark.parametrize("cls,kw", ENUMERATED, ids=IDS)
def test_elbo_and_its_gradient_equal_the_naive_computation(float64, make, cls, kw, monkeypatch):
    """The enumerated ELBO (= -log p for marginal likelihood) and its gradient with the kernel equal those with the
    naive all-(t, s) logsumexp, and the ELBO is below the exact log-likelihood."""
    net, batch = make()
    net.double()
    pair = cls(net, **kw)
    params = list(net.parameters())

    def loss_and_grad():
        loss = pair.elbo().differentiable_loss(pair.model, pair.guide, batch)
        return loss.detach(), torch.autograd.grad(loss, params, allow_unused=True)

    fast, g_fast = loss_and_grad()
    monkeypatch.setattr(type(net), "output_experts", lambda self, enc: None)  # the kernel's generic path
    slow, g_slow = loss_and_grad()
    monkeypatch.undo()
    assert torch.allclose(fast, slow, atol=1e-10)
    for a, b in zip(g_fast, g_slow, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-10)
    assert -fast <= log_likelihood(pair, batch).per_example.sum() + 1e-10


@pytest.mark.parametrize("make", MAKERS, ids=MAKER_IDS)
def test_every_pair_trains_on_the_product_layer(make):
    for name in sorted(PAIRS):
        pyro.clear_param_store()
        net, batch = make(seed=1)
        pair = PAIRS[name](net)
        svi = pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": 0.05}), pair.elbo())
        losses = [svi.step(batch) for _ in range(25)]
        assert all(torch.isfinite(torch.tensor(losses))), name
        assert sum(losses[-5:]) < sum(losses[:5]), name


def test_uniform_prior_and_no_decoder_expert_is_ibm_model_1(float64):
    """With u == 0 and a uniform prior, p(y_t | x) = (1/S) sum_s t(y_t | x_s), t = softmax(U_x x_s)."""
    net, batch = _seq2seq(seed=2)
    net.double()
    with torch.no_grad():
        net.head.query_expert.weight.zero_()
        net.head.query_expert.bias.zero_()
    pair = MarginalLikelihood(net)
    enc = net.encode(batch)
    enc.prior_scores = torch.zeros_like(enc.prior_scores)  # uniform over the real source positions
    lexical = net.head.source_expert(enc.values).log_softmax(-1)  # (B, S, V): log t(y | x_s)
    B, T, S = enc.shape
    ibm1 = torch.stack([
        torch.stack([
            (lexical[b, : int(enc.source_mask[b].sum()), enc.target[b, t]].exp().mean()).log() for t in range(T)
        ]) for b in range(B)
    ])
    table = observed_table(net, enc)
    model = (pair.prior_logits(enc).log_softmax(-1) + table).logsumexp(-1)
    assert torch.allclose(model[enc.target_mask], ibm1[enc.target_mask], atol=1e-12)


def test_soft_attention_is_not_the_marginal_on_the_product_layer(float64):
    """The softmax keeps the model nonlinear in the context: p(y | E[c]) != E[p(y | c)]."""
    net, batch = _seq2seq(seed=3)
    net.double()
    soft = log_likelihood(PAIRS["soft"](net), batch).per_example
    exact = log_likelihood(MarginalLikelihood(net), batch).per_example
    assert not torch.allclose(soft, exact, atol=1e-6)


def test_parts_that_are_not_classes_of_their_kind_are_refused():
    """A network's parts are classes; a name (resolved only by configs and the command line) or a class of another
    kind is a ``TypeError`` that lists the classes, and for a known name says which class it stands for."""
    with pytest.raises(TypeError, match=r"Seq2Seq: output must be a subclass of OutputLayer \(TanhOutput, "
                                        r"ProductOfExperts\), got 'linear'$"):
        Seq2Seq(V, V, output="linear")
    with pytest.raises(TypeError, match=r"got 'product'; the name 'product' stands for ProductOfExperts"):
        Seq2Seq(V, V, output="product")
    with pytest.raises(TypeError, match=r"RegionQA: output must be a subclass of OutputLayer \(ConcatTanhOutput, "
                                        r"ProductOfExperts\), got 'poe'"):
        RegionQA(4, 3, question_size=2, output="poe")
    with pytest.raises(TypeError, match=r"attention must be a subclass of AttentionScore \(MLPScore, GeneralScore, "
                                        r"DotScore, ScaledDotScore\), got <class "
                                        r"'pyro_attention.networks.output.TanhOutput'>"):
        Seq2Seq(V, V, attention=TanhOutput)
    with pytest.raises(ValueError, match="attention 'dot' needs the decoder size to equal the value size"):
        Seq2Seq(V, V, encoder_size=3, decoder_size=5, attention=DotScore)
    with pytest.raises(ValueError, match="RegionQA: TanhOutput: one query per target position; for one per example "
                                         "use ConcatTanhOutput"):
        RegionQA(4, 3, question_size=2, output=TanhOutput)
    with pytest.raises(ValueError, match="Seq2Seq: ConcatTanhOutput: one query per example"):
        Seq2Seq(V, V, output=ConcatTanhOutput)


@pytest.mark.parametrize("attention", [GeneralScore, DotScore])
def test_luong_scores_train_and_enumerate_exactly(float64, attention):
    torch.manual_seed(0)
    net = Seq2Seq(V, V, embedding_size=4, encoder_size=3, decoder_size=6, attention=attention, output=ProductOfExperts)
    net.double()
    batch = collate([([4, 3, 4], [3, 4]), ([3, 4], [4])])
    pair = MarginalLikelihood(net)
    enc = net.encode(batch)
    src = net.encode_source(batch.source, batch.source_mask)
    h = torch.randn(2, 6)
    want = (src.values @ (net.score.att_w.weight.T @ h.unsqueeze(-1)) if attention is GeneralScore
            else src.values @ h.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(net.score.scores(h, src.keys), want, atol=1e-12)
    naive = (pair.prior_logits(enc).log_softmax(-1) + _generic(net, enc)).logsumexp(-1) * enc.target_mask
    assert torch.allclose(log_likelihood(pair, batch).per_token, naive, atol=1e-10)
