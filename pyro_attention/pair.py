"""The base of every model/guide pair (deterministic plumbing only; the sample statements live in models/).

A pair = alignment family x task network x estimator.  Conventions (VISION.md):

* ``pair.model(batch)`` and ``pair.guide(batch)``; the random alignment is the sample site ``"align"``, the
  observation is ``"y"`` (``obs=`` the targets, masked where padded);
* plates ``"batch"`` (dim -2) and ``"target"`` (dim -1), so enumeration uses dims -3 and below;
* ``pair.elbo()`` returns the Pyro ELBO the estimator needs: ``pair.get_estimator().elbo(pair)``, where the
  estimator is an object of :mod:`pyro_attention.inference.estimators` (models define no ELBO);
* padded sources get exactly zero prior and posterior mass; padded targets contribute nothing to any loss
  (``"y"`` is masked there and every guide equals the prior there, so ``log p(z) - log q(z) = 0``).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import pyro
import torch
from pyro import poutine
from torch import Tensor, nn

from pyro_attention.networks.base import AttentionNetwork, Encoded, expected_context, mask_scores

if TYPE_CHECKING:
    from pyro_attention.inference.estimators import Estimator

#: Estimators of the pairs with a discrete alignment and an (amortised or prior) guide, by name (the pairs'
#: ``estimators`` hold the objects).
ESTIMATORS = ("enum", "sample")
MAX_PLATE_NESTING = 2


class AlignmentPair:
    """Base class: holds the task network and the plumbing shared by all pairs.

    :param network: a task network (:class:`~pyro_attention.networks.AttentionNetwork`).
    """

    #: ``"none"`` (deterministic attention), ``"categorical"`` or ``"simplex"``.
    latent: ClassVar[str] = "none"
    #: the row of Deng et al. (2018) the pair reproduces.
    paper_row: ClassVar[str] = ""
    #: a short label for tables.
    label: ClassVar[str] = ""
    #: the combination rule the pair predicts with (:func:`~pyro_attention.inference.predict`); ``None``:
    #: ``"soft"`` for deterministic pairs, ``"marginal"`` otherwise.
    prediction_rule: ClassVar[str | None] = None
    #: proposal of the importance-weighted ``log p(y | x)`` when the alignment cannot be enumerated:
    #: ``"guide"`` (``q``) or ``"prior"`` (plain Monte Carlo over draws of :meth:`prior`).
    likelihood_proposal: ClassVar[str] = "guide"
    #: the estimators (:mod:`pyro_attention.inference.estimators`) the pair accepts, the default first; with more
    #: than one the pair has a choice of estimator, made by its constructor's ``estimator`` argument
    estimators: ClassVar[tuple[Estimator, ...]] = ()
    #: names of the constructor arguments that choose the estimator (not options of the pair)
    estimator_keywords: ClassVar[tuple[str, ...]] = ("estimator",)

    def __init__(self, network: AttentionNetwork) -> None:
        if not isinstance(network, AttentionNetwork):
            raise TypeError(f"{type(self).__name__}: network must be an AttentionNetwork, got {type(network).__name__}")
        self.network = network
        self._estimator = type(self).estimators[0] if type(self).estimators else None

    # -- the estimator ----------------------------------------------------------------------------------------
    def set_estimator(self, estimator: Estimator | str | None) -> Estimator:
        """Make ``estimator`` (an object, its name, or ``None``: the default) the pair's; ``ValueError`` naming
        the allowed ones when :attr:`estimators` has none of its kind."""
        from pyro_attention.inference.estimators import resolve

        self._estimator = resolve(estimator, type(self).estimators, type(self).__name__)
        return self._estimator

    def get_estimator(self) -> Estimator:
        """The estimator :meth:`elbo` uses (every pair has one; the chosen one where there is a choice)."""
        est = self.__dict__.get("_estimator")
        if est is None:
            raise NotImplementedError(
                f"{type(self).__name__}: no estimator; list them in `estimators` or define elbo()"
            )
        return est

    @property
    def estimator(self) -> Estimator:
        """The estimator chosen at construction; only pairs with a choice of estimator (more than one in
        :attr:`estimators`) have this attribute.  It equals its name (``pair.estimator == "enum"``)."""
        if len(type(self).estimators) < 2:
            raise AttributeError(
                f"{type(self).__name__} has no choice of estimator (get_estimator() gives the one it uses)"
            )
        return self.get_estimator()

    @estimator.setter
    def estimator(self, estimator: Estimator | str | None) -> None:
        self.set_estimator(estimator)

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

    def posterior_logits(self, enc: Encoded) -> Tensor:
        """Inference-network logits ``(B, T, S)``: ``-inf`` at padded sources, the prior's at padded targets."""
        scores = torch.where(enc.target_mask.unsqueeze(-1), self.network.posterior_scores(enc), enc.prior_scores)
        return mask_scores(scores, enc.source_mask)

    def attention_prior(self, enc: Encoded) -> Tensor:
        """Expected prior attention weights ``E_p[z_t]`` as ``(B, T, S)`` probabilities (0 at padding)."""
        return torch.softmax(self.prior_logits(enc), dim=-1)

    def default_rule(self) -> str:
        """:attr:`prediction_rule`, or ``"soft"`` for deterministic pairs and ``"marginal"`` otherwise."""
        return self.prediction_rule or ("soft" if self.latent == "none" else "marginal")

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
        """The Pyro ELBO that trains the pair: its estimator's (``self.get_estimator().elbo(self)``)."""
        return self.get_estimator().elbo(self)

    def __repr__(self) -> str:
        est = getattr(self, "estimator", None)
        return f"{type(self).__name__}({'estimator=' + repr(str(est)) if est is not None else ''})"


def observed_log_likelihood(logits: Tensor, enc: Encoded) -> Tensor:
    """``log softmax(logits)`` at the observed targets, ``(B, T)``, zero at padded targets."""
    return logits.log_softmax(-1).gather(-1, enc.target.unsqueeze(-1)).squeeze(-1) * enc.target_mask


def check_estimator(pair: str, estimator: str) -> str:
    """``estimator`` if it is a name of :data:`ESTIMATORS` (kept for callers of the string API; the pairs use
    :meth:`AlignmentPair.set_estimator`)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"{pair}: estimator must be one of {ESTIMATORS}, got {estimator!r}")
    return estimator
