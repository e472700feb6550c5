"""Smoke and correctness tests for examples/toy_expectation.py and examples/exact_vs_variational.py."""

from __future__ import annotations

import math
from types import ModuleType

import pytest
import torch

from tests.support.scripts import load_script


def _load(name: str) -> ModuleType:
    return load_script("examples", name)


@pytest.fixture(scope="module")
def toy() -> ModuleType:
    return _load("toy_expectation")


@pytest.fixture(scope="module")
def evv() -> ModuleType:
    return _load("exact_vs_variational")


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_toy_expectation_default(toy: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    result = toy.main(toy.make_parser().parse_args([]))
    f_of_mean = _sigmoid(2.0)
    mean_of_f = 0.5 * _sigmoid(0.0) + 0.5 * _sigmoid(4.0)
    assert result["sigmoid_f_of_mean"] == pytest.approx(f_of_mean, abs=1e-12)
    assert result["sigmoid_mean_of_f"] == pytest.approx(mean_of_f, abs=1e-12)
    assert abs(result["sigmoid_f_of_mean"] - 0.881) < 1e-3
    assert abs(result["sigmoid_mean_of_f"] - 0.741) < 1e-3
    assert result["sigmoid_difference"] == pytest.approx(f_of_mean - mean_of_f, abs=1e-12)
    assert result["square_f_of_mean"] == 1.0
    assert result["square_mean_of_f"] == 2.0

    out = capsys.readouterr().out
    lines = out.splitlines()
    for expected in [
        "f = sigmoid, z in {0, 4}, P(z=0) = 0.50",
        "f(E[z]) = 0.881",
        "E[f(z)] = 0.741",
        "difference = 0.140",
        "f = z^2, z in {0, 2}, P(z=0) = 0.50",
        "f(E[z]) = 1.000",
        "E[f(z)] = 2.000",
    ]:
        assert expected in lines, (expected, out)


@pytest.mark.parametrize("p_zero", [0.0, 0.2, 1.0])
def test_toy_expectation_other_p(toy: ModuleType, p_zero: float) -> None:
    result = toy.main(toy.make_parser().parse_args(["--p-zero", str(p_zero)]))
    assert result["sigmoid_f_of_mean"] == pytest.approx(_sigmoid(4.0 * (1.0 - p_zero)), abs=1e-12)
    expected = p_zero * _sigmoid(0.0) + (1.0 - p_zero) * _sigmoid(4.0)
    assert result["sigmoid_mean_of_f"] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("bad", ["1.5", "-0.1", "nan", "abc"])
def test_toy_expectation_rejects_bad_p(toy: ModuleType, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        toy.make_parser().parse_args(["--p-zero", bad])
    assert "--p-zero" in capsys.readouterr().err


def test_exact_vs_variational(evv: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    dtype = torch.get_default_dtype()
    args = evv.make_parser().parse_args(["--steps", "200", "--num-states", "4", "--y", "0.3", "--seed", "1"])
    result = evv.main(args)
    assert torch.get_default_dtype() == dtype

    assert abs(result["gap"]) < 1e-5
    assert result["identity_holds"] is True
    assert result["kl"] >= 0.0
    assert result["log_evidence"] - result["elbo"] == pytest.approx(result["kl"], abs=1e-5)
    assert sum(result["q_probs"]) == pytest.approx(1.0, abs=1e-12)

    # Recompute the exact evidence and posterior independently of Pyro.
    generator = torch.Generator().manual_seed(1)
    prior_logits = torch.randn(4, generator=generator, dtype=torch.float64)
    means = torch.linspace(-2.0, 2.0, 4, dtype=torch.float64)
    y = torch.tensor(0.3, dtype=torch.float64)
    joint = torch.log_softmax(prior_logits, -1) + torch.distributions.Normal(means, 1.0).log_prob(y)
    assert result["log_evidence"] == pytest.approx(torch.logsumexp(joint, -1).item(), abs=1e-10)
    posterior = torch.softmax(joint, -1).tolist()
    assert result["posterior_probs"] == pytest.approx(posterior, abs=1e-10)

    out = capsys.readouterr().out
    lines = out.splitlines()
    assert f"log p(y) = {result['log_evidence']:.6f}" in lines
    assert f"ELBO = {result['elbo']:.6f}" in lines
    assert any(line.startswith("KL(q || p(z|y)) = ") for line in lines)
    assert any(line.startswith("log p(y) - ELBO - KL = ") for line in lines)
    assert "identity holds to 1e-5: True" in lines


def test_exact_vs_variational_untrained_guide_has_positive_kl(evv: ModuleType) -> None:
    result = evv.main(evv.make_parser().parse_args(["--steps", "0"]))
    assert result["kl"] > 1e-3
    assert abs(result["gap"]) < 1e-5
    assert result["elbo"] < result["log_evidence"]
