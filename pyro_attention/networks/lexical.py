r"""Networks whose output expert sees the aligned source *word* only: IBM Model 1, an HMM prior and a neural
distortion model on its table.

All use :class:`~pyro_attention.networks.output.LexicalExpert`, the product of experts with ``u == 0``, on the
source word alone, so ``p(y_t | x, z_t = s) = t(y_t | x_s) = softmax(U_x e(x_s))`` is a lexical table (free, or
neural of rank ``E``).  They differ in the prior:

* :class:`IBM1Network` -- uniform, ``p(z_t = s) = 1 / S``.  With the ``marginal`` pair (exact enumeration,
  ``TraceEnum_ELBO``) the likelihood is IBM Model 1's (Brown et al. 1993) without a NULL word,
  ``p(y | x) = prod_t (1 / S) sum_s t(y_t | x_s)``, and the exact posterior is its alignment posterior
  ``p(z_t = s | x, y) = t(y_t | x_s) / sum_s' t(y_t | x_s')``.  The target ends in ``</s>``, which is predicted
  like any word (an EM reference must append it too to be the same model).  With a NULL word (below): ``p0`` on
  it, ``(1 - p0) / n`` on each of the ``n`` words.
* :class:`HMMNetwork` -- an HMM aligner's prior (Vogel et al. 1996) on an IBM1Network's table: fast_align's
  diagonal (:class:`DiagonalTension`) and learned jumps (:class:`JumpTransition`) from the previous word's filtered
  posterior, which is a function of ``(x, y_<t)``, so the target positions stay conditionally independent and the
  same exact enumeration trains it; no LSTM.
* :class:`~pyro_attention.networks.distortion.DistortionNetwork` (its own module) --
  :class:`~pyro_attention.networks.Seq2Seq`'s prior ``p(z_t | x, y_<t)`` (its
  decoder LSTM and attention score over the BiLSTM source states: a neural distortion model) on an IBM1Network's
  table, optionally with the same diagonal and jumps.  Comparing the three measures what a learned prior adds;
  comparing with ``Seq2Seq(output=ProductOfExperts)`` what the decoder's expert ``u_t`` (and contextual source
  values) add.

**The decoder's expert on the table** (:class:`DecoderExpert`, in :class:`HMMNetwork`): ``u_t``, the logits of a
target-side LSTM over ``y_<t``, joins the lexical expert in a product, ``p(y_t | x, z_t = s, y_<t) \propto
t(y_t | x_s) e^{u_t[y_t]}`` -- the output layer of the issue on exact marginalisation with the decoder's expert on
and the source word's table as the source expert.  It starts at ``u == 0`` (the network without it).

**The NULL word** (Brown et al. 1993; Och & Ney 2003): with ``null_prob=p0``, IBM1Network and HMMNetwork read source
position 0 as the NULL word -- the token ``<s>`` (:data:`NULL_WORD`, never otherwise in a source sentence), put
there by :func:`with_null_word` -- whose lexical row ``t(y | NULL)`` is learned like any word's.  A target word
aligned to it is aligned to nothing.  Its prior probability is ``p0`` at every target position; the HMM's NULL state
remembers the last real position it came from (Och & Ney's doubled states), so a jump after an unaligned word is
measured from the last aligned one.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pyro_attention.data.translation import BOS, PAD, SPECIALS, TranslationBatch
from pyro_attention.distributions.enumeration import experts_table
from pyro_attention.networks.base import Encoded, ExpertLogits, HeadNetwork, mask_scores
from pyro_attention.networks.output import LexicalExpert
from pyro_attention.networks.tables import SparseTable

__all__ = ["NULL_WORD", "DecoderExpert", "DiagonalTension", "HMMNetwork", "IBM1Network", "JumpTransition",
           "with_null_word", "word_experts"]

#: the source id that stands for the NULL word at source position 0 (``<s>``: no source sentence holds it otherwise)
NULL_WORD = BOS


def with_null_word(source_ids: list[int]) -> list[int]:
    """A source sentence's ids with the NULL word in front (position 0), as a network with ``null_prob`` reads it."""
    return [NULL_WORD, *source_ids]


