r"""Relaxed (Dirichlet) attention: the alignment is a random point on the simplex.

.. math::

    z_t \sim \mathrm{Dirichlet}(\exp(a_t)), \qquad c_t = \sum_s z_{t,s}\, x_s, \qquad
    y_t \sim p(y_t \mid x, y_{<t}, c_t),

trained with the ELBO against an amortised Dirichlet :math:`q(z_t \mid x, y) = \mathrm{Dirichlet}(\exp(b_t))`:

.. math::

    \mathcal{L} = \sum_t \mathbb{E}_{q}[\log p(y_t \mid x, y_{<t}, z_t)]
                  - \mathrm{KL}(q(z_t \mid x, y) \,\|\, p(z_t \mid x, y_{<t})).

Concentrations are ``exp`` of scores clamped to ``[-10, 10]`` (``exp(10) = 22026``), defined only on real
source positions (:class:`~pyro_attention.distributions.MaskedDirichlet`: padded coordinates are exactly 0).

* **What is random:** the attention weight vector ``z_t`` on the simplex (site ``"align"``).
* **What the prior and the posterior see:** the prior sees the source and the query / target prefix; ``q``
  (the network's inference scores) also sees the observed target.
* **What is combined at prediction:** representations at random weights -- the output network sees
  ``sum_s z_s x_s``; the predictive is :math:`\mathbb{E}_{p(z \mid x)}[p(y \mid x, z)]`, estimated by sampling
  (there is no exact sum; :func:`pyro_attention.inference.log_likelihood` reports an importance-weighted
  estimate with ``q`` as proposal).
* **Training and prediction:** reparameterised samples (Gamma draws normalised, ``has_rsample``) and
  ``TraceMeanField_ELBO``, which uses the analytic KL registered for ``MaskedDirichlet``.  The paper needed a
  warm start on :math:`\mathbb{E}_p[\log p(y \mid x, z)]`: :meth:`RelaxedAttention.warmup_guide` is the prior
  used as the guide (KL = 0), and :func:`pyro_attention.inference.fit` runs it for ``warmup_steps`` steps.

Reproduces the "Relaxed Attention" row of Deng et al. (2018), Table 1 (IWSLT14 7.58 PPL / 30.05 BLEU).

References: [1] Deng, Kim, Chiu, Guo, Rush, "Latent Alignment and Variational Attention", NeurIPS 2018.
[2] Figurnov, Mohamed, Mnih, "Implicit Reparameterization Gradients", NeurIPS 2018 (Gamma rsample).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyro
from torch import Tensor

from pyro_attention.distributions import MaskedDirichlet
from pyro_attention.distributions.aligned import OutputCategorical
from pyro_attention.inference.estimators import Estimator, MeanField
from pyro_attention.models._continuous import ContinuousAlignment
from pyro_attention.networks.base import Encoded, expected_context

#: scores are clamped to this range before ``exp`` so concentrations stay finite and positive
SCORE_CLAMP = 10.0


def concentration(scores: Tensor) -> Tensor:
    """``exp(clamp(scores, -10, 10))``."""
    return scores.clamp(-SCORE_CLAMP, SCORE_CLAMP).exp()


class SimplexAlignmentModel(ContinuousAlignment):
    """``z_t ~ prior(enc)`` on the simplex, ``y_t ~ p(y_t | x, sum_s z_{t,s} x_s)``; guide ``z_t ~ posterior(enc)``.

    Shared by the pairs whose alignment is a random weight vector (Dirichlet here, Concrete in
    :mod:`pyro_attention.models.gumbel`); subclasses supply ``prior(enc)`` and ``posterior(enc)``.
    """

    latent: ClassVar[str] = "simplex"

    def prior(self, enc: Encoded) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def posterior(self, enc: Encoded) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def guide_probs(self, enc: Encoded) -> Tensor:
        """The guide's mean weights ``E_q[z_t]``."""
        return self.posterior(enc).mean

    def model(self, batch: Any) -> None:
        enc = self.encode(batch)
        with self.plates(enc):
            z = pyro.sample("align", self.prior(enc))
            logits = self.network.output_logits(enc, expected_context(z, enc.values))
            self.observe(enc, OutputCategorical(logits))

    def guide(self, batch: Any) -> None:
        enc = self.encode_for_model(batch)
        with self.plates(enc):
            pyro.sample("align", self.posterior(enc))


class RelaxedAttention(SimplexAlignmentModel):
    """Dirichlet relaxed attention with an amortised Dirichlet guide."""

    latent: ClassVar[str] = "simplex"
    has_warmup: ClassVar[bool] = True
    label: ClassVar[str] = "relaxed"
    paper_row: ClassVar[str] = "Relaxed Attention"
    #: reparameterised Dirichlet draws and the registered analytic KL: ``TraceMeanField_ELBO``
    estimators: ClassVar[tuple[Estimator, ...]] = (MeanField(),)

    def _dirichlet(self, enc: Encoded, scores: Tensor) -> MaskedDirichlet:
        return MaskedDirichlet(concentration(scores), enc.source_mask.unsqueeze(-2).expand(scores.shape))

    def prior(self, enc: Encoded) -> MaskedDirichlet:
        """``p(z_t | x)`` as a ``(B, T)`` batch of Dirichlets over ``S``."""
        return self._dirichlet(enc, enc.prior_scores)

    def posterior(self, enc: Encoded) -> MaskedDirichlet:
        """``q(z_t | x, y)``; equal to the prior at padded targets."""
        return self._dirichlet(enc, self.inference_scores(enc))

    def attention_prior(self, enc: Encoded) -> Tensor:
        """The prior's mean weights ``E_p[z_t]``, ``(B, T, S)``."""
        return self.prior(enc).mean

    def warmup_guide(self, batch: Any) -> None:
        """The prior as the guide: the ELBO becomes ``E_p[log p(y | x, z)]`` (the paper's warm start)."""
        enc = self.encode_for_model(batch)
        with self.plates(enc):
            pyro.sample("align", self.prior(enc))
