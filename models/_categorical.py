"""The generative model shared by the categorical pairs (marginal likelihood, hard and variational attention).

They differ only in their guide and objective, which is the paper's point: one model
``p(y, z | x) = prod_t p(z_t | x, y_<t) p(y_t | x, y_<t, z_t)`` with ``z_t`` categorical over the source,
trained by exact marginal likelihood (no guide), by ``E_p[log p(y | x, z)]`` (guide = prior) or by an ELBO with
an amortised ``q(z | x, y)``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro.poutine.runtime import get_plates
from torch import Tensor

from pyro_attention.distributions import AlignedCategorical
from pyro_attention.inference.elbo import ReinforceKL_ELBO
from pyro_attention.networks.base import AttentionNetwork, Encoded, gather_context
from pyro_attention.pair import MAX_PLATE_NESTING, AlignmentPair, check_estimator


class CategoricalAlignmentModel(AlignmentPair):
    """``z_t ~ Categorical(softmax(a_t))`` over real source positions, ``y_t ~ p(y_t | x, x_{z_t})``."""

    latent: ClassVar[str] = "categorical"

    def model(self, batch: Any) -> None:
        enc = self.encode(batch)
        net = self.network
        with self.plates(enc):
            z = pyro.sample("align", dist.Categorical(logits=self.prior_logits(enc)), infer={"enumerate": "parallel"})
            # z enumerated, (S, 1, 1): one table of observed-token log-likelihoods (B, T, S) serves all S
            # alignments; z sampled, (B, T): the logits of that one alignment are cheaper.
            table = net.aligned_log_likelihood(enc) if z.dim() > 2 else None
            self.observe(
                enc,
                AlignedCategorical(
                    z,
                    table,
                    enc.target,
                    lambda i: net.output_logits(enc, gather_context(enc.values, i)),
                    net.num_classes,
                ),
            )


class GuidedCategoricalAlignment(CategoricalAlignmentModel):
    """The categorical model with a categorical guide ``Categorical(logits=self.guide_logits(enc))``.

    The estimator decides only how the ELBO's expectation over the guide is computed:

    * ``"enum"`` -- the guide site is enumerated in parallel by ``TraceEnum_ELBO`` (exact);
    * ``"sample"`` -- one draw per token and :class:`~pyro_attention.inference.ReinforceKL_ELBO`: the KL in
      closed form, REINFORCE (Rao-Blackwellised over the plates) for ``E_q[log p(y | x, z)]`` with the
      soft-attention log-likelihood ``log p(y_t | x, E_p[z_t])`` as ``baseline_value`` -- the paper's estimator.
      (The guide's ``infer`` uses Pyro's baseline key, so ``TraceGraph_ELBO``, whose KL is sampled, runs too.)
    """

    def __init__(self, network: AttentionNetwork, estimator: str = "enum") -> None:
        super().__init__(network)
        self.estimator = check_estimator(type(self).__name__, estimator)

    def guide_logits(self, enc: Encoded) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def guide_probs(self, enc: Encoded) -> Tensor:
        return torch.softmax(self.guide_logits(enc), -1)

    def guide(self, batch: Any) -> None:
        enc = self.encode_for_model(batch)
        with self.plates(enc):
            if self.estimator == "enum":
                infer = {"enumerate": "parallel"}
            else:
                # TraceGraph_ELBO wants the baseline shaped like the site, plates (e.g. particles) included
                with torch.no_grad():  # a constant of the estimator: no graph kept for it
                    baseline = self.soft_log_likelihood(enc)
                infer = {"baseline": {"baseline_value": baseline.expand(_plate_shape(baseline.shape))}}
            pyro.sample("align", dist.Categorical(logits=self.guide_logits(enc)), infer=infer)

    def elbo(self) -> pyro.infer.ELBO:
        if self.estimator == "enum":
            return pyro.infer.TraceEnum_ELBO(max_plate_nesting=MAX_PLATE_NESTING)
        return ReinforceKL_ELBO(max_plate_nesting=MAX_PLATE_NESTING)


def _plate_shape(shape: torch.Size) -> torch.Size:
    """``shape`` broadcast with the sizes of the plates active now."""
    dims = list(shape)
    for frame in get_plates():
        if frame.dim is not None:
            while len(dims) < -frame.dim:
                dims.insert(0, 1)
            dims[frame.dim] = max(dims[frame.dim], frame.size)
    return torch.Size(dims)