def _check_null_prob(owner: str, null_prob: float | None) -> None:
    if null_prob is not None and not 0.0 < null_prob < 1.0:
        raise ValueError(f"{owner}: null_prob must be in (0, 1) or None (no NULL word), got {null_prob}")


def _null_word_mask(owner: str, batch: TranslationBatch) -> Tensor:
    """The mask of the real source words (position 0, the NULL word, excluded), after checking it is there."""
    bad = (batch.source[:, 0] != NULL_WORD).nonzero()
    if len(bad):
        row = int(bad[0])
        raise ValueError(f"{owner}(null_prob=...): source position 0 must be the NULL word <s> (id {NULL_WORD}) in "
                         f"every row; row {row} holds id {int(batch.source[row, 0])} (prepend it with "
                         "pyro_attention.networks.lexical.with_null_word)")
    words = batch.source_mask.clone()
    words[:, 0] = False
    return words


def word_experts(embed: nn.Embedding, head: LexicalExpert, source: Tensor, u: Tensor | None = None) -> ExpertLogits:
    """The lexical expert's logits ``U_x e(x)`` once per *distinct* word of ``source`` ``(B, S)``, ``(U, V)``, with
    the row of every source position and the decoder's expert ``u`` (``(B, T, V)``; ``None``: ``u == 0``): the same
    logits as per source position, so one ``V``-way normaliser per distinct word under enumeration (about half the
    work or less on real text).  No dropout on the embeddings."""
    words, inverse = torch.unique(source, return_inverse=True)  # (U,), (B, S)
    values = embed(words)
    return ExpertLogits(u, head.logits(head.query(values), values), inverse)


