"""Structured attention: the dynamic programmes and the three pairs against brute-force enumeration.

Plate diagram of :class:`SegmentationMarginal` (``S`` source positions; ``first`` and every ``align_i``
enumerated, ``align_i`` inside ``pyro.markov`` over ``i``)::

    +-- batch (B) -------------------------------------------------------+
    |  +-- target (T) -----------------------------------------------+  |
    |  |   first_bt ~ P(first selected | x)           (S + 1 values)  |  |
    |  |   align_0 -> align_1 -> ... -> align_{S-1}   (chain | first) |  |
    |  |   y_bt ~ p(y | x, x_{first_bt})                     (obs)    |  |
    |  +-------------------------------------------------------------+  |
    +--------------------------------------------------------------------+
"""

from __future__ import annotations

import functools
import itertools
import math
from contextlib import contextmanager

import pyro
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pyro.infer import Predictive

from pyro_attention.distributions.structures import (
    chain_conditionals,
    chain_first_selected,
    chain_log_partition,
    chain_marginals,
    chain_sample,
    tree_log_partition,
    tree_marginals,
)
from pyro_attention.inference import log_likelihood, predict
from pyro_attention.models.structured import SegmentationAttention, SegmentationMarginal
from pyro_attention.models.structured_tree import SyntacticAttention
from tests.support.toy_network import ToyNetwork, make_toy_batch, pad_batch, region_case, toy_case

PAIRS = [SegmentationAttention, SyntacticAttention, SegmentationMarginal]


# -- brute force -----------------------------------------------------------------------------------------------
def _chain_brute(unary: torch.Tensor, pairwise: torch.Tensor, length: int) -> dict[str, torch.Tensor]:
    """Enumerate all 2^L selections of one chain: log Z, p(z_i = 1), P(first = i) (last: none), log p(z)."""
    S = unary.shape[0]
    zs = list(itertools.product((0, 1), repeat=length))
    scores = torch.stack(
        [
            sum((unary[i, z[i]] for i in range(length)), unary.new_zeros(()))
            + sum((pairwise[i - 1, z[i - 1], z[i]] for i in range(1, length)), unary.new_zeros(()))
            for z in zs
        ]
    )
    log_z = scores.logsumexp(0)
    probs = (scores - log_z).exp()
    marg, first = unary.new_zeros(S), unary.new_zeros(S + 1)
    for p, z in zip(probs, zs, strict=True):
        marg[:length] += p * torch.tensor(z, dtype=unary.dtype)
        first[z.index(1) if 1 in z else S] += p
    return {"log_z": log_z, "marginals": marg, "first": first, "zs": zs, "log_p": scores - log_z}


@functools.cache
def _projective_trees(S: int) -> list[tuple[int, ...]]:
    """All single-root projective dependency trees over S words, as head tuples (-1 = root)."""
    trees = []
    for heads in itertools.product(range(-1, S), repeat=S):
        if heads.count(-1) != 1 or any(h == m for m, h in enumerate(heads)):
            continue

        def ancestors(m: int, heads=heads) -> list[int] | None:
            seen = []
            while m != -1:
                if m in seen:
                    return None  # a cycle
                seen.append(m)
                m = heads[m]
            return seen

        chains = [ancestors(m) for m in range(S)]
        if any(c is None for c in chains):
            continue
        # projective: every word strictly between a head and its modifier descends from the head
        if all(h == -1 or all(h in chains[k] for k in range(min(h, m) + 1, max(h, m))) for m, h in enumerate(heads)):
            trees.append(heads)
    return trees


def _tree_brute(arc: torch.Tensor, root: torch.Tensor, length: int):
    trees = _projective_trees(length)
    scores = torch.stack([sum(root[m] if h == -1 else arc[h, m] for m, h in enumerate(t)) for t in trees])
    log_z = scores.logsumexp(0)
    probs = (scores - log_z).exp()
    S = arc.shape[-1]
    arcs, roots = arc.new_zeros(S, S), arc.new_zeros(S)
    for p, t in zip(probs, trees, strict=True):
        for m, h in enumerate(t):
            if h == -1:
                roots[m] += p
            else:
                arcs[h, m] += p
    return log_z, arcs, roots


