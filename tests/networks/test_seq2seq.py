"""Every pair on the translation networks (the LSTM and, for exactness and training, the Transformer): brute-force
exactness, padding, chunked enumeration, K-max."""

from __future__ import annotations

import math
from functools import partial

import pyro
import pytest
import torch

from pyro_attention.data.translation import PAD, TranslationBatch, collate
from pyro_attention.inference import alignment_posterior, kmax_log_likelihood, log_likelihood, predict
from pyro_attention.models import PAIRS, MarginalLikelihood, RelaxedAttention, VariationalAttention
from pyro_attention.networks import (
    AttentionalFeed,
    ContextFeed,
    FinalBridge,
    OutputLayer,
    ProductOfExperts,
    Seq2Seq,
    TanhOutput,
)
from pyro_attention.pair import Rule
from pyro_attention.tasks.translation.decoding import IncrementalDecoder, SourceMemory, greedy, translate
from tests.support.exactness import assert_trains, brute_force_log_likelihood
from tests.support.toy_network import tiny_seq2seq, tiny_transformer

V = 5


def _pad(batch: TranslationBatch, extra: int = 2) -> TranslationBatch:
    B = len(batch)
    pad = torch.full((B, extra), PAD, dtype=torch.long)
    no = torch.zeros(B, extra, dtype=torch.bool)
    return TranslationBatch(
        torch.cat([batch.source, pad], 1),
        torch.cat([batch.source_mask, no], 1),
        torch.cat([batch.target_in, pad], 1),
        torch.cat([batch.target, pad], 1),
        torch.cat([batch.target_mask, no], 1),
    )


#: the tiny translation networks every pair is checked on (tests/networks/test_transformer.py has the rest of the
#: Transformer's)
NETWORKS = {"lstm": tiny_seq2seq, "transformer": tiny_transformer,
            "transformer-product-embeddings": partial(tiny_transformer, output=ProductOfExperts, embedding_values=True)}


@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("name", ["marginal", "hard", "variational"])
def test_exact_log_likelihood_brute_force_per_example(float64, name, network):
    net, batch = NETWORKS[network]()
    net.double()
    pair = PAIRS[name](net)
    ll = log_likelihood(pair, batch)
    assert ll.exact
    assert torch.allclose(brute_force_log_likelihood(pair, batch), ll.per_example, atol=1e-10)


@pytest.mark.parametrize("network", ["lstm", "transformer"])
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_every_pair_trains(name, network):
    net, batch = NETWORKS[network](chunk_size=2)
    assert_trains(PAIRS[name](net), batch)


@pytest.mark.parametrize("network", ["lstm", "transformer"])
@pytest.mark.parametrize("name", ["soft", "marginal", "variational"])
def test_padding_changes_nothing(float64, name, network):
    """Padded source and target positions change no likelihood, no loss and no alignment probability."""
    net, batch = NETWORKS[network](seed=1)
    net.double().eval()
    pair = PAIRS[name](net)
    ll, ll_pad = log_likelihood(pair, batch), log_likelihood(pair, _pad(batch))
    assert torch.allclose(ll.per_example, ll_pad.per_example, atol=1e-10)
    loss = pair.elbo().loss(pair.model, pair.guide, batch)
    assert abs(loss - pair.elbo().loss(pair.model, pair.guide, _pad(batch))) < 1e-9
    for key, probs in alignment_posterior(pair, _pad(batch)).items():
        assert (probs[..., 3:] == 0).all(), key


def test_chunked_enumeration_equals_one_shot_in_value_and_gradient(float64):
    net, batch = tiny_seq2seq(seed=2)
    net.double()
    pair = MarginalLikelihood(net)
    grads = []
    for chunk in (None, 1, 2):
        net.chunk_size = chunk
        net.zero_grad()
        loss = pair.elbo().differentiable_loss(pair.model, pair.guide, batch)
        loss.backward()
        grads.append((loss.detach(), torch.cat([p.grad.flatten() for p in net.parameters() if p.grad is not None])))
    for loss, grad in grads[1:]:
        assert torch.allclose(loss, grads[0][0]) and torch.allclose(grad, grads[0][1], atol=1e-12)


