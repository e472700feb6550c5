"""ArviZ adapter: groups, dims and shapes; exact log-likelihood; padding dropped; NetCDF round trip; what
``az.summary``, ``az.loo``, ``az.compare``, ``az.plot_khat`` and ``az.plot_posterior`` / ``az.plot_dist`` do on it,
on whichever ArviZ generation is installed (0.2x on Python 3.11, 1.x on Python >= 3.12)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pyro_attention.inference import alignment_posterior, load_netcdf, log_likelihood, save_netcdf
from pyro_attention.inference import arviz_generation as azg
from pyro_attention.inference.arviz import diagnostics, format_diagnostics, to_inference_data
from pyro_attention.models import MarginalLikelihood, RelaxedAttention, SoftAttention, VariationalAttention
from pyro_attention.registry import ALL_PAIRS, make_pair
from tests.support.toy_network import ToyNetwork, make_toy_batch

az = azg.arviz()


@pytest.fixture
def setup():
    torch.manual_seed(0)
    return ToyNetwork(), make_toy_batch(B=3, S=4, T=3)  # examples 1, 2 lose a source and a target to padding


def test_groups_dims_and_exact_log_likelihood(setup, tmp_path):
    net, batch = setup
    pair = VariationalAttention(net)
    labels = [["a", "b", "c", "d"], ["e", "f", "g"], ["h", "i", "j"]]
    idata = to_inference_data(pair, batch, num_samples=40, source_labels=labels)
    groups = sorted(azg.group_names(idata))  # ArviZ 0.2x orders them by its scheme, 1.x by insertion
    assert groups == ["constant_data", "marginal_log_likelihood", "observed_data", "posterior", "sample_stats"]
    # no ArviZ log_likelihood group (one point estimate: nothing for PSIS-LOO) and no draws of a discrete z
    # the exact posterior, one draw (a function of the point-estimate parameters), NaN where padded
    probs = idata.posterior["align_probs"]
    assert probs.dims == ("chain", "draw", "example", "target", "source") and probs.shape == (1, 1, 3, 3, 4)
    post = alignment_posterior(pair, batch)
    real = np.isfinite(probs.values[0, 0])
    assert np.isnan(probs.values[0, 0, 1:, :, 3]).all() and np.isnan(probs.values[0, 0, 1:, 2]).all()
    assert np.allclose(probs.values[0, 0][real], post["posterior"].numpy()[real], atol=1e-6)
    # the exact per-token marginal log-likelihood of real tokens only: 3 + 2 + 2 = 7 tokens, no draw dimension
    ll = log_likelihood(pair, batch)
    y = idata.marginal_log_likelihood["y"]
    assert y.dims == ("token",) and y.shape == (7,)
    mask = net.encode(batch).target_mask
    assert np.allclose(y.values, ll.per_token[mask].numpy(), atol=1e-6)
    assert list(idata.marginal_log_likelihood["token_example"].values) == [0, 0, 0, 1, 1, 2, 2]
    real = mask.unsqueeze(-1).numpy()  # padded target rows are zeros there
    assert np.allclose(idata.constant_data["posterior_probs"].values, post["posterior"].numpy() * real, atol=1e-6)
    assert idata.constant_data["source_label"].values[1, 3] == ""
    # ELBO gap = KL, exact for a categorical pair; the draws from q behind log_weight come in 4 chains
    stats = idata.sample_stats
    assert stats["elbo"].dims == ("example",) and stats["log_weight"].dims == ("chain", "draw", "example")
    assert stats["log_weight"].shape == (4, 10, 3)
    assert np.allclose(stats["elbo"].values + stats["kl"].values, ll.per_example.numpy(), atol=1e-5)
    assert (stats["kl"].values >= -1e-6).all()
    assert "az.loo" not in stats.attrs["loo"] and "pyro_attention.inference.compare" in stats.attrs["loo"]
    assert "mc_se" not in idata.marginal_log_likelihood  # exact: no Monte Carlo error
    # NetCDF round trip, the custom group included
    path = save_netcdf(idata, tmp_path / "posterior.nc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["posterior.nc"]  # no temporary file left
    back = load_netcdf(path)
    assert sorted(azg.group_names(back)) == groups
    assert np.allclose(back.marginal_log_likelihood["y"].values, y.values)
    assert back.posterior.attrs["log_likelihood_exact"] == 1
    assert back.constant_data["source_label"].values[2].tolist() == ["h", "i", "j", ""]
    assert back.sample_stats["log_weight"].dims == ("chain", "draw", "example")


def test_save_netcdf_failure_leaves_the_old_file(setup, tmp_path, monkeypatch):
    """A write that fails half-way (a full disk) raises WriteError naming the file; the old file is untouched."""
    from pyro_attention.files import WriteError

    net, batch = setup
    idata = to_inference_data(VariationalAttention(net), batch, num_samples=8)
    path = tmp_path / "posterior.nc"
    path.write_bytes(b"old")
    cls = type(idata)

    def full_disk(self, filename, **kwargs):
        with open(filename, "wb") as f:
            f.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cls, "to_netcdf", full_disk)
    with pytest.raises(WriteError, match="posterior.nc"):
        save_netcdf(idata, path)
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["posterior.nc"]


def test_netcdf_bad_input_is_named(setup, tmp_path):
    with pytest.raises(FileNotFoundError, match="load_netcdf: no such file: .*missing.nc"):
        load_netcdf(tmp_path / "missing.nc")
    (tmp_path / "text.nc").write_text("not netcdf")
    with pytest.raises(ValueError, match="load_netcdf: .*text.nc is not a NetCDF-4 file"):
        load_netcdf(tmp_path / "text.nc")
    with pytest.raises(TypeError, match="save_netcdf: data must be ArviZ data .*got dict"):
        save_netcdf({"posterior": {}}, tmp_path / "x.nc")


def test_psis_khat_sees_a_heavy_tail():
    """Importance weights with a Pareto tail of shape k have k-hat near k, on either generation's PSIS (ArviZ 1.x
    takes a log-likelihood, the negative of a log ratio: a sign slip gives k-hat < 0 here); light-tailed
    (log-normal with small sigma) weights stay well below 0.5."""
    rng = np.random.default_rng(0)
    heavy = np.log(rng.pareto(1 / 0.8, size=(4, 4000)) + 1)  # k = 0.8
    light = rng.normal(scale=0.3, size=(4, 4000))
    assert np.all(np.abs(azg.psis_khat(heavy) - 0.8) < 0.25)
    assert np.all(azg.psis_khat(light) < 0.3)
    assert azg.psis_khat(heavy).shape == (4,)


def test_psis_khat_of_tied_and_dominated_weights_says_so_quietly():
    """A tail tied to 1e-9 (weights equal to rounding) has no shape to fit: ``nan``; a weight that dominates every
    other by e^50 degenerates the fit: ``inf`` (as ArviZ reports it), the least reliable; ArviZ's numpy warnings
    from such fits do not reach the user."""
    tied = np.r_[np.zeros(95), np.full(5, 1e-12)]
    dominated = np.r_[np.full(99, -50.0), 0.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        khat = azg.psis_khat(np.stack([tied, dominated]))
    assert np.isnan(khat[0]) and khat[1] == np.inf

def test_num_samples_and_chains_are_checked(setup):
    net, batch = setup
    with pytest.raises(ValueError, match="num_samples must be >= 2"):
        to_inference_data(RelaxedAttention(net), batch, num_samples=1)
    with pytest.raises(ValueError, match="num_chains must be >= 1"):
        to_inference_data(RelaxedAttention(net), batch, num_samples=8, num_chains=0)
    few = to_inference_data(RelaxedAttention(net), batch, num_samples=10, num_importance_samples=4)
    assert few.posterior["weights"].shape[:2] == (2, 5)  # 4 draws per chain at least: 2 chains, not 4


def test_dirichlet_pair_and_pairs_without_guide(setup):
    net, batch = setup
    idata = to_inference_data(RelaxedAttention(net), batch, num_samples=20, num_importance_samples=20)
    weights = idata.posterior["weights"].values
    assert weights.shape == (4, 5, 3, 3, 4) and idata.prior["weights"].shape == (4, 5, 3, 3, 4)
    assert np.isnan(weights[:, :, 1:, :, 3]).all() and np.isnan(weights[:, :, 1:, 2]).all()  # padding: NaN
    assert np.allclose(weights[:, :, 0].sum(-1), 1, atol=1e-5)
    assert idata.posterior.attrs["log_likelihood_exact"] == 0
    estimate = idata.marginal_log_likelihood  # an estimate: its Monte Carlo error and k-hat per token
    assert (estimate["mc_se"].values > 0).all() and estimate["khat"].shape == estimate["y"].shape
    assert idata.posterior.attrs["posterior_source"].startswith("draws from the guide")
    assert "khat" in idata.sample_stats
    marginal = to_inference_data(MarginalLikelihood(net), batch, num_samples=16)
    assert "khat" not in marginal.sample_stats and np.allclose(marginal.sample_stats["kl"].values, 0)
    assert "align_probs" in marginal.posterior
    soft = to_inference_data(SoftAttention(net), batch, num_samples=16)
    assert list(soft.posterior.data_vars) == ["attention_weights"] and "prior_probs" in soft.constant_data
    assert soft.observed_data.attrs["posterior_source"].startswith("none")
    assert np.allclose(soft.sample_stats["kl"].values, 0)


@pytest.mark.parametrize("name", list(ALL_PAIRS))
def test_every_pair_converts(setup, name):
    net, batch = setup
    pair = make_pair(name, net)
    idata = to_inference_data(pair, batch, num_samples=8, num_importance_samples=8, num_chains=2)
    mask = net.encode(batch).target_mask
    assert idata.marginal_log_likelihood["y"].shape == (int(mask.sum()),)
    assert np.isfinite(idata.marginal_log_likelihood["y"].values).all()
    assert np.isfinite(idata.sample_stats["elbo"].values).all()
    for name in ("prior_probs", "posterior_probs", "q_probs"):
        if name in idata.constant_data:
            probs = idata.constant_data[name].values
            assert np.allclose(probs[1:, :, 3], 0) and np.allclose(probs[~mask.numpy()], 0), name  # padding: 0
            assert np.allclose(probs[mask.numpy()].sum(-1), 1), name
    if pair.latent == "context":
        assert idata.posterior["context"].dims == ("chain", "draw", "example", "target", "feature")
        assert idata.posterior["context"].shape[:2] == (2, 4)
    elif pair.latent == "simplex":
        weights = idata.posterior["weights"].values
        real = mask.numpy()
        assert np.isnan(weights[..., 1:, :, 3]).all() and np.allclose(np.nansum(weights, -1)[..., real], 1, atol=1e-5)
        assert np.allclose(np.nansum(idata.prior["weights"].values, -1)[..., real], 1, atol=1e-5)
    elif "posterior" in azg.group_names(idata):  # one draw of exact probabilities or deterministic weights
        (var,) = idata.posterior.data_vars
        values = idata.posterior[var].values
        assert values.shape[:2] == (1, 1) and np.allclose(np.nansum(values, -1)[0, 0][mask.numpy()], 1, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# The five ArviZ calls a user tries on what we export: a meaningful answer, or a clear, deliberate error


def _runtime_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_az_summary_continuous_alignment_is_meaningful_and_quiet(setup):
    """Draws of the Dirichlet pair's weights from q: means are q's mean weights, R-hat over 4 chains of
    independent draws is ~1, padded cells are NaN rows -- and not one RuntimeWarning (there were 0/0 ones)."""
    net, batch = setup
    pair = RelaxedAttention(net)
    idata = to_inference_data(pair, batch, num_samples=400, num_importance_samples=20)
    summary, caught = _runtime_warnings(lambda: azg.summary(idata))
    assert caught == []
    intervals = ["hdi_3%", "hdi_97%"] if azg.GENERATION == 0 else ["eti89_lb", "eti89_ub"]
    assert list(summary.columns[:4]) == ["mean", "sd", *intervals]
    assert np.isnan(summary.loc["weights[1, 0, 3]", "mean"])  # a padded source: no number
    q = alignment_posterior(pair, batch)["guide"].numpy()  # the mean weights of q
    means = np.array([summary.loc[f"weights[0, {t}, {s}]", "mean"] for t in range(3) for s in range(4)])
    assert np.allclose(means, q[0].ravel(), atol=0.03)
    real = summary["r_hat"].dropna()
    assert len(real) == 4 * 3 + 3 * 2 * 2 and (real < 1.1).all()


def test_az_summary_categorical_is_the_exact_posterior(setup):
    """A categorical pair's posterior is exact: one draw of the probabilities; summary's mean is p(z | x, y),
    sd / ESS / R-hat are undefined (NaN) -- two numpy warnings for one draw, not one per cell."""
    net, batch = setup
    pair = VariationalAttention(net)
    idata = to_inference_data(pair, batch, num_samples=16)
    summary, caught = _runtime_warnings(lambda: azg.summary(idata))
    assert len(caught) <= 2  # "Degrees of freedom <= 0" for the sd of one draw; it was one per constant cell
    post = alignment_posterior(pair, batch)["posterior"].numpy()
    assert np.isclose(summary.loc["align_probs[0, 1, 2]", "mean"], post[0, 1, 2], atol=1e-3)
    assert np.isnan(summary.loc["align_probs[2, 0, 3]", "mean"])  # padded
    assert summary["r_hat"].isna().all()
    big = to_inference_data(pair, make_toy_batch(B=12, S=6, T=4, seed=3), num_samples=16)
    _, caught_big = _runtime_warnings(lambda: azg.summary(big))
    assert len(caught_big) == len(caught)  # does not grow with the number of cells


def test_az_loo_and_compare_refuse_clearly(setup):
    """One point estimate of the network = one draw: PSIS-LOO is undefined.  The exported data has no
    ``log_likelihood`` group, so ArviZ stops at once (was: IndexError in _psislw); the reason is in the attrs."""
    net, batch = setup
    a = to_inference_data(VariationalAttention(net), batch, num_samples=16)
    b = to_inference_data(MarginalLikelihood(net), batch, num_samples=16)
    with pytest.raises(TypeError, match="log likelihood not found in inference data object"):
        az.loo(a)
    with pytest.raises(TypeError, match="Encountered error (in ELPD computation of compare|trying to compute ELPD)") \
            as info:
        az.compare({"variational": a, "marginal": b})
    chain, error = [], info.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__
    assert "log likelihood not found in inference data object" in chain
    assert "no PSIS-LOO" in a.marginal_log_likelihood.attrs["loo"]


def test_az_plot_khat_on_exported_khat(setup):
    """PSIS k-hat of q per example (sample_stats) plots with ArviZ's ``plot_khat``: one point per example."""
    import matplotlib.pyplot as plt

    net, batch = setup
    idata = to_inference_data(RelaxedAttention(net), batch, num_samples=40, num_importance_samples=20)
    khat = idata.sample_stats["khat"]
    assert np.isfinite(khat.values).all()
    ax = azg.khat_axes(khat.values, 0.7, figsize=(6, 3.5))
    points = np.concatenate([c.get_offsets() for c in ax.collections if len(c.get_offsets())])
    assert np.allclose(np.sort(points[:, 1]), np.sort(khat.values))  # one point per example, at its k-hat
    plt.close("all")


