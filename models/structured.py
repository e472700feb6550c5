r"""Segmentation attention (Kim et al. 2017): a binary linear-chain CRF over the source, per target position.

For each target position ``t`` the source positions carry binary selections :math:`z_{t,i} \in \{0, 1\}` with

.. math::

    p(z_t \mid x) \propto \exp\Big(\sum_i a_{t,i} z_{t,i} + \sum_{i} A(z_{t,i}, z_{t,i+1})\Big),

where :math:`a_{t,i}` are the network's prior scores (``enc.prior_scores``, the unary of ``z = 1``; ``z = 0``
has unary 0) and :math:`A` is a learned :math:`2 \times 2` transition matrix owned by the pair (registered
with ``pyro.module("structure", ...)``; zero at initialisation, when the chain is the "sigmoid attention" of
independent Bernoullis).  Padded source positions are excluded exactly (:mod:`~pyro_attention.distributions.
structures`).  The two pairs here differ in what is combined at prediction -- the paper's point, now for a
structured alignment:

:class:`SegmentationAttention` -- *expected representation* (SAN's segmentation attention):

.. math::

    m_{t,i} = p(z_{t,i} = 1 \mid x), \qquad c_t = \lambda\,\frac{\sum_i m_{t,i}\, x_i}{\sum_i m_{t,i}}, \qquad
    y_t \sim p(y_t \mid x, y_{<t}, c_t).

* **What is random:** nothing in the model; the chain's marginals are deterministic weights (no ``"align"``
  site).
* **What the prior and the posterior see:** the chain sees the source and the query / target prefix (through
  the prior scores) and the learned transitions; there is no posterior.
* **What is combined at prediction:** representations: one network run on :math:`\mathbb{E}_p[\cdot]`-weighted
  source values.
* **Training and prediction:** maximum likelihood; ``Trace_ELBO`` with the empty guide is exactly
  ``-log p(y | x)``.

*Normalisation.*  The SAN paper (Sec. 3.2) defines the unnormalised :math:`c = \sum_i p(z_i = 1)\, x_i`; its
released NMT code (harvardnlp/struct-attn, ``models/models-nmt.lua``) L1-normalises the marginals and multiplies
by a constant :math:`\lambda` (default 2).  We normalise by default with :math:`\lambda = 1`: the context is then
a convex combination of source values, of the scale every task network here was built for, and it equals
``expected_context(attention_prior(enc), enc.values)``, so the package's soft-rule prediction
(``inference.predict(rule="soft")``) is this pair's own prediction.  ``normalize=False`` gives the paper's
unnormalised sum (``scale`` is then ignored); ``scale`` sets :math:`\lambda`.

:class:`SegmentationMarginal` -- the chain as a *real latent variable*, marginalised out of the prediction:

.. math::

    z_t \sim p(z_t \mid x), \qquad r_t = \mathrm{first}(z_t) = \min\{i : z_{t,i} = 1\}
    \ (\varnothing \text{ if none}), \qquad y_t \sim p(y_t \mid x, y_{<t}, c = x_{r_t}) \ (c = 0 \text{ for }
    \varnothing),

    \log p(y_t \mid x) = \log \sum_{z_t} p(z_t \mid x)\, p(y_t \mid x, x_{\mathrm{first}(z_t)})
    = \log \Big[\sum_i P(r_t = i)\, p(y_t \mid x, x_i) + P(r_t = \varnothing)\, p(y_t \mid x, 0)\Big].

The output reads the *first selected* source position -- the read-out of hard monotonic attention (Raffel et al.
2017: scan left to right, stop at the first position whose selection fires, a zero context if none fires), with
the independent Bernoulli selections replaced by SAN's segmentation chain and one scan per target position.
Why this read-out: the context of the issue's first suggestion, :math:`\sum_i z_i x_i / \max(1, \sum_i z_i)`,
couples all :math:`z_i` in one factor, so exact enumeration costs :math:`2^S`; "is position :math:`i` the first
selected one" is a function of :math:`(r, z_i)` alone (:math:`r = i \Rightarrow z_i = 1`,
:math:`r > i \Rightarrow z_i = 0`), so the model factorises along the chain.  It is written as a directed model
with the read position sampled first, from its exact marginal, and the chain given it:

.. math::

    p(r, z \mid x) = P(r) \prod_i p(z_i \mid z_{i-1}, r), \qquad
    p(z_i \mid z_{i-1}, r) = \begin{cases} [z_i = 0] & i < r \\ [z_i = 1] & i = r \\
    p(z_i \mid z_{i-1}) & i > r \end{cases}

which is exactly :math:`p(z \mid x)\,[r = \mathrm{first}(z)]` (the Markov property gives the chain after
:math:`r`), so ``Predictive`` draws ``(r, z)`` from the prior jointly and exactly.  :math:`P(r)` and
:math:`p(z_i \mid z_{i-1})` come from the chain's backward messages
(:func:`~pyro_attention.distributions.structures.chain_first_selected`,
:func:`~pyro_attention.distributions.structures.chain_conditionals`).

* **What is random:** the binary selections ``z_{t,i}`` (sites ``"align_{i}"``, one per source position ``i``,
  each an array over the ``"batch"`` and ``"target"`` plates) and the read position ``r_t`` (site ``"first"``,
  values ``0..S-1`` and ``S`` for "nothing selected"), a deterministic function of the selections.
* **What the prior and the posterior see:** the prior chain sees the source and query / target prefix; the
  exact posterior :math:`p(z_t \mid x, y)` is available by Bayes' rule
  (:meth:`SegmentationMarginal.selection_marginals`).
* **What is combined at prediction:** output likelihoods, :math:`\mathbb{E}_{p(z \mid x)}[p(y \mid x, z)]`.
* **Training and prediction:** exact enumeration.  ``TraceEnum_ELBO`` with the empty guide enumerates ``"first"``
  (``S + 1`` values) and every ``"align_{i}"`` (2 values) in parallel inside ``pyro.markov`` over source
  positions, so variable elimination costs :math:`O(S^2)` per token, not :math:`2^S`; ``-loss`` is the exact
  ``log p(y | x)``, checked against brute force over all :math:`2^S` selections in
  ``tests/models/test_structured.py``.  :meth:`SegmentationMarginal.log_likelihood` gives the same number per token by
  the dynamic programme, which ``inference.log_likelihood`` calls (a broadcast of the enumerated sites' tensors
  could not tell ``pyro.markov``'s recycled enumeration dims apart).

References: [1] Kim, Denton, Hoang, Rush, "Structured Attention Networks", ICLR 2017. [2] Raffel, Luong, Liu,
Weiss, Eck, "Online and Linear-Time Attention by Enforcing Monotonic Alignments", ICML 2017. [3] Deng, Kim,
Chiu, Guo, Rush, "Latent Alignment and Variational Attention", NeurIPS 2018. [4] Obermeyer et al., "Tensor
Variable Elimination for Plated Factor Graphs", ICML 2019.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro.ops.indexing import Vindex
from torch import Tensor, nn

from pyro_attention.distributions import AlignedCategorical
from pyro_attention.distributions.aligned import OutputCategorical
from pyro_attention.distributions.enumeration import observed_table
from pyro_attention.distributions.structures import (
    chain_conditionals,
    chain_first_selected,
    chain_log_partition,
    chain_marginals,
)
from pyro_attention.inference.estimators import Enumerate, Estimator, MaximumLikelihood
from pyro_attention.inference.evaluate import LogLikelihood
from pyro_attention.networks.base import AttentionNetwork, Encoded, expected_context, gather_context
from pyro_attention.pair import AlignmentPair, Rule, observed_log_likelihood

__all__ = ["ChainTransition", "SegmentationAttention", "SegmentationMarginal"]


class ChainTransition(nn.Module):
    """The learned transition potentials :math:`A(z_i, z_{i+1})`, one ``(2, 2)`` matrix shared by all positions."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(2, 2))