def test_seq2seq_is_an_incremental_decoder():
    """Beam search sees the network only through the protocol (#16 item 4); Seq2Seq provides it."""
    net, batch = tiny_seq2seq()
    assert isinstance(net, IncrementalDecoder)
    src = net.encode_source(batch.source, batch.source_mask)
    assert isinstance(src, SourceMemory)
    state, fed = net.initial_state(src.repeat_rows(2))
    rows = torch.tensor([3, 0])
    kept = net.reorder_state(state, rows)
    assert all(torch.equal(h[rows], h2) and torch.equal(c[rows], c2) for (h, c), (h2, c2) in zip(state, kept,
                                                                                                 strict=True))


def test_kmax_is_exact_when_k_covers_the_source_and_a_bound_below(float64):
    net, batch = tiny_seq2seq(seed=3)
    net.double()
    pair = VariationalAttention(net)
    exact = log_likelihood(pair, batch)
    full = kmax_log_likelihood(pair, batch, k=3)
    assert full.exact and torch.allclose(full.per_example, exact.per_example, atol=1e-12)
    one = kmax_log_likelihood(pair, batch, k=1)
    assert not one.exact and "lower bound" in one.method
    assert (one.per_example <= exact.per_example + 1e-12).all()
    assert torch.allclose(predict(pair, batch, "kmax", k=3), predict(pair, batch, "marginal"), atol=1e-12)
    with pytest.raises(ValueError, match="needs a categorical alignment"):
        kmax_log_likelihood(RelaxedAttention(net), batch, k=2)


def test_inference_network_sees_the_whole_target(float64):
    net, batch = tiny_seq2seq(seed=4)
    net.double()
    pair = VariationalAttention(net)
    changed = TranslationBatch(
        batch.source,
        batch.source_mask,
        batch.target_in,
        batch.target.index_put((torch.tensor([0]), torch.tensor([1])), torch.tensor(3)),
        batch.target_mask,
    )
    q0, q1 = alignment_posterior(pair, batch)["guide"], alignment_posterior(pair, changed)["guide"]
    assert not torch.allclose(q0[0, 0], q1[0, 0])  # q at step 0 moved when target token 1 changed
    p0, p1 = alignment_posterior(pair, batch)["prior"], alignment_posterior(pair, changed)["prior"]
    assert torch.allclose(p0, p1)  # the prior sees only y_<t (target_in), unchanged here


def test_translation_batch_errors():
    net, batch = tiny_seq2seq()
    with pytest.raises(ValueError, match=r"target\[0, 0\] = 7 is out of range for vocabulary size 5"):
        net.encode(
            TranslationBatch(
                batch.source,
                batch.source_mask,
                batch.target_in,
                batch.target.index_fill(1, torch.tensor([0]), 7),
                batch.target_mask,
            )
        )
    with pytest.raises(ValueError, match=r"example\(s\) \[1\] have an empty source"):
        net.encode(
            TranslationBatch(
                batch.source,
                batch.source_mask.index_fill(0, torch.tensor([1]), False),
                batch.target_in,
                batch.target,
                batch.target_mask,
            )
        )
    with pytest.raises(ValueError, match="sentence pair 0 has an empty source sentence"):
        collate([([], [1])])
    with pytest.raises(TypeError, match="expects a TranslationBatch"):
        net.encode("a batch")


@pytest.mark.parametrize("rule", ["soft", "marginal", "kmax"])
def test_beam_one_equals_greedy(rule):
    torch.manual_seed(0)
    net = Seq2Seq(12, 12, embedding_size=8, encoder_size=6, decoder_size=8, attention_size=6)
    batch = collate([([4, 5, 6, 7], [5, 6]), ([8, 9], [4]), ([10, 11, 4], [7, 7, 7])])
    pair = MarginalLikelihood(net)
    beam1 = translate(pair, batch.source, batch.source_mask, beam_size=1, rule=rule, k=2, max_len=7)
    assert beam1 == greedy(pair, batch.source, batch.source_mask, rule=rule, k=2, max_len=7)
    beam4 = translate(pair, batch.source, batch.source_mask, beam_size=4, rule=rule, k=2, max_len=7)
    assert len(beam4) == 3 and all(len(h) <= 7 for h in beam4)