def _lengths_mask(lengths: list[int], S: int) -> torch.Tensor:
    return torch.arange(S) < torch.tensor(lengths).unsqueeze(-1)


def _garbage(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Fill padded entries (``mask`` False, broadcast over trailing dims) with inf / NaN / huge numbers."""
    junk = torch.full_like(x, float("nan"))
    junk.view(-1)[::3] = float("inf")
    junk.view(-1)[1::3] = -1e30
    while mask.dim() < x.dim():
        mask = mask.unsqueeze(-1)
    return torch.where(mask, x, junk)


@contextmanager
def _double():  # noqa: ANN202 - a context manager
    """float64 as torch's default dtype inside (a hypothesis test cannot take the ``float64`` fixture)."""
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(torch.float32)


# -- the linear chain ------------------------------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    extra=st.integers(0, 2),
    shared=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_chain_against_brute_force(lengths, extra, shared, seed):
    """log Z, marginals, first-selected and the directed conditionals equal enumeration over 2^L selections;
    padding filled with inf / NaN garbage changes nothing."""
    with _double():
        g = torch.Generator().manual_seed(seed)
        B, S = len(lengths), max(max(lengths), 1) + extra
        mask = _lengths_mask(lengths, S)
        unary = 2 * torch.randn(B, S, 2, generator=g)
        pairwise = 2 * torch.randn(2, 2, generator=g) if shared else 2 * torch.randn(B, S - 1, 2, 2, generator=g)
        full = pairwise.expand(B, S - 1, 2, 2)
        unary_junk = _garbage(unary, mask)
        pairwise_junk = pairwise if shared else _garbage(pairwise, mask[:, 1:])
        log_z = chain_log_partition(unary_junk, pairwise_junk, mask)
        marg = chain_marginals(unary_junk, pairwise_junk, mask)
        first = chain_first_selected(unary_junk, pairwise_junk, mask)
        init, trans = chain_conditionals(unary_junk, pairwise_junk, mask)
        for b, L in enumerate(lengths):
            brute = _chain_brute(unary[b], full[b], L)
            assert torch.allclose(log_z[b], brute["log_z"], atol=1e-10)
            assert torch.allclose(marg[b], brute["marginals"], atol=1e-10)
            assert torch.allclose(first[b].exp(), brute["first"], atol=1e-10)
            assert (marg[b, L:] == 0).all() and (first[b, L:S] == float("-inf")).all()
            # the directed chain p(z_1) prod p(z_{i+1} | z_i) is the CRF
            for z, log_p in zip(brute["zs"], brute["log_p"], strict=True):
                directed = init[b, z[0]] if L else 0.0
                directed = directed + sum(trans[b, i - 1, z[i - 1], z[i]] for i in range(1, L))
                assert torch.allclose(torch.as_tensor(directed), log_p, atol=1e-10)
            # positions after the end are 0 with probability one
            assert (trans[b, max(L - 1, 0) :, :, 0] == 0).all()
        # appending more padding changes nothing
        pad = torch.zeros(B, 2, 2)
        mask2 = torch.cat([mask, torch.zeros(B, 2, dtype=torch.bool)], 1)
        pairwise2 = pairwise if shared else torch.cat([pairwise, torch.zeros(B, 2, 2, 2)], 1)
        assert torch.allclose(chain_log_partition(torch.cat([unary, pad], 1), pairwise2, mask2), log_z, atol=1e-12)


def _leaves(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    """Seeded standard-normal tensors of these shapes that want gradients (float64 under the fixture)."""
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g, requires_grad=True) for shape in shapes]


def test_chain_marginals_are_differentiable_and_finite(float64):
    unary, pairwise = _leaves((2, 4, 2), (2, 2))
    mask = _lengths_mask([4, 2], 4)
    assert torch.autograd.gradcheck(lambda u, p: chain_marginals(u, p, mask), (unary, pairwise))
    junk = _garbage(unary, mask)
    (chain_marginals(junk, pairwise, mask) ** 2).sum().backward()
    assert torch.isfinite(unary.grad).all() and torch.isfinite(pairwise.grad).all()
    assert (unary.grad[1, 2:] == 0).all()
    with torch.no_grad():  # works without a graph too
        assert torch.allclose(chain_marginals(unary, pairwise, mask), chain_marginals(junk, pairwise, mask).detach())