class IBM1Network(HeadNetwork):
    """Uniform prior and a lexical expert on the source word: IBM Model 1 with a free (default) or rank-E lexical table.

    :param source_vocab: source vocabulary size.
    :param target_vocab: target vocabulary size ``V``.
    :param embedding_size: ``E``, the rank of the lexical table ``log t(y | x) = U_x e(x) + const``; ``0``: full
        rank, a free table -- the source values are the rows of ``U_x`` (a one-hot ``x_s`` times ``U_x``; the
        expert's own projection is the identity), which is IBM Model 1's parameterisation exactly.  A low rank is a
        softmax bottleneck: word-to-word tables are close to full rank.
    :param null_prob: ``p0``: source position 0 is the NULL word (:func:`with_null_word`) with prior ``p0``, the
        real words share ``1 - p0`` uniformly; ``None`` (default): no NULL word, every position uniform.
    :param table: the free table stored only at the word pairs that co-occur in the training text
        (:class:`~pyro_attention.networks.tables.SparseTable`: memory that grows with those pairs, not with
        ``V_src x V``; the same function and the same training as the dense table); ``None`` (default): dense.
    """

    def __init__(self, source_vocab: int, target_vocab: int, embedding_size: int = 0,
                 null_prob: float | None = None, table: SparseTable | None = None) -> None:
        super().__init__()
        _check_null_prob("IBM1Network", null_prob)
        self.null_prob = null_prob
        for name, size, low in (("source_vocab", source_vocab, len(SPECIALS)),
                                ("target_vocab", target_vocab, len(SPECIALS)), ("embedding_size", embedding_size, 0)):
            if size < low:
                raise ValueError(f"IBM1Network: {name} must be >= {low}, got {size}")
        if table is not None and embedding_size:
            raise ValueError(f"IBM1Network: a sparse table is a free table; embedding_size must be 0, got "
                             f"{embedding_size}")
        if table is not None and (table.source_vocab, table.target_vocab) != (source_vocab, target_vocab):
            raise ValueError(f"IBM1Network: table has vocabularies {table.source_vocab} / {table.target_vocab}, the "
                             f"network {source_vocab} / {target_vocab}")
        self.num_classes = target_vocab
        self.source_vocab = source_vocab
        self.full_rank = embedding_size == 0
        self.table = table
        self.value_size = 0 if table is not None else target_vocab if self.full_rank else embedding_size
        if table is None:
            self.src_embed = nn.Embedding(source_vocab, self.value_size, padding_idx=PAD)
        self.head = LexicalExpert(1, 1 if self.full_rank else embedding_size, target_vocab)
        if self.full_rank:  # the values are the rows of the table: start uniform
            self.head.source_expert = nn.Identity()
            if table is None:
                nn.init.zeros_(self.src_embed.weight)

    def source_values(self, source: Tensor) -> Tensor:
        """The values of source ids ``(B, S)``: ``(B, S, E)`` embeddings (a free dense table: its rows); a sparse
        table has none, ``(B, S, 0)`` (its expert is read through :meth:`experts`)."""
        if self.table is not None:
            return self.table.logits.new_zeros(source.shape + (0,))
        return self.src_embed(source)

    def experts(self, source: Tensor, u: Tensor | None = None) -> ExpertLogits:
        """The lexical expert once per distinct word of ``source`` ``(B, S)``, with the decoder's expert ``u``
        (:func:`word_experts`; a sparse table's rows made dense)."""
        if self.table is not None:
            return self.table.experts(source, u)
        return word_experts(self.src_embed, self.head, source, u)

    def encode(self, batch: TranslationBatch) -> Encoded:
        if not isinstance(batch, TranslationBatch):
            raise TypeError(f"IBM1Network.encode expects a TranslationBatch, got {type(batch).__name__}")
        batch.validate(self.source_vocab, self.num_classes, device=self.device)
        values = self.source_values(batch.source)  # (B, S, E)
        B, S = batch.source.shape
        T = batch.target.shape[1]
        prior = values.new_zeros(B, T, S)  # uniform over the real source words
        if self.null_prob is not None:  # logit of NULL against a word's: log(p0 / ((1 - p0) / n))
            n = _null_word_mask("IBM1Network", batch).sum(-1).to(values.dtype)  # (B,)
            prior[:, :, 0] = (self.null_prob * n / (1.0 - self.null_prob)).log().unsqueeze(-1)
        query = values.new_zeros(B, T, 1)  # u == 0
        return Encoded(values, batch.source_mask, batch.target, batch.target_mask, prior, {"query": query}, batch)

    def output_experts(self, enc: Encoded) -> ExpertLogits:
        """``log t(y | x_s) = log softmax(U_x e(x_s))``: the logits per distinct source word (:func:`word_experts`)."""
        return self.experts(enc.batch.source)

    def posterior_scores(self, enc: Encoded) -> Tensor:
        """The prior's (uniform) scores: IBM Model 1 has no inference network."""
        return enc.prior_scores

    def lexical_log_probs(self, source_ids: Tensor) -> Tensor:
        """``log t(. | x)`` ``(N, V)`` for source word ids ``(N,)``."""
        if self.table is not None:
            return self.table.log_probs(source_ids)
        values = self.src_embed(source_ids)
        return torch.log_softmax(self.head.logits(self.head.query(values), values), -1)

    def observed_log_probs(self, batch: TranslationBatch) -> Tensor:
        """``log t(y_t | x_s)`` ``(B, T, S)`` at the observed targets (one normaliser per distinct source word)."""
        if self.table is not None:
            return self.table.observed(batch.source, batch.target)
        words, rows = torch.unique(batch.source, return_inverse=True)
        return self.lexical_log_probs(words)[rows.unsqueeze(1), batch.target.unsqueeze(2)]

    def likelihood_terms(self, batch: TranslationBatch) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_t, total, posterior)`` as :meth:`HMMNetwork.likelihood_terms` splits the likelihood: the observed
        ``log t(y_t | x_s)`` with their gradient to the table, ``log p(y | x)`` summed over the real target tokens
        with the table held fixed (the prior has no parameters: no gradient), and the exact posterior
        ``p(z_t | x, y)`` ``(B, T, S)``, detached, zero where padded."""
        log_prior = torch.log_softmax(mask_scores(self.encode(batch).prior_scores, batch.source_mask), -1)
        log_t = self.observed_log_probs(batch)
        joint = (log_prior + log_t).detach().masked_fill(~batch.source_mask.unsqueeze(1), float("-inf"))
        total = torch.logsumexp(joint, -1).masked_fill(~batch.target_mask, 0.0).sum()
        posterior = torch.softmax(joint, -1)  # the gradient of total with respect to log_t, in closed form
        return log_t, total, posterior * batch.source_mask.unsqueeze(1) * batch.target_mask.unsqueeze(-1)

    # -- a free table's M-step in closed form (:class:`~pyro_attention.tasks.align.agreement.DirichletTables`) ----
    def table_parameters(self) -> list[nn.Parameter]:
        """The free table's parameters, which EM sets in closed form."""
        return [self.src_embed.weight] if self.table is None else [self.table.logits, self.table.rest]

    def new_counts(self) -> Tensor:
        """Zero expected link counts for the free table (dense ``(V_src, V)``, or the sparse table's)."""
        if self.table is not None:
            return self.table.new_counts()
        return torch.zeros_like(self.src_embed.weight, dtype=torch.float64)

    def add_counts(self, counts: Tensor, batch: TranslationBatch, weights: Tensor) -> None:
        """Add ``weights`` ``(B, T, S)`` (zero where padded) to the counts of ``(source[b, s], target[b, t])``."""
        if self.table is not None:
            self.table.add_counts(counts, batch.source, batch.target, weights)
            return
        B, T, S = weights.shape
        index = (batch.source.unsqueeze(1).expand(B, T, S), batch.target.unsqueeze(2).expand(B, T, S))
        counts.index_put_(index, weights.detach().to(torch.float64), accumulate=True)

    def set_from_counts(self, counts: Tensor, alpha: float) -> None:
        """``t(y | x) = (c(x, y) + alpha) / (c(x) + V alpha)``, the posterior mean under a ``Dirichlet(alpha)``
        prior, from the counts of :meth:`add_counts`."""
        if self.table is not None:
            self.table.set_from_counts(counts, alpha)
            return
        smoothed = counts + alpha
        with torch.no_grad():
            self.src_embed.weight.copy_((smoothed / smoothed.sum(-1, keepdim=True)).log().to(self.src_embed.weight))