def test_beam_finds_the_best_sequence_on_a_trained_copy_task():
    """A model trained to reverse short sequences decodes them back with beam search under every rule."""
    torch.manual_seed(0)
    pairs = [([a, b, c], [c, b, a]) for a in range(4, 8) for b in range(4, 8) for c in range(4, 8)]
    batch = collate(pairs)
    net = Seq2Seq(8, 8, embedding_size=16, encoder_size=16, decoder_size=32, attention_size=16)
    pair = MarginalLikelihood(net)
    svi = pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": 0.02}), pair.elbo())
    for _ in range(150):
        svi.step(batch)
    for rule in ("marginal", "kmax", "soft"):
        hyps = translate(pair, batch.source[:8], batch.source_mask[:8], beam_size=3, rule=rule, k=2, max_len=6)
        correct = sum(h == list(t) for h, (_, t) in zip(hyps, pairs[:8], strict=True))
        assert correct >= 7, (rule, hyps)


def test_decoding_errors():
    net, batch = tiny_seq2seq()
    with pytest.raises(ValueError, match="rule must be one of"):
        translate(MarginalLikelihood(net), batch.source, batch.source_mask, rule="exact")
    with pytest.raises(ValueError, match="needs a categorical alignment"):
        translate(RelaxedAttention(net), batch.source, batch.source_mask, rule="marginal")


@pytest.mark.parametrize("rule,alpha", [("marginal", 0.0), ("soft", 0.0), ("kmax", 1.0)])
def test_batched_beam_equals_one_sentence_at_a_time(rule, alpha):
    """Beam search over a batch of sentences (padded, of different lengths) returns what it returns for each
    sentence alone, whatever the rule and the length penalty."""
    torch.manual_seed(1)
    net = Seq2Seq(12, 12, embedding_size=8, encoder_size=6, decoder_size=8, attention_size=6)
    pairs = [([4, 5, 6, 7, 8], [5]), ([8, 9], [4]), ([10, 11, 4], [7]), ([5], [6]), ([6, 7, 9, 9], [4])]
    batch = collate(pairs)
    pair = MarginalLikelihood(net)
    kw = dict(beam_size=3, rule=rule, k=2, max_len=6, length_penalty=alpha)
    alone = translate(pair, batch.source, batch.source_mask, batch_size=1, **kw)
    together = translate(pair, batch.source, batch.source_mask, batch_size=4, **kw)
    assert together == alone and len(alone) == 5
    with pytest.raises(ValueError, match="batch_size >= 1"):
        translate(pair, batch.source, batch.source_mask, batch_size=0)


# ---------------------------------------------------------------------------------------------------------------
# OpenNMT-py's decoder choices: attentional input feeding, the encoder's final states as bridge, uniform init

TOOLKIT = dict(input_feed=AttentionalFeed, bridge=FinalBridge, init=0.1)


def _toolkit_net(output: type[OutputLayer] = TanhOutput, seed: int = 0, **kw) -> Seq2Seq:
    torch.manual_seed(seed)
    options = {**TOOLKIT, **kw}
    return Seq2Seq(12, 12, embedding_size=8, encoder_size=4, decoder_size=8, attention_size=6, output=output,
                   **options)


@pytest.mark.parametrize("output", [TanhOutput, ProductOfExperts])
@pytest.mark.parametrize("name", ["marginal", "variational"])
def test_toolkit_decoder_stays_exact_and_padding_free(float64, output, name):
    """Feeding the attentional state keeps the recurrence free of the sampled alignment: the exact likelihood is
    still a brute-force sum over alignments, and padding changes nothing."""
    net = _toolkit_net(output)
    net.double()
    pair = PAIRS[name](net)
    batch = collate([([4, 3, 4], [3, 4]), ([3, 4], [4])])
    ll = log_likelihood(pair, batch)
    assert ll.exact
    assert torch.allclose(ll.per_example, log_likelihood(pair, _pad(batch)).per_example, atol=1e-10)
    assert torch.allclose(brute_force_log_likelihood(pair, batch), ll.per_example, atol=1e-10)


