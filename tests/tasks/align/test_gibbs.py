"""Collapsed Gibbs sampling of the HMM aligner's links (:mod:`pyro_attention.tasks.align.gibbs`): with the trained
table it samples the HMM's own posterior (forward-backward), and with the tables integrated out each sentence's
sweeps sample its exact conditional given the other sentences' links (brute-force enumeration)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from pyro_attention.data.translation import collate
from pyro_attention.networks.lexical import HMMNetwork, with_null_word
from pyro_attention.tasks.align.gibbs import CollapsedGibbs, GibbsBatch

PAIRS = [([4, 5, 6], [4, 5]), ([6, 4], [5, 6, 4]), ([5], [6, 6])]


def _ids(trained, text):
    return [(trained.src_vocab.encode(s), trained.tgt_vocab.encode(t))
            for s, t in zip(text.source, text.target, strict=True)]


@pytest.mark.parametrize("null_prob,tension", [(0.3, 2.0), (None, None)])
def test_with_the_trained_table_the_sampler_is_the_hmm_posterior(null_prob, tension):
    torch.manual_seed(0)
    network = HMMNetwork(7, 7, tension=tension, max_jump=2, null_prob=null_prob)
    with torch.no_grad():
        for p in network.parameters():
            p.normal_(0.0, 1.0)
    null = null_prob is not None
    chain = CollapsedGibbs(sweeps=3000, alpha=None).chain(network, PAIRS, [[0, 1, 2]], null)
    frequency = chain.sample(0)[0]
    exact = network.smoothed_posterior(collate([(with_null_word(s) if null else s, t) for s, t in PAIRS]))
    assert ((exact > 0.1) & (exact < 0.9)).sum() >= 5  # a posterior with room to be wrong
    assert (frequency - exact).abs().max() < 0.04


def test_collapsed_sweeps_sample_a_sentence_given_the_others_by_brute_force(trained_recipe):
    forward, _, text = trained_recipe
    network = forward.pair.network
    pairs = _ids(forward, text)
    one = min(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    others = [i for i in range(len(pairs)) if i != one]
    sampler = CollapsedGibbs(sweeps=3000, alpha=0.5)
    chain = sampler.chain(network, pairs, [[one], others], null_word=True)
    frequency = chain.sample(0)[0][0]

    # the other sentences' counts: the text's, less this sentence's links as the sweeps left them
    with torch.no_grad():
        state = GibbsBatch(network, collate([(with_null_word(pairs[one][0]), pairs[one][1])]), True, True)
    T, S = state.pair.shape[1:]
    pair, source, final = state.pair[0], state.source[0], chain.links[0][0].long()
    counts_other, rows = chain.counts.clone(), chain.row_counts.clone()
    for t in range(T):
        counts_other[pair[t, final[t]]] -= 1
        rows[source[final[t]]] -= 1
    V, alpha = state.vocab, sampler.alpha
    joint = {}
    for z in itertools.product(range(S), repeat=T):
        log_p, last = 0.0, torch.tensor([-1])
        n, m = {}, {}
        for t, s in enumerate(z):
            log_p += float(state.into(t, last)[0, s])
            key, row = int(pair[t, s]), int(source[s])
            log_p += math.log((float(counts_other[key]) + n.get(key, 0) + alpha)
                              / (float(rows[row]) + m.get(row, 0) + V * alpha))
            n[key], m[row] = n.get(key, 0) + 1, m.get(row, 0) + 1
            if s > 0:
                last = torch.tensor([s])
        joint[z] = log_p
    top = max(joint.values())
    total = sum(math.exp(v - top) for v in joint.values())
    exact = torch.zeros(T, S)
    for z, v in joint.items():
        for t, s in enumerate(z):
            exact[t, s] += math.exp(v - top) / total
    assert exact.max() < 0.99
    assert (frequency - exact).abs().max() < 0.04


def test_counts_follow_the_links(trained_recipe):
    forward, _, text = trained_recipe
    pairs = _ids(forward, text)
    batches = [list(range(0, len(pairs), 2)), list(range(1, len(pairs), 2))]
    chain = CollapsedGibbs(sweeps=4, alpha=1e-3).chain(forward.pair.network, pairs, batches, null_word=True)
    for k in range(2):
        frequency = chain.sample(k)[0]
        state = GibbsBatch(forward.pair.network, collate([(with_null_word(pairs[i][0]), pairs[i][1])
                                                      for i in batches[k]]), True, True)
        assert torch.allclose(frequency.sum(-1), state.target_mask.float())
    counts = torch.zeros_like(chain.counts)
    for k, batch in enumerate(batches):
        state = GibbsBatch(forward.pair.network, collate([(with_null_word(pairs[i][0]), pairs[i][1]) for i in batch]),
                       True, True)
        counts.index_add_(0, state.pair.gather(2, chain.links[k].long().unsqueeze(-1)).squeeze(-1)[state.target_mask],
                          torch.ones(int(state.target_mask.sum()), dtype=torch.int32))
    assert torch.equal(counts, chain.counts)
    assert chain.row_counts.sum() == counts.sum()


@pytest.mark.parametrize("kw,message", [
    (dict(sweeps=1), r"sweeps must be a whole number >= 2, got 1"),
    (dict(sweeps=2.5), r"sweeps must be a whole number >= 2, got 2\.5"),
    (dict(alpha=0.0), r"alpha must be > 0 \(or None: the trained table\), got 0\.0"),
    (dict(alpha="0.1"), r"alpha must be > 0 \(or None: the trained table\), got '0\.1'"),
])
def test_bad_sampler_options_are_named(kw, message):
    with pytest.raises(ValueError, match=message):
        CollapsedGibbs(**kw)


def test_collapsed_sampling_needs_a_sparse_table():
    with pytest.raises(ValueError, match=r"counts links in a sparse lexical table"):
        CollapsedGibbs().chain(HMMNetwork(7, 7), PAIRS, [[0, 1, 2]], null_word=False)
