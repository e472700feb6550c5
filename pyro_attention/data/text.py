"""Parallel text: line readers, vocabularies, length-bucketed batches, corpus paths and optional subwords.

The readers are strict where silent repair would corrupt an experiment and lenient where the data is merely
untidy:

- :func:`read_lines` decodes UTF-8 line by line (plain or ``.gz`` by suffix) and names the file and 1-based line
  of an undecodable byte; it strips the line terminator (``\\n`` or ``\\r\\n``) and a UTF-8 byte-order mark at
  the start of the file, nothing else.
- :func:`read_parallel` splits on whitespace runs (``str.split()``: Multi30k ``train.lc.norm.tok.en`` line
  16,217 holds a double space), refuses files of different lengths and empty lines, and drops (and counts)
  pairs longer than ``max_len`` so the caller can report them.
- :class:`Vocab` puts the four specials ``<pad> <s> </s> <unk>`` at ids 0..3 (``translation.SPECIALS``), then
  tokens by descending frequency with ties broken alphabetically, so a vocabulary is a deterministic function
  of its corpus.
- :func:`bucket_batches` sorts pairs by (source length, target length), cuts batches of ``batch_size``
  sentences and optionally shuffles the order of the batches with a ``torch.Generator``.

Corpus layouts (see ``shared/data/README.md``): Multi30k ``multi30k/tok/{split}.lc.norm.tok.{lang}.gz`` and
``multi30k/raw/{split}.{lang}.gz``; IWSLT14 De-En ``iwslt14-de-en/{split}.{lang}[.bpe].gz``.  The data
directory comes from a command-line option or the ``PYRO_ATTENTION_DATA`` environment variable
(:func:`data_dir`); the data itself is never part of the repository.  The paths live in
:mod:`pyro_attention.data.corpora` and the subwords in :mod:`pyro_attention.data.subword`; every name is importable
from here as before.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from sys import intern
from typing import Any

import torch

from pyro_attention.checks import count, texts, token_ids
from pyro_attention.data.corpora import (
    require_file,
)
from pyro_attention.data.translation import BOS, EOS, PAD, SPECIALS, TranslationBatch, collate

__all__ = [
    "ParallelCorpus",
    "Vocab",
    "bucket_batches",
    "bucket_indices",
    "different_files",
    "read_lines",
    "read_parallel",
    "undo_bpe",
    "unescape_moses",
]



# ----------------------------------------------------------------------------------------------------------------
# Reading text


def read_lines(path: str | os.PathLike) -> list[str]:
    """Read a UTF-8 text file (gzip when the name ends in ``.gz``) into a list of lines.

    Only the line terminator (``\\n``, or ``\\r\\n``) is removed, and a byte-order mark at the very start of the
    file (one anywhere else, as files joined with ``cat`` have, is refused); other whitespace is kept. Lines are
    split on ``\\n`` only (not on the Unicode line separators that ``str.splitlines`` honours), so line numbers
    agree with ``wc -l`` / ``sed -n``.

    :raises FileNotFoundError: if the file does not exist (or is a directory).
    :raises ValueError: naming the file and the 1-based line number of a line that is not valid UTF-8 or holds a
        carriage return inside it (old-Mac ``\\r`` line endings), or a ``.gz`` file that is not gzip.
    """
    path = require_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    lines: list[str] = []
    number = 0
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                if raw.endswith(b"\n"):
                    raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ValueError(
                        f"{path}: line {number} is not valid UTF-8 ({e.reason} at byte {e.start} of the line: "
                        f"{raw[max(0, e.start - 10): e.end + 10]!r})"
                    ) from None
                if number == 1 and line.startswith("\ufeff"):
                    line = line[1:]
                if "\x00" in line:
                    raise ValueError(
                        f"{path}: line {number} holds a NUL byte at character {line.index(chr(0)) + 1}: a binary file, "
                        "or UTF-16 text (save it as UTF-8, e.g. iconv -f UTF-16 -t UTF-8)"
                    )
                if "\ufeff" in line:
                    raise ValueError(
                        f"{path}: line {number} holds a byte-order mark (U+FEFF) at character "
                        f"{line.index(chr(0xFEFF)) + 1}: files joined with cat keep each one's mark, and it would "
                        f"be read as part of a word; remove them first (e.g. sed 's/\\xEF\\xBB\\xBF//g')"
                    )
                if "\r" in line:
                    raise ValueError(
                        f"{path}: line {number} holds a carriage return (\\r) inside it: the file has old-Mac line "
                        f"endings (or stray \\r characters), so several sentences would be read as one; convert "
                        f"them to \\n first (e.g. tr '\\r' '\\n' < {path.name} > fixed.txt)"
                    )
                lines.append(line)
    except (gzip.BadGzipFile, EOFError) as e:
        where = f" after line {number}" if number else ""
        raise ValueError(f"{path}: cannot be read as gzip{where} ({e})") from None
    return lines


@dataclass
class ParallelCorpus:
    """Whitespace-tokenised sentence pairs read by :func:`read_parallel`.

    :param source: kept source sentences (lists of tokens).
    :param target: kept target sentences, aligned with ``source``.
    :param dropped: number of pairs dropped because one side was longer than ``max_len``.
    :param paths: ``(source path, target path)``.
    :param lines: the 1-based line number of each kept pair in the files (to line kept pairs up with, e.g.,
        untokenised references).
    :param max_len: the length limit that was applied (``None``: none).
    """

    source: list[list[str]]
    target: list[list[str]]
    dropped: int
    paths: tuple[Path, Path]
    lines: list[int] = field(default_factory=list)
    max_len: int | None = None

    def __len__(self) -> int:
        return len(self.source)

    @property
    def total(self) -> int:
        """Number of pairs in the files (kept + dropped)."""
        return len(self.source) + self.dropped

    def summary(self) -> str:
        """One line for a log: what was read and what was dropped."""
        text = f"{self.paths[0]} / {self.paths[1]}: {len(self)} pairs"
        if self.max_len is not None:
            text += f"; dropped {self.dropped} of {self.total} pairs longer than {self.max_len}"
        return text


def different_files(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """A ``ValueError`` naming the file when the source and the target side of a parallel text are one file (a
    copy-paste slip: the model would learn to copy)."""
    a, b = Path(source), Path(target)
    if a == b or (a.exists() and b.exists() and os.path.samefile(a, b)):
        raise ValueError(f"{a} is given as both the source and the target side; give the target language's file "
                         "for the target")


def read_parallel(
    src_path: str | os.PathLike,
    tgt_path: str | os.PathLike,
    max_len: int | None = None,
    lowercase: bool = False,
) -> ParallelCorpus:
    """Read line-aligned source and target files into token lists.

    Tokens are whitespace runs (``str.split()``), so repeated or trailing spaces never make empty tokens.

    :param max_len: drop pairs where either side has more than ``max_len`` tokens (counted in ``dropped``).
    :param lowercase: lower-case both sides before splitting.
    :raises ValueError: if the files have different numbers of lines (naming both files and counts), or a line on
        either side is empty / whitespace only (naming the file and 1-based line).
    """
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    different_files(src_path, tgt_path)
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be a positive integer or None, got {max_len}")
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"parallel files differ in length: {src_path} has {len(src_lines)} lines, "
            f"{tgt_path} has {len(tgt_lines)} lines"
        )
    source: list[list[str]] = []
    target: list[list[str]] = []
    kept: list[int] = []
    dropped = 0
    for number, (s, t) in enumerate(zip(src_lines, tgt_lines, strict=True), start=1):
        if lowercase:
            s, t = s.lower(), t.lower()
        s_tok, t_tok = [intern(w) for w in s.split()], [intern(w) for w in t.split()]  # one string per word type
        for toks, path in ((s_tok, src_path), (t_tok, tgt_path)):
            if not toks:
                raise ValueError(f"{path}: line {number} is empty")
        if max_len is not None and (len(s_tok) > max_len or len(t_tok) > max_len):
            dropped += 1
            continue
        source.append(s_tok)
        target.append(t_tok)
        kept.append(number)
    return ParallelCorpus(source, target, dropped, (src_path, tgt_path), kept, max_len)


_BPE_JOINER = re.compile(r"@@( |$)")
_MOSES_ESCAPES = {
    "&apos;": "'", "&quot;": '"', "&amp;": "&", "&lt;": "<", "&gt;": ">",
    "&#124;": "|", "&#91;": "[", "&#93;": "]", "&bar;": "|", "&bra;": "[", "&ket;": "]",
}
_MOSES_ESCAPE = re.compile("|".join(re.escape(k) for k in _MOSES_ESCAPES))


def undo_bpe(text: str) -> str:
    """Join subword-nmt pieces: remove every ``@@ `` joiner and a trailing ``@@`` (``"tal@@ ent"`` -> ``"talent"``)."""
    return _BPE_JOINER.sub("", text)


def unescape_moses(text: str) -> str:
    """Undo the Moses tokeniser's XML escapes (``&apos; &quot; &amp; &lt; &gt; &#124; &#91; &#93;``).

    One left-to-right pass, so an escaped escape (``&amp;apos;``) becomes ``&apos;``, not ``'``.
    """
    return _MOSES_ESCAPE.sub(lambda m: _MOSES_ESCAPES[m.group(0)], text)


# ----------------------------------------------------------------------------------------------------------------
# Vocabulary


class Vocab:
    """A token <-> id map with the specials ``<pad> <s> </s> <unk>`` at ids 0..3.

    :param tokens: the non-special tokens in id order (ids start at 4); duplicates and specials are refused.
    """

    FORMAT = "pyro_attention.Vocab"

    def __init__(self, tokens: Iterable[str] = ()):
        self.itos: list[str] = list(SPECIALS)
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(SPECIALS)}
        for token in tokens:
            if not isinstance(token, str) or not token:
                raise ValueError(f"Vocab: tokens must be non-empty strings, got {token!r}")
            if token in self.stoi:
                what = "a special token" if token in SPECIALS else "a duplicate"
                raise ValueError(f"Vocab: {token!r} is {what}")
            self.stoi[token] = len(self.itos)
            self.itos.append(token)
        self.unk_index = self.stoi["<unk>"]

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], min_freq: int = 1, max_size: int | None = None) -> Vocab:
        """Count tokens and keep those seen at least ``min_freq`` times, most frequent first (ties alphabetical).

        Special tokens appearing in the text are not counted twice (they keep ids 0..3).

        :param max_size: at most this many entries **including** the 4 specials (``len(vocab) <= max_size``).
        """
        count(min_freq, "Vocab.build: min_freq")
        if max_size is not None:
            count(max_size, "Vocab.build: max_size")
        if min_freq < 1:
            raise ValueError(f"Vocab.build: min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < len(SPECIALS):
            raise ValueError(f"Vocab.build: max_size must be >= {len(SPECIALS)} (the specials), got {max_size}")
        if isinstance(sentences, str):
            raise TypeError("Vocab.build expects an iterable of token lists, not a string")
        counts: Counter[str] = Counter()
        for i, sentence in enumerate(sentences):
            if isinstance(sentence, str):
                raise TypeError("Vocab.build expects token lists; split sentences first (got a string)")
            counts.update(texts(sentence, f"Vocab.build: sentences[{i}]", "one token"))
        for special in SPECIALS:
            counts.pop(special, None)
        ranked = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max_size - len(SPECIALS)]
        return cls(ranked)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos

    def __hash__(self) -> int:
        return hash(tuple(self.itos))

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)})"

    def __getitem__(self, token: str) -> int:
        """The id of ``token`` (``<unk>``'s id if unknown)."""
        return self.stoi.get(token, self.unk_index)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Token ids, ``<unk>`` (3) for tokens not in the vocabulary.  No ``<s>`` / ``</s>`` is added."""
        if isinstance(tokens, str):
            raise TypeError("Vocab.encode expects a list of tokens, not a string")
        tokens = texts(tokens, "Vocab.encode: tokens", "one token")
        unk, stoi = self.unk_index, self.stoi
        return [stoi.get(t, unk) for t in tokens]

    def decode(self, ids: Iterable[int] | torch.Tensor, strip_specials: bool = True) -> list[str]:
        """Tokens for ``ids``.

        :param strip_specials: stop at the first ``</s>`` and drop ``<pad>`` and ``<s>``; ``<unk>`` is kept (it
            stands for a word).  With ``False`` every id is mapped, specials included.
        :raises ValueError: for an id outside ``[0, len(self))``.
        """
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        else:
            token_ids(ids, "Vocab.decode: ids")
        out: list[str] = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise ValueError(f"Vocab.decode: id {i} is out of range for vocabulary size {len(self)}")
            if strip_specials:
                if i == EOS:
                    break
                if i in (PAD, BOS):
                    continue
            out.append(self.itos[i])
        return out

    def to_json(self) -> str:
        return json.dumps({"format": self.FORMAT, "version": 1, "itos": self.itos}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes, where: str | None = None) -> Vocab:
        """The vocabulary of :meth:`to_json`'s text.

        :param where: what the text is, for the message (e.g. ``"checkpoint /x/best.pt: target vocabulary is
            damaged"`` or a file name).
        :raises ValueError: for anything else than such a document (not JSON, not a vocabulary, specials missing,
            a token that is not a string or is there twice), prefixed with ``where``.
        """
        try:
            return cls._from_json(text)
        except ValueError as e:
            raise ValueError(f"{where}: {e}" if where else str(e)) from None

    @classmethod
    def _from_json(cls, text: str | bytes) -> Vocab:
        if not isinstance(text, (str, bytes, bytearray)):
            raise ValueError(f"not a {cls.FORMAT} JSON document (got {type(text).__name__}, not JSON text)")
        try:
            data: Any = json.loads(text)
        except UnicodeDecodeError as e:
            raise ValueError(f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON ({e})") from None
        if not isinstance(data, dict) or data.get("format") != cls.FORMAT or not isinstance(data.get("itos"), list):
            raise ValueError(f"not a {cls.FORMAT} JSON document")
        itos = data["itos"]
        if itos[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"Vocab JSON: the first entries must be {SPECIALS}, got {itos[: len(SPECIALS)]}")
        return cls(itos[len(SPECIALS):])

    def save(self, path: str | os.PathLike) -> None:
        from pyro_attention.files import write_text

        write_text(path, self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        """The vocabulary :meth:`save` wrote to ``path``; errors name the file (missing, not UTF-8, damaged)."""
        path = require_file(path, "vocabulary file")
        return cls.from_json(path.read_bytes(), str(path))


# ----------------------------------------------------------------------------------------------------------------
# Batching


def bucket_indices(
    source_ids: Sequence[Sequence[int]],
    target_ids: Sequence[Sequence[int]],
    batch_size: int,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Indices of the pairs in each length bucket, as used by :func:`bucket_batches`.

    Pairs are sorted by (source length, target length, original index), cut into consecutive batches of
    ``batch_size`` sentences (the last may be smaller), and the order of the batches is permuted with
    ``generator`` when ``shuffle``.  Useful to put decoded batches back in corpus order.
    """
    if len(source_ids) != len(target_ids):
        raise ValueError(f"bucket_batches: {len(source_ids)} source but {len(target_ids)} target sentences")
    if count(batch_size, "bucket_batches: batch_size") < 1:
        raise ValueError(f"bucket_batches: batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(source_ids)), key=lambda i: (len(source_ids[i]), len(target_ids[i]), i))
    batches = [order[k: k + batch_size] for k in range(0, len(order), batch_size)]
    if shuffle and len(batches) > 1:
        perm = torch.randperm(len(batches), generator=generator).tolist()
        batches = [batches[p] for p in perm]
    return batches


def bucket_batches(
    source_ids: Sequence[Sequence[int]],
    target_ids: Sequence[Sequence[int]],
    batch_size: int,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
    gold: Sequence[Sequence[int]] | None = None,
) -> list[TranslationBatch]:
    """Length-bucketed :class:`TranslationBatch` es (see :func:`bucket_indices` for the order).

    :param source_ids: token ids per source sentence (no ``<s>`` / ``</s>``).
    :param target_ids: token ids per target sentence (``collate`` adds ``<s>`` and ``</s>``).
    :param gold: optional, per pair, the source position of each target token (``-1``: unaligned).
    """
    if gold is not None and len(gold) != len(source_ids):
        raise ValueError(f"bucket_batches: {len(gold)} gold alignments for {len(source_ids)} sentence pairs")
    out = []
    for idx in bucket_indices(source_ids, target_ids, batch_size, shuffle, generator):
        sentences = [(source_ids[i], target_ids[i]) for i in idx]
        out.append(collate(sentences, None if gold is None else [gold[i] for i in idx]))
    return out
