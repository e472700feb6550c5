"""Feeding the expected alignment is not marginalising over it: f(E[z]) against E[f(z)], standard library only.

A deterministic attention layer computes ``f(E[z])``; a latent-alignment model predicts with ``E[f(z)] = sum_z
p(z) f(z)``.  For a nonlinear ``f`` the two differ, and Jensen's inequality gives the sign for a convex or a
concave ``f``.  Two cases:

* ``z in {0, 4}`` with ``P(z = 0) = p`` (``--p-zero``, 0.5 by default) and ``f = sigmoid``: ``f(E[z]) =
  sigmoid(2) = 0.881`` against ``E[f(z)] = (0.5 + sigmoid(4)) / 2 = 0.741``, a difference of 0.140;
* ``z in {0, 2}`` equally likely and ``f(z) = z^2``: ``f(E[z]) = 1`` against ``E[f(z)] = 2``.

Runs on Python 3.9+ with nothing installed: ``python examples/seed/jensen_gap.py --p-zero 0.2``.
The package's Pyro version of the same computation, by enumeration: ``examples/toy_expectation.py``.
"""

from __future__ import annotations

import argparse
import math


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def square(x: float) -> float:
    return x * x


def gap(values: list[float], probs: list[float], f) -> tuple[float, float]:  # noqa: ANN001 - any float function
    """``(f(E[z]), E[f(z)])`` for ``z`` taking ``values[i]`` with probability ``probs[i]``."""
    if abs(sum(probs) - 1.0) > 1e-12 or min(probs) < 0:
        raise ValueError(f"probs must be a distribution, got {probs}")
    mean = sum(p * v for p, v in zip(probs, values))  # noqa: B905 - Python 3.9 has no zip(strict=)
    return f(mean), sum(p * f(v) for p, v in zip(probs, values))  # noqa: B905


def main(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    if not 0.0 <= args.p_zero <= 1.0:
        raise SystemExit(f"--p-zero must be a probability in [0, 1], got {args.p_zero}")
    cases = {
        f"sigmoid, z in {{0, 4}}, P(z = 0) = {args.p_zero:g}": gap([0.0, 4.0], [args.p_zero, 1.0 - args.p_zero],
                                                                   sigmoid),
        "z^2, z in {0, 2}, equally likely": gap([0.0, 2.0], [0.5, 0.5], square),
    }
    print(f"{'case':<40} {'f(E[z])':>9} {'E[f(z)]':>9} {'difference':>11}")
    for name, (soft, marginal) in cases.items():
        print(f"{name:<40} {soft:>9.4f} {marginal:>9.4f} {soft - marginal:>+11.4f}")
    # the numerical checks: the values the text above quotes, and Jensen's sign for the convex z^2
    if args.p_zero == 0.5:
        soft, marginal = cases["sigmoid, z in {0, 4}, P(z = 0) = 0.5"]
        assert abs(soft - sigmoid(2.0)) < 1e-12 and abs(marginal - (0.5 + sigmoid(4.0)) / 2) < 1e-12
        assert round(soft, 3) == 0.881 and round(marginal, 3) == 0.741 and round(soft - marginal, 3) == 0.140
    soft, marginal = cases["z^2, z in {0, 2}, equally likely"]
    assert soft == 1.0 and marginal == 2.0 and marginal >= soft  # E[f(z)] >= f(E[z]) for a convex f
    print("checks passed")
    return cases


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--p-zero", type=float, default=0.5, help="P(z = 0) in the sigmoid case (default 0.5)")
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
