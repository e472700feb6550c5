"""IBM Model 1 as a latent-alignment model: the neural IBM Model 1 (uniform prior, lexical expert) against plain EM,
the lexical expert's kernel, and posterior-threshold links with a threshold chosen on the other half."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyro
import pytest
import torch

from pyro_attention import cli
from pyro_attention.aer import alignment_error_rate
from pyro_attention.data import make_synthetic_translation
from pyro_attention.data.text import Vocab
from pyro_attention.data.translation import collate
from pyro_attention.distributions.enumeration import gathered_table, observed_table, padded_positions
from pyro_attention.inference import alignment_posterior, fit, log_likelihood
from pyro_attention.networks.distortion import DistortionNetwork
from pyro_attention.networks.lexical import IBM1Network
from pyro_attention.registry import make_pair
from pyro_attention.tasks.align import (
    ALIGN_NETWORKS,
    AlignConfig,
    Trained,
    alignment_probs,
    argmax_links,
    load_gold_corpus,
    threshold_links,
)
from pyro_attention.tasks.align.networks import Bitext
from tests.support.ibm1_em import EMIBM1
from tests.support.paths import REPO, SHARED_DATA

DATA = SHARED_DATA
RESULTS = REPO / "docs" / "results" / "aer.json"


def _small_text() -> tuple[list[list[str]], list[list[str]], list[set[tuple[int, int]]]]:
    c = make_synthetic_translation(400, seed=3, vocab_size=12)
    gold = [{(s, t) for t, s in enumerate(g) if s >= 0} for g in c.gold]
    return c.source, c.target, gold


def test_neural_ibm1_is_em_ibm1_on_a_small_text():
    """Trained to convergence, the marginal pair on IBM1Network (full-rank lexical table) and EM reach
    near-identical alignment posteriors, hence the same AER, and nearly EM's likelihood (its maximum)."""
    torch.set_num_threads(1)
    src, tgt, gold = _small_text()
    em = EMIBM1(src, tgt).iterate(50)
    em_post = [torch.tensor(em.posterior(s, t), dtype=torch.float32) for s, t in zip(src, tgt, strict=True)]
    sv, tv = Vocab.build(src), Vocab.build(tgt)
    pyro.set_rng_seed(0)
    pair = make_pair("marginal", IBM1Network(len(sv), len(tv), embedding_size=0))  # a free (full-rank) table
    data = Bitext([sv.encode(s) for s in src], [tv.encode(t) for t in tgt])
    fit(pair, data, num_epochs=30, batch_size=50, lr=0.05, progress=False)
    neural = alignment_probs(Trained(pair, sv, tv, 0.0), src, tgt)["posterior"]
    distance = torch.stack([0.5 * (a - b).abs().sum(-1).mean() for a, b in zip(em_post, neural, strict=True)]).mean()
    assert distance < 0.01  # mean total variation between the two posteriors of a target word
    aer_em = alignment_error_rate(argmax_links(em_post), gold).aer
    aer_nn = alignment_error_rate(argmax_links(neural), gold).aer
    assert abs(aer_em - aer_nn) < 0.005
    pair.network.eval()
    batch = collate(list(zip(data.source, data.target, strict=True)))
    tokens = sum(len(t) + 1 for t in tgt)  # with </s>, as EM counts them
    nll = -float(log_likelihood(pair, batch).per_example.sum()) / tokens
    em_nll = -em.log_likelihood(src, tgt) / tokens
    # EM's optimum bounds it; the softmax still leaves a little mass on words that never co-occur
    assert em_nll - 1e-3 < nll < em_nll + 0.05


def test_neural_ibm1_with_a_null_word_is_em_ibm1_with_one():
    """With a NULL word of prior p0 on both sides, the marginal pair on IBM1Network(null_prob=p0) trained by
    enumeration reaches EM's alignment posteriors (NULL column included) and nearly EM's likelihood."""
    from pyro_attention.networks.lexical import with_null_word

    torch.set_num_threads(1)
    src, tgt, gold = _small_text()
    em = EMIBM1(src, tgt, null_prob=0.2).iterate(50)
    em_post = [torch.tensor(em.posterior(s, t), dtype=torch.float32) for s, t in zip(src, tgt, strict=True)]
    sv, tv = Vocab.build(src), Vocab.build(tgt)
    pyro.set_rng_seed(0)
    pair = make_pair("marginal", IBM1Network(len(sv), len(tv), null_prob=0.2))
    data = Bitext([with_null_word(sv.encode(s)) for s in src], [tv.encode(t) for t in tgt])
    fit(pair, data, num_epochs=30, batch_size=50, lr=0.05, progress=False)
    neural = alignment_probs(Trained(pair, sv, tv, 0.0, null_word=True), src, tgt, null_word=True)["posterior"]
    assert all(a.shape == b.shape for a, b in zip(em_post, neural, strict=True))
    distance = torch.stack([0.5 * (a - b).abs().sum(-1).mean() for a, b in zip(em_post, neural, strict=True)]).mean()
    assert distance < 0.01
    assert argmax_links(em_post, null_word=True) == argmax_links(neural, null_word=True)
    pair.network.eval()
    tokens = sum(len(t) + 1 for t in tgt)
    nll = -float(log_likelihood(pair, collate(list(zip(data.source, data.target, strict=True)))).per_example.sum())
    em_nll = -em.log_likelihood(src, tgt) / tokens
    assert em_nll - 1e-3 < nll / tokens < em_nll + 0.05