class DecoderExpert(nn.Module):
    r"""The decoder's expert of a product-of-experts output for an aligner: ``u_t = W LSTM(e(<s>, y_1, ...,
    y_{t-1})) + b`` ``(B, T, V)``, a target-side language model's logits from the target prefix alone.

    Beside the lexical expert, ``p(y_t | x, z_t = s, y_<t) \propto t(y_t | x_s) e^{u_t[y_t]}``: each source word
    explains the target word only as far as the prefix does not predict it (one ``V``-way normaliser per
    ``(t, s)``, :func:`~pyro_attention.distributions.kernels.product_log_normalizer`).  ``W`` and ``b`` start at
    zero, so a network with it starts as the same network without it.

    :param target_vocab: ``V``.
    :param embedding_size: the target words' embedding size.
    :param hidden_size: the LSTM's size.
    """

    def __init__(self, target_vocab: int, embedding_size: int = 64, hidden_size: int = 128) -> None:
        super().__init__()
        for name, size in (("target_vocab", target_vocab), ("embedding_size", embedding_size),
                           ("hidden_size", hidden_size)):
            if size < 1:
                raise ValueError(f"DecoderExpert: {name} must be >= 1, got {size}")
        self.num_classes = target_vocab
        self.embed = nn.Embedding(target_vocab, embedding_size, padding_idx=PAD)
        self.lstm = nn.LSTM(embedding_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, target_vocab)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, target_in: Tensor) -> Tensor:
        """``u`` ``(B, T, V)`` for the decoder inputs ``<s> y_1 ... y_{T-1}`` ``(B, T)`` (a position after the end
        reads padding; the caller masks it)."""
        h, _ = self.lstm(self.embed(target_in))
        return self.out(h)


