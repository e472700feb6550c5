"""Checks every task network's tests share: a pair's exact likelihood against brute-force enumeration of every
alignment, and a few SVI steps that must lower the loss."""

from __future__ import annotations

import itertools
from typing import Any

import pyro
import torch
from pyro import poutine


def brute_force_log_likelihood(pair: Any, batch: Any) -> torch.Tensor:
    """``log p(y | x)`` per example ``(B,)``: the model's joint at every alignment ``z`` in ``S^T`` (the padded
    positions included, which the model must ignore), summed by ``logsumexp``."""
    out = []
    for i in range(len(batch)):
        one = batch[i : i + 1]
        _, T, S = pair.network.encode(one).shape
        joints = [poutine.trace(poutine.condition(pair.model, {"align": torch.tensor(z).view(1, T)}))
                  .get_trace(one).log_prob_sum() for z in itertools.product(range(S), repeat=T)]
        out.append(torch.logsumexp(torch.stack(joints), 0))
    return torch.stack(out)


def assert_trains(pair: Any, batch: Any, steps: int = 30, lr: float = 0.05) -> None:
    """``steps`` SVI steps of the pair's own ELBO on one batch: finite losses, the last five below the first five."""
    svi = pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": lr}), pair.elbo())
    losses = [svi.step(batch) for _ in range(steps)]
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert sum(losses[-5:]) < sum(losses[:5]), losses