def _panels(fig) -> list:
    """The axes of a figure that hold a plot (ArviZ 1.x may leave a grid's spare cells empty and hidden)."""
    return [ax for ax in fig.axes if ax.get_visible() and (ax.lines or ax.collections or ax.patches)]


def test_az_plot_posterior(setup):
    """Dirichlet draws: one panel per real region of a token, each a density of q's weight; a categorical
    pair's one draw of exact probabilities: one panel per source position."""
    import matplotlib.pyplot as plt

    net, batch = setup
    idata = to_inference_data(RelaxedAttention(net), batch, num_samples=40, num_importance_samples=20)
    fig = azg.density_figure(idata, coords={"example": 1, "target": 0, "source": [0, 1, 2]})
    assert len(_panels(fig)) == 3
    assert all(ax.get_title().startswith("weights") for ax in _panels(fig))
    plt.close("all")
    categorical = to_inference_data(VariationalAttention(net), batch, num_samples=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "a single value": one draw, shown as a point
        fig = azg.density_figure(categorical, coords={"example": 0, "target": 0})
    assert len(_panels(fig)) == 4
    plt.close("all")


def test_az_plot_forest(setup):
    """A forest plot of q's draws of one token's weights over its real regions."""
    import matplotlib.pyplot as plt

    net, batch = setup
    idata = to_inference_data(RelaxedAttention(net), batch, num_samples=40, num_importance_samples=20)
    fig = azg.forest_figure(idata, var_names=["weights"], coords={"example": 1, "target": 0, "source": [0, 1, 2]})
    assert len(_panels(fig)) >= 1
    plt.close("all")


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