def test_em_reference_first_iteration_is_the_uniform_posterior_count():
    """One EM step from a uniform table: t(f | e) = expected counts with posteriors 1/S, normalised per e."""
    em = EMIBM1([["a", "b"], ["a"]], [["x"], ["y"]], eos=False).iterate(1)
    post = em.posterior(["a", "b"], ["x"])
    # c(a, x) = 1/2, c(a, y) = 1 -> t(x | a) = 1/3; c(b, x) = 1/2 -> t(x | b) = 1
    assert post[0].tolist() == pytest.approx([0.25, 0.75])


@pytest.mark.parametrize("network", ["ibm1", "ibm1-rank", "distortion"])
def test_lexical_expert_kernel_and_the_ibm1_posterior(network):
    """The lexical expert's table equals the network's generic path; for IBM1 the exact posterior is
    t(y_t | x_s) / sum_s' t(y_t | x_s') and the prior is uniform."""
    torch.manual_seed(0)
    if network == "distortion":
        net = DistortionNetwork(9, 8, embedding_size=5, encoder_size=3, decoder_size=4, attention_size=3)
    else:
        net = IBM1Network(9, 8, 0 if network == "ibm1" else 5)
        if network == "ibm1":  # a free table, here not uniform
            torch.nn.init.normal_(net.src_embed.weight)
    batch = collate([([4, 5, 6], [4, 7]), ([8, 4], [5])])
    enc = net.encode(batch)
    table = observed_table(net, enc, net.chunk_size)
    assert net.output_experts(enc) is not None  # the lexical expert's path is what runs
    padding = padded_positions(enc)  # (B, T, S): 0 there
    assert torch.allclose(table, gathered_table(net, enc, net.chunk_size).masked_fill(padding, 0), atol=1e-6)
    pair = make_pair("marginal", net)
    probs = alignment_posterior(pair, batch)
    if network != "distortion":
        log_t = net.lexical_log_probs(batch.source.reshape(-1)).view(2, 3, -1)  # (B, S, V)
        t = log_t.exp().gather(-1, batch.target.unsqueeze(1).expand(2, 3, 3)).transpose(1, 2)  # (B, T, S)
        t = t * batch.source_mask.unsqueeze(1)
        real = batch.target_mask  # padded target positions are not scored
        assert torch.allclose(probs["posterior"][real], (t / t.sum(-1, keepdim=True))[real], atol=1e-6)
        assert torch.allclose(probs["prior"][1, :, :2], torch.full((3, 2), 0.5))


def test_diagonal_tension_is_fast_aligns_score_and_enters_the_prior():
    """-lambda |i/m - j/n| with positions from 1 and each sentence's own lengths; DistortionNetwork(tension=)
    adds it to Seq2Seq's prior scores and learns lambda."""
    from pyro_attention.networks.lexical import DiagonalTension

    d = DiagonalTension(2.0)
    assert d.tension == pytest.approx(2.0)
    target_mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    source_mask = torch.tensor([[True, True, False], [True, True, True]])
    scores = d(target_mask, source_mask).detach()
    for b, (m, n) in enumerate([(3, 2), (4, 3)]):
        for i in range(m):
            for j in range(n):
                assert float(scores[b, i, j]) == pytest.approx(-2.0 * abs((i + 1) / m - (j + 1) / n), abs=1e-6)
    with pytest.raises(ValueError, match="tension must be > 0, got 0"):
        DiagonalTension(0.0)
    torch.manual_seed(0)
    kwargs = dict(embedding_size=4, encoder_size=3, decoder_size=5, attention_size=3)
    plain, diag = DistortionNetwork(9, 8, **kwargs), DistortionNetwork(9, 8, tension=3.0, **kwargs)
    diag.load_state_dict({**plain.state_dict(), "diagonal.log_tension": diag.diagonal.log_tension.detach()})
    batch = collate([([4, 5, 6], [4, 7]), ([8, 4], [5])])
    added = diag.encode(batch).prior_scores - plain.encode(batch).prior_scores
    assert torch.allclose(added, diag.diagonal(batch.target_mask, batch.source_mask), atol=1e-6)
    assert "diagonal.log_tension" in dict(diag.named_parameters())


def test_jump_transition_is_an_hmm_predictive_over_the_filtered_posterior():
    """J(s | s') = softmax_s theta[clip(s - s')] over the real positions; predict = log sum_s' f(s') J(s | s');
    DistortionNetwork(max_jump=) adds it at t >= 1 with f_{t-1} ∝ prior_{t-1}(s) t(y_{t-1} | x_s), which is also
    the exact posterior of the previous word, and trains without NaNs on padded batches."""
    from pyro_attention.inference import alignment_posterior
    from pyro_attention.networks.lexical import JumpTransition

    torch.manual_seed(0)
    jt = JumpTransition(2)
    with torch.no_grad():
        jt.theta.copy_(torch.randn(5))
    mask = torch.tensor([[True, True, True, False]])
    J = jt.matrix(mask)[0].detach()
    for prev in range(4):
        scores = torch.tensor([float(jt.theta.detach()[min(2, max(-2, s - prev)) + 2]) for s in range(3)])
        assert torch.allclose(J[prev, :3], torch.softmax(scores, -1), atol=1e-6) and J[prev, 3] == 0
    f = torch.tensor([[0.2, 0.5, 0.3, 0.0]])
    want = torch.log(torch.stack([sum(f[0, p] * J[p, s] for p in range(4)) for s in range(3)]))
    assert torch.allclose(jt.predict(f, J.unsqueeze(0))[0, :3], want, atol=1e-6)
    with pytest.raises(ValueError, match="max_jump must be >= 1, got 0"):
        JumpTransition(0)

    kwargs = dict(embedding_size=4, encoder_size=3, decoder_size=5, attention_size=3)
    net = DistortionNetwork(9, 8, max_jump=2, **kwargs)
    torch.nn.init.normal_(net.lexical.src_embed.weight)
    plain = DistortionNetwork(9, 8, **kwargs)
    plain.load_state_dict({k: v for k, v in net.state_dict().items() if not k.startswith("transition.")})
    batch = collate([([4, 5, 6], [4, 7, 5]), ([8, 4], [5])])
    net.eval()
    plain.eval()
    with torch.no_grad():
        post = alignment_posterior(make_pair("marginal", net), batch)["posterior"]
        scores = net.encode(batch).prior_scores
        # step 0 has no previous word: Seq2Seq's own first scores
        assert torch.allclose(scores[:, 0], plain.encode(batch).prior_scores[:, 0], atol=1e-6)
        # step 1 = the decoder fed f_0's context, plus log sum_s' f_0(s') J(s | s'), f_0 the exact posterior of word 0
        src = net.encode_source(batch.source, batch.source_mask)
        state, fed = net.initial_state(src)
        _, _, state, _ = net.decoder_step(src, batch.target_in[:, 0], state, fed)
        f0 = post[:, 0]
        fed = torch.einsum("bs,bsd->bd", f0, src.values)
        _, a1, _, _ = net.decoder_step(src, batch.target_in[:, 1], state, fed)
        expected = a1 + net.transition.predict(f0, net.transition.matrix(batch.source_mask))
        real = batch.source_mask
        assert torch.allclose(scores[:, 1][real], expected[real], atol=1e-5)
    net.train()
    loss = -_log_likelihood_with_grad(net, batch)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)
    assert net.transition.theta.grad.abs().sum() > 0


