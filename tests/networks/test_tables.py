"""The sparse lexical table (:mod:`pyro_attention.networks.tables`): the co-occurring pairs it stores, exactness
against the dense free table (the same function, the same Adam and EM training, the same posteriors and links),
pruning, memory and bad input."""

from __future__ import annotations

import contextlib
import random
from collections import Counter

import numpy as np
import pytest
import torch

from pyro_attention.aer import alignment_error_rate, symmetrize
from pyro_attention.data.translation import EOS, collate
from pyro_attention.inference import alignment_posterior, fit
from pyro_attention.networks.lexical import HMMNetwork, IBM1Network, with_null_word
from pyro_attention.networks.tables import SparseTable, cooccurrences
from pyro_attention.registry import make_pair
from pyro_attention.tasks.align.agreement import JointBitext, fit_agreement
from pyro_attention.tasks.align.networks import Bitext
from pyro_attention.tasks.align.scoring import argmax_links

V_SRC, V_TGT = 14, 12


def _corpus(seed: int, n: int = 12, v_src: int = V_SRC, v_tgt: int = V_TGT) -> tuple[list, list]:
    """``n`` random sentence pairs of 1-5 words (ids from 4: no special tokens), repeated words included."""
    rng = random.Random(seed)

    def sentence(v: int) -> list[int]:
        return [rng.randrange(4, v) for _ in range(rng.randint(1, 5))]

    return [sentence(v_src) for _ in range(n)], [sentence(v_tgt) for _ in range(n)]


def _pairs_by_brute_force(source: list, target: list, min_count: int = 1) -> set[tuple[int, int]]:
    """The ``(x, y)`` pairs in at least ``min_count`` sentence pairs (once per sentence pair, ``</s>`` appended)."""
    seen: Counter = Counter()
    for x, y in zip(source, target, strict=True):
        seen.update({(a, b) for a in x for b in [*y, EOS]})
    return {pair for pair, count in seen.items() if count >= min_count}


