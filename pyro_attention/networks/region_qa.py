"""``RegionQA``: one question attends over a set of region features and predicts one answer (the VQA shape).

* question encoder: mean of token embeddings (or a linear map of a question vector) -> ``q`` ``(B, H)``;
* values: ``x_s = tanh(W_v r_s)`` ``(B, S, D)``;
* prior scores (MLP attention): ``a_s = w^T tanh(W_q q + W_k x_s)``;
* output (``output=``, :mod:`~pyro_attention.networks.output`) for a context ``c``: :class:`ConcatTanhOutput`
  ``logits = U tanh(W_o [q; c] + b_o)`` (default) or :class:`ProductOfExperts` ``logits = U_q q + b + U_x c`` -- both
  nonlinear functions of the attended region after the softmax, so that ``f(E[z]) != E[f(z)]``;
* inference network (separate parameters): ``b_s = w'^T tanh(W'_q q + W'_y e(y) + W'_k r_s)`` sees the
  observed answer ``y``.

An example is a target of length ``T = 1``: the same pairs serve translation with ``T`` target tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pyro_attention.data.region_qa import PAD, RegionBatch
from pyro_attention.networks.base import Encoded, HeadNetwork, check_part
from pyro_attention.networks.output import ConcatTanhOutput, OutputLayer, ProductOfExperts


class RegionQA(HeadNetwork):
    """Region question answering network.

    :param feature_size: region feature size ``F``.
    :param num_answers: answer classes ``A``.
    :param vocab_size: question vocabulary size (token-id questions); ``None`` for vector questions.
    :param question_size: size ``Q`` of vector questions (when ``vocab_size`` is ``None``).
    :param hidden_size: ``D`` (values, question state, attention and output hidden layer).
    :param output: the output layer's class: :class:`ConcatTanhOutput` (default) or :class:`ProductOfExperts`.
    """

    def __init__(
        self,
        feature_size: int,
        num_answers: int,
        vocab_size: int | None = None,
        question_size: int | None = None,
        hidden_size: int = 64,
        output: type[OutputLayer] = ConcatTanhOutput,
    ) -> None:
        super().__init__()
        if (vocab_size is None) == (question_size is None):
            raise ValueError("RegionQA: give exactly one of vocab_size (token questions) or question_size (vectors)")
        for name, size in (("feature_size", feature_size), ("num_answers", num_answers), ("vocab_size", vocab_size),
                           ("question_size", question_size), ("hidden_size", hidden_size)):
            if size is not None and size < 1:
                raise ValueError(f"RegionQA: {name} must be >= 1, got {size}")
        check_part("RegionQA", "output", output, OutputLayer,
                   {"tanh": ConcatTanhOutput, "product": ProductOfExperts})
        self.feature_size = feature_size
        self.num_classes = num_answers
        self.vocab_size = vocab_size
        self.value_size = hidden_size
        H = hidden_size
        if vocab_size is not None:
            self.embed = nn.Embedding(vocab_size, H, padding_idx=PAD)
            self.post_embed = nn.Embedding(vocab_size, H, padding_idx=PAD)
        else:
            self.embed = nn.Linear(question_size, H)
            self.post_embed = nn.Linear(question_size, H)
        self.value = nn.Linear(feature_size, H)
        # prior: MLP attention from the question over regions
        self.att_query = nn.Linear(H, H)
        self.att_key = nn.Linear(H, H, bias=False)
        self.att_v = nn.Linear(H, 1, bias=False)
        # output f(q, c)
        try:
            self.head: OutputLayer = output.build(H, H, num_answers, question_queries=True)
        except ValueError as e:
            raise ValueError(f"RegionQA: {e}") from None
        # inference network q(z | x, y): its own question and region encoders plus an answer embedding
        self.post_answer = nn.Embedding(num_answers, H)
        self.post_key = nn.Linear(feature_size, H, bias=False)
        self.post_v = nn.Linear(H, 1, bias=False)

    def _question(self, batch: RegionBatch, embed: nn.Module) -> Tensor:
        q = batch.question
        if self.vocab_size is None:
            return torch.tanh(embed(q))
        real = (q != PAD).unsqueeze(-1).to(self.value.weight.dtype)
        return (embed(q) * real).sum(1) / real.sum(1).clamp(min=1.0)

    def encode(self, batch: RegionBatch) -> Encoded:
        if not isinstance(batch, RegionBatch):
            raise TypeError(f"RegionQA.encode expects a RegionBatch, got {type(batch).__name__}")
        if batch.regions.shape[-1:] != (self.feature_size,):
            raise ValueError(
                f"regions: expected feature size {self.feature_size}, got shape {tuple(batch.regions.shape)}"
            )
        batch.validate(self.num_classes, self.vocab_size, dtype=self.value.weight.dtype, device=self.device)
        q = self._question(batch, self.embed)  # (B, H)
        # padded rows may hold anything (even NaN): they are zeroed so they never reach a number we use
        regions = batch.regions.masked_fill(~batch.region_mask.unsqueeze(-1), 0.0)
        values = torch.tanh(self.value(regions))  # (B, S, H)
        scores = self.att_v(torch.tanh(self.att_query(q).unsqueeze(1) + self.att_key(values))).squeeze(-1)
        B = values.shape[0]
        return Encoded(
            values=values,
            source_mask=batch.region_mask,
            target=batch.answer.unsqueeze(1),
            target_mask=torch.ones(B, 1, dtype=torch.bool, device=values.device),
            prior_scores=scores.unsqueeze(1),  # (B, 1, S)
            state={"query": self.head.query(q), "regions": regions},  # (B, 1, .): one target position
            batch=batch,
        )

    def posterior_scores(self, enc: Encoded) -> Tensor:
        batch: RegionBatch = enc.batch
        q = self._question(batch, self.post_embed)
        qy = q + self.post_answer(batch.answer)  # (B, H)
        scores = self.post_v(torch.tanh(qy.unsqueeze(1) + self.post_key(enc.state["regions"]))).squeeze(-1)
        return scores.unsqueeze(1)  # (B, 1, S)

