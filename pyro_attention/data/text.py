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
(:func:`data_dir`); the data itself is never part of the repository.
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
from typing import Any

import torch

from pyro_attention.data.translation import BOS, EOS, PAD, SPECIALS, TranslationBatch, collate

__all__ = [
    "DATA_ENV",
    "IWSLT14_SPLITS",
    "MULTI30K_LANGUAGES",
    "MULTI30K_SPLITS",
    "ParallelCorpus",
    "Vocab",
    "apply_subword",
    "bucket_batches",
    "bucket_indices",
    "data_dir",
    "iwslt14_paths",
    "multi30k_paths",
    "read_lines",
    "read_parallel",
    "train_subword",
    "undo_bpe",
    "unescape_moses",
]

DATA_ENV = "PYRO_ATTENTION_DATA"
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
MULTI30K_LANGUAGES = ("de", "en", "fr", "cs")
IWSLT14_SPLITS = ("valid", "test")
IWSLT14_LANGUAGES = ("de", "en")


# ----------------------------------------------------------------------------------------------------------------
# Reading text


def read_lines(path: str | os.PathLike) -> list[str]:
    """Read a UTF-8 text file (gzip when the name ends in ``.gz``) into a list of lines.

    Only the line terminator (``\\n``, or ``\\r\\n``) is removed, and a byte-order mark at the very start of the
    file; other whitespace is kept.  Lines are split on ``\\n`` only (not on the Unicode line separators that
    ``str.splitlines`` honours), so line numbers agree with ``wc -l`` / ``sed -n``.

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
        s_tok, t_tok = s.split(), t.split()
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
        if min_freq < 1:
            raise ValueError(f"Vocab.build: min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < len(SPECIALS):
            raise ValueError(f"Vocab.build: max_size must be >= {len(SPECIALS)} (the specials), got {max_size}")
        if isinstance(sentences, str):
            raise TypeError("Vocab.build expects an iterable of token lists, not a string")
        counts: Counter[str] = Counter()
        for sentence in sentences:
            if isinstance(sentence, str):
                raise TypeError("Vocab.build expects token lists; split sentences first (got a string)")
            counts.update(sentence)
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
        from pyro_attention.outputs import write_text

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
    if batch_size < 1:
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
        pairs = [(source_ids[i], target_ids[i]) for i in idx]
        out.append(collate(pairs, None if gold is None else [gold[i] for i in idx]))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Where the data lives


def data_dir(arg: str | os.PathLike | None = None, option: str = "--data-dir") -> Path:
    """The data directory: ``arg`` if given, else the ``PYRO_ATTENTION_DATA`` environment variable.

    :param option: the command-line option to name in the error message.
    :raises FileNotFoundError: if neither is set, or the directory does not exist.
    """
    if arg is not None and str(arg) != "":
        path, source = Path(arg).expanduser(), f"{option} {arg}"
    elif os.environ.get(DATA_ENV):
        path, source = Path(os.environ[DATA_ENV]).expanduser(), f"{DATA_ENV}={os.environ[DATA_ENV]}"
    else:
        raise FileNotFoundError(
            f"no data directory given: pass {option} PATH or set the {DATA_ENV} environment variable "
            f"(the folder holding multi30k/, iwslt14-de-en/, ...)"
        )
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {path} (from {source}) does not exist or is not a directory")
    return path


def _corpus_dir(root: str | os.PathLike, name: str, marker: str) -> Path:
    """``root/name`` if it exists, else ``root`` itself when it already is that folder (holds ``marker``)."""
    root = Path(root)
    if (root / name).is_dir():
        return root / name
    if (root / marker).exists() or root.name == name:
        return root
    raise FileNotFoundError(f"{root / name}: no such directory (expected the {name} corpus under {root})")


def require_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` as a ``Path`` if it is a file; else ``FileNotFoundError`` saying whether it is missing or a folder."""
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"{path}: is a directory, not a {what}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such {what}")
    return path


def multi30k_paths(
    data_dir: str | os.PathLike, split: str, src: str = "de", tgt: str = "en", tokenized: bool = True
) -> tuple[Path, Path]:
    """Source and target files of a Multi30k split.

    :param data_dir: the data directory (holding ``multi30k/``) or the ``multi30k`` folder itself.
    :param tokenized: the lower-cased Moses-tokenised ``tok/{split}.lc.norm.tok.{lang}.gz`` (True) or the cased
        untokenised ``raw/{split}.{lang}.gz`` (False; use these as sacreBLEU references).
    :raises ValueError: for an unknown split or language (listing the allowed ones).
    :raises FileNotFoundError: naming a missing file (e.g. Czech has no 2017 test sets).
    """
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"unknown Multi30k split {split!r}; allowed: {', '.join(MULTI30K_SPLITS)}")
    for lang in (src, tgt):
        if lang not in MULTI30K_LANGUAGES:
            raise ValueError(f"unknown Multi30k language {lang!r}; allowed: {', '.join(MULTI30K_LANGUAGES)}")
    if src == tgt:
        raise ValueError(f"source and target language are both {src!r}")
    root = _corpus_dir(data_dir, "multi30k", "tok")
    if tokenized:
        paths = tuple(root / "tok" / f"{split}.lc.norm.tok.{lang}.gz" for lang in (src, tgt))
    else:
        paths = tuple(root / "raw" / f"{split}.{lang}.gz" for lang in (src, tgt))
    return require_file(paths[0]), require_file(paths[1])


