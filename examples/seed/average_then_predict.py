"""Averaging source features and predicting once, against predicting under each attention state and averaging the
predictions: standard library only.

One target position attends over ``S`` source positions with features ``x_s``.  The attention weights are
``a = softmax(scores)``.  The output layer is ``p(y | c) = softmax(W tanh(U c))`` for a context vector ``c``.

* *soft attention* averages the features first and predicts once: ``p_soft(y) = p(y | sum_s a_s x_s)``;
* *the marginal* predicts under each attention state ``z = s`` and averages the probabilities:
  ``p_marginal(y) = sum_s a_s p(y | x_s)`` -- the likelihood of a latent-alignment model.

Both are distributions over ``y``; they agree when the attention is one-hot (there is nothing to average) and
differ otherwise.  Jensen's inequality bounds the marginal's log-probability from below by the average of the
states' log-probabilities, ``log p_marginal(y) >= sum_s a_s log p(y | x_s)``, the bound hard attention trains.

Runs on Python 3.9+ with nothing installed: ``python examples/seed/average_then_predict.py --sharpness 5``.
"""

from __future__ import annotations

import argparse
import math

#: three source positions with 2-dimensional features, and an output layer over 3 classes
FEATURES = [[2.0, -1.0], [-1.5, 2.5], [0.5, 0.5]]
SCORES = [1.0, 0.2, -0.5]
U = [[1.5, -0.5], [0.3, 2.0]]
W = [[2.0, -1.0], [-2.0, 1.5], [0.5, 0.5]]


def softmax(xs: list[float]) -> list[float]:
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


def matvec(m: list[list[float]], v: list[float]) -> list[float]:
    return [sum(m[i][j] * v[j] for j in range(len(v))) for i in range(len(m))]


def predict(context: list[float]) -> list[float]:
    """``p(y | c) = softmax(W tanh(U c))``."""
    return softmax(matvec(W, [math.tanh(h) for h in matvec(U, context)]))


def compare(weights: list[float]) -> tuple[list[float], list[float]]:
    """``(p_soft, p_marginal)`` for attention weights ``weights`` over :data:`FEATURES`."""
    S, D = len(FEATURES), len(FEATURES[0])
    expected = [sum(weights[s] * FEATURES[s][d] for s in range(S)) for d in range(D)]
    states = [predict(FEATURES[s]) for s in range(S)]
    marginal = [sum(weights[s] * states[s][y] for s in range(S)) for y in range(len(W))]
    return predict(expected), marginal


def main(args: argparse.Namespace) -> dict[str, list[float]]:
    weights = softmax([args.sharpness * s for s in SCORES])
    soft, marginal = compare(weights)
    print("attention weights  " + "  ".join(f"{a:.3f}" for a in weights))
    print(f"{'y':<3} {'p_soft(y)':>10} {'p_marginal(y)':>14}")
    for y in range(len(W)):
        print(f"{y:<3} {soft[y]:>10.4f} {marginal[y]:>14.4f}")
    # the numerical checks
    assert abs(sum(soft) - 1.0) < 1e-12 and abs(sum(marginal) - 1.0) < 1e-12  # both are distributions
    states = [predict(x) for x in FEATURES]
    for y in range(len(W)):  # Jensen: log of the average >= the average of the logs
        assert math.log(marginal[y]) >= sum(weights[s] * math.log(states[s][y]) for s in range(len(FEATURES))) - 1e-12
    one_hot = compare([1.0, 0.0, 0.0])
    assert max(abs(a - b) for a, b in zip(*one_hot)) < 1e-12  # noqa: B905 - nothing to average: the two agree
    difference = max(abs(a - b) for a, b in zip(soft, marginal))  # noqa: B905
    if 0.0 < args.sharpness < 20.0:
        assert difference > 1e-3, difference  # spread attention: they differ
    print(f"largest difference {difference:.4f}; checks passed")
    return {"weights": weights, "soft": soft, "marginal": marginal}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sharpness", type=float, default=1.0,
                        help="multiplies the attention scores (0: uniform attention; large: nearly one-hot)")
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
