"""Both directions of an aligner trained together by agreement (``pyro-attention align --agreement``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pyro_attention.networks.lexical import HMMNetwork, IBM1Network, with_null_word
from pyro_attention.registry import make_pair
from pyro_attention.tasks.align.agreement import JointBitext, agreement_loss, agreement_weights, fit_agreement

V = 12
# sorted as bucketing sorts them (source length, then target length), so batch row i is pair i
SOURCE = [[8, 9], [5, 6, 7], [4, 5, 6, 7]]
TARGET = [[6, 7, 8, 9], [4, 5], [10, 11, 4]]


def _joint(null: bool) -> JointBitext:
    put = with_null_word if null else list
    return JointBitext([put(s) for s in SOURCE], TARGET, [put(t) for t in TARGET], SOURCE)


def _random(network: torch.nn.Module) -> torch.nn.Module:
    for p in network.parameters():
        p.data.normal_()
    return network


@pytest.mark.parametrize("null_prob", [None, 0.2])
@pytest.mark.parametrize("network", [HMMNetwork, IBM1Network])
def test_without_agreement_the_loss_is_both_directions_exact_likelihood(network, null_prob):
    """Each direction's own posterior in the E-step: the value and the gradient of both directions' exact negative
    log-likelihood -- what the ``marginal`` pair's ``TraceEnum_ELBO`` gives (enumeration of the alignment)."""
    torch.manual_seed(0)
    forward, reverse = _random(network(V, V, null_prob=null_prob)), _random(network(V, V, null_prob=null_prob))
    ((fb, rb),) = _joint(null_prob is not None).batches(8)
    params = [*forward.parameters(), *reverse.parameters()]
    loss = agreement_loss(forward, reverse, (fb, rb), agreement=False)
    reference = sum(pair.elbo().differentiable_loss(pair.model, pair.guide, batch)
                    for pair, batch in ((make_pair("marginal", forward), fb), (make_pair("marginal", reverse), rb)))
    assert torch.allclose(loss, reference, rtol=1e-5)
    ours = torch.autograd.grad(loss, params, allow_unused=True)
    exact = torch.autograd.grad(reference, params, allow_unused=True)
    for a, b in zip(ours, exact, strict=True):
        assert (a is None) == (b is None) or float((a if a is not None else b).abs().max()) == 0.0
        if a is not None and b is not None:
            assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("null", [False, True])
def test_agreement_weights_multiply_the_two_posteriors_at_each_link(null):
    torch.manual_seed(1)
    forward, reverse = (_random(HMMNetwork(V, V, null_prob=0.2 if null else None)) for _ in range(2))
    ((fb, rb),) = _joint(null).batches(8)
    post_f, post_r = forward.likelihood_terms(fb)[2], reverse.likelihood_terms(rb)[2]
    q_f, q_r = agreement_weights(post_f, post_r, fb.target_mask, rb.target_mask, null, null)
    o = int(null)
    for i, (x, y) in enumerate(zip(SOURCE, TARGET, strict=True)):
        for t in range(len(y)):
            for s in range(len(x)):
                both = post_f[i, t, o + s] * post_r[i, s, o + t]
                assert torch.isclose(q_f[i, t, o + s], both) and torch.isclose(q_r[i, s, o + t], both)
        # </s> and the NULL word have no counterpart: each direction keeps its own posterior
        assert torch.equal(q_f[i, len(y)], post_f[i, len(y)]) and torch.equal(q_r[i, len(x)], post_r[i, len(x)])
        if null:
            assert torch.equal(q_f[i, :, 0], post_f[i, :, 0]) and torch.equal(q_r[i, :, 0], post_r[i, :, 0])
    assert float(q_f[~fb.target_mask].abs().sum()) == 0.0  # padding stays zero


def test_agreement_refuses_mismatched_directions():
    ((fb, rb),) = _joint(False).batches(8)
    forward = torch.rand(3, 5, 4)  # targets of up to 4 words and </s>, sources of up to 4 words
    with pytest.raises(ValueError, match="not the same sentence pairs"):
        agreement_weights(forward, torch.rand(3, 5, 5), fb.target_mask, rb.target_mask)
    with pytest.raises(ValueError, match="not the same sentence pairs"):
        agreement_weights(forward, torch.rand(2, 5, 4), fb.target_mask, rb.target_mask)
    with pytest.raises(ValueError, match="the four sides hold 3 / 3 / 2 / 3"):
        JointBitext(SOURCE, TARGET, TARGET[:2], SOURCE)


