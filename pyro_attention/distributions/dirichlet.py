"""``MaskedDirichlet``: a Dirichlet over the *real* positions of a padded simplex.

A batch of sources has different lengths; a Dirichlet needs every concentration > 0, and a tiny constant at
padded positions would add large, meaningless log-density terms.  ``MaskedDirichlet(alpha, mask)`` is, for
each batch element, the Dirichlet over the positions where ``mask`` is ``True``; padded coordinates are
exactly zero in every sample and absent from ``log_prob``, ``entropy``, ``mean`` and the KL divergence
(registered with :func:`torch.distributions.kl.register_kl`, so ``TraceMeanField_ELBO`` uses it analytically).

Samples are reparameterised through ``Gamma(alpha, 1)`` draws normalised over the real positions.
"""

from __future__ import annotations

import torch
from pyro.distributions import Gamma, TorchDistribution
from torch import Tensor
from torch.distributions import constraints
from torch.distributions.kl import register_kl


class MaskedDirichlet(TorchDistribution):
    """Dirichlet with concentration ``alpha`` ``(..., S)`` restricted to ``mask`` ``(..., S)``."""

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration: Tensor, mask: Tensor, validate_args: bool | None = None) -> None:
        mask = mask.expand(concentration.shape)
        if not mask.any(-1).all():
            raise ValueError("MaskedDirichlet: some batch element has no unmasked position (mask all False)")
        # padded entries get concentration 1: they never enter a density and are zeroed in samples
        self.concentration = torch.where(mask, concentration, torch.ones_like(concentration))
        self.mask = mask
        super().__init__(concentration.shape[:-1], concentration.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None) -> MaskedDirichlet:  # noqa: ANN001 - Pyro's signature
        shape = torch.Size(batch_shape) + self.event_shape
        return MaskedDirichlet(self.concentration.expand(shape), self.mask.expand(shape), validate_args=False)

    @property
    def _alpha0(self) -> Tensor:
        return (self.concentration * self.mask).sum(-1)

    @property
    def mean(self) -> Tensor:
        alpha = self.concentration * self.mask
        return alpha / alpha.sum(-1, keepdim=True)

    def rsample(self, sample_shape: torch.Size = torch.Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        gamma = Gamma(
            self.concentration.expand(shape),
            torch.ones(shape, dtype=self.concentration.dtype, device=self.concentration.device),
        ).rsample()
        gamma = gamma * self.mask
        tiny = torch.finfo(gamma.dtype).tiny
        return gamma / gamma.sum(-1, keepdim=True).clamp(min=tiny)

    def log_prob(self, value: Tensor) -> Tensor:
        tiny = torch.finfo(value.dtype).tiny
        log_value = torch.where(self.mask, value.clamp(min=tiny).log(), torch.zeros_like(value))
        alpha = self.concentration
        norm = torch.lgamma(self._alpha0) - (torch.lgamma(alpha) * self.mask).sum(-1)
        return norm + ((alpha - 1.0) * log_value * self.mask).sum(-1)

    def entropy(self) -> Tensor:
        alpha, a0 = self.concentration, self._alpha0
        k = self.mask.sum(-1).to(alpha.dtype)
        log_beta = (torch.lgamma(alpha) * self.mask).sum(-1) - torch.lgamma(a0)
        return log_beta + (a0 - k) * torch.digamma(a0) - ((alpha - 1.0) * torch.digamma(alpha) * self.mask).sum(-1)


@register_kl(MaskedDirichlet, MaskedDirichlet)
def _kl_masked_dirichlet(p: MaskedDirichlet, q: MaskedDirichlet) -> Tensor:
    """KL(p || q) over the real positions (p and q must share the mask)."""
    m = p.mask
    a, b = p.concentration, q.concentration
    a0, b0 = p._alpha0, (b * m).sum(-1)
    return (
        torch.lgamma(a0)
        - torch.lgamma(b0)
        - ((torch.lgamma(a) - torch.lgamma(b)) * m).sum(-1)
        + ((a - b) * (torch.digamma(a) - torch.digamma(a0).unsqueeze(-1)) * m).sum(-1)
    )
