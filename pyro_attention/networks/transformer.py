r"""``TransformerSeq2Seq``: a pre-LN Transformer encoder-decoder whose alignment is one dedicated attention head.

* encoder: ``sqrt(d) e(x_s)`` plus sinusoidal positions, ``layers`` pre-LN :class:`torch.nn.TransformerEncoderLayer`
  blocks and a final layer norm -> ``m_s`` ``(B, S, d)``;
* decoder: the same over ``y_<t`` with ``layers`` pre-LN :class:`torch.nn.TransformerDecoderLayer` blocks (causal
  self-attention, *soft* multi-head cross-attention to ``m``) and a final layer norm -> ``h_t`` ``(B, T, d)``.  The
  decoder never sees a sampled alignment, so the target positions stay conditionally independent given
  ``(x, y_<t)`` -- a Pyro plate -- and the alignment is enumerated per token, as in :class:`Seq2Seq`;
* the alignment: one dedicated single-head attention from the top decoder state ``h_t`` to the encoder output,
  whose softmax is the prior ``p(z_t = s | x, y_<t)`` (``attention=``; default
  :class:`~pyro_attention.networks.attention.ScaledDotScore` ``(W_q h_t)^T (W_k m_s) / sqrt(A)``);
* values ``x_s``, what a context picks or averages: the encoder's output ``m_s`` (default) or, with
  ``embedding_values=True``, the source word's own embedding ``e(x_s)`` (no position, no context), so that a
  product-of-experts expert ``v_s = U_x e(x_s)`` is a lexical table, as IBM Model 1's;
* output (``output=``): :class:`~pyro_attention.networks.output.TanhOutput` ``U tanh(W_o [h_t; c] + b)`` or
  :class:`~pyro_attention.networks.output.ProductOfExperts` ``u_t + v(c)``, whose exact enumeration costs about one
  soft step;
* inference network (its own parameters): one pre-LN encoder layer over the source and one decoder layer over the
  *whole* target (no causal mask, so ``q(z_t | x, y)`` sees every target token) attending to it, and a scaled
  bilinear score ``u_t^T W v_s / sqrt(d)`` (near uniform at initialisation, as the prior is).

Every block is PyTorch's own.  Step-by-step decoding (beam search, K-max) keeps the projected keys and values of
every layer: the source's once per sentence, the target's one position per step
(:meth:`TransformerSeq2Seq.decoder_step`, with :func:`torch.nn.functional.scaled_dot_product_attention` on the
layers' own weights); a test checks it against the parallel decoder.  Matrices start Glorot-uniform (as
OpenNMT-py's Transformer, ``param_init_glorot``), or uniform in ``[-init, init]`` for ``init > 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pyro_attention.checks import count
from pyro_attention.data.translation import PAD, SPECIALS, TranslationBatch
from pyro_attention.networks.attention import ATTENTION_SCORES, AttentionScore, ScaledDotScore
from pyro_attention.networks.base import Encoded, check_part
from pyro_attention.networks.output import OUTPUT_LAYERS, OutputLayer, TanhOutput
from pyro_attention.networks.seq2seq import TranslationNetwork

#: per decoder layer, the projected self-attention keys and values of the positions decoded so far,
#: each ``(N, heads, t, d / heads)``
KeyValues = list[tuple[Tensor, Tensor]]


def sinusoids(length: int, size: int, like: Tensor) -> Tensor:
    """The sinusoidal position encodings ``(length, size)`` of Vaswani et al. (2017), on ``like``'s device and dtype."""
    position = torch.arange(length, device=like.device, dtype=like.dtype).unsqueeze(1)
    rate = torch.exp(torch.arange(0, size, 2, device=like.device, dtype=like.dtype) * (-math.log(10000.0) / size))
    table = like.new_zeros(length, size)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table


