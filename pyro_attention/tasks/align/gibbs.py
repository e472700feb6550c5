r"""Collapsed Gibbs sampling of a trained HMM aligner's alignments: the lexical tables integrated out.

EM gives the HMM aligner (:class:`~pyro_attention.networks.lexical.HMMNetwork`) point estimates of its lexical
tables ``t(y | x)``; a word seen a few times gets a table row fitted to those few sentences (IBM models' "garbage
collection").  With the tables under a symmetric ``Dirichlet(alpha)`` prior and integrated out, as eflomal and
Mermer & Saraçlar (2011) do, the alignments of all sentence pairs are one joint posterior, and the conditional of one
target word's link given every other link is

.. math::

    p(z_t = s \mid z_{-t}, x, y) \propto \frac{n_{-t}(x_s, y_t) + \alpha}{n_{-t}(x_s) + V \alpha}\;
    p(z_t = s \mid z_{t-1}) \, p(z_{t+1} \mid z_t = s),

with ``n_{-t}`` the link counts of every other word of the text (the chain's factors: the trained jumps, diagonal and
NULL word, Och & Ney's twins).  :class:`CollapsedGibbs` starts from the trained HMM's posterior argmax, sweeps each
sentence's words in order, and averages the link indicators of the sweeps after the burn-in: a Monte Carlo estimate
of ``p(z_t = s | x, y)`` under the collapsed model.  Batches of sentences are swept together, each reading the counts
of the others as they stand; a batch runs all its sweeps with the other batches' links held (a blocked scan), so memory
holds one batch's tensors and the counts.  With ``alpha=None`` the sampler reads the trained table instead: its
average is then the HMM's own posterior (the tests hold it to forward-backward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from pyro_attention.data.translation import TranslationBatch, collate
from pyro_attention.networks.lexical import HMMNetwork, with_null_word

__all__ = ["CollapsedGibbs", "GibbsBatch", "GibbsChain"]

_NEG = -1e30  # a log-probability of zero that stays finite in sums


@dataclass(frozen=True)
class CollapsedGibbs:
    """How to sample: ``sweeps`` over each batch (the first ``sweeps // 3`` discarded), a ``Dirichlet(alpha)``
    prior on every table row (``None``: the trained table, not integrated out), and the random ``seed``."""

    sweeps: int = 30
    alpha: float | None = 1e-4
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.sweeps, bool) or not isinstance(self.sweeps, int) or self.sweeps < 2:
            raise ValueError(f"CollapsedGibbs: sweeps must be a whole number >= 2, got {self.sweeps!r}")
        if self.alpha is not None and not 0.0 < self.alpha < float("inf"):
            raise ValueError(f"CollapsedGibbs: alpha must be > 0 (or None: the trained table), got {self.alpha!r}")

    @property
    def burn_in(self) -> int:
        """The sweeps whose links are not averaged."""
        return self.sweeps // 3

    def chain(self, network: HMMNetwork, pairs: list[tuple[list[int], list[int]]],
              batches: list[list[int]], null_word: bool) -> GibbsChain:
        """The chain over the sentence ``pairs`` (source and target ids), swept in ``batches`` of their indices;
        ``null_word``: the sources get the NULL word in front (the network was trained with one)."""
        return GibbsChain(self, network, pairs, batches, null_word)


class GibbsChain:
    """One direction's chain: the links of every sentence pair and, with a prior, the text's link counts."""

    def __init__(self, sampler: CollapsedGibbs, network: HMMNetwork, pairs: list[tuple[list[int], list[int]]],
                 batches: list[list[int]], null_word: bool) -> None:
        if not isinstance(network, HMMNetwork):
            raise TypeError(f"CollapsedGibbs samples an HMM aligner's links, got {type(network).__name__}")
        table = network.lexical.table
        if sampler.alpha is not None and (table is None or network.decoder_expert is not None):
            raise ValueError("CollapsedGibbs(alpha=...) counts links in a sparse lexical table with no decoder's "
                             "expert; use alpha=None for this network")
        self.sampler, self.network, self.null_word = sampler, network, null_word
        self.pairs, self.batches = pairs, batches
        self.generator = torch.Generator().manual_seed(sampler.seed)
        self.links: list[Tensor] = []  # per batch: (B, T) link positions, 0 = NULL with a NULL word
        self.counts: Tensor | None = None
        self.row_counts: Tensor | None = None
        if sampler.alpha is not None:
            self.counts = torch.zeros(table.num_entries + table.source_vocab, dtype=torch.float64)
            self.row_counts = torch.zeros(table.source_vocab, dtype=torch.float64)
        network.eval()
        with torch.no_grad():
            for chunk in batches:
                state = self._state(chunk)
                self.links.append(state.posterior.argmax(-1) * state.target_mask)
                if self.counts is not None:
                    self._count(state, self.links[-1], +1.0)

    def _state(self, chunk: list[int]) -> GibbsBatch:
        pairs = [(with_null_word(self.pairs[i][0]) if self.null_word else self.pairs[i][0], self.pairs[i][1])
                 for i in chunk]
        return GibbsBatch(self.network, collate(pairs), self.null_word, self.counts is not None)

    def _count(self, state: GibbsBatch, links: Tensor, sign: float, t: int | None = None) -> None:
        """Add ``sign`` to the counts of the links at target position ``t`` (all positions: ``None``)."""
        at = slice(None) if t is None else slice(t, t + 1)
        z, real = links[:, at], state.target_mask[:, at]
        pair = state.pair[:, at].gather(2, z.unsqueeze(-1)).squeeze(-1)[real]
        ones = torch.full(pair.shape, sign, dtype=torch.float64)
        self.counts.index_add_(0, pair, ones)
        self.row_counts.index_add_(0, state.source.gather(1, z)[real], ones)

    def sample(self, k: int) -> tuple[Tensor, Tensor]:
        """Sweep batch ``k`` ``sampler.sweeps`` times: its link frequencies after the burn-in and the trained HMM's
        exact posterior, both ``(B, T, S)`` (the source positions as collated: the NULL word's column first when there
        is one)."""
        with torch.no_grad():
            state = self._state(self.batches[k])
            links = self.links[k]
            frequency = torch.zeros(state.log_t.shape if state.log_t is not None else state.pair.shape)
            for sweep in range(self.sampler.sweeps):
                self._sweep(state, links)
                if sweep >= self.sampler.burn_in:
                    frequency.scatter_add_(2, links.unsqueeze(-1), state.target_mask.unsqueeze(-1).float())
        return frequency / (self.sampler.sweeps - self.sampler.burn_in), state.posterior

    def _sweep(self, state: GibbsBatch, links: Tensor) -> None:
        B, T = links.shape
        rows = torch.arange(B)
        alpha = self.sampler.alpha
        last = torch.full((B,), -1, dtype=torch.long)  # the last real position before t (-1: none yet)
        for t in range(T):
            active = state.target_mask[:, t]
            real = (links > state.null) & state.target_mask
            if t + 1 < T:
                later = real[:, t + 1:]
                has_next = later.any(1)
                u = t + 1 + later.float().argmax(1)  # the next real link's target position
            else:
                has_next, u = torch.zeros(B, dtype=torch.bool), torch.full((B,), t)
            z_u = links[rows, u]
            if alpha is None:
                emit = state.log_t[:, t]
            else:
                self._count(state, links, -1.0, t)
                emit = ((self.counts[state.pair[:, t]] + alpha).log()
                        - (self.row_counts[state.source] + state.vocab * alpha).log()).float()
            score = emit + state.into(t, last) + state.out(u, z_u, last) * has_next.unsqueeze(1)
            score = score.masked_fill(~state.states, float("-inf"))
            new = torch.multinomial(torch.softmax(score, -1), 1, generator=self.generator).squeeze(1)
            links[:, t] = torch.where(active, new, links[:, t])
            if alpha is not None:
                self._count(state, links, +1.0, t)
            last = torch.where(active & (links[:, t] > state.null), links[:, t], last)


class GibbsBatch:
    """One batch's fixed quantities: emissions or table positions, and the chain's log-factors."""

    def __init__(self, network: HMMNetwork, batch: TranslationBatch, null_word: bool, collapsed: bool) -> None:
        self.source, self.target_mask = batch.source, batch.target_mask
        words = batch.source_mask.clone()
        if null_word:
            words[:, 0] = False
        self.states = batch.source_mask  # the NULL word (column 0) and the real words
        self.null = 0 if null_word else -1  # links above it are real words
        B, T = batch.target.shape
        S = words.shape[1]
        log_t, _, self.posterior = network.likelihood_terms(batch)
        self.log_t = None if collapsed else log_t.detach()
        if collapsed:
            table = network.lexical.table
            self.pair = table.positions(batch.source, batch.target)  # (B, T, S)
            self.vocab = table.target_vocab
        diagonal = (torch.zeros(B, T, S) if network.diagonal is None
                    else network.diagonal(batch.target_mask, words, offset=1 if null_word else 0))
        self.diagonal = diagonal.masked_fill(~words.unsqueeze(1), _NEG)  # (B, T, S)
        self.theta = network.transition.scores(S)  # (S', S)
        self.log_z = torch.logsumexp(self.theta.view(1, 1, S, S) + self.diagonal.unsqueeze(2), -1)  # (B, T, S')
        self.first = torch.log_softmax(self.diagonal[:, 0], -1)  # (B, S): the first position's distribution
        # log sum_r first(r) J_t(s | r) (B, T, S): after NULL words only, the chain moves from the position the
        # first NULL twin remembers, drawn from the first position's distribution
        moves = self.theta.view(1, 1, S, S) - self.log_z.unsqueeze(-1) + self.first.view(B, 1, S, 1)
        self.from_start = torch.logsumexp(moves, 2) + self.diagonal
        p0 = network.null_prob
        self.log_p0 = math.log(p0) if null_word else _NEG
        self.log_real = math.log(1.0 - p0) if null_word else 0.0

    def into(self, t: int, last: Tensor) -> Tensor:
        """``log p(z_t = s | links before t)`` ``(B, S)`` (``last``: the last real position before ``t``)."""
        B = len(last)
        if t == 0:
            log_p = self.first
        else:
            frm = last.clamp(min=0)
            jump = self.theta[frm] + self.diagonal[:, t] - self.log_z[torch.arange(B), t, frm].unsqueeze(1)
            log_p = torch.where((last >= 0).unsqueeze(1), jump, self.from_start[:, t])
        log_p = log_p + self.log_real
        if self.null == 0:
            log_p = torch.cat([log_p.new_full((B, 1), self.log_p0), log_p[:, 1:]], 1)
        return log_p

    def out(self, u: Tensor, z_u: Tensor, last: Tensor) -> Tensor:
        """``log p(z_u | z_t = s, ...)`` ``(B, S)`` of the next real link ``z_u`` at ``u`` (the NULL words between
        contribute ``p0`` whatever ``s``): from ``s`` when ``s`` is real, from the last real position when it is
        the NULL word."""
        rows = torch.arange(len(u))
        into_u = self.diagonal[rows, u, z_u]
        out = self.theta[:, z_u].T + into_u.unsqueeze(1) - self.log_z[rows, u]  # from every s' to z_u
        if self.null == 0:
            frm = last.clamp(min=0)
            stay = torch.where(last >= 0, self.theta[frm, z_u] + into_u - self.log_z[rows, u, frm],
                               self.from_start[rows, u, z_u])
            out = torch.cat([stay.unsqueeze(1), out[:, 1:]], 1)
        return out
