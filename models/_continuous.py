"""The family of the pairs whose alignment is a continuous random variable: simplex weights (Dirichlet, Concrete,
BAM's normalised Gamma weights) or a Gaussian context vector.

Their answers (:mod:`pyro_attention.pair`): ``log_likelihood`` is an importance-weighted estimate (the base
class's, labelled as such; the proposal is the pair's ``likelihood_proposal``); ``predict`` allows ``"marginal"``
-- :math:`\\mathbb{E}_{p(z \\mid x)}[p(y \\mid x, z)]` averaged over ``num_samples`` draws of :meth:`prior` -- and
``"soft"`` (the network run once on :meth:`~pyro_attention.pair.AlignmentPair.soft_context`), the pair's
``rules`` in order (the default first); decoding is soft only; no K-max and no MAP alignment (refused); ArviZ
exports draws (``continuous``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from pyro_attention.networks.base import Encoded
from pyro_attention.pair import AlignmentPair, Rule


class GuideScores:
    """Which attention scores an amortised guide is built on (``guide_scores=`` / ``guide_mean=`` of the pairs that
    choose): :class:`PriorScores` or :class:`PosteriorScores`; :data:`GUIDE_SCORES` maps the names to them."""

    #: the name the pairs accept
    name: ClassVar[str] = ""
    #: whether the guide sees the observed target ``y_t`` (otherwise exactly what the prior scores see)
    sees_target: ClassVar[bool] = False

    def logits(self, pair: AlignmentPair, enc: Encoded) -> Tensor:  # pragma: no cover - interface
        """The scores as logits ``(B, T, S)``, ``-inf`` at padded sources."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class PriorScores(GuideScores):
    """The prior's scores :meth:`~pyro_attention.pair.AlignmentPair.prior_logits`: the guide sees the source and the
    target prefix, as deterministic attention does."""

    name = "prior"

    def logits(self, pair: AlignmentPair, enc: Encoded) -> Tensor:
        return pair.prior_logits(enc)


class PosteriorScores(GuideScores):
    """The inference network's scores :meth:`~pyro_attention.pair.AlignmentPair.posterior_logits`, which also see
    ``y_t``."""

    name = "posterior"
    sees_target = True

    def logits(self, pair: AlignmentPair, enc: Encoded) -> Tensor:
        return pair.posterior_logits(enc)


GUIDE_SCORES: dict[str, GuideScores] = {"prior": PriorScores(), "posterior": PosteriorScores()}


class ContinuousAlignment(AlignmentPair):
    """Base of the continuous-alignment pairs: subclasses supply ``prior(enc)`` (the law of the value site
    ``"align"`` takes) and, where the value is not a weight vector, ``sample_context``."""

    deterministic: ClassVar[bool] = False
    continuous: ClassVar[str | None] = "weights"
    rules: ClassVar[tuple[Rule, ...]] = (Rule.MARGINAL, Rule.SOFT)

    def prior(self, enc: Encoded) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def predictive(self, enc: Encoded, rule: Rule, num_samples: int = 100, k: int = 5) -> Tensor:
        """``"marginal"``: the average of ``p(y_t | x, z)`` over ``num_samples`` draws ``z ~ prior(enc)``;
        ``"soft"``: the base class's."""
        if rule is not Rule.MARGINAL:
            return super().predictive(enc, rule, num_samples=num_samples, k=k)
        net = self.network
        prior = self.prior(enc)
        total = 0.0
        for _ in range(num_samples):
            total = total + net.output_logits(enc, self.sample_context(enc, prior.sample())).softmax(-1)
        return total / num_samples