class DiagonalTension(nn.Module):
    r"""fast_align's diagonal (Dyer et al. 2013) as a prior score with a learned tension ``lambda > 0``:
    ``-lambda |i / m - j / n|`` for target position ``i`` of ``m`` (``</s>`` included) and source position ``j`` of
    ``n``, both counted from 1.

    It reads the target length ``m``: with it the prior is an alignment model ``p(z | x, |y|)`` as fast_align's is,
    and the likelihood ``p(y | x, |y|)`` -- an aligner's, not a translation model to decode from.
    """

    def __init__(self, tension: float = 4.0) -> None:
        super().__init__()
        if not 0.0 < tension < float("inf"):
            raise ValueError(f"DiagonalTension: tension must be > 0, got {tension}")
        self.log_tension = nn.Parameter(torch.tensor(float(tension)).log())

    @property
    def tension(self) -> float:
        return float(self.log_tension.detach().exp())

    def forward(self, target_mask: Tensor, source_mask: Tensor, offset: int = 0) -> Tensor:
        """The scores ``(B, T, S)`` for masks ``(B, T)`` and ``(B, S)`` (``True`` at the real words); ``offset``: the
        first word's column (1 behind a NULL word at column 0)."""
        m = target_mask.sum(-1, keepdim=True).clamp(min=1)
        n = source_mask.sum(-1, keepdim=True).clamp(min=1)
        i = torch.arange(1, target_mask.shape[1] + 1, device=m.device) / m  # (B, T)
        j = torch.arange(1 - offset, source_mask.shape[1] + 1 - offset, device=n.device) / n  # (B, S)
        return -self.log_tension.exp() * (i.unsqueeze(-1) - j.unsqueeze(1)).abs()


class JumpTransition(nn.Module):
    r"""An HMM's alignment transition (Vogel et al. 1996) as a prior score: ``log sum_s' f(s') J(s | s')``.

    ``J(s | s') = softmax_s theta[clip(s - s', -K, K)]`` over the real source positions, with ``2K + 1`` learned
    jump scores ``theta`` (start: ``-|jump - 1|``, favouring the next source position), and ``f`` the *filtered
    posterior* of the previous target word, ``f_{t-1}(s') = p(z_{t-1} = s' | x, y_{<=t-1})`` as the network computes
    it -- a function of ``(x, y_<t)``, so the prior of ``z_t`` still depends on no sampled alignment and the target
    positions stay conditionally independent (enumerated per token).  With it the prior is an HMM's predictive
    distribution ``p(z_t | x, y_<t)`` times whatever the other scores say.
    """

    def __init__(self, max_jump: int = 5) -> None:
        super().__init__()
        if max_jump < 1:
            raise ValueError(f"JumpTransition: max_jump must be >= 1, got {max_jump}")
        self.max_jump = max_jump
        jumps = torch.arange(-max_jump, max_jump + 1, dtype=torch.float)
        self.theta = nn.Parameter(-(jumps - 1).abs())

    def scores(self, S: int, device: torch.device | None = None) -> Tensor:
        """``theta[clip(s - s', -K, K)]`` ``(S', S)``: the unnormalised jump scores from ``s'`` to ``s``."""
        pos = torch.arange(S, device=device)
        jump = (pos.view(1, S) - pos.view(S, 1)).clamp(-self.max_jump, self.max_jump) + self.max_jump
        return self.theta[jump]

    def matrix(self, source_mask: Tensor) -> Tensor:
        """``J(s | s')`` ``(B, S', S)``: rows over the previous position, normalised over the real ``s``."""
        B, S = source_mask.shape
        scores = self.scores(S, source_mask.device).expand(B, S, S)
        return torch.softmax(scores.masked_fill(~source_mask.unsqueeze(1), float("-inf")), -1)

    @staticmethod
    def predict(filtered: Tensor, matrix: Tensor) -> Tensor:
        """``log sum_s' f(s') J(s | s')`` ``(B, S)`` for the previous filtered posterior ``f`` ``(B, S')``; padded
        positions (probability 0) come out at ``log 1e-30``, finite, with no gradient."""
        return torch.bmm(filtered.unsqueeze(1), matrix).squeeze(1).clamp(min=1e-30).log()


