"""The translation batch: padded source and target token ids with masks (and, where known, gold alignments)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pyro_attention.checks import same_device, token_ids

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


@dataclass
class TranslationBatch:
    """A batch of sentence pairs.

    :param source: ``(B, S)`` long source ids (``PAD`` = 0 where padded).
    :param source_mask: ``(B, S)`` bool, ``True`` at real source tokens.
    :param target_in: ``(B, T)`` long decoder inputs ``<s> y_1 ... y_{T-1}`` (teacher forcing).
    :param target: ``(B, T)`` long outputs ``y_1 ... y_T`` (the last real one is ``</s>``).
    :param target_mask: ``(B, T)`` bool, ``True`` at real target positions.
    :param gold: optional ``(B, T)`` long source position each target token is aligned to (``-1``: none).
    """

    source: Tensor
    source_mask: Tensor
    target_in: Tensor
    target: Tensor
    target_mask: Tensor
    gold: Tensor | None = None

    def __len__(self) -> int:
        return self.source.shape[0]

    def __getitem__(self, index: slice | Tensor) -> TranslationBatch:
        return TranslationBatch(
            self.source[index],
            self.source_mask[index],
            self.target_in[index],
            self.target[index],
            self.target_mask[index],
            None if self.gold is None else self.gold[index],
        )

    def to(self, device: torch.device | str) -> TranslationBatch:
        """The same batch with every tensor on ``device``."""
        return TranslationBatch(
            *(None if t is None else t.to(device) for t in
              (self.source, self.source_mask, self.target_in, self.target, self.target_mask, self.gold))
        )

    def validate(self, source_vocab: int | None = None, target_vocab: int | None = None,
                 device: torch.device | None = None) -> None:
        """Raise ``ValueError`` naming the offending tensor and shape for malformed input.

        :param device: where the network is, that every tensor must share.
        """
        s, sm, ti, t, tm = self.source, self.source_mask, self.target_in, self.target, self.target_mask
        if device is not None:
            same_device({"source": s, "source_mask": sm, "target_in": ti, "target": t, "target_mask": tm,
                         "gold": self.gold}, device, "TranslationBatch")
        if s.dim() != 2 or s.dtype != torch.long:
            raise ValueError(f"source must be a (B, S) long tensor, got shape {tuple(s.shape)} dtype {s.dtype}")
        B, S = s.shape
        if tuple(sm.shape) != (B, S) or sm.dtype != torch.bool:
            raise ValueError(f"source_mask must be a (B, S) = {(B, S)} bool tensor, got {tuple(sm.shape)} {sm.dtype}")
        if t.dim() != 2 or t.shape[0] != B or t.dtype != torch.long:
            raise ValueError(f"target must be a (B, T) long tensor with B = {B}, got {tuple(t.shape)} {t.dtype}")
        T = t.shape[1]
        for name, x, dtype in (("target_in", ti, torch.long), ("target_mask", tm, torch.bool)):
            if tuple(x.shape) != (B, T) or x.dtype != dtype:
                raise ValueError(f"{name} must be a (B, T) = {(B, T)} {dtype} tensor, got {tuple(x.shape)} {x.dtype}")
        empty = (~sm.any(-1)).nonzero().flatten()
        if len(empty):
            raise ValueError(f"source_mask: example(s) {empty.tolist()} have an empty source (all padding)")
        empty = (~tm.any(-1)).nonzero().flatten()
        if len(empty):
            raise ValueError(f"target_mask: example(s) {empty.tolist()} have an empty target (all padding)")
        for name, m in (("source_mask", sm), ("target_mask", tm)):
            hole = (~m[:, :-1] & m[:, 1:]).nonzero()
            if len(hole):
                i, j = hole[0].tolist()
                raise ValueError(
                    f"{name}[{i}]: padding at position {j} before a real position {j + 1} (real tokens must come "
                    "first, padding last)"
                )
        for name, x, mask in (("source", s, sm), ("target", t, tm), ("target_in", ti, tm)):
            bad = ((x == PAD) & mask).nonzero()
            if len(bad):
                i, j = bad[0].tolist()
                raise ValueError(
                    f"{name}[{i}, {j}] = {PAD} ({SPECIALS[PAD]}) at a real position (its mask is True there); "
                    "the padding id belongs only where the mask is False"
                )
        for name, x, vocab, mask in (
            ("source", s, source_vocab, sm),
            ("target", t, target_vocab, tm),
            ("target_in", ti, target_vocab, tm),
        ):
            if vocab is None:
                continue
            bad = (((x < 0) | (x >= vocab)) & mask).nonzero()
            if len(bad):
                i, j = bad[0].tolist()
                raise ValueError(f"{name}[{i}, {j}] = {x[i, j].item()} is out of range for vocabulary size {vocab}")
        if self.gold is not None:
            g = self.gold
            if tuple(g.shape) != (B, T) or g.dtype != torch.long:
                raise ValueError(f"gold must be a (B, T) = {(B, T)} long tensor, got {tuple(g.shape)} {g.dtype}")
            real = g >= 0  # -1: this target token is unaligned
            inside = sm.gather(1, g.clamp(0, S - 1)) & (g < S)
            bad = ((g < -1) | real & ~inside) & tm
            if bad.any():
                i, j = bad.nonzero()[0].tolist()
                raise ValueError(
                    f"gold[{i}, {j}] = {int(g[i, j])} points outside the {int(sm[i].sum())} real source tokens of "
                    f"example {i} (use -1 for 'unaligned')"
                )


def collate(
    sentences: Sequence[tuple[Sequence[int], Sequence[int]]], gold: Sequence[Sequence[int]] | None = None
) -> TranslationBatch:
    """Pad sentence pairs ``(source ids, target ids)`` into a batch; targets get ``<s>`` in front and ``</s>`` at
    the end.

    :param gold: optional per sentence, the source position of each target token (``-1``: unaligned); ``</s>`` is
        unaligned.
    """
    if not sentences:
        raise ValueError("collate: no sentence pairs")
    for i, pair in enumerate(sentences):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"collate: sentences[{i}] must be a (source ids, target ids) pair, got {pair!r:.80}")
        token_ids(pair[0], f"collate: sentences[{i}] source")
        token_ids(pair[1], f"collate: sentences[{i}] target")
    for i, (src, tgt) in enumerate(sentences):
        if len(src) == 0:
            raise ValueError(f"collate: sentence pair {i} has an empty source sentence")
        if len(tgt) == 0:
            raise ValueError(f"collate: sentence pair {i} has an empty target sentence")
    B = len(sentences)
    S = max(len(src) for src, _ in sentences)
    T = max(len(tgt) for _, tgt in sentences) + 1
    source = torch.tensor([[*src, *[PAD] * (S - len(src))] for src, _ in sentences], dtype=torch.long)
    target_in = torch.tensor([[BOS, *tgt, *[PAD] * (T - 1 - len(tgt))] for _, tgt in sentences], dtype=torch.long)
    target = torch.tensor([[*tgt, EOS, *[PAD] * (T - 1 - len(tgt))] for _, tgt in sentences], dtype=torch.long)
    gold_t = torch.full((B, T), -1, dtype=torch.long) if gold is not None else None
    for i, (src, tgt) in enumerate(sentences):
        if gold_t is not None:
            if len(gold[i]) != len(tgt):
                raise ValueError(f"collate: gold alignment {i} has {len(gold[i])} links for {len(tgt)} target tokens")
            outside = [(j, p) for j, p in enumerate(gold[i]) if not -1 <= p < len(src)]
            if outside:
                j, p = outside[0]
                raise ValueError(
                    f"collate: gold alignment {i} links target token {j} to source position {p}, outside the "
                    f"{len(src)} source tokens (use -1 for 'unaligned')"
                )
            gold_t[i, : len(tgt)] = torch.as_tensor(list(gold[i]), dtype=torch.long)
    return TranslationBatch(source, source != PAD, target_in, target, target_in != PAD, gold_t)
