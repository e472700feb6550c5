"""The generative model shared by the categorical pairs (marginal likelihood, hard and variational attention).

They differ only in their guide and objective, which is the paper's point: one model
``p(y, z | x) = prod_t p(z_t | x, y_<t) p(y_t | x, y_<t, z_t)`` with ``z_t`` categorical over the source,
trained by exact marginal likelihood (no guide), by ``E_p[log p(y | x, z)]`` (guide = prior) or by an ELBO with
an amortised ``q(z | x, y)``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import infer_discrete
from torch import Tensor

from pyro_attention.distributions import AlignedCategorical
from pyro_attention.distributions.enumeration import logits_at_values, observed_table
from pyro_attention.inference.estimators import Enumerate, Estimator, ScoreFunction
from pyro_attention.inference.evaluate import LogLikelihood, enumerated_log_joint
from pyro_attention.networks.base import AttentionNetwork, Encoded, gather_context
from pyro_attention.pair import MAX_PLATE_NESTING, AlignmentPair, Rule, kmax_mixture


class CategoricalAlignmentModel(AlignmentPair):
    """``z_t ~ Categorical(softmax(a_t))`` over real source positions, ``y_t ~ p(y_t | x, x_{z_t})``.

    The categorical family's answers (:mod:`pyro_attention.pair`): ``log_likelihood`` exact by enumeration (the
    base class's traced sum), ``kmax_log_likelihood``, ``predict`` under ``"marginal"`` (exact), ``"soft"`` and
    ``"kmax"`` (also when decoding), the exact ``posterior_probs`` and ``map_alignment``, and ``guide_kl``.
    """

    latent: ClassVar[str] = "categorical"
    deterministic: ClassVar[bool] = False
    rules: ClassVar[tuple[Rule, ...]] = (Rule.MARGINAL, Rule.SOFT, Rule.KMAX)
    decodes: ClassVar[frozenset[Rule]] = frozenset(Rule)

    # -- what the pair answers ----------------------------------------------------------------------------------
    def _kmax(self, enc: Encoded, k: int, renormalise: bool) -> Tensor:
        """:func:`~pyro_attention.pair.kmax_mixture` of the prior over the output distributions, ``(B, T, V)``."""
        net = self.network

        def log_probs(index: Tensor) -> Tensor:  # (B, T, K) -> (B, T, K, V)
            logits = net.output_logits(enc, gather_context(enc.values, index.permute(2, 0, 1)))  # (K, B, T, V)
            return logits.log_softmax(-1).permute(1, 2, 0, 3)

        return kmax_mixture(self.prior_logits(enc).log_softmax(-1), k, log_probs, renormalise)

    @torch.no_grad()
    def kmax_log_likelihood(self, batch: Any, k: int) -> LogLikelihood:
        """``log sum_{s in top-K} p(z_t = s | x) p(y_t | x, z_t = s)`` per token: the marginal over the ``K`` most
        probable alignments under the prior (Deng et al. 2018, K-max).  A lower bound on the exact value, equal to
        it when ``K`` covers every real source position."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        enc = self.network.encode(batch)
        log_p = self._kmax(enc, k, renormalise=False)  # (B, T, V)
        per_token = log_p.gather(-1, enc.target.unsqueeze(-1)).squeeze(-1) * enc.target_mask
        exact = k >= int(enc.source_mask.sum(-1).max())
        method = f"K-max, K={k}" + (" (covers every source position: exact)" if exact else " (a lower bound on log p)")
        return LogLikelihood(per_token, per_token.sum(-1), enc.target_mask.sum(-1), exact, method)

    def predictive(self, enc: Encoded, rule: Rule, num_samples: int = 100, k: int = 5) -> Tensor:
        """``"marginal"``: :math:`\\sum_s p(z_t = s \\mid x) p(y_t \\mid x, z_t = s)` exactly; ``"kmax"``: the
        same sum over the ``k`` most probable alignments, renormalised; ``"soft"``: the base class's."""
        if rule is Rule.KMAX:
            return self._kmax(enc, k, renormalise=True).exp()
        if rule is Rule.MARGINAL:
            weights = self.attention_prior(enc).permute(2, 0, 1).unsqueeze(-1)  # (S, B, T, 1)
            return (weights * logits_at_values(self.network, enc).softmax(-1)).sum(0)
        return super().predictive(enc, rule, num_samples=num_samples, k=k)

    @torch.no_grad()
    def posterior_probs(self, batch: Any) -> Tensor:
        """The exact ``p(z_t = s | x, y)``, proportional to ``p(z_t = s | x) p(y_t | x, z_t = s)``, by
        enumeration, ``(B, T, S)``."""
        joint, trace = enumerated_log_joint(self, batch)  # (S, B, T)
        support = trace.nodes["align"]["value"].reshape(-1)
        if not torch.equal(support, torch.arange(len(support), device=support.device)):
            raise RuntimeError("unexpected enumeration support for site 'align'")
        return joint.softmax(0).permute(1, 2, 0)

    def guide_kl(self, probs: dict[str, Tensor]) -> Tensor | None:
        """``sum_s q(s) log(q(s) / p(s | x, y))`` per token where ``probs`` has the guide and the posterior."""
        if "guide" not in probs or "posterior" not in probs:
            return None
        q, post = probs["guide"], probs["posterior"]
        tiny = torch.finfo(q.dtype).tiny
        return (q * (q.clamp(min=tiny).log() - post.clamp(min=tiny).log())).sum(-1)

    @torch.no_grad()
    def map_alignment(self, batch: Any) -> Tensor:
        """The exact MAP alignment ``argmax_z p(z | x, y)`` per token, ``(B, T)``, via ``infer_discrete``."""
        model = infer_discrete(self.model, first_available_dim=-1 - MAX_PLATE_NESTING, temperature=0)
        return poutine.trace(model).get_trace(batch).nodes["align"]["value"]

    def model(self, batch: Any) -> None:
        enc = self.encode(batch)
        net = self.network
        with self.plates(enc):
            z = pyro.sample("align", dist.Categorical(logits=self.prior_logits(enc)), infer={"enumerate": "parallel"})
            # z enumerated, (S, 1, 1): one table of observed-token log-likelihoods (B, T, S) serves all S
            # alignments; z sampled, (B, T): the logits of that one alignment are cheaper.  Both give the same
            # numbers, so this is a cost choice, and not the estimator's to make: the model is also traced
            # outside training -- enumerated by the exact log-likelihood whatever the estimator, sampled by
            # Predictive -- so it reads the value it got (more than the two plate dims: several alignments per
            # token, enumerated or vectorised particles).
            table = observed_table(net, enc, net.chunk_size, net.keep_bytes) if z.dim() > 2 else None
            self.observe(enc, AlignedCategorical(z, net, enc, table))