def test_chain_sample_frequencies_match(float64):
    """FFBS draws: the frequency of every full selection matches its probability (chi-square), and empirical
    marginals match ``chain_marginals`` within 5 standard errors."""
    g = torch.Generator().manual_seed(1)
    unary, pairwise = torch.randn(2, 4, 2, generator=g), torch.randn(2, 3, 2, 2, generator=g)
    mask = _lengths_mask([4, 3], 4)
    n = 20_000
    draws = chain_sample(unary, pairwise, mask, (n,), generator=torch.Generator().manual_seed(2))
    assert draws.shape == (n, 2, 4) and (draws[:, 1, 3] == 0).all()
    marg = chain_marginals(unary, pairwise, mask)
    se = (marg * (1 - marg) / n).sqrt() + 1e-12
    assert ((draws.double().mean(0) - marg).abs() <= 5 * se + 1e-12).all()
    for b, L in enumerate([4, 3]):
        brute = _chain_brute(unary[b], pairwise[b], L)
        codes = (draws[:, b, :L] * (2 ** torch.arange(L - 1, -1, -1))).sum(-1)
        counts = torch.bincount(codes, minlength=2**L).double()
        expected = n * brute["log_p"].exp()  # itertools.product order = binary code order
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        df = 2**L - 1
        assert chi2 < df + 6 * math.sqrt(2 * df), chi2


def test_mask_must_be_a_length_mask():
    with pytest.raises(ValueError, match="length mask"):
        chain_log_partition(torch.zeros(1, 3, 2), torch.zeros(2, 2), torch.tensor([[True, False, True]]))
    with pytest.raises(ValueError, match="length mask"):
        tree_log_partition(torch.zeros(1, 3, 3), torch.zeros(1, 3), torch.tensor([[False, True, True]]))
    with pytest.raises(ValueError, match="unary"):
        chain_log_partition(torch.zeros(3, 3), torch.zeros(2, 2))


# -- projective trees ------------------------------------------------------------------------------------------
def test_projective_tree_counts():
    """Single-root projective trees over S = 1..5 words: 1, 2, 7, 30, 143; Eisner with zero scores agrees."""
    counts = [len(_projective_trees(S)) for S in range(1, 6)]
    assert counts == [1, 2, 7, 30, 143]
    for S, count in enumerate(counts, start=1):
        log_z = tree_log_partition(torch.zeros(S, S, dtype=torch.float64), torch.zeros(S, dtype=torch.float64))
        assert abs(float(log_z) - math.log(count)) < 1e-12


@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    extra=st.integers(0, 2),
    seed=st.integers(0, 10_000),
)
def test_tree_against_brute_force(lengths, extra, seed):
    with _double():
        g = torch.Generator().manual_seed(seed)
        B, S = len(lengths), max(max(lengths), 1) + extra
        mask = _lengths_mask(lengths, S)
        arc, root = 2 * torch.randn(B, S, S, generator=g), 2 * torch.randn(B, S, generator=g)
        arc_junk = _garbage(arc, mask.unsqueeze(-1) & mask.unsqueeze(-2))
        root_junk = _garbage(root, mask)
        log_z = tree_log_partition(arc_junk, root_junk, mask)
        arcs, roots = tree_marginals(arc_junk, root_junk, mask)
        for b, L in enumerate(lengths):
            if L == 0:
                assert log_z[b] == 0 and (arcs[b] == 0).all() and (roots[b] == 0).all()
                continue
            brute_z, brute_arcs, brute_roots = _tree_brute(arc[b], root[b], L)
            assert torch.allclose(log_z[b], brute_z, atol=1e-10)
            assert torch.allclose(arcs[b, :L, :L], brute_arcs[:L, :L], atol=1e-10)
            assert torch.allclose(roots[b], brute_roots, atol=1e-10)
            assert (arcs[b, L:] == 0).all() and (arcs[b, :, L:] == 0).all() and (arcs[b].diagonal() == 0).all()
            # every real word has exactly one head
            assert torch.allclose(arcs[b, :, :L].sum(0) + roots[b, :L], torch.ones(L), atol=1e-10)


