"""ArviZ adapter: groups, dims and shapes; exact log-likelihood; padding dropped; NetCDF round trip."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from toy_network import ToyNetwork, make_toy_batch

from pyro_attention.inference import alignment_posterior, log_likelihood
from pyro_attention.inference.arviz import diagnostics, format_diagnostics, to_inference_data
from pyro_attention.models import MarginalLikelihood, RelaxedAttention, SoftAttention, VariationalAttention
from pyro_attention.registry import ALL_PAIRS, make_pair

warnings.filterwarnings("ignore", category=FutureWarning)
az = pytest.importorskip("arviz")


@pytest.fixture
def setup():
    torch.manual_seed(0)
    return ToyNetwork(), make_toy_batch(B=3, S=4, T=3)  # examples 1, 2 lose a source and a target to padding


def test_groups_dims_and_exact_log_likelihood(setup, tmp_path):
    net, batch = setup
    pair = VariationalAttention(net)
    labels = [["a", "b", "c", "d"], ["e", "f", "g"], ["h", "i", "j"]]
    idata = to_inference_data(pair, batch, num_samples=40, source_labels=labels)
    for group in ("posterior", "prior", "observed_data", "constant_data", "log_likelihood", "sample_stats"):
        assert group in idata.groups()
    assert idata.posterior["align"].shape == (1, 40, 3, 3)
    assert idata.posterior["weights"].dims == ("chain", "draw", "example", "target", "source")
    assert idata.prior["weights"].shape == (1, 40, 3, 3, 4)
    # the exact per-token marginal log-likelihood of real tokens only: 3 + 2 + 2 = 7 tokens
    ll = log_likelihood(pair, batch)
    y = idata.log_likelihood["y"]
    assert y.dims == ("chain", "draw", "token") and y.shape == (1, 1, 7)
    mask = net.encode(batch).target_mask
    assert np.allclose(y.values[0, 0], ll.per_token[mask].numpy(), atol=1e-6)
    assert list(idata.log_likelihood["token_example"].values) == [0, 0, 0, 1, 1, 2, 2]
    # posterior draws never pick a padded source; constant_data holds the exact probabilities
    assert (idata.posterior["weights"].values[..., 1:, :, 3] == 0).all()
    post = alignment_posterior(pair, batch)
    assert np.allclose(idata.constant_data["posterior_probs"].values, post["posterior"].numpy(), atol=1e-6)
    assert idata.constant_data["source_label"].values[1, 3] == ""
    # ELBO gap = KL, exact for a categorical pair
    stats = idata.sample_stats
    assert stats["elbo"].dims == ("example",) and stats["log_weight"].dims == ("chain", "draw", "example")
    assert np.allclose(stats["elbo"].values + stats["kl"].values, ll.per_example.numpy(), atol=1e-5)
    assert (stats["kl"].values >= -1e-6).all()
    # NetCDF round trip
    path = tmp_path / "posterior.nc"
    idata.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    assert np.allclose(back.log_likelihood["y"].values, y.values)
    assert back.posterior.attrs["log_likelihood_exact"] == 1
    summary = az.summary(back.posterior["weights"].isel(example=0, target=0), kind="stats")
    assert np.allclose(summary["mean"].sum(), 1.0)  # means of one-hot draws are probabilities


def test_dirichlet_pair_and_pairs_without_guide(setup):
    net, batch = setup
    idata = to_inference_data(RelaxedAttention(net), batch, num_samples=20, num_importance_samples=20)
    assert "align" not in idata.posterior and idata.posterior["weights"].shape == (1, 20, 3, 3, 4)
    assert idata.posterior.attrs["log_likelihood_exact"] == 0
    assert "khat" in idata.sample_stats
    marginal = to_inference_data(MarginalLikelihood(net), batch, num_samples=10)
    assert "khat" not in marginal.sample_stats and np.allclose(marginal.sample_stats["kl"].values, 0)
    soft = to_inference_data(SoftAttention(net), batch, num_samples=10)
    assert "posterior" not in soft.groups() and "prior_probs" in soft.constant_data
    assert soft.observed_data.attrs["posterior_source"].startswith("none")
    assert np.allclose(soft.sample_stats["kl"].values, 0)


@pytest.mark.parametrize("name", list(ALL_PAIRS))
def test_every_pair_converts(setup, name):
    net, batch = setup
    pair = make_pair(name, net)
    idata = to_inference_data(pair, batch, num_samples=8, num_importance_samples=8)
    mask = net.encode(batch).target_mask
    assert idata.log_likelihood["y"].shape == (1, 1, int(mask.sum()))
    assert np.isfinite(idata.log_likelihood["y"].values).all()
    assert np.isfinite(idata.sample_stats["elbo"].values).all()
    assert np.allclose(idata.constant_data["prior_probs"].values[1:, :, 3], 0)  # padded source: no weight
    if pair.latent == "none":
        assert "posterior" not in idata.groups()
    elif pair.latent == "context":
        assert idata.posterior["context"].dims == ("chain", "draw", "example", "target", "feature")
    else:
        weights = idata.posterior["weights"].values
        real = mask.numpy()
        assert (weights[..., 1:, :, 3] == 0).all() and np.allclose(weights.sum(-1)[..., real], 1, atol=1e-5)
        assert np.allclose(idata.prior["weights"].values.sum(-1), 1, atol=1e-5)


def test_diagnostics_table(setup):
    net, batch = setup
    rows = {
        name: diagnostics(cls(net), batch, num_samples=30)
        for name, cls in [("variational", VariationalAttention), ("relaxed", RelaxedAttention)]
    }
    assert rows["variational"]["elbo_gap_per_token"] >= 0
    assert 0 <= rows["variational"]["agree(prior,posterior)"] <= 1
    table = format_diagnostics(rows)
    assert table.splitlines()[0].startswith("| pair | log_p_per_token | elbo_gap_per_token")