def test_joint_bitext_collates_each_bucket_once():
    """Every epoch draws the same buckets in a new order: each bucket is collated once, its batches kept and equal
    to a fresh collation of its pairs; batches of another size replace them."""
    from pyro_attention.data.translation import collate

    data = _joint(True)
    data = JointBitext(data.source * 4, data.target * 4, data.reverse_source * 4, data.reverse_target * 4)
    generator = torch.Generator().manual_seed(0)
    epochs = [data.batches(2, shuffle=True, generator=generator) for _ in range(4)]
    assert len(data._collated) == len(epochs[0]) == 6
    assert len({tuple(id(b) for b, _ in epoch) for epoch in epochs}) > 1  # the order changes
    assert all({id(b) for b, _ in epoch} == {id(b) for b, _ in epochs[0]} for epoch in epochs)  # the batches do not
    for idx, (fb, rb) in data._collated.items():
        fresh = collate([(data.source[i], data.target[i]) for i in idx])
        assert torch.equal(fb.source, fresh.source) and torch.equal(fb.target, fresh.target)
        assert torch.equal(rb.source, collate([(data.reverse_source[i], data.reverse_target[i]) for i in idx]).source)
    data.batches(3)  # another batch size (the next stage): only its buckets are kept
    assert len(data._collated) == 4 and all(len(idx) <= 3 for idx in data._collated)


def test_training_by_agreement_fits_both_directions():
    torch.manual_seed(0)
    data = _joint(True)
    data = JointBitext(data.source * 4, data.target * 4, data.reverse_source * 4, data.reverse_target * 4)
    forward, reverse = HMMNetwork(V, V, null_prob=0.2), HMMNetwork(V, V, null_prob=0.2)
    result = fit_agreement(forward, reverse, data, num_epochs=8, batch_size=4, lr=0.05,
                           param_lr={"lexical.": 0.1})
    assert result.steps == 8 * 3 and all(map(torch.isfinite, map(torch.tensor, result.losses)))
    assert sum(result.losses[-3:]) < sum(result.losses[:3]) - 0.5  # it learns both tables
    with pytest.raises(ValueError, match="batch_size"):
        fit_agreement(forward, reverse, data, batch_size=0)


def test_align_trains_both_directions_by_agreement_and_keeps_them(tmp_path):
    """``--agreement`` trains the two directions together, names its rows ``hmm-...-agree-...``, keeps both
    directions' alignments in one pair of files (a rerun reads them); ``--table-prior`` likewise (``-dirichletA``);
    both are refused where they cannot apply."""
    from pyro_attention.tasks.align import AlignConfig, HMMOptions, run_align

    text, links = tmp_path / "gold.txt", tmp_path / "gold.p1"
    text.write_text("the house is small ||| das haus ist klein\nthe cat ||| die katze\n"
                    "a small cat ||| eine kleine katze\n" * 3)
    links.write_text("1-1 2-2 3-3 4-4\n1-1 2-2\n1-1 2p2 3-3\n" * 3)
    config = AlignConfig(gold_text=str(text), gold_links=str(links), network="hmm", models=["marginal"], epochs=2,
                         options=HMMOptions(ibm1_epochs=2, null_prob=0.2, agreement=True), both_directions=True,
                         out=str(tmp_path / "runs"))
    logs: list[str] = []
    rows = run_align(config, log=logs.append)
    assert {r.network for r in rows} == {"hmm-null-agree"}
    assert all("both directions trained by agreement" in r.note for r in rows)
    assert {"forward", "reverse", "intersection", "posterior-mean"} <= {r.direction for r in rows}
    assert any("by agreement:" in m and "mean NLL per token (both directions)" in m for m in logs)
    saved = sorted(p.name for p in (tmp_path / "runs").glob("*.trained.pt"))
    assert saved == ["hmm-marginal-joint-forward.trained.pt", "hmm-marginal-joint-reverse.trained.pt"]
    logs.clear()
    again = run_align(config, log=logs.append)
    assert sum("read from" in m for m in logs) == 2 and not any("by agreement:" in m for m in logs)
    assert [(r.source, r.direction, r.result) for r in again] == [(r.source, r.direction, r.result) for r in rows]
    dirichlet = dataclasses.replace(config.options, agreement=False, table_prior=0.5)
    em = run_align(dataclasses.replace(config, options=dirichlet, out=str(tmp_path / "em")),
                   log=lambda _: None)
    assert {r.network for r in em} == {"hmm-null-dirichlet0.5"}
    assert all("tables by EM, Dirichlet(0.5) posterior mean" in r.note for r in em)
    with pytest.raises(ValueError, match="add --both-directions"):
        AlignConfig(gold_text=str(text), gold_links=str(links), network="hmm", models=["marginal"],
                    options=HMMOptions(agreement=True))
    with pytest.raises(ValueError, match="table_prior: .*--table-prior 0.1 trains both directions together"):
        AlignConfig(gold_text=str(text), gold_links=str(links), network="hmm", models=["marginal"],
                    options=HMMOptions(table_prior=0.1))
    with pytest.raises(ValueError, match="with --decoder-expert 8 the emission is a product"):
        AlignConfig(gold_text=str(text), gold_links=str(links), network="hmm", models=["marginal"],
                    options=HMMOptions(table_prior=0.1, decoder_expert=8), both_directions=True)
    with pytest.raises(ValueError, match="agreement: network 'ibm1' does not use it .*; hmm do"):
        AlignConfig.from_flags(gold_text=str(text), gold_links=str(links), network="ibm1", models=["marginal"],
                               both_directions=True, agreement=True)
    with pytest.raises(ValueError, match="options: network 'ibm1' reads IBM1Options, got HMMOptions"):
        AlignConfig(gold_text=str(text), gold_links=str(links), network="ibm1", models=["marginal"],
                    options=HMMOptions())


