"""Bad input to the pairs (their names, options and rules, and the batches and tensors they are given): this layer's
entries of the bad-input catalogue, each a mistake committed once that must get a clear error
(:func:`tests.support.mistakes.check_mistake`; docs/troubleshooting.md lists every layer's)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pyro_attention.data import RegionBatch, make_region_qa
from pyro_attention.data.translation import collate
from pyro_attention.inference import kmax_log_likelihood, log_likelihood, predict
from pyro_attention.models import (
    HardAttention,
    MarginalLikelihood,
    RelaxedAttention,
    SoftAttention,
    VariationalAttention,
)
from pyro_attention.networks import RegionQA
from pyro_attention.pair import RuleError
from pyro_attention.registry import make_pair, parse_options
from tests.support import mistakes as m

CATALOGUE: list[m.Mistake] = [
    m.Mistake(
        "gold-link-to-padding", m.GOLD, "a batch whose gold alignment points at a padded source position",
        lambda: m.translation_ll(gold=lambda b: m.with_value(torch.full_like(b.target, -1), (1, 0), 2)),
        ValueError, r"gold\[1, 0\] = 2 points outside the 2 real source tokens of example 1",
        "Gold positions must be real source positions, or -1.",
    ),
    m.Mistake(
        "gold-region-out-of-range", m.GOLD, "a region-QA gold region outside the scene's real regions",
        lambda: m.region_ll(gold=lambda b: b.gold + 10),
        ValueError, r"gold\[0\] = \d+ points outside the \d+ real regions of example 0 \(use -1",
        "Use the index of a real region, or -1 for 'no gold region'.",
    ),
    m.Mistake(
        "unknown-pair", m.NAMES, "a pair name that does not exist",
        lambda: make_pair("transformer", m.region_net()[0]),
        ValueError, r"unknown pair 'transformer'; choose from soft, marginal, hard, variational, relaxed, .*rws",
        "Use one of the listed names (`pyro_attention.registry.ALL_PAIRS`).",
    ),
    m.Mistake(
        "unknown-estimator", m.NAMES, "an estimator the pair does not have",
        lambda: make_pair("hard", m.region_net()[0], "reinforce"),
        ValueError, r"estimator 'reinforce' of pair 'hard': choose from enum, sample",
        "Use one of the listed estimators.",
    ),
    m.Mistake(
        "estimator-without-choice", m.NAMES, "an estimator for a pair that has no choice of estimator",
        lambda: make_pair("soft", m.region_net()[0], "enum"),
        ValueError, r"pair 'soft' has no choice of estimator, got 'enum'; estimators exist for hard \(enum/sample\)",
        "Leave the estimator out for this pair.",
    ),
    m.Mistake(
        "unknown-pair-option", m.NAMES, "a constructor option the pair does not have",
        lambda: make_pair("gaussian", m.region_net()[0], klscale=0.01),
        ValueError, r"pair 'gaussian' has no option 'klscale'; its options: prior='standard', .*kl_scale=1\.0",
        "Use one of the listed options (spelled as listed).",
    ),
    m.Mistake(
        "option-without-value", m.NAMES, "`--option kl_scale` without `=VALUE`",
        lambda: parse_options(["kl_scale"]),
        ValueError, r"option 'kl_scale': expected KEY=VALUE, e\.g\. kl_scale=0\.01",
        "Write `--option kl_scale=0.01`.",
    ),
    m.Mistake(
        "unknown-predict-rule", m.NAMES, "an unknown prediction rule",
        lambda: predict(SoftAttention(m.region_net()[0]), m.region_net()[1], rule="mean"),
        RuleError, r"rule must be one of \('marginal', 'soft', 'kmax'\), got 'mean'",
        "Use one of the listed rules.",
    ),
    m.Mistake(
        "kmax-non-categorical", m.NAMES, "K-max likelihood of a pair without a categorical alignment",
        lambda: kmax_log_likelihood(RelaxedAttention(m.region_net()[0]), m.region_net()[1], 2),
        ValueError, r"K-max needs a categorical alignment; RelaxedAttention has latent 'simplex'",
        "Use `log_likelihood` for this pair.",
    ),
    m.Mistake(
        "marginal-without-latent", m.NAMES, "`predict(rule='marginal')` for soft attention",
        lambda: predict(SoftAttention(m.region_net()[0]), m.region_net()[1], rule="marginal"),
        RuleError, r"SoftAttention has no latent alignment to marginalise; use rule='soft'",
        "Use `rule='soft'` (or `rule=None`: the pair's own rule).",
    ),
    m.Mistake(
        "regions-nan", m.TENSORS, "a NaN feature in a real region",
        lambda: m.region_ll(regions=lambda b: m.with_value(b.regions, (3, 0, 2), float("nan"))),
        ValueError, r"regions: non-finite feature \(NaN or inf\) at example 3, region 0",
        "Clean the features (padded regions may hold anything; real ones must be finite).",
    ),
    m.Mistake(
        "question-vectors-inf", m.TENSORS, "an infinite value in question vectors",
        lambda: log_likelihood(
            SoftAttention(RegionQA(13, 8, question_size=2, hidden_size=4)),
            dataclasses.replace(m.region_net()[1], question=torch.tensor([[0.0, 1.0]] * 3 + [[float("inf"), 0.0]])),
        ),
        ValueError, r"question: non-finite values \(NaN or inf\) in question vectors",
        "Clean the question vectors.",
    ),
    m.Mistake(
        "regions-all-padding", m.TENSORS, "an example whose regions are all padding",
        lambda: m.region_ll(region_mask=lambda b: m.with_value(b.region_mask, 2, False)),
        ValueError, r"region_mask: example\(s\) \[2\] have no real region \(all padding\)",
        "Drop the example (attention needs at least one region).",
    ),
    m.Mistake(
        "source-all-padding", m.TENSORS, "a translation example whose source is all padding",
        lambda: m.translation_ll(source_mask=lambda b: m.with_value(b.source_mask, 1, False)),
        ValueError, r"source_mask: example\(s\) \[1\] have an empty source \(all padding\)",
        "Drop the pair (attention needs at least one source token).",
    ),
    m.Mistake(
        "target-all-padding", m.TENSORS, "a translation example whose target is all padding",
        lambda: m.translation_ll(target_mask=lambda b: m.with_value(b.target_mask, 0, False)),
        ValueError, r"target_mask: example\(s\) \[0\] have an empty target \(all padding\)",
        "Drop the pair; a real target ends at least in `</s>`.",
    ),
    m.Mistake(
        "source-id-out-of-vocab", m.TENSORS, "a source id >= the source vocabulary size",
        lambda: m.translation_ll(source=lambda b: m.with_value(b.source, (0, 1), 40)),
        ValueError, r"source\[0, 1\] = 40 is out of range for vocabulary size 10",
        "Encode with the vocabulary the network was built for (`len(vocab)`).",
    ),
    m.Mistake(
        "target-id-out-of-vocab", m.TENSORS, "a target id >= the target vocabulary size",
        lambda: m.translation_ll(target=lambda b: m.with_value(b.target, (1, 2), 12)),
        ValueError, r"target\[1, 2\] = 12 is out of range for vocabulary size 12",
        "Encode with the vocabulary the network was built for.",
    ),
    m.Mistake(
        "question-id-out-of-vocab", m.TENSORS, "a question token id >= the question vocabulary size",
        lambda: m.region_ll(question=lambda b: m.with_value(b.question, (0, 0), 50)),
        ValueError, r"question\[0, 0\] = 50 is out of range for vocabulary size 9",
        "Encode questions with the network's vocabulary.",
    ),
    m.Mistake(
        "answer-out-of-range", m.TENSORS, "an answer id >= the number of answer classes",
        lambda: m.region_ll(answer=lambda b: m.with_value(b.answer, 1, 99)),
        ValueError, r"answer\[1\] = 99 is out of range for 8 answer classes \(0\.\.7\)",
        "Build the network with as many answer classes as the data has.",
    ),
    m.Mistake(
        "regions-integer-dtype", m.TENSORS, "integer region features",
        lambda: m.region_ll(regions=lambda b: b.regions.long()),
        ValueError, r"regions must be a floating-point tensor of features, got dtype torch\.int64",
        "Convert with `.float()`.",
    ),
    m.Mistake(
        "region-mask-not-bool", m.TENSORS, "a 0/1 float mask instead of a bool mask",
        lambda: m.region_ll(region_mask=lambda b: b.region_mask.float()),
        ValueError, r"region_mask must be a bool tensor, got dtype torch\.float32",
        "Convert with `.bool()`.",
    ),
    m.Mistake(
        "answer-not-long", m.TENSORS, "float answer ids",
        lambda: m.region_ll(answer=lambda b: b.answer.float()),
        ValueError, r"answer must be a long tensor of class ids, got dtype torch\.float32",
        "Convert with `.long()`.",
    ),
    m.Mistake(
        "question-ids-not-long", m.TENSORS, "float (or int32) question ids for a network with a vocabulary",
        lambda: m.region_ll(question=lambda b: b.question.float()),
        ValueError, r"question must be \(B, L\) long token ids for a network with a vocabulary \(vocab_size=9\), "
        r"got dtype torch\.float32",
        "Convert with `.long()`; question *vectors* need a network built with `question_size`.",
    ),
    m.Mistake(
        "question-ids-for-vector-network", m.TENSORS, "token-id questions for a network built for question vectors",
        lambda: log_likelihood(SoftAttention(RegionQA(13, 8, question_size=2, hidden_size=4)), m.region_net()[1]),
        ValueError, r"question must be \(B, Q\) float vectors for a network without a vocabulary \(built with "
        r"question_size\), got dtype torch\.int64",
        "Build the network with `vocab_size=len(vocab)` for token questions.",
    ),
    m.Mistake(
        "source-not-long", m.TENSORS, "float source ids",
        lambda: m.translation_ll(source=lambda b: b.source.float()),
        ValueError, r"source must be a \(B, S\) long tensor, got shape \(2, 3\) dtype torch\.float32",
        "Convert with `.long()`.",
    ),
    m.Mistake(
        "regions-wrong-rank", m.TENSORS, "one scene's (S, F) regions where a batch (B, S, F) is expected",
        lambda: m.region_ll(regions=lambda b: b.regions[0]),
        ValueError, r"regions must be \(B, S, F\), got shape \(6, 13\)",
        "Add the batch dimension (`regions.unsqueeze(0)`, and the same for the other fields).",
    ),
    m.Mistake(
        "regions-feature-size", m.TENSORS, "region features of another size than the network's",
        lambda: m.region_ll(regions=lambda b: b.regions[..., :5]),
        ValueError, r"regions: expected feature size 13, got shape \(4, 6, 5\)",
        "Build the network with `feature_size` = the data's last dimension.",
    ),
    m.Mistake(
        "region-mask-shape", m.TENSORS, "a region mask of another shape than the regions",
        lambda: m.region_ll(region_mask=lambda b: b.region_mask[:, :3]),
        ValueError, r"region_mask must be \(B, S\) = \(4, 6\) like regions, got shape \(4, 3\)",
        "Give one mask entry per region.",
    ),
    m.Mistake(
        "target-in-shape", m.TENSORS, "decoder inputs of another length than the targets",
        lambda: m.translation_ll(target_in=lambda b: b.target_in[:, :3]),
        ValueError, r"target_in must be a \(B, T\) = \(2, 4\) torch\.int64 tensor, got \(2, 3\)",
        "Build batches with `collate` (it adds `<s>` and `</s>` consistently).",
    ),
    m.Mistake(
        "mask-with-holes", m.TENSORS, "a source mask with padding before a real token",
        lambda: m.translation_ll(source_mask=lambda b: m.with_value(b.source_mask, (0, 1), False)),
        ValueError, r"source_mask\[0\]: padding at position 1 before a real position 2 \(real tokens must come "
        r"first",
        "Put real tokens first and padding last (`collate` does).",
    ),
    m.Mistake(
        "padding-id-inside-target", m.TENSORS, "the padding id 0 at a real target position",
        lambda: m.translation_ll(target=lambda b: m.with_value(b.target, (0, 1), 0)),
        ValueError, r"target\[0, 1\] = 0 \(<pad>\) at a real position \(its mask is True there\)",
        "Ids 0..3 are `<pad> <s> </s> <unk>`; encode words with `Vocab.encode` (ids >= 4 or `<unk>`).",
    ),
    m.Mistake(
        "features-dtype-mismatch", m.TENSORS, "float64 features for a float32 network",
        lambda: m.region_ll(regions=lambda b: b.regions.double()),
        ValueError, r"regions has dtype torch\.float64 but the network's parameters are torch\.float32",
        "Convert one of them: `regions.float()`, or `network.double()`.",
    ),
    m.Mistake(
        "wrong-batch-type", m.TENSORS, "a translation batch given to the region-QA network",
        lambda: log_likelihood(SoftAttention(m.region_net()[0]), collate([([4], [5])])),
        TypeError, r"RegionQA\.encode expects a RegionBatch, got TranslationBatch",
        "Use the batch type of the task network (`RegionBatch` / `TranslationBatch`).",
    ),
    m.Mistake(
        "pair-on-a-plain-module", m.TENSORS, "a pair built on a plain `nn.Module` instead of a task network",
        lambda: SoftAttention(torch.nn.Linear(2, 2)),
        TypeError, r"SoftAttention: network must be an AttentionNetwork, got Linear",
        "Subclass `pyro_attention.networks.AttentionNetwork` (encode, output_logits, posterior_scores).",
    ),
    m.Mistake(
        "kmax-k-zero", m.SIZES, "K-max likelihood with K = 0",
        lambda: kmax_log_likelihood(MarginalLikelihood(m.region_net()[0]), m.region_net()[1], 0),
        ValueError, r"k must be >= 1, got 0",
        "Use K >= 1 (K >= the source length gives the exact value).",
    ),
    m.Mistake(
        "predict-kmax-k-zero", m.SIZES, "`predict(rule='kmax', k=0)` (it returned all-zero probabilities)",
        lambda: predict(MarginalLikelihood(m.region_net()[0]), m.region_net()[1], rule="kmax", k=0),
        ValueError, r"rule='kmax' needs k >= 1, got k=0",
        "Use k >= 1.",
    ),
    m.Mistake(
        "num-samples-zero", m.SIZES, "an importance-sampled likelihood with 0 samples",
        lambda: log_likelihood(RelaxedAttention(m.region_net()[0]), m.region_net()[1], num_samples=0),
        ValueError, r"num_samples must be >= 1, got 0",
        "Use num_samples >= 1 (more is tighter).",
    ),
    # -- round two: values of the wrong kind, tensors where the network is not ----------------------------------------
    m.Mistake(
        "num-samples-not-whole", m.SIZES, "`log_likelihood` given a draw count that is not a whole number (NaN and "
        "`'10'` were accepted)",
        lambda: log_likelihood(MarginalLikelihood(m.region_net()[0]), m.region_net()[1], num_samples=float("nan")),
        TypeError, r"log_likelihood: num_samples must be a whole number \(an int\), got nan \(float\)",
        "Give an int (100 is the default).",
    ),
    m.Mistake(
        "batch-on-meta-device", m.TENSORS, "a batch on the `meta` device (shapes without values: a raw `Tensor on "
        "device cpu is not on the expected device meta`)",
        lambda: m.region_ll(regions=lambda b: b.regions.to("meta")),
        ValueError, r"RegionBatch: regions is on the meta device \(a shape without values\); give real data",
        "Give the batch's real tensors, on the network's device (`batch.to(device)`).",
    ),
    m.Mistake(
        "network-on-meta-device", m.TENSORS, "a network on the `meta` device (built without weights)",
        lambda: log_likelihood(MarginalLikelihood(m.region_net()[0].to("meta")), m.region_net()[1]),
        ValueError, r"RegionBatch: the network's parameters are on the meta device \(shapes without values\)",
        "Build the network on a real device, or `to_empty(device=...)` and load its weights first.",
    ),
]  # fmt: skip


test_mistake_gets_a_clear_error = m.mistake_test(CATALOGUE)


# ----------------------------------------------------------------------------------------------------------------
# A bad region batch is refused alike by every pair's loss and likelihood


@pytest.fixture
def setup():
    ds = make_region_qa(4, seed=0)
    net = RegionQA(ds.feature_size, len(ds.answers), vocab_size=len(ds.vocab), hidden_size=8)
    return net, ds.data


def _replace(batch: RegionBatch, **kw) -> RegionBatch:
    fields = dict(
        regions=batch.regions,
        region_mask=batch.region_mask,
        question=batch.question,
        answer=batch.answer,
        gold=batch.gold,
    )
    fields.update(kw)
    return RegionBatch(**fields)


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda b: dict(regions=b.regions[0]), r"regions must be \(B, S, F\), got shape \(6, 13\)"),
        (lambda b: dict(regions=b.regions[..., :5]), r"regions: expected feature size 13, got shape \(4, 6, 5\)"),
        (lambda b: dict(region_mask=b.region_mask[:, :3]), r"region_mask must be \(B, S\) = \(4, 6\)"),
        (lambda b: dict(region_mask=b.region_mask.float()), "region_mask must be a bool tensor"),
        (
            lambda b: dict(region_mask=b.region_mask.index_fill(0, torch.tensor([2]), False)),
            r"example\(s\) \[2\] have no real region \(all padding\)",
        ),
        (
            lambda b: dict(answer=b.answer.index_fill(0, torch.tensor([1]), 99)),
            r"answer\[1\] = 99 is out of range for 8 answer classes",
        ),
        (lambda b: dict(answer=b.answer[:2]), r"answer must be \(B,\) = \(4,\), got shape \(2,\)"),
        (lambda b: dict(answer=b.answer.float()), "answer must be a long tensor"),
        (
            lambda b: dict(
                regions=b.regions.index_put(
                    (torch.tensor([3]), torch.tensor([0]), torch.tensor([2])), torch.tensor(float("nan"))
                )
            ),
            r"non-finite feature \(NaN or inf\) at example 3, region 0",
        ),
        (
            lambda b: dict(question=b.question.index_fill(1, torch.tensor([0]), 50)),
            r"question\[0, 0\] = 50 is out of range for vocabulary size 9",
        ),
        (lambda b: dict(gold=b.gold + 10), "points outside the"),
        (lambda b: dict(gold=b.gold - 5), "points outside the"),
    ],
)
@pytest.mark.parametrize("cls", [SoftAttention, MarginalLikelihood, VariationalAttention])
def test_bad_batch_raises_value_error(setup, change, message, cls):
    net, batch = setup
    bad = _replace(batch, **change(batch))
    pair = cls(net)
    with pytest.raises(ValueError, match=message):
        pair.elbo().loss(pair.model, pair.guide, bad)
    with pytest.raises(ValueError, match=message):
        log_likelihood(pair, bad)


def test_padded_region_may_hold_nan(setup):
    """Only real regions must be finite: padding is never read."""
    net, batch = setup
    i = int((~batch.region_mask).nonzero()[0, 0]) if (~batch.region_mask).any() else None
    if i is None:
        pytest.skip("no padded region in this batch")
    regions = batch.regions.clone()
    regions[~batch.region_mask] = float("nan")
    bad = _replace(batch, regions=regions)
    pair = MarginalLikelihood(net)
    # padded features become NaN values but get -inf prior scores; the likelihood stays finite
    assert torch.isfinite(log_likelihood(pair, bad).per_example).all()


def test_unknown_estimator(setup):
    net, _ = setup
    with pytest.raises(ValueError, match=r"estimator must be one of \('enum', 'sample'\), got 'reinforce'"):
        HardAttention(net, estimator="reinforce")


def test_pair_needs_a_network():
    with pytest.raises(TypeError, match="network must be an AttentionNetwork"):
        SoftAttention(torch.nn.Linear(2, 2))