class GuidedCategoricalAlignment(CategoricalAlignmentModel):
    """The categorical model with a categorical guide ``Categorical(logits=self.guide_logits(enc))``.

    The estimator (an object of :mod:`pyro_attention.inference.estimators`, or its name) decides only how the
    ELBO's expectation over the guide is computed; it gives the ELBO and the guide site's ``infer``:

    * ``Enumerate()`` / ``"enum"`` -- the guide site is enumerated in parallel by ``TraceEnum_ELBO`` (exact);
    * ``ScoreFunction()`` / ``"sample"`` -- one draw per token and
      :class:`~pyro_attention.inference.ReinforceKL_ELBO`: the KL in closed form, REINFORCE (Rao-Blackwellised
      over the plates) for ``E_q[log p(y | x, z)]`` with the soft-attention log-likelihood
      ``log p(y_t | x, E_p[z_t])`` as ``baseline_value`` -- the paper's estimator.  (The guide's ``infer`` uses
      Pyro's baseline key, so ``TraceGraph_ELBO``, whose KL is sampled, runs too.)
    """

    estimators: ClassVar[tuple[Estimator, ...]] = (Enumerate(), ScoreFunction())

    def __init__(self, network: AttentionNetwork, estimator: Estimator | str = "enum") -> None:
        super().__init__(network)
        self._choose_estimator(estimator)

    def guide_logits(self, enc: Encoded) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def guide_probs(self, enc: Encoded) -> Tensor:
        return torch.softmax(self.guide_logits(enc), -1)

    def guide(self, batch: Any) -> None:
        enc = self.encode_for_model(batch)
        with self.plates(enc):
            infer = self.estimator.guide_infer(self, enc)
            pyro.sample("align", dist.Categorical(logits=self.guide_logits(enc)), infer=infer)
