"""Bad input gets a clear ValueError naming the tensor, shape or option."""

from __future__ import annotations

import pytest
import torch

from pyro_attention.data import RegionBatch, make_region_qa
from pyro_attention.inference import fit, log_likelihood
from pyro_attention.models import HardAttention, MarginalLikelihood, SoftAttention, VariationalAttention
from pyro_attention.networks import RegionQA


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


def test_fit_rejects_bad_options(setup):
    net, batch = setup
    with pytest.raises(ValueError, match="batch_size >= 1"):
        fit(SoftAttention(net), [batch], batch_size=0)
    with pytest.raises(ValueError, match="has no warmup_guide"):
        fit(SoftAttention(net), [batch], warmup_steps=3)


def test_region_qa_generator_options():
    with pytest.raises(ValueError, match="ambiguity must be a probability"):
        make_region_qa(3, ambiguity=2.0)
    with pytest.raises(ValueError, match="num_regions must be"):
        make_region_qa(3, num_regions=(4, 2))
