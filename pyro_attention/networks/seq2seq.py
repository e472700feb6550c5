"""``Seq2Seq``: an attentional encoder-decoder whose decoder is fed the *prior's soft context*.

* encoder: embeddings and a bidirectional LSTM -> values ``x_s`` ``(B, S, D)`` with ``D = 2 * encoder_size``;
* decoder: an LSTM whose input at step ``t`` is ``[e(y_{t-1}); f_{t-1}]`` (input feeding; ``input_feed=``,
  :mod:`~pyro_attention.networks.recurrence`).  With :class:`ContextFeed` (default) ``f_{t-1} = c_{t-1} =
  sum_s p(z_{t-1} = s) x_s`` is the prior's soft context; with :class:`AttentionalFeed` it is Luong et al.'s (2015)
  attentional state, the output layer's hidden vector at the soft context, ``tanh(W_o [h_{t-1}; c_{t-1}] + b)``
  (OpenNMT-py's ``input_feed 1``).
  Either way the recurrence never depends on a *sampled* alignment, so the target positions stay conditionally
  independent given ``(x, y_<t)`` -- a Pyro plate -- and the alignment can be enumerated per token (Deng et al.
  2018, Section 5).  Its initial state (``bridge=``) is ``tanh(W mean_s x_s)`` with cell 0 (:class:`MeanBridge`,
  default) or the encoder's final states, both directions concatenated (:class:`FinalBridge`, OpenNMT-py's, which
  needs ``decoder_size = 2 * encoder_size``);
* prior scores (``attention=``, :mod:`~pyro_attention.networks.attention`): :class:`MLPScore`
  ``a_{t,s} = w^T tanh(W_h h_t + W_x x_s)`` (the paper's, default), Luong's :class:`GeneralScore`
  ``h_t^T W_a x_s`` or :class:`DotScore` ``h_t^T x_s``;
* output (``output=``, :mod:`~pyro_attention.networks.output`) for a context ``c`` (a hard ``x_z``, a soft or a
  relaxed one): :class:`TanhOutput` ``logits = U tanh(W_o [h_t; c] + b)`` (the paper's, default) or
  :class:`ProductOfExperts` ``logits = U_h h_t + b + U_x c``, whose enumeration over alignments costs about one
  soft step;
* inference network (separate parameters, as in the paper): BiLSTMs over the source and over the *whole*
  target, and a bilinear score ``b_{t,s} = u_t^T W v_s``, so ``q(z_t | x, y)`` sees every target token.

The four parts are given as classes, which the network builds with its own sizes; configs and the command line name
them (``--attention-type general``) and :func:`~pyro_attention.tasks.translation.build_pair` resolves the names
(:data:`~pyro_attention.networks.attention.ATTENTION_SCORES`, :data:`~pyro_attention.networks.output.OUTPUT_LAYERS`,
:data:`~pyro_attention.networks.recurrence.INPUT_FEEDS`, :data:`~pyro_attention.networks.recurrence.BRIDGES`).

The paper's sizes (IWSLT14): ``embedding 512, encoder 2 layers x 512 per direction, decoder 2 layers x 768,
attention 512``.  The defaults here are CPU-sized (``64 / 64 / 128 / 64``, one layer).  ``init=0.1`` draws every
parameter uniformly in ``[-0.1, 0.1]`` (OpenNMT-py's ``param_init 0.1``) instead of torch's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from pyro_attention.checks import count
from pyro_attention.data.translation import PAD, SPECIALS, TranslationBatch
from pyro_attention.networks.attention import ATTENTION_SCORES, AttentionScore, MLPScore
from pyro_attention.networks.base import Encoded, HeadNetwork, check_part, mask_scores
from pyro_attention.networks.output import OUTPUT_LAYERS, OutputLayer, TanhOutput
from pyro_attention.networks.recurrence import BRIDGES, INPUT_FEEDS, Bridge, ContextFeed, InputFeed, MeanBridge, States


@dataclass
class SourceEncoding:
    """What the decoder needs from the source (kept for step-by-step decoding)."""

    values: Tensor  # (B, S, D)
    keys: Tensor  # (B, S, A): W_x x_s, precomputed
    source_mask: Tensor  # (B, S)
    final_h: Tensor | None = None  # (B, layers, D): the encoder's final states (``FinalBridge`` only)
    final_c: Tensor | None = None  # (B, layers, D)

    def repeat_rows(self, n: int) -> SourceEncoding:
        """Every sentence's encoding repeated ``n`` times (row ``b * n + j``), for beam search."""
        return SourceEncoding(*(None if t is None else t.repeat_interleave(n, dim=0) for t in
                                (self.values, self.keys, self.source_mask, self.final_h, self.final_c)))

    def select_rows(self, rows: Tensor) -> SourceEncoding:
        """Rows ``rows`` ``(N',)`` long of the encoding (beam search: drop the sentences that are done)."""
        return SourceEncoding(*(None if t is None else t[rows] for t in
                                (self.values, self.keys, self.source_mask, self.final_h, self.final_c)))


