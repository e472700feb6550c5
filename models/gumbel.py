r"""Gumbel-softmax (Concrete) attention: the categorical variational pair with a continuous relaxation.

The categorical model of :class:`~pyro_attention.models.VariationalAttention` is relaxed: the one-hot alignment
becomes a point on the simplex drawn from a Concrete distribution (Maddison et al. 2017; Jang et al. 2017),

.. math::

    z_t \sim \mathrm{Concrete}_\tau(\mathrm{softmax}(a_t)), \qquad c_t = \sum_s z_{t,s}\, x_s, \qquad
    y_t \sim p(y_t \mid x, y_{<t}, c_t),

    q(z_t \mid x, y) = \mathrm{Concrete}_\tau(\mathrm{softmax}(b_t)), \qquad
    z_t = \mathrm{softmax}\big((\ell_t + g_t) / \tau\big), \quad g_{t,s} \sim \mathrm{Gumbel}(0, 1),

with temperature :math:`\tau` (default 0.1, as in Deng et al.), and the relaxed ELBO

.. math::

    \mathcal{L}_\tau = \sum_t \mathbb{E}_{q}[\log p(y_t \mid x, y_{<t}, z_t) + \log p_\tau(z_t \mid x)
        - \log q_\tau(z_t \mid x, y)],

estimated by one reparameterised draw (``estimator="sampled"``, the default: ``Trace_ELBO``; the Concrete-to-Concrete KL
has no closed form).  This is the ELBO of the *relaxed* model, not the categorical ELBO: the output network sees
a blend of sources, and the two coincide only as :math:`\tau \to 0`.  ``estimator="categorical"`` is the estimator
of Jang et al. (2017)'s experiments: the reconstruction term with relaxed draws and the KL of the *categoricals*
the Concretes relax, in closed form (:class:`~pyro_attention.inference.elbo.CategoricalKL_ELBO`),

.. math::

    \tilde{\mathcal{L}}_\tau = \sum_t \mathbb{E}_{q_\tau}[\log p(y_t \mid x, y_{<t}, z_t)]
        - \mathrm{KL}(\mathrm{Cat}(\mathrm{softmax}(b_t)) \,\|\, \mathrm{Cat}(\mathrm{softmax}(a_t))),

a surrogate of the categorical ELBO (equal to it as :math:`\tau \to 0`), not a bound on either model's
likelihood at :math:`\tau > 0`.  The choice is the estimator's: the model and the guide are the same.  On region
QA the sampled Concrete KL at :math:`\tau = 0.1` is so noisy (its log-density ratio has a standard deviation of
tens of nats) that training collapses to :math:`q \approx p \approx` uniform; ``estimator="categorical"`` learns
(``docs/neighbours.md``).  With ``straight_through=True`` the forward pass uses the one-hot
:math:`\mathrm{onehot}(\arg\max_s z_{t,s})` -- exactly the categorical model's output -- while gradients and
densities use the relaxed draw (as Pyro's ``RelaxedOneHotCategoricalStraightThrough``).

* **What is random:** the relaxed alignment :math:`z_t` on the simplex (site ``"align"``, ``(B, T, S)``, event
  dim 1).
* **What the prior and the posterior see:** the prior sees the source and the query / target prefix (the
  network's prior scores); ``q`` (the inference network's scores) also sees the observed target.
* **What is combined at prediction:** the relaxed model's predictive averages output likelihoods over relaxed
  prior draws (``predict(pair, batch, "marginal")``, sampled); :func:`pyro_attention.inference.log_likelihood`
  of this pair is an importance-weighted estimate for the relaxed model.  What is evaluated in the paper is the
  *underlying categorical model* with the same network: :meth:`GumbelAttention.categorical` returns it as a
  :class:`~pyro_attention.models.VariationalAttention` sharing the network, whose ``log_likelihood`` (exact, by
  enumeration), ``predict`` (exact marginal) and ``alignment_posterior`` apply.  ``attention_prior`` is the
  categorical prior ``softmax(a_t)`` (the Concrete's location; its mean has no closed form).
* **Training and prediction:** reparameterised (Gumbel) samples; the estimator ``Reparameterized()``
  (``"sampled"``: ``Trace_ELBO``) or ``CategoricalKL()`` (``"categorical"``:
  :class:`~pyro_attention.inference.elbo.CategoricalKL_ELBO`), from :mod:`pyro_attention.inference.estimators`
  -- either way a biased estimator of the categorical ELBO's gradient, with lower variance than REINFORCE.

Padding.  The torch / Pyro ``RelaxedOneHotCategorical`` cannot represent padded sources: ``-inf`` logits give
``-inf - (-inf) = nan`` in its log-density and its normalising constant counts every position.
:class:`MaskedConcrete` is the Concrete distribution over the real positions only: padded coordinates are
exactly 0 in every sample and absent from the density (whose constants use the number of real positions).
Padded positions are set to ``-inf`` *after* the Gumbel noise and the division by :math:`\tau`, and the density
is computed from the log-sample (carried with the sample as ``value._log_value``, as Pyro's straight-through
distribution carries ``_unquantize``), so gradients stay finite and coordinates that underflow to 0 at
:math:`\tau = 0.1` keep an exact log-density.  At padded targets the guide equals the prior, so
:math:`\log p - \log q = 0` there, and ``"y"`` is masked.

Reproduces the "Gumbel" row of Deng et al. (2018)'s inference alternatives (IWSLT14 6.51 PPL / 33.08 BLEU,
measured on the categorical model).

References: [1] Deng, Kim, Chiu, Guo, Rush, "Latent Alignment and Variational Attention", NeurIPS 2018.
[2] Maddison, Mnih, Teh, "The Concrete Distribution", ICLR 2017.  [3] Jang, Gu, Poole, "Categorical
Reparameterization with Gumbel-Softmax", ICLR 2017.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pyro.distributions as dist
import torch
from pyro.distributions import TorchDistribution
from torch import Tensor
from torch.distributions import constraints

from pyro_attention.inference.estimators import CategoricalKL, Estimator, Reparameterized
from pyro_attention.models.relaxed import SimplexAlignmentModel
from pyro_attention.models.variational import VariationalAttention
from pyro_attention.networks.base import AttentionNetwork, Encoded


class MaskedConcrete(TorchDistribution):
    r"""The Concrete (Gumbel-softmax) distribution over the positions where ``mask`` holds.

    With :math:`n` real positions, logits :math:`\ell` and temperature :math:`\tau` (Maddison et al. 2017, Eq. 1):

    .. math::

        \log p(z) = \log\Gamma(n) + (n - 1)\log\tau + \sum_k (\ell_k - (\tau + 1)\log z_k)
                    - n \log\sum_k e^{\ell_k - \tau \log z_k},

    sums over real positions; identical to ``RelaxedOneHotCategorical(tau, logits)`` when nothing is masked.

    :param temperature: :math:`\tau > 0`.
    :param logits: ``(..., S)`` finite unnormalised logits (values at masked positions are ignored).
    :param mask: ``(..., S)`` bool; every batch element needs a real position.
    :param straight_through: return ``onehot(argmax z)`` in the forward pass, the relaxed ``z``'s gradient.
    """

    arg_constraints = {"logits": constraints.independent(constraints.real, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(
        self,
        temperature: float,
        logits: Tensor,
        mask: Tensor,
        straight_through: bool = False,
        validate_args: bool | None = None,
    ) -> None:
        if not temperature > 0:
            raise ValueError(f"MaskedConcrete: temperature must be > 0, got {temperature}")
        mask = mask.expand(logits.shape)
        if not mask.any(-1).all():
            raise ValueError("MaskedConcrete: some batch element has no unmasked position (mask all False)")
        self.temperature = float(temperature)
        # masked logits become 0: finite, and never used
        self.logits = torch.where(mask, logits, torch.zeros_like(logits))
        self.mask = mask
        self.straight_through = straight_through
        super().__init__(logits.shape[:-1], logits.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None) -> MaskedConcrete:  # noqa: ANN001 - Pyro's signature
        shape = torch.Size(batch_shape) + self.event_shape
        return MaskedConcrete(
            self.temperature, self.logits.expand(shape), self.mask.expand(shape), self.straight_through, False
        )

    @property
    def masked_logits(self) -> Tensor:
        """The logits with ``-inf`` at masked positions."""
        return self.logits.masked_fill(~self.mask, float("-inf"))

    @property
    def probs(self) -> Tensor:
        """``softmax(logits)`` over real positions: the categorical the Concrete relaxes (its tau -> 0 limit)."""
        return torch.softmax(self.masked_logits, -1)

    def categorical(self) -> dist.Categorical:
        """The categorical distribution this Concrete relaxes."""
        return dist.Categorical(logits=self.masked_logits)

    def log_rsample(self, sample_shape: torch.Size = torch.Size()) -> Tensor:
        """``log z`` for a reparameterised draw ``z``: ``-inf`` exactly at masked positions."""
        shape = self._extended_shape(sample_shape)
        tiny = torch.finfo(self.logits.dtype).tiny
        u = torch.rand(shape, dtype=self.logits.dtype, device=self.logits.device).clamp(tiny, 1.0 - 1e-7)
        gumbel = -(-u.log()).log()
        # -inf only after the noise and the division by tau, so no gradient passes through an infinity
        scores = ((self.logits + gumbel) / self.temperature).masked_fill(~self.mask, float("-inf"))
        return torch.log_softmax(scores, -1)

    def rsample(self, sample_shape: torch.Size = torch.Size()) -> Tensor:
        log_z = self.log_rsample(sample_shape)
        z = log_z.exp()
        if self.straight_through:
            hard = torch.nn.functional.one_hot(z.argmax(-1), z.shape[-1]).to(z)
            z = hard + (z - z.detach())
        z._log_value = log_z  # the exact log-sample, read back by log_prob
        return z

    def log_prob(self, value: Tensor) -> Tensor:
        log_z = getattr(value, "_log_value", None)
        if log_z is None:  # a value from elsewhere: its log, with underflowed coordinates clamped
            log_z = value.clamp(min=torch.finfo(value.dtype).tiny).log()
        m = self.mask
        zero = torch.zeros((), dtype=log_z.dtype, device=log_z.device)
        log_z = torch.where(m, log_z, zero)
        n = m.sum(-1).to(log_z.dtype)
        tau = self.temperature
        inner = torch.where(m, self.logits - tau * log_z, torch.full_like(log_z, float("-inf")))
        log_norm = torch.lgamma(n) + (n - 1.0) * math.log(tau)
        return (
            log_norm + torch.where(m, self.logits - (tau + 1.0) * log_z, zero).sum(-1) - n * torch.logsumexp(inner, -1)
        )


class GumbelAttention(SimplexAlignmentModel):
    """Concrete-relaxed categorical attention with an amortised Concrete guide.

    :param network: the task network.
    :param temperature: the Concrete temperature ``tau`` (prior and guide).
    :param straight_through: one-hot forward pass, relaxed gradients.
    :param estimator: ``Reparameterized()`` / ``"sampled"`` (the relaxed ELBO, ``Trace_ELBO``; the default) or
        ``CategoricalKL()`` / ``"categorical"`` (:class:`~pyro_attention.inference.elbo.CategoricalKL_ELBO`).
    """

    latent: ClassVar[str] = "simplex"
    label: ClassVar[str] = "gumbel"
    paper_row: ClassVar[str] = "Gumbel (Deng et al. 2018, inference alternatives)"
    estimators: ClassVar[tuple[Estimator, ...]] = (Reparameterized(), CategoricalKL())

    def __init__(
        self,
        network: AttentionNetwork,
        temperature: float = 0.1,
        straight_through: bool = False,
        estimator: Estimator | str | None = None,
    ) -> None:
        super().__init__(network)
        if not temperature > 0:
            raise ValueError(f"GumbelAttention: temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)
        self.straight_through = straight_through
        self._choose_estimator(estimator)

    def __repr__(self) -> str:
        return (
            f"GumbelAttention(temperature={self.temperature}, straight_through={self.straight_through}, "
            f"estimator={str(self.estimator)!r})"
        )

    def _concrete(self, enc: Encoded, scores: Tensor) -> MaskedConcrete:
        mask = enc.source_mask.unsqueeze(-2).expand(scores.shape)
        return MaskedConcrete(self.temperature, scores, mask, self.straight_through)

    def prior(self, enc: Encoded) -> MaskedConcrete:
        """``p_tau(z_t | x)``, ``(B, T)`` batch over ``S``."""
        return self._concrete(enc, enc.prior_scores)

    def posterior(self, enc: Encoded) -> MaskedConcrete:
        """``q_tau(z_t | x, y)``; equal to the prior at padded targets."""
        return self._concrete(enc, self.inference_scores(enc))

    def guide_probs(self, enc: Encoded) -> Tensor:
        """The guide's class probabilities ``softmax(b_t)`` (the location of the Concrete; its mean as tau -> 0)."""
        return self.posterior(enc).probs

    def categorical(self) -> VariationalAttention:
        """The underlying categorical model and guide, sharing this pair's network (for exact evaluation)."""
        return VariationalAttention(self.network, estimator="enum")

    def posterior_probs(self, batch: Any) -> Tensor:
        """The exact posterior of the underlying categorical model, :meth:`categorical` (by enumeration)."""
        return self.categorical().posterior_probs(batch)