class _SegmentationChain(AlignmentPair):
    """What both segmentation pairs share: the chain's potentials from the prior scores and the transitions."""

    def __init__(self, network: AttentionNetwork) -> None:
        super().__init__(network)
        self.transition = ChainTransition()

    def owned_modules(self) -> dict[str, nn.Module]:
        return {"structure": self.transition}

    def potentials(self, enc: Encoded) -> tuple[Tensor, Tensor, Tensor]:
        """The chain's potentials: ``unary (B, T, S, 2)`` (``[..., 1]`` = prior scores, ``[..., 0]`` = 0),
        ``pairwise (2, 2)`` (the learned transitions) and the source mask ``(B, T, S)``."""
        scores = enc.prior_scores
        unary = torch.stack([torch.zeros_like(scores), scores], dim=-1)
        mask = enc.source_mask.unsqueeze(-2).expand(scores.shape)
        return unary, self.transition.weight.to(scores.dtype), mask

    def register(self, batch: Any) -> Encoded:
        """Register the network and the transitions with Pyro and encode ``batch``."""
        pyro.module("structure", self.transition)
        return self.encode(batch)

    def log_partition(self, enc: Encoded) -> Tensor:
        """``log Z`` of each target position's chain, ``(B, T)``."""
        return chain_log_partition(*self.potentials(enc))

    def selection_prior(self, enc: Encoded) -> Tensor:
        """``p(z_{t,i} = 1 | x)`` ``(B, T, S)``: the chain's marginals (0 at padded sources); differentiable."""
        return chain_marginals(*self.potentials(enc))