class HMMNetwork(HeadNetwork):
    r"""IBM Model 1's lexical table with an HMM aligner's prior (Vogel et al. 1996) and no neural prior: an
    inhomogeneous Markov chain over the source positions with learned jumps and fast_align's diagonal,

    .. math::

        p(z_1 = s) \propto e^{d_1(s)}, \qquad p(z_t = s \mid z_{t-1} = s') \propto e^{\theta[\mathrm{clip}(s - s')]
        + d_t(s)}, \qquad d_t(s) = -\lambda \big|\tfrac{t}{m} - \tfrac{s}{n}\big|, \qquad
        y_t \sim t(\cdot \mid x_{z_t}),

    (:class:`JumpTransition`'s ``theta``, :class:`DiagonalTension`'s ``lambda``, both learned; normalised over the
    real source positions).  The network's prior ``p(z_t | x, y_<t)`` is the chain's predictive distribution
    ``sum_s' f_{t-1}(s') p(z_t = s | z_{t-1} = s')`` from the filtered posterior ``f_{t-1}`` of the previous word --
    a function of ``(x, y_<t)`` -- so the ``marginal`` pair's exact enumeration per target position computes the
    HMM's exact likelihood (the forward algorithm), and its per-token posterior is the *filtered* posterior
    ``p(z_t | x, y_<=t)``.  :meth:`smoothed_posterior` gives the HMM's own posterior ``p(z_t | x, y)``, which also
    sees the words after ``t`` (forward-backward, as the gradient of the log-likelihood with respect to the
    emission log-probabilities).  No LSTM.

    :param lexical: the lexical model (default: a new free table); pass a trained :class:`IBM1Network` to start
        from its table.
    :param tension: the start of the learned :class:`DiagonalTension` (``None``: none).
    :param max_jump: the :class:`JumpTransition`'s largest jump.
    :param null_prob: ``p0``: source position 0 is the NULL word (:func:`with_null_word`).  Och & Ney's (2003)
        doubled states: each real position ``s'`` has a NULL twin that emits ``t(y | NULL)`` and remembers ``s'``;
        from either, the chain moves to the twin of ``s'`` with probability ``p0`` and to a real ``s`` with
        ``(1 - p0) p(s | s')`` (the first word: ``p0`` times, and ``1 - p0`` times, the first position's
        distribution).  The prior of the NULL position is ``p0`` at every step.  ``None`` (default): no NULL word.
    :param decoder_expert: a :class:`DecoderExpert`: the emission becomes the product ``p(y_t | x_s, y_<t)
        \propto t(y_t | x_s) e^{u_t[y_t]}`` (the chain is unchanged); ``None`` (default): ``t(y_t | x_s)``.
    """

    def __init__(self, source_vocab: int, target_vocab: int, lexical: IBM1Network | None = None,
                 tension: float | None = 4.0, max_jump: int = 5, null_prob: float | None = None,
                 decoder_expert: DecoderExpert | None = None) -> None:
        super().__init__()
        check_lexical("HMMNetwork", lexical, source_vocab, target_vocab)
        _check_null_prob("HMMNetwork", null_prob)
        if decoder_expert is not None and decoder_expert.num_classes != target_vocab:
            raise ValueError(f"HMMNetwork: decoder_expert has {decoder_expert.num_classes} classes, the network "
                             f"{target_vocab}")
        self.decoder_expert = decoder_expert
        self.null_prob = null_prob
        self.source_vocab, self.num_classes = source_vocab, target_vocab
        self.lexical = IBM1Network(source_vocab, target_vocab) if lexical is None else lexical
        self.head = self.lexical.head
        self.value_size = self.lexical.value_size
        self.diagonal = None if tension is None else DiagonalTension(tension)
        self.transition = JumpTransition(max_jump)

    def encode(self, batch: TranslationBatch) -> Encoded:
        if not isinstance(batch, TranslationBatch):
            raise TypeError(f"HMMNetwork.encode expects a TranslationBatch, got {type(batch).__name__}")
        batch.validate(self.source_vocab, self.num_classes, device=self.device)
        values = self.lexical.source_values(batch.source)
        query = self._query(batch)
        log_prior, _ = self._forward(batch, self._emission(batch, query))
        return Encoded(values, batch.source_mask, batch.target, batch.target_mask, log_prior, {"query": query}, batch)

    def _query(self, batch: TranslationBatch) -> Tensor:
        """The decoder's expert ``u`` ``(B, T, V)``, or zeros ``(B, T, 1)`` (``u == 0``) without one."""
        if self.decoder_expert is None:
            return self.transition.theta.new_zeros(batch.target.shape + (1,))
        return self.decoder_expert(batch.target_in)

    def _emission(self, batch: TranslationBatch, query: Tensor) -> Tensor:
        """``log p(y_t | x_s, y_<t)`` ``(B, T, S)`` at the observed targets: ``log t(y_t | x_s)``, or with the
        decoder's expert the product's (:func:`~pyro_attention.distributions.enumeration.experts_table`)."""
        if self.decoder_expert is None:
            return self.lexical.observed_log_probs(batch)
        return experts_table(self.lexical.experts(batch.source, query), batch.target)

    def _forward(self, batch: TranslationBatch, log_t: Tensor) -> tuple[Tensor, Tensor]:
        """The forward algorithm: the predictive ``log p(z_t | x, y_<t)`` ``(B, T, S)`` (padded source positions at
        ``log 1e-30``; with a NULL word, ``log p0`` at position 0) and ``log p(y_t | x, y_<t)`` ``(B, T)`` for
        emission log-probabilities ``log_t``."""
        mask = batch.source_mask
        words = mask if self.null_prob is None else _null_word_mask("HMMNetwork", batch)
        B, T = batch.target.shape
        S = mask.shape[1]
        diagonal = (batch.source.new_zeros(B, T, S, dtype=log_t.dtype) if self.diagonal is None
                    else self.diagonal(batch.target_mask, words, offset=0 if self.null_prob is None else 1))
        theta = self.transition.scores(S, mask.device)  # (S', S)
        states = words if self.null_prob is None else torch.cat([words, words], -1)  # real positions, NULL twins
        predictive, evidence = [], []
        filtered = None  # p(last real position = s' | x, y_<=t-1), (B, S')
        for t in range(T):
            scores = diagonal[:, t].unsqueeze(1) + (theta if filtered is not None else 0.0)  # (B, S' or 1, S)
            chain = torch.softmax(scores.masked_fill(~words.unsqueeze(1), float("-inf")), -1)
            p = chain.squeeze(1) if filtered is None else torch.bmm(filtered.unsqueeze(1), chain).squeeze(1)
            if self.null_prob is None:
                log_p = p.clamp(min=1e-30).log()
                joint = log_p + log_t[:, t].masked_fill(~mask, 0.0)
            else:  # real positions (1 - p0) p, NULL twins p0 at the remembered position
                p0 = self.null_prob
                twins = p if filtered is None else filtered
                log_real = ((1.0 - p0) * p).clamp(min=1e-30).log()
                log_p = torch.cat([log_real.new_full((B, 1), math.log(p0)), log_real[:, 1:]], -1)
                emit = log_t[:, t].masked_fill(~mask, 0.0)
                joint = torch.cat([log_real + emit, (p0 * twins).clamp(min=1e-30).log() + emit[:, :1]], -1)
            joint = joint.masked_fill(~states, float("-inf"))
            evidence.append(torch.logsumexp(joint, -1))
            filtered = torch.softmax(joint, -1)
            if self.null_prob is not None:  # a twin moves on from its real position: only the sum matters
                filtered = filtered[:, :S] + filtered[:, S:]
            predictive.append(log_p)
        return torch.stack(predictive, 1), torch.stack(evidence, 1)

    def own_posteriors(self, batch: TranslationBatch) -> dict[str, Tensor]:
        """``{"smoothed": p(z_t | x, y)}``: the HMM's posterior (:meth:`smoothed_posterior`)."""
        return {"smoothed": self.smoothed_posterior(batch)}

    def smoothed_posterior(self, batch: TranslationBatch) -> Tensor:
        """The HMM's posterior ``p(z_t | x, y)`` ``(B, T, S)`` (zero at padded positions): the gradient of
        ``log p(y | x)`` with respect to the emission log-probabilities ``log t(y_t | x_s)``."""
        with torch.no_grad():
            return self.likelihood_terms(batch)[2]

    def likelihood_terms(self, batch: TranslationBatch) -> tuple[Tensor, Tensor, Tensor]:
        r"""The exact log-likelihood split as EM splits it: ``(log_t, chain, posterior)``.

        ``log_t`` ``(B, T, S)``: the emission log-probabilities ``log p(y_t | x_s, y_<t)`` at the observed targets,
        with their gradient to the lexical table (and the decoder's expert); ``chain``: ``log p(y | x)`` summed over
        the batch's real target tokens with the emissions held fixed, so its gradient reaches the chain's parameters
        only (jumps, tension); ``posterior``: the smoothed ``p(z_t | x, y)`` ``(B, T, S)``, detached, zero at padded
        positions.  Since ``posterior`` is the gradient of ``log p(y | x)`` with respect to ``log_t``, the
        likelihood's gradient is that of ``chain + sum(posterior * log_t)``; other weights in place of
        ``posterior`` (another E-step: :mod:`pyro_attention.tasks.align.agreement`) give an EM step for them."""
        log_t = self._emission(batch, self._query(batch))
        with torch.enable_grad():
            leaf = log_t.detach().requires_grad_(True)
            _, evidence = self._forward(batch, leaf)
            chain = evidence.masked_fill(~batch.target_mask, 0.0).sum()
            (grad,) = torch.autograd.grad(chain, leaf, retain_graph=True)  # chain.backward() may follow
        return log_t, chain, grad * batch.source_mask.unsqueeze(1) * batch.target_mask.unsqueeze(-1)

    def output_experts(self, enc: Encoded) -> ExpertLogits:
        """The lexical model's logits per distinct source word (:func:`word_experts`), with the decoder's expert
        ``u`` where there is one."""
        u = None if self.decoder_expert is None else enc.state["query"]
        return self.lexical.experts(enc.batch.source, u)

    def posterior_scores(self, enc: Encoded) -> Tensor:
        """The prior's scores: no inference network."""
        return enc.prior_scores

    def lexical_log_probs(self, source_ids: Tensor) -> Tensor:
        """``log t(. | x)`` ``(N, V)`` for source word ids ``(N,)``."""
        return self.lexical.lexical_log_probs(source_ids)


def check_lexical(owner: str, lexical: IBM1Network | None, source_vocab: int, target_vocab: int) -> None:
    if lexical is not None and (lexical.source_vocab, lexical.num_classes) != (source_vocab, target_vocab):
        raise ValueError(f"{owner}: lexical has vocabularies {lexical.source_vocab} / {lexical.num_classes}, the "
                         f"network {source_vocab} / {target_vocab}")
