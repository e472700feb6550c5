r"""Bayesian Attention Modules: random unnormalised attention weights, normalised over the source.

Fan, Zhang, Chen, Zhou (NeurIPS 2020).  For every target position :math:`t` and real source position :math:`s`,

.. math::

    w_{t,s} \sim \mathrm{Gamma}(\alpha_{t,s}, \beta), \qquad
    z_{t,s} = \frac{w_{t,s}}{\sum_{s' \text{ real}} w_{t,s'}}, \qquad c_t = \sum_s z_{t,s}\, x_s, \qquad
    y_t \sim p(y_t \mid x, y_{<t}, c_t),

with the prior's shape :math:`\alpha` a constant (``prior="constant"``, ``alpha``), one learned positive scalar
(``prior="learned"``, a :class:`PositiveScalar` registered as ``pyro.module("bam_prior", ...)``) or contextual
(``prior="contextual"``:
:math:`\alpha_{t,s} = \beta\,\mathrm{softmax}_s(a_{t,s})`, so that :math:`\mathbb{E}_p[w_t]` follows an attention
distribution).  BAM's contextual prior uses a key-only score; our task networks expose one prior score
:math:`a_{t,s}` (``Encoded.prior_scores``), which may also see the query / target prefix -- it serves as the
contextual score here (softmax clamped below at ``1e-8`` so every shape stays positive).  Since all
coordinates share the rate :math:`\beta`, the normalised prior weights are exactly
:math:`z_t \sim \mathrm{Dirichlet}(\alpha_t)` (:meth:`BayesianAttention.prior`).

The guide draws each weight from a reparameterisable distribution with mean :math:`e^{\phi_{t,s}}`:

.. math::

    q(w_{t,s} \mid x, y) = \mathrm{Weibull}\Big(k,\ \lambda = \frac{e^{\phi_{t,s}}}{\Gamma(1 + 1/k)}\Big)
    \quad\text{or}\quad \mathrm{LogNormal}\big(\phi_{t,s} - \sigma^2/2,\ \sigma\big),

with :math:`\phi_t = \log\mathrm{softmax}(b_t)` over the real sources (as in the authors' code, so that
:math:`\sum_s \mathbb{E}_q[w_{t,s}] = 1`) and :math:`b_t` the inference network's scores
(``guide_scores="posterior"``: :meth:`~pyro_attention.networks.AttentionNetwork.posterior_scores`, which see
:math:`y_t`) or the prior attention scores (``guide_scores="prior"``: BAM's own setting, where :math:`q` sees
only what deterministic attention sees).  The objective is the ELBO with the KL in closed form
(:mod:`pyro_attention.distributions.weibull_gamma`), optionally annealed as in
:class:`~pyro_attention.inference.estimators.KLSchedule` (the estimator ``MeanField(kl_schedule)``):

.. math::

    \mathcal{L} = \sum_t \mathbb{E}_q[\log p(y_t \mid x, y_{<t}, c_t)]
        - w(\text{step}) \sum_t \sum_{s \text{ real}}
          \mathrm{KL}(q(w_{t,s}) \,\|\, \mathrm{Gamma}(\alpha_{t,s}, \beta)).

* **What is random:** the unnormalised weights :math:`w_t \in \mathbb{R}_+^S` (site ``"align"``, ``(B, T, S)``,
  event dim 1); the normalised weights :math:`z_t` are a deterministic function of them.
* **What the prior and the posterior see:** the constant and learned priors see nothing; the contextual prior
  sees the network's prior scores; ``q`` sees the target too (``guide_scores="posterior"``) or exactly what
  the prior scores see (``"prior"``).
* **What is combined at prediction:** representations at the *mean weights* (BAM's test rule):
  :meth:`BayesianAttention.attention_prior` -- the normalised :math:`\mathbb{E}_q[w_t] = \mathrm{softmax}(b_t)`
  when ``q`` does not see ``y`` (``guide_scores="prior"``), otherwise the normalised prior mean
  :math:`\alpha_t / \sum_s \alpha_{t,s}` (uniform for the constant and learned priors, ``softmax(a_t)`` for the
  contextual one); ``predict(pair, batch, rule="soft")`` uses it.  ``rule="marginal"`` averages
  :math:`p(y \mid x, z)` over :math:`z \sim \mathrm{Dirichlet}(\alpha_t)` (the model's own predictive, sampled);
  :func:`pyro_attention.inference.log_likelihood` is an importance-weighted estimate with ``q`` as proposal --
  a loose one here: ``q`` fixes the total :math:`\sum_s \mathbb{E}_q[w_{t,s}] = 1` while the prior spreads
  it, so the weights :math:`p/q` of the (irrelevant) overall scale are tiny; averaging
  :math:`p(y \mid x, z)` over prior draws of :math:`z` is far tighter (``docs/neighbours.md``).
  With ``guide_scores="posterior"`` the prior's scores are trained only through the KL, so the test rule
  (and the prior) lag behind: BAM's own ``guide_scores="prior"`` is the setting that predicts well.
* **Training and prediction:** reparameterised Weibull / lognormal samples, ``TraceMeanField_ELBO`` with the
  registered analytic KL, KL annealing and a KL weight ``kl_scale`` via ``poutine.scale`` on ``"align"``
  (weight 1 by default: the ELBO).  The authors' code averages the KL over positions instead of summing it,
  i.e. weights it far below 1; on region QA the full-weight KL costs accuracy (0.61 against soft attention's
  0.89 with ``guide_scores="prior"``), while ``kl_scale=0.01`` matches soft attention.

Padding is exact: the site's distributions are :class:`~pyro_attention.distributions.weibull_gamma.MaskedVector`
with the mask ``source_mask & target_mask`` -- padded sources are exactly 0 in every sample (so they get weight
exactly 0 after normalising) and absent from densities and the KL; at padded targets every coordinate is
masked, so model and guide are the same point mass at 0 and contribute exactly nothing (and ``"y"`` is masked).

Not a row of Deng et al. (2018); the BAM paper reports it on graphs, VQA (VQA-v2 accuracy 66.32 -> 66.71 with
BAM-WC over soft attention on MCAN), image captioning and language understanding.

References: [1] Fan, Zhang, Chen, Zhou, "Bayesian Attention Modules", NeurIPS 2020.
[2] Zhang, Guo, Hernandez-Lobato, Zhou, "WHAI: Weibull Hybrid Autoencoding Inference", ICLR 2018 (Weibull
reparameterisation and KL(Weibull || Gamma)).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor, nn

from pyro_attention.distributions import MaskedDirichlet
from pyro_attention.distributions.aligned import OutputCategorical
from pyro_attention.distributions.weibull_gamma import MaskedVector
from pyro_attention.inference.estimators import Estimator, KLAnnealing, MeanField
from pyro_attention.models._continuous import GUIDE_SCORES, ContinuousAlignment, GuideScores
from pyro_attention.networks.base import AttentionNetwork, Encoded, expected_context, mask_scores
from pyro_attention.pair import Rule

#: lower bound of the contextual prior's shapes
MIN_ALPHA = 1e-8
#: lower bound of the guide's log-means (``exp(-50) = 2e-22``: a weight that small is never drawn as exactly 0)
MIN_LOG_MEAN = -50.0


class PositiveScalar(nn.Module):
    """One learned positive number, ``exp`` of an unconstrained parameter (the learned prior's Gamma shape)."""

    def __init__(self, initial: float) -> None:
        super().__init__()
        self.log_value = nn.Parameter(torch.tensor(math.log(initial)))

    def forward(self) -> Tensor:
        return self.log_value.exp()


class PriorShape:
    """The prior's Gamma shapes ``alpha_{t,s}`` (``prior=``): :class:`ConstantShape`, :class:`LearnedShape` or
    :class:`ContextualShape`; each is built from the pair's ``alpha`` and ``beta`` and takes what it needs."""

    #: the name the pair accepts (``prior=``)
    name: ClassVar[str] = ""

    def __init__(self, alpha: float, beta: float) -> None:
        self.alpha, self.beta = alpha, beta

    def shapes(self, enc: Encoded) -> Tensor:  # pragma: no cover - interface
        """``alpha`` ``(B, T, S)`` (any value at padded sources: the pair puts 1 there)."""
        raise NotImplementedError

    def modules(self) -> dict[str, nn.Module]:
        """The modules it owns, by their ``pyro.module`` names."""
        return {}


class ConstantShape(PriorShape):
    """``alpha_{t,s} = alpha``: the prior sees nothing."""

    name = "constant"

    def shapes(self, enc: Encoded) -> Tensor:
        return torch.full_like(enc.prior_scores, self.alpha)


class LearnedShape(PriorShape):
    """One learned positive ``alpha`` for every weight (a :class:`PositiveScalar` started at ``alpha``, registered as
    ``pyro.module("bam_prior", ...)``): the prior sees nothing."""

    name = "learned"

    def __init__(self, alpha: float, beta: float) -> None:
        super().__init__(alpha, beta)
        self.scalar = PositiveScalar(alpha)

    def shapes(self, enc: Encoded) -> Tensor:
        scores = enc.prior_scores
        return pyro.module("bam_prior", self.scalar)().to(scores).expand(scores.shape)

    def modules(self) -> dict[str, nn.Module]:
        return {"bam_prior": self.scalar}


class ContextualShape(PriorShape):
    """``alpha_t = beta softmax_s(a_t)`` (clamped below at :data:`MIN_ALPHA`): the prior sees the network's prior
    scores, and ``E_p[w_t]`` follows its attention distribution."""

    name = "contextual"

    def shapes(self, enc: Encoded) -> Tensor:
        return self.beta * torch.softmax(mask_scores(enc.prior_scores, enc.source_mask), -1).clamp(min=MIN_ALPHA)


PRIORS: dict[str, type[PriorShape]] = {"constant": ConstantShape, "learned": LearnedShape,
                                       "contextual": ContextualShape}


class WeightGuide:
    """The guide's family for a weight of mean ``exp(phi)`` (``family=``): :class:`WeibullWeights` or
    :class:`LogNormalWeights`; each is built from the pair's ``k`` and ``sigma`` and takes what it needs."""

    #: the name the pair accepts (``family=``)
    name: ClassVar[str] = ""

    def __init__(self, k: float, sigma: float) -> None:
        self.k, self.sigma = k, sigma

    def distribution(self, phi: Tensor) -> dist.Distribution:  # pragma: no cover - interface
        """Independent reparameterisable weights with ``E[w] = exp(phi)``, shaped like ``phi``."""
        raise NotImplementedError


class WeibullWeights(WeightGuide):
    """``Weibull(k, exp(phi) / Gamma(1 + 1/k))`` (larger shape ``k``: less noise)."""

    name = "weibull"

    def distribution(self, phi: Tensor) -> dist.Distribution:
        return dist.Weibull((phi - math.lgamma(1.0 + 1.0 / self.k)).exp(), torch.full_like(phi, self.k))


class LogNormalWeights(WeightGuide):
    """``LogNormal(phi - sigma^2 / 2, sigma)``."""

    name = "lognormal"

    def distribution(self, phi: Tensor) -> dist.Distribution:
        return dist.LogNormal(phi - 0.5 * self.sigma**2, torch.full_like(phi, self.sigma))


FAMILIES: dict[str, type[WeightGuide]] = {"weibull": WeibullWeights, "lognormal": LogNormalWeights}


def normalise(w: Tensor, mask: Tensor) -> Tensor:
    """``w / sum_s w`` over the positions where ``mask`` holds (masked weights are already 0).

    A row with nothing unmasked (a padded target) stays 0.
    """
    total = (w * mask).sum(-1, keepdim=True)
    return w / total.clamp(min=torch.finfo(w.dtype).tiny)


class BayesianAttention(KLAnnealing, ContinuousAlignment):
    """BAM: Gamma prior, Weibull or lognormal guide on unnormalised attention weights.

    :param network: the task network.
    :param family: the guide's family, ``"weibull"`` or ``"lognormal"``.
    :param prior: ``"constant"``, ``"learned"`` or ``"contextual"`` (see the module docstring).
    :param guide_scores: ``"posterior"`` (the inference network's scores) or ``"prior"`` (the prior scores).
    :param k: Weibull shape (larger: less noise).
    :param sigma: lognormal scale.
    :param alpha: Gamma shape of the constant prior; the initial value of the learned one.
    :param beta: Gamma rate.
    :param anneal_steps: steps of KL annealing (0: none).
    :param schedule: ``"linear"`` or ``"tanh"``.
    :param kl_scale: the final KL weight (1: the ELBO; BAM's code effectively uses far less, see
        :class:`~pyro_attention.inference.estimators.KLSchedule`).
    """

    latent: ClassVar[str] = "simplex"
    rules: ClassVar[tuple[Rule, ...]] = (Rule.SOFT, Rule.MARGINAL)  # the mean weights' rule first
    likelihood_proposal: ClassVar[str] = "prior"
    label: ClassVar[str] = "bayesian"
    paper_row: ClassVar[str] = "Bayesian Attention Modules (Fan et al. 2020; not in Deng et al.)"
    #: reparameterised draws, analytic KL; the pair's own ``MeanField(KLSchedule(...))`` (from ``anneal_steps``,
    #: ``schedule``, ``kl_scale``) replaces this default at construction
    estimators: ClassVar[tuple[Estimator, ...]] = (MeanField(),)

    def __init__(
        self,
        network: AttentionNetwork,
        family: str = "weibull",
        prior: str = "contextual",
        guide_scores: str = "posterior",
        k: float = 10.0,
        sigma: float = 0.5,
        alpha: float = 1.0,
        beta: float = 1.0,
        anneal_steps: int = 0,
        schedule: str = "linear",
        kl_scale: float = 1.0,
    ) -> None:
        super().__init__(network)
        name = type(self).__name__
        for option, value, allowed in (("family", family, FAMILIES), ("prior", prior, PRIORS),
                                       ("guide_scores", guide_scores, GUIDE_SCORES)):
            if value not in allowed:
                raise ValueError(f"{name}: {option} must be one of {tuple(allowed)}, got {value!r}")
        if min(k, sigma, alpha, beta) <= 0:
            raise ValueError(f"{name}: k, sigma, alpha and beta must be > 0, got {k}, {sigma}, {alpha}, {beta}")
        self.k, self.sigma, self.alpha, self.beta = float(k), float(sigma), float(alpha), float(beta)
        self.shape: PriorShape = PRIORS[prior](self.alpha, self.beta)
        self.weights: WeightGuide = FAMILIES[family](self.k, self.sigma)
        self.guide_scores: GuideScores = GUIDE_SCORES[guide_scores]
        self._init_annealing(anneal_steps, schedule, kl_scale)

    def __repr__(self) -> str:
        return (
            f"BayesianAttention(family={self.weights.name!r}, prior={self.shape.name!r}, "
            f"guide_scores={self.guide_scores.name!r})"
        )

    def owned_modules(self) -> dict[str, nn.Module]:
        return self.shape.modules()

    # -- distributions ----------------------------------------------------------------------------------------
    @staticmethod
    def site_mask(enc: Encoded) -> Tensor:
        """``(B, T, S)``: real source and real target."""
        return enc.source_mask.unsqueeze(-2) & enc.target_mask.unsqueeze(-1)

    def prior_alpha(self, enc: Encoded) -> Tensor:
        """The Gamma shapes ``alpha`` ``(B, T, S)`` (1 at padded sources, where they are never used)."""
        alpha = self.shape.shapes(enc)
        return torch.where(enc.source_mask.unsqueeze(-2), alpha, torch.ones_like(alpha))

    def weight_prior(self, enc: Encoded) -> MaskedVector:
        """``p(w_t | x)``: masked independent ``Gamma(alpha, beta)``, event ``(S,)``."""
        alpha = self.prior_alpha(enc)
        return MaskedVector(dist.Gamma(alpha, torch.full_like(alpha, self.beta)), self.site_mask(enc))

    def guide_log_mean(self, enc: Encoded) -> Tensor:
        """``phi_t = log softmax(b_t)`` over real sources, clamped below at -50 (0 at padded sources), ``(B, T, S)``."""
        phi = torch.log_softmax(self.guide_scores.logits(self, enc), -1).clamp(min=MIN_LOG_MEAN)
        return torch.where(enc.source_mask.unsqueeze(-2), phi, torch.zeros_like(phi))

    def weight_guide(self, enc: Encoded) -> MaskedVector:
        """``q(w_t | x, y)``: masked Weibull or lognormal (:attr:`weights`) with ``E_q[w_{t,s}] = exp(phi_{t,s})``."""
        return MaskedVector(self.weights.distribution(self.guide_log_mean(enc)), self.site_mask(enc))

    def prior(self, enc: Encoded) -> MaskedDirichlet:
        """The law of the normalised prior weights ``z_t``: ``Dirichlet(alpha_t)`` over real sources."""
        return MaskedDirichlet(self.prior_alpha(enc), enc.source_mask.unsqueeze(-2).expand(enc.shape))

    def alignment_weights(self, enc: Encoded, value: Tensor) -> Tensor:
        """The normalised weights ``z_t = w_t / sum_s w_{t,s}`` of unnormalised weights ``w``."""
        return normalise(value, self.site_mask(enc))

    def guide_probs(self, enc: Encoded) -> Tensor:
        """The guide's normalised mean weights ``E_q[w_t] / sum_s E_q[w_{t,s}] = softmax(b_t)``."""
        mask = enc.source_mask.unsqueeze(-2).expand(enc.shape)
        return normalise(self.guide_log_mean(enc).exp() * mask, mask)  # phi = 0 at padded sources: exp(0) = 1

    def attention_prior(self, enc: Encoded) -> Tensor:
        """The mean weights used at test time, ``(B, T, S)`` (see the module docstring)."""
        if not self.guide_scores.sees_target:  # q's normalised mean, softmax(b_t): the prior's scores
            return torch.softmax(self.prior_logits(enc), -1)
        return self.prior(enc).mean

    # -- the pair -----------------------------------------------------------------------------------------------
    def model(self, batch: Any) -> None:
        enc = self.encode(batch)
        with self.plates(enc):
            with self.latent_scale():
                w = pyro.sample("align", self.weight_prior(enc))
            z = normalise(w, self.site_mask(enc))
            logits = self.network.output_logits(enc, expected_context(z, enc.values))
            self.observe(enc, OutputCategorical(logits))

    def guide(self, batch: Any) -> None:
        enc = self.encode_for_model(batch)
        with self.plates(enc), self.latent_scale():
            pyro.sample("align", self.weight_guide(enc))