class ExpectedRepresentation:
    """Shared by the deterministic structured pairs: ``Trace_ELBO`` (= exact NLL), and their own likelihood and
    prediction from ``self.output_logits(enc)`` (the network run once on the structured context)."""

    network: AttentionNetwork
    estimators: ClassVar[tuple[Estimator, ...]] = (MaximumLikelihood(),)

    def output_logits(self, enc: Encoded) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    @torch.no_grad()
    def log_likelihood(self, batch: Any, num_samples: int = 100, proposal: str | None = None) -> LogLikelihood:
        """``log p(y_t | x, c_t)`` per token (exact: the model is deterministic; ``num_samples`` and ``proposal``
        are not used).  Prediction is the base class's soft rule, whose :meth:`soft_context` is the structured
        context."""
        enc = self.network.encode(batch)
        per_token = observed_log_likelihood(self.output_logits(enc), enc)
        return LogLikelihood(per_token, per_token.sum(-1), enc.target_mask.sum(-1), True, "deterministic")


class SegmentationAttention(ExpectedRepresentation, _SegmentationChain):
    """SAN segmentation attention: the output sees the chain-marginal-weighted source values; empty guide.

    :param normalize: divide the marginals by their sum (default) or use SAN's unnormalised sum.
    :param scale: the constant :math:`\\lambda` multiplying normalised weights (SAN's NMT code uses 2).
    """

    latent: ClassVar[str] = "none"
    label: ClassVar[str] = "segmentation"
    paper_row: ClassVar[str] = "Structured Attention Networks: segmentation attention"

    def __init__(self, network: AttentionNetwork, normalize: bool = True, scale: float = 1.0) -> None:
        super().__init__(network)
        self.normalize = bool(normalize)
        self.scale = float(scale)

    def attention_prior(self, enc: Encoded) -> Tensor:
        """Normalised marginals :math:`m_{t,i} / \\sum_j m_{t,j}` ``(B, T, S)`` (0 at padded sources)."""
        marginals = self.selection_prior(enc)
        return marginals / marginals.sum(-1, keepdim=True).clamp(min=torch.finfo(marginals.dtype).tiny)

    def context(self, enc: Encoded) -> Tensor:
        """The context :math:`c_t` ``(B, T, D)`` the output network sees."""
        if self.normalize:
            weights = self.attention_prior(enc)
            weights = weights * self.scale if self.scale != 1.0 else weights
        else:
            weights = self.selection_prior(enc)
        return expected_context(weights, enc.values)

    def soft_context(self, enc: Encoded) -> Tensor:
        return self.context(enc)

    def output_logits(self, enc: Encoded) -> Tensor:
        return self.network.output_logits(enc, self.context(enc))

    def model(self, batch: Any) -> None:
        enc = self.register(batch)
        logits = self.output_logits(enc)
        with self.plates(enc):
            self.observe(enc, OutputCategorical(logits))