def _causal(length: int, device: torch.device) -> Tensor:
    """The decoder's self-attention mask ``(length, length)``: ``True`` where a position may *not* attend (a later
    one)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).triu(1)


def _heads(x: Tensor, heads: int) -> Tensor:
    """``(N, L, d)`` -> ``(N, heads, L, d / heads)``."""
    return x.unflatten(-1, (heads, -1)).transpose(1, 2)


@dataclass
class TransformerMemory:
    """The encoded source, kept for step-by-step decoding (a
    :class:`~pyro_attention.tasks.translation.decoding.SourceMemory`)."""

    values: Tensor  # (N, S, D): what the contexts average
    keys: Tensor  # (N, S, A): the alignment head's keys
    source_mask: Tensor  # (N, S)
    cross: list[Tensor]  # per decoder layer, its cross-attention keys and values stacked: (2, N, heads, S, d / heads)

    def _map(self, take) -> TransformerMemory:  # noqa: ANN001 - Tensor -> Tensor on the row dimension
        return TransformerMemory(take(self.values, 0), take(self.keys, 0), take(self.source_mask, 0),
                                 [take(kv, 1) for kv in self.cross])

    def repeat_rows(self, n: int) -> TransformerMemory:
        """Every sentence's memory repeated ``n`` times (row ``b * n + j``), for beam search."""
        return self._map(lambda t, dim: t.repeat_interleave(n, dim=dim))

    def select_rows(self, rows: Tensor) -> TransformerMemory:
        """Rows ``rows`` ``(N',)`` long (beam search: drop the sentences that are done)."""
        return self._map(lambda t, dim: t.index_select(dim, rows))


