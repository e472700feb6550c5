"""A neural distortion model on IBM Model 1's table: :class:`DistortionNetwork`, Seq2Seq's learned prior times the
lexical table of an :class:`~pyro_attention.networks.lexical.IBM1Network` (see :mod:`pyro_attention.networks.lexical`
for the family)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyro_attention.data.translation import TranslationBatch
from pyro_attention.networks.base import Encoded, ExpertLogits, mask_scores
from pyro_attention.networks.lexical import DiagonalTension, IBM1Network, JumpTransition, check_lexical
from pyro_attention.networks.output import ProductOfExperts
from pyro_attention.networks.seq2seq import Seq2Seq

__all__ = ["DistortionNetwork", "filter_step"]


def filter_step(scores: Tensor, filtered: Tensor | None, jumps: Tensor, transition: JumpTransition, log_t: Tensor,
                source_mask: Tensor, diagonal: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One target position of the filtered prior: ``scores`` ``(B, S)`` plus ``log sum_s' f(s') J(s | s')`` (from the
    second position on); returns those prior scores and the new filtered posterior ``f ∝ prior(s) t(y | x_s)``
    (``log_t`` ``(B, S)``; ``diagonal``: a :class:`DiagonalTension` score for this position, in both)."""
    if filtered is not None:  # finite at padded positions: they are masked where the scores are used
        scores = scores + transition.predict(filtered, jumps).masked_fill(~source_mask, 0.0)
    prior = scores if diagonal is None else scores + diagonal
    log_prior = torch.log_softmax(mask_scores(prior.unsqueeze(1), source_mask).squeeze(1), -1)
    return scores, torch.softmax(log_prior + log_t, -1)


class DistortionNetwork(Seq2Seq):
    """:class:`~pyro_attention.networks.Seq2Seq`'s learned prior times an :class:`IBM1Network`'s lexical table.

    ``p(z_t = s | x, y_<t)`` is Seq2Seq's prior (its decoder LSTM, fed the prior's soft context, and attention
    scores over the BiLSTM source states: a neural distortion model) and ``p(y_t | x, z_t = s) = t(y_t | x_s)`` is
    the lexical model ``lexical``'s (by default a new free table, IBM Model 1's parameterisation; pass a trained
    :class:`IBM1Network` to start from its table, as GIZA++ trains Model 1 before its HMM).  The lexical model's
    parameters are the submodule ``lexical`` (names ``lexical.*``, e.g. for their own learning rate).

    Takes :class:`~pyro_attention.networks.Seq2Seq`'s keyword arguments for the prior (``output`` and
    ``input_feed`` are fixed: the lexical expert, the prior's soft context).  The source values the expert sees
    (``enc.values``) are the lexical model's; the prior scores and the decoder's fed context use the BiLSTM states.

    :param tension: the start of a learned :class:`DiagonalTension` added to the prior's scores (``None``: none,
        the prior sees no target length).
    :param max_jump: an HMM transition (:class:`JumpTransition`, jumps clipped to ``+-max_jump``) added to the
        prior's scores, and the decoder fed the filtered posterior's context ``sum_s f_{t-1}(s) x_s`` instead of
        the prior's (``None``: neither).

    An aligner: with ``tension`` or ``max_jump`` the step-by-step decoding methods it inherits do not compute its
    prior (they see neither the target length nor the filtered posterior).
    """

    def __init__(self, source_vocab: int, target_vocab: int, lexical: IBM1Network | None = None,
                 tension: float | None = None, max_jump: int | None = None, **kwargs: Any) -> None:
        for fixed in ("output", "input_feed"):
            if fixed in kwargs:
                raise ValueError(f"DistortionNetwork: {fixed} is fixed (the lexical expert, the soft context)")
        check_lexical("DistortionNetwork", lexical, source_vocab, target_vocab)
        super().__init__(source_vocab, target_vocab, output=ProductOfExperts, **kwargs)
        del self.head  # Seq2Seq's product layer: the lexical model's expert takes its place
        self.lexical = IBM1Network(source_vocab, target_vocab) if lexical is None else lexical
        self.head = self.lexical.head  # registered after ``lexical``: its parameters are named lexical.head.*
        self.value_size = self.lexical.value_size
        self.diagonal = None if tension is None else DiagonalTension(tension)
        self.transition = None if max_jump is None else JumpTransition(max_jump)

    def encode(self, batch: TranslationBatch) -> Encoded:
        enc = super().encode(batch) if self.transition is None else self._encode_filtered(batch)
        enc.values = self.lexical.source_values(batch.source)
        if self.diagonal is not None:
            enc.prior_scores = enc.prior_scores + self.diagonal(batch.target_mask, batch.source_mask)
        return enc

    def _encode_filtered(self, batch: TranslationBatch) -> Encoded:
        """Seq2Seq's decoder loop with the HMM transition: step ``t``'s scores get ``log sum f_{t-1} J``, its
        filtered posterior ``f_t ∝ prior_t(s) t(y_t | x_s)`` is fed (as its context) to step ``t + 1``."""
        if not isinstance(batch, TranslationBatch):
            raise TypeError(f"DistortionNetwork.encode expects a TranslationBatch, got {type(batch).__name__}")
        batch.validate(self.source_vocab, self.num_classes, device=self.device)
        src = self.encode_source(batch.source, batch.source_mask)
        state, fed = self.initial_state(src)
        log_t = self.lexical.observed_log_probs(batch)  # (B, T, S)
        jumps = self.transition.matrix(batch.source_mask)
        diagonal = None if self.diagonal is None else self.diagonal(batch.target_mask, batch.source_mask)
        filtered = None
        hs, scores = [], []
        for t in range(batch.target.shape[1]):
            h, a, state, _ = self.decoder_step(src, batch.target_in[:, t], state, fed)
            a, filtered = filter_step(a, filtered, jumps, self.transition, log_t[:, t], batch.source_mask,
                                      None if diagonal is None else diagonal[:, t])
            hs.append(h)
            scores.append(a)
            fed = torch.einsum("bs,bsd->bd", filtered, src.values)
        h = torch.stack(hs, 1)
        return Encoded(src.values, batch.source_mask, batch.target, batch.target_mask, torch.stack(scores, 1),
                       {"query": self.head.query(h), "h": h}, batch)

    def output_experts(self, enc: Encoded) -> ExpertLogits:
        """The lexical model's logits per distinct source word (:func:`word_experts`)."""
        return self.lexical.output_experts(enc)

    def lexical_log_probs(self, source_ids: Tensor) -> Tensor:
        """``log t(. | x)`` ``(N, V)`` for source word ids ``(N,)``."""
        return self.lexical.lexical_log_probs(source_ids)