def test_tree_marginals_are_differentiable_and_finite(float64):
    arc, root = _leaves((2, 4, 4), (2, 4))
    mask = _lengths_mask([4, 3], 4)
    assert torch.autograd.gradcheck(lambda a, r: tree_marginals(a, r, mask), (arc, root))
    arcs, roots = tree_marginals(_garbage(arc, mask.unsqueeze(-1) & mask.unsqueeze(-2)), root, mask)
    ((arcs**2).sum() + (roots**2).sum()).backward()
    assert torch.isfinite(arc.grad).all() and torch.isfinite(root.grad).all()
    assert (arc.grad[1, 3] == 0).all() and (arc.grad[1, :, 3] == 0).all()


def test_tree_batched_matches_one_by_one(float64):
    g = torch.Generator().manual_seed(3)
    arc, root = torch.randn(3, 2, 6, 6, generator=g), torch.randn(3, 2, 6, generator=g)
    lengths = torch.tensor([[6, 4], [1, 5], [3, 2]])
    mask = torch.arange(6) < lengths.unsqueeze(-1)
    batched = tree_log_partition(arc, root, mask)
    for i, j in itertools.product(range(3), range(2)):
        L = int(lengths[i, j])
        assert torch.allclose(batched[i, j], tree_log_partition(arc[i, j, :L, :L], root[i, j, :L]), atol=1e-12)


# -- the pairs -------------------------------------------------------------------------------------------------
def _random_transition(pair, seed=0):
    with torch.no_grad():
        pair.transition.weight.copy_(torch.randn(2, 2, generator=torch.Generator().manual_seed(seed)))


def _chain_pair(cls, seed, **sizes):
    """A toy network and batch from ``seed`` and a chain pair of ``cls`` on it with a random transition."""
    net, batch = toy_case(seed=seed, **sizes)
    pair = cls(net)
    _random_transition(pair, seed=seed)
    return net, batch, pair


def _brute_marginal_log_likelihood(pair: SegmentationMarginal, batch) -> torch.Tensor:
    """log sum_z p(z | x) p(y | x, x_first(z)) per token, enumerating all 2^L selections ``(B, T)``."""
    net = pair.network
    with torch.no_grad():
        enc = net.encode(batch)
        unary, pairwise, _ = pair.potentials(enc)
        B, T, S = enc.shape
        contexts = torch.cat([enc.values, torch.zeros_like(enc.values[:, :1])], 1)  # the null context last
        out = torch.zeros(B, T)
        for b, t in itertools.product(range(B), range(T)):
            L = int(enc.source_mask[b].sum())
            brute = _chain_brute(unary[b, t], pairwise.expand(S - 1, 2, 2), L)
            terms = []
            for z, log_p in zip(brute["zs"], brute["log_p"], strict=True):
                read = z.index(1) if 1 in z else S
                logits = net.output_logits(enc, contexts[:, read].unsqueeze(1).expand(B, T, -1))[b, t]
                terms.append(log_p + logits.log_softmax(-1)[enc.target[b, t]])
            out[b, t] = torch.stack(terms).logsumexp(0) if enc.target_mask[b, t] else 0.0
    return out


@pytest.mark.parametrize("make", [toy_case, region_case], ids=["toy-T2", "region-qa"])
def test_segmentation_marginal_is_exact(float64, make):
    """TraceEnum_ELBO with the empty guide, the dynamic programme and enumeration over all 2^S selections agree."""
    net, batch = make()
    pair = SegmentationMarginal(net)
    _random_transition(pair)
    brute = _brute_marginal_log_likelihood(pair, batch)
    ll = pair.log_likelihood(batch)
    assert ll.exact and torch.allclose(ll.per_token, brute, atol=1e-10)
    loss = pair.elbo().loss(pair.model, pair.guide, batch)
    assert abs(loss + float(brute.sum())) < 1e-9