def _log_likelihood_with_grad(net, batch):
    """The marginal pair's exact log-likelihood with gradients (its negative ELBO under TraceEnum_ELBO)."""
    import pyro

    pair = make_pair("marginal", net)
    pyro.clear_param_store()
    return -pair.elbo().differentiable_loss(pair.model, pair.guide, batch)


def _hmm_by_brute_force(emit, theta, lam):
    """``(p(y | x), p(z_t = s, y | x))`` of the HMM with jump scores ``theta`` (jumps clipped to +-2) and tension
    ``lam`` for emissions ``emit`` ``(m, n)`` (target word ``i``, source word ``s``), summed over all ``n^m``
    alignment sequences."""
    import itertools

    m, n = emit.shape
    d = torch.tensor([[-lam * abs((i + 1) / m - (j + 1) / n) for j in range(n)] for i in range(m)])
    first = torch.softmax(d[0], -1)
    step = [torch.softmax(torch.stack([theta[min(2, max(-2, s - q)) + 2] for s in range(n)]) + d[i], -1)
            for i in range(m) for q in range(n)]
    total, marg = 0.0, torch.zeros(m, n)
    for z in itertools.product(range(n), repeat=m):
        p = first[z[0]] * emit[0, z[0]]
        for i in range(1, m):
            p = p * step[i * n + z[i - 1]][z[i]] * emit[i, z[i]]
        total += p
        for i in range(m):
            marg[i, z[i]] += p
    return total, marg


@pytest.mark.parametrize("tension, spread", [(None, 1.0), (2.0, 1.0), (60.0, 25.0)])
def test_hmm_network_is_the_hmm_by_brute_force(tension, spread):
    """The marginal pair's exact log-likelihood of HMMNetwork is the inhomogeneous HMM's,
    log sum_z p(z_1) prod_t p(z_t | z_{t-1}) t(y_t | x_{z_t}) over all S^T alignment sequences with
    p(z_t = s | z_{t-1} = s') ∝ exp(theta[clip(s - s')] - lambda |t/m - s/n|); its per-token exact posterior is the
    filtered one (the last word's equals the smoothed one) and smoothed_posterior is p(z_t | x, y) at every t.
    Also with jump scores ``spread`` times as far apart and a steep diagonal (scores 60-80 apart: a factor e^-80
    between transition weights, which float32 holds only as products of normalised factors)."""

    from pyro_attention.inference import alignment_posterior, log_likelihood
    from pyro_attention.networks.lexical import HMMNetwork

    torch.manual_seed(0)
    net = HMMNetwork(9, 8, tension=tension, max_jump=2)
    torch.nn.init.normal_(net.lexical.src_embed.weight)
    with torch.no_grad():
        net.transition.theta.copy_(torch.randn(5) * spread)
    batch = collate([([4, 5, 6], [4, 7, 5]), ([8, 4], [5, 6])])
    pair = make_pair("marginal", net)
    ll = log_likelihood(pair, batch).per_example
    post = alignment_posterior(pair, batch)["posterior"]
    smoothed = net.smoothed_posterior(batch)
    lam = 0.0 if tension is None else net.diagonal.tension
    theta = net.transition.theta.detach()
    for b, (n, m) in enumerate([(3, 4), (2, 3)]):  # source words, target words with </s>
        t = net.lexical.observed_log_probs(batch)[b, :m, :n].detach().exp()
        total, marg = _hmm_by_brute_force(t, theta, lam)
        assert float(ll[b]) == pytest.approx(float(torch.log(total)), abs=1e-5)
        assert torch.allclose(smoothed[b, :m, :n], marg / total, atol=1e-5)
        assert torch.allclose(post[b, m - 1, :n], marg[m - 1] / total, atol=1e-5)
    assert float(smoothed[1, :, 2:].abs().sum()) == 0 and float(smoothed[1, 3:].abs().sum()) == 0  # padding