def test_toolkit_bridge_is_the_encoders_final_states():
    """``bridge=FinalBridge``: the decoder starts from the encoder's last states (forward at the last real word,
    backward at the first), per layer, whatever the padding."""
    net = _toolkit_net(layers=2)
    net.eval()
    batch = collate([([4, 5, 6], [5]), ([7, 8], [4])])
    src = net.encode_source(batch.source, batch.source_mask)
    state, fed = net.initial_state(src)
    assert len(state) == 2 and fed.shape == (2, 8) and (fed == 0).all()
    alone = net.encode_source(batch.source[1:, :2], batch.source_mask[1:, :2])
    assert torch.allclose(src.final_h[1], alone.final_h[0], atol=1e-6)
    h_top, _ = state[1]
    assert torch.allclose(h_top[1, :4], alone.values[0, -1, :4], atol=1e-6)  # forward direction, last word
    assert torch.allclose(h_top[1, 4:], alone.values[0, 0, 4:], atol=1e-6)  # backward direction, first word


def test_toolkit_attentional_state_is_the_output_layers_hidden_vector():
    net = _toolkit_net()
    net.eval()
    batch = collate([([4, 5, 6], [5, 6])])
    src = net.encode_source(batch.source, batch.source_mask)
    state, fed = net.initial_state(src)
    h, a, state, fed = net.decoder_step(src, batch.target_in[:, 0], state, fed)
    weights = torch.softmax(a, -1)
    context = weights @ src.values[0]
    assert torch.allclose(fed, net.head.hidden(net.head.query(h), context), atol=1e-6)
    assert net.feed.proj is None and _toolkit_net(ProductOfExperts).feed.proj is not None


def test_toolkit_uniform_init_and_errors():
    net = _toolkit_net()
    for name, p in net.named_parameters():
        assert p.abs().max() <= 0.1, name
    assert (net.src_embed.weight[PAD] == 0).all() and (net.tgt_embed.weight[PAD] == 0).all()
    with pytest.raises(TypeError, match=r"Seq2Seq: input_feed must be a subclass of InputFeed \(ContextFeed, "
                       r"AttentionalFeed\), got 'state'"):
        Seq2Seq(12, 12, input_feed="state")
    with pytest.raises(TypeError, match="got 'final'; the name 'final' stands for FinalBridge"):
        Seq2Seq(12, 12, bridge="final")
    with pytest.raises(ValueError, match="bridge 'final' needs decoder_size = 2 x encoder_size"):
        Seq2Seq(12, 12, encoder_size=4, decoder_size=6, bridge=FinalBridge)
    with pytest.raises(ValueError, match="init must be >= 0"):
        Seq2Seq(12, 12, init=-0.1)


@pytest.mark.parametrize("rule", ["soft", "marginal"])
def test_toolkit_batched_beam_equals_one_sentence_at_a_time(rule):
    net = _toolkit_net(seed=1)
    pairs = [([4, 5, 6, 7, 8], [5]), ([8, 9], [4]), ([10, 11, 4], [7]), ([5], [6])]
    batch = collate(pairs)
    pair = MarginalLikelihood(net)
    kw = dict(beam_size=3, rule=rule, k=2, max_len=6)
    alone = translate(pair, batch.source, batch.source_mask, batch_size=1, **kw)
    assert translate(pair, batch.source, batch.source_mask, batch_size=4, **kw) == alone


# ---------------------------------------------------------------------------------------------------------------
# The exact marginal of the product-of-experts layer in decoding: source experts once per sentence, two products


def test_kmax_mixture_is_the_marginal_under_the_kmax_prior(float64):
    """The renormalised K-max mixture equals the exact mixture over all positions under :func:`kmax_log_prior`
    (padded positions, ``-inf``, and ``k`` beyond the real ones included)."""
    from pyro_attention.pair import kmax_log_prior, kmax_mixture

    g = torch.Generator().manual_seed(0)
    log_prior = torch.randn(4, 6, generator=g).log_softmax(-1)
    log_prior[1, 3:] = -math.inf  # 3 real positions
    log_prior = log_prior.log_softmax(-1)
    table = torch.randn(4, 6, 9, generator=g).log_softmax(-1)  # log p(y | s)
    for k in (1, 2, 4, 6):
        restricted = kmax_log_prior(log_prior, k)
        assert (restricted > -math.inf).sum(-1).tolist() == [k, min(k, 3), k, k]
        assert torch.allclose(restricted.logsumexp(-1), torch.zeros(4, dtype=torch.float64), atol=1e-12)
        mixture = kmax_mixture(log_prior, k, lambda index: table.gather(1, index[..., None].expand(-1, -1, 9)),
                               renormalise=True)
        assert torch.allclose(mixture, (restricted[..., None] + table).logsumexp(1), atol=1e-12)
    with pytest.raises(ValueError, match="kmax_log_prior: k must be >= 1, got 0"):
        kmax_log_prior(log_prior, 0)


