"""The base of every model/guide pair (deterministic plumbing only; the sample statements live in models/).

A pair = alignment family x task network x estimator.  Conventions:

* ``pair.model(batch)`` and ``pair.guide(batch)``; the random alignment is the sample site ``"align"``, the
  observation is ``"y"`` (``obs=`` the targets, masked where padded);
* plates ``"batch"`` (dim -2) and ``"target"`` (dim -1), so enumeration uses dims -3 and below;
* ``pair.elbo()`` returns the Pyro ELBO the estimator needs: ``pair.estimator.elbo(pair)``, where the
  estimator is an object of :mod:`pyro_attention.inference.estimators` (models define no ELBO);
* padded sources get exactly zero prior and posterior mass; padded targets contribute nothing to any loss
  (``"y"`` is masked there and every guide equals the prior there, so ``log p(z) - log q(z) = 0``).

What a pair answers.  Inference code (:mod:`pyro_attention.inference`, decoding, the command lines) asks the pair
and never switches on its kind: every question below is a method of every pair, implemented once per alignment
family -- deterministic (this base class: :class:`~pyro_attention.models.SoftAttention` and the structured
expected-representation pairs), categorical (:class:`~pyro_attention.models._categorical.CategoricalAlignmentModel`),
continuous -- simplex weights or a Gaussian context -- (:class:`~pyro_attention.models._continuous.ContinuousAlignment`)
and structured (:class:`~pyro_attention.models.SegmentationMarginal`) -- and a pair that cannot answer refuses with
a ``ValueError`` that says why:

* ``log_likelihood(batch, num_samples, proposal)`` -- ``log p(y | x)`` per token as a
  :class:`~pyro_attention.inference.LogLikelihood` whose ``exact`` / ``method`` say whether it is exact
  (deterministic, enumeration, a dynamic programme) or an importance-sampled estimate;
* ``kmax_log_likelihood(batch, k)`` -- the K-max bound (categorical pairs; others refuse);
* ``rules`` -- the combination rules (:class:`Rule`) :meth:`predict` accepts, the default first;
  ``decoding_rules()`` -- those step-by-step decoding implements; :meth:`rule` resolves a rule (an object, its
  name, or ``None``: the default) and refuses one the pair does not allow (the one place a default is chosen);
* ``predict(batch, rule, num_samples, k)`` -- ``p(y_t | x)`` under an allowed rule (a refused rule is an error,
  never silently replaced);
* ``posterior_probs(batch)`` -- the exact ``p(z_t | x, y)`` over source positions, or ``None``;
  ``alignment_posterior(batch)`` -- prior, exact posterior and guide probabilities (those the pair has);
  ``guide_kl(probs)`` -- the exact per-token ``KL(q || p(z | x, y))`` where both are over one discrete alignment;
* ``map_alignment(batch)`` -- the exact MAP alignment (categorical pairs; others refuse);
* ``has_warmup`` / ``warmup_guide(batch)`` -- a warm-start guide (the Dirichlet pair); ``set_step(step)`` -- the
  training-step hook (KL annealing; a no-op elsewhere);
* descriptive class attributes: ``latent`` (``"none"``, ``"categorical"``, ``"simplex"``, ``"context"``,
  ``"structured"``; for reading, not for branching), ``deterministic`` (no random alignment) and ``continuous``
  (``"weights"`` / ``"context"``: the draws ArviZ exports; ``None``: stored exactly).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch import Tensor, nn

from pyro_attention.checks import weight_differences
from pyro_attention.networks.base import AttentionNetwork, Encoded, expected_context, mask_scores
from pyro_attention.precision import full_precision

if TYPE_CHECKING:
    from pyro_attention.inference.estimators import Estimator
    from pyro_attention.inference.evaluate import LogLikelihood

MAX_PLATE_NESTING = 2


class Rule(enum.Enum):
    """How a prediction combines the alignments; the command line and configs name a rule by its value."""

    #: the exact mixture over alignments, :math:`\mathbb{E}_{p(z \mid x)}[p(y \mid x, z)]`
    MARGINAL = "marginal"
    #: the network once at the expected alignment, :math:`p(y \mid x, \mathbb{E}_p[z])`
    SOFT = "soft"
    #: the mixture over the ``K`` most probable alignments under the prior (Deng et al. 2018)
    KMAX = "kmax"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every rule's name, as the command line offers them."""
        return tuple(r.value for r in cls)


