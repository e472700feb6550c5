"""Greedy and beam-search decoding under a chosen prediction rule.

At each step the decoder state ``h_t`` and the prior ``p(z_t | x, y_<t)`` are computed once; the next-token
distribution is then

* ``"soft"`` -- ``p(y_t | x, c_t = E_p[x_z])``: the network run once on the soft context;
* ``"marginal"`` -- ``sum_s p(z_t = s) p(y_t | x, z_t = s)``: the exact marginal over alignments;
* ``"kmax"`` -- the same sum over the ``k`` most probable alignments, renormalised (Deng et al. 2018).

For ``"soft"`` the context is the pair's own (:meth:`~pyro_attention.pair.AlignmentPair.soft_context`, so the
structured pairs decode with their chain / tree contexts, BAM with its mean weights).  Whatever the rule, the
decoder is fed the prior's soft context, as in training.  Beam search keeps ``beam_size``
hypotheses per sentence and ranks finished ones by ``log p / lp(length)`` with the GNMT length penalty
``lp(n) = ((5 + n) / 6) ** length_penalty`` (``0`` disables it).  ``beam_size=1`` is greedy decoding.

The search sees the network only through :class:`IncrementalDecoder`, the step-by-step interface that
:class:`~pyro_attention.networks.Seq2Seq` provides: the decoder state is opaque here (beam search reorders it with
``reorder_state``).  On a CPU the network's linear layers and LSTM cells multiply through oneDNN during a search
(:func:`~pyro_attention.networks.onednn.onednn_inference`: the same float32 products in another summation order).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from pyro_attention.data.translation import BOS, EOS, TranslationBatch
from pyro_attention.distributions.kernels import log_mixture_of_softmaxes, product_log_normalizer, shifted_exp
from pyro_attention.networks.base import Encoded, mask_scores
from pyro_attention.networks.onednn import onednn_inference
from pyro_attention.pair import AlignmentPair, Rule, kmax_log_prior, kmax_mixture

__all__ = ["IncrementalDecoder", "SourceMemory", "greedy", "translate"]


@runtime_checkable
class SourceMemory(Protocol):
    """What :meth:`IncrementalDecoder.encode_source` returns: the encoded source, kept for every step."""

    #: ``(N, S, D)`` the source values the contexts average (``N`` rows: sentences, or hypotheses).
    values: Tensor
    #: ``(N, S)`` bool, ``True`` at real source positions.
    source_mask: Tensor

    def repeat_rows(self, n: int) -> SourceMemory:
        """Every row repeated ``n`` times (row ``b * n + j``), for ``n`` hypotheses per sentence."""
        ...

    def select_rows(self, rows: Tensor) -> SourceMemory:
        """Rows ``rows`` ``(N',)`` long (beam search drops the rows of sentences that are done)."""
        ...


@runtime_checkable
class IncrementalDecoder(Protocol):
    """The step-by-step decoding interface of a translation network (:class:`~pyro_attention.networks.Seq2Seq`).

    Shapes: ``N`` rows (sentences, or sentences x beam), ``S`` source positions, ``H`` decoder state, ``D`` value
    size, ``V`` target vocabulary.  ``State`` is whatever the network keeps between steps (Seq2Seq: its LSTM
    states); the search only passes it on and reorders it.
    """

    #: ``V``.
    num_classes: int

    def encode_source(self, source: Tensor, source_mask: Tensor) -> SourceMemory:
        """``source`` ``(N, S)`` long ids, ``source_mask`` ``(N, S)`` bool -> the source memory."""
        ...

    def initial_state(self, src: SourceMemory) -> tuple[Any, Tensor]:
        """The decoder state before the first word and the first fed vector ``(N, F)``."""
        ...

    def decoder_step(
        self, src: SourceMemory, y_prev: Tensor, state: Any, fed: Tensor
    ) -> tuple[Tensor, Tensor, Any, Tensor]:
        """One step on the previous words ``y_prev`` ``(N,)``: ``h_t`` ``(N, H)``, the prior's scores ``(N, S)``
        (unmasked), the new state and the next fed vector ``(N, F)``."""
        ...

    def step_logits(self, h: Tensor, context: Tensor) -> Tensor:
        """Output logits for states ``h`` ``(N, H)`` or ``(N, 1, H)`` and contexts ``(N, D)`` or ``(N, K, D)``:
        ``(N, V)`` or ``(N, K, V)``."""
        ...

    def soft_step_logits(self, h: Tensor, fed: Tensor) -> Tensor | None:
        """The output logits ``(N, V)`` at the prior's soft context ``sum_s softmax(a_t)_s x_s`` of the step that
        returned ``h`` and ``fed``, where ``fed`` determines them; else ``None`` (the soft rule then computes the
        context again)."""
        ...

    def reorder_state(self, state: Any, rows: Tensor) -> Any:
        """The state of rows ``rows`` ``(N',)`` long (beam search: the hypotheses that continue)."""
        ...

    def source_experts(self, values: Tensor) -> Tensor | None:
        """Where the output logits split as ``step_logits(h, x_s) = query_experts(h) + v_s`` (a product of experts):
        ``v`` ``(B, S, V)`` for source values ``(B, S, D)``; else ``None`` (then the exact marginal is computed
        from ``step_logits`` at every source value)."""
        ...

    def query_experts(self, h: Tensor) -> Tensor:
        """``u`` ``(N, V)`` (or broadcastable to it) for states ``h`` ``(N, H)``, where :meth:`source_experts` is
        not ``None``."""
        ...


def _check_source(net: Any, source: Tensor, source_mask: Tensor) -> None:
    """The checks of :meth:`TranslationBatch.validate` on the source side (shapes, dtypes, ids, padding)."""
    B = source.shape[0] if source.dim() > 0 else 1
    one = torch.ones(B, 1, dtype=torch.bool, device=source.device)
    bos, eos = torch.full((B, 1), BOS, device=source.device), torch.full((B, 1), EOS, device=source.device)
    TranslationBatch(source, source_mask, bos, eos, one).validate(getattr(net, "source_vocab", None),
                                                                 device=net.device)


class _ProductMarginal:
    r"""The exact marginal (and the K-max terms) of a product-of-experts output layer,
    ``p(y | s) \propto \exp(u[y] + v_s[y])``, for ``R`` rows (hypotheses) of each of ``B`` sentences, from the
    sentences' source experts ``v`` ``(B, S, V)`` computed once.  With :math:`n_s = \max_y v_s[y]`,
    :math:`E_s = e^{v_s - n_s}` (kept) and the normalisers :math:`Z_s`
    (:func:`~pyro_attention.distributions.kernels.product_log_normalizer`),

    .. math::

        \log \sum_s p(s)\, p(y \mid s) = u[y] + M + \log \sum_s e^{w_s - M} E_s[y],
        \qquad w_s = \log p(s) + n_s - Z_s,\; M = \max_s w_s,

    two ``(R x V)(V x S)`` / ``(R x S)(S x V)`` products per sentence and step instead of ``R S V`` exponentials
    twice and ``v`` recomputed for every row.  Exact, except that a token that every alignment gives less than ``e``
    times the dtype's smallest normal number (``3.2e-38`` in float32) relative to the best token of that alignment
    (terms :func:`~pyro_attention.distributions.kernels.shifted_exp` raises to that, which keeps subnormal numbers
    out of the products) gets about the floor value instead of a lower one; such a token is never among the best
    continuations.  K-max is the same sum under the prior restricted to its ``K`` best positions
    (:func:`~pyro_attention.pair.kmax_log_prior`).
    """

    def __init__(self, v: Tensor, rows: int, shifted: tuple[Tensor, Tensor] | None = None) -> None:
        self.v, self.rows = v, rows
        if shifted is None:
            n = v.amax(-1, keepdim=True)  # (B, S, 1)
            shifted = n, shifted_exp(v, n)
        self.n, self.E = shifted  # (B, S, 1), (B, S, V)

    def select(self, sentences: Tensor) -> _ProductMarginal:
        """The cache of sentences ``sentences`` ``(B',)`` long, increasing, only (beam search drops those that are
        done), made in place: each kept sentence's rows move forward in the same buffers, which then end at ``B'``.
        A new ``(B', S, V)`` copy would cost as much as several steps (fresh pages for tens of megabytes); this
        cache is not to be used afterwards."""
        kept = sentences.tolist()
        if any(later <= earlier for earlier, later in itertools.pairwise(kept)):
            raise ValueError(f"_ProductMarginal.select: sentences must increase, got {kept}")
        for j, i in enumerate(kept):
            if i != j:
                for t in (self.v, self.n, self.E):
                    t[j].copy_(t[i])
        m = len(kept)
        return _ProductMarginal(self.v[:m], self.rows, (self.n[:m], self.E[:m]))

    def __call__(self, u: Tensor, log_prior: Tensor) -> Tensor:
        """``u`` ``(N, V)`` or ``(N, 1)`` (zeros), ``log_prior`` ``(N, S)`` -> ``log p(y_t | x, y_<t)`` ``(N, V)``."""
        B, S, V = self.v.shape
        u = u.expand(u.shape[0], V).reshape(B, self.rows, V)
        Z = product_log_normalizer(u, self.v, (self.n, self.E))  # (B, R, S)
        w = log_prior.view(B, self.rows, S) + self.n.transpose(1, 2) - Z
        M = w.amax(-1, keepdim=True)
        weights = shifted_exp(w, M).masked_fill_(w == -math.inf, 0.0)  # padded sources stay out exactly
        mix = torch.bmm(weights, self.E)  # (B, R, V)
        return mix.clamp_min_(torch.finfo(mix.dtype).tiny).log_().add_(u + M).view(-1, V)  # u + M + log mix


class _StepRule:
    """A prediction rule of decoding, one object per search: :meth:`__call__` turns one step's decoder states and
    prior scores into ``log p(y_t | x, y_<t)`` over the vocabulary.  Made by :func:`_step_rule` for the
    sentences being searched (``rows`` hypotheses each), so it may keep what those share."""

    def __init__(self, pair: AlignmentPair, sentences: SourceMemory, rows: int, k: int) -> None:
        self.pair, self.net = pair, pair.network

    def __call__(self, src: SourceMemory, h: Tensor, scores: Tensor, fed: Tensor) -> Tensor:
        """``h`` ``(N, H)``, the prior's scores ``(N, S)`` (unmasked) and the fed vector of one decoder step on the
        ``N`` rows of ``src`` -> ``(N, V)``, a new tensor (the search adds its hypotheses' scores to it in place)."""
        raise NotImplementedError

    def select(self, sentences: Tensor) -> _StepRule:
        """The rule for the sentences ``sentences`` ``(B',)`` long only (beam search drops those that are done)."""
        return self


class _Soft(_StepRule):
    """``p(y_t | x, c_t = E_p[x_z])``: the pair's own soft context (structured pairs: theirs) for this one step.
    Where that context is the softmax of the prior's scores applied to the values -- the one the decoder step
    computed to feed forward -- the network's :meth:`~IncrementalDecoder.soft_step_logits` reuses the step's
    work."""

    def __init__(self, pair: AlignmentPair, sentences: SourceMemory, rows: int, k: int) -> None:
        super().__init__(pair, sentences, rows, k)
        own = type(pair)
        self.prior_mean = all(getattr(own, name) is getattr(AlignmentPair, name)
                              for name in ("soft_context", "attention_prior", "prior_logits"))

    def __call__(self, src: SourceMemory, h: Tensor, scores: Tensor, fed: Tensor) -> Tensor:
        logits = self.net.soft_step_logits(h, fed) if self.prior_mean else None
        if logits is not None:
            return logits.log_softmax(-1)
        N = scores.shape[0]
        target = torch.zeros(N, 1, dtype=torch.long, device=scores.device)
        step = Encoded(src.values, src.source_mask, target, torch.ones_like(target, dtype=torch.bool), scores[:, None])
        return self.net.step_logits(h, self.pair.soft_context(step).squeeze(1)).log_softmax(-1)


class _Marginal(_StepRule):
    """``sum_s p(z_t = s) p(y_t | x, z_t = s)``, exact: from :class:`_ProductMarginal` where the output layer is a
    product of experts (the source experts computed once per sentence), else from ``step_logits`` at every source
    value (:func:`~pyro_attention.distributions.kernels.log_mixture_of_softmaxes`; ``experts=False``: always so, the
    general path the fast one is checked against)."""

    def __init__(self, pair: AlignmentPair, sentences: SourceMemory, rows: int, k: int, experts: bool = True) -> None:
        super().__init__(pair, sentences, rows, k)
        self.k = k
        v = self.net.source_experts(sentences.values) if experts else None
        self.product = None if v is None else _ProductMarginal(v, rows)

    def select(self, sentences: Tensor) -> _Marginal:
        if self.product is None:
            return self
        kept = copy.copy(self)
        kept.product = self.product.select(sentences)
        return kept

    def __call__(self, src: SourceMemory, h: Tensor, scores: Tensor, fed: Tensor) -> Tensor:
        log_prior = _log_prior(src, scores)
        if self.product is not None:
            return self.product(self.net.query_experts(h), log_prior)
        return log_mixture_of_softmaxes(self.net.step_logits(h.unsqueeze(1), src.values), log_prior)  # logits (N, S, V)


class _KMax(_Marginal):
    """The same sum over the ``k`` most probable alignments, renormalised (Deng et al. 2018): with a product of
    experts, :class:`_ProductMarginal` under the prior restricted to them (:func:`~pyro_attention.pair.
    kmax_log_prior`: two products over the ``S`` positions cost less than ``K`` softmaxes over ``V``)."""

    def __call__(self, src: SourceMemory, h: Tensor, scores: Tensor, fed: Tensor) -> Tensor:
        log_prior = _log_prior(src, scores)
        if self.product is not None:
            return self.product(self.net.query_experts(h), kmax_log_prior(log_prior, self.k))

        def log_probs(index: Tensor) -> Tensor:  # (N, K) -> (N, K, V)
            values = src.values.gather(1, index.unsqueeze(-1).expand(-1, -1, src.values.shape[-1]))  # (N, K, D)
            return self.net.step_logits(h.unsqueeze(1), values).log_softmax(-1)

        return kmax_mixture(log_prior, self.k, log_probs, renormalise=True)


#: how one step of decoding computes each rule
_STEP_RULES: dict[Rule, type[_StepRule]] = {Rule.SOFT: _Soft, Rule.MARGINAL: _Marginal, Rule.KMAX: _KMax}


def _step_rule(pair: AlignmentPair, rule: Rule, sentences: SourceMemory, rows: int, k: int) -> _StepRule:
    """The step of ``rule`` (checked by the pair's :meth:`~pyro_attention.pair.AlignmentPair.rule`) for
    ``sentences``."""
    return _STEP_RULES[rule](pair, sentences, rows, k)


def _log_prior(src: SourceMemory, scores: Tensor) -> Tensor:
    """``log p(z_t | x, y_<t)`` ``(N, S)`` from the prior's unmasked scores."""
    return mask_scores(scores.unsqueeze(1), src.source_mask).squeeze(1).log_softmax(-1)


@torch.no_grad()
def translate(
    pair: AlignmentPair,
    source: Tensor,
    source_mask: Tensor,
    beam_size: int = 5,
    rule: Rule | str = Rule.MARGINAL,
    k: int = 5,
    max_len: int | Sequence[int] = 50,
    length_penalty: float = 0.0,
    batch_size: int = 64,
) -> list[list[int]]:
    """Decode every source sentence; returns target ids without ``<s>`` and ``</s>``.

    Beam search runs on ``batch_size`` sentences at once (``batch_size * beam_size`` decoder rows per step); each
    sentence's search is the one-sentence search: the ``beam_size`` best continuations of its live hypotheses
    are taken at every step, those ending in ``</s>`` are finished (and leave the beam), and a sentence stops
    when it has ``beam_size`` finished hypotheses, no live one, or -- without a length penalty -- when its best
    finished hypothesis scores at least as high as its best live one.

    :param source: ``(B, S)`` long source ids; ``source_mask``: ``(B, S)`` bool.
    :param rule: a :class:`~pyro_attention.pair.Rule` or its name, ``"soft"``, ``"marginal"`` or ``"kmax"`` (see
        the module docstring), one of the pair's
        :meth:`~pyro_attention.pair.AlignmentPair.decoding_rules`.
    :param max_len: the longest output (tokens, ``</s>`` counted), one for all or one per sentence.
    :param batch_size: sentences decoded together (memory: ``batch_size * beam_size`` rows of ``V`` scores).
    """
    rule = pair.rule(rule, decoding=True)
    limits = [max_len] * source.shape[0] if isinstance(max_len, int) else [int(m) for m in max_len]
    if len(limits) != source.shape[0]:
        raise ValueError(f"max_len: {len(limits)} lengths for {source.shape[0]} sentences")
    shortest = min(limits, default=1)
    if beam_size < 1 or shortest < 1 or k < 1 or batch_size < 1:
        raise ValueError(
            f"need beam_size >= 1, max_len >= 1, k >= 1, batch_size >= 1; got {beam_size}, {shortest}, {k}, "
            f"{batch_size}"
        )
    out: list[list[int]] = []
    with _searching(pair, source, source_mask):
        for start in range(0, source.shape[0], batch_size):
            rows = slice(start, start + batch_size)
            real = int(source_mask[rows].sum(-1).max())  # trim the padding the whole chunk shares
            out += _beam(pair, source[rows, :real], source_mask[rows, :real], beam_size, rule, k, limits[rows],
                         length_penalty)
    return out


@contextlib.contextmanager
def _searching(pair: AlignmentPair, source: Tensor, source_mask: Tensor) -> Iterator[IncrementalDecoder]:
    """The pair's network for a search over ``source``: the source checked, the network in eval mode (restored
    after) and multiplying through oneDNN (:func:`~pyro_attention.networks.onednn.onednn_inference`)."""
    net = pair.network  # an IncrementalDecoder and an nn.Module (train / eval)
    _check_source(net, source, source_mask)
    was_training = net.training
    net.eval()
    try:
        with onednn_inference(net):
            yield net
    finally:
        net.train(was_training)


def _penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha if alpha else 1.0


def _beam(
    pair: AlignmentPair, source: Tensor, mask: Tensor, beam: int, rule: Rule, k: int, limits: list[int], alpha: float
) -> list[list[int]]:
    """Beam search for ``B`` sentences at once: row ``i * beam + j`` holds hypothesis ``j`` of ``live[i]``, the
    ``i``-th sentence still searching; dead rows (a hypothesis that finished) have score ``-inf``, and the rows of
    a sentence that is done leave the batch (the decoder runs on the sentences still searching only)."""
    net: IncrementalDecoder = pair.network
    B, device = source.shape[0], source.device
    sentences = net.encode_source(source, mask)
    next_log_probs = _step_rule(pair, rule, sentences, beam, k)
    src = sentences.repeat_rows(beam)
    state, fed = net.initial_state(src)
    tokens = torch.full((B * beam, 1), BOS, dtype=torch.long, device=device)
    scores = torch.full((B, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live hypothesis, <s>, per sentence
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    live = list(range(B))
    for step in range(max(limits)):
        h, a, state, fed = net.decoder_step(src, tokens[:, -1], state, fed)
        log_probs = next_log_probs(src, h, a, fed)  # (L * beam, V)
        L, V = len(live), log_probs.shape[-1]
        total = log_probs.view(L, beam, V).add_(scores.unsqueeze(-1)).view(L, beam * V)  # the rule's own tensor
        top, flat = total.topk(min(beam, beam * V), dim=-1)  # (L, beam)
        going, kept_scores, kept_rows, kept_words = [], [], [], []
        for i, (tops, flats) in enumerate(zip(top.tolist(), flat.tolist(), strict=True)):
            b = live[i]
            keep = _continue(tops, flats, i * beam, V, step == limits[b] - 1, alpha, tokens, finished[b], beam)
            if keep is not None:
                going.append(i)
                dead = beam - len(keep)  # filled with the sentence's first row, scored -inf, ending in </s>
                kept_scores += [score for score, _, _ in keep] + [float("-inf")] * dead
                kept_rows += [row for _, row, _ in keep] + [i * beam] * dead
                kept_words += [word for _, _, word in keep] + [EOS] * dead
        if not going:
            break
        rows = torch.tensor(kept_rows, device=device)  # the continuing hypotheses of the sentences still searching
        scores = torch.tensor(kept_scores, device=device, dtype=scores.dtype).view(len(going), beam)
        tokens = torch.cat([tokens[rows], torch.tensor(kept_words, device=device).view(-1, 1)], dim=1)
        state = net.reorder_state(state, rows)
        fed = fed[rows]
        if len(going) < L:  # drop the rows of the sentences that are done
            kept = torch.tensor(going, device=device)
            src = src.select_rows((kept.unsqueeze(1) * beam + torch.arange(beam, device=device)).flatten())
            next_log_probs = next_log_probs.select(kept)
            live = [live[i] for i in going]
    return [max(f, key=lambda item: item[0])[1] for f in finished]


def _continue(
    tops: list[float], flats: list[int], first_row: int, V: int, last: bool, alpha: float, tokens: Tensor,
    finished: list[tuple[float, list[int]]], beam: int
) -> list[tuple[float, int, int]] | None:
    """One sentence's step: its best ``beam`` candidates (``tops`` scores, ``flats`` indices into its ``beam x V``
    continuations, rows from ``first_row``); those ending in ``</s>`` (or at its last step) join ``finished``.
    Returns the ``(score, row, word)`` that go on, or ``None`` when the sentence is done: ``beam`` finished
    hypotheses, no live one, or -- without a length penalty -- a finished one no live one can beat."""
    keep = []
    for score, index in zip(tops, flats, strict=True):
        if score == float("-inf"):  # fewer live continuations than the beam (tiny vocabularies)
            break
        row, word = first_row + index // V, index % V
        if word == EOS or last:
            hyp = tokens[row, 1:].tolist() + ([] if word == EOS else [word])
            finished.append((score / _penalty(len(hyp) + 1, alpha), hyp))
        else:
            keep.append((score, row, word))
    beaten = bool(finished) and alpha == 0 and bool(keep) and max(f[0] for f in finished) >= keep[0][0]
    return None if len(finished) >= beam or not keep or beaten else keep


@torch.no_grad()
def greedy(
    pair: AlignmentPair, source: Tensor, source_mask: Tensor, rule: Rule | str = Rule.MARGINAL, k: int = 5,
    max_len: int = 50
) -> list[list[int]]:
    """Greedy decoding, batched: the argmax token at every step until ``</s>`` (reference for beam 1)."""
    rule = pair.rule(rule, decoding=True)
    if max_len < 1 or k < 1:
        raise ValueError(f"need max_len >= 1, k >= 1; got {max_len}, {k}")
    out: list[list[int]] = [[] for _ in range(source.shape[0])]
    with _searching(pair, source, source_mask) as net:
        src = net.encode_source(source, source_mask)
        next_log_probs = _step_rule(pair, rule, src, 1, k)
        state, fed = net.initial_state(src)
        y = torch.full((source.shape[0],), BOS, dtype=torch.long)
        done = torch.zeros(source.shape[0], dtype=torch.bool)
        for _ in range(max_len):
            h, a, state, fed = net.decoder_step(src, y, state, fed)
            y = next_log_probs(src, h, a, fed).argmax(-1)
            for i in (~done).nonzero().flatten().tolist():
                if int(y[i]) == EOS:
                    done[i] = True
                else:
                    out[i].append(int(y[i]))
            if done.all():
                break
    return out
