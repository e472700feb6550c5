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
of ``p(z_t = s | x, y)`` under the collapsed model.  The sentences of a batch are swept in parallel, so at step ``t``
a sentence does not see the counts of the links the others redraw at the same step; a batch runs all its sweeps with
the other batches' links held (a blocked scan), so memory holds one batch's tensors, the counts and the links.  With
``alpha=None`` the sampler reads the trained table instead: its average is then the HMM's own posterior (the tests
hold it to forward-backward).
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

    sweeps: int = 10
    alpha: float | None = 1e-4
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.sweeps, bool) or not isinstance(self.sweeps, int) or self.sweeps < 2:
            raise ValueError(f"CollapsedGibbs: sweeps must be a whole number >= 2, got {self.sweeps!r}")
        if self.alpha is not None and (isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float))
                                       or not 0.0 < self.alpha < float("inf")):
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
            self.counts = torch.zeros(table.num_entries + table.source_vocab, dtype=torch.int32)
            self.row_counts = torch.zeros(table.source_vocab, dtype=torch.int32)
        network.eval()
        with torch.no_grad():
            for chunk in batches:
                state = self._state(chunk, chain=False)
                links = state.posterior.argmax(-1) * state.target_mask
                if self.counts is not None:
                    self._count(state, links, +1)
                self.links.append(links.to(torch.int16))  # kept compact between a batch's sweeps

    def _state(self, chunk: list[int], chain: bool = True) -> GibbsBatch:
        pairs = [(with_null_word(self.pairs[i][0]) if self.null_word else self.pairs[i][0], self.pairs[i][1])
                 for i in chunk]
        return GibbsBatch(self.network, collate(pairs), self.null_word, self.counts is not None, chain)

    def _count(self, state: GibbsBatch, links: Tensor, sign: int, t: int | None = None) -> None:
        """Add ``sign`` to the counts of the links at target position ``t`` (all positions: ``None``)."""
        if t is None:
            z, weight, pair = links, state.target_mask, state.pair
        else:
            z, weight, pair = links[:, t: t + 1], state.target_mask[:, t: t + 1], state.pair[:, t]
        at = pair.gather(-1, z.unsqueeze(-1) if t is None else z).flatten()
        weight = weight.flatten().to(torch.int32) * sign
        self.counts.index_add_(0, at, weight)
        self.row_counts.index_add_(0, state.source.gather(1, z).flatten(), weight)

    def sample(self, k: int) -> tuple[Tensor, Tensor]:
        """Sweep batch ``k`` ``sampler.sweeps`` times: its link frequencies after the burn-in and the trained HMM's
        exact posterior, both ``(B, T, S)`` (the source positions as collated: the NULL word's column first when there
        is one)."""
        with torch.no_grad():
            state = self._state(self.batches[k])
            links = self.links[k].long()
            frequency = torch.zeros(state.log_t.shape if state.log_t is not None else state.pair.shape)
            for sweep in range(self.sampler.sweeps):
                self._sweep(state, links)
                if sweep >= self.sampler.burn_in:
                    frequency.scatter_add_(2, links.unsqueeze(-1), state.target_mask.unsqueeze(-1).float())
            self.links[k] = links.to(torch.int16)
        return frequency / (self.sampler.sweeps - self.sampler.burn_in), state.posterior

    def _sweep(self, state: GibbsBatch, links: Tensor) -> None:
        B, T = links.shape
        alpha = self.sampler.alpha
        last = torch.full((B,), -1, dtype=torch.long)  # the last real position before t (-1: none yet)
        # the next real link after each target position: the positions after t still hold the last sweep's links
        real = (links > state.null) & state.target_mask
        position = torch.where(real, torch.arange(T), T)
        after = torch.cat([position[:, 1:], position.new_full((B, 1), T)], 1)
        following = after.flip(1).cummin(1).values.flip(1)  # (B, T): T where none
        for t in range(T):
            active = state.target_mask[:, t]
            has_next = following[:, t] < T
            u = following[:, t].clamp(max=T - 1)
            z_u = links.gather(1, u.unsqueeze(1)).squeeze(1)
            if alpha is None:
                emit = state.log_t[:, t]
            else:
                self._count(state, links, -1, t)
                pairs = self.counts.index_select(0, state.pair[:, t].flatten()).view(B, -1).float()
                rows = self.row_counts.index_select(0, state.source.flatten()).view(B, -1).float()
                emit = (pairs + alpha).log() - (rows + state.vocab * alpha).log()
            score = emit + state.into(t, last) + state.out(u, z_u, last) * has_next.unsqueeze(1)
            score = score.masked_fill(~state.states, float("-inf"))
            # a draw from softmax(score) by its inverse CDF: the first state whose cumulative mass reaches the draw
            mass = torch.softmax(score, -1).cumsum(-1)
            draw = torch.rand(B, 1, generator=self.generator) * mass[:, -1:]
            new = (mass < draw).sum(-1)
            links[:, t] = torch.where(active, new, links[:, t])
            if alpha is not None:
                self._count(state, links, +1, t)
            last = torch.where(active & (links[:, t] > state.null), links[:, t], last)


