"""CLEVR scenes as regions: the 22 region features of an object, question words, and questions encoded as a
:class:`~pyro_attention.data.region_qa.RegionQADataset`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from pyro_attention.data.clevr.scenes import (
    ANSWERS,
    COLORS,
    FEATURES,
    MATERIALS,
    MAX_OBJECTS,
    SHAPES,
    SIZES,
    ClevrQuestion,
    Scene,
    check_question,
)
from pyro_attention.data.region_qa import RegionBatch, RegionQADataset
from pyro_attention.data.text import Vocab


def region_features(scene: Scene) -> torch.Tensor:
    """``(n, len(FEATURES))`` features of the scene's objects (the encoding is in the module docstring)."""
    rows = []
    right, front = scene.directions["right"], scene.directions["front"]
    for o in scene.objects:
        onehot = [
            float(o[a] == v)
            for a, values in (("color", COLORS), ("size", SIZES), ("shape", SHAPES), ("material", MATERIALS))
            for v in values
        ]
        x, y, z = o["3d_coords"]
        px, py, depth = o["pixel_coords"]
        rows.append(
            onehot
            + [
                x / 3.0,
                y / 3.0,
                (x * right[0] + y * right[1] + z * right[2]) / 3.0,
                (x * front[0] + y * front[1] + z * front[2]) / 3.0,
                px / 480.0,
                py / 320.0,
                depth / 16.0,
            ]
        )
    return torch.tensor(rows, dtype=torch.float32)


def tokenize(text: str) -> list[str]:
    """Lower-cased words; punctuation dropped."""
    return re.findall(r"[a-z0-9]+", text.lower())


@dataclass
class ClevrDataset(RegionQADataset):
    """A CLEVR region-QA split: a :class:`RegionQADataset` that also keeps its :class:`ClevrQuestion` triples."""

    questions: list[ClevrQuestion] = field(default_factory=list)

    def families(self) -> list[str]:
        return [q.family for q in self.questions]


def encode_questions(questions: list[ClevrQuestion], scenes: dict[int, Scene], vocab: Vocab) -> ClevrDataset:
    """Encode triples as a :class:`ClevrDataset` (regions padded to :data:`MAX_OBJECTS`; answers: :data:`ANSWERS`)."""
    if not questions:
        raise ValueError("encode_questions: no questions")
    answer_id = {a: i for i, a in enumerate(ANSWERS)}
    tokens = [vocab.encode(tokenize(q.text)) for q in questions]
    B, L, F = len(questions), max(len(t) for t in tokens), len(FEATURES)
    regions = torch.zeros(B, MAX_OBJECTS, F)
    mask = torch.zeros(B, MAX_OBJECTS, dtype=torch.bool)
    question = torch.zeros(B, L, dtype=torch.long)
    answer = torch.zeros(B, dtype=torch.long)
    gold = torch.full((B,), -1, dtype=torch.long)
    cache: dict[int, torch.Tensor] = {}
    names = []
    for i, (q, ids) in enumerate(zip(questions, tokens, strict=True)):
        check_question(q, scenes)
        scene = scenes[q.image_index]
        if q.image_index not in cache:
            cache[q.image_index] = region_features(scene)
        n = len(scene)
        regions[i, :n] = cache[q.image_index]
        mask[i, :n] = True
        question[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        if q.answer not in answer_id:
            raise ValueError(f"question {i} ({q.text!r}): answer {q.answer!r} is not in ANSWERS")
        answer[i] = answer_id[q.answer]
        gold[i] = q.gold
        names.append([scene.object_name(j) for j in range(n)])
    data = RegionBatch(regions, mask, question, answer, gold)
    data.validate(len(ANSWERS), len(vocab))
    return ClevrDataset(data, list(vocab.itos), list(ANSWERS), names, questions)
