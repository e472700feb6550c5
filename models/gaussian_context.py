r"""Variational attention for sequence-to-sequence models: the context vector itself is random.

Bahuleyan, Mou, Vechtomova, Poupart (COLING 2018) replace the deterministic context of soft attention by a
Gaussian latent variable, so that a variational encoder-decoder cannot bypass its sentence-level latent through
attention.  For every target position :math:`t`,

.. math::

    c_t \sim p(c_t \mid x) = \mathcal{N}(m(x), I), \qquad y_t \sim p(y_t \mid x, y_{<t}, c_t),

with :math:`m(x) = 0` (``prior="standard"``, the paper's choice) or :math:`m(x) = \frac{1}{|S|}\sum_{s} x_s`,
the mean of the encoder values over the real source positions (``prior="mean"``).  The guide is

.. math::

    q(c_t \mid x, y) = \mathcal{N}\big(\mu_t,\ \mathrm{diag}\,\sigma_t^2\big), \qquad
    \mu_t = \sum_s a_{t,s}\, x_s, \qquad \sigma_t = \mathrm{softplus}(W_2 \tanh(W_1 \mu_t)) + \sigma_{\min},

where :math:`a_t` are the deterministic soft-attention weights: those of the prior scores, ``softmax(a_t)``
(``guide_mean="prior"``: the paper's :math:`\mu = a^{\mathrm{det}}`, computed from the source and the decoder
state, i.e. the target prefix), or those of the inference network, ``softmax(b_t)``, which also sees
:math:`y_t` (``guide_mean="posterior"``).  The :math:`\sigma` head is a small ``nn.Module`` owned by the pair
(registered as ``pyro.module("context_scale", ...)``), so task networks stay unaware of it.  The objective is

.. math::

    \mathcal{L} = \sum_t \mathbb{E}_q[\log p(y_t \mid x, y_{<t}, c_t)]
                  - w(\text{step})\ \mathrm{KL}(q(c_t \mid x, y) \,\|\, p(c_t \mid x)),

with the Gaussian KL analytic (``TraceMeanField_ELBO``) and an optional KL annealing weight :math:`w`.

* **What is random:** the context vector :math:`c_t \in \mathbb{R}^D` (site ``"align"``, event dim 1) -- not
  an alignment: the attention weights stay deterministic and only parameterise the guide's mean.
* **What the prior and the posterior see:** the prior sees nothing (``"standard"``) or the source values
  (``"mean"``); the guide sees the source and the decoder state through the attention weights, and with
  ``guide_mean="posterior"`` also the observed target.
* **What is combined at prediction:** representations.  The paper predicts with the mean context,
  :math:`p(y_t \mid x, c_t = \sum_s a_{t,s} x_s)`; that is ``predict(pair, batch, rule="soft")`` with the
  prior's attention weights (:meth:`~pyro_attention.pair.AlignmentPair.attention_prior`), which is exactly the
  guide's mean when ``guide_mean="prior"``.  The generative model's own predictive
  :math:`\mathbb{E}_{p(c \mid x)}[p(y \mid x, c)]` does not use attention at all under ``prior="standard"``;
  :func:`pyro_attention.inference.log_likelihood` estimates it by importance sampling with ``q`` as proposal
  (an estimate, labelled as such; with ``q`` far from the prior it is loose -- prior sampling can be tighter).
  ``predict(..., rule="marginal")`` and ``alignment_posterior`` do not apply (the latent is not a weight
  vector).  With ``guide_mean="posterior"`` nothing in the objective uses the prior's attention scores, so the
  mean-context rule runs on untrained weights: that setting is for studying the model's likelihood, not for
  prediction.
* **Training and prediction:** reparameterised Gaussian samples and ``TraceMeanField_ELBO`` (analytic KL): the
  estimator ``MeanField(kl_schedule)`` of :mod:`pyro_attention.inference.estimators`.  KL annealing (Bowman et
  al. 2016; used by Bahuleyan et al.) is its :class:`~pyro_attention.inference.estimators.KLSchedule`, built
  from the pair's ``anneal_steps``, ``schedule`` and ``kl_scale`` (:class:`KLAnnealing` puts its members on the
  pair): ``pyro.poutine.scale`` on the latent site, in the model and the guide, with weight
  :meth:`KLSchedule.kl_weight` of a step counter that the ELBO advances after each gradient step.  At weight 1
  (the default: ``anneal_steps=0``) the objective is the plain ELBO, and every trace taken outside a training
  step sees the unscaled model.
  On region QA the full-weight KL (:math:`\tfrac12\|\mu_t - m(x)\|^2` alone is several nats per token, more
  than the answer's entropy) makes ``q`` collapse onto the prior and the output ignore :math:`c_t`;
  ``kl_scale=0.01`` (a KL-weighted objective) lets the mean-context rule match soft attention
  (``docs/neighbours.md``).

Padded targets contribute nothing: ``"y"`` is masked there and the guide equals the prior there.  Padded
sources get zero attention weight and are left out of the ``"mean"`` prior.

Not a row of Deng et al. (2018); Bahuleyan et al. (2018) report it for question generation and dialogue
(with a sentence-level latent as well, which this pair leaves to the task network).

References: [1] Bahuleyan, Mou, Vechtomova, Poupart, "Variational Attention for Sequence-to-Sequence Models",
COLING 2018.  [2] Bowman, Vilnis, Vinyals, Dai, Jozefowicz, Bengio, "Generating Sentences from a Continuous
Space", CoNLL 2016 (KL annealing).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor, nn

from pyro_attention.distributions.aligned import OutputCategorical
from pyro_attention.inference.estimators import (
    Estimator,
    KLAnnealing,
    MeanField,
)
from pyro_attention.models._continuous import GUIDE_SCORES, ContinuousAlignment, GuideScores
from pyro_attention.networks.base import AttentionNetwork, Encoded, expected_context
from pyro_attention.pair import Rule


class ContextPriorMean:
    """The prior's mean ``m(x)`` (``prior=``): :class:`StandardPrior` or :class:`SourceMeanPrior`."""

    #: the name the pair accepts (``prior=``)
    name: ClassVar[str] = ""

    def loc(self, enc: Encoded) -> Tensor:  # pragma: no cover - interface
        """``m(x)`` for every target position, ``(B, T, D)``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class StandardPrior(ContextPriorMean):
    """``m(x) = 0`` (the paper's): the prior sees nothing."""

    name = "standard"

    def loc(self, enc: Encoded) -> Tensor:
        B, T, _ = enc.shape
        return enc.values.new_zeros(B, T, enc.values.shape[-1])


class SourceMeanPrior(ContextPriorMean):
    """``m(x) = mean_s x_s`` over the real source positions: the prior sees the source values."""

    name = "mean"

    def loc(self, enc: Encoded) -> Tensor:
        B, T, _ = enc.shape
        real = enc.source_mask.unsqueeze(-1).to(enc.values.dtype)
        mean = (enc.values * real).sum(1) / real.sum(1).clamp(min=1.0)  # (B, D)
        return mean.unsqueeze(1).expand(B, T, -1)


PRIORS: dict[str, ContextPriorMean] = {"standard": StandardPrior(), "mean": SourceMeanPrior()}
#: ``guide_mean=``: whose attention weights centre the guide (:data:`~pyro_attention.models._continuous.GUIDE_SCORES`)
GUIDE_MEANS = GUIDE_SCORES


class ContextScale(nn.Module):
    """The guide's standard deviation head: ``softplus(W_2 tanh(W_1 mu)) + min_scale``, ``(..., D) -> (..., D)``."""

    def __init__(self, size: int, min_scale: float = 1e-3) -> None:
        super().__init__()
        self.hidden = nn.Linear(size, size)
        self.out = nn.Linear(size, size)
        self.min_scale = min_scale

    def forward(self, mu: Tensor) -> Tensor:
        return nn.functional.softplus(self.out(torch.tanh(self.hidden(mu)))) + self.min_scale


class GaussianContextAttention(KLAnnealing, ContinuousAlignment):
    """Gaussian context vector ``c_t`` with an amortised diagonal-Gaussian guide centred on the soft context.

    :param network: the task network.
    :param prior: ``"standard"`` -- ``N(0, I)``; ``"mean"`` -- ``N(mean of the real source values, I)``.
    :param guide_mean: ``"prior"`` -- ``mu_t`` is the soft context of the prior's attention weights (the
        paper); ``"posterior"`` -- of the inference network's weights (which see ``y_t``).
    :param context_size: ``D``; ``None`` builds the scale head at the first call from the values' size.
    :param min_scale: lower bound of the guide's standard deviations.
    :param anneal_steps: steps of KL annealing (0: none, weight 1 throughout).
    :param schedule: ``"linear"`` or ``"tanh"``.
    :param kl_scale: the final KL weight (1: the ELBO; see :class:`~pyro_attention.inference.estimators.KLSchedule`).
    """

    latent: ClassVar[str] = "context"
    continuous: ClassVar[str | None] = "context"
    rules: ClassVar[tuple[Rule, ...]] = (Rule.SOFT, Rule.MARGINAL)  # the mean weights' rule first
    likelihood_proposal: ClassVar[str] = "prior"
    label: ClassVar[str] = "gaussian_context"
    paper_row: ClassVar[str] = "Variational Attention for Seq2Seq (Bahuleyan et al. 2018; not in Deng et al.)"
    #: reparameterised Gaussian draws, analytic KL; the pair's own ``MeanField(KLSchedule(...))`` (from
    #: ``anneal_steps``, ``schedule``, ``kl_scale``) replaces this default at construction
    estimators: ClassVar[tuple[Estimator, ...]] = (MeanField(),)

    def __init__(
        self,
        network: AttentionNetwork,
        prior: str = "standard",
        guide_mean: str = "prior",
        context_size: int | None = None,
        min_scale: float = 1e-3,
        anneal_steps: int = 0,
        schedule: str = "linear",
        kl_scale: float = 1.0,
    ) -> None:
        super().__init__(network)
        for option, value, allowed in (("prior", prior, PRIORS), ("guide_mean", guide_mean, GUIDE_MEANS)):
            if value not in allowed:
                raise ValueError(f"GaussianContextAttention: {option} must be one of {tuple(allowed)}, got {value!r}")
        if min_scale <= 0:
            raise ValueError(f"GaussianContextAttention: min_scale must be > 0, got {min_scale}")
        self.prior_mean: ContextPriorMean = PRIORS[prior]
        self.guide_mean: GuideScores = GUIDE_MEANS[guide_mean]
        self.min_scale = min_scale
        self.scale_head: ContextScale | None = None
        if context_size is not None:
            self.scale_head = ContextScale(context_size, min_scale)
        self._init_annealing(anneal_steps, schedule, kl_scale)

    def __repr__(self) -> str:
        return f"GaussianContextAttention(prior={self.prior_mean.name!r}, guide_mean={self.guide_mean.name!r})"

    def owned_modules(self) -> dict[str, nn.Module]:
        return {} if self.scale_head is None else {"context_scale": self.scale_head}

    # -- distributions ----------------------------------------------------------------------------------------
    def context_prior(self, enc: Encoded) -> dist.Distribution:
        """``p(c_t | x)``: a ``(B, T)`` batch of ``D``-dimensional unit-variance Gaussians around :attr:`prior_mean`."""
        loc = self.prior_mean.loc(enc)
        return dist.Normal(loc, torch.ones_like(loc)).to_event(1)

    def prior(self, enc: Encoded) -> dist.Distribution:
        """:meth:`context_prior`: the law of the value the output network sees."""
        return self.context_prior(enc)

    def sample_context(self, enc: Encoded, z: Tensor) -> Tensor:
        """The alignment *is* the context."""
        return z

    def context_mean(self, enc: Encoded) -> Tensor:
        """The guide's mean ``mu_t = sum_s a_{t,s} x_s``, ``(B, T, D)``, with ``a_t`` the softmax of
        :attr:`guide_mean`'s scores."""
        return expected_context(torch.softmax(self.guide_mean.logits(self, enc), dim=-1), enc.values)

    def _scale_head(self, enc: Encoded) -> ContextScale:
        if self.scale_head is None:
            self.scale_head = ContextScale(enc.values.shape[-1], self.min_scale).to(enc.values)
        return pyro.module("context_scale", self.scale_head)

    def context_guide(self, enc: Encoded) -> dist.Distribution:
        """``q(c_t | x, y)``; equal to the prior at padded targets."""
        mu = self.context_mean(enc)
        sigma = self._scale_head(enc)(mu)
        prior = self.context_prior(enc)
        real = enc.target_mask.unsqueeze(-1)
        loc = torch.where(real, mu, prior.base_dist.loc)
        scale = torch.where(real, sigma, prior.base_dist.scale)
        return dist.Normal(loc, scale).to_event(1)

    # -- the pair -----------------------------------------------------------------------------------------------
    def model(self, batch: Any) -> None:
        enc = self.encode(batch)
        with self.plates(enc):
            with self.latent_scale():
                c = pyro.sample("align", self.context_prior(enc))
            self.observe(enc, OutputCategorical(self.network.output_logits(enc, c)))

    def guide(self, batch: Any) -> None:
        enc = self.encode_for_model(batch)
        with self.plates(enc), self.latent_scale():
            pyro.sample("align", self.context_guide(enc))