def test_hmm_network_with_a_decoder_expert_is_the_hmm_of_the_product_emission_by_brute_force():
    """With a DecoderExpert, HMMNetwork's emission is p(y_t | x_s, y_<t) = t(y_t | x_s) e^{u_t[y_t]} / sum_y
    t(y | x_s) e^{u_t[y]} (u_t the expert's logits for the prefix), the chain unchanged: the marginal pair's exact
    log-likelihood and smoothed_posterior against brute force over all S^T alignment sequences; the gradient reaches
    the expert; and the expert starts at u == 0 (the same likelihood as the network without it)."""

    from pyro_attention.inference import log_likelihood
    from pyro_attention.networks.lexical import DecoderExpert, HMMNetwork

    torch.manual_seed(3)
    batch = collate([([4, 5, 6], [4, 7, 5]), ([8, 4], [5, 6])])
    net = HMMNetwork(9, 8, tension=2.0, max_jump=2, decoder_expert=DecoderExpert(8, 5, 6))
    torch.nn.init.normal_(net.lexical.src_embed.weight)
    plain = HMMNetwork(9, 8, lexical=net.lexical, tension=2.0, max_jump=2)
    with torch.no_grad():
        net.transition.theta.copy_(torch.randn(5))
        plain.transition.theta.copy_(net.transition.theta)
    assert torch.allclose(log_likelihood(make_pair("marginal", net), batch).per_example,
                          log_likelihood(make_pair("marginal", plain), batch).per_example)  # u == 0 at the start
    torch.nn.init.normal_(net.decoder_expert.out.weight)
    torch.nn.init.normal_(net.decoder_expert.out.bias)
    pair = make_pair("marginal", net)
    ll = log_likelihood(pair, batch).per_example
    smoothed = net.smoothed_posterior(batch)
    u = net.decoder_expert(batch.target_in).detach()  # (B, T, V)
    lam, theta = net.diagonal.tension, net.transition.theta.detach()
    for b, (src, n, m) in enumerate([([4, 5, 6], 3, 4), ([8, 4], 2, 3)]):
        log_table = net.lexical.lexical_log_probs(torch.tensor(src)).detach()  # (n, V): log t(. | x_s)
        y = batch.target[b, :m]
        emit = torch.stack([torch.log_softmax(log_table + u[b, i], -1)[:, y[i]] for i in range(m)]).exp()  # (m, n)
        total, marg = _hmm_by_brute_force(emit, theta, lam)
        assert float(ll[b]) == pytest.approx(float(torch.log(total)), abs=1e-5)
        assert torch.allclose(smoothed[b, :m, :n], marg / total, atol=1e-5)
    total_ll = _log_likelihood_with_grad(net, batch)
    assert float(total_ll.detach()) == pytest.approx(float(ll.sum()), abs=1e-4)
    (-total_ll).backward()
    assert float(net.decoder_expert.out.weight.grad.abs().sum()) > 0
    assert float(net.decoder_expert.lstm.weight_ih_l0.grad.abs().sum()) > 0
    with pytest.raises(ValueError, match="decoder_expert has 7 classes, the network 8"):
        HMMNetwork(9, 8, decoder_expert=DecoderExpert(7))


@pytest.mark.parametrize("tension", [None, 2.0])
def test_hmm_network_with_a_null_word_is_och_and_neys_hmm_by_brute_force(tension):
    """With null_prob p0, HMMNetwork is the HMM over Och & Ney's doubled states, summed by brute force over all
    (2n)^m state sequences: real position s emits t(y | x_s), the NULL twin of s emits t(y | NULL) and remembers s;
    from s' or its twin the chain moves to the twin of s' with p0 and to real s with (1 - p0) p(s | s'), the first
    word to real s / the twin of s with (1 - p0) / p0 times the first position's distribution.  The likelihood, the
    smoothed posterior (NULL: both twins' mass at position 0) and the prior's p0 on NULL are checked."""
    import itertools

    from pyro_attention.inference import log_likelihood
    from pyro_attention.networks.lexical import NULL_WORD, HMMNetwork, with_null_word

    torch.manual_seed(1)
    p0 = 0.3
    net = HMMNetwork(9, 8, tension=tension, max_jump=2, null_prob=p0)
    torch.nn.init.normal_(net.lexical.src_embed.weight)
    with torch.no_grad():
        net.transition.theta.copy_(torch.randn(5))
    batch = collate([(with_null_word([4, 5, 6]), [4, 7, 5]), (with_null_word([8, 4]), [5, 6])])
    pair = make_pair("marginal", net)
    ll = log_likelihood(pair, batch).per_example
    smoothed = net.smoothed_posterior(batch)
    prior = net.encode(batch).prior_scores.exp()
    lam = 0.0 if tension is None else net.diagonal.tension
    theta = net.transition.theta.detach()
    log_t_all = net.lexical.observed_log_probs(batch).detach()
    for b, (n, m) in enumerate([(3, 4), (2, 3)]):  # real source words, target words with </s>
        t_word = log_t_all[b, :m, 1: n + 1].exp()  # (m, n): t(y_i | x_s)
        t_null = log_t_all[b, :m, 0].exp()  # (m,): t(y_i | NULL)
        d = torch.tensor([[-lam * abs((i + 1) / m - (j + 1) / n) for j in range(n)] for i in range(m)])
        first = torch.softmax(d[0], -1)
        step = [torch.softmax(torch.stack([theta[min(2, max(-2, s - q)) + 2] for s in range(n)]) + d[i], -1)
                for i in range(m) for q in range(n)]
        total, marg, null = 0.0, torch.zeros(m, n), torch.zeros(m)
        for z in itertools.product(range(2 * n), repeat=m):  # z < n: real position z; z >= n: twin of z - n
            pos = [k % n for k in z]
            p = (p0 if z[0] >= n else 1 - p0) * first[pos[0]]
            p = p * (t_null[0] if z[0] >= n else t_word[0, pos[0]])
            for i in range(1, m):
                if z[i] >= n:  # to the NULL twin of where we were
                    p = p * (p0 if pos[i] == pos[i - 1] else 0.0) * t_null[i]
                else:
                    p = p * (1 - p0) * step[i * n + pos[i - 1]][pos[i]] * t_word[i, pos[i]]
            total += p
            for i in range(m):
                if z[i] >= n:
                    null[i] += p
                else:
                    marg[i, z[i]] += p
        assert float(ll[b]) == pytest.approx(float(torch.log(total)), abs=1e-5)
        assert torch.allclose(smoothed[b, :m, 1: n + 1], marg / total, atol=1e-5)
        assert torch.allclose(smoothed[b, :m, 0], null / total, atol=1e-5)
        assert torch.allclose(prior[b, :m, 0], torch.full((m,), p0), atol=1e-6)
    with pytest.raises(ValueError, match=rf"source position 0 must be the NULL word <s> \(id {NULL_WORD}\).*row 1"):
        net.encode(collate([(with_null_word([4, 5]), [4]), ([8, 4], [5])]))
    with pytest.raises(ValueError, match="null_prob must be in \\(0, 1\\)"):
        HMMNetwork(9, 8, null_prob=1.0)