def test_product_marginal_select_moves_the_kept_sentences_forward_in_place():
    from pyro_attention.tasks.translation import decoding

    v = torch.randn(5, 3, 7)
    cache = decoding._ProductMarginal(v.clone(), rows=2)
    expected = decoding._ProductMarginal(v.clone(), rows=2)
    buffer = cache.E.data_ptr()
    kept = cache.select(torch.tensor([1, 3, 4]))
    assert kept.E.data_ptr() == buffer and kept.E.is_contiguous() and kept.E.shape == (3, 3, 7)
    assert torch.equal(kept.v, v[[1, 3, 4]]) and torch.equal(kept.E, expected.E[[1, 3, 4]])
    assert torch.equal(kept.n, expected.n[[1, 3, 4]])
    with pytest.raises(ValueError, match=r"sentences must increase, got \[2, 1\]"):
        kept.select(torch.tensor([2, 1]))


@pytest.mark.parametrize("toolkit", [False, True])
def test_product_marginal_next_log_probs_equal_the_general_path(float64, toolkit):
    """``_ProductMarginal`` gives the same ``log p(y_t | x, y_<t)`` as ``step_logits`` at every source value and a
    logsumexp over them (padded sources, several hypotheses per sentence), for the exact marginal and K-max."""
    from pyro_attention.tasks.translation import decoding

    net = (_toolkit_net(output=ProductOfExperts) if toolkit else
           Seq2Seq(12, 12, embedding_size=8, encoder_size=6, decoder_size=8, attention_size=6, output=ProductOfExperts))
    net.double().eval()
    batch = collate([([4, 5, 6, 7, 8], [5]), ([8, 9], [4]), ([10, 11, 4], [7])])
    sentences = net.encode_source(batch.source, batch.source_mask)
    pair = MarginalLikelihood(net)
    fast = {rule: decoding._step_rule(pair, rule, sentences, 2, k=2) for rule in (Rule.MARGINAL, Rule.KMAX)}
    general = {rule: decoding._STEP_RULES[rule](pair, sentences, 2, k=2, experts=False) for rule in fast}
    assert all(fast[r].product is not None and general[r].product is None for r in fast)
    src = sentences.repeat_rows(2)
    state, fed = net.initial_state(src)
    y = torch.tensor([1, 1, 1, 1, 1, 1])
    for _ in range(3):
        h, a, state, fed = net.decoder_step(src, y, state, fed)
        for rule in fast:
            assert torch.allclose(fast[rule](src, h, a, fed), general[rule](src, h, a, fed), atol=1e-10)
        general_marginal = general[Rule.MARGINAL](src, h, a, fed)
        assert torch.allclose(general_marginal.logsumexp(-1), torch.zeros(6, dtype=torch.float64), atol=1e-10)
        y = general_marginal.argmax(-1)
    tanh = _toolkit_net()
    assert tanh.source_experts(tanh.encode_source(batch.source, batch.source_mask).values) is None


def test_tanh_marginal_next_log_probs_equal_logsumexp_of_the_log_softmaxes(float64):
    """The ``tanh`` layer's exact marginal in decoding (:func:`log_mixture_of_softmaxes`) equals ``logsumexp_s (log
    p(s) + log_softmax(step_logits(h, x_s)))``, padded sources and several hypotheses per sentence included."""
    from pyro_attention.tasks.translation import decoding

    net = _toolkit_net()
    net.double().eval()
    batch = collate([([4, 5, 6, 7, 8], [5]), ([8, 9], [4]), ([10, 11, 4], [7])])
    sentences = net.encode_source(batch.source, batch.source_mask)
    rule = decoding._step_rule(MarginalLikelihood(net), Rule.MARGINAL, sentences, 2, k=2)
    src = sentences.repeat_rows(2)
    state, fed = net.initial_state(src)
    y = torch.tensor([1, 1, 1, 1, 1, 1])
    for _ in range(3):
        h, a, state, fed = net.decoder_step(src, y, state, fed)
        log_prior = decoding._log_prior(src, a)
        assert (log_prior == -math.inf).any()  # padded sources
        expected = (log_prior.unsqueeze(-1) + net.step_logits(h.unsqueeze(1), src.values).log_softmax(-1)).logsumexp(1)
        got = rule(src, h, a, fed)
        assert torch.allclose(got, expected, atol=1e-10)
        y = got.argmax(-1)


