"""``pyro_attention.inference.compare``: held-out log predictive density per token, ranked, with paired standard
errors, against a hand computation on a tiny problem; bad input refused with a clear message."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyro_attention.inference import compare, format_comparison
from pyro_attention.models import MarginalLikelihood, RelaxedAttention, SoftAttention
from tests.support.toy_network import ToyNetwork, make_toy_batch


@pytest.fixture
def problem():
    torch.manual_seed(0)
    soft_net, marginal_net = ToyNetwork(), ToyNetwork()
    batch = make_toy_batch(B=3, S=4, T=3, seed=2)  # 3 + 2 + 2 = 7 real target tokens
    return {"soft": SoftAttention(soft_net), "marginal": MarginalLikelihood(marginal_net)}, batch


def _by_hand(pairs, batch):
    """log p(y_t | x) of every real token, written out from the network: softmax of the soft context's logits
    for soft attention, the prior-weighted sum over source positions for the marginal likelihood."""
    with torch.no_grad():
        net = pairs["soft"].network
        enc = net.encode(batch)
        weights = enc.prior_scores.masked_fill(~enc.source_mask[:, None, :], -math.inf).softmax(-1)  # (B, T, S)
        logits = net.output_logits(enc, weights @ enc.values)
        soft = logits.log_softmax(-1).gather(-1, batch.target[..., None])[..., 0]
        net = pairs["marginal"].network
        enc = net.encode(batch)
        prior = enc.prior_scores.masked_fill(~enc.source_mask[:, None, :], -math.inf).softmax(-1)
        total = torch.zeros(batch.target.shape, dtype=torch.float64)
        for s in range(batch.source.shape[1]):
            context = enc.values[:, s][:, None, :].expand(-1, batch.target.shape[1], -1)
            p_y = net.output_logits(enc, context).softmax(-1).gather(-1, batch.target[..., None])[..., 0]
            total = total + (prior[..., s] * p_y).double()
        marginal = total.log()
    mask = batch.target_mask.numpy()
    return {"soft": soft.double().numpy()[mask], "marginal": marginal.numpy()[mask]}, np.nonzero(mask)[0]


def test_compare_matches_a_hand_computation(problem):
    pairs, batch = problem
    table = compare(pairs, batch)
    hand, _ = _by_hand(pairs, batch)
    n = 7
    means = {k: v.mean() for k, v in hand.items()}
    best, other = sorted(means, key=lambda k: -means[k])
    assert list(table.index) == [best, other] and list(table["rank"]) == [0, 1]
    for name in hand:
        assert np.isclose(table.loc[name, "elpd_per_token"], means[name], atol=1e-5)
        assert np.isclose(table.loc[name, "se"], hand[name].std(ddof=1) / math.sqrt(n), atol=1e-5)
    diff = hand[best] - hand[other]
    assert table.loc[best, "elpd_diff"] == 0 and table.loc[best, "dse"] == 0
    assert np.isclose(table.loc[other, "elpd_diff"], diff.mean(), atol=1e-5) and diff.mean() > 0
    assert np.isclose(table.loc[other, "dse"], diff.std(ddof=1) / math.sqrt(n), atol=1e-5)
    assert (table["n_tokens"] == n).all() and (table["n_examples"] == 3).all()
    assert table["exact"].all() and not table["warning"].any()
    assert table.attrs["unit"] == "token"
    text = format_comparison(table)
    assert text.splitlines()[0] == "| rank | pair | elpd / token | se | elpd_diff | dse |"
    assert f"| 0 | {best} | {means[best]:.3f} |" in text


def test_compare_by_example_is_the_ratio_estimator(problem):
    pairs, batch = problem
    table = compare(pairs, batch, by="example")
    hand, example = _by_hand(pairs, batch)
    counts = np.bincount(example).astype(float)

    def ratio_se(x):
        totals = np.bincount(example, weights=x)
        resid = totals - x.sum() / counts.sum() * counts
        return math.sqrt((resid**2).sum() / (3 * 2)) / counts.mean()

    best, other = table.index
    assert np.isclose(table.loc[other, "elpd_per_token"], hand[other].mean(), atol=1e-5)
    assert np.isclose(table.loc[other, "se"], ratio_se(hand[other]), atol=1e-5)
    assert np.isclose(table.loc[other, "dse"], ratio_se(hand[best] - hand[other]), atol=1e-5)


def test_compare_list_of_batches_equals_one_batch(problem):
    pairs, batch = problem
    one = compare(pairs, batch)
    two = compare(pairs, [batch, batch])
    assert np.allclose(two["elpd_per_token"], one["elpd_per_token"])
    assert (two["n_tokens"] == 14).all() and (two["n_examples"] == 6).all()
    hand, _ = _by_hand(pairs, batch)
    for name, x in hand.items():
        twice = np.concatenate([x, x])
        assert np.isclose(two.loc[name, "se"], twice.std(ddof=1) / math.sqrt(14), atol=1e-5)


def test_compare_flags_an_estimate(problem):
    pairs, batch = problem
    table = compare({"relaxed": RelaxedAttention(ToyNetwork()), **pairs}, batch, num_samples=8)
    assert not table.loc["relaxed", "exact"] and table.loc["relaxed", "warning"]  # 8 draws: k-hat undefined
    assert table.loc["relaxed", "mc_se"] > 0 and math.isnan(table.loc["relaxed", "khat_max"])
    assert (table.drop(index="relaxed")["mc_se"] == 0).all() and not table.drop(index="relaxed")["warning"].any()
    assert "importance sampling" in table.loc["relaxed", "method"]
    assert "| ~" in format_comparison(table)


def test_compare_refuses_bad_input(problem):
    pairs, batch = problem
    with pytest.raises(TypeError, match="pairs must be a dict of name -> trained pair"):
        compare(list(pairs.values()), batch)
    with pytest.raises(ValueError, match="pairs is empty"):
        compare({}, batch)
    with pytest.raises(TypeError, match=r"pairs\['x'\] is a str, not an AlignmentPair"):
        compare({"x": "soft"}, batch)
    with pytest.raises(ValueError, match=r"different vocabularies \(num_classes: \{'soft': 4, 'other': 5\}\)"):
        compare({"soft": pairs["soft"], "other": SoftAttention(ToyNetwork(num_classes=5))}, batch)
    with pytest.raises(ValueError, match="data is an empty list of batches"):
        compare(pairs, [])
    empty = make_toy_batch(B=2, S=3, T=2)
    empty.target_mask[:] = False
    with pytest.raises(ValueError, match="data has no real target tokens"):
        compare(pairs, empty)
    with pytest.raises(ValueError, match=r"by must be one of \('token', 'example'\)"):
        compare(pairs, batch, by="sentence")
