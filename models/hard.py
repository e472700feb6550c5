r"""Hard attention: train the prediction at alignments drawn from the prior.

The generative model is the one of :class:`~pyro_attention.models.MarginalLikelihood`,

.. math::

    z_t \sim \mathrm{Categorical}(\mathrm{softmax}(a_t)), \qquad y_t \sim p(y_t \mid x, y_{<t}, x_{z_t}),

but the objective is the lower bound obtained with the prior as the guide (so the KL term vanishes):

.. math::

    \mathcal{L} = \sum_t \mathbb{E}_{z_t \sim p(z_t \mid x)}[\log p(y_t \mid x, y_{<t}, z_t)] \le \log p(y \mid x).

* **What is random:** the alignment ``z_t`` (site ``"align"``).
* **What the prior and the posterior see:** only the prior, which sees the source and query / target prefix;
  the guide *is* the prior (it never sees ``y_t``).
* **What is combined at prediction:** output likelihoods, :math:`\mathbb{E}_p[p(y \mid x, z)]` (or the
  prior's argmax alignment).
* **Training and prediction:** the estimator is a constructor argument that never changes the model:

  - ``Enumerate()`` / ``"enum"``: the expectation is exact -- the guide site is enumerated by ``TraceEnum_ELBO``;
  - ``ScoreFunction()`` / ``"sample"``: one draw per token and REINFORCE through
    :class:`~pyro_attention.inference.ReinforceKL_ELBO` (Rao-Blackwellised over the ``"batch"`` and
    ``"target"`` plates; the KL of the prior with itself is 0), with the paper's baseline: the soft-attention
    log-likelihood ``log p(y_t | x, E_p[z_t])`` of the same network, per token, as ``baseline_value``.

Reproduces the "Hard Attention" rows of Deng et al. (2018), Table 1 (IWSLT14 enum 7.37 PPL / 31.40 BLEU,
sample 7.38 / 31.00; VQA enum 1.78 NLL / 57.60 accuracy).

References: [1] Xu et al., "Show, Attend and Tell", ICML 2015. [2] Deng, Kim, Chiu, Guo, Rush, "Latent
Alignment and Variational Attention", NeurIPS 2018. [3] Williams, "Simple statistical gradient-following
algorithms for connectionist reinforcement learning", 1992.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from pyro_attention.models._categorical import GuidedCategoricalAlignment
from pyro_attention.networks.base import Encoded


class HardAttention(GuidedCategoricalAlignment):
    """Hard attention: guide = prior; estimator ``Enumerate()`` / ``"enum"`` (exact expectation) or
    ``ScoreFunction()`` / ``"sample"`` (REINFORCE), from :mod:`pyro_attention.inference.estimators`."""

    label: ClassVar[str] = "hard"
    paper_row: ClassVar[str] = "Hard Attention"

    def guide_logits(self, enc: Encoded) -> Tensor:
        """The guide is the prior (it never sees ``y``)."""
        return self.prior_logits(enc)
