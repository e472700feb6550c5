"""
Marginalising the prediction is not the same as feeding the expected alignment.

Soft attention feeds a network the *expected* alignment, ``f(E[z])``, whereas a
latent-alignment model predicts with the *marginal* ``E[f(z)] = sum_z p(z) f(z)``.
For a non-linear ``f`` the two differ (Jensen's inequality gives the sign when
``f`` is convex or concave). This example computes both by enumerating a tiny
Pyro model whose discrete site ``z`` ranges over the index set ``{0, 1}``, which
is mapped onto the values ``v = (v_0, v_1)``::

    i ~ Categorical(p, 1 - p),    z = v_i,
    f(E[z]) = f(p v_0 + (1 - p) v_1),
    E[f(z)] = p f(v_0) + (1 - p) f(v_1).

Two cases are shown:

* ``f = sigmoid`` with ``z in {0, 4}`` and ``P(z = 0) = p`` (``--p-zero``); at
  ``p = 0.5`` this gives ``sigmoid(2) = 0.881`` against
  ``(sigmoid(0) + sigmoid(4)) / 2 = 0.741``.
* ``f(z) = z^2`` with ``z in {0, 2}`` equally likely, where ``f(E[z]) = 1`` but
  ``E[f(z)] = 2``.

The expectations are computed by running the model under ``poutine.enum`` (parallel
enumeration of the site ``z``), recording it with ``poutine.trace`` and summing
``exp(log_prob) * f(value)`` over the enumerated support.

Reference:

    Y. Deng, Y. Kim, J. Chiu, D. Guo, A. M. Rush,
    "Latent Alignment and Variational Attention", NeurIPS 2018.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import config_enumerate


def model(p_zero: float, values: torch.Tensor) -> torch.Tensor:
    """Sample an index ``i`` in ``{0, 1}`` with ``P(i = 0) = p_zero`` and return ``values[i]``."""
    probs = torch.tensor([p_zero, 1.0 - p_zero], dtype=values.dtype)
    index = pyro.sample("z", dist.Categorical(probs=probs))
    return values[index]


def enumerated_expectation(
    p_zero: float, values: torch.Tensor, f: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """``E[f(z)]`` computed by enumerating the discrete site ``z`` of :func:`model`."""
    enum_model = poutine.enum(config_enumerate(model, default="parallel"), first_available_dim=-1)
    trace = poutine.trace(enum_model).get_trace(p_zero, values)
    node = trace.nodes["z"]
    index = node["value"]  # the whole support {0, 1}, enumerated in parallel
    weights = node["fn"].log_prob(index).exp()
    f_values = f(values[index])
    # 0 * f(v) is 0 even when a state has zero probability; avoid 0 * inf = nan.
    return torch.where(weights > 0, weights * f_values, torch.zeros_like(f_values)).sum()


def compare(p_zero: float, values: torch.Tensor, f: Callable[[torch.Tensor], torch.Tensor]) -> tuple[float, float]:
    """Return ``(f(E[z]), E[f(z)])``, both expectations obtained by enumeration."""
    mean_z = enumerated_expectation(p_zero, values, lambda z: z)
    f_of_mean = f(mean_z).item()
    mean_of_f = enumerated_expectation(p_zero, values, f).item()
    return f_of_mean, mean_of_f


def report(header: str, f_of_mean: float, mean_of_f: float) -> None:
    print(header)
    print(f"f(E[z]) = {f_of_mean:.3f}")
    print(f"E[f(z)] = {mean_of_f:.3f}")
    print(f"difference = {f_of_mean - mean_of_f:.3f}")


def main(args: argparse.Namespace) -> dict[str, float]:
    p_zero = float(args.p_zero)
    if not 0.0 <= p_zero <= 1.0:
        raise ValueError(f"--p-zero must lie in [0, 1], got {p_zero}")

    sig_values = torch.tensor([0.0, 4.0], dtype=torch.float64)
    sig_f_of_mean, sig_mean_of_f = compare(p_zero, sig_values, torch.sigmoid)
    report(f"f = sigmoid, z in {{0, 4}}, P(z=0) = {p_zero:.2f}", sig_f_of_mean, sig_mean_of_f)

    sq_p_zero = 0.5
    sq_values = torch.tensor([0.0, 2.0], dtype=torch.float64)
    sq_f_of_mean, sq_mean_of_f = compare(sq_p_zero, sq_values, torch.square)
    report(f"f = z^2, z in {{0, 2}}, P(z=0) = {sq_p_zero:.2f}", sq_f_of_mean, sq_mean_of_f)

    return {
        "sigmoid_f_of_mean": sig_f_of_mean,
        "sigmoid_mean_of_f": sig_mean_of_f,
        "sigmoid_difference": sig_f_of_mean - sig_mean_of_f,
        "square_f_of_mean": sq_f_of_mean,
        "square_mean_of_f": sq_mean_of_f,
        "square_difference": sq_f_of_mean - sq_mean_of_f,
    }


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from e
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {value}")
    return value


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="f(E[z]) versus E[f(z)] for a two-state latent alignment")
    parser.add_argument(
        "--p-zero",
        type=_probability,
        default=0.5,
        help="probability P(z = 0) in the sigmoid case (default: 0.5)",
    )
    return parser


if __name__ == "__main__":
    assert pyro.__version__.startswith("1.")
    main(make_parser().parse_args())