def test_segmentation_marginal_gradients_match_the_dynamic_programme(float64):
    """Gradients through Pyro's variable elimination equal those of the closed-form log-likelihood."""
    net, batch, pair = _chain_pair(SegmentationMarginal, seed=1, B=3, S=4, T=3)
    params = [*net.parameters(), pair.transition.weight]
    pyro.clear_param_store()
    pair.elbo().loss_and_grads(pair.model, pair.guide, batch)
    enum_grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]
    assert pair.transition.weight.grad.abs().sum() > 0
    for p in params:
        p.grad = None
    enc = net.encode(batch)
    per_token = (pair.read_distribution(enc) + pair.read_log_likelihood(enc)).logsumexp(-1)
    (-(per_token * enc.target_mask).sum()).backward()
    for a, p in zip(enum_grads, params, strict=True):
        assert torch.allclose(a, torch.zeros_like(p) if p.grad is None else p.grad, atol=1e-9)


def test_segmentation_marginal_posterior_and_prior_draws(float64):
    net, batch, pair = _chain_pair(SegmentationMarginal, seed=2, B=2, S=4, T=2)
    enc = net.encode(batch)
    unary, pairwise, _ = pair.potentials(enc)
    post = pair.selection_marginals(batch)
    for b, t in itertools.product(range(2), range(2)):
        L = int(enc.source_mask[b].sum())
        brute = _chain_brute(unary[b, t].detach(), pairwise.detach().expand(3, 2, 2), L)
        assert torch.allclose(post["prior"][b, t], brute["marginals"], atol=1e-10)
        if not enc.target_mask[b, t]:
            assert torch.allclose(post["posterior"][b, t], post["prior"][b, t])
            continue
        weights = []
        for z, log_p in zip(brute["zs"], brute["log_p"], strict=True):
            read = z.index(1) if 1 in z else 4
            ctx = torch.cat([enc.values, torch.zeros_like(enc.values[:, :1])], 1)[:, read]
            lp = net.output_logits(enc, ctx.unsqueeze(1).expand(2, 2, -1))[b, t].log_softmax(-1)[enc.target[b, t]]
            weights.append(log_p + lp)
        w = torch.stack(weights).softmax(0).detach()
        padded_zs = [torch.tensor(z + (0,) * (4 - L), dtype=w.dtype) for z in brute["zs"]]
        expected = sum(wk * z for wk, z in zip(w, padded_zs, strict=True))
        assert torch.allclose(post["posterior"][b, t], expected, atol=1e-10)
    # Predictive draws (r, z) jointly from the prior: r is the first selected position, padding is 0
    draws = Predictive(pair.model, num_samples=50, parallel=False)(batch)
    z = torch.stack([draws[f"align_{i}"] for i in range(4)], -1)  # (N, B, T, S)
    first = torch.where(z.any(-1), z.argmax(-1), torch.full_like(draws["first"], 4))
    assert torch.equal(first, draws["first"])
    assert (z[:, 1, :, 3] == 0).all()
    # predictive probabilities: a distribution, and the sum over reads of P(r) p(y | r)
    probs = pair.predict(batch)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 2))
    picked = probs.gather(-1, enc.target.unsqueeze(-1)).squeeze(-1).log() * enc.target_mask
    assert torch.allclose(picked, pair.log_likelihood(batch).per_token, atol=1e-10)


def test_segmentation_attention_is_expected_representation(float64):
    net, batch, pair = _chain_pair(SegmentationAttention, seed=3, B=3, S=4, T=3)
    enc = net.encode(batch)
    unary, pairwise, _ = pair.potentials(enc)
    marg = pair.selection_prior(enc)
    L = int(enc.source_mask[1].sum())
    assert torch.allclose(marg[1, 0], _chain_brute(unary[1, 0], pairwise.expand(3, 2, 2), L)["marginals"])
    weights = pair.attention_prior(enc)
    assert torch.allclose(weights.sum(-1), torch.ones(3, 3)) and (weights[1:, :, L:] == 0).all()
    # normalised, lambda = 1: the package's soft rule is the pair's own prediction; Trace_ELBO is the exact NLL
    assert torch.allclose(predict(pair, batch, "soft"), pair.predict(batch), atol=1e-12)
    ll = log_likelihood(pair, batch)
    assert torch.allclose(ll.per_token, pair.log_likelihood(batch).per_token, atol=1e-12)
    assert abs(pair.elbo().loss(pair.model, pair.guide, batch) + float(ll.per_example.sum())) < 1e-9
    # SAN's unnormalised sum, and the lambda-scaled normalised one
    raw = SegmentationAttention(net, normalize=False)
    raw.transition = pair.transition
    assert torch.allclose(raw.context(enc), torch.einsum("bts,bsd->btd", marg, enc.values))
    scaled = SegmentationAttention(net, scale=2.0)
    scaled.transition = pair.transition
    assert torch.allclose(scaled.context(enc), 2 * pair.context(enc))


