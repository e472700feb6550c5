"""A seeded synthetic translation task whose word alignments are known exactly.

Source sentences are ``min_len``..``max_len`` words drawn from the lexicon ``s0 .. s{V-1}`` (``V =
vocab_size``): each word is the *marker* ``s0`` with probability ``marker_prob``, otherwise uniform over
``s1 .. s{V-1}``.  The target is produced by three rules, and every target token records the 0-based source
position it translates (its gold alignment):

(a) **Lexicon** (one-to-one and one-to-many).  ``s{i}`` becomes ``t{i}``, except the *fan-out* words
    (``i % 4 == 1``), which become two tokens ``t{i}a t{i}b``, both aligned to the same source position.
(b) **Reordering.**  The marker ``s0`` becomes ``t0`` in place, and the words after it, up to the next marker or
    the end of the sentence, are emitted in *reverse* order (each word's own tokens stay in order).  Words before
    the first marker keep their order.
(c) **Context (a nonlinearity).**  A *context* word (``i % 4 == 2``) becomes ``t{i}e`` if the index of the
    **next** source word (in source order, before reordering) is even and ``t{i}o`` if it is odd; the last word
    of a sentence counts as followed by an even index.  The output token is thus a function of the identity of
    word ``j`` and the parity of word ``j + 1`` jointly (an XOR-like interaction no single position decides), yet
    its gold alignment is ``j``, the word being translated.

Every other word (``i % 4 in (0, 3)``, ``i > 0``) is translated one-to-one.  Each rule can be switched off
(``one_to_many=False``, ``context=False``, ``reorder=False``: the affected words become plain one-to-one words);
the source sentences for a given seed do not depend on the switches.  Example with the default rules::

    source  s5 s6 s0 s7 s9 s2
    target  t5a t5b t6e t0 t2e t9a t9b t7
    gold    0   0   1   2  5   4   4   3

(``s5`` fans out; ``s6`` is followed by ``s0``, index 0, even; the marker reverses ``s7 s9 s2``; ``s2`` is last.)
The generator is deterministic for a given seed (Python's ``random.Random``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pyro_attention.checks import count
from pyro_attention.data.text import Vocab, bucket_batches
from pyro_attention.data.translation import TranslationBatch

__all__ = [
    "SyntheticTranslation",
    "encode_synthetic",
    "make_synthetic_translation",
    "synthetic_lexicons",
    "translate_synthetic",
    "word_kind",
]

MARKER = "s0"


def word_kind(index: int, one_to_many: bool = True, context: bool = True, reorder: bool = True) -> str:
    """The rule that translates source word ``s{index}``: ``"marker"``, ``"fanout"``, ``"context"`` or ``"plain"``."""
    if index == 0 and reorder:
        return "marker"
    if index % 4 == 1 and one_to_many:
        return "fanout"
    if index % 4 == 2 and context:
        return "context"
    return "plain"


def _index(word: str) -> int:
    if not (word.startswith("s") and word[1:].isdigit()):
        raise ValueError(f"not a synthetic source word: {word!r} (expected s0, s1, ...)")
    return int(word[1:])


def translate_synthetic(
    source: Sequence[str], one_to_many: bool = True, context: bool = True, reorder: bool = True
) -> tuple[list[str], list[int]]:
    """Apply the rules of the module docstring to one source sentence; return ``(target tokens, gold positions)``."""
    idx = [_index(w) for w in source]
    kinds = [word_kind(i, one_to_many, context, reorder) for i in idx]

    def tokens(j: int) -> list[str]:
        i, kind = idx[j], kinds[j]
        if kind == "fanout":
            return [f"t{i}a", f"t{i}b"]
        if kind == "context":
            nxt = idx[j + 1] if j + 1 < len(idx) else 0
            return [f"t{i}{'o' if nxt % 2 else 'e'}"]
        return [f"t{i}"]

    # Segments start at position 0 and at every marker; a segment that starts with a marker is emitted as the
    # marker followed by the rest of the segment reversed, any other segment in order.
    segments: list[list[int]] = []
    for j, kind in enumerate(kinds):
        if kind == "marker" or not segments:
            segments.append([])
        segments[-1].append(j)
    order: list[int] = []
    for seg in segments:
        order.extend([seg[0], *reversed(seg[1:])] if kinds[seg[0]] == "marker" else seg)
    target: list[str] = []
    gold: list[int] = []
    for j in order:
        toks = tokens(j)
        target.extend(toks)
        gold.extend([j] * len(toks))
    return target, gold


def synthetic_lexicons(
    vocab_size: int, one_to_many: bool = True, context: bool = True, reorder: bool = True
) -> tuple[list[str], list[str]]:
    """Every source word and every target word the rules can produce, in a fixed order."""
    source = [f"s{i}" for i in range(vocab_size)]
    target: list[str] = []
    for i in range(vocab_size):
        kind = word_kind(i, one_to_many, context, reorder)
        if kind == "fanout":
            target += [f"t{i}a", f"t{i}b"]
        elif kind == "context":
            target += [f"t{i}e", f"t{i}o"]
        else:
            target.append(f"t{i}")
    return source, target


@dataclass
class SyntheticTranslation:
    """Synthetic sentence pairs with gold alignments (see the module docstring for the rules).

    :param source: source sentences (token lists).
    :param target: target sentences (token lists).
    :param gold: for each target token, the 0-based source position it translates.
    """

    source: list[list[str]]
    target: list[list[str]]
    gold: list[list[int]]
    vocab_size: int
    seed: int = 0
    one_to_many: bool = True
    context: bool = True
    reorder: bool = True

    def __len__(self) -> int:
        return len(self.source)

    def vocabs(self) -> tuple[Vocab, Vocab]:
        """Source and target vocabularies over the full lexicons (independent of which words were sampled)."""
        src, tgt = synthetic_lexicons(self.vocab_size, self.one_to_many, self.context, self.reorder)
        return Vocab(src), Vocab(tgt)

    def encode(self, vocabs: tuple[Vocab, Vocab] | None = None) -> tuple[list[list[int]], list[list[int]]]:
        """Source and target token ids (default: :meth:`vocabs`)."""
        return encode_synthetic(self, *(vocabs or self.vocabs()))

    def batches(
        self,
        batch_size: int,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
        vocabs: tuple[Vocab, Vocab] | None = None,
    ) -> list[TranslationBatch]:
        """Length-bucketed batches carrying ``gold`` (see :func:`~pyro_attention.data.text.bucket_batches`)."""
        src_ids, tgt_ids = self.encode(vocabs)
        return bucket_batches(src_ids, tgt_ids, batch_size, shuffle, generator, gold=self.gold)


def encode_synthetic(
    data: SyntheticTranslation, source_vocab: Vocab, target_vocab: Vocab
) -> tuple[list[list[int]], list[list[int]]]:
    """Encode a :class:`SyntheticTranslation` with the given vocabularies."""
    return [source_vocab.encode(s) for s in data.source], [target_vocab.encode(t) for t in data.target]


def make_synthetic_translation(
    num_sentences: int,
    seed: int = 0,
    vocab_size: int = 24,
    min_len: int = 3,
    max_len: int = 8,
    marker_prob: float = 0.15,
    one_to_many: bool = True,
    context: bool = True,
    reorder: bool = True,
) -> SyntheticTranslation:
    """Draw ``num_sentences`` synthetic sentence pairs with known alignments (rules in the module docstring).

    :param vocab_size: number of source words ``s0 .. s{V-1}`` (at least 4, so that every rule has a word).
    :param min_len: shortest source sentence (words).
    :param max_len: longest source sentence; targets can be up to twice as long (fan-out words).
    :param marker_prob: probability that a source word is the reordering marker ``s0``.
    """
    count(num_sentences, "make_synthetic_translation: num_sentences")
    if num_sentences < 0:
        raise ValueError(f"num_sentences must be >= 0, got {num_sentences}")
    if vocab_size < 4:
        raise ValueError(f"vocab_size must be >= 4, got {vocab_size}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if not 0.0 <= marker_prob < 1.0:
        raise ValueError(f"marker_prob must be in [0, 1), got {marker_prob}")
    rng = random.Random(seed)
    source, target, gold = [], [], []
    for _ in range(num_sentences):
        length = rng.randint(min_len, max_len)
        words = [MARKER if rng.random() < marker_prob else f"s{rng.randrange(1, vocab_size)}" for _ in range(length)]
        tgt, g = translate_synthetic(words, one_to_many, context, reorder)
        source.append(words)
        target.append(tgt)
        gold.append(g)
    return SyntheticTranslation(source, target, gold, vocab_size, seed, one_to_many, context, reorder)
