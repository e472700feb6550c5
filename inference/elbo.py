r"""The ELBO classes the estimators of :mod:`pyro_attention.inference.estimators` return (models define none).

* :class:`ReinforceKL_ELBO` -- analytic KL, score-function (REINFORCE) gradient with baselines (below);
* :class:`CategoricalKL_ELBO` -- relaxed (Concrete) draws for the likelihood, the KL of the categoricals they
  relax in closed form (Jang et al. 2017's estimator);
* :class:`AnnealedMeanField_ELBO` -- ``TraceMeanField_ELBO`` whose gradient steps run at a KL weight schedule;
* :class:`AlignmentRWS` -- Pyro's ``ReweightedWakeSleep`` with per-token importance weights.

``ReinforceKL_ELBO``: the ELBO with an *analytic* KL and a score-function (REINFORCE) gradient with baselines.

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

import math
from typing import Any, Protocol

import pyro
import torch
from pyro.distributions.util import is_identically_zero, scale_and_mask
from pyro.infer import ReweightedWakeSleep, Trace_ELBO
from pyro.poutine import Trace
from pyro.util import warn_if_nan
from torch import Tensor
from torch.distributions import kl_divergence

from pyro_attention.pair import MAX_PLATE_NESTING


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


class CategoricalKL_ELBO(ReinforceKL_ELBO):
    r"""``E_q[log p(y | x, z)]`` with relaxed draws minus the closed-form KL of the underlying categoricals.

    For each latent site whose guide and model distributions have ``.categorical()``
    (:class:`~pyro_attention.models.gumbel.MaskedConcrete`), the KL term is
    :math:`\mathrm{KL}(\mathrm{Cat}(q) \,\|\, \mathrm{Cat}(p))` (scaled and masked like the site); the observed
    sites' log-probabilities are differentiated through the reparameterised draws.
    """

    def _differentiable_loss_particle(self, model_trace, guide_trace):  # noqa: ANN001, ANN202
        observed = [s for s in model_trace.nodes.values() if s["type"] == "sample" and s["is_observed"]]
        elbo = sum((s["log_prob_sum"] for s in observed), torch.zeros(()))
        for name, site in guide_trace.nodes.items():
            if site["type"] != "sample" or site["is_observed"]:
                continue
            q, p = site["fn"], model_trace.nodes[name]["fn"]
            kl = kl_divergence(q.categorical(), p.categorical())
            elbo = elbo - scale_and_mask(kl, site["scale"], site["mask"]).sum()
        return -elbo.detach(), -elbo


class Annealable(Protocol):
    """What :class:`AnnealedMeanField_ELBO` needs: a step counter and a context that applies the KL weight
    (a :class:`~pyro_attention.inference.estimators.KLSchedule`, or a pair that delegates to one)."""

    step: int

    def annealed(self) -> Any: ...


class AnnealedMeanField_ELBO(pyro.infer.TraceMeanField_ELBO):
    """``TraceMeanField_ELBO`` whose gradient steps run at a KL weight schedule and advance its step counter.

    ``loss`` (no gradient) is the plain ELBO at weight 1; ``loss_and_grads`` returns the annealed loss it
    differentiated.

    :param schedule: a :class:`~pyro_attention.inference.estimators.KLSchedule` (or a pair with ``annealed()``
        and ``step``, as before the schedule was an object).
    """

    def __init__(self, schedule: Annealable, **kwargs: Any) -> None:
        kwargs.setdefault("max_plate_nesting", MAX_PLATE_NESTING)
        super().__init__(**kwargs)
        self.schedule = schedule

    @property
    def pair(self) -> Annealable:
        """The schedule (the old name of the attribute, when it was always the pair)."""
        return self.schedule

    def loss_and_grads(self, model, guide, *args, **kwargs):  # noqa: ANN001, ANN201 - Pyro's signature
        with self.schedule.annealed():
            loss = super().loss_and_grads(model, guide, *args, **kwargs)
        self.schedule.step += 1
        return loss


class AlignmentRWS(ReweightedWakeSleep):
    """Pyro's :class:`~pyro.infer.ReweightedWakeSleep` (wake-theta + wake-phi) with per-token importance weights.

    See :mod:`pyro_attention.models.rws` for the maths and why the weights are per token.

    :param num_particles: ``K`` draws per token (> 1).
    :param per_token: one set of weights per (batch, target) element; ``False``: Pyro's whole-trace weights.
    :param return_tuple: return Pyro's ``(theta loss, phi loss)`` from ``loss`` and ``loss_and_grads``
        instead of the theta loss alone.
    """

    def __init__(self, num_particles: int = 5, per_token: bool = True, return_tuple: bool = False) -> None:
        if num_particles < 2:
            raise ValueError(f"AlignmentRWS: num_particles must be >= 2 (self-normalised weights), got {num_particles}")
        super().__init__(
            num_particles=num_particles,
            insomnia=1.0,
            vectorize_particles=True,
            max_plate_nesting=MAX_PLATE_NESTING,
        )
        self.per_token = per_token
        self.return_tuple = return_tuple
        self.last_phi_loss = math.nan

    def _loss(self, model, guide, args, kwargs):  # noqa: ANN001, ANN202 - Pyro's signature
        if not self.per_token:
            return super()._loss(model, guide, args, kwargs)
        ((model_trace, guide_trace),) = list(self._get_traces(model, guide, args, kwargs))
        log_joint, tokens = self._per_token(model_trace, observed_masks=True)
        log_q, _ = self._per_token(guide_trace)
        log_joint, log_q = torch.broadcast_tensors(log_joint, log_q)
        tokens = tokens.to(log_joint.dtype)
        log_weights = log_joint - log_q.detach()  # (K, B, T)
        log_sum_weight = torch.logsumexp(log_weights, dim=0)
        wake_theta_loss = -((log_sum_weight - math.log(self.num_particles)) * tokens).sum()
        warn_if_nan(wake_theta_loss, "wake theta loss")
        normalised_weights = (log_weights - log_sum_weight).exp().detach()
        wake_phi_loss = -(normalised_weights * log_q * tokens).sum()
        warn_if_nan(wake_phi_loss, "wake phi loss")
        return wake_theta_loss, wake_phi_loss

    def _per_token(self, trace: pyro.poutine.Trace, observed_masks: bool = False) -> tuple[Tensor, Tensor]:
        """Sum of the sample sites' log-probabilities, each ``(K, B, T)``; and the real-token mask ``(B, T)``."""
        total, tokens = None, torch.ones((), dtype=torch.bool)
        for name, site in trace.nodes.items():
            if site["type"] != "sample":
                continue
            lp = site["log_prob"]
            if lp.dim() != MAX_PLATE_NESTING + 1 or lp.shape[0] != self.num_particles:
                raise ValueError(
                    f"AlignmentRWS(per_token=True): site {name!r} has log_prob shape {tuple(lp.shape)}, not "
                    f"(num_particles, batch, target); use per_token=False for sites that are not per token"
                )
            total = lp if total is None else total + lp
            if observed_masks and site["is_observed"] and site["mask"] is not None:
                tokens = tokens & site["mask"]
        if total is None:
            raise ValueError("AlignmentRWS: the trace has no sample site")
        return total, tokens

    def loss(self, model, guide, *args, **kwargs):  # noqa: ANN001, ANN201 - Pyro's signature
        theta, phi = super().loss(model, guide, *args, **kwargs)
        self.last_phi_loss = float(phi)
        return (float(theta), float(phi)) if self.return_tuple else float(theta)

    def loss_and_grads(self, model, guide, *args, **kwargs):  # noqa: ANN001, ANN201 - Pyro's signature
        theta, phi = super().loss_and_grads(model, guide, *args, **kwargs)
        self.last_phi_loss = phi
        return (theta, phi) if self.return_tuple else theta