def iwslt14_paths(
    data_dir: str | os.PathLike, split: str, bpe: bool = False, src: str = "de", tgt: str = "en"
) -> tuple[Path, Path]:
    """Source and target files of an IWSLT14 De-En split (``valid`` or ``test``; there is no train split here).

    :param data_dir: the data directory (holding ``iwslt14-de-en/``) or that folder itself.
    :param bpe: the 14k joint BPE files ``{split}.{lang}.bpe.gz`` (``@@ `` joiner; see :func:`undo_bpe`) instead
        of the word-tokenised ``{split}.{lang}.gz``.
    """
    if split not in IWSLT14_SPLITS:
        raise ValueError(f"unknown IWSLT14 split {split!r}; allowed: {', '.join(IWSLT14_SPLITS)}")
    for lang in (src, tgt):
        if lang not in IWSLT14_LANGUAGES:
            raise ValueError(f"unknown IWSLT14 language {lang!r}; allowed: {', '.join(IWSLT14_LANGUAGES)}")
    if src == tgt:
        raise ValueError(f"source and target language are both {src!r}")
    root = _corpus_dir(data_dir, "iwslt14-de-en", "valid.de.gz")
    suffix = ".bpe.gz" if bpe else ".gz"
    return require_file(root / f"{split}.{src}{suffix}"), require_file(root / f"{split}.{tgt}{suffix}")


# ----------------------------------------------------------------------------------------------------------------
# Subwords (optional: HuggingFace ``tokenizers``)


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "subword segmentation needs the optional 'tokenizers' package: pip install tokenizers"
        ) from e
    return tokenizers


def train_subword(sentences: Iterable[Sequence[str] | str], vocab_size: int, model: str = "bpe"):
    """Learn a subword model on already tokenised sentences with HuggingFace ``tokenizers``.

    Words are the whitespace-separated tokens (``WhitespaceSplit`` pre-tokeniser: the existing tokenisation is
    kept, punctuation is not split again).  The specials ``<pad> <s> </s> <unk>`` come first in its vocabulary.

    :param sentences: token lists (or whitespace-separated strings).
    :param vocab_size: the subword vocabulary size (including specials and the base characters).
    :param model: ``"bpe"`` (byte-pair encoding) or ``"unigram"``.
    :returns: a ``tokenizers.Tokenizer``; segment with :func:`apply_subword`.
    """
    tk = _import_tokenizers()
    from tokenizers import models, pre_tokenizers, trainers

    if vocab_size < len(SPECIALS) + 1:
        raise ValueError(f"train_subword: vocab_size must exceed the {len(SPECIALS)} specials, got {vocab_size}")
    if model == "bpe":
        tokenizer = tk.Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False)
    elif model == "unigram":
        tokenizer = tk.Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=list(SPECIALS), unk_token="<unk>", show_progress=False
        )
    else:
        raise ValueError(f"train_subword: unknown model {model!r}; allowed: 'bpe', 'unigram'")
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    text = (s if isinstance(s, str) else " ".join(s) for s in sentences)
    tokenizer.train_from_iterator(text, trainer=trainer)
    return tokenizer


def apply_subword(tokenizer, sentence_tokens: Sequence[str]) -> list[str]:
    """Segment a tokenised sentence into subwords, marking every non-final piece of a word with ``@@``.

    The output follows the subword-nmt convention, so ``undo_bpe(" ".join(pieces)) == " ".join(sentence_tokens)``
    for words whose characters the model has seen (unseen characters become ``<unk>``).
    """
    _import_tokenizers()
    if isinstance(sentence_tokens, str):
        raise TypeError("apply_subword expects a list of tokens, not a string")
    if not sentence_tokens:
        return []
    enc = tokenizer.encode(list(sentence_tokens), is_pretokenized=True, add_special_tokens=False)
    words = enc.word_ids
    pieces: list[str] = []
    for k, (piece, word) in enumerate(zip(enc.tokens, words, strict=True)):
        last_of_word = k + 1 == len(words) or words[k + 1] != word
        pieces.append(piece if last_of_word else piece + "@@")
    return pieces
