"""The Transformer encoder-decoder: padding, the inference network, step-by-step decoding from cached keys and values
against the parallel decoder, beam search, its cross-attention baseline (every pair's brute-force exactness and
training on it: tests/networks/test_seq2seq.py)."""

from __future__ import annotations

import math

import pyro
import pytest
import torch

from pyro_attention.data.translation import collate
from pyro_attention.inference import alignment_posterior, kmax_log_likelihood, log_likelihood
from pyro_attention.models import MarginalLikelihood, VariationalAttention
from pyro_attention.networks import GeneralScore, MLPScore, ProductOfExperts, ScaledDotScore, TransformerSeq2Seq
from pyro_attention.tasks.translation.decoding import IncrementalDecoder, SourceMemory, greedy, translate
from tests.support.toy_network import tiny_transformer

SENTENCES = [([4, 5, 6, 7, 8], [5, 9, 10]), ([8, 9], [4]), ([10, 11, 4], [7, 7]), ([5], [6])]


def test_inference_network_sees_the_whole_target_and_the_prior_only_the_past(float64):
    net, batch = tiny_transformer(seed=4)
    net.double()
    pair = VariationalAttention(net)
    changed = collate([([4, 3, 4], [3, 3]), ([3, 4], [4])])  # target word 1 of the first sentence changed
    q0, q1 = alignment_posterior(pair, batch)["guide"], alignment_posterior(pair, changed)["guide"]
    assert not torch.allclose(q0[0, 0], q1[0, 0])  # q at step 0 moved when target word 1 changed
    p0, p1 = alignment_posterior(pair, batch)["prior"], alignment_posterior(pair, changed)["prior"]
    assert torch.allclose(p0[0, :2], p1[0, :2]) and not torch.allclose(p0[0, 2], p1[0, 2])  # sees y_<t only


@pytest.mark.parametrize("attention", [ScaledDotScore, GeneralScore, MLPScore])
def test_cached_step_decoding_equals_the_parallel_decoder(float64, attention):
    """``decoder_step`` from cached keys and values gives the parallel decoder's states and prior scores at every
    position, through beam search's row repeats and reorders; the network is an incremental decoder."""
    torch.manual_seed(0)
    net = TransformerSeq2Seq(12, 12, model_size=8, heads=2, feedforward_size=16, layers=2, attention_size=6,
                             attention=attention).double().eval()
    assert isinstance(net, IncrementalDecoder)
    batch = collate(SENTENCES)
    enc = net.encode(batch)
    src = net.encode_source(batch.source, batch.source_mask)
    assert isinstance(src, SourceMemory)
    src, rows = src.repeat_rows(2), torch.tensor([1, 0, 3, 2, 5, 4, 7, 6])  # two copies per sentence, swapped
    state, fed = net.initial_state(src)
    for t in range(batch.target_in.shape[1]):
        h, scores, state, fed = net.decoder_step(src, batch.target_in.repeat_interleave(2, 0)[:, t], state, fed)
        assert torch.allclose(h, enc.state["h"][:, t].repeat_interleave(2, 0), atol=1e-10)
        assert torch.allclose(scores, enc.prior_scores[:, t].repeat_interleave(2, 0), atol=1e-10)
        state = net.reorder_state(state, rows)
    kept = src.select_rows(torch.tensor([2, 3]))
    assert torch.equal(kept.values, src.values[2:4]) and all(
        torch.equal(a, b[:, 2:4]) for a, b in zip(kept.cross, src.cross, strict=True))


@pytest.mark.parametrize("rule", ["soft", "marginal", "kmax"])
def test_beam_search_batched_equals_alone_and_beam_one_equals_greedy(rule):
    torch.manual_seed(1)
    net = TransformerSeq2Seq(12, 12, model_size=8, heads=2, feedforward_size=16, layers=2, attention_size=6,
                             output=ProductOfExperts)
    batch = collate(SENTENCES)
    pair = MarginalLikelihood(net)
    kw = dict(beam_size=3, rule=rule, k=2, max_len=6)
    alone = translate(pair, batch.source, batch.source_mask, batch_size=1, **kw)
    assert translate(pair, batch.source, batch.source_mask, batch_size=4, **kw) == alone
    assert translate(pair, batch.source, batch.source_mask, beam_size=1, rule=rule, k=2, max_len=6) == greedy(
        pair, batch.source, batch.source_mask, rule=rule, k=2, max_len=6)


