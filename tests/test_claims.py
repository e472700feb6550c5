"""Claims the docs make, checked against answers known independently on tiny problems.

1. Gumbel-softmax: "The gradients are correct (checked against finite differences)" (docs/neighbours.md) -- with
   the Gumbel noise fixed by the seed the loss is a deterministic function of the parameters, and autograd's
   gradient of both estimators' losses matches central finite differences on every parameter.
2. Beam search (pyro_attention/tasks/translation/decoding.py) with a beam wide enough to hold every hypothesis is
   exhaustive search: on a vocabulary of 3 words plus the 4 specials and outputs of at most 4 tokens, its output is
   the best of all 1,555 outputs scored by the model (the score checked against ``log_likelihood``); and whether a
   narrow beam is ever worse than greedy decoding.
3. K-max (``kmax_log_likelihood``) sums ``p(z = s) p(y | z = s)`` over the K positions most probable under the
   prior, against a brute force from each position's term, for every K, with padding.
4. NUTS (``nuts_alignment``) on a Dirichlet alignment over S = 2 sources whose posterior is far from the prior:
   its posterior mean is the one of 1-D quadrature over the simplex within a few Monte Carlo standard errors.
5. Alignment quality on the synthetic corpus with known alignments: the exact posterior's AER is below the prior's
   and below chance (uniform links) by wide margins.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyro
import pytest
import torch
from scipy import integrate

from pyro_attention.aer import alignment_error_rate
from pyro_attention.data import make_synthetic_translation
from pyro_attention.data.translation import BOS, EOS, collate
from pyro_attention.inference import enumerated_log_joint, fit, kmax_log_likelihood, log_likelihood
from pyro_attention.inference.mcmc import compare_to_guide, nuts_alignment
from pyro_attention.models import GumbelAttention, MarginalLikelihood, RelaxedAttention, VariationalAttention
from pyro_attention.networks import Seq2Seq
from pyro_attention.pair import observed_log_likelihood
from pyro_attention.registry import make_pair
from pyro_attention.tasks.align import Trained, alignment_probs, argmax_links
from pyro_attention.tasks.translation.decoding import greedy, translate
from tests.support.toy_network import ToyNetwork, make_toy_batch

# ----------------------------------------------------------------------------------------------------------------
# 1. Gumbel-softmax gradients against finite differences


def _gumbel_loss(pair, batch, seed: int) -> torch.Tensor:
    """The pair's differentiable loss with the Gumbel noise of ``seed``: a deterministic function of the network."""
    pyro.set_rng_seed(seed)
    return pair.elbo().differentiable_loss(pair.model, pair.guide, batch)


@pytest.mark.parametrize(
    "estimator, tol",
    [
        ("sampled", 1e-7),  # measured: max |autograd - finite difference| 1.4e-8 over the 174 coordinates
        ("categorical", 1e-8),  # measured: 1.0e-9
    ],
)
def test_gumbel_gradients_match_central_finite_differences(float64, estimator, tol):
    """Every coordinate of every network parameter (model and inference network, 174 numbers) at tau = 0.1 with
    padded sources and targets: autograd's gradient of the loss equals ``(L(w + e) - L(w - e)) / 2e``, e = 1e-6,
    with the same noise draw on both sides."""
    torch.manual_seed(0)
    net = ToyNetwork()
    batch = make_toy_batch(B=2, S=3, T=2)  # example 1: one padded source, one padded target
    pair = GumbelAttention(net, temperature=0.1, estimator=estimator)
    params = list(net.parameters())
    grads = torch.autograd.grad(_gumbel_loss(pair, batch, seed=3), params, allow_unused=True)
    eps = 1e-6
    errors, autograd = [], []
    with torch.no_grad():
        for p, g in zip(params, grads, strict=True):
            flat = p.view(-1)
            for i in range(flat.numel()):
                flat[i] += eps
                up = float(_gumbel_loss(pair, batch, seed=3))
                flat[i] -= 2 * eps
                down = float(_gumbel_loss(pair, batch, seed=3))
                flat[i] += eps
                a = 0.0 if g is None else float(g.view(-1)[i])
                errors.append(abs((up - down) / (2 * eps) - a))
                autograd.append(abs(a))
    assert len(errors) == 174
    assert max(errors) < tol, max(errors)
    # the check has teeth: gradients of order 1 (measured max 1.59 / 1.36), the inference network's parameters get
    # theirs through the reparameterised draw, and the noise matters (another seed, another loss)
    assert max(autograd) > 0.5
    names = [n for n, p in net.named_parameters() for _ in range(p.numel())]
    assert max(a for n, a in zip(names, autograd, strict=True) if n.startswith("post_")) > 1e-3
    with torch.no_grad():
        assert abs(float(_gumbel_loss(pair, batch, 3)) - float(_gumbel_loss(pair, batch, 4))) > 1e-3