def test_ibm1_with_a_null_word_puts_p0_on_it():
    """IBM1Network(null_prob=p0): prior p0 on the NULL word, (1 - p0) / n on each word; the exact posterior is
    prior(s) t(y | x_s) normalised, the NULL word's row being t(y | NULL)."""
    from pyro_attention.networks.lexical import with_null_word

    torch.manual_seed(0)
    net = IBM1Network(9, 8, null_prob=0.2)
    torch.nn.init.normal_(net.src_embed.weight)
    batch = collate([(with_null_word([4, 5, 6]), [4, 7]), (with_null_word([8, 4]), [5])])
    probs = alignment_posterior(make_pair("marginal", net), batch)
    prior = torch.tensor([[0.2, 0.8 / 3, 0.8 / 3, 0.8 / 3], [0.2, 0.4, 0.4, 0.0]])
    real = batch.target_mask
    assert torch.allclose(probs["prior"], prior.unsqueeze(1).expand(2, 3, 4), atol=1e-6)
    t = net.observed_log_probs(batch).exp() * prior.unsqueeze(1)
    assert torch.allclose(probs["posterior"][real], (t / t.sum(-1, keepdim=True))[real], atol=1e-6)


def test_distortion_network_fixes_its_output():
    with pytest.raises(ValueError, match="output is fixed"):
        DistortionNetwork(9, 8, output="tanh")


# -- posterior-threshold links ------------------------------------------------------------------------------------
def _hand_made():
    """Even pairs want threshold 0.3 (two sure links at 0.45), odd pairs 0.6 (one sure link at 0.65, a wrong
    one at 0.35)."""
    even = torch.tensor([[0.45, 0.45, 0.10]])
    odd = torch.tensor([[0.65, 0.35]])
    probs = [even, odd, even, odd]
    gold = [{(0, 0), (1, 0)}, {(0, 0)}, {(0, 0), (1, 0)}, {(0, 0)}]
    return probs, gold


def test_threshold_is_chosen_on_the_other_half():
    probs, gold = _hand_made()
    links, chosen = threshold_links(probs, gold, grid=(0.3, 0.6))
    # even pairs are scored with the odd pairs' best threshold (0.6) and vice versa: never tuned on themselves
    assert chosen == (0.6, 0.3)
    assert links == [set(), {(0, 0), (1, 0)}, set(), {(0, 0), (1, 0)}]


def test_threshold_links_of_the_reverse_direction():
    probs, gold = _hand_made()
    inverted_gold = [{(t, s) for s, t in g} for g in gold]
    links, chosen = threshold_links(probs, inverted_gold, grid=(0.3, 0.6), reverse=True)
    assert chosen == (0.6, 0.3)
    assert links[1] == {(0, 0), (1, 0)}  # in the model's own (target, source) direction


def test_threshold_links_refuse_unequal_lengths():
    probs, gold = _hand_made()
    with pytest.raises(ValueError, match="3 alignments for 4 gold"):
        threshold_links(probs[:3], gold)


# -- the command line ---------------------------------------------------------------------------------------------
def test_align_config_network_errors():
    with pytest.raises(ValueError, match="network must be one of seq2seq, product, transformer, ibm1, ibm1-rank, "
                       "distortion, hmm"):
        AlignConfig(network="giza")
    with pytest.raises(ValueError, match=r"network 'ibm1' takes only \['marginal'\], got \['soft'\]"):
        AlignConfig(network="ibm1", models=["soft"])
    assert set(ALIGN_NETWORKS) == {"seq2seq", "product", "transformer", "ibm1", "ibm1-rank", "distortion", "hmm"}