def test_kmax_is_exact_when_k_covers_the_source(float64):
    net, batch = tiny_transformer(seed=3)
    net.double()
    pair = VariationalAttention(net)
    full = kmax_log_likelihood(pair, batch, k=3)
    assert full.exact and torch.allclose(full.per_example, log_likelihood(pair, batch).per_example, atol=1e-12)


def test_a_copy_task_is_learnt_and_decoded():
    """Trained to reverse three-word sentences, the Transformer's exact marginal decodes them back."""
    torch.manual_seed(0)
    sentences = [([a, b, c], [c, b, a]) for a in range(4, 8) for b in range(4, 8) for c in range(4, 8)]
    batch = collate(sentences)
    net = TransformerSeq2Seq(8, 8, model_size=32, heads=4, feedforward_size=64, layers=2, attention_size=16)
    pair = MarginalLikelihood(net)
    svi = pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": 0.005}), pair.elbo())
    for _ in range(150):
        svi.step(batch)
    hyps = translate(pair, batch.source[:8], batch.source_mask[:8], beam_size=3, rule="marginal", max_len=6)
    assert sum(h == list(t) for h, (_, t) in zip(hyps, sentences[:8], strict=True)) >= 7, hyps


def test_cross_attention_baseline_is_the_top_layers_weights(float64):
    """``own_posteriors``' cross-attention (what ``align`` scores beside the alignment head): distributions over the
    real source words, read on the way to the decoder's very output."""
    torch.manual_seed(2)
    net = TransformerSeq2Seq(12, 12, model_size=8, heads=2, feedforward_size=16, layers=2, attention_size=6)
    net.double().eval()
    batch = collate(SENTENCES)
    weights, h = net.cross_attention(batch)
    assert torch.allclose(h, net.encode(batch).state["h"], atol=1e-10)
    assert torch.allclose(weights.sum(-1), torch.ones_like(weights[..., 0]))
    assert (weights.masked_select(~batch.source_mask[:, None, :].expand_as(weights)) == 0).all()
    assert torch.allclose(net.own_posteriors(batch)["cross-attention"], weights, atol=1e-12)


def test_constructor_errors():
    with pytest.raises(ValueError, match="model_size must be even and a multiple of heads"):
        TransformerSeq2Seq(12, 12, model_size=10, heads=4)
    with pytest.raises(ValueError, match="heads must be >= 1"):
        TransformerSeq2Seq(12, 12, heads=0)
    with pytest.raises(TypeError, match="attention must be a subclass of AttentionScore"):
        TransformerSeq2Seq(12, 12, attention="scaled")
    with pytest.raises(ValueError, match="dropout must be in"):
        TransformerSeq2Seq(12, 12, dropout=1.0)


def test_the_guide_starts_as_broad_as_the_prior_at_full_width():
    """The inference network's bilinear score is scaled by 1/sqrt(d), as the prior's dot product is: at width 256 an
    unscaled score had a standard deviation of ~13 at initialisation, a guide nearly one-hot on random positions
    (entropy 0.24 of log 13 = 2.56 nats) that VA-enum's prior then collapsed to.  Both start near uniform now."""
    torch.manual_seed(0)
    net = TransformerSeq2Seq(300, 300, model_size=256, heads=4, feedforward_size=64, layers=1, attention_size=256)
    net.eval()
    generator = torch.Generator().manual_seed(0)
    batch = collate([(torch.randint(4, 300, (13,), generator=generator).tolist(),
                      torch.randint(4, 300, (12,), generator=generator).tolist()) for _ in range(8)])
    enc = net.encode(batch)
    for scores in (net.posterior_scores(enc), enc.prior_scores):
        p = torch.softmax(scores, -1)
        entropy = -(p * p.clamp_min(1e-30).log()).sum(-1).mean()
        assert entropy > 0.8 * math.log(13)