class GibbsBatch:
    """One batch's fixed quantities: emissions or table positions, and the chain's log-factors."""

    def __init__(self, network: HMMNetwork, batch: TranslationBatch, null_word: bool, collapsed: bool,
                 chain: bool = True) -> None:
        self.source, self.target_mask = batch.source, batch.target_mask
        words = batch.source_mask.clone()
        if null_word:
            words[:, 0] = False
        self.states = batch.source_mask  # the NULL word (column 0) and the real words
        self.null = 0 if null_word else -1  # links above it are real words
        log_t, _, self.posterior = network.likelihood_terms(batch)
        self.log_t = None if collapsed else log_t.detach()
        if collapsed:
            table = network.lexical.table
            self.pair = table.positions(batch.source, batch.target)  # (B, T, S)
            self.vocab = table.target_vocab
        if chain:
            self._chain(network, words, null_word)

    def _chain(self, network: HMMNetwork, words: Tensor, null_word: bool) -> None:
        """The chain's log-factors: the diagonal, the jumps' normalisers, the start after NULL words only."""
        B, T = self.target_mask.shape
        S = words.shape[1]
        diagonal = (torch.zeros(B, T, S) if network.diagonal is None
                    else network.diagonal(self.target_mask, words, offset=1 if null_word else 0))
        self.diagonal = diagonal.masked_fill(~words.unsqueeze(1), _NEG)  # (B, T, S)
        self.theta = network.transition.scores(S)  # (S', S)
        # sums of exponentials as matrix products in float64, each factor shifted by its largest value
        theta = self.theta.double()
        top = theta.max()
        jumps = (theta - top).exp()  # (S', S)
        diag = self.diagonal.double()
        high = diag.max(-1, keepdim=True).values
        # log_z[b, t, s'] = log sum_s exp(theta[s', s] + diagonal[b, t, s]): the jump's normaliser from s'
        log_z = ((diag - high).exp() @ jumps.T).log() + high + top  # (B, T, S')
        self.log_z = log_z.float()
        self.first = torch.log_softmax(self.diagonal[:, 0], -1)  # (B, S): the first position's distribution
        # log sum_r first(r) J_t(s | r) (B, T, S): after NULL words only, the chain moves from the position the
        # first NULL twin remembers, drawn from the first position's distribution
        weight = self.first.double().unsqueeze(1) - log_z  # (B, T, r)
        most = weight.max(-1, keepdim=True).values
        self.from_start = (((weight - most).exp() @ jumps).log() + most + top + diag).float()
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
            jump = self.theta.index_select(0, frm) + self.diagonal[:, t] - self.log_z[:, t].gather(1, frm.unsqueeze(1))
            log_p = torch.where((last >= 0).unsqueeze(1), jump, self.from_start[:, t])
        log_p = log_p + self.log_real
        if self.null == 0:
            log_p = torch.cat([log_p.new_full((B, 1), self.log_p0), log_p[:, 1:]], 1)
        return log_p

    def out(self, u: Tensor, z_u: Tensor, last: Tensor) -> Tensor:
        """``log p(z_u | z_t = s, ...)`` ``(B, S)`` of the next real link ``z_u`` at ``u`` (the NULL words between
        contribute ``p0`` whatever ``s``): from ``s`` when ``s`` is real, from the last real position when it is
        the NULL word."""
        S = self.theta.shape[0]
        into_u = _at(self.diagonal, u, z_u)
        from_every = self.log_z.gather(1, u.view(-1, 1, 1).expand(-1, 1, S)).squeeze(1)
        out = self.theta.T.index_select(0, z_u) + into_u.unsqueeze(1) - from_every  # from every s' to z_u
        if self.null == 0:
            frm = last.clamp(min=0)
            stay = torch.where(last >= 0, self.theta.flatten().index_select(0, frm * S + z_u) + into_u
                               - _at(self.log_z, u, frm), _at(self.from_start, u, z_u))
            out = torch.cat([stay.unsqueeze(1), out[:, 1:]], 1)
        return out


def _at(x: Tensor, t: Tensor, s: Tensor) -> Tensor:
    """``x[b, t[b], s[b]]`` ``(B,)`` of ``x`` ``(B, T, S)``."""
    return x.flatten(1).gather(1, (t * x.shape[2] + s).unsqueeze(1)).squeeze(1)