def test_align_transformer_scores_its_alignment_head_and_its_cross_attention(tmp_path, capsys):
    """``align --network transformer``: the Transformer's prior, exact posterior and q, and its top layer's
    cross-attention averaged over heads (the usual baseline), scored as rows, a soft model's under that name beside
    its alignment head's weights; an LSTM size is refused."""
    pairs = ["the house is small ||| das haus ist klein", "the cat ||| die katze", "a small cat ||| eine kleine katze",
             "the small house ||| das kleine haus"]
    (tmp_path / "gold.txt").write_text("\n".join(pairs) + "\n")
    (tmp_path / "gold.p1").write_text("1-1 2-2 3-3 4-4\n1-1 2-2\n1-1 2p2 3-3\n1-1 2-2 3-3\n")
    out = tmp_path / "aer.json"
    code = cli.main(["align", "--gold-text", str(tmp_path / "gold.txt"), "--gold-links", str(tmp_path / "gold.p1"),
                     "--network", "transformer", "--models", "soft", "variational", "--epochs", "2", "--embedding", "8",
                     "--heads", "2", "--feedforward", "16", "--attention", "8", "--out", str(tmp_path / "runs"),
                     "--json", str(out)])
    assert code == 0
    rows = json.loads(out.read_text())
    variational = [r for r in rows if r["model"] == "transformer-variational"]
    assert {"prior", "posterior", "q", "cross-attention"} <= {r["source"] for r in variational}
    assert {r["source"] for r in rows if r["model"] == "transformer-soft"} == {"soft", "cross-attention"}
    assert all(r["model"] in ("transformer-soft", "transformer-variational") and 0 <= r["aer"] <= 100 for r in rows)
    code = cli.main(["align", "--gold-text", str(tmp_path / "gold.txt"), "--gold-links", str(tmp_path / "gold.p1"),
                     "--network", "transformer", "--models", "marginal", "--epochs", "1", "--embedding", "8",
                     "--heads", "2", "--feedforward", "16", "--attention", "8", "--embedding-values", "--out",
                     str(tmp_path / "runs"), "--json", str(out)])
    assert code == 0
    ev = [r for r in json.loads(out.read_text()) if r["model"] == "transformer-ev-marginal"]
    assert ev and all("the source expert on the aligned word's embedding" in r["note"] for r in ev)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["align", "--network", "transformer", "--encoder", "32"])
    assert "encoder: network 'transformer' does not use it" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["align", "--network", "hmm", "--embedding-values"])
    assert "embedding-values: network 'hmm' does not use it" in capsys.readouterr().err