_OFF = (0.0, float("-inf"))  # log-probabilities of a forced z = 0
_ON = (float("-inf"), 0.0)  # ... and of a forced z = 1


class SegmentationMarginal(_SegmentationChain):
    """The segmentation chain as a latent variable; the output reads the first selected source position.

    Sites: ``"first"`` (the read position, ``S`` = nothing selected), ``"align_{i}"`` for ``i = 0..S-1`` (the
    selections, all enumerated), ``"y"``.  The guide is empty; ``TraceEnum_ELBO`` gives the exact
    ``-log p(y | x)``.
    """

    latent: ClassVar[str] = "structured"
    deterministic: ClassVar[bool] = False
    #: the exact marginal over read positions (its own dynamic programme), or the soft rule on the read prior
    rules: ClassVar[tuple[Rule, ...]] = (Rule.MARGINAL, Rule.SOFT)
    label: ClassVar[str] = "segmentation-marginal"
    paper_row: ClassVar[str] = "Segmentation chain, marginal likelihood (first-selected read-out)"
    estimators: ClassVar[tuple[Estimator, ...]] = (Enumerate(),)

    # -- deterministic pieces -------------------------------------------------------------------------------
    def read_distribution(self, enc: Encoded) -> Tensor:
        """``log P(r_t = i | x)`` ``(B, T, S + 1)``; the last entry is "nothing selected"."""
        return chain_first_selected(*self.potentials(enc))

    def attention_prior(self, enc: Encoded) -> Tensor:
        """``P(r_t = i | x, r_t != nothing)`` ``(B, T, S)``: where the output reads, given that it reads a
        source position (0 at padded sources).  The "nothing" mass is ``read_distribution(enc)[..., -1]``."""
        return torch.softmax(self.read_distribution(enc)[..., :-1], dim=-1)

    @staticmethod
    def _read_values(enc: Encoded) -> Tensor:
        """Source values with the zero context of "nothing selected" appended, ``(B, S + 1, D)``."""
        values = enc.values
        return torch.cat([values, values.new_zeros(values.shape[0], 1, values.shape[-1])], dim=1)

    def read_log_likelihood(self, enc: Encoded) -> Tensor:
        """``log p(y_t | x, c = x_i)`` at the observed tokens for every read position, ``(B, T, S + 1)``."""
        net = self.network
        null = net.output_logits(enc, enc.values.new_zeros(enc.shape[:2] + enc.values.shape[-1:]))
        null = null.gather(-1, enc.target.unsqueeze(-1)) - null.logsumexp(-1, keepdim=True)
        return torch.cat([observed_table(net, enc, net.chunk_size, net.keep_bytes), null], dim=-1)

    # -- the pair -------------------------------------------------------------------------------------------
    def model(self, batch: Any) -> None:
        enc = self.register(batch)
        net = self.network
        S = enc.shape[2]
        potentials = self.potentials(enc)
        log_read = chain_first_selected(*potentials)
        init, trans = chain_conditionals(*potentials)
        off, on = init.new_tensor(_OFF), init.new_tensor(_ON)
        values = self._read_values(enc)
        with self.plates(enc):
            first = pyro.sample("first", dist.Categorical(logits=log_read), infer={"enumerate": "parallel"})
            after = first.unsqueeze(-1)
            z = None
            for i in pyro.markov(range(S)):
                logits = init if i == 0 else Vindex(trans[..., i - 1, :, :])[..., z, :]
                logits = torch.where(after > i, off, torch.where(after == i, on, logits))
                z = pyro.sample(f"align_{i}", dist.Categorical(logits=logits), infer={"enumerate": "parallel"})
            # "first" enumerated, (S + 1, 1, 1): one table of observed-token log-likelihoods serves all reads
            table = self.read_log_likelihood(enc) if first.dim() > 2 else None
            self.observe(enc, AlignedCategorical(first, net, enc, table, values))

    # -- exact evaluation -------------------------------------------------------------------------------------
    @torch.no_grad()
    def log_likelihood(self, batch: Any, num_samples: int = 100, proposal: str | None = None) -> LogLikelihood:
        """Exact ``log p(y_t | x) = log sum_r P(r) p(y_t | x, x_r)`` per token by the dynamic programme
        (``num_samples`` and ``proposal`` are not used)."""
        enc = self.network.encode(batch)
        per_token = (self.read_distribution(enc) + self.read_log_likelihood(enc)).logsumexp(-1)
        per_token = per_token * enc.target_mask
        method = "dynamic programme over the segmentation chain (first-selected read-out)"
        return LogLikelihood(per_token, per_token.sum(-1), enc.target_mask.sum(-1), True, method)

    def predictive(self, enc: Encoded, rule: Rule, num_samples: int = 100, k: int = 5) -> Tensor:
        """``"marginal"``: ``p(y_t | x) = sum_r P(r) p(y_t | x, x_r)`` ``(B, T, V)`` exactly; ``"soft"``: the
        network on the context of the read prior (:meth:`attention_prior`)."""
        if rule is not Rule.MARGINAL:
            return super().predictive(enc, rule, num_samples=num_samples, k=k)
        S = enc.shape[2]
        index = torch.arange(S + 1, device=enc.values.device).view(-1, 1, 1)
        probs = self.network.output_logits(enc, gather_context(self._read_values(enc), index)).softmax(-1)
        weights = self.read_distribution(enc).exp().permute(2, 0, 1).unsqueeze(-1)  # (S + 1, B, T, 1)
        return (weights * probs).sum(0)

    @torch.no_grad()
    def posterior_probs(self, batch: Any) -> Tensor:
        """The exact ``P(r_t = i | x, y, r_t != nothing)`` ``(B, T, S)``, the posterior counterpart of
        :meth:`attention_prior` (Bayes' rule over the ``S + 1`` read positions; padded targets: the prior)."""
        enc = self.network.encode(batch)
        table = self.read_log_likelihood(enc) * enc.target_mask.unsqueeze(-1)
        return torch.softmax((self.read_distribution(enc) + table)[..., :-1], dim=-1)

    def selection_marginals(self, batch: Any) -> dict[str, Tensor]:
        """Prior ``p(z_{t,i} = 1 | x)`` and exact posterior ``p(z_{t,i} = 1 | x, y)`` marginals, ``(B, T, S)``.

        The posterior uses :math:`\\partial \\log p(y \\mid x) / \\partial a_{t,i} = \\mathbb{E}_{p(z \\mid x,
        y)}[z_{t,i}] - \\mathbb{E}_{p(z \\mid x)}[z_{t,i}]`.  Padded targets: posterior = prior.
        """
        with torch.no_grad():
            enc = self.network.encode(batch)
            unary, pairwise, mask = self.potentials(enc)
            table = self.read_log_likelihood(enc) * enc.target_mask.unsqueeze(-1)
        with torch.enable_grad():
            leaf = unary.detach().requires_grad_()
            log_p = (chain_first_selected(leaf, pairwise, mask) + table).logsumexp(-1)
            (grad,) = torch.autograd.grad(log_p.sum(), leaf)
        prior = chain_marginals(unary, pairwise, mask).detach()
        return {"prior": prior, "posterior": (prior + grad[..., 1]).clamp(0.0, 1.0) * mask}
