r"""Reweighted wake-sleep: the categorical alignment model trained with importance-weighted objectives.

The generative model is the categorical one of :class:`~pyro_attention.models.VariationalAttention`,
``p(y, z | x) = prod_t p(z_t | x, y_<t) p(y_t | x, y_<t, z_t)``, and the guide is the amortised categorical
:math:`q(z_t \mid x, y)` of the inference network.  Reweighted wake-sleep (Bornschein and Bengio 2015) draws
:math:`K` alignments :math:`z^{(1..K)}_t \sim q(z_t \mid x, y)` per target token and, with the importance
weights :math:`w^{(k)}_t = p(y_t, z^{(k)}_t \mid x, y_{<t}) / q(z^{(k)}_t \mid x, y)` and their normalised
versions :math:`\tilde w^{(k)}_t = w^{(k)}_t / \sum_j w^{(j)}_t`,

.. math::

    \text{wake-}\theta:\ \max_\theta \sum_t \log \frac{1}{K} \sum_k w^{(k)}_t \quad (\le \log p(y \mid x)
    \text{ in expectation: the IWAE bound}), \qquad
    \text{wake-}\phi:\ \max_\phi \sum_t \sum_k \tilde w^{(k)}_t \log q(z^{(k)}_t \mid x, y),

the second a self-normalised estimate of :math:`-\mathrm{KL}(p(z_t \mid x, y) \,\|\, q(z_t \mid x, y))` up to a
constant: ``q`` is fitted to the exact posterior in the inclusive direction, with no REINFORCE and no baseline.

* **What is random:** the alignment ``z_t`` (site ``"align"``), as in the other categorical pairs.
* **What the prior and the posterior see:** the prior sees the source and the query / target prefix; ``q`` also
  sees the observed target.
* **What is combined at prediction:** output likelihoods under the prior, :math:`\mathbb{E}_p[p(y \mid x, z)]`;
  the model is categorical (``latent = "categorical"``), so ``log_likelihood``, ``predict`` and
  ``alignment_posterior`` are exact by enumeration.
* **Training and prediction:** ``pair.elbo()`` is a :class:`pyro.infer.ReweightedWakeSleep`
  (:class:`AlignmentRWS`: ``num_particles=K``, ``vectorize_particles=True``, ``max_plate_nesting=2``,
  ``insomnia=1``: wake-phi only).  Two deviations from Pyro's class, both needed here:

  - **per-token weights** (``per_token=True``, the default).  Pyro's RWS weights whole traces: one importance
    weight per particle for the joint of *all* tokens in the batch (its docstring: "mini-batch training is not
    supported").  With ``B * T`` independent tokens that weight degenerates (one particle takes all the mass),
    so the bound collapses towards a one-sample ELBO and wake-phi learns from one draw.  Given ``x``, the
    alignments of different tokens are independent in the model and in ``q``, so
    :math:`\log p(y \mid x) = \sum_t \log p(y_t \mid x, y_{<t})` and each term gets its own ``K`` weights --
    the same per-token estimator :func:`~pyro_attention.inference.log_likelihood` uses.  Padded targets are
    left out of both losses (read from the masks of the observed sites).  ``per_token=False`` runs Pyro's own
    estimator unchanged.
  - **one number per step.**  Pyro's ``loss_and_grads`` returns ``(wake-theta loss, phi loss)``; ``SVI.step``
    passes the tuple through, which :func:`~pyro_attention.inference.fit` cannot divide by the token count.
    :class:`AlignmentRWS` returns the wake-theta loss (the negative IWAE bound) and keeps the phi loss in
    ``last_phi_loss``; ``return_tuple=True`` restores Pyro's behaviour (then train with a plain
    ``pyro.infer.SVI`` loop, as Pyro's own tests do).

  Sleep-phi (``insomnia < 1``) is not offered: it runs the guide on targets sampled from the model, but our
  guides read the observed targets from the batch, not from an ``observations`` keyword.

Reproduces the "RWS" row of Deng et al. (2018)'s inference alternatives (IWSLT14, 5 samples: 6.41 PPL / 32.96
BLEU).

References: [1] Bornschein and Bengio, "Reweighted Wake-Sleep", ICLR 2015.  [2] Le, Kosiorek, Siddharth, Teh,
Wood, "Revisiting Reweighted Wake-Sleep for Models with Stochastic Control Flow", UAI 2019.  [3] Deng, Kim,
Chiu, Guo, Rush, "Latent Alignment and Variational Attention", NeurIPS 2018.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import ReweightedWakeSleep
from pyro.util import warn_if_nan
from torch import Tensor

from pyro_attention.models._categorical import CategoricalAlignmentModel
from pyro_attention.networks.base import AttentionNetwork, Encoded
from pyro_attention.pair import MAX_PLATE_NESTING


class AlignmentRWS(ReweightedWakeSleep):
    """Pyro's :class:`~pyro.infer.ReweightedWakeSleep` (wake-theta + wake-phi) with per-token importance weights.

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


class RWSAttention(CategoricalAlignmentModel):
    """The categorical alignment model with a categorical ``q(z | x, y)``, trained by reweighted wake-sleep.

    :param network: the task network.
    :param num_particles: ``K`` samples per token (Deng et al.: 5).
    :param per_token: per-token importance weights (see the module docstring).
    """

    label: ClassVar[str] = "rws"
    paper_row: ClassVar[str] = "RWS (Deng et al. 2018, inference alternatives)"

    def __init__(self, network: AttentionNetwork, num_particles: int = 5, per_token: bool = True) -> None:
        super().__init__(network)
        if num_particles < 2:
            raise ValueError(f"RWSAttention: num_particles must be >= 2, got {num_particles}")
        self.num_particles = int(num_particles)
        self.per_token = per_token

    def __repr__(self) -> str:
        return f"RWSAttention(num_particles={self.num_particles}, per_token={self.per_token})"

    def guide_probs(self, enc: Encoded) -> Tensor:
        return torch.softmax(self.posterior_logits(enc), -1)

    def guide(self, batch: Any) -> None:
        enc = self.encode_for_model(batch)
        with self.plates(enc):
            pyro.sample("align", dist.Categorical(logits=self.posterior_logits(enc)))

    def elbo(self) -> AlignmentRWS:
        return AlignmentRWS(num_particles=self.num_particles, per_token=self.per_token)