def test_product_marginal_beam_equals_the_general_path(monkeypatch):
    """Beam search with the cached source experts (exact marginal, K-max) returns what the general path returns,
    batched or alone."""
    net = _toolkit_net(output=ProductOfExperts, seed=2)
    pairs = [([4, 5, 6, 7, 8], [5]), ([8, 9], [4]), ([10, 11, 4], [7]), ([5], [6])]
    batch = collate(pairs)
    pair = MarginalLikelihood(net)
    fast = {}
    for rule in ("marginal", "kmax"):
        kw = dict(beam_size=3, rule=rule, k=2, max_len=6)
        fast[rule] = translate(pair, batch.source, batch.source_mask, batch_size=4, **kw)
        assert translate(pair, batch.source, batch.source_mask, batch_size=1, **kw) == fast[rule]
        assert greedy(pair, batch.source, batch.source_mask, rule=rule, k=2, max_len=6) == translate(
            pair, batch.source, batch.source_mask, batch_size=4, beam_size=1, rule=rule, k=2, max_len=6)
    monkeypatch.setattr(Seq2Seq, "source_experts", lambda self, values: None)
    for rule in ("marginal", "kmax"):
        kw = dict(beam_size=3, rule=rule, k=2, max_len=6)
        assert translate(pair, batch.source, batch.source_mask, batch_size=4, **kw) == fast[rule]


@pytest.mark.parametrize("feed", [AttentionalFeed, ContextFeed])
@pytest.mark.parametrize("output", [TanhOutput, ProductOfExperts])
def test_soft_decoding_reuses_the_steps_context_and_translates_the_same(feed, output, monkeypatch):
    """The soft rule takes its logits from the vector the decoder step fed forward (the attentional state of a tanh
    head, or the context itself) where that determines them: the same log-probabilities as computing the context
    again, and the same beam-search translations; a pair with a soft context of its own (the Dirichlet's mean
    weights) computes it."""
    from pyro_attention.tasks.translation import decoding

    net = _toolkit_net(output=output, seed=3, input_feed=feed).double().eval()
    batch = collate([([4, 5, 6, 7, 8], [5]), ([8, 9], [4]), ([10, 11, 4], [7]), ([5], [6])])
    sentences = net.encode_source(batch.source, batch.source_mask)
    pair = MarginalLikelihood(net)
    rule = decoding._step_rule(pair, Rule.SOFT, sentences, 2, k=2)
    reuses = feed is ContextFeed or output is TanhOutput  # the product head's attentional feed is a layer of its own
    assert rule.prior_mean
    assert not decoding._step_rule(RelaxedAttention(net), Rule.SOFT, sentences, 2, k=2).prior_mean
    src = sentences.repeat_rows(2)
    state, fed = net.initial_state(src)
    y = torch.ones(8, dtype=torch.long)
    recomputed = decoding._Soft(pair, sentences, 2, 2)
    recomputed.prior_mean = False
    for _ in range(3):
        h, a, state, fed = net.decoder_step(src, y, state, fed)
        assert (net.soft_step_logits(h, fed) is not None) == reuses
        got = rule(src, h, a, fed)
        assert torch.allclose(got, recomputed(src, h, a, fed), atol=1e-12)
        y = got.argmax(-1)
    kw = dict(beam_size=3, rule="soft", max_len=6, batch_size=4)
    fast = translate(pair, batch.source, batch.source_mask, **kw)
    monkeypatch.setattr(Seq2Seq, "soft_step_logits", lambda self, h, fed: None)
    assert translate(pair, batch.source, batch.source_mask, **kw) == fast
