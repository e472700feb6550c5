r"""Exact marginal likelihood: a categorical alignment summed out of the *prediction*.

.. math::

    z_t \sim \mathrm{Categorical}(\mathrm{softmax}(a_t)), \qquad
    y_t \sim p(y_t \mid x, y_{<t}, x_{z_t}), \qquad
    \log p(y \mid x) = \sum_t \log \sum_{s} p(z_t = s \mid x, y_{<t})\, p(y_t \mid x, y_{<t}, z_t = s).

* **What is random:** the alignment ``z_t``, one source position per target position (site ``"align"``).
* **What the prior and the posterior see:** the prior sees the source and the query / target prefix; the
  exact posterior ``p(z_t | x, y)`` (Bayes' rule, available after the fact) also sees ``y_t``.
* **What is combined at prediction:** output likelihoods -- :math:`\mathbb{E}_p[p(y \mid x, z)]`.
* **Training and prediction:** exact enumeration.  ``TraceEnum_ELBO`` with an empty guide enumerates
  ``"align"`` in parallel, so ``-loss`` is the exact ``log p(y | x)``; the observed-token likelihood for all
  ``S`` alignments comes from one table (:class:`~pyro_attention.distributions.AlignedCategorical`).

Reproduces the "Marginal Likelihood" row of Deng et al. (2018), Table 1 (IWSLT14: 6.34 PPL / 33.29 BLEU; VQA
1.69 NLL / 60.33 accuracy).

References: [1] Deng, Kim, Chiu, Guo, Rush, "Latent Alignment and Variational Attention", NeurIPS 2018.
[2] Pyro, ``TraceEnum_ELBO`` (Obermeyer et al., "Tensor Variable Elimination for Plated Factor Graphs",
ICML 2019).
"""

from __future__ import annotations

from typing import ClassVar

from pyro_attention.inference.estimators import Enumerate, Estimator
from pyro_attention.models._categorical import CategoricalAlignmentModel


class MarginalLikelihood(CategoricalAlignmentModel):
    """Exact marginal likelihood by enumeration; the guide is empty."""

    label: ClassVar[str] = "marginal"
    paper_row: ClassVar[str] = "Marginal Likelihood"
    #: ``"align"`` is enumerated in the model (the guide is empty): ``TraceEnum_ELBO`` is the exact NLL
    estimators: ClassVar[tuple[Estimator, ...]] = (Enumerate(),)
