r"""Categorical variational attention: an amortised posterior over the alignment that sees the target.

The generative model is the one of :class:`~pyro_attention.models.MarginalLikelihood`; the guide is an
inference network :math:`q(z_t \mid x, y)` and the objective is the ELBO

.. math::

    \mathcal{L} = \sum_t \mathbb{E}_{q(z_t \mid x, y)}[\log p(y_t \mid x, y_{<t}, z_t)]
                  - \mathrm{KL}(q(z_t \mid x, y) \,\|\, p(z_t \mid x, y_{<t})) \le \log p(y \mid x),

with equality exactly when ``q`` is the true posterior (``log p - ELBO = KL(q || p(z | x, y))``).

* **What is random:** the alignment ``z_t`` (site ``"align"``).
* **What the prior and the posterior see:** the prior sees the source and the query / target prefix; ``q``
  (a separate inference network, :meth:`~pyro_attention.networks.AttentionNetwork.posterior_scores`) also sees
  the observed target.
* **What is combined at prediction:** output likelihoods under the *prior*,
  :math:`\mathbb{E}_p[p(y \mid x, z)]` -- ``q`` needs ``y`` and is used only to train and to inspect.
* **Training and prediction:** the estimator is a constructor argument that never changes the model:

  - ``Enumerate()`` / ``"enum"``: ``TraceEnum_ELBO`` enumerates the guide site, so both the expectation and the
    KL are exact (the enumerated sum :math:`\sum_z q(z)[\log p(z) - \log q(z)]` *is* the analytic KL);
  - ``ScoreFunction()`` / ``"sample"``: as in the paper, one draw from ``q`` per token, the KL analytic, and
    REINFORCE for the expected log-likelihood with the soft-attention log-likelihood as ``baseline_value``
    (:class:`~pyro_attention.inference.ReinforceKL_ELBO`).

Reproduces the "Variational Attention" rows of Deng et al. (2018), Table 1 (IWSLT14 enum 6.08 PPL / 33.68
BLEU, sample 6.17 / 33.30; VQA enum 1.69 NLL / 58.44 accuracy, sample 1.75 / 57.52).

References: [1] Deng, Kim, Chiu, Guo, Rush, "Latent Alignment and Variational Attention", NeurIPS 2018.
[2] Mnih and Gregor, "Neural Variational Inference and Learning in Belief Networks", ICML 2014.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from pyro_attention.models._categorical import GuidedCategoricalAlignment
from pyro_attention.networks.base import Encoded


class VariationalAttention(GuidedCategoricalAlignment):
    """Variational attention with an amortised categorical ``q(z | x, y)``."""

    label: ClassVar[str] = "variational"
    paper_row: ClassVar[str] = "Variational Attention"

    def guide_logits(self, enc: Encoded) -> Tensor:
        """The guide is the inference network's ``q(z | x, y)`` (equal to the prior at padded targets)."""
        return self.posterior_logits(enc)

    def guide_parameters(self) -> list[Tensor]:
        """The inference network's own parameters (:meth:`~pyro_attention.networks.AttentionNetwork.
        inference_parameters`)."""
        return self.network.inference_parameters()
