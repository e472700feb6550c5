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
* **Training and prediction:** the estimator
  :class:`~pyro_attention.inference.estimators.ReweightedWakeSleep`; ``pair.elbo()`` is a
  :class:`pyro.infer.ReweightedWakeSleep` (:class:`~pyro_attention.inference.elbo.AlignmentRWS`:
  ``num_particles=K``, ``vectorize_particles=True``, ``max_plate_nesting=2``,
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

from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

from pyro_attention.inference.estimators import Estimator, ReweightedWakeSleep
from pyro_attention.models._categorical import CategoricalAlignmentModel
from pyro_attention.networks.base import AttentionNetwork, Encoded


class RWSAttention(CategoricalAlignmentModel):
    """The categorical alignment model with a categorical ``q(z | x, y)``, trained by reweighted wake-sleep.

    :param network: the task network.
    :param num_particles: ``K`` samples per token (Deng et al.: 5).
    :param per_token: per-token importance weights (see the module docstring).
    """

    label: ClassVar[str] = "rws"
    paper_row: ClassVar[str] = "RWS (Deng et al. 2018, inference alternatives)"
    #: the pair's own ``ReweightedWakeSleep(num_particles, per_token)`` replaces this default at construction
    estimators: ClassVar[tuple[Estimator, ...]] = (ReweightedWakeSleep(),)

    def __init__(self, network: AttentionNetwork, num_particles: int = 5, per_token: bool = True) -> None:
        super().__init__(network)
        if num_particles < 2:
            raise ValueError(f"RWSAttention: num_particles must be >= 2, got {num_particles}")
        self.num_particles = int(num_particles)
        self.per_token = per_token
        self._choose_estimator(ReweightedWakeSleep(self.num_particles, per_token))

    def __repr__(self) -> str:
        return f"RWSAttention(num_particles={self.num_particles}, per_token={self.per_token})"

    def guide_probs(self, enc: Encoded) -> Tensor:
        return torch.softmax(self.posterior_logits(enc), -1)

    def guide(self, batch: Any) -> None:
        enc = self.encode_for_model(batch)
        with self.plates(enc):
            pyro.sample("align", dist.Categorical(logits=self.posterior_logits(enc)))
