"""The base of every model/guide pair (deterministic plumbing only; the sample statements live in models/).

A pair = alignment family x task network x estimator.  Conventions (VISION.md):

* ``pair.model(batch)`` and ``pair.guide(batch)``; the random alignment is the sample site ``"align"``, the
  observation is ``"y"`` (``obs=`` the targets, masked where padded);
* plates ``"batch"`` (dim -2) and ``"target"`` (dim -1), so enumeration uses dims -3 and below;
* ``pair.elbo()`` returns the Pyro ELBO the estimator needs;
* padded sources get exactly zero prior and posterior mass; padded targets contribute nothing to any loss
  (``"y"`` is masked there and every guide equals the prior there, so ``log p(z) - log q(z) = 0``).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, ClassVar

import pyro
import torch
from pyro import poutine
from torch import Tensor

from pyro_attention.networks.base import AttentionNetwork, Encoded, expected_context, mask_scores

#: Estimators of the pairs with a discrete alignment and an (amortised or prior) guide.
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

    def __init__(self, network: AttentionNetwork) -> None:
        if not isinstance(network, AttentionNetwork):
            raise TypeError(f"{type(self).__name__}: network must be an AttentionNetwork, got {type(network).__name__}")
        self.network = network

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

    def soft_log_likelihood(self, enc: Encoded) -> Tensor:
        """``log p(y_t | x, c_t = E_p[x_z])`` per token ``(B, T)``: soft attention with the prior's weights."""
        logits = self.network.output_logits(enc, expected_context(self.attention_prior(enc), enc.values))
        return observed_log_likelihood(logits, enc)

    # -- the pair -------------------------------------------------------------------------------------------
    def model(self, batch: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def guide(self, batch: Any) -> None:
        """The empty guide (exact or deterministic pairs)."""

    def elbo(self) -> pyro.infer.ELBO:  # pragma: no cover - interface
        raise NotImplementedError

    def __repr__(self) -> str:
        est = getattr(self, "estimator", None)
        return f"{type(self).__name__}({'estimator=' + repr(est) if est else ''})"


def observed_log_likelihood(logits: Tensor, enc: Encoded) -> Tensor:
    """``log softmax(logits)`` at the observed targets, ``(B, T)``, zero at padded targets."""
    picked = logits.gather(-1, enc.target.unsqueeze(-1)).squeeze(-1)
    return (picked - torch.logsumexp(logits, -1)) * enc.target_mask


def check_estimator(pair: str, estimator: str) -> str:
    if estimator not in ESTIMATORS:
        raise ValueError(f"{pair}: estimator must be one of {ESTIMATORS}, got {estimator!r}")
    return estimator
