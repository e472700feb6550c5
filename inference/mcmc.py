"""A reference posterior for continuous alignments: NUTS on the local latent of one example.

For the Dirichlet pair there is no exact posterior to compare ``q`` with.  :func:`nuts_alignment` runs Pyro's
NUTS on the alignment ``z`` of a single example (the network's parameters held fixed), returning ArviZ data
(``posterior.align`` with dims chain, draw, example, target, source; ``sample_stats.diverging``) whose
``az.summary`` reports R-hat and ESS over several chains; :func:`compare_to_guide`
puts q's mean weights beside the NUTS posterior means.

The example must carry no source padding (a Dirichlet over the real positions only; slice the padding off,
e.g. ``RegionBatch`` regions ``[:, :n]``): NUTS moves on the unconstrained image of the simplex, which has
no exact zeros.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import MCMC, NUTS

from pyro_attention.checks import count
from pyro_attention.inference import arviz_generation as azg
from pyro_attention.pair import AlignmentPair


def nuts_alignment(
    pair: AlignmentPair,
    batch: Any,
    num_samples: int = 200,
    warmup_steps: int = 200,
    num_chains: int = 2,
    seed: int = 0,
    progress: bool = False,
) -> Any:
    """NUTS draws of ``"align"`` for one example, as ArviZ data with R-hat / ESS available (an ``InferenceData`` on
    ArviZ 0.2x, an ``xarray.DataTree`` on ArviZ >= 1)."""
    for name, value, low in (("num_samples", num_samples, 1), ("warmup_steps", warmup_steps, 0),
                             ("num_chains", num_chains, 1), ("seed", seed, None)):
        count(value, f"nuts_alignment: {name}", low)
    if pair.continuous != "weights":
        raise ValueError(
            f"nuts_alignment is for continuous alignments; {type(pair).__name__} has {pair.latent!r} "
            "(use alignment_posterior for the exact categorical posterior)"
        )
    with torch.no_grad():
        enc = pair.network.encode(batch)
    if enc.shape[0] != 1 or not bool(enc.source_mask.all()):
        raise ValueError(
            f"nuts_alignment needs one example without source padding, got a batch of shape (B, T, S) = {enc.shape} "
            f"with {int((~enc.source_mask).sum())} padded positions"
        )
    pyro.set_rng_seed(seed)
    was_training = pair.network.training
    pair.network.eval()  # fixed parameters: no dropout, and Pyro registers no frozen parameter
    for p in pair.network.parameters():
        p.requires_grad_(False)
    try:
        mcmc = MCMC(
            NUTS(pair.model, max_plate_nesting=2),
            num_samples=num_samples,
            warmup_steps=warmup_steps,
            num_chains=num_chains,
            disable_progbar=not progress,
            mp_context=None,
        )
        mcmc.run(batch)
    finally:
        for p in pair.network.parameters():
            p.requires_grad_(True)
        pair.network.train(was_training)
    align = mcmc.get_samples(group_by_chain=True)["align"].cpu().numpy()  # (chain, draw, 1, T, S)
    diverging = np.zeros(align.shape[:2], dtype=bool)
    for chain, steps in enumerate(mcmc.diagnostics()["divergences"].values()):
        diverging[chain, list(steps)] = True
    return azg.from_dict(
        {"posterior": {"align": align}, "sample_stats": {"diverging": diverging}},
        coords={},
        dims={"align": ["example", "target", "source"]},
    )


def compare_to_guide(pair: AlignmentPair, batch: Any, nuts_data: Any) -> dict[str, np.ndarray]:
    """NUTS posterior mean weights, q's mean weights, the prior's, and the L1 distance of q and prior to NUTS."""
    with torch.no_grad():
        enc = pair.network.encode(batch)
        q = pair.posterior(enc).mean[0].cpu().numpy()  # (T, S)
        prior = pair.prior(enc).mean[0].cpu().numpy()
    draws = nuts_data.posterior["align"].values  # (chain, draw, 1, T, S)
    nuts = draws.reshape(-1, *draws.shape[-2:]).mean(0)
    return {
        "nuts_mean": nuts,
        "q_mean": q,
        "prior_mean": prior,
        "l1_q": np.abs(q - nuts).sum(-1),
        "l1_prior": np.abs(prior - nuts).sum(-1),
    }