# ----------------------------------------------------------------------------------------------------------------
# 2. Beam search against exhaustive search and greedy decoding

V = 7  # <pad> <s> </s> <unk> and the words 4, 5, 6
MAX_LEN = 4  # tokens, </s> counted (as translate's max_len)
WIDE = V * (V - 1) ** (MAX_LEN - 2)  # every live hypothesis's every continuation fits in the beam
#: the task the decoders are trained on a little: reverse 1-3 words (an untrained network's best output is empty)
REVERSE = [(list(s), list(reversed(s))) for n in (1, 2, 3) for s in itertools.product([4, 5, 6], repeat=n)]
SOURCES = [[4, 5, 6], [6, 4], [5], [5, 5, 4], [6, 6]]  # decoded together: padded sources in one batch


def _seq2seq(seed: int, steps: int = 20) -> MarginalLikelihood:
    """A float64 Seq2Seq trained ``steps`` full-batch steps on :data:`REVERSE`: its best outputs are empty or
    words (with 20 steps), and greedy decoding misses some of them."""
    torch.manual_seed(seed)
    net = Seq2Seq(V, V, embedding_size=4, encoder_size=3, decoder_size=5, attention_size=4).double()
    pair = MarginalLikelihood(net)
    pyro.clear_param_store()
    svi = pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": 0.05}), pair.elbo())
    batch = collate(REVERSE)
    for _ in range(steps):
        svi.step(batch)
    net.eval()
    return pair


def _next_log_probs(net, src, h, scores, rule: str, k: int) -> torch.Tensor:
    """``log p(y_t | x, y_<t)`` ``(N, V)`` under ``rule``, written out from the network's output layer."""
    log_prior = scores.masked_fill(~src.source_mask, -math.inf).log_softmax(-1)  # (N, S)
    if rule == "soft":
        return net.step_logits(h, torch.einsum("ns,nsd->nd", log_prior.exp(), src.values)).log_softmax(-1)
    S = src.values.shape[1]
    per_position = torch.stack([net.step_logits(h, src.values[:, s]).log_softmax(-1) for s in range(S)], 1)
    if rule == "kmax":  # the k most probable positions, their prior renormalised over them
        top = log_prior.topk(min(k, S), -1)
        log_prior = torch.full_like(log_prior, -math.inf).scatter(-1, top.indices, top.values.log_softmax(-1))
    return (log_prior.unsqueeze(-1) + per_position).logsumexp(1)


@torch.no_grad()
def _every_output(pair, source: list[int], rule: str, k: int = 2) -> dict[tuple[int, ...], float]:
    """The model score of every output beam search can return: the words (any id but ``</s>``) followed by
    ``</s>`` when shorter than ``MAX_LEN``, or ``MAX_LEN`` words cut off there (scored without ``</s>``)."""
    net = pair.network
    src = net.encode_source(torch.tensor([source]), torch.ones(1, len(source), dtype=torch.bool))
    state, fed = net.initial_state(src)
    prefixes, totals, scores = [()], torch.zeros(1), {}
    words = [w for w in range(V) if w != EOS]
    for step in range(MAX_LEN):
        rows = src.repeat_rows(len(prefixes))
        y = torch.tensor([p[-1] if p else BOS for p in prefixes])
        h, a, state, fed = net.decoder_step(rows, y, state, fed)
        total = totals[:, None] + _next_log_probs(net, rows, h, a, rule, k)  # (prefixes, V)
        last = step == MAX_LEN - 1
        grown = []  # (row, word) of every prefix that goes on
        for i, p in enumerate(prefixes):
            scores[p] = float(total[i, EOS])
            for w in words:
                if last:
                    scores[(*p, w)] = float(total[i, w])
                else:
                    grown.append((i, w))
        if last:
            return scores
        rows_kept, words_kept = torch.tensor(grown).T
        state = net.reorder_state(state, rows_kept)
        fed, totals = fed[rows_kept], total[rows_kept, words_kept]
        prefixes = [(*prefixes[i], w) for i, w in grown]
    return scores  # pragma: no cover


