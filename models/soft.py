r"""Soft (deterministic) attention: the output network sees the *expected* source representation.

.. math::

    \alpha_t = \mathrm{softmax}(a_t), \qquad c_t = \sum_s \alpha_{t,s} x_s = \mathbb{E}_{z_t \sim \alpha_t}[x_{z_t}],
    \qquad y_t \sim p(y_t \mid x, y_{<t}, c_t),

so the prediction is :math:`p(y \mid x, \mathbb{E}_p[z])`, not :math:`\mathbb{E}_p[p(y \mid x, z)]`.

* **What is random:** nothing; the alignment is a deterministic weight vector (there is no ``"align"`` site).
* **What the prior and the posterior see:** the attention weights see the source and the query / target
  prefix; there is no posterior.
* **What is combined at prediction:** representations -- one network run on the averaged context.
* **Training and prediction:** maximum likelihood of ``y`` (``Trace_ELBO`` with an empty guide is exactly
  ``-log p(y | x)``); prediction runs the network once.

Reproduces the "Soft Attention" row of Deng et al. (2018), Table 1 (IWSLT14: 7.17 PPL / 32.77 BLEU; VQA
1.76 NLL / 58.93 accuracy).

References: [1] Bahdanau, Cho, Bengio, "Neural Machine Translation by Jointly Learning to Align and
Translate", ICLR 2015. [2] Deng, Kim, Chiu, Guo, Rush, "Latent Alignment and Variational Attention",
NeurIPS 2018.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pyro_attention.distributions.aligned import OutputCategorical
from pyro_attention.inference.estimators import Estimator, MaximumLikelihood
from pyro_attention.networks.base import expected_context
from pyro_attention.pair import AlignmentPair


class SoftAttention(AlignmentPair):
    """Soft attention ``p(y | x, E_p[z])`` with an empty guide."""

    latent: ClassVar[str] = "none"
    label: ClassVar[str] = "soft"
    paper_row: ClassVar[str] = "Soft Attention"
    estimators: ClassVar[tuple[Estimator, ...]] = (MaximumLikelihood(),)

    def model(self, batch: Any) -> None:
        enc = self.encode(batch)
        logits = self.network.output_logits(enc, expected_context(self.attention_prior(enc), enc.values))
        with self.plates(enc):
            self.observe(enc, OutputCategorical(logits))
