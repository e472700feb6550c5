"""``Seq2Seq``: an attentional encoder-decoder whose decoder is fed the *prior's soft context*.

* encoder: embeddings and a bidirectional LSTM -> values ``x_s`` ``(B, S, D)`` with ``D = 2 * encoder_size``;
* decoder: an LSTM whose input at step ``t`` is ``[e(y_{t-1}); c_{t-1}]`` (input feeding), where
  ``c_{t-1} = sum_s p(z_{t-1} = s) x_s`` is the prior's soft context.  The recurrence never depends on a
  *sampled* alignment, so the target positions stay conditionally independent given ``(x, y_<t)`` -- a Pyro
  plate -- and the alignment can be enumerated per token (Deng et al. 2018, Section 5);
* prior scores (``attention=``, :mod:`~pyro_attention.networks.attention`): ``"mlp"``
  ``a_{t,s} = w^T tanh(W_h h_t + W_x x_s)`` (the paper's, default), Luong's ``"general"`` ``h_t^T W_a x_s``
  or ``"dot"`` ``h_t^T x_s``;
* output (``output=``, :mod:`~pyro_attention.networks.output`) for a context ``c`` (a hard ``x_z``, a soft or a
  relaxed one): ``"tanh"`` ``logits = U tanh(W_o [h_t; c] + b)`` (the paper's, default) or ``"product"``, a
  product of experts ``logits = U_h h_t + b + U_x c`` whose enumeration over alignments costs about one soft
  step;
* inference network (separate parameters, as in the paper): BiLSTMs over the source and over the *whole*
  target, and a bilinear score ``b_{t,s} = u_t^T W v_s``, so ``q(z_t | x, y)`` sees every target token.

The paper's sizes (IWSLT14): ``embedding 512, encoder 2 layers x 512 per direction, decoder 2 layers x 768,
attention 512``.  The defaults here are CPU-sized (``64 / 64 / 128 / 64``, one layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from pyro_attention.data.translation import PAD, SPECIALS, TranslationBatch
from pyro_attention.networks.attention import ATTENTION_SCORES
from pyro_attention.networks.base import Encoded, HeadNetwork, mask_scores, rename_legacy_keys
from pyro_attention.networks.output import OUTPUT_LAYERS, OutputLayer, TanhOutput, check_output

#: parameter names before the attention score and the output layer became objects -> their names now
_LEGACY_KEYS = {"att_h.": "score.att_h.", "att_x.": "score.att_x.", "att_v.": "score.att_v.",
                "out_h.": "head.out_h.", "out_c.": "head.out_c.", "out.": "head.out."}


@dataclass
class SourceEncoding:
    """What the decoder needs from the source (kept for step-by-step decoding)."""

    values: Tensor  # (B, S, D)
    keys: Tensor  # (B, S, A): W_x x_s, precomputed
    source_mask: Tensor  # (B, S)


class Seq2Seq(HeadNetwork):
    """Attentional LSTM encoder-decoder for translation.

    :param source_vocab: source vocabulary size.
    :param target_vocab: target vocabulary size ``V``.
    :param embedding_size: ``E`` (both sides).
    :param encoder_size: BiLSTM hidden size per direction (values have ``D = 2 * encoder_size``).
    :param decoder_size: decoder LSTM hidden size.
    :param attention_size: MLP attention hidden size (``attention="mlp"`` only).
    :param layers: LSTM layers of encoder and decoder.
    :param dropout: dropout on embeddings and between LSTM layers (active in ``train()`` mode).
    :param chunk_size: source positions per chunk of :meth:`aligned_log_likelihood` (memory-bounded
        enumeration; ``None`` computes all ``S`` at once; the ``"product"`` layer needs no chunks).
    :param output: the output layer, a key of :data:`~pyro_attention.networks.output.OUTPUT_LAYERS`:
        ``"tanh"`` (default) or ``"product"``.
    :param attention: the prior's score, a key of :data:`~pyro_attention.networks.attention.ATTENTION_SCORES`:
        ``"mlp"`` (default), ``"general"`` or ``"dot"``.
    """

    def __init__(
        self,
        source_vocab: int,
        target_vocab: int,
        embedding_size: int = 64,
        encoder_size: int = 64,
        decoder_size: int = 128,
        attention_size: int = 64,
        layers: int = 1,
        dropout: float = 0.0,
        chunk_size: int | None = 8,
        output: str = "tanh",
        attention: str = "mlp",
    ) -> None:
        super().__init__()
        for name, size, low in (
            ("source_vocab", source_vocab, len(SPECIALS)), ("target_vocab", target_vocab, len(SPECIALS)),
            ("embedding_size", embedding_size, 1), ("encoder_size", encoder_size, 1),
            ("decoder_size", decoder_size, 1), ("attention_size", attention_size, 1), ("layers", layers, 1),
        ):
            if size < low:
                raise ValueError(f"Seq2Seq: {name} must be >= {low}, got {size}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"Seq2Seq: dropout must be in [0, 1), got {dropout}")
        check_output("Seq2Seq", output)
        if attention not in ATTENTION_SCORES:
            raise ValueError(f"Seq2Seq: attention must be one of {tuple(ATTENTION_SCORES)}, got {attention!r}")
        self.output, self.attention = output, attention
        self.num_classes = target_vocab
        self.source_vocab = source_vocab
        self.chunk_size = chunk_size
        D = 2 * encoder_size
        self.value_size = D
        self.dropout = nn.Dropout(dropout)
        self.src_embed = nn.Embedding(source_vocab, embedding_size, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(target_vocab, embedding_size, padding_idx=PAD)
        self.encoder = nn.LSTM(
            embedding_size,
            encoder_size,
            layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if layers > 1 else 0.0,
        )
        self.decoder = nn.ModuleList(
            nn.LSTMCell(embedding_size + D if i == 0 else decoder_size, decoder_size) for i in range(layers)
        )
        self.init_h = nn.Linear(D, decoder_size * layers)
        try:
            self.score = ATTENTION_SCORES[attention](decoder_size, D, attention_size)
        except ValueError as e:
            raise ValueError(f"Seq2Seq: {e}") from None
        if output == "tanh":
            self.head: OutputLayer = TanhOutput(decoder_size, D, decoder_size, target_vocab, dropout)
        else:
            self.head = OUTPUT_LAYERS[output](decoder_size, D, target_vocab, dropout)
        # inference network q(z | x, y)
        self.q_src_embed = nn.Embedding(source_vocab, embedding_size, padding_idx=PAD)
        self.q_tgt_embed = nn.Embedding(target_vocab, embedding_size, padding_idx=PAD)
        self.q_src = nn.LSTM(embedding_size, encoder_size, batch_first=True, bidirectional=True)
        self.q_tgt = nn.LSTM(embedding_size, encoder_size, batch_first=True, bidirectional=True)
        self.q_bilinear = nn.Linear(D, D, bias=False)
        rename_legacy_keys(self, _LEGACY_KEYS)

    # -- encoder ----------------------------------------------------------------------------------------------
    def _bilstm(self, lstm: nn.LSTM, embedded: Tensor, mask: Tensor) -> Tensor:
        lengths = mask.sum(-1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        out, _ = lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=mask.shape[1])
        return out

    def encode_source(self, source: Tensor, source_mask: Tensor) -> SourceEncoding:
        values = self._bilstm(self.encoder, self.dropout(self.src_embed(source)), source_mask)
        return SourceEncoding(values, self.score.keys(values), source_mask)

    # -- decoder ----------------------------------------------------------------------------------------------
    def initial_state(self, src: SourceEncoding) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
        """Decoder LSTM states and the first fed context (zeros), from the mean of the source values."""
        mask = src.source_mask.unsqueeze(-1).to(src.values.dtype)
        mean = (src.values * mask).sum(1) / mask.sum(1)
        h0 = torch.tanh(self.init_h(mean)).chunk(len(self.decoder), dim=-1)
        return [(h, torch.zeros_like(h)) for h in h0], torch.zeros_like(mean)

    def decoder_step(
        self, src: SourceEncoding, y_prev: Tensor, state: list[tuple[Tensor, Tensor]], fed: Tensor
    ) -> tuple[Tensor, Tensor, list[tuple[Tensor, Tensor]], Tensor]:
        """One decoder step.

        :returns: ``h_t`` ``(N, H)``, prior scores ``a_t`` ``(N, S)`` (unmasked), the new LSTM states, and the
            prior's soft context ``c_t`` ``(N, D)`` to feed to the next step.
        """
        inp = torch.cat([self.dropout(self.tgt_embed(y_prev)), fed], dim=-1)
        new_state = []
        for i, cell in enumerate(self.decoder):
            h, c = cell(inp, state[i])
            new_state.append((h, c))
            inp = self.dropout(h) if i + 1 < len(self.decoder) else h
        h = inp
        scores = self.score.scores(h, src.keys)
        weights = torch.softmax(mask_scores(scores.unsqueeze(1), src.source_mask).squeeze(1), dim=-1)
        context = torch.einsum("ns,nsd->nd", weights, src.values)
        return h, scores, new_state, context

    def encode(self, batch: TranslationBatch) -> Encoded:
        if not isinstance(batch, TranslationBatch):
            raise TypeError(f"Seq2Seq.encode expects a TranslationBatch, got {type(batch).__name__}")
        batch.validate(self.source_vocab, self.num_classes)
        src = self.encode_source(batch.source, batch.source_mask)
        state, fed = self.initial_state(src)
        hs, scores = [], []
        for t in range(batch.target.shape[1]):
            h, a, state, fed = self.decoder_step(src, batch.target_in[:, t], state, fed)
            hs.append(h)
            scores.append(a)
        h = torch.stack(hs, 1)  # (B, T, H)
        return Encoded(
            values=src.values,
            source_mask=batch.source_mask,
            target=batch.target,
            target_mask=batch.target_mask,
            prior_scores=torch.stack(scores, 1),  # (B, T, S)
            state={"query": self.head.query(h), "h": h},
            batch=batch,
        )

    def aligned_hidden(self, enc: Encoded) -> Tensor:
        """``tanh(W_o h_t + W_c x_s + b)`` for every ``(s, b, t)``, ``(S, B, T, H)``: ``W_c x_s`` is computed once
        per source position rather than once per target position (same values; with active dropout, which
        draws a mask per copy of the context, the generic path runs)."""
        if self.training and self.dropout.p > 0:
            return super().aligned_hidden(enc)
        return self.head.aligned_hidden(enc.state["query"], enc.values)

    def step_logits(self, h: Tensor, context: Tensor) -> Tensor:
        """Output logits for decoder states ``h`` ``(N, H)`` and contexts ``(..., N, D)`` (decoding)."""
        return self.head.logits(self.head.query(h), context)

    # -- inference network -------------------------------------------------------------------------------------
    def posterior_scores(self, enc: Encoded) -> Tensor:
        batch: TranslationBatch = enc.batch
        v = self._bilstm(self.q_src, self.q_src_embed(batch.source), batch.source_mask)  # (B, S, D)
        u = self._bilstm(self.q_tgt, self.q_tgt_embed(batch.target), batch.target_mask)  # (B, T, D)
        return torch.einsum("btd,bsd->bts", self.q_bilinear(u), v)