def _text() -> tuple[list[list[str]], list[list[str]]]:
    from pyro_attention.data import make_synthetic_translation

    c = make_synthetic_translation(60, seed=3, vocab_size=10)
    return c.source, c.target


@pytest.mark.parametrize("null_prob", [None, 0.2])
def test_tables_by_em_are_ibm_model_1_s_em(null_prob):
    """With a vanishing Dirichlet prior the closed-form tables are EM's: after k epochs the posteriors of both
    directions are those of k iterations of the plain EM IBM Model 1 of the test suite (tests/support/ibm1_em.py)."""

    from pyro_attention.data.text import Vocab
    from tests.support.ibm1_em import EMIBM1

    src, tgt = _text()
    put = with_null_word if null_prob else list
    sv, tv = Vocab.build(src), Vocab.build(tgt)
    s_ids, t_ids = [sv.encode(s) for s in src], [tv.encode(t) for t in tgt]
    data = JointBitext([put(s) for s in s_ids], t_ids, [put(t) for t in t_ids], s_ids)
    forward = IBM1Network(len(sv), len(tv), null_prob=null_prob)
    reverse = IBM1Network(len(tv), len(sv), null_prob=null_prob)
    result = fit_agreement(forward, reverse, data, num_epochs=3, batch_size=16, agreement=False, table_prior=1e-9)
    assert result.steps == 3 * 4 and forward.src_embed.weight.requires_grad  # the table is trainable again after
    for network, (a, b), (va, vb) in ((forward, (src, tgt), (sv, tv)), (reverse, (tgt, src), (tv, sv))):
        em = EMIBM1(a, b, null_prob=null_prob).iterate(3)
        ((batch, _),) = JointBitext([put(va.encode(s)) for s in a], [vb.encode(t) for t in b],
                                    [put(vb.encode(t)) for t in b], [va.encode(s) for s in a]).batches(len(a))
        post = network.likelihood_terms(batch)[2]
        order = sorted(range(len(a)), key=lambda i: (len(put(va.encode(a[i]))), len(b[i]), i))  # bucketing's
        for row, i in enumerate(order):
            expected = torch.tensor(em.posterior(a[i], b[i]), dtype=torch.float32)
            got = post[row, : len(b[i]), : expected.shape[1]]
            assert torch.allclose(got, expected, atol=1e-4), (i, got, expected)


def test_tables_by_em_are_the_dirichlet_posterior_mean():
    """One epoch from uniform tables: the posterior of every target word is uniform over its source words, so the
    expected counts are ``c(x, y) = sum 1 / n`` and the table ``(c + alpha) / (c(x) + V alpha)``."""
    from pyro_attention.data.translation import EOS

    src, tgt = [[4, 5], [4], [5, 6, 4]], [[7, 8], [7], [9, 7]]
    V = 10
    data = JointBitext(src, tgt, tgt, src)
    forward, reverse = IBM1Network(V, V), IBM1Network(V, V)
    fit_agreement(forward, reverse, data, num_epochs=1, batch_size=2, agreement=False, table_prior=0.5)
    counts = torch.zeros(V, V, dtype=torch.float64)
    for x, y in zip(src, tgt, strict=True):
        for w in [*y, EOS]:
            for s in x:
                counts[s, w] += 1.0 / len(x)
    expected = ((counts + 0.5) / (counts + 0.5).sum(-1, keepdim=True)).float()
    table = torch.log_softmax(forward.src_embed.weight.detach(), -1).exp()
    assert torch.allclose(table[[4, 5, 6]], expected[[4, 5, 6]], atol=1e-6)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        fit_agreement(forward, reverse, data, table_prior=0.0)
    with pytest.raises(ValueError, match="needs a free \\(full-rank\\) lexical table"):
        fit_agreement(IBM1Network(V, V, embedding_size=4), reverse, data, table_prior=0.5)
