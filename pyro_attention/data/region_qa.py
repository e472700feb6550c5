"""Region question answering data: the batch type and a seeded synthetic scene generator.

A scene is a set of ``S`` regions, each with a kind (person, dog, cup, ...), a colour and a material.  A
question names a kind and asks either for the colour of that region or for a *code* that is a fixed random
function of (colour, material) -- an answer that depends nonlinearly on the region's features.  With
probability ``ambiguity`` the scene holds two regions of the asked kind (the seed's "two people, who holds
the cup?"): the question cannot tell them apart, the answer can.  The region the answer was read from is
recorded as the gold alignment.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from pyro_attention.checks import count, same_device

KINDS = ["person", "dog", "cat", "cup", "ball", "hat", "car", "tree", "bird", "book", "lamp", "chair"]
COLOURS = ["red", "green", "blue", "yellow", "black", "white", "purple", "brown"]
MATERIALS = ["metal", "rubber", "wood", "glass", "cloth"]
QUESTION_TYPES = ["colour", "code"]
PAD = 0


@dataclass
class RegionBatch:
    """A batch of region-QA examples.

    :param regions: ``(B, S, F)`` float region features (padded rows are ignored).
    :param region_mask: ``(B, S)`` bool, ``True`` at real regions.
    :param question: ``(B, L)`` long token ids (``0`` = padding) or ``(B, Q)`` float question vectors.
    :param answer: ``(B,)`` long answer ids.
    :param gold: optional ``(B,)`` long index of the region the answer refers to (``-1``: none).
    """

    regions: Tensor
    region_mask: Tensor
    question: Tensor
    answer: Tensor
    gold: Tensor | None = None

    def __len__(self) -> int:
        return self.regions.shape[0]

    @property
    def target_mask(self) -> Tensor:
        """``(B, 1)``, all ``True``: one target (the answer) per question, as the network encodes it."""
        return torch.ones(len(self), 1, dtype=torch.bool, device=self.regions.device)

    def __getitem__(self, index: slice | Tensor) -> RegionBatch:
        return RegionBatch(
            self.regions[index],
            self.region_mask[index],
            self.question[index],
            self.answer[index],
            None if self.gold is None else self.gold[index],
        )

    def to(self, device: torch.device | str) -> RegionBatch:
        return RegionBatch(
            *(
                t.to(device) if t is not None else None
                for t in (self.regions, self.region_mask, self.question, self.answer, self.gold)
            )
        )

    def validate(
        self, num_answers: int | None = None, vocab_size: int | None = None, dtype: torch.dtype | None = None,
        device: torch.device | None = None,
    ) -> None:
        """Raise ``ValueError`` naming the offending tensor and shape for malformed input.

        :param dtype: the floating-point dtype of the network's parameters, that features must share.
        :param device: where the network is, that every tensor must share.
        """
        r, m, q, a = self.regions, self.region_mask, self.question, self.answer
        if device is not None:
            same_device({"regions": r, "region_mask": m, "question": q, "answer": a, "gold": self.gold}, device,
                        "RegionBatch")
        if r.dim() != 3:
            raise ValueError(f"regions must be (B, S, F), got shape {tuple(r.shape)}")
        B, S, _ = r.shape
        if not r.is_floating_point():
            raise ValueError(f"regions must be a floating-point tensor of features, got dtype {r.dtype}")
        for name, x in (("regions", r), ("question", q)):
            if dtype is not None and x.is_floating_point() and x.dtype != dtype:
                raise ValueError(
                    f"{name} has dtype {x.dtype} but the network's parameters are {dtype}: convert one of them "
                    f"(e.g. {name}.to({dtype}) or network.to({x.dtype}))"
                )
        if tuple(m.shape) != (B, S):
            raise ValueError(f"region_mask must be (B, S) = {(B, S)} like regions, got shape {tuple(m.shape)}")
        if m.dtype != torch.bool:
            raise ValueError(f"region_mask must be a bool tensor, got dtype {m.dtype}")
        if q.dim() != 2 or q.shape[0] != B:
            raise ValueError(f"question must be (B, L) ids or (B, Q) vectors with B = {B}, got {tuple(q.shape)}")
        if vocab_size is not None and q.dtype != torch.long:
            raise ValueError(
                f"question must be (B, L) long token ids for a network with a vocabulary (vocab_size={vocab_size}), "
                f"got dtype {q.dtype}"
            )
        if vocab_size is None and dtype is not None and not q.is_floating_point():
            raise ValueError(
                f"question must be (B, Q) float vectors for a network without a vocabulary (built with "
                f"question_size), got dtype {q.dtype}"
            )
        if tuple(a.shape) != (B,):
            raise ValueError(f"answer must be (B,) = ({B},), got shape {tuple(a.shape)}")
        if a.dtype != torch.long:
            raise ValueError(f"answer must be a long tensor of class ids, got dtype {a.dtype}")
        empty = (~m.any(-1)).nonzero().flatten()
        if len(empty):
            raise ValueError(f"region_mask: example(s) {empty.tolist()} have no real region (all padding)")
        bad = (~torch.isfinite(r) & m.unsqueeze(-1)).any(-1).nonzero()
        if len(bad):
            b, s = bad[0].tolist()
            raise ValueError(f"regions: non-finite feature (NaN or inf) at example {b}, region {s}")
        if num_answers is not None:
            out = ((a < 0) | (a >= num_answers)).nonzero().flatten()
            if len(out):
                i = out[0].item()
                raise ValueError(
                    f"answer[{i}] = {a[i].item()} is out of range for {num_answers} answer classes "
                    f"(0..{num_answers - 1})"
                )
        if q.dtype == torch.long and vocab_size is not None:
            out = ((q < 0) | (q >= vocab_size)).nonzero()
            if len(out):
                i, j = out[0].tolist()
                raise ValueError(
                    f"question[{i}, {j}] = {q[i, j].item()} is out of range for vocabulary size {vocab_size}"
                )
        if q.dtype != torch.long and not torch.isfinite(q).all():
            raise ValueError("question: non-finite values (NaN or inf) in question vectors")
        if self.gold is not None:
            g = self.gold
            if tuple(g.shape) != (B,):
                raise ValueError(f"gold must be (B,) = ({B},), got shape {tuple(g.shape)}")
            known = g >= 0  # -1: this example has no single gold region
            bad = (g < -1) | known & ((g >= S) | ~m.gather(1, g.clamp(0, S - 1).unsqueeze(1)).squeeze(1))
            if bad.any():
                i = int(bad.nonzero()[0])
                raise ValueError(
                    f"gold[{i}] = {int(g[i])} points outside the {int(m[i].sum())} real regions of example {i} "
                    "(use -1 for 'no gold region')"
                )


@dataclass
class RegionQADataset:
    """All examples of a synthetic region-QA split, with the names needed to print and plot them."""

    data: RegionBatch
    vocab: list[str]
    answers: list[str]
    region_names: list[list[str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.data)

    @property
    def feature_size(self) -> int:
        return self.data.regions.shape[-1]

    def batches(
        self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None
    ) -> Iterator[RegionBatch]:
        """Yield batches; with ``shuffle`` a new permutation from ``generator`` each call."""
        n = len(self.data)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        for start in range(0, n, batch_size):
            yield self.data[order[start : start + batch_size]]

    def question_text(self, i: int) -> str:
        return " ".join(self.vocab[t] for t in self.data.question[i].tolist() if t != PAD)


def _check_sizes(
    num_examples: int, num_regions: tuple[int, int], num_kinds: int, num_colours: int, num_materials: int,
    ambiguity: float,
) -> None:
    """The sizes of :func:`make_region_qa`, each in its range; else a ``ValueError`` naming it."""
    for name, value in (("num_examples", num_examples), ("num_regions[0]", num_regions[0]),
                        ("num_regions[1]", num_regions[1]), ("num_kinds", num_kinds), ("num_colours", num_colours),
                        ("num_materials", num_materials)):
        count(value, f"make_region_qa: {name}")
    if num_examples < 1:
        raise ValueError(f"num_examples must be >= 1, got {num_examples}")
    lo, hi = num_regions
    if not 1 <= lo <= hi:
        raise ValueError(f"num_regions must be (fewest, most) with 1 <= fewest <= most, got {num_regions}")
    if not 2 <= num_kinds <= len(KINDS) or hi > num_kinds + 1:
        raise ValueError(
            f"num_kinds must be in 2..{len(KINDS)} and at least most regions - 1 = {hi - 1}, got {num_kinds}"
        )
    if not 2 <= num_colours <= len(COLOURS) or not 1 <= num_materials <= len(MATERIALS):
        raise ValueError(f"num_colours must be in 2..{len(COLOURS)} and num_materials in 1..{len(MATERIALS)}")
    if not 0.0 <= ambiguity <= 1.0:
        raise ValueError(f"ambiguity must be a probability in [0, 1], got {ambiguity}")


def make_region_qa(
    num_examples: int,
    num_regions: tuple[int, int] = (3, 6),
    num_kinds: int = 6,
    num_colours: int = 4,
    num_materials: int = 3,
    num_codes: int = 4,
    ambiguity: float = 0.3,
    noise: float = 0.1,
    seed: int = 0,
    code_seed: int = 1234,
) -> RegionQADataset:
    """Generate a seeded synthetic region-QA split.

    :param num_regions: (fewest, most) regions per scene; scenes are padded to the most.
    :param ambiguity: probability that two regions share the asked kind (only the answer tells which).
    :param noise: standard deviation of Gaussian noise added to the one-hot region features.
    :param code_seed: seed of the (colour, material) -> code table; keep it fixed across splits.
    """
    _check_sizes(num_examples, num_regions, num_kinds, num_colours, num_materials, ambiguity)
    hi = num_regions[1]
    g = torch.Generator().manual_seed(seed)
    code_table = torch.randint(
        num_codes, (num_colours, num_materials), generator=torch.Generator().manual_seed(code_seed)
    )
    vocab = ["<pad>", *QUESTION_TYPES, *KINDS[:num_kinds]]
    answers = [*COLOURS[:num_colours], *(f"code-{k}" for k in range(num_codes))]
    F = num_kinds + num_colours + num_materials
    regions = torch.zeros(num_examples, hi, F)
    mask = torch.zeros(num_examples, hi, dtype=torch.bool)
    question = torch.zeros(num_examples, 2, dtype=torch.long)
    answer = torch.zeros(num_examples, dtype=torch.long)
    gold = torch.zeros(num_examples, dtype=torch.long)
    names = []
    for i in range(num_examples):
        n = int(torch.randint(num_regions[0], hi + 1, (1,), generator=g))
        asked = int(torch.randint(num_kinds, (1,), generator=g))
        others = torch.randperm(num_kinds - 1, generator=g)[: n - 1]
        others = others + (others >= asked).long()  # distinct kinds, none equal to the asked kind
        kinds = torch.cat([torch.tensor([asked]), others])
        if n >= 2 and torch.rand((), generator=g) < ambiguity:
            kinds[1] = asked  # a second region of the asked kind
        perm = torch.randperm(n, generator=g)
        kinds = kinds[perm]
        colours = torch.randint(num_colours, (n,), generator=g)
        materials = torch.randint(num_materials, (n,), generator=g)
        candidates = (kinds == asked).nonzero().flatten()
        target = int(candidates[torch.randint(len(candidates), (1,), generator=g)])
        qtype = int(torch.randint(len(QUESTION_TYPES), (1,), generator=g))
        feats = torch.cat(
            [
                torch.nn.functional.one_hot(kinds, num_kinds),
                torch.nn.functional.one_hot(colours, num_colours),
                torch.nn.functional.one_hot(materials, num_materials),
            ],
            dim=-1,
        ).float()
        regions[i, :n] = feats + noise * torch.randn(n, F, generator=g)
        mask[i, :n] = True
        question[i] = torch.tensor([1 + qtype, 1 + len(QUESTION_TYPES) + asked])
        if QUESTION_TYPES[qtype] == "colour":
            answer[i] = colours[target]
        else:
            answer[i] = num_colours + code_table[colours[target], materials[target]]
        gold[i] = target
        names.append(
            [
                f"{COLOURS[c]} {MATERIALS[m]} {KINDS[k]}"
                for k, c, m in zip(kinds.tolist(), colours.tolist(), materials.tolist(), strict=True)
            ]
        )
    data = RegionBatch(regions, mask, question, answer, gold)
    data.validate(len(answers), len(vocab))
    return RegionQADataset(data, vocab, answers, names)