class TranslationNetwork(HeadNetwork):
    """What the translation networks (:class:`Seq2Seq`, :class:`~pyro_attention.networks.TransformerSeq2Seq`) share:
    the output layer's methods that step-by-step decoding
    (:class:`~pyro_attention.tasks.translation.decoding.IncrementalDecoder`) calls on decoder states."""

    source_vocab: int

    def step_logits(self, h: Tensor, context: Tensor) -> Tensor:
        """Output logits ``(..., N, V)`` for decoder states ``h`` ``(N, H)`` (or ``(N, 1, H)``) and contexts
        ``(..., N, D)`` (or ``(N, K, D)``: ``K`` contexts per row) (decoding)."""
        return self.head.logits(self.head.query(h), context)

    def soft_step_logits(self, h: Tensor, fed: Tensor) -> Tensor | None:
        """The output logits ``(N, V)`` at the prior's soft context of the step that returned ``h`` and ``fed``,
        where ``fed`` determines them (decoding, in ``eval()`` mode); else ``None``."""
        return None

    def source_experts(self, values: Tensor) -> Tensor | None:
        """Where the output layer is a product of experts (``step_logits(h, x_s) = query_experts(h) + v_s``): the
        source values' part ``v`` ``(B, S, V)`` for ``values`` ``(B, S, D)``, computed once per sentence when
        decoding; else ``None``."""
        experts = self.head.experts(None, values)
        return None if experts is None else experts.v

    def query_experts(self, h: Tensor) -> Tensor:
        """The decoder states' part ``u`` ``(N, V)`` of a product-of-experts output layer for ``h`` ``(N, H)``
        (``(N, 1)`` zeros for the lexical expert); meaningful where :meth:`source_experts` is not ``None``."""
        return self.head.query(h)