def _decoded(keys: np.ndarray | torch.Tensor, v: int) -> set[tuple[int, int]]:
    return {(int(k) // v, int(k) % v) for k in keys}


# -- 1. the stored pairs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [20_000, 3])
@pytest.mark.parametrize("min_count", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cooccurrences_are_the_pairs_of_the_sentence_pairs_by_brute_force(seed, min_count, chunk):
    source, target = _corpus(seed, n=25, v_src=10, v_tgt=9)
    keys = cooccurrences(source, target, 9, min_count, chunk=chunk)
    assert keys.dtype == np.int64 and bool(np.all(np.diff(keys) > 0))  # sorted, distinct
    expected = _pairs_by_brute_force(source, target, min_count)
    assert _decoded(keys, 9) == expected
    if min_count == 1:
        assert len(expected) > 20 and torch.equal(Bitext(source, target).table(10, 9).keys, torch.as_tensor(keys))
    else:
        assert 0 < len(expected) < len(_pairs_by_brute_force(source, target))  # pruning keeps some, drops some
        assert torch.equal(Bitext(source, target).table(10, 9, min_count).keys, torch.as_tensor(keys))


@pytest.mark.parametrize("pass_pairs", [1, 7, 40])
def test_cooccurrences_in_many_passes_are_the_same(monkeypatch, pass_pairs):
    """A huge corpus is counted in passes over ranges of source words (:data:`PASS_PAIRS` word pairs each): forced
    here on a small one, from one source word per pass to a few, the keys are the brute-force pairs all the same."""
    from pyro_attention.networks import tables

    source, target = _corpus(4, n=30, v_src=12, v_tgt=9)
    monkeypatch.setattr(tables, "PASS_PAIRS", pass_pairs)
    for min_count in (1, 2):
        keys = cooccurrences(source, target, 9, min_count, chunk=7)
        assert bool(np.all(np.diff(keys) > 0)) and _decoded(keys, 9) == _pairs_by_brute_force(source, target,
                                                                                                min_count)


def test_cooccurrences_count_each_pair_once_per_sentence_pair():
    """A pair repeated inside one sentence pair is seen once there; ``</s>`` co-occurs with every source word."""
    assert _decoded(cooccurrences([[5, 5]], [[6, 6]], 9), 9) == {(5, 6), (5, EOS)}
    assert cooccurrences([[5, 5]], [[6, 6]], 9, min_count=2).tolist() == []
    assert _decoded(cooccurrences([[5], [5, 7]], [[6], [8]], 9, min_count=2), 9) == {(5, EOS)}


# -- 2. exact against the dense table -----------------------------------------------------------------------------
def _matching_dense_and_sparse(keys: np.ndarray, seed: int) -> tuple[IBM1Network, IBM1Network]:
    """A dense IBM1Network with random logits and a sparse one holding the same table: each row's unstored entries
    share one random value, the row's rest."""
    generator = torch.Generator().manual_seed(seed)
    rest = torch.randn(V_SRC, generator=generator)
    weight = rest.unsqueeze(1).repeat(1, V_TGT)
    rows, cols = torch.as_tensor(keys) // V_TGT, torch.as_tensor(keys) % V_TGT
    weight[rows, cols] = 3 * torch.randn(len(keys), generator=generator)
    dense = IBM1Network(V_SRC, V_TGT, null_prob=0.2)
    sparse = IBM1Network(V_SRC, V_TGT, null_prob=0.2, table=SparseTable(V_SRC, V_TGT, keys))
    with torch.no_grad():
        dense.src_embed.weight.copy_(weight)
        sparse.table.logits.copy_(weight[rows, cols])
        sparse.table.rest.copy_(rest)
    return dense, sparse


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sparse_table_is_the_dense_function_with_the_dense_gradient(float64, seed):
    """The same ``log t(y | x)`` at the observed pairs and as dense rows (each a distribution), fresh (uniform) and
    random, a row that stores every word (no rest) included; the gradient of a stored logit is the dense entry's,
    that of a rest is the gradient of each dense entry it stands for."""
    source, target = _corpus(seed)
    source = [with_null_word(s) for s in source]
    full_row = np.arange(4 * V_TGT, 5 * V_TGT)  # word 4 stores every target word
    keys = np.union1d(cooccurrences(source, target, V_TGT), full_row)
    batch, ids = collate(list(zip(source, target, strict=True))), torch.arange(V_SRC)
    assert bool((batch.source == 4).any())
    fresh = IBM1Network(V_SRC, V_TGT, null_prob=0.2), IBM1Network(V_SRC, V_TGT, null_prob=0.2,
                                                                  table=SparseTable(V_SRC, V_TGT, keys))
    dense, sparse = _matching_dense_and_sparse(keys, seed)
    for a, b in (fresh, (dense, sparse)):
        assert torch.allclose(a.observed_log_probs(batch), b.observed_log_probs(batch), atol=1e-12, rtol=0)
        table = b.lexical_log_probs(ids)
        assert torch.allclose(a.lexical_log_probs(ids), table, atol=1e-12, rtol=0)
        assert torch.allclose(table.exp().sum(-1), torch.ones(V_SRC), atol=1e-12, rtol=0)
    assert float(dense.lexical_log_probs(ids).detach().std()) > 0.5  # not a uniform table
    for net in (dense, sparse):
        log_t, _, posterior = net.likelihood_terms(batch)
        (-(posterior * log_t).sum()).backward()
    grad = dense.src_embed.weight.grad
    rows, cols = torch.as_tensor(keys) // V_TGT, torch.as_tensor(keys) % V_TGT
    assert torch.allclose(sparse.table.logits.grad, grad[rows, cols], atol=1e-12, rtol=0)
    unstored = torch.ones(V_SRC, V_TGT, dtype=torch.bool)
    unstored[rows, cols] = False
    for x in range(V_SRC):
        if unstored[x].any():
            assert torch.allclose(grad[x][unstored[x]], sparse.table.rest.grad[x].expand(int(unstored[x].sum())),
                                  atol=1e-12, rtol=0)
    assert float(sparse.table.rest.grad.abs().max()) > 1e-3  # the rests are moved


def _fit_ibm1(data: Bitext, table: SparseTable | None):
    pair = make_pair("marginal", IBM1Network(V_SRC, V_TGT, null_prob=0.2, table=table))
    fit(pair, data, num_epochs=3, batch_size=4, lr=0.05, seed=0, progress=False)
    return pair


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_trains_the_sparse_table_as_the_dense_one(float64, seed):
    """The ``marginal`` pair trained by ``fit`` (Adam, elementwise-clipped gradients) on a text with a NULL word:
    the same tables, the same exact posteriors (NULL column included), the same losses."""
    source, target = _corpus(seed)
    data = Bitext([with_null_word(s) for s in source], target)
    dense, sparse = _fit_ibm1(data, None), _fit_ibm1(data, data.table(V_SRC, V_TGT))
    ids = torch.arange(V_SRC)
    table = dense.network.lexical_log_probs(ids).detach()
    assert float((table - table.mean(-1, keepdim=True)).abs().max()) > 0.1  # trained away from uniform
    assert torch.allclose(sparse.network.lexical_log_probs(ids), table, atol=1e-9, rtol=0)
    batch = collate(list(zip(data.source, data.target, strict=True)))
    ours, theirs = alignment_posterior(sparse, batch), alignment_posterior(dense, batch)
    assert ours.keys() == theirs.keys() and "posterior" in ours
    for key in ours:
        assert torch.allclose(ours[key], theirs[key], atol=1e-9, rtol=0)
    assert torch.allclose(sparse.network.likelihood_terms(batch)[2], dense.network.likelihood_terms(batch)[2],
                          atol=1e-9, rtol=0)


def _hmm(data_source: list, data_target: list, v_src: int, v_tgt: int, sparse: bool) -> HMMNetwork:
    table = SparseTable(v_src, v_tgt, cooccurrences(data_source, data_target, v_tgt)) if sparse else None
    return HMMNetwork(v_src, v_tgt, lexical=IBM1Network(v_src, v_tgt, null_prob=0.2, table=table), null_prob=0.2)


def _links(forward: HMMNetwork, reverse: HMMNetwork, data: JointBitext) -> tuple[list, list]:
    """Both directions' smoothed posteriors (in the corpus order) and their argmax links, symmetrised."""
    fb = collate(list(zip(data.source, data.target, strict=True)))
    rb = collate(list(zip(data.reverse_source, data.reverse_target, strict=True)))
    post_f, post_r = forward.smoothed_posterior(fb), reverse.smoothed_posterior(rb)
    fwd = [post_f[i, : len(y), : len(x)] for i, (x, y) in enumerate(zip(data.source, data.target, strict=True))]
    rev = [post_r[i, : len(x), : len(y)] for i, (y, x) in enumerate(zip(data.reverse_source, data.reverse_target,
                                                                         strict=True))]
    links = symmetrize(argmax_links(fwd, null_word=True), argmax_links(rev, null_word=True), "grow-diag-final-and")
    return [post_f, post_r], links


@pytest.mark.parametrize("seed", [0, 1])
def test_agreement_with_dirichlet_tables_trains_the_sparse_tables_as_the_dense_ones(float64, seed):
    """Both directions' HMMs trained by agreement with the tables by EM (``table_prior``): the same tables, the same
    smoothed posteriors, the same links and AER on a gold set."""
    source, target = _corpus(seed)
    data = JointBitext([with_null_word(s) for s in source], target, [with_null_word(t) for t in target], source)
    trained = []
    for sparse in (False, True):
        forward = _hmm(data.source, data.target, V_SRC, V_TGT, sparse)
        reverse = _hmm(data.reverse_source, data.reverse_target, V_TGT, V_SRC, sparse)
        result = fit_agreement(forward, reverse, data, num_epochs=3, batch_size=4, lr=0.05, seed=0,
                               agreement=True, table_prior=0.01)
        trained.append((forward, reverse, result.losses))
    (fd, rd, losses_d), (fs, rs, losses_s) = trained
    assert np.allclose(losses_d, losses_s, atol=1e-8, rtol=0)
    for d, s, v in ((fd, fs, V_SRC), (rd, rs, V_TGT)):
        table = d.lexical_log_probs(torch.arange(v)).detach()
        assert float((table - table.mean(-1, keepdim=True)).abs().max()) > 1.0  # EM moved it
        assert torch.allclose(s.lexical_log_probs(torch.arange(v)), table, atol=1e-8, rtol=0)
        assert torch.allclose(s.transition.theta, d.transition.theta, atol=1e-8, rtol=0)
    (dense_posts, dense_links), (sparse_posts, sparse_links) = _links(fd, rd, data), _links(fs, rs, data)
    for a, b in zip(dense_posts, sparse_posts, strict=True):
        assert torch.allclose(a, b, atol=1e-8, rtol=0)
    assert dense_links == sparse_links and sum(map(len, dense_links)) > 0
    gold = [{(s, t) for t in range(len(y)) for s in range(len(x)) if s == t * len(x) // len(y)}
            for x, y in zip(source, target, strict=True)]
    assert alignment_error_rate(sparse_links, gold) == alignment_error_rate(dense_links, gold)


def test_kept_lookups_search_each_batch_once_and_answer_as_a_fresh_search(monkeypatch):
    """Within ``kept_lookups`` a batch seen before (the same id tensors) is not searched again, and its answer is a
    fresh search's; outside, nothing is kept; past ``max_bytes`` a batch is searched every time."""
    source, target = _corpus(3, n=10)
    table = Bitext(source, target).table(V_SRC, V_TGT)
    batches = [collate(list(zip(source[i: i + 4], target[i: i + 4], strict=True))) for i in range(0, 10, 4)]
    searches = []
    search = SparseTable._search
    monkeypatch.setattr(SparseTable, "_search", lambda self, s, t: searches.append(1) or search(self, s, t))
    with table.kept_lookups():
        for _ in range(3):
            for b in batches:
                index, stored = table._lookup(b.source, b.target)
                fresh_index, fresh_stored = search(table, b.source, b.target)
                assert index.dtype == torch.long and torch.equal(stored, fresh_stored)
                assert torch.equal(index[stored], fresh_index[stored])
    assert len(searches) == len(batches)
    assert table._kept is None
    searches.clear()
    one = batches[0].source.numel() * batches[0].target.shape[1] * 5  # the first batch's lookup: 5 bytes a cell
    with table.kept_lookups(max_bytes=one):  # room for the first batch only: the others are searched every time
        for _ in range(3):
            for b in batches:
                table._lookup(b.source, b.target)
    assert len(searches) == 1 + 3 * (len(batches) - 1)
    searches.clear()
    for b in batches:
        table._lookup(b.source, b.target)
        table._lookup(b.source, b.target)  # outside: only the last batch's answer is reused, as before
    assert len(searches) == len(batches)


def test_fit_agreement_searches_each_fixed_batch_once_and_trains_the_same_tables(monkeypatch, float64):
    """Several epochs on batches collated once: each sparse table searches each batch once (per direction), and the
    tables, chains and losses are those of a fit that searches every time."""
    source, target = _corpus(1, n=16)
    data = JointBitext([with_null_word(s) for s in source], target, [with_null_word(t) for t in target], source)
    searches = []
    search = SparseTable._search
    monkeypatch.setattr(SparseTable, "_search", lambda self, s, t: searches.append(1) or search(self, s, t))
    trained = []
    for keep in (True, False):
        if not keep:
            monkeypatch.setattr(SparseTable, "kept_lookups", lambda self: contextlib.nullcontext())
        searches.clear()
        forward = _hmm(data.source, data.target, V_SRC, V_TGT, True)
        reverse = _hmm(data.reverse_source, data.reverse_target, V_TGT, V_SRC, True)
        result = fit_agreement(forward, reverse, data, num_epochs=3, batch_size=4, lr=0.05, seed=0,
                               agreement=True, table_prior=0.01)
        trained.append((forward, reverse, result.losses, len(searches)))
    (fk, rk, losses_k, searches_k), (ff, rf, losses_f, searches_f) = trained
    num_batches = len(data.batches(4))
    assert (searches_k, searches_f) == (2 * num_batches, 2 * 3 * num_batches)
    assert losses_k == losses_f
    for a, b in ((fk, ff), (rk, rf)):
        assert torch.equal(a.lexical.table.logits, b.lexical.table.logits)
        assert torch.equal(a.transition.theta, b.transition.theta)


# -- 3. pruning ---------------------------------------------------------------------------------------------------
def test_a_pruned_pair_is_read_from_and_counted_in_its_rows_rest(float64):
    source, target = _corpus(0, n=25, v_src=10, v_tgt=9)
    table = Bitext(source, target).table(10, 9, min_count=2)
    stored = _decoded(table.keys, 9)
    x, y = min(_pairs_by_brute_force(source, target) - stored)  # co-occurs once: pruned
    a, b = min(p for p in stored if p[0] != x and p[1] != EOS)
    assert (x, y) not in stored and table.multiplicity[x] > 0
    counts = table.new_counts()
    assert counts.shape == (table.num_entries + 10,)
    batch = collate([([x], [y]), ([a, x], [b])])  # targets y </s> and b </s>, a padded source position
    weights = torch.tensor([[[0.7, 0.0], [0.0, 0.0]], [[0.25, 0.5], [0.0, 0.0]]])
    table.add_counts(counts, batch.source, batch.target, weights)
    entry = int(torch.searchsorted(table.keys, torch.tensor(a * 9 + b)))
    assert int(table.keys[entry]) == a * 9 + b
    assert float(counts[table.num_entries + x]) == pytest.approx(0.7 + (0.5 if (x, b) not in stored else 0.0))
    assert float(counts[entry]) == pytest.approx(0.25)
    assert float(counts.sum()) == pytest.approx(1.45)  # nothing lost, nothing from padding
    # reading: a pruned pair gets its row's rest, as the dense rows say
    with torch.no_grad():
        table.rest.normal_()
        table.logits.normal_()
        log_t = table.observed(batch.source, batch.target)
        assert float(log_t[0, 0, 0]) == pytest.approx(float(table.log_probs(torch.tensor([x]))[0, y]))
        assert float(log_t[0, 0, 0]) == pytest.approx(float(table.rest[x] - table.log_normalizers()[x]))
        assert float(log_t[1, 0, 0]) == pytest.approx(float(table.logits[entry] - table.log_normalizers()[a]))


@pytest.mark.parametrize("alpha", [0.01, 1.0])
def test_em_on_a_pruned_table_keeps_every_row_a_distribution(float64, alpha):
    """Counts from the exact posteriors of a whole text on a pruned table: all of them kept (one per target token),
    the rows after ``set_from_counts`` sum to 1, a pruned pair's probability is its share of the rest count."""
    source, target = _corpus(1, n=25, v_src=10, v_tgt=9)
    data = Bitext([with_null_word(s) for s in source], target)
    net = IBM1Network(10, 9, null_prob=0.2, table=data.table(10, 9, min_count=3))
    table = net.table
    with torch.no_grad():
        table.logits.normal_()
        table.rest.normal_()
    batch = collate(list(zip(data.source, data.target, strict=True)))
    counts = net.new_counts()
    net.add_counts(counts, batch, net.likelihood_terms(batch)[2])
    assert float(counts.sum()) == pytest.approx(float(batch.target_mask.sum()), abs=1e-9)
    assert float(counts[table.num_entries:].sum()) > 1.0  # the pruned pairs' counts went to the rests
    net.set_from_counts(counts, alpha)
    probs = net.lexical_log_probs(torch.arange(10)).detach().exp()
    assert torch.allclose(probs.sum(-1), torch.ones(10), atol=1e-12, rtol=0)
    stored, rest = counts[: table.num_entries], counts[table.num_entries:]
    total = rest.index_add(0, table.rows, stored)
    unstored = torch.ones(10, 9, dtype=torch.bool)
    unstored[table.rows, table.keys % 9] = False
    x = int(rest.argmax())
    y = int(unstored[x].nonzero()[0])
    expected = (rest[x] / unstored[x].sum() + alpha) / (total[x] + 9 * alpha)
    assert float(probs[x, y]) == pytest.approx(float(expected), rel=1e-12)


# -- 4. memory ----------------------------------------------------------------------------------------------------
def test_a_sparse_table_of_large_vocabularies_grows_with_its_pairs_not_the_product():
    V = 50_000
    source = [[5, 17, 49_999, 31_000], [17, 42, 9], [49_999, 8]]
    target = [[7, 49_998], [12_345, 7, 7, 44], [49_999]]
    keys = cooccurrences(source, target, V)
    assert _decoded(keys, V) == _pairs_by_brute_force(source, target)  # x * V + y past 2**31 decodes right
    net = IBM1Network(V, V, table=SparseTable(V, V, keys))
    tensors = [*net.parameters(), *net.buffers()]
    size = sum(t.numel() for t in tensors)
    assert size <= 4 * (len(keys) + V) + 4
    assert max(t.numel() for t in tensors) <= V + 1
    assert sum(p.numel() for p in net.parameters()) == len(keys) + V
    batch = collate(list(zip(source, target, strict=True)))
    with torch.no_grad():
        log_t = net.observed_log_probs(batch)
        rows = net.lexical_log_probs(torch.tensor([17, 49_999]))
    assert rows.shape == (2, V) and torch.allclose(rows.double().exp().sum(-1), torch.ones(2, dtype=torch.float64))
    assert float(log_t[0, 0, 2]) == pytest.approx(float(rows[1, 7]))  # 49_999 -> 7 in the first pair


# -- 5. bad input -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("keys", "match"), [
    ([5, 3, 9], "keys must be sorted and distinct"),
    ([3, 5, 5, 9], "keys must be sorted and distinct"),
    ([-1, 5], r"keys must be a 1-d tensor of x \* 12 \+ y below 14 \* 12"),
    ([5, 14 * 12], r"keys must be a 1-d tensor of x \* 12 \+ y below 14 \* 12"),
    ([[1, 2], [3, 4]], r"got shape \(2, 2\)"),
])
def test_bad_keys_are_refused(keys, match):
    with pytest.raises(ValueError, match=match):
        SparseTable(V_SRC, V_TGT, torch.tensor(keys))


def test_bad_networks_and_texts_are_refused():
    table = SparseTable(V_SRC, V_TGT, np.array([5, 30]))
    with pytest.raises(ValueError, match="a sparse table is a free table; embedding_size must be 0, got 4"):
        IBM1Network(V_SRC, V_TGT, embedding_size=4, table=table)
    with pytest.raises(ValueError, match="table has vocabularies 14 / 12, the network 14 / 13"):
        IBM1Network(V_SRC, V_TGT + 1, table=table)
    with pytest.raises(ValueError, match="table has vocabularies 14 / 12, the network 15 / 12"):
        IBM1Network(V_SRC + 1, V_TGT, table=table)
    with pytest.raises(ValueError, match="cooccurrences: 3 source and 2 target sentences; they must be pairs"):
        cooccurrences([[4], [5], [6]], [[4], [5]], V_TGT)
    with pytest.raises(ValueError, match="cooccurrences: min_count must be >= 1, got 0"):
        cooccurrences([[4]], [[5]], V_TGT, min_count=0)


def test_the_cached_normalisers_follow_a_change_of_dtype():
    """Outside training the normalisers are cached; a converted table (``.double()``, ``.to(device)``) must not read
    the old tensors' cache."""
    table = SparseTable(V_SRC, V_TGT, np.array([5, 30, 31]))
    with torch.no_grad():
        assert table.log_normalizers().dtype == torch.float32
        table.double()
        assert table.log_normalizers().dtype == torch.float64
        table.logits.add_(1.0)  # an in-place change (EM, Adam) is seen too
        assert float(table.log_normalizers()[1]) == pytest.approx(float(torch.log(torch.tensor(12.0))))
        assert float(table.log_normalizers()[2]) == pytest.approx(float(torch.log(torch.tensor(10 + 2 * np.e))))
