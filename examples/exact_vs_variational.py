"""
Exact posterior versus a variational categorical alignment for one observation.

A single latent alignment ``z`` takes one of ``K`` states and emits one scalar
observation::

    z ~ Categorical(softmax(a)),        y | z ~ Normal(mu_z, sigma),

with fixed prior logits ``a`` (drawn once from a seeded standard normal), fixed
means ``mu = linspace(-2, 2, K)`` and a fixed scale ``sigma``. Because ``z`` is
discrete and small, everything is exact by enumeration:

    log p(y)   = log sum_z p(z) p(y | z),
    p(z | y)   = p(z) p(y | z) / p(y).

A variational posterior ``q(z) = Categorical(softmax(phi))`` is fitted with SVI,
using ``TraceEnum_ELBO`` with the guide site enumerated as well, so the objective is
the exact evidence lower bound rather than a Monte Carlo estimate::

    ELBO(phi) = sum_z q(z) [log p(y, z) - log q(z)].

For any ``q`` the gap is exactly the KL divergence to the true posterior::

    log p(y) = ELBO(q) + KL(q(z) || p(z | y)),

which the script checks in float64 after training, computing the KL directly from
the two categorical distributions with ``torch.distributions.kl_divergence``.
This is the identity underlying the variational attention of the reference below:
maximising the ELBO over ``q`` is the same as pulling ``q`` toward the exact
alignment posterior.

Reference:

    Y. Deng, Y. Kim, J. Chiu, D. Guo, A. M. Rush,
    "Latent Alignment and Variational Attention", NeurIPS 2018.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import SVI, TraceEnum_ELBO
from pyro.optim import Adam

TOLERANCE_TEXT = "1e-5"
TOLERANCE = float(TOLERANCE_TEXT)


def make_model(prior_logits: torch.Tensor, means: torch.Tensor, sigma: float) -> Callable[[torch.Tensor], None]:
    def model(y: torch.Tensor) -> None:
        z = pyro.sample("z", dist.Categorical(logits=prior_logits), infer={"enumerate": "parallel"})
        pyro.sample("y", dist.Normal(means[z], sigma), obs=y)

    return model


def make_guide(num_states: int) -> Callable[[torch.Tensor], None]:
    def guide(y: torch.Tensor) -> None:
        q_logits = pyro.param("q_logits", lambda: torch.zeros(num_states))
        pyro.sample("z", dist.Categorical(logits=q_logits), infer={"enumerate": "parallel"})

    return guide


def empty_guide(y: torch.Tensor) -> None:
    pass


def _validate(args: argparse.Namespace) -> None:
    if args.num_states < 2:
        raise ValueError(f"--num-states must be at least 2, got {args.num_states}")
    if args.steps < 0:
        raise ValueError(f"--steps must be non-negative, got {args.steps}")
    if not args.lr > 0:
        raise ValueError(f"--lr must be positive, got {args.lr}")
    if not args.sigma > 0:
        raise ValueError(f"--sigma must be positive, got {args.sigma}")


def main(args: argparse.Namespace) -> dict[str, Any]:
    _validate(args)
    old_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _run(args)
    finally:
        torch.set_default_dtype(old_dtype)


def _run(args: argparse.Namespace) -> dict[str, Any]:
    pyro.clear_param_store()
    pyro.set_rng_seed(args.seed)
    K = args.num_states
    generator = torch.Generator().manual_seed(args.seed)
    prior_logits = torch.randn(K, generator=generator)
    means = torch.linspace(-2.0, 2.0, K)
    y = torch.tensor(float(args.y))

    model = make_model(prior_logits, means, args.sigma)
    guide = make_guide(K)

    # Exact evidence and posterior by enumerating z in the model (the guide is empty).
    exact_elbo = TraceEnum_ELBO(max_plate_nesting=0)
    log_evidence = -exact_elbo.loss(model, empty_guide, y)
    posterior = exact_elbo.compute_marginals(model, empty_guide, y)["z"]
    posterior = dist.Categorical(logits=posterior.logits)

    # SVI on q(z); z is enumerated in the guide too, so the loss is the exact negative ELBO.
    svi = SVI(model, guide, Adam({"lr": args.lr}), loss=TraceEnum_ELBO(max_plate_nesting=0))
    for step in range(args.steps):
        loss = svi.step(y)
        if args.verbose and (step % max(1, args.steps // 10) == 0 or step == args.steps - 1):
            print(f"step {step:5d}  -ELBO = {loss:.6f}")

    q_logits = pyro.param("q_logits").detach() if args.steps > 0 else torch.zeros(K)
    q = dist.Categorical(logits=q_logits)
    with torch.no_grad():
        elbo = -TraceEnum_ELBO(max_plate_nesting=0).loss(model, make_fixed_guide(q_logits), y)
    kl = torch.distributions.kl_divergence(q, posterior).item()
    gap = log_evidence - elbo - kl
    holds = abs(gap) < TOLERANCE

    print(f"K = {K}, y = {y.item():.3f}, sigma = {args.sigma:.3f}, steps = {args.steps}, lr = {args.lr}")
    print(f"{'z':>3} {'mu_z':>7} {'prior':>8} {'q(z)':>8} {'p(z|y)':>8}")
    prior_probs = torch.softmax(prior_logits, -1)
    for k in range(K):
        print(
            f"{k:>3d} {means[k].item():>7.3f} {prior_probs[k].item():>8.4f} "
            f"{q.probs[k].item():>8.4f} {posterior.probs[k].item():>8.4f}"
        )
    print(f"log p(y) = {log_evidence:.6f}")
    print(f"ELBO = {elbo:.6f}")
    print(f"KL(q || p(z|y)) = {kl:.6e}")
    print(f"log p(y) - ELBO - KL = {gap:.1e}")
    print(f"identity holds to {TOLERANCE_TEXT}: {holds}")
    if not holds:
        raise RuntimeError(
            f"log p(y) = ELBO + KL violated: log p(y) - ELBO - KL = {gap:.3e} (tolerance {TOLERANCE_TEXT})"
        )

    return {
        "log_evidence": log_evidence,
        "elbo": elbo,
        "kl": kl,
        "gap": gap,
        "identity_holds": holds,
        "q_probs": q.probs.tolist(),
        "posterior_probs": posterior.probs.tolist(),
        "prior_probs": prior_probs.tolist(),
    }


def make_fixed_guide(q_logits: torch.Tensor) -> Callable[[torch.Tensor], None]:
    """A guide with the trained logits frozen, so evaluating the ELBO touches no parameters."""

    def guide(y: torch.Tensor) -> None:
        pyro.sample("z", dist.Categorical(logits=q_logits), infer={"enumerate": "parallel"})

    return guide


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="log p(y) = ELBO + KL(q || p(z|y)) for a single categorical alignment")
    parser.add_argument("--num-states", type=int, default=5, help="number of alignment states K")
    parser.add_argument("--seed", type=int, default=0, help="seed for the fixed prior logits")
    parser.add_argument("--y", type=float, default=0.7, help="the observed value")
    parser.add_argument("--sigma", type=float, default=1.0, help="observation noise scale")
    parser.add_argument("--steps", type=int, default=1000, help="SVI steps")
    parser.add_argument("--lr", type=float, default=0.05, help="Adam learning rate")
    parser.add_argument("--verbose", action="store_true", help="print the loss during training")
    return parser


if __name__ == "__main__":
    assert pyro.__version__.startswith("1.")
    main(make_parser().parse_args())
