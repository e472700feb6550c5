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

from pyro_attention.distributions import AlignedCategorical
from pyro_attention.networks.base import gather_context
from pyro_attention.pair import AlignmentPair


class CategoricalAlignmentModel(AlignmentPair):
    """``z_t ~ Categorical(softmax(a_t))`` over real source positions, ``y_t ~ p(y_t | x, x_{z_t})``."""

    latent: ClassVar[str] = "categorical"

    def model(self, batch: Any) -> None:
        enc = self.encode(batch)
        net = self.network
        with self.plates(enc):
            z = pyro.sample("align", dist.Categorical(logits=self.prior_logits(enc)),
                            infer={"enumerate": "parallel"})
            # z enumerated, (S, 1, 1): one table of observed-token log-likelihoods (B, T, S) serves all S
            # alignments; z sampled, (B, T): the logits of that one alignment are cheaper.
            table = net.aligned_log_likelihood(enc) if z.dim() > 2 else None
            self.observe(enc, AlignedCategorical(
                z, table, enc.target, lambda i: net.output_logits(enc, gather_context(enc.values, i)),
                net.num_classes,
            ))