class TransformerSeq2Seq(TranslationNetwork):
    """Pre-LN Transformer encoder-decoder for translation, its alignment a dedicated attention head.

    :param source_vocab: source vocabulary size.
    :param target_vocab: target vocabulary size ``V``.
    :param model_size: ``d``, the width of embeddings and every layer (a multiple of ``heads``, even).
    :param heads: attention heads of the ordinary (soft) self- and cross-attention.
    :param feedforward_size: the hidden size of each layer's feed-forward block.
    :param layers: encoder layers, and decoder layers.
    :param attention_size: ``A``, the alignment head's size.
    :param dropout: dropout on embeddings, inside every layer, and in the output layer (active in ``train()`` mode).
    :param chunk_size: the enumeration kernel's memory setting
        (:attr:`~pyro_attention.networks.base.AttentionNetwork.chunk_size`); the network never reads it.
    :param keep_bytes: the kernel's other memory setting
        (:attr:`~pyro_attention.networks.base.AttentionNetwork.keep_bytes`).
    :param output: the output layer's class: :class:`~pyro_attention.networks.output.TanhOutput` (default) or
        :class:`~pyro_attention.networks.output.ProductOfExperts`.
    :param attention: the alignment head's score class (default
        :class:`~pyro_attention.networks.attention.ScaledDotScore`).
    :param embedding_values: the values are the source words' embeddings rather than the encoder's output.
    :param init: ``> 0``: every parameter uniform in ``[-init, init]``; ``0`` (default): Glorot-uniform matrices.
    """

    def __init__(
        self,
        source_vocab: int,
        target_vocab: int,
        model_size: int = 64,
        heads: int = 4,
        feedforward_size: int = 256,
        layers: int = 2,
        attention_size: int = 64,
        dropout: float = 0.0,
        chunk_size: int | None = 8,
        keep_bytes: int | None = None,
        output: type[OutputLayer] = TanhOutput,
        attention: type[AttentionScore] = ScaledDotScore,
        embedding_values: bool = False,
        init: float = 0.0,
    ) -> None:
        super().__init__()
        self._check_args(source_vocab, target_vocab, model_size, heads, feedforward_size, layers, attention_size,
                         dropout, output, attention, init)
        self.num_classes, self.source_vocab = target_vocab, source_vocab
        self.chunk_size, self.keep_bytes = chunk_size, keep_bytes
        self.model_size, self.heads, self.embedding_values = model_size, heads, embedding_values
        self.value_size = model_size
        self.dropout = nn.Dropout(dropout)
        self.src_embed = nn.Embedding(source_vocab, model_size, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(target_vocab, model_size, padding_idx=PAD)
        self.encoder = nn.TransformerEncoder(self._layer(nn.TransformerEncoderLayer, feedforward_size, dropout),
                                             layers, norm=nn.LayerNorm(model_size), enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(self._layer(nn.TransformerDecoderLayer, feedforward_size, dropout),
                                             layers, norm=nn.LayerNorm(model_size))
        try:
            self.score: AttentionScore = attention(model_size, model_size, attention_size)
            self.head: OutputLayer = output.build(model_size, model_size, target_vocab, dropout)
        except ValueError as e:
            raise ValueError(f"TransformerSeq2Seq: {e}") from None
        # inference network q(z | x, y)
        self.q_src_embed = nn.Embedding(source_vocab, model_size, padding_idx=PAD)
        self.q_tgt_embed = nn.Embedding(target_vocab, model_size, padding_idx=PAD)
        self.q_src = self._layer(nn.TransformerEncoderLayer, feedforward_size, dropout)
        self.q_tgt = self._layer(nn.TransformerDecoderLayer, feedforward_size, dropout)
        self.q_src_norm, self.q_tgt_norm = nn.LayerNorm(model_size), nn.LayerNorm(model_size)
        self.q_bilinear = nn.Linear(model_size, model_size, bias=False)
        self._initialise(init)

    def _layer(self, kind: type[nn.Module], feedforward_size: int, dropout: float) -> nn.Module:
        return kind(self.model_size, self.heads, feedforward_size, dropout, batch_first=True, norm_first=True)

    def _initialise(self, init: float) -> None:
        with torch.no_grad():
            for p in self.parameters():
                if init > 0:
                    p.uniform_(-init, init)
                elif p.dim() > 1:
                    nn.init.xavier_uniform_(p)
            for embed in (self.src_embed, self.tgt_embed, self.q_src_embed, self.q_tgt_embed):
                embed.weight[PAD].zero_()

    @staticmethod
    def _check_args(source_vocab: int, target_vocab: int, model_size: int, heads: int, feedforward_size: int,
                    layers: int, attention_size: int, dropout: float, output: type[OutputLayer],
                    attention: type[AttentionScore], init: float) -> None:
        """A ``ValueError`` (a ``TypeError`` for a size that is not a whole number) naming the first bad argument."""
        for name, size, low in (
            ("source_vocab", source_vocab, len(SPECIALS)), ("target_vocab", target_vocab, len(SPECIALS)),
            ("model_size", model_size, 2), ("heads", heads, 1), ("feedforward_size", feedforward_size, 1),
            ("layers", layers, 1), ("attention_size", attention_size, 1),
        ):
            count(size, f"TransformerSeq2Seq: {name}", low)
        if model_size % 2 or model_size % heads:
            raise ValueError(f"TransformerSeq2Seq: model_size must be even and a multiple of heads, got model_size "
                             f"{model_size} and heads {heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"TransformerSeq2Seq: dropout must be in [0, 1), got {dropout}")
        check_part("TransformerSeq2Seq", "output", output, OutputLayer, OUTPUT_LAYERS)
        check_part("TransformerSeq2Seq", "attention", attention, AttentionScore, ATTENTION_SCORES)
        if not 0.0 <= init < float("inf"):
            raise ValueError(f"TransformerSeq2Seq: init must be >= 0 (0: Glorot-uniform), got {init}")

    # -- encoder ----------------------------------------------------------------------------------------------
    def _embed(self, embed: nn.Embedding, ids: Tensor, start: int = 0) -> Tensor:
        """``sqrt(d) e(ids) + positions`` from position ``start``, with dropout: ``(N, L, d)``."""
        x = embed(ids) * self.model_size**0.5
        return self.dropout(x + sinusoids(start + ids.shape[1], self.model_size, x)[start:])

    def _encode(self, source: Tensor, source_mask: Tensor) -> tuple[Tensor, Tensor]:
        """The encoder's output ``m`` ``(B, S, d)`` and the values ``(B, S, d)``."""
        memory = self.encoder(self._embed(self.src_embed, source), src_key_padding_mask=~source_mask)
        values = self.dropout(self.src_embed(source) * self.model_size**0.5) if self.embedding_values else memory
        return memory, values

    def encode_source(self, source: Tensor, source_mask: Tensor) -> TransformerMemory:
        """The source memory for step-by-step decoding: values, alignment keys and every decoder layer's projected
        cross-attention keys and values."""
        memory, values = self._encode(source, source_mask)
        cross = []
        for layer in self.decoder.layers:
            attn = layer.multihead_attn
            d = self.model_size
            k = F.linear(memory, attn.in_proj_weight[d : 2 * d], attn.in_proj_bias[d : 2 * d])
            v = F.linear(memory, attn.in_proj_weight[2 * d :], attn.in_proj_bias[2 * d :])
            cross.append(torch.stack([_heads(k, self.heads), _heads(v, self.heads)]))
        return TransformerMemory(values, self.score.keys(memory), source_mask, cross)

    # -- decoder ----------------------------------------------------------------------------------------------
    def encode(self, batch: TranslationBatch) -> Encoded:
        if not isinstance(batch, TranslationBatch):
            raise TypeError(f"TransformerSeq2Seq.encode expects a TranslationBatch, got {type(batch).__name__}")
        batch.validate(self.source_vocab, self.num_classes, device=self.device)
        memory, values = self._encode(batch.source, batch.source_mask)
        h = self.decoder(self._embed(self.tgt_embed, batch.target_in), memory,
                         tgt_mask=_causal(batch.target_in.shape[1], memory.device),
                         memory_key_padding_mask=~batch.source_mask)
        return Encoded(
            values=values,
            source_mask=batch.source_mask,
            target=batch.target,
            target_mask=batch.target_mask,
            prior_scores=self.score.table(h, self.score.keys(memory)),  # (B, T, S)
            state={"query": self.head.query(h), "h": h},
            batch=batch,
        )

    def initial_state(self, src: TransformerMemory) -> tuple[KeyValues, Tensor]:
        """No positions decoded yet (empty key/value caches), and an empty fed vector ``(N, 0)`` (the decoder is fed
        nothing besides the previous word)."""
        N = src.values.shape[0]
        empty = src.values.new_zeros(N, self.heads, 0, self.model_size // self.heads)
        return [(empty, empty) for _ in self.decoder.layers], src.values.new_zeros(N, 0)

    def decoder_step(
        self, src: TransformerMemory, y_prev: Tensor, state: KeyValues, fed: Tensor
    ) -> tuple[Tensor, Tensor, KeyValues, Tensor]:
        """One decoder position (in ``eval()`` mode: no dropout) from the cached keys and values: ``h_t`` ``(N, d)``,
        the prior's scores ``(N, S)`` (unmasked), the caches with position ``t`` added, and ``fed`` unchanged."""
        d, H = self.model_size, self.heads
        x = self._embed(self.tgt_embed, y_prev.unsqueeze(1), start=state[0][0].shape[2])  # (N, 1, d)
        source_mask = src.source_mask[:, None, None, :]  # (N, 1, 1, S), True: may attend
        new_state = []
        for layer, (k_cache, v_cache), cross in zip(self.decoder.layers, state, src.cross, strict=True):
            attn = layer.self_attn
            q, k, v = F.linear(layer.norm1(x), attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
            k_cache = torch.cat([k_cache, _heads(k, H)], dim=2)
            v_cache = torch.cat([v_cache, _heads(v, H)], dim=2)
            new_state.append((k_cache, v_cache))
            mixed = F.scaled_dot_product_attention(_heads(q, H), k_cache, v_cache)
            x = x + attn.out_proj(mixed.transpose(1, 2).flatten(2))
            attn = layer.multihead_attn
            q = F.linear(layer.norm2(x), attn.in_proj_weight[:d], attn.in_proj_bias[:d])
            mixed = F.scaled_dot_product_attention(_heads(q, H), cross[0], cross[1], attn_mask=source_mask)
            x = x + attn.out_proj(mixed.transpose(1, 2).flatten(2))
            x = x + layer.linear2(layer.activation(layer.linear1(layer.norm3(x))))
        h = self.decoder.norm(x).squeeze(1)
        return h, self.score.scores(h, src.keys), new_state, fed

    def own_posteriors(self, batch: TranslationBatch) -> dict[str, Tensor]:
        """``{"cross-attention": ...}``: the top decoder layer's soft multi-head cross-attention weights averaged over
        its heads ``(B, T, S)``, the way alignments are usually read off a Transformer (a baseline for the
        alignment head's prior and posterior)."""
        with torch.no_grad():
            return {"cross-attention": self.cross_attention(batch)[0]}

    def cross_attention(self, batch: TranslationBatch) -> tuple[Tensor, Tensor]:
        """The top decoder layer's cross-attention weights averaged over heads ``(B, T, S)``, and the decoder's
        output ``h`` ``(B, T, d)`` recomputed on the way (equal to :meth:`encode`'s)."""
        memory, _ = self._encode(batch.source, batch.source_mask)
        causal, padding = _causal(batch.target_in.shape[1], memory.device), ~batch.source_mask
        x = self._embed(self.tgt_embed, batch.target_in)
        *below, top = self.decoder.layers
        for layer in below:
            x = layer(x, memory, tgt_mask=causal, memory_key_padding_mask=padding)
        q = top.norm1(x)
        x = x + top.dropout1(top.self_attn(q, q, q, attn_mask=causal, need_weights=False)[0])
        mixed, weights = top.multihead_attn(top.norm2(x), memory, memory, key_padding_mask=padding,
                                            need_weights=True, average_attn_weights=True)
        x = x + top.dropout2(mixed)
        x = x + top.dropout3(top.linear2(top.dropout(top.activation(top.linear1(top.norm3(x))))))
        return weights, self.decoder.norm(x)

    @staticmethod
    def reorder_state(state: KeyValues, rows: Tensor) -> KeyValues:
        """The caches of rows ``rows`` ``(N',)`` (beam search: the hypotheses that continue)."""
        return [(k[rows], v[rows]) for k, v in state]

    # -- inference network -------------------------------------------------------------------------------------
    def inference_parameters(self) -> list[nn.Parameter]:
        """The inference network's own parameters: its embeddings, its two layers, their norms and the bilinear
        score."""
        modules = (self.q_src_embed, self.q_tgt_embed, self.q_src, self.q_tgt, self.q_src_norm, self.q_tgt_norm,
                   self.q_bilinear)
        return [p for m in modules for p in m.parameters()]

    def posterior_scores(self, enc: Encoded) -> Tensor:
        batch: TranslationBatch = enc.batch
        v = self.q_src_norm(self.q_src(self._embed(self.q_src_embed, batch.source),
                                       src_key_padding_mask=~batch.source_mask))  # (B, S, d)
        u = self.q_tgt_norm(self.q_tgt(self._embed(self.q_tgt_embed, batch.target), v,
                                       tgt_key_padding_mask=~batch.target_mask,
                                       memory_key_padding_mask=~batch.source_mask))  # (B, T, d)
        # scaled as a dot-product score: unscaled, unit-variance states of width d give scores of standard deviation
        # ~sqrt(d / 3) at initialisation (13 at d = 256), a guide nearly one-hot on random positions from the start
        return torch.einsum("btd,bsd->bts", self.q_bilinear(u), v) / math.sqrt(v.shape[-1])


__all__ = ["TransformerMemory", "TransformerSeq2Seq", "sinusoids"]
