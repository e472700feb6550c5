"""The splits of the CLEVR experiment: original and generated questions, encoded with one vocabulary."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pyro_attention.data.clevr.encoding import ClevrDataset, encode_questions, tokenize
from pyro_attention.data.clevr.generate import generate_questions
from pyro_attention.data.clevr.scenes import load_clevr
from pyro_attention.data.text import Vocab


@dataclass
class ClevrSplits:
    """Training data (original + generated training questions) and the two validation sets, one vocabulary."""

    train: ClevrDataset
    val_original: ClevrDataset
    val_generated: ClevrDataset | None  # None when no validation questions are generated
    vocab: Vocab


def clevr_splits(
    root: str | os.PathLike,
    generated_train: int = 8000,
    generated_val: int = 1000,
    seed: int = 0,
    original_train: bool = True,
) -> ClevrSplits:
    """Read the CLEVR scenes and questions under ``root`` and build the experiment's splits.

    :param generated_train: questions generated over the training scenes (seed ``seed``), added to the
        original training questions (unless ``original_train`` is false).
    :param generated_val: questions generated over the validation scenes (seed ``seed + 1``), a split of its own
        (``0``: none, ``val_generated`` is ``None``).
    """
    train_scenes, train_q = load_clevr(root, "train")
    val_scenes, val_q = load_clevr(root, "val")
    generated = generate_questions(train_scenes, generated_train, seed=seed)
    train_all = (train_q if original_train else []) + generated
    if not train_all:
        raise ValueError("clevr_splits: no training questions (original_train=False and generated_train=0)")
    vocab = Vocab.build(tokenize(q.text) for q in train_all)
    val_gen = generate_questions(val_scenes, generated_val, seed=seed + 1)
    return ClevrSplits(
        encode_questions(train_all, train_scenes, vocab),
        encode_questions(val_q, val_scenes, vocab),
        encode_questions(val_gen, val_scenes, vocab) if val_gen else None,
        vocab,
    )