class RuleError(ValueError):
    """A combination rule that does not exist or that the pair does not allow (:meth:`AlignmentPair.rule`):
    a wrong option, which the command line reports as ``argument --rule: ...`` (exit status 2)."""


class AlignmentPair:
    """Base class: holds the task network and the plumbing shared by all pairs.

    :param network: a task network (:class:`~pyro_attention.networks.AttentionNetwork`).
    """

    #: what the alignment is, for reading (tables, ArviZ attributes), not for branching: ``"none"`` (deterministic
    #: attention), ``"categorical"``, ``"simplex"``, ``"context"`` or ``"structured"``.
    latent: ClassVar[str] = "none"
    #: no random alignment: the attention weights are a function of the input (the prior *is* the alignment)
    deterministic: ClassVar[bool] = True
    #: a continuous alignment's draws, as ArviZ exports them: ``"weights"`` (a weight vector over the source) or
    #: ``"context"`` (a context vector); ``None``: no draws (a deterministic or discrete alignment, stored exactly)
    continuous: ClassVar[str | None] = None
    #: the pair has a warm-start guide, :meth:`warmup_guide` (``fit(..., warmup_steps=...)`` uses it)
    has_warmup: ClassVar[bool] = False
    #: the row of Deng et al. (2018) the pair reproduces.
    paper_row: ClassVar[str] = ""
    #: a short label for tables.
    label: ClassVar[str] = ""
    #: the rules :meth:`predict` accepts, the default first
    rules: ClassVar[tuple[Rule, ...]] = (Rule.SOFT,)
    #: the rules step-by-step decoding implements for the family (:meth:`decoding_rules`)
    decodes: ClassVar[frozenset[Rule]] = frozenset({Rule.SOFT})
    #: proposal of the importance-weighted ``log p(y | x)`` when the alignment cannot be enumerated:
    #: ``"mixture"`` (the defensive mixture ``(q + p) / 2``: weights bounded by ``2 p(y | x, z)``), ``"guide"``
    #: (``q`` alone: ``p / q`` may be heavy-tailed) or ``"prior"`` (plain Monte Carlo over draws of :meth:`prior`).
    likelihood_proposal: ClassVar[str] = "mixture"
    #: the estimators (:mod:`pyro_attention.inference.estimators`) the pair accepts, the default first; with more
    #: than one the pair has a choice of estimator, made by its constructor's ``estimator`` argument
    estimators: ClassVar[tuple[Estimator, ...]] = ()

    def __init__(self, network: AttentionNetwork) -> None:
        if not isinstance(network, AttentionNetwork):
            raise TypeError(f"{type(self).__name__}: network must be an AttentionNetwork, got {type(network).__name__}")
        self.network = network
        self._estimator = type(self).estimators[0] if type(self).estimators else None

    # -- the estimator ----------------------------------------------------------------------------------------
    def _choose_estimator(self, estimator: Estimator | str | None) -> None:
        """Make ``estimator`` (an object; its name, as the command line and configs give it; ``None``: the
        default) the pair's, at construction; ``ValueError`` naming the allowed ones when :attr:`estimators` has
        none of its kind."""
        from pyro_attention.inference.estimators import resolve

        self._estimator = resolve(estimator, type(self).estimators, type(self).__name__)

    @property
    def estimator(self) -> Estimator:
        """The estimator :meth:`elbo` uses: every pair has one, chosen at construction where :attr:`estimators`
        offers a choice (:meth:`has_estimator_choice`)."""
        est = self.__dict__.get("_estimator")
        if est is None:
            raise NotImplementedError(
                f"{type(self).__name__}: no estimator; list them in `estimators` or define elbo()"
            )
        return est

    @classmethod
    def has_estimator_choice(cls) -> bool:
        """Whether the pair is built with one of several estimators (the labels and exports name it)."""
        return len(cls.estimators) > 1

    # -- plumbing -------------------------------------------------------------------------------------------
    def encode(self, batch: Any) -> Encoded:
        """Register the network with Pyro and encode ``batch``.

        Pyro runs the guide, then the model, on the same batch; the encoding the guide left with
        :meth:`encode_for_model` is reused once by the next call here, if nothing changed in between (same batch
        object, same parameter versions, same grad mode).  Otherwise the batch is encoded afresh.
        """
        pyro.module("network", self.network)
        cached, self._cached = getattr(self, "_cached", None), None
        if cached is not None and cached[0] == self._cache_key(batch):
            return cached[1]
        return self.network.encode(batch)

    def encode_for_model(self, batch: Any) -> Encoded:
        """:meth:`encode`, and keep the result for the model that Pyro runs next (guides call this)."""
        enc = self.encode(batch)
        self._cached = (self._cache_key(batch), enc)
        return enc

    def _cache_key(self, batch: Any) -> tuple:
        # the cached Encoded holds a reference to ``batch``, so its id cannot be reused while cached;
        # an optimiser step bumps every parameter's version counter
        return id(batch), torch.is_grad_enabled(), tuple(p._version for p in self.network.parameters())

    @staticmethod
    @contextmanager
    def plates(enc: Encoded):  # noqa: ANN205 - a context manager
        """The ``"batch"`` and ``"target"`` plates of ``enc``."""
        B, T, _ = enc.shape
        with ExitStack() as stack:
            stack.enter_context(pyro.plate("batch", B, dim=-2))
            stack.enter_context(pyro.plate("target", T, dim=-1))
            yield

    @staticmethod
    def observe(enc: Encoded, fn: Any) -> Tensor:
        """The observation site ``"y"``, masked at padded targets."""
        with poutine.mask(mask=enc.target_mask):
            return pyro.sample("y", fn, obs=enc.target)

    @staticmethod
    def prior_logits(enc: Encoded) -> Tensor:
        """Prior attention logits ``(B, T, S)`` with ``-inf`` at padded sources."""
        return mask_scores(enc.prior_scores, enc.source_mask)

    def inference_scores(self, enc: Encoded) -> Tensor:
        """The inference network's scores ``(B, T, S)`` (unmasked), the prior's at padded targets."""
        scores = full_precision(self.network.posterior_scores(enc))  # float32 also under torch.autocast
        return torch.where(enc.target_mask.unsqueeze(-1), scores, enc.prior_scores)

    def posterior_logits(self, enc: Encoded) -> Tensor:
        """Inference-network logits ``(B, T, S)``: ``-inf`` at padded sources, the prior's at padded targets."""
        return mask_scores(self.inference_scores(enc), enc.source_mask)

    def attention_prior(self, enc: Encoded) -> Tensor:
        """Expected prior attention weights ``E_p[z_t]`` as ``(B, T, S)`` probabilities (0 at padding)."""
        return torch.softmax(self.prior_logits(enc), dim=-1)

    # -- the prediction rules ---------------------------------------------------------------------------------
    def decoding_rules(self) -> tuple[Rule, ...]:
        """The rules step-by-step decoding (:func:`~pyro_attention.tasks.translation.decoding.translate`) implements
        for this pair, the default first: :attr:`Rule.SOFT` for every pair; the categorical pairs add the marginal and
        K-max rules (the decoder sums a categorical prior over source positions at each step)."""
        return tuple(r for r in type(self).rules if r in type(self).decodes)

    def rule(self, rule: Rule | str | None = None, decoding: bool = False) -> Rule:
        """``rule`` (an object, or its name as the command line gives it; ``None``: the default, the first of
        :attr:`rules` or, ``decoding``, of :meth:`decoding_rules`) if the pair allows it; :class:`RuleError` saying
        why not."""
        allowed = self.decoding_rules() if decoding else type(self).rules
        if rule is None:
            return allowed[0]
        if not isinstance(rule, Rule):
            if rule not in Rule.names():
                raise RuleError(f"rule must be one of {Rule.names()}, got {rule!r}")
            rule = Rule(rule)
        if rule in allowed:
            return rule
        name = type(self).__name__
        listed = " or ".join(repr(str(r)) for r in allowed)
        if decoding:
            raise RuleError(f"rule {str(rule)!r} needs a categorical alignment; {name} allows only {listed}")
        if self.deterministic:
            raise RuleError(f"{name} has no latent alignment to marginalise; use rule='soft'")
        raise RuleError(f"rule={str(rule)!r} needs a categorical alignment; {name} has none (its rules: {listed})")

    def guide_parameters(self) -> list[Tensor]:
        """The parameters only the guide uses (an amortised inference network's), which a guide-only step
        updates while the model stays fixed; none here (the guide shares the model's, or has none)."""
        return []

    def guide_probs(self, enc: Encoded) -> Tensor | None:
        """The guide's alignment probabilities (or normalised mean weights) ``(B, T, S)``; ``None`` when the guide
        holds no distribution over source positions."""
        return None

    def alignment_weights(self, enc: Encoded, value: Tensor) -> Tensor:
        """The attention weights a value of site ``"align"`` stands for (the value itself, or a position)."""
        return value

    def sample_context(self, enc: Encoded, z: Tensor) -> Tensor:
        """The context the output network sees for a value ``z`` of :meth:`prior` (weights ``(..., B, T, S)``)."""
        return expected_context(z, enc.values)

    def soft_context(self, enc: Encoded) -> Tensor:
        """The context of the soft prediction rule, ``(B, T, D)``: by default ``sum_s E_p[z_{t,s}] x_s``
        (structured pairs: their structured context)."""
        return expected_context(self.attention_prior(enc), enc.values)

    # -- what the pair answers ----------------------------------------------------------------------------------
    @torch.no_grad()
    def log_likelihood(self, batch: Any, num_samples: int = 100, proposal: str | None = None) -> LogLikelihood:
        """``log p(y | x)`` per token and per example; ``exact`` and ``method`` of the result say how it was got.

        Here (every pair without a better way): the model traced with its latent sites enumerated -- exact when
        all are (deterministic and categorical pairs), otherwise an importance-weighted estimate with
        ``num_samples`` draws from ``proposal`` (``"mixture"``, ``"guide"`` or ``"prior"``; ``None``:
        :attr:`likelihood_proposal`), see :func:`pyro_attention.inference.evaluate.traced_log_likelihood`.
        """
        from pyro_attention.inference.evaluate import traced_log_likelihood

        return traced_log_likelihood(self, batch, num_samples=num_samples, proposal=proposal)

    def kmax_log_likelihood(self, batch: Any, k: int) -> LogLikelihood:
        """The K-max ``log p(y | x)`` (Deng et al. 2018): only categorical alignments have one; refused here."""
        raise ValueError(f"K-max needs a categorical alignment; {type(self).__name__} has latent {self.latent!r}")

    @torch.no_grad()
    def predict(self, batch: Any, rule: Rule | str | None = None, num_samples: int = 100, k: int = 5) -> Tensor:
        """Predictive probabilities ``(B, T, V)`` under ``rule``, one of :attr:`rules` (``None``: the default); a rule
        the pair does not allow is refused (:class:`RuleError`, a ``ValueError``), never replaced.

        ``"soft"`` -- :math:`p(y_t \\mid x, c_t)` with the pair's :meth:`soft_context`; ``"marginal"`` --
        :math:`\\mathbb{E}_{p(z \\mid x)}[p(y \\mid x, z)]` (exact for categorical and structured pairs, a
        ``num_samples`` Monte Carlo average for continuous ones); ``"kmax"`` -- the marginal over the ``k`` most
        probable prior alignments, renormalised over them (categorical pairs).
        """
        rule = self.rule(rule)
        if rule is Rule.KMAX and k < 1:
            raise ValueError(f"rule='kmax' needs k >= 1, got k={k}")
        return self.predictive(self.network.encode(batch), rule, num_samples=num_samples, k=k)

    def predictive(self, enc: Encoded, rule: Rule, num_samples: int = 100, k: int = 5) -> Tensor:
        """:meth:`predict` on an encoding, for a rule already checked; here the soft rule, the network run once on
        :meth:`soft_context`."""
        return self.network.output_logits(enc, self.soft_context(enc)).softmax(-1)

    def posterior_probs(self, batch: Any) -> Tensor | None:
        """The exact posterior ``p(z_t = s | x, y)`` ``(B, T, S)``; ``None`` here (no random alignment, or no exact
        posterior)."""
        return None

    @torch.no_grad()
    def alignment_posterior(self, batch: Any) -> dict[str, Tensor]:
        """``{"prior": ..., "posterior": ..., "guide": ...}``: prior (:meth:`attention_prior`), exact posterior
        (:meth:`posterior_probs`) and guide (:meth:`guide_probs`, else read from the guide's ``"align"`` site)
        alignment probabilities, those the pair has, each ``(B, T, S)`` with zeros at padded sources."""
        enc = self.network.encode(batch)
        out = {"prior": self.attention_prior(enc)}
        posterior = self.posterior_probs(batch)
        if posterior is not None:
            out["posterior"] = posterior
        guide = self.guide_probs(enc)
        if guide is None:  # a user's pair without guide_probs: read the guide's distribution if it has weights
            site = poutine.trace(self.guide).get_trace(batch).nodes.get("align")
            guide = None if site is None else _site_probs(site["fn"])
        if guide is not None:
            out["guide"] = guide
        mask = enc.source_mask.unsqueeze(-2)
        return {key: value * mask for key, value in out.items()}

    def guide_kl(self, probs: dict[str, Tensor]) -> Tensor | None:
        """The exact per-token ``KL(q || p(z | x, y))`` ``(B, T)`` from :meth:`alignment_posterior` output, where the
        guide and the exact posterior are distributions over the same discrete alignment; ``None`` otherwise."""
        return None

    def map_alignment(self, batch: Any) -> Tensor:
        """The exact MAP alignment ``argmax_z p(z | x, y)`` ``(B, T)``: categorical pairs; refused here."""
        raise ValueError(f"{type(self).__name__} has no categorical alignment to decode")

    # -- training hooks -------------------------------------------------------------------------------------------
    def warmup_guide(self, batch: Any) -> None:
        """The warm-start guide (pairs with :attr:`has_warmup`); refused here."""
        raise ValueError(f"{type(self).__name__} has no warmup_guide")

    def set_step(self, step: int) -> None:
        """Set the training-step counter (KL annealing resumes from it); a no-op for pairs without one."""

    def soft_log_likelihood(self, enc: Encoded) -> Tensor:
        """``log p(y_t | x, c_t = E_p[x_z])`` per token ``(B, T)``: soft attention with the prior's weights."""
        logits = self.network.output_logits(enc, expected_context(self.attention_prior(enc), enc.values))
        return observed_log_likelihood(logits, enc)

    # -- parameters -----------------------------------------------------------------------------------------
    def owned_modules(self) -> dict[str, nn.Module]:
        """The modules the pair owns besides the network, by the name it registers them under with
        ``pyro.module`` (structure potentials, a context-scale head, a learned prior shape, ...)."""
        return {}

    def modules(self) -> dict[str, nn.Module]:
        """``{"network": network, **owned_modules()}``: every module whose weights the pair trains."""
        return {"network": self.network, **self.owned_modules()}

    def state_dict(self) -> dict[str, dict[str, Tensor]]:
        """The weights of :meth:`modules`, one ``state_dict`` per name (what a checkpoint saves)."""
        return {name: module.state_dict() for name, module in self.modules().items()}

    def load_state_dict(self, state: dict[str, dict[str, Tensor]]) -> None:
        """Load :meth:`state_dict` output; refuses (``ValueError``) a state with other modules than this pair's."""
        have, got = set(self.modules()), set(state)
        if have != got:
            raise ValueError(
                f"{type(self).__name__}: the saved weights hold modules {sorted(got)}, this pair has {sorted(have)}"
                + (f" (missing: {sorted(have - got)})" if have - got else "")
                + (f" (unexpected: {sorted(got - have)})" if got - have else "")
            )
        for name, module in self.modules().items():
            wrong = weight_differences(module.state_dict(), state[name])
            if wrong:
                raise ValueError(f"{type(self).__name__}: the saved weights of {name!r} do not fit its "
                                 f"{type(module).__name__}: " + "; ".join(wrong))
            module.load_state_dict(state[name])

    def train(self, mode: bool = True) -> AlignmentPair:
        """Set train / eval mode (dropout) of every module."""
        for module in self.modules().values():
            module.train(mode)
        return self

    def eval(self) -> AlignmentPair:
        return self.train(False)

    def to(self, *args: Any, **kwargs: Any) -> AlignmentPair:
        """Move every module (``torch.nn.Module.to`` arguments: a device and/or dtype)."""
        for module in self.modules().values():
            module.to(*args, **kwargs)
        return self

    def parameters(self) -> list[nn.Parameter]:
        return [p for module in self.modules().values() for p in module.parameters()]

    # -- the pair -------------------------------------------------------------------------------------------
    def model(self, batch: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def guide(self, batch: Any) -> None:
        """The empty guide (exact or deterministic pairs)."""

    def elbo(self) -> pyro.infer.ELBO:
        """The Pyro ELBO that trains the pair: its estimator's (``self.estimator.elbo(self)``)."""
        return self.estimator.elbo(self)

    def __repr__(self) -> str:
        chosen = f"estimator={str(self.estimator)!r}" if self.has_estimator_choice() else ""
        return f"{type(self).__name__}({chosen})"


def observed_log_likelihood(logits: Tensor, enc: Encoded) -> Tensor:
    """``log softmax(logits)`` at the observed targets, ``(B, T)``, zero at padded targets."""
    return logits.log_softmax(-1).gather(-1, enc.target.unsqueeze(-1)).squeeze(-1) * enc.target_mask


def kmax_mixture(
    log_prior: Tensor, k: int, log_probs: Callable[[Tensor], Tensor], renormalise: bool = False
) -> Tensor:
    """The K-max mixture of Deng et al. (2018), the one implementation (likelihood, prediction and decoding).

    :param log_prior: ``(..., S)`` normalised log prior over source positions (``-inf`` at padding).
    :param log_probs: ``index (..., K) -> (..., K, V)``: ``log p(. | x, z = index)`` for the ``K`` positions.
    :param renormalise: weigh the ``K`` alignments by their prior renormalised over them (a distribution), or by
        the prior itself (``False``: a lower bound on the exact marginal, equal to it when ``K`` covers the source).
    :returns: ``(..., V)``: ``log sum_{s in top-K} w_s p(. | x, z = s)``.
    """
    top, index = log_prior.topk(min(k, log_prior.shape[-1]), dim=-1)
    if renormalise:
        top = top.log_softmax(-1)
    return (top.unsqueeze(-1) + log_probs(index)).logsumexp(-2)


def kmax_log_prior(log_prior: Tensor, k: int) -> Tensor:
    """``log_prior`` ``(..., S)`` restricted to its ``k`` most probable positions (:func:`kmax_mixture`'s) and
    renormalised over them, ``-inf`` elsewhere: the renormalised K-max mixture is the exact marginal under it."""
    if k < 1:
        raise ValueError(f"kmax_log_prior: k must be >= 1, got {k}")
    top, index = log_prior.topk(min(k, log_prior.shape[-1]), dim=-1)
    return torch.full_like(log_prior, -math.inf).scatter_(-1, index, top.log_softmax(-1))


def _site_probs(fn: Any) -> Tensor | None:
    """Probabilities over source positions of a guide's ``"align"`` distribution, where it has them."""
    if isinstance(fn, dist.Categorical):
        return fn.probs
    if isinstance(fn, dist.Dirichlet):
        return fn.mean
    return None