class Seq2Seq(TranslationNetwork):
    """Attentional LSTM encoder-decoder for translation.

    :param source_vocab: source vocabulary size.
    :param target_vocab: target vocabulary size ``V``.
    :param embedding_size: ``E`` (both sides).
    :param encoder_size: BiLSTM hidden size per direction (values have ``D = 2 * encoder_size``).
    :param decoder_size: decoder LSTM hidden size.
    :param attention_size: MLP attention hidden size (:class:`MLPScore` only).
    :param layers: LSTM layers of encoder and decoder.
    :param dropout: dropout on embeddings and between LSTM layers (active in ``train()`` mode).
    :param chunk_size: the memory setting :attr:`~pyro_attention.networks.base.AttentionNetwork.chunk_size`: source
        positions per chunk when the enumeration kernel evaluates the output layer at every source value
        (:mod:`pyro_attention.distributions.enumeration`; ``None`` all ``S`` at once; the ``"product"`` layer
        needs no chunks).  The network itself never reads it.
    :param keep_bytes: the other memory setting of that kernel
        (:attr:`~pyro_attention.networks.base.AttentionNetwork.keep_bytes`): bytes of log-probabilities kept for the
        backward pass, the rest recomputed there (``None``: the kernel's default, 1 GiB).
    :param output: the output layer's class (:class:`~pyro_attention.networks.output.OutputLayer`):
        :class:`TanhOutput` (default) or :class:`ProductOfExperts`.
    :param attention: the prior's score's class (:class:`~pyro_attention.networks.attention.AttentionScore`):
        :class:`MLPScore` (default), :class:`GeneralScore` or :class:`DotScore`.
    :param input_feed: what the decoder is fed besides the previous word
        (:class:`~pyro_attention.networks.recurrence.InputFeed`): :class:`ContextFeed` (the prior's soft context,
        default) or :class:`AttentionalFeed` (Luong's attentional state).
    :param bridge: the decoder's initial state (:class:`~pyro_attention.networks.recurrence.Bridge`):
        :class:`MeanBridge` (default) or :class:`FinalBridge` (the encoder's final states; needs ``decoder_size ==
        2 * encoder_size``).
    :param init: ``> 0``: every parameter uniform in ``[-init, init]`` (padding embeddings zero); ``0`` (default):
        torch's default initialisation.
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
        keep_bytes: int | None = None,
        output: type[OutputLayer] = TanhOutput,
        attention: type[AttentionScore] = MLPScore,
        input_feed: type[InputFeed] = ContextFeed,
        bridge: type[Bridge] = MeanBridge,
        init: float = 0.0,
    ) -> None:
        super().__init__()
        self._check_args(source_vocab, target_vocab, embedding_size, encoder_size, decoder_size, attention_size,
                         layers, dropout, output, attention, input_feed, bridge, init)
        self.num_classes = target_vocab
        self.source_vocab = source_vocab
        self.chunk_size, self.keep_bytes = chunk_size, keep_bytes
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
        fed_size = input_feed.size(D, decoder_size)
        self.decoder = nn.ModuleList(
            nn.LSTMCell(embedding_size + fed_size if i == 0 else decoder_size, decoder_size) for i in range(layers)
        )
        # built where ``init_h`` was before bridges were objects: the same random draws and parameter order
        self.bridge: Bridge = bridge(D, decoder_size, layers)
        try:
            self.score: AttentionScore = attention(decoder_size, D, attention_size)
            self.head: OutputLayer = output.build(decoder_size, D, target_vocab, dropout)
        except ValueError as e:
            raise ValueError(f"Seq2Seq: {e}") from None
        self.feed: InputFeed = input_feed(D, decoder_size, self.head, dropout)
        # inference network q(z | x, y)
        self.q_src_embed = nn.Embedding(source_vocab, embedding_size, padding_idx=PAD)
        self.q_tgt_embed = nn.Embedding(target_vocab, embedding_size, padding_idx=PAD)
        self.q_src = nn.LSTM(embedding_size, encoder_size, batch_first=True, bidirectional=True)
        self.q_tgt = nn.LSTM(embedding_size, encoder_size, batch_first=True, bidirectional=True)
        self.q_bilinear = nn.Linear(D, D, bias=False)
        if init > 0:
            with torch.no_grad():
                for p in self.parameters():
                    p.uniform_(-init, init)
                for embed in (self.src_embed, self.tgt_embed, self.q_src_embed, self.q_tgt_embed):
                    embed.weight[PAD].zero_()

    @staticmethod
    def _check_args(source_vocab: int, target_vocab: int, embedding_size: int, encoder_size: int, decoder_size: int,
                    attention_size: int, layers: int, dropout: float, output: type[OutputLayer],
                    attention: type[AttentionScore], input_feed: type[InputFeed], bridge: type[Bridge],
                    init: float) -> None:
        """A ``ValueError`` (a ``TypeError`` for a size that is not a whole number) naming the first bad argument."""
        for name, size, low in (
            ("source_vocab", source_vocab, len(SPECIALS)), ("target_vocab", target_vocab, len(SPECIALS)),
            ("embedding_size", embedding_size, 1), ("encoder_size", encoder_size, 1),
            ("decoder_size", decoder_size, 1), ("attention_size", attention_size, 1), ("layers", layers, 1),
        ):
            count(size, f"Seq2Seq: {name}", low)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"Seq2Seq: dropout must be in [0, 1), got {dropout}")
        for name, part, base, known in (
            ("output", output, OutputLayer, OUTPUT_LAYERS), ("attention", attention, AttentionScore, ATTENTION_SCORES),
            ("input_feed", input_feed, InputFeed, INPUT_FEEDS), ("bridge", bridge, Bridge, BRIDGES),
        ):
            check_part("Seq2Seq", name, part, base, known)
        try:
            bridge.check_sizes(2 * encoder_size, decoder_size)
        except ValueError as e:
            raise ValueError(f"Seq2Seq: {e}") from None
        if not 0.0 <= init < float("inf"):
            raise ValueError(f"Seq2Seq: init must be >= 0 (0: torch's defaults), got {init}")

    # -- encoder ----------------------------------------------------------------------------------------------
    def _bilstm(self, lstm: nn.LSTM, embedded: Tensor, mask: Tensor) -> Tensor:
        return self._bilstm_states(lstm, embedded, mask)[0]

    @staticmethod
    def _bilstm_states(lstm: nn.LSTM, embedded: Tensor, mask: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Outputs ``(B, S, 2E)`` and the final states ``(h, c)``, each ``(B, layers, 2E)`` (both directions)."""
        lengths = mask.sum(-1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        out, (h_n, c_n) = lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=mask.shape[1])
        B = embedded.shape[0]
        finals = tuple(s.view(lstm.num_layers, 2, B, lstm.hidden_size).permute(2, 0, 1, 3).reshape(
            B, lstm.num_layers, 2 * lstm.hidden_size) for s in (h_n, c_n))
        return out, finals

    def encode_source(self, source: Tensor, source_mask: Tensor) -> SourceEncoding:
        values, (final_h, final_c) = self._bilstm_states(self.encoder, self.dropout(self.src_embed(source)),
                                                         source_mask)
        if not self.bridge.uses_final_states:
            final_h = final_c = None
        return SourceEncoding(values, self.score.keys(values), source_mask, final_h, final_c)

    # -- decoder ----------------------------------------------------------------------------------------------
    def initial_state(self, src: SourceEncoding) -> tuple[States, Tensor]:
        """Decoder LSTM states (the :attr:`bridge`'s) and the first fed vector (zeros)."""
        B = src.values.shape[0]
        fed = src.values.new_zeros(B, self.decoder[0].input_size - self.tgt_embed.embedding_dim)
        return self.bridge.initial(src.values, src.source_mask, src.final_h, src.final_c), fed

    def decoder_step(
        self, src: SourceEncoding, y_prev: Tensor, state: States, fed: Tensor
    ) -> tuple[Tensor, Tensor, States, Tensor]:
        """One decoder step.

        :returns: ``h_t`` ``(N, H)``, prior scores ``a_t`` ``(N, S)`` (unmasked), the new LSTM states, and the
            vector to feed to the next step (the :attr:`feed`'s, from the prior's soft context ``c_t``): ``c_t``
            itself ``(N, D)`` or the attentional state ``(N, H)``.
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
        return h, scores, new_state, self.feed(h, context, self.head)

    def soft_step_logits(self, h: Tensor, fed: Tensor) -> Tensor | None:
        return self.feed.logits(h, fed, self.head)

    def encode(self, batch: TranslationBatch) -> Encoded:
        if not isinstance(batch, TranslationBatch):
            raise TypeError(f"Seq2Seq.encode expects a TranslationBatch, got {type(batch).__name__}")
        batch.validate(self.source_vocab, self.num_classes, device=self.device)
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

    @staticmethod
    def reorder_state(state: list[tuple[Tensor, Tensor]], rows: Tensor) -> list[tuple[Tensor, Tensor]]:
        """The decoder LSTM states of rows ``rows`` ``(N',)`` (beam search: the hypotheses that continue)."""
        return [(h[rows], c[rows]) for h, c in state]

    # -- inference network -------------------------------------------------------------------------------------
    def inference_parameters(self) -> list[nn.Parameter]:
        """The inference network's own parameters: its embeddings, its two BiLSTMs and the bilinear score."""
        modules = (self.q_src_embed, self.q_tgt_embed, self.q_src, self.q_tgt, self.q_bilinear)
        return [p for m in modules for p in m.parameters()]

    def posterior_scores(self, enc: Encoded) -> Tensor:
        batch: TranslationBatch = enc.batch
        v = self._bilstm(self.q_src, self.q_src_embed(batch.source), batch.source_mask)  # (B, S, D)
        u = self._bilstm(self.q_tgt, self.q_tgt_embed(batch.target), batch.target_mask)  # (B, T, D)
        return torch.einsum("btd,bsd->bts", self.q_bilinear(u), v)