def test_the_exhaustive_scores_are_the_models_log_likelihood(float64):
    """The scorer of the exhaustive search is the model's: under the marginal rule, an output's score is the exact
    ``log_likelihood`` of it as a target (words then ``</s>``), for every output without special tokens (which a
    batch cannot hold), and the cut-off outputs score the first ``MAX_LEN`` tokens of their likelihood."""
    pair = _seq2seq(0)
    scores = _every_output(pair, SOURCES[0], "marginal")
    assert len(scores) == 1 + 6 + 36 + 216 + 1296
    plain = [y for y in scores if y and all(w >= 4 for w in y)]
    batch = collate([(SOURCES[0], list(y)) for y in plain])
    ll = log_likelihood(pair, batch)
    lengths = torch.tensor([len(y) for y in plain])
    full = torch.where(lengths < MAX_LEN, ll.per_example, ll.per_token[:, :MAX_LEN].sum(-1))
    ours = torch.tensor([scores[y] for y in plain])
    assert (ours - full).abs().max() < 3e-14  # measured: 3.6e-15 (scores from -12.7 to -1.7)


@pytest.mark.parametrize("rule", ["marginal", "soft", "kmax"])
def test_a_beam_wide_enough_is_exhaustive_search(float64, rule):
    """With ``beam_size`` = V (V-1)^(MAX_LEN-2) = 252 nothing is ever pruned: ``translate``, batched over five
    padded sources, returns for each the best of all 1,555 outputs under the rule (K = 2 for K-max), on three
    trained networks.  The best outputs are empty or two words, and greedy decoding misses some of them, so the
    comparison can fail."""
    greedy_missed, lengths = 0, set()
    for seed in range(3):
        pair = _seq2seq(seed)
        batch = collate([(s, [4]) for s in SOURCES])
        wide = translate(pair, batch.source, batch.source_mask, beam_size=WIDE, rule=rule, k=2, max_len=MAX_LEN)
        first = greedy(pair, batch.source, batch.source_mask, rule=rule, k=2, max_len=MAX_LEN)
        for i, source in enumerate(SOURCES):
            scores = _every_output(pair, source, rule)
            ranked = sorted(scores.values(), reverse=True)
            best = max(scores, key=scores.get)
            assert ranked[0] - ranked[1] > 1e-3  # a unique best (measured gaps >= 0.017)
            assert tuple(wide[i]) == best, (seed, source, wide[i], best)
            greedy_missed += tuple(first[i]) != best
            lengths.add(len(best))
    assert greedy_missed >= 3  # measured: 5 to 6 of the 15 cases, by rule
    assert lengths >= {0, 2}  # measured: {0, 2}


@pytest.mark.xfail(
    strict=True,
    reason="beam search can return a worse output than greedy decoding: measured in 7 of 150 cases (seeds 1, 6, 8; "
    "beams 2 and 3), e.g. seed 1, source [5], beam 2 returns [5] (score -1.911) where greedy returns [5, 5] "
    "(-1.194): [] and [5] have finished by step 2, and the search stops once beam_size hypotheses have finished, "
    "so the live [5, 5] is never completed.  All 7 are that stop; pruning alone also loses elsewhere (seed 44 "
    "untrained, output weights x8, max_len 8: beam 3's output scores 0.023 below greedy's)",
)
def test_beam_search_is_never_worse_than_greedy(float64):
    """Beam sizes 2-4 against greedy decoding in model score (marginal rule): 10 trained networks, five sources."""
    worse, cases = [], 0
    for seed in range(10):
        pair = _seq2seq(seed)
        for source in SOURCES:
            scores = _every_output(pair, source, "marginal")
            src, mask = torch.tensor([source]), torch.ones(1, len(source), dtype=torch.bool)
            first = greedy(pair, src, mask, max_len=MAX_LEN)[0]
            for beam in (2, 3, 4):
                found = translate(pair, src, mask, beam_size=beam, max_len=MAX_LEN)[0]
                cases += 1
                if scores[tuple(found)] < scores[tuple(first)] - 1e-12:
                    worse.append((seed, source, beam, found, first))
    assert cases == 150
    assert not worse, worse


