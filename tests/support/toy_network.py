"""A tiny task network with several target positions, padded sources and padded targets.

It exists so the exactness tests exercise the ``"target"`` plate with ``T > 1`` (translation's shape) as well
as region QA's ``T = 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from pyro_attention.networks.base import AttentionNetwork, Encoded


@dataclass
class ToyBatch:
    source: Tensor  # (B, S, F)
    source_mask: Tensor  # (B, S)
    target: Tensor  # (B, T)
    target_mask: Tensor  # (B, T)

    def __len__(self) -> int:
        return self.source.shape[0]

    def __getitem__(self, rows: slice | Tensor) -> ToyBatch:
        """These examples (as a translation batch takes them: ``inference.distributed.shard`` reads this)."""
        return ToyBatch(self.source[rows], self.source_mask[rows], self.target[rows], self.target_mask[rows])


class ToyNetwork(AttentionNetwork):
    def __init__(self, feature_size: int = 3, num_classes: int = 4, hidden: int = 5, max_target: int = 6) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.value_size = hidden
        self.value = nn.Linear(feature_size, hidden)
        self.position = nn.Embedding(max_target, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.out_hidden = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, num_classes)
        self.post_y = nn.Embedding(num_classes, hidden)
        self.post_key = nn.Linear(feature_size, hidden)

    def encode(self, batch: ToyBatch) -> Encoded:
        values = torch.tanh(self.value(batch.source))
        T = batch.target.shape[1]
        query = self.position.weight[:T]  # (T, H)
        scores = torch.einsum("th,bsh->bts", query, self.key(values))
        return Encoded(values, batch.source_mask, batch.target, batch.target_mask, scores, state=query, batch=batch)

    def output_logits(self, enc: Encoded, context: Tensor) -> Tensor:
        return self.out(torch.tanh(self.out_hidden(context) + enc.state))

    def posterior_scores(self, enc: Encoded) -> Tensor:
        batch = enc.batch
        qy = self.post_y(batch.target) + enc.state  # (B, T, H)
        return torch.einsum("bth,bsh->bts", qy, torch.tanh(self.post_key(batch.source)))


def make_toy_batch(
    B: int = 2,
    S: int = 3,
    T: int = 2,
    num_classes: int = 4,
    feature_size: int = 3,
    seed: int = 0,
    pad_source: int = 1,
    pad_target: int = 1,
) -> ToyBatch:
    """Example 0 is full; the others lose ``pad_source`` sources and ``pad_target`` targets to padding."""
    g = torch.Generator().manual_seed(seed)
    source = torch.randn(B, S, feature_size, generator=g).to(torch.get_default_dtype())
    source_mask = torch.ones(B, S, dtype=torch.bool)
    target_mask = torch.ones(B, T, dtype=torch.bool)
    if B > 1:
        source_mask[1:, S - pad_source :] = False
        target_mask[1:, T - pad_target :] = False
    target = torch.randint(num_classes, (B, T), generator=g)
    return ToyBatch(source, source_mask, target, target_mask)


def pad_batch(batch: ToyBatch, extra_source: int = 1, extra_target: int = 1, seed: int = 1) -> ToyBatch:
    """Append padded source and target positions filled with garbage."""
    g = torch.Generator().manual_seed(seed)
    B, S, F = batch.source.shape
    junk = 100 * torch.randn(B, extra_source, F, generator=g).to(batch.source.dtype)
    return ToyBatch(
        torch.cat([batch.source, junk], 1),
        torch.cat([batch.source_mask, torch.zeros(B, extra_source, dtype=torch.bool)], 1),
        torch.cat([batch.target, torch.randint(2, (B, extra_target), generator=g)], 1),
        torch.cat([batch.target_mask, torch.zeros(B, extra_target, dtype=torch.bool)], 1),
    )


def toy_case(seed: int = 0, **kw: int) -> tuple[ToyNetwork, ToyBatch]:
    """A :class:`ToyNetwork` initialised from ``seed`` and a toy batch (:func:`make_toy_batch`'s options)."""
    torch.manual_seed(seed)
    return ToyNetwork(), make_toy_batch(seed=seed, **kw)


def region_case(seed: int = 0):  # noqa: ANN201 - (RegionQA, RegionBatch)
    """A small region-QA network initialised from ``seed`` and three scenes (2 to 4 regions, 4 kinds)."""
    from pyro_attention.data import make_region_qa
    from pyro_attention.networks import RegionQA

    torch.manual_seed(seed)
    ds = make_region_qa(3, num_regions=(2, 4), num_kinds=4, seed=seed)
    return RegionQA(ds.feature_size, len(ds.answers), vocab_size=len(ds.vocab), hidden_size=6), ds.data


def tiny_seq2seq(seed: int = 0, chunk_size: int | None = None):  # noqa: ANN201 - (Seq2Seq, TranslationBatch)
    """A :class:`~pyro_attention.networks.Seq2Seq` with ``V = 5`` words on both sides, initialised from ``seed``, and
    a batch of B=2, S=3, T=3 (two target words + </s>); the second pair is padded on both sides."""
    from pyro_attention.data.translation import collate
    from pyro_attention.networks import Seq2Seq

    torch.manual_seed(seed)
    net = Seq2Seq(5, 5, embedding_size=4, encoder_size=3, decoder_size=5, attention_size=4, chunk_size=chunk_size)
    return net, collate([([4, 3, 4], [3, 4]), ([3, 4], [4])])


def tiny_transformer(seed: int = 0, chunk_size: int | None = None, **parts):  # noqa: ANN003, ANN201
    """:func:`tiny_seq2seq`'s words and batch on a :class:`~pyro_attention.networks.TransformerSeq2Seq` of width 8,
    two heads and two layers (``parts``: its other keyword arguments, e.g. ``output=ProductOfExperts``)."""
    from pyro_attention.data.translation import collate
    from pyro_attention.networks import TransformerSeq2Seq

    torch.manual_seed(seed)
    net = TransformerSeq2Seq(5, 5, model_size=8, heads=2, feedforward_size=16, layers=2, attention_size=4,
                             chunk_size=chunk_size, **parts)
    return net, collate([([4, 3, 4], [3, 4]), ([3, 4], [4])])
