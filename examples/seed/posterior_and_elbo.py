"""For one observed label: the exact posterior over attention states, and a categorical variational distribution
optimised against it, with ``log p(y) - ELBO = KL(q || p(z | y))`` shown numerically: standard library only.

The generative parameters are fixed: a prior ``p(z = s)`` over ``S`` attention states and, for the observed label
``y``, the likelihood ``p(y | z = s)`` of each state.  Then

* the evidence is ``p(y) = sum_s p(z = s) p(y | z = s)`` and the exact posterior ``p(z = s | y) = p(z = s) p(y | z
  = s) / p(y)``;
* for any categorical ``q(z)``, ``ELBO(q) = sum_s q(s) [log p(z = s) + log p(y | z = s) - log q(s)]`` and
  ``log p(y) - ELBO(q) = KL(q || p(z | y))`` exactly;
* gradient ascent on the ELBO over ``q = softmax(phi)`` drives the KL to 0 and ``q`` to the posterior.

Runs on Python 3.9+ with nothing installed: ``python examples/seed/posterior_and_elbo.py --steps 200``.
"""

from __future__ import annotations

import argparse
import math

PRIOR = [0.5, 0.3, 0.15, 0.05]
LIKELIHOOD = [0.05, 0.6, 0.9, 0.2]  # p(y | z = s) of the observed y


def softmax(xs: list[float]) -> list[float]:
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


def elbo(q: list[float]) -> float:
    return sum(q[s] * (math.log(PRIOR[s]) + math.log(LIKELIHOOD[s]) - math.log(q[s])) for s in range(len(q)))


def kl(q: list[float], p: list[float]) -> float:
    return sum(q[s] * (math.log(q[s]) - math.log(p[s])) for s in range(len(q)))


def main(args: argparse.Namespace) -> dict[str, object]:
    S = len(PRIOR)
    evidence = sum(PRIOR[s] * LIKELIHOOD[s] for s in range(S))
    posterior = [PRIOR[s] * LIKELIHOOD[s] / evidence for s in range(S)]
    phi = [0.0] * S  # q starts uniform
    print(f"log p(y) = {math.log(evidence):.6f}; exact posterior " + " ".join(f"{p:.4f}" for p in posterior))
    print(f"{'step':>5} {'ELBO':>10} {'log p(y) - ELBO':>16} {'KL(q || post)':>14}")
    history = []
    for step in range(args.steps + 1):
        q = softmax(phi)
        gap, divergence = math.log(evidence) - elbo(q), kl(q, posterior)
        assert abs(gap - divergence) < 1e-12, (gap, divergence)  # the identity, at every step
        history.append((step, elbo(q), gap))
        if step % max(1, args.steps // 5) == 0 or step == args.steps:
            print(f"{step:>5} {elbo(q):>10.6f} {gap:>16.3e} {divergence:>14.3e}")
        # dELBO / dphi_j = q_j (d_j - sum_s q_s d_s), d_s = log p(z = s, y) - log q(s)
        d = [math.log(PRIOR[s] * LIKELIHOOD[s]) - math.log(q[s]) for s in range(S)]
        mean = sum(q[s] * d[s] for s in range(S))
        phi = [phi[j] + args.lr * q[j] * (d[j] - mean) for j in range(S)]
    q = softmax(phi)
    if args.steps >= 200:  # converged: q is the posterior and the bound is tight
        assert kl(q, posterior) < 1e-8 and max(abs(q[s] - posterior[s]) for s in range(S)) < 1e-4
    assert all(history[i + 1][1] >= history[i][1] - 1e-12 for i in range(len(history) - 1))  # the ELBO only rises
    print("q after ascent   " + " ".join(f"{x:.4f}" for x in q) + "; checks passed")
    return {"posterior": posterior, "q": q, "history": history}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="gradient-ascent steps on the ELBO (default 300)")
    parser.add_argument("--lr", type=float, default=1.0, help="step size (default 1.0)")
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
