"""NUTS reference posterior for the Dirichlet pair."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pyro_attention.inference.mcmc import compare_to_guide, nuts_alignment
from pyro_attention.models import MarginalLikelihood, RelaxedAttention
from tests.support.toy_network import ToyNetwork, make_toy_batch

warnings.filterwarnings("ignore", category=FutureWarning)
az = pytest.importorskip("arviz")


def test_nuts_recovers_the_prior_when_the_output_ignores_the_alignment():
    torch.manual_seed(0)
    net = ToyNetwork()
    with torch.no_grad():
        net.out_hidden.weight.zero_()  # p(y | x, z) no longer depends on z: the posterior is the prior
    batch = make_toy_batch(B=1, S=3, T=1)
    pair = RelaxedAttention(net)
    data = nuts_alignment(pair, batch, num_samples=200, warmup_steps=100, num_chains=2)
    summary = az.summary(data, var_names=["align"])
    assert {"r_hat", "ess_bulk"} <= set(summary.columns) and (summary["r_hat"] < 1.05).all()
    result = compare_to_guide(pair, batch, data)
    draws = data.posterior["align"].values.reshape(-1, 3)
    se = draws.std(0) / np.sqrt(summary["ess_bulk"].values)
    assert (np.abs(result["nuts_mean"][0] - result["prior_mean"][0]) < 5 * se + 1e-3).all()


def test_nuts_input_errors():
    torch.manual_seed(0)
    net = ToyNetwork()
    with pytest.raises(ValueError, match="for continuous alignments"):
        nuts_alignment(MarginalLikelihood(net), make_toy_batch(B=1))
    with pytest.raises(ValueError, match="one example without source padding"):
        nuts_alignment(RelaxedAttention(net), make_toy_batch(B=2))
