r"""``ReinforceKL_ELBO``: the ELBO with an *analytic* KL and a score-function (REINFORCE) gradient with baselines.

For a guide :math:`q(z \mid x, y)` over latent sites and observations :math:`y`,

.. math::

    \mathcal{L} = \mathbb{E}_{q}[\log p(y \mid x, z)] - \mathrm{KL}(q(z \mid x, y) \,\|\, p(z \mid x)),

estimated from one draw :math:`z \sim q` per particle.  The KL is computed in closed form with
:func:`torch.distributions.kl_divergence` (so its gradient is exact), and for a non-reparameterised site the
gradient of the expected log-likelihood is the score-function estimator with a baseline :math:`b`,

.. math::

    \nabla \mathbb{E}_q[\log p(y \mid z)] \approx
        \nabla \log p(y \mid z) + (\log p(y \mid z) - b)\, \nabla \log q(z),

Rao-Blackwellised over plates: each element of a latent site is rewarded only with the log-likelihood of the
observations at the same plate index (the observed sites' log-probabilities summed to the latent site's batch
shape).  That is exactly the paper's estimator for variational attention (Deng et al. 2018, Section 3: REINFORCE
on the reconstruction term, the KL analytic, the soft-attention log-likelihood as baseline).  Reparameterised
sites are differentiated through their samples, as in :class:`~pyro.infer.TraceMeanField_ELBO`.

The baseline is read from the guide site's ``infer={"baseline": {"baseline_value": b}}`` (the same key
:class:`~pyro.infer.TraceGraph_ELBO` uses); ``b`` must broadcast to the site's batch shape.  The guide and
model must pair each latent site with a distribution pair that has a registered KL.

Unlike ``TraceGraph_ELBO`` this ELBO has a ``differentiable_loss``.
"""

from __future__ import annotations

import torch
from pyro.distributions.util import is_identically_zero, scale_and_mask
from pyro.infer import Trace_ELBO
from pyro.poutine import Trace
from torch.distributions import kl_divergence


class ReinforceKL_ELBO(Trace_ELBO):
    """Trace ELBO with analytic KL terms and REINFORCE-with-baseline for non-reparameterised guide sites."""

    def loss(self, model, guide, *args, **kwargs) -> float:  # noqa: ANN001 - Pyro's signature
        """An estimate of ``-ELBO`` (the KL exact, the expected log-likelihood from ``num_particles`` draws)."""
        loss = 0.0
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            loss += float(self._differentiable_loss_particle(model_trace, guide_trace)[0]) / self.num_particles
        return loss

    def _differentiable_loss_particle(self, model_trace: Trace, guide_trace: Trace) -> tuple:
        observed = [s for s in model_trace.nodes.values() if s["type"] == "sample" and s["is_observed"]]
        log_lik = sum((s["log_prob"] for s in observed), torch.zeros(()))
        elbo = sum((s["log_prob_sum"] for s in observed), torch.zeros(()))
        surrogate = elbo
        for name, site in guide_trace.nodes.items():
            if site["type"] != "sample" or site["is_observed"]:
                continue
            model_site = model_trace.nodes[name]
            kl = scale_and_mask(kl_divergence(site["fn"], model_site["fn"]), site["scale"], site["mask"])
            elbo = elbo - kl.sum()
            surrogate = surrogate - kl.sum()
            score = site["score_parts"].score_function
            if is_identically_zero(score):
                continue
            baseline = site["infer"].get("baseline", {}).get("baseline_value", 0.0)
            shape = score.shape
            reward = log_lik.expand(torch.broadcast_shapes(log_lik.shape, shape)).sum_to_size(shape)
            surrogate = surrogate + ((reward - baseline).detach() * score).sum()
        return -elbo.detach(), -surrogate