# ----------------------------------------------------------------------------------------------------------------
# 3. K-max: the K most probable positions under the prior


@pytest.mark.parametrize("pair_class", [MarginalLikelihood, VariationalAttention])
def test_kmax_sums_the_k_most_probable_prior_positions(float64, pair_class):
    """``kmax_log_likelihood(pair, batch, k)`` for K = 1..S against ``log sum_{s in top-K} p(z = s) p(y | z = s)``
    with each position's term computed from the network and the top K found by sorting the prior; sources 4, 2, 2
    real, targets 3, 2, 2 real.  The K least probable positions give another number (so the test can fail)."""
    torch.manual_seed(0)
    net = ToyNetwork()
    batch = make_toy_batch(B=3, S=4, T=3, pad_source=2, pad_target=1)
    pair = pair_class(net)
    with torch.no_grad():
        enc = net.encode(batch)
        B, T, S = enc.shape
        log_prior = enc.prior_scores.masked_fill(~enc.source_mask[:, None, :], -math.inf).log_softmax(-1)
        terms = []
        for s in range(S):
            context = enc.values[:, s : s + 1].expand(B, T, -1)
            log_y = net.output_logits(enc, context).log_softmax(-1).gather(-1, enc.target[..., None])[..., 0]
            terms.append(log_prior[..., s] + log_y)
        joint = torch.stack(terms, -1)  # (B, T, S): log p(z_t = s | x) + log p(y_t | x, z_t = s)
        enumerated = enumerated_log_joint(pair, batch)[0].permute(1, 2, 0)  # the model's own, (B, T, S)
    real = enc.target_mask[..., None] & enc.source_mask[:, None, :]
    assert (enumerated[real] - joint[real]).abs().max() < 4e-15  # measured: 4.4e-16
    for k in range(1, S + 1):
        ll = kmax_log_likelihood(pair, batch, k)
        assert torch.equal(ll.per_token, pair.kmax_log_likelihood(batch, k).per_token)
        assert ll.exact == (k >= 4)
        for b in range(B):
            n = int(enc.source_mask[b].sum())
            for t in range(T):
                if not enc.target_mask[b, t]:
                    assert ll.per_token[b, t] == 0
                    continue
                by_prior = sorted(range(n), key=lambda s, b=b, t=t: -float(log_prior[b, t, s]))
                top = joint[b, t, by_prior[:k]].logsumexp(0)
                assert abs(float(ll.per_token[b, t] - top)) < 4e-15  # measured: at most 4.4e-16
                if k < n:
                    bottom = joint[b, t, by_prior[-k:]].logsumexp(0)
                    assert abs(float(top - bottom)) > 1e-3  # measured: at least 3.7e-3 (K = 3 of 4)
        if k == S:
            assert (ll.per_token - log_likelihood(pair, batch).per_token).abs().max() < 2e-15  # measured: 2.2e-16


# ----------------------------------------------------------------------------------------------------------------
# 4. NUTS against quadrature where the posterior is far from the prior


