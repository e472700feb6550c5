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
from torch import Tensor

from pyro_attention.distributions import AlignedCategorical
from pyro_attention.inference.estimators import Enumerate, Estimator, ScoreFunction
from pyro_attention.inference.estimators import plate_shape as _plate_shape  # noqa: F401 - the old import path
from pyro_attention.networks.base import AttentionNetwork, Encoded, gather_context
from pyro_attention.pair import AlignmentPair


class CategoricalAlignmentModel(AlignmentPair):
    """``z_t ~ Categorical(softmax(a_t))`` over real source positions, ``y_t ~ p(y_t | x, x_{z_t})``."""

    latent: ClassVar[str] = "categorical"

    def model(self, batch: Any) -> None:
        enc = self.encode(batch)
        net = self.network
        with self.plates(enc):
            z = pyro.sample("align", dist.Categorical(logits=self.prior_logits(enc)), infer={"enumerate": "parallel"})
            # z enumerated, (S, 1, 1): one table of observed-token log-likelihoods (B, T, S) serves all S
            # alignments; z sampled, (B, T): the logits of that one alignment are cheaper.  Both give the same
            # numbers, so this is a cost choice, and not the estimator's to make: the model is also traced
            # outside training -- enumerated by the exact log-likelihood whatever the estimator, sampled by
            # Predictive -- so it reads the value it got (more than the two plate dims: several alignments per
            # token, enumerated or vectorised particles).
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

    The estimator (an object of :mod:`pyro_attention.inference.estimators`, or its name) decides only how the
    ELBO's expectation over the guide is computed; it gives the ELBO and the guide site's ``infer``:

    * ``Enumerate()`` / ``"enum"`` -- the guide site is enumerated in parallel by ``TraceEnum_ELBO`` (exact);
    * ``ScoreFunction()`` / ``"sample"`` -- one draw per token and
      :class:`~pyro_attention.inference.ReinforceKL_ELBO`: the KL in closed form, REINFORCE (Rao-Blackwellised
      over the plates) for ``E_q[log p(y | x, z)]`` with the soft-attention log-likelihood
      ``log p(y_t | x, E_p[z_t])`` as ``baseline_value`` -- the paper's estimator.  (The guide's ``infer`` uses
      Pyro's baseline key, so ``TraceGraph_ELBO``, whose KL is sampled, runs too.)
    """

    estimators: ClassVar[tuple[Estimator, ...]] = (Enumerate(), ScoreFunction())

    def __init__(self, network: AttentionNetwork, estimator: Estimator | str = "enum") -> None:
        super().__init__(network)
        self.set_estimator(estimator)

    def guide_logits(self, enc: Encoded) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def guide_probs(self, enc: Encoded) -> Tensor:
        return torch.softmax(self.guide_logits(enc), -1)

    def guide(self, batch: Any) -> None:
        enc = self.encode_for_model(batch)
        with self.plates(enc):
            infer = self.get_estimator().guide_infer(self, enc)
            pyro.sample("align", dist.Categorical(logits=self.guide_logits(enc)), infer=infer)