def test_syntactic_attention_uses_expected_parents(float64):
    net, batch = toy_case(seed=4, B=2, S=4, T=2)
    pair = SyntacticAttention(net)
    enc = net.encode(batch)
    arcs, roots = pair.tree_marginals(enc)
    arc, root = pair.scorer(enc.values)
    log_z, brute_arcs, brute_roots = _tree_brute(arc[1].detach(), root[1].detach(), 3)
    assert torch.allclose(arcs[1, :3, :3], brute_arcs[:3, :3], atol=1e-10)
    assert torch.allclose(roots[1], brute_roots, atol=1e-10)
    expected = enc.values + torch.einsum("bhm,bhd->bmd", arcs, enc.values)
    assert torch.allclose(pair.structured_values(enc), expected)
    ll = log_likelihood(pair, batch)
    assert torch.allclose(ll.per_token, pair.log_likelihood(batch).per_token, atol=1e-12)
    assert abs(pair.elbo().loss(pair.model, pair.guide, batch) + float(ll.per_example.sum())) < 1e-9


@pytest.mark.parametrize("cls", PAIRS, ids=lambda c: c.__name__)
def test_padding_changes_nothing(float64, cls):
    net, batch = toy_case(seed=5, B=3, S=4, T=3)
    pair = cls(net)
    if hasattr(pair, "transition"):
        _random_transition(pair, seed=5)
    padded = pad_batch(batch, extra_source=2, extra_target=2)
    ll, ll_pad = pair.log_likelihood(batch), pair.log_likelihood(padded)
    assert torch.allclose(ll.per_example, ll_pad.per_example, atol=1e-10)
    assert torch.allclose(ll_pad.per_token[:, :3], ll.per_token, atol=1e-10)
    assert (ll_pad.per_token[:, 3:] == 0).all()
    loss, loss_pad = (pair.elbo().loss(pair.model, pair.guide, b) for b in (batch, padded))
    assert abs(loss - loss_pad) < 1e-9
    enc = net.encode(padded)
    weights = pair.attention_prior(enc)
    assert (weights[~enc.source_mask.unsqueeze(1).expand_as(weights)] == 0).all()
    assert torch.allclose(weights[:, :3, :4], pair.attention_prior(net.encode(batch)), atol=1e-10)


@pytest.mark.parametrize("cls", PAIRS, ids=lambda c: c.__name__)
def test_pairs_train_with_svi(cls):
    net, batch = toy_case(seed=6, B=4, S=5, T=3)
    pair = cls(net)
    svi = pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": 0.05}), pair.elbo())
    losses = [svi.step(batch) for _ in range(15)]
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]
    structure = pair.transition if hasattr(pair, "transition") else pair.scorer
    assert any(name.startswith("structure$$$") for name in pyro.get_param_store().keys())
    assert all(p.abs().sum() > 0 for p in structure.parameters())  # the structure's parameters were trained
    assert pair.latent == ("structured" if cls is SegmentationMarginal else "none") and pair.label


def test_inference_functions_ask_the_structured_pairs_themselves(float64):
    """``inference.log_likelihood`` / ``predict`` delegate to a pair's own DP instead of summing markov sites."""
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch(B=2, S=4, T=2)
    pair = SegmentationMarginal(net)
    assert torch.allclose(log_likelihood(pair, batch).per_example, pair.log_likelihood(batch).per_example)
    assert torch.allclose(predict(pair, batch), pair.predict(batch))