def test_nuts_posterior_mean_matches_quadrature_where_the_posterior_is_not_the_prior(float64):
    """One token over S = 2 sources, z = (t, 1 - t) ~ Dirichlet(alpha) under the prior; the output depends
    strongly on t (its weights scaled up: p(y | z) falls from 6.5e-8 at t = 0 to 1.5e-10 at t = 1), so the
    posterior mean E[t | x, y] = 0.096 is far from the prior's 0.490.  The quadrature of
    ``t Dirichlet(t) p(y | x, t)`` (QUADPACK with the Dirichlet's end-point singularities as weights) is the
    answer; NUTS's mean (2 chains x 300 draws) is within 4 Monte Carlo standard errors of it."""
    az = pytest.importorskip("arviz")
    torch.manual_seed(1)
    net = ToyNetwork()
    with torch.no_grad():
        net.out_hidden.weight.mul_(8.0)
        net.out.weight.mul_(15.0)
    batch = make_toy_batch(B=1, S=2, T=1, seed=1)
    pair = RelaxedAttention(net)
    with torch.no_grad():
        enc = net.encode(batch)
        alpha = pair.prior(enc).concentration[0, 0].numpy()  # (0.600, 0.625): singular at both ends

        def likelihood(t: float) -> float:
            z = torch.tensor([t, 1.0 - t]).reshape(1, 1, 2)
            return float(observed_log_likelihood(net.output_logits(enc, pair.sample_context(enc, z)), enc).exp())

        kw = dict(weight="alg", wvar=(alpha[0] - 1, alpha[1] - 1), epsabs=0.0, epsrel=1e-11)
        mass = integrate.quad(likelihood, 0, 1, **kw)[0]
        exact = integrate.quad(lambda t: t * likelihood(t), 0, 1, **kw)[0] / mass
    prior_mean = float(alpha[0] / alpha.sum())
    data = nuts_alignment(pair, batch, num_samples=300, warmup_steps=200, num_chains=2, seed=0)
    nuts = float(compare_to_guide(pair, batch, data)["nuts_mean"][0, 0])
    summary = az.summary(data, var_names=["align"])
    draws = np.asarray(data.posterior["align"].values)[..., 0, 0, 0]
    mcse = float(draws.std() / math.sqrt(summary["ess_bulk"].values[0]))
    assert (summary["r_hat"] < 1.05).all()
    assert abs(nuts - exact) < 4 * mcse, (nuts, exact, mcse)  # measured: 0.0084 = 0.7 s.e. (s.e. 0.011)
    assert abs(exact - prior_mean) > 20 * mcse  # measured: 0.394 = 35 s.e.
    assert abs(nuts - prior_mean) > 20 * mcse


# ----------------------------------------------------------------------------------------------------------------
# 5. Alignment error rate on synthetic text with known alignments


def test_exact_posterior_aligns_better_than_the_prior_and_chance_on_synthetic_text():
    """The marginal-likelihood pair on a tiny Seq2Seq, 6 epochs on 300 synthetic pairs (vocabulary 12, 3-6 source
    words: one-to-many, context and reordering rules), argmax links on 100 held-out pairs: the exact posterior's
    AER is 0.17 against the prior's 0.55 and chance's 0.78 (one uniformly random source word per target word,
    ``1 - mean 1/S``).  Over training seeds 0-3 the posterior measured 0.17-0.22, the prior 0.55-0.65."""
    train = make_synthetic_translation(300, seed=0, vocab_size=12, min_len=3, max_len=6)
    test = make_synthetic_translation(100, seed=1, vocab_size=12, min_len=3, max_len=6)
    source_vocab, target_vocab = train.vocabs()
    torch.manual_seed(0)
    net = Seq2Seq(len(source_vocab), len(target_vocab), embedding_size=8, encoder_size=8, decoder_size=16,
                  attention_size=8)
    pair = make_pair("marginal", net)
    fit(pair, train, num_epochs=6, batch_size=20, lr=0.02, progress=False, seed=0)
    probs = alignment_probs(Trained(pair, source_vocab, target_vocab, 0.0), test.source, test.target)
    gold = [{(s, t) for t, s in enumerate(g)} for g in test.gold]
    aer = {name: alignment_error_rate(argmax_links(p), gold).aer for name, p in probs.items()}
    tokens = sum(len(t) for t in test.target)
    chance = 1.0 - sum(len(t) / len(s) for s, t in zip(test.source, test.target, strict=True)) / tokens
    assert set(aer) == {"prior", "posterior"}
    assert aer["posterior"] < aer["prior"] - 0.25  # measured gap: 0.38 (0.35-0.44 over seeds 0-3)
    assert aer["posterior"] < chance - 0.45  # measured gap: 0.62 (0.57-0.62)
    assert aer["prior"] < chance - 0.05  # measured gap: 0.23 (0.13-0.23)