def test_align_ibm1_from_the_command_line_writes_json_rows(tmp_path, capsys):
    pairs = ["the house is small ||| das haus ist klein", "the cat ||| die katze", "a small cat ||| eine kleine katze",
             "the small house ||| das kleine haus"]
    links = ["1-1 2-2 3-3 4-4", "1-1 2-2", "1-1 2p2 3-3", "1-1 2-2 3-3"]
    (tmp_path / "gold.txt").write_text("\n".join(pairs) + "\n")
    (tmp_path / "gold.p1").write_text("\n".join(links) + "\n")
    out = tmp_path / "aer.json"
    code = cli.main(["align", "--gold-text", str(tmp_path / "gold.txt"), "--gold-links", str(tmp_path / "gold.p1"),
                     "--network", "ibm1", "--models", "marginal", "--epochs", "2",
                     "--both-directions", "--out", str(tmp_path / "runs"), "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "posterior-threshold: thresholds" in printed and "each tuned on the other half" in printed
    rows = json.loads(out.read_text())
    assert {r["source"] for r in rows} == {"prior", "posterior", "posterior-threshold"}
    assert {r["symmetrisation"] for r in rows} == {"forward", "reverse", "intersection", "union", "grow-diag",
                                                  "grow-diag-final", "posterior-mean", "posterior-product"}
    assert {r["source"] for r in rows if r["symmetrisation"].startswith("posterior-")} == {"posterior"}
    # the gold pairs' alignment probabilities are kept: new links are scored again without training
    from pyro_attention.aer import alignment_error_rate
    from pyro_attention.data.alignments import read_pharaoh
    from pyro_attention.tasks.align.scoring import combined_links

    saved = torch.load(tmp_path / "runs" / "ibm1-marginal.probs.pt", weights_only=True)
    assert [p.shape for p in saved["forward"]["posterior"]] == [(4, 4), (2, 2), (3, 3), (3, 3)]
    assert [p.shape for p in saved["backward"]["posterior"]] == [(4, 4), (2, 2), (3, 3), (3, 3)]
    gold = list(read_pharaoh(tmp_path / "gold.p1", one_indexed=True))
    again = {m: alignment_error_rate(links, gold).aer * 100
             for m, links, _ in combined_links(saved["forward"]["posterior"], saved["backward"]["posterior"], gold)}
    assert again == pytest.approx({r["symmetrisation"]: r["aer"] for r in rows
                                   if r["symmetrisation"].startswith("posterior-")}, abs=0.01)
    for r in rows:
        assert set(r) >= {"corpus", "model", "output", "source", "symmetrisation", "aer", "precision", "recall",
                          "train_sentences", "wall_s"}
        assert r["corpus"] == "user" and r["model"] == "ibm1-marginal" and r["output"] == "lexical"
        assert r["train_sentences"] == 4 and 0 <= r["aer"] <= 100


@pytest.mark.parametrize("network, kind", [("distortion", "DistortionNetwork"), ("hmm", "HMMNetwork")])
def test_staged_aligners_start_from_ibm1_and_train_the_table_at_its_own_rate(tmp_path, monkeypatch, network, kind):
    """networks distortion and hmm: IBM Model 1 first (at --ibm1-lr), then the network holding that very IBM1 as its
    lexical model, the table at --table-lr and the prior at --lr (Pyro's per-parameter optim_args)."""
    from pyro_attention.tasks.align import networks as align_networks

    calls = []
    real = align_networks._fit_lexical

    def spy(network, data, epochs, batch_size, lr, seed, log, label, param_lr=None):
        calls.append((type(network).__name__, epochs, batch_size, lr, param_lr))
        data_sizes.append(len(data.source))
        if not isinstance(network, IBM1Network):
            assert network.lexical is calls_ibm1[0]  # the trained IBM1 itself, not a copy
            table = network.lexical.table.logits.detach().clone()  # the aligner's table is sparse
            assert table.abs().sum() > 0  # IBM1 moved it from the uniform start
        pair = real(network, data, epochs, batch_size, lr, seed, log, label, param_lr)
        if isinstance(network, IBM1Network):
            calls_ibm1.append(pair.network)
        return pair

    calls_ibm1: list = []
    data_sizes: list = []
    monkeypatch.setattr(align_networks, "_fit_lexical", spy)
    pairs = ["the house ||| das haus", "the cat ||| die katze", "a small cat ||| eine kleine katze"]
    (tmp_path / "gold.txt").write_text("\n".join(pairs) + "\n")
    (tmp_path / "gold.p1").write_text("1-1 2-2\n1-1 2-2\n1-1 2-2 3-3\n")
    code = cli.main(["align", "--gold-text", str(tmp_path / "gold.txt"), "--gold-links", str(tmp_path / "gold.p1"),
                     "--network", network, "--models", "marginal", "--ibm1-epochs", "2", "--epochs", "1",
                     "--lr", "0.01", "--table-lr", "0.002", "--ibm1-lr", "0.2", "--gold-repeat", "3",
                     "--source-prefix", "3", "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "aer.json"),
                     *(["--embedding", "4", "--encoder", "3", "--decoder", "5", "--attention", "3"]
                       if network == "distortion" else [])])  # the hmm has no LSTM: its sizes would be refused
    assert code == 0
    rows = json.loads((tmp_path / "aer.json").read_text())
    sources = {r["source"] for r in rows}
    # repeated gold text and cut words are part of the model: their rows never replace a baseline's
    assert all(r["model"] == f"{network}-gold3-srcprefix3-marginal" and "gold_repeat 3; source_prefix 3" in r["note"]
               for r in rows)
    hmm_sources = {"smoothed", "smoothed-threshold"}  # the HMM's forward-backward posterior, its threshold links
    assert (sources >= hmm_sources) if network == "hmm" else not (sources & hmm_sources)
    assert calls == [("IBM1Network", 2, align_networks.IBM1_BATCH_SIZE, 0.2, None),
                     (kind, 1, 32, 0.01, {"lexical.": 0.002})]
    assert data_sizes == [3 * 3] * 2  # the three gold pairs, three times each (no extra text)


def test_repeated_gold_text_is_unlabelled_training_text_in_either_direction():
    """--gold-repeat K: the gold pairs K times, then the extra text, the sides swapped for the reverse direction."""
    from pyro_attention.tasks.align.networks import training_text

    corpus = SimpleNamespace(source=[["a"], ["b"]], target=[["x"], ["y"]], extra_source=[["c"]], extra_target=[["z"]])
    assert training_text(corpus, False, 2) == ([["a"], ["b"], ["a"], ["b"], ["c"]],
                                                [["x"], ["y"], ["x"], ["y"], ["z"]])
    assert training_text(corpus, True, 1) == ([["x"], ["y"], ["z"]], [["a"], ["b"], ["c"]])


def test_word_prefixes_cut_each_side_and_keep_the_positions(tmp_path):
    """--source-prefix / --target-prefix (eflomal's stemming): every word of that side -- gold and extra text --
    cut to its first N characters; positions, gold links and the other side unchanged; 0 leaves the corpus as is."""
    from pyro_attention.tasks.align.corpus import truncated

    (tmp_path / "gold.txt").write_text("domy stojí ||| houses stand\ndům ||| house\n")
    (tmp_path / "gold.p1").write_text("1-1 2-2\n1-1\n")
    (tmp_path / "x.src").write_text("domům\n")
    (tmp_path / "x.tgt").write_text("houses\n")
    config = AlignConfig(gold_text=str(tmp_path / "gold.txt"), gold_links=str(tmp_path / "gold.p1"),
                         extra_src=str(tmp_path / "x.src"), extra_tgt=str(tmp_path / "x.tgt"), source_prefix=2,
                         models=["marginal"], network="hmm")
    corpus = load_gold_corpus(config, log=lambda _: None)
    assert corpus.source == [["do", "st"], ["dů"]] and corpus.extra_source == [["do"]]
    assert corpus.target == [["houses", "stand"], ["house"]] and corpus.extra_target == [["houses"]]
    assert [set(g.sure) for g in corpus.gold] == [{(0, 0), (1, 1)}, {(0, 0)}]
    assert "first 2 characters (source)" in corpus.description
    both = truncated(corpus, 1, 3)
    assert both.source == [["d", "s"], ["d"]] and both.target == [["hou", "sta"], ["hou"]]
    assert truncated(corpus) is corpus
    with pytest.raises(ValueError, match="target_prefix"):
        AlignConfig(target_prefix=-1)
    with pytest.raises(ValueError, match="source_prefix must be a number of characters >= 0"):
        truncated(corpus, -1)


def test_links_never_point_at_the_null_word():
    """With a NULL word at column 0: a word whose argmax is NULL gets no link, the words count from column 1, and
    threshold links skip NULL too."""
    probs = [torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.5, 0.3]])]
    assert argmax_links(probs, null_word=True) == [{(1, 1), (0, 2)}]
    assert argmax_links(probs) == [{(0, 0), (2, 1), (1, 2)}]
    gold = [{(1, 1), (0, 2)}, {(1, 1), (0, 2)}]
    links, _ = threshold_links(probs * 2, gold, grid=(0.15, 0.5), null_word=True)
    assert links[0] == {(1, 1), (0, 2)}  # 0.5 wins on both halves; NULL's 0.7 is no link


