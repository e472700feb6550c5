r"""``KL(Weibull || Gamma)``, ``KL(LogNormal || Gamma)`` in closed form, and :class:`MaskedVector`.

Bayesian Attention Modules (Fan et al. 2020) put a Weibull (or lognormal) posterior and a Gamma prior on each
unnormalised attention weight.  Neither torch nor Pyro registers a KL divergence for these pairs; both are
registered here with :func:`torch.distributions.kl.register_kl` (for torch's classes, so Pyro's subclasses use
them too), so :class:`~pyro.infer.TraceMeanField_ELBO` computes the KL analytically.

For :math:`q = \mathrm{Weibull}(k, \lambda)` (shape :math:`k`, scale :math:`\lambda`) and
:math:`p = \mathrm{Gamma}(\alpha, \beta)` (rate :math:`\beta`), with Euler's constant :math:`\gamma`
(BAM, Eq. 9 and appendix; re-derived from :math:`\mathbb{E}_q[\log w] = \log\lambda - \gamma/k`,
:math:`\mathbb{E}_q[w] = \lambda\,\Gamma(1 + 1/k)`, :math:`\mathbb{E}_q[(w/\lambda)^k] = 1`):

.. math::

    \mathrm{KL}(q \,\|\, p) = \frac{\gamma\alpha}{k} - \alpha\log\lambda + \log k
        + \beta\lambda\,\Gamma(1 + 1/k) - \gamma - 1 - \alpha\log\beta + \log\Gamma(\alpha).

For :math:`q = \mathrm{LogNormal}(\mu, \sigma)` (:math:`\mathbb{E}_q[\log w] = \mu`,
:math:`\mathbb{E}_q[w] = e^{\mu + \sigma^2/2}`, :math:`H(q) = \mu + \tfrac12 + \log(\sigma\sqrt{2\pi})`):

.. math::

    \mathrm{KL}(q \,\|\, p) = -\alpha\mu - \log\sigma - \tfrac12(1 + \log 2\pi)
        + \beta e^{\mu + \sigma^2/2} - \alpha\log\beta + \log\Gamma(\alpha).

Both are checked against Monte Carlo estimates in ``tests/models/test_neighbours.py``.

:class:`MaskedVector` turns a batch of independent positive scalars ``(..., S)`` into one vector-valued
distribution with event shape ``(S,)`` restricted to a mask: coordinates where the mask is ``False`` are
exactly 0 in every sample and absent from ``log_prob``, ``mean`` and the KL divergence (the
:class:`~pyro_attention.distributions.MaskedDirichlet` pattern).  A mask that is all ``False`` for some batch
element makes it a point mass at 0 (log-density 0), which is how padded target positions carry no alignment.
"""

from __future__ import annotations

import math

import torch
from pyro.distributions import TorchDistribution
from torch import Tensor
from torch.distributions import Gamma, LogNormal, Weibull, constraints, kl_divergence
from torch.distributions.kl import register_kl

#: Euler-Mascheroni constant
EULER_GAMMA = 0.5772156649015329


@register_kl(Weibull, Gamma)
def kl_weibull_gamma(p: Weibull, q: Gamma) -> Tensor:
    """``KL(Weibull(k, lambda) || Gamma(alpha, beta))`` in closed form (BAM, Eq. 9)."""
    k, lam = p.concentration, p.scale
    a, b = q.concentration, q.rate
    return (
        EULER_GAMMA * a / k
        - a * lam.log()
        + k.log()
        + b * lam * torch.lgamma(1.0 + 1.0 / k).exp()
        - EULER_GAMMA
        - 1.0
        - a * b.log()
        + torch.lgamma(a)
    )


@register_kl(LogNormal, Gamma)
def kl_lognormal_gamma(p: LogNormal, q: Gamma) -> Tensor:
    """``KL(LogNormal(mu, sigma) || Gamma(alpha, beta))`` in closed form."""
    mu, sigma = p.loc, p.scale
    a, b = q.concentration, q.rate
    return (
        -a * mu
        - sigma.log()
        - 0.5 * (1.0 + math.log(2.0 * math.pi))
        + b * (mu + 0.5 * sigma**2).exp()
        - a * b.log()
        + torch.lgamma(a)
    )


class MaskedVector(TorchDistribution):
    """Independent coordinates of ``base`` (batch shape ``(..., S)``) as one event ``(S,)``, restricted to ``mask``.

    :param base: a distribution over positive scalars with batch shape ``(..., S)``; its parameters must be valid
        (finite, in their domain) at masked coordinates too -- they never reach a value, a density or a KL.
    :param mask: ``(..., S)`` bool, ``True`` at the coordinates that exist.
    """

    arg_constraints: dict = {}
    support = constraints.independent(constraints.nonnegative, 1)

    def __init__(self, base: TorchDistribution, mask: Tensor, validate_args: bool | None = None) -> None:
        if base.event_shape != torch.Size():
            raise ValueError(f"MaskedVector: base must have scalar events, got event shape {tuple(base.event_shape)}")
        if len(base.batch_shape) < 1:
            raise ValueError("MaskedVector: base needs a batch dimension to become the event (S,)")
        self.base = base
        self.mask = mask.expand(base.batch_shape)
        super().__init__(base.batch_shape[:-1], base.batch_shape[-1:], validate_args=validate_args)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base.has_rsample

    def expand(self, batch_shape, _instance=None) -> MaskedVector:  # noqa: ANN001 - Pyro's signature
        shape = torch.Size(batch_shape) + self.event_shape
        return MaskedVector(self.base.expand(shape), self.mask.expand(shape), validate_args=False)

    @property
    def mean(self) -> Tensor:
        return torch.where(self.mask, self.base.mean, torch.zeros_like(self.base.mean))

    def rsample(self, sample_shape: torch.Size = torch.Size()) -> Tensor:
        x = self.base.rsample(sample_shape)
        return torch.where(self.mask, x, torch.zeros_like(x))

    def sample(self, sample_shape: torch.Size = torch.Size()) -> Tensor:
        with torch.no_grad():
            x = self.base.sample(sample_shape)
            return torch.where(self.mask, x, torch.zeros_like(x))

    def log_prob(self, value: Tensor) -> Tensor:
        # masked coordinates are replaced by 1 (inside every positive support) and dropped after
        safe = torch.where(self.mask, value, torch.ones_like(value))
        lp = self.base.log_prob(safe)
        return torch.where(self.mask, lp, torch.zeros_like(lp)).sum(-1)


@register_kl(MaskedVector, MaskedVector)
def kl_masked_vector(p: MaskedVector, q: MaskedVector) -> Tensor:
    """Sum of the coordinate-wise KL over the unmasked coordinates (``p`` and ``q`` must share the mask)."""
    kl = kl_divergence(p.base, q.base)
    return torch.where(p.mask, kl, torch.zeros_like(kl)).sum(-1)
