"""Translating text with a checkpoint: the decoding settings (:class:`BeamSearch`), sentences decoded in
length-sorted chunks with a resumable cache (:func:`decode_batches`, :class:`DecodeCache`), and detokenised
translations of raw lines (:func:`translate_lines`)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from pyro_attention.checks import texts
from pyro_attention.files import write_text, writing
from pyro_attention.pair import AlignmentPair, Rule
from pyro_attention.tasks.translation.checkpoints import Checkpoint, load_checkpoint, move_checkpoint
from pyro_attention.tasks.translation.config import tqdm_disabled


def as_checkpoint(checkpoint: Checkpoint | str | os.PathLike) -> Checkpoint:
    """A loaded checkpoint, or the one at that path."""
    return checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)


class DecodeCache:
    """Decoded chunks of sentences kept in a JSON-lines file, so that a decoding stopped part way (a sitting that
    ended, a kill) goes on where it stopped: beam search over a test set with the exact marginal of a ``tanh``
    output layer takes hours on a CPU.

    The first line is the decoding's key (the checkpoint file's path, size and modification time, the rule, beam,
    ``k``, length settings and a hash of the sources): a file written for another checkpoint or decoding is started
    afresh.  Each further line is one chunk ``{"start", "hyps", "seconds"}`` (the chunk's first position in the
    length-sorted order, its target ids, the seconds it took), appended and flushed to disk when the chunk is done;
    a last line cut short by a kill is dropped when the file is opened again.

    :param path: the file (its folder must exist); :attr:`seconds` and :attr:`sentences` sum the chunks read and
        written, for a decoding speed that counts every sitting's chunks at the rate they were decoded.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.chunks: dict[int, list[list[int]]] = {}
        self.seconds = 0.0
        self.sentences = 0

    def open(self, key: dict[str, Any]) -> None:
        """Read the chunks decoded under ``key`` (none where the file is missing or holds another key) and rewrite
        the file as its key and those chunks (atomically), ready for :meth:`add`."""
        header = json.loads(json.dumps({"key": key}))
        lines: list[dict[str, Any]] = []
        if self.path.is_file():
            parsed = []
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    parsed.append(json.loads(line))
                except json.JSONDecodeError:  # cut short by a kill: it (and anything after) is decoded again
                    break
            if parsed and parsed[0] == header:
                lines = [c for c in parsed[1:] if isinstance(c, dict) and {"start", "hyps", "seconds"} <= set(c)]
        self.chunks = {int(c["start"]): c["hyps"] for c in lines}
        self.seconds = sum(float(c["seconds"]) for c in lines)
        self.sentences = sum(len(c["hyps"]) for c in lines)
        write_text(self.path, "".join(json.dumps(x) + "\n" for x in [header, *lines]))

    def add(self, start: int, hyps: list[list[int]], seconds: float) -> None:
        """Append one decoded chunk and flush it to disk."""
        self.chunks[start] = hyps
        self.seconds += seconds
        self.sentences += len(hyps)
        with writing(self.path), open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"start": start, "hyps": hyps, "seconds": seconds}) + "\n")
            f.flush()
            os.fsync(f.fileno())


def checkpoint_key(path: str | os.PathLike) -> dict[str, Any]:
    """A checkpoint file as it is now (its resolved path, size and modification time; ``None`` for a file that is
    not there): what results kept for it must match (:class:`DecodeCache`, the runner's split scores)."""
    path = Path(path)
    stat = path.stat() if path.is_file() else None
    return {"checkpoint": str(path.resolve()), "bytes": stat.st_size if stat else None,
            "mtime_ns": stat.st_mtime_ns if stat else None}


def _decoding_key(ckpt: Checkpoint, sources: Sequence[Sequence[str]], **settings: Any) -> dict[str, Any]:
    """What a :class:`DecodeCache` must match: the checkpoint file, the decoding's settings and the sources."""
    digest = hashlib.sha256("\n".join(" ".join(s) for s in sources).encode("utf-8")).hexdigest()
    return {**checkpoint_key(ckpt.path), **settings, "sources": len(sources), "sha256": digest}