def test_align_hmm_with_a_null_word_from_the_command_line(tmp_path, capsys):
    """--null-prob trains IBM1 and the HMM with the NULL word in front of every source sentence and scores links
    over the words only; a network without a NULL word refuses the option, naming the ones that take it."""
    pairs = ["the house ||| das haus", "the cat ||| die katze", "a small cat ||| eine kleine katze"]
    (tmp_path / "gold.txt").write_text("\n".join(pairs) + "\n")
    (tmp_path / "gold.p1").write_text("1-1 2-2\n1-1 2-2\n1-1 2-2 3-3\n")
    args = ["align", "--gold-text", str(tmp_path / "gold.txt"), "--gold-links", str(tmp_path / "gold.p1"),
            "--models", "marginal", "--ibm1-epochs", "2", "--epochs", "1", "--null-prob", "0.2",
            "--both-directions", "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "aer.json")]
    assert cli.main(args + ["--network", "hmm"]) == 0
    rows = json.loads((tmp_path / "aer.json").read_text())
    assert {r["source"] for r in rows} >= {"posterior", "smoothed", "smoothed-threshold"}
    assert all(0 <= r["aer"] <= 100 and r["model"] == "hmm-null-marginal" and "null_prob 0.2" in r["note"]
               for r in rows)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        cli.main(args + ["--network", "distortion"])
    err = capsys.readouterr().err
    assert stop.value.code == 2  # a usage error
    assert "argument --null-prob: network 'distortion' does not use it (it would be ignored); ibm1, hmm do" in err


def test_align_hmm_with_a_decoder_expert_from_the_command_line(tmp_path, capsys):
    """--decoder-expert H trains the HMM with a DecoderExpert (rows "hmm-lm[-null]-marginal", output "product",
    the size in the note); a network that takes none refuses the option, naming the ones that do."""
    pairs = ["the house ||| das haus", "the cat ||| die katze", "a small cat ||| eine kleine katze"]
    (tmp_path / "gold.txt").write_text("\n".join(pairs) + "\n")
    (tmp_path / "gold.p1").write_text("1-1 2-2\n1-1 2-2\n1-1 2-2 3-3\n")
    args = ["align", "--gold-text", str(tmp_path / "gold.txt"), "--gold-links", str(tmp_path / "gold.p1"),
            "--models", "marginal", "--ibm1-epochs", "2", "--epochs", "1", "--decoder-expert", "4", "--embedding",
            "3", "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "aer.json")]
    assert cli.main(args + ["--network", "hmm", "--null-prob", "0.2"]) == 0
    rows = json.loads((tmp_path / "aer.json").read_text())
    assert {r["source"] for r in rows} >= {"posterior", "smoothed", "smoothed-threshold"}
    assert all(0 <= r["aer"] <= 100 and r["model"] == "hmm-lm-null-marginal" and r["output"] == "product"
               and "null_prob 0.2; decoder_expert 4" in r["note"] for r in rows)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        cli.main(args + ["--network", "distortion"])
    err = capsys.readouterr().err
    assert stop.value.code == 2  # a usage error
    assert "argument --decoder-expert: network 'distortion' does not use it (it would be ignored); hmm do" in err


def test_fit_param_lr_gives_a_submodule_its_own_rate():
    """fit(param_lr={"lexical.": r}): the lexical table moves by about r per Adam step, the prior by about lr."""
    from pyro_attention.inference import fit
    from pyro_attention.tasks.align.networks import Bitext

    torch.manual_seed(0)
    net = DistortionNetwork(9, 8, embedding_size=4, encoder_size=3, decoder_size=5, attention_size=3)
    torch.nn.init.normal_(net.lexical.src_embed.weight)  # a uniform table leaves the prior without a gradient
    before = {k: v.detach().clone() for k, v in net.named_parameters()}
    data = Bitext([[4, 5, 6], [7, 8]], [[4, 5], [6]])
    fit(make_pair("marginal", net), data, num_epochs=1, batch_size=2, lr=1e-2, param_lr={"lexical.": 1e-4},
        progress=False)
    moved = {k: float((v.detach() - before[k]).abs().max()) for k, v in net.named_parameters()}
    assert 0 < moved["lexical.src_embed.weight"] <= 1.1e-4  # Adam's first step moves each weight by at most lr
    assert 5e-3 < moved["score.att_v.weight"] <= 1.1e-2
    with pytest.raises(ValueError, match=r"param_lr\['lexical\.'\] must be a learning rate"):
        fit(make_pair("marginal", net), data, param_lr={"lexical.": 0.0}, progress=False)


# -- the real-data anchor ----------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "gold-alignments").exists(), reason="../shared/data (gold alignments) is absent")
@pytest.mark.skipif(not RESULTS.exists(), reason="docs/results/aer.json (the measured neural IBM1) is absent")
@pytest.mark.parametrize("corpus", ["enfr", "csen"])
def test_em_ibm1_matches_the_measured_neural_ibm1(corpus):
    """EM IBM Model 1 (5 iterations) on the same text as the measured neural IBM1 run: forward posterior-argmax
    AER within 2 points of the row in docs/results/aer.json."""
    rows = [r for r in json.loads(RESULTS.read_text()) if r["corpus"] == corpus and r["model"] == "ibm1-marginal"
            and r["source"] == "posterior" and r["symmetrisation"] == "forward"]
    if not rows:
        pytest.skip(f"no neural IBM1 row for {corpus} in {RESULTS}")
    config = AlignConfig(corpus=corpus, data_dir=str(DATA), extra_size=29000)
    c = load_gold_corpus(config, log=lambda _: None)
    src, tgt = c.source + c.extra_source, c.target + c.extra_target
    assert len(src) == rows[0]["train_sentences"]
    em = EMIBM1(src, tgt).iterate(5)
    links = [{(int(s), t) for t, s in enumerate(em.posterior(a, b).argmax(-1))} for a, b in zip(c.source, c.target,
                                                                                               strict=True)]
    aer = 100 * alignment_error_rate(links, c.gold).aer
    assert abs(aer - rows[0]["aer"]) <= 2.0, (aer, rows[0]["aer"])