@dataclass(frozen=True)
class BeamSearch:
    """How sentences are decoded (``pyro-attention evaluate`` / ``translate``'s ``--beam``, ``--rule``, ``--kmax``,
    ``--length-penalty``, ``--max-decode-len``).

    :param beam: beam width (1: greedy).
    :param rule: the prediction rule, a :class:`~pyro_attention.pair.Rule` or its name (``None``: the pair's
        default, :meth:`~pyro_attention.pair.AlignmentPair.rule`); :meth:`for_pair` resolves it.
    :param k: ``K`` of the K-max rule.
    :param length_penalty: GNMT length penalty ``alpha`` (0: none).
    :param max_len: the longest translation in target tokens (``None``: ``2 * source length + 10``).
    :raises ValueError: naming the setting out of range.
    """

    beam: int = 5
    rule: Rule | str | None = None
    k: int = 5
    length_penalty: float = 0.0
    max_len: int | None = None

    def __post_init__(self) -> None:
        for name, low in (("beam", 1), ("k", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"BeamSearch: {name} must be an int >= {low}, got {value!r}")
        if self.max_len is not None and (isinstance(self.max_len, bool) or not isinstance(self.max_len, int)
                                         or self.max_len < 1):
            raise ValueError(f"BeamSearch: max_len must be None or an int >= 1, got {self.max_len!r}")
        if not (isinstance(self.length_penalty, (int, float)) and 0 <= self.length_penalty < math.inf):
            raise ValueError(f"BeamSearch: length_penalty must be a finite number >= 0, got {self.length_penalty!r}")

    def for_pair(self, pair: AlignmentPair) -> BeamSearch:
        """These settings with :attr:`rule` resolved against ``pair`` (``ValueError`` for a rule it cannot
        decode with)."""
        return replace(self, rule=pair.rule(self.rule, decoding=True))

    def limit(self, source: Sequence[str]) -> int:
        """The longest translation of ``source``."""
        return self.max_len or 2 * len(source) + 10


def decode_batches(
    ckpt: Checkpoint,
    sources: Sequence[Sequence[str]],
    search: BeamSearch,
    progress: bool = False,
    cache: DecodeCache | None = None,
) -> list[list[str]]:
    """The target tokens of each of ``sources`` under ``search``, decoded 64 sentences of similar length at a time
    (``cache``: chunks already decoded are read, new ones appended)."""
    from pyro_attention.tasks.translation.decoding import translate

    search = search.for_pair(ckpt.pair)
    # sentences of similar length decoded together (beam search is batched), each with its own length limit
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[str]] = [[] for _ in sources]
    chunk = 64
    if cache is not None:
        cache.open(_decoding_key(ckpt, sources, beam=search.beam, rule=str(search.rule), k=search.k,
                                 length_penalty=search.length_penalty, max_decode_len=search.max_len, chunk=chunk))
    bar = tqdm(total=len(sources), disable=tqdm_disabled(progress), desc="decoding", unit="sent", leave=False)
    for start in range(0, len(order), chunk):
        rows = order[start : start + chunk]
        hyps = None if cache is None else cache.chunks.get(start)
        if hyps is None or len(hyps) != len(rows):
            began = time.perf_counter()
            ids = [ckpt.src_vocab.encode(sources[i]) for i in rows]
            width = max(len(x) for x in ids)
            source = torch.tensor([x + [0] * (width - len(x)) for x in ids], dtype=torch.long,
                                  device=next(ckpt.network.parameters()).device)
            limits = [search.limit(sources[i]) for i in rows]
            hyps = translate(ckpt.pair, source, source != 0, search.beam, search.rule, search.k, limits,
                             search.length_penalty, batch_size=chunk)
            if cache is not None:
                cache.add(start, hyps, time.perf_counter() - began)
        for i, hyp in zip(rows, hyps, strict=True):
            out[i] = ckpt.tgt_vocab.decode(hyp)
        bar.update(len(rows))
    bar.close()
    return out


def _tokenizer(kind: str, lang: str) -> Callable[[str], list[str]]:
    if kind == "none":
        return str.split
    if kind == "moses":
        from sacremoses import MosesTokenizer

        moses = MosesTokenizer(lang=lang)
        return lambda line: moses.tokenize(line, escape=True, aggressive_dash_splits=False)
    raise ValueError(f"tokenize must be one of none, moses; got {kind!r}")


@torch.no_grad()
def translate_lines(
    checkpoint: Checkpoint | str | os.PathLike,
    lines: Iterable[str],
    *,
    search: BeamSearch | None = None,
    tokenize: str = "none",
    lowercase: bool | None = None,
    progress: bool = False,
    device: str | None = None,
) -> list[str]:
    """Detokenised translations of ``lines`` (one sentence each; an empty line gives an empty line).

    :param search: how to decode (default :class:`BeamSearch`: beam 5, the pair's default rule).
    :param tokenize: ``"none"`` (the lines are tokenised like the training data: split on whitespace) or
        ``"moses"`` (Moses-tokenise raw text with ``sacremoses``, escaping as the Multi30k / IWSLT files do).
        BPE corpora need BPE-segmented input.
    :param lowercase: lower-case the input (default: when the training corpus is lower-cased).
    :param device: where to decode (default: where a loaded checkpoint's network is, the CPU for a path).
    """
    from pyro_attention.metrics import detokenize

    lines = texts(lines, "translate_lines: lines")
    ckpt = as_checkpoint(checkpoint)
    if device is not None:
        move_checkpoint(ckpt, device)
    search = (search or BeamSearch()).for_pair(ckpt.pair)
    split = _tokenizer(tokenize, ckpt.config.src)
    lc = ckpt.config.lowercased if lowercase is None else lowercase
    sources = [split(line.lower() if lc else line) for line in lines]
    real = [i for i, s in enumerate(sources) if s]
    hyps = decode_batches(ckpt, [sources[i] for i in real], search, progress)
    out = [""] * len(sources)
    for i, hyp in zip(real, hyps, strict=True):
        out[i] = detokenize(hyp, ckpt.config.tgt)
    return out
