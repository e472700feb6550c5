"""Human word alignments: gold-standard readers (Pharaoh and NAACL formats) and ``source ||| target`` bitexts.

Every reader returns 0-indexed ``(source_pos, target_pos)`` links, whatever the file's convention, in a
:class:`GoldAlignments` sequence of :class:`GoldAlignment` (one per sentence pair) with a ``report`` of the links
it dropped.  Links are *sure* (S) or *possible* (P); a :class:`GoldAlignment` always has ``possible ⊇ sure``
(Och & Ney 2003), so a file without possible links gives ``possible == sure``.

Formats (see ``shared/data/README.md``):

- **Pharaoh** (:func:`read_pharaoh`): one line per sentence pair, whitespace-separated links ``i-j`` (sure) and
  ``ipj`` (possible), ``i`` the source position; ``i-j-S`` / ``i-j-P`` (either case) are read too.  A file with
  only ``i-j`` links has sure links only.  An empty line is a pair without links.  Positions are 0-indexed
  (``de-en-europarl-bicici/de-en.wa``) or 1-indexed (``awesome-align-examples/*.gold``): say which with
  ``one_indexed``, the format cannot tell.
- **NAACL 2003** (:func:`read_naacl`): one link per line ``SNUM i j [S|P] [confidence]``, 1-based sentence
  number, positions 1-indexed by default (position 0 is the NULL word: such links are dropped and reported).
  The first position column is normally the source; ``swap=True`` reads files whose first column is the target
  language (``cs-en-ldmt/czen.wal`` is ``SNUM EN_POS CZ_POS``, with Czech the source of ``corpus.cz-en``).
  The confidence column is ignored.
- **Bitext** (:func:`read_bitext`): ``source ||| target`` per line, whitespace-tokenised.  For two line-aligned
  files (``test.de`` / ``test.en``) use :func:`pyro_attention.data.text.read_parallel`; both readers drop a
  UTF-8 byte-order mark at the start of a file (``test.de`` has one).

Defects are reported, not fatal: given the sentence lengths (``source_lengths`` / ``target_lengths``, token counts
or the token lists themselves), a link outside a sentence is dropped and listed in ``report`` as a
:class:`DroppedLink` ``(pair, link, reason, line, written)`` with the 1-based pair number, so scoring runs on the
rest (``awesome-align-examples/jaen.gold`` has 6 such links, ``de-en.wa`` one).  What cannot be read at all -- a
malformed line, a different number of pairs than sentence lengths -- raises ``ValueError`` naming the file and the
1-based line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, overload

from pyro_attention.data.text import read_lines

__all__ = [
    "DroppedLink",
    "GoldAlignment",
    "GoldAlignments",
    "invert",
    "read_bitext",
    "read_naacl",
    "read_pharaoh",
]

Link = tuple[int, int]


@dataclass
class GoldAlignment:
    """The gold links of one sentence pair, 0-indexed ``(source_pos, target_pos)``.

    :param sure: the sure links S.
    :param possible: the possible links P; ``sure`` is added to it on construction, so ``possible ⊇ sure``
        always holds and equals ``sure`` when the annotation has no possible-only links.
    """

    sure: set[Link] = field(default_factory=set)
    possible: set[Link] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.sure = {(int(i), int(j)) for i, j in self.sure}
        self.possible = {(int(i), int(j)) for i, j in self.possible} | self.sure

    @property
    def possible_only(self) -> set[Link]:
        """The links marked possible but not sure (``P \\ S``)."""
        return self.possible - self.sure

    def inverted(self) -> GoldAlignment:
        """The same alignment with source and target swapped: ``(i, j)`` becomes ``(j, i)``."""
        return GoldAlignment({(j, i) for i, j in self.sure}, {(j, i) for i, j in self.possible})


class DroppedLink(NamedTuple):
    """A gold link a reader dropped.

    :param pair: 1-based sentence pair number.
    :param link: the link 0-indexed as ``(source_pos, target_pos)`` (after ``swap``); may be out of range.
    :param reason: why it was dropped, with the positions as written in the file.
    :param line: 1-based line of the file it was read from.
    :param written: the link as written in the file (``"12-16"``, ``"0063 13 17 S"``).
    """

    pair: int
    link: Link
    reason: str
    line: int
    written: str


@dataclass
class GoldAlignments(Sequence[GoldAlignment]):
    """The gold alignments of a file, one per sentence pair, and the links dropped while reading it.

    Behaves as a read-only sequence of :class:`GoldAlignment` (pass it straight to
    :func:`pyro_attention.aer.alignment_error_rate`).
    """

    alignments: list[GoldAlignment]
    report: list[DroppedLink] = field(default_factory=list)
    path: Path | None = None

    def __len__(self) -> int:
        return len(self.alignments)

    @overload
    def __getitem__(self, index: int) -> GoldAlignment: ...

    @overload
    def __getitem__(self, index: slice) -> list[GoldAlignment]: ...

    def __getitem__(self, index):
        return self.alignments[index]

    def __iter__(self) -> Iterator[GoldAlignment]:
        return iter(self.alignments)

    @property
    def num_sure(self) -> int:
        return sum(len(g.sure) for g in self.alignments)

    @property
    def num_possible(self) -> int:
        """``sum |P|`` with ``P ⊇ S`` (sure links included)."""
        return sum(len(g.possible) for g in self.alignments)

    def summary(self) -> str:
        """One line for a log: pairs, link counts and dropped links."""
        only = self.num_possible - self.num_sure
        text = f"{self.path}: {len(self)} pairs, {self.num_sure} sure + {only} possible-only links"
        if self.report:
            pairs = sorted({d.pair for d in self.report})
            text += f"; dropped {len(self.report)} links (pairs {', '.join(map(str, pairs))})"
        return text


@overload
def invert(gold: GoldAlignment) -> GoldAlignment: ...


@overload
def invert(gold: GoldAlignments) -> GoldAlignments: ...


@overload
def invert(gold: Iterable[Link]) -> set[Link]: ...


def invert(gold):
    """Swap the direction of an alignment: ``(i, j)`` -> ``(j, i)``.

    Accepts a :class:`GoldAlignment` (returns one), a :class:`GoldAlignments` (every pair inverted; the report
    is kept as read) or a set / iterable of links (returns a set).
    """
    if isinstance(gold, GoldAlignment):
        return gold.inverted()
    if isinstance(gold, GoldAlignments):
        return GoldAlignments([g.inverted() for g in gold.alignments], list(gold.report), gold.path)
    return {(j, i) for i, j in gold}


# ----------------------------------------------------------------------------------------------------------------
# Readers


_PHARAOH = re.compile(r"(\d+)(?:(-)|([pP]))(\d+)(?:-([sSpP]))?")


def _lengths(lengths: Sequence[int] | Sequence[Sequence[str]] | None, name: str) -> list[int] | None:
    if lengths is None:
        return None
    out = []
    for k, n in enumerate(lengths):
        n = n if isinstance(n, int) else len(n)
        if n < 0:
            raise ValueError(f"{name}[{k}] = {n} is negative")
        out.append(n)
    return out


def _check_count(path: Path, what: str, count: int, lengths: list[int] | None, name: str) -> None:
    if lengths is not None and len(lengths) != count:
        raise ValueError(f"{path}: {count} {what} but {len(lengths)} {name}")


def _range_problem(
    src: int, tgt: int, pair: int, src_len: list[int] | None, tgt_len: list[int] | None, base: int,
    src_written: int, tgt_written: int,
) -> str | None:
    """Why 0-indexed link ``(src, tgt)`` of 0-based pair ``pair`` is out of range, or ``None``."""
    convention = "1-indexed" if base else "0-indexed"
    for side, pos, written, lengths in (("source", src, src_written, src_len), ("target", tgt, tgt_written, tgt_len)):
        if pos < 0:
            return f"{side} position {written} is below {base} ({convention})"
        if lengths is not None and pos >= lengths[pair]:
            return f"{side} position {written} out of range for {lengths[pair]} {side} tokens ({convention})"
    return None


def read_pharaoh(
    path: str | os.PathLike,
    one_indexed: bool,
    source_lengths: Sequence[int] | Sequence[Sequence[str]] | None = None,
    target_lengths: Sequence[int] | Sequence[Sequence[str]] | None = None,
) -> GoldAlignments:
    """Read a Pharaoh-format gold file (one line per pair: ``i-j`` sure, ``ipj`` possible, ``i`` = source).

    :param one_indexed: positions in the file start at 1 (``awesome-align-examples``) rather than 0 (``de-en.wa``).
    :param source_lengths: per pair, the number of source tokens (or the token lists); links outside are
        dropped and reported.  ``target_lengths`` likewise.
    :returns: :class:`GoldAlignments` with one entry per line, 0-indexed, and the dropped links in ``report``.
    :raises ValueError: naming the file and 1-based line of a token that is not a link, or if the number of lines
        differs from the number of sentence lengths given.
    """
    path = Path(path)
    src_len, tgt_len = _lengths(source_lengths, "source_lengths"), _lengths(target_lengths, "target_lengths")
    lines = read_lines(path)
    _check_count(path, "lines", len(lines), src_len, "source lengths")
    _check_count(path, "lines", len(lines), tgt_len, "target lengths")
    base = 1 if one_indexed else 0
    alignments: list[GoldAlignment] = []
    report: list[DroppedLink] = []
    for number, line in enumerate(lines, start=1):
        sure: set[Link] = set()
        possible: set[Link] = set()
        for token in line.split():
            m = _PHARAOH.fullmatch(token)
            if m is None:
                raise ValueError(
                    f"{path}: line {number}: {token!r} is not a link (expected 'i-j' sure or 'ipj' possible)"
                )
            i_w, j_w = int(m.group(1)), int(m.group(4))
            is_possible = m.group(3) is not None or (m.group(5) or "s").lower() == "p"
            if m.group(3) is not None and m.group(5) is not None:
                raise ValueError(f"{path}: line {number}: {token!r} is not a link (both 'p' and a -S/-P suffix)")
            link = (i_w - base, j_w - base)
            problem = _range_problem(*link, number - 1, src_len, tgt_len, base, i_w, j_w)
            if problem is not None:
                report.append(DroppedLink(number, link, problem, number, token))
                continue
            (possible if is_possible else sure).add(link)
        alignments.append(GoldAlignment(sure, possible))
    return GoldAlignments(alignments, report, path)


def _naacl_link(path: Path, number: int, line: str) -> tuple[int, int, int, bool] | None:
    """Line ``number`` of a NAACL file as ``(snum, first, second, possible)``; ``None`` for a blank line.

    :raises ValueError: naming the file and line of a malformed line.
    """
    fields = line.split()
    if not fields:
        return None
    if len(fields) < 3 or len(fields) > 5:
        raise ValueError(f"{path}: line {number}: expected 'SNUM i j [S|P] [confidence]', got {line!r}")
    try:
        snum, first, second = (int(f) for f in fields[:3])
    except ValueError:
        raise ValueError(
            f"{path}: line {number}: sentence number and positions must be integers, got {line!r}"
        ) from None
    is_possible = False
    rest = fields[3:]
    if rest and rest[0].upper() in ("S", "P"):
        is_possible = rest[0].upper() == "P"
        rest = rest[1:]
    if len(rest) > 1:
        raise ValueError(f"{path}: line {number}: expected 'SNUM i j [S|P] [confidence]', got {line!r}")
    if rest:
        try:
            float(rest[0])
        except ValueError:
            raise ValueError(
                f"{path}: line {number}: expected S, P or a confidence after the positions, got {rest[0]!r}"
            ) from None
    return snum, first, second, is_possible


def read_naacl(
    path: str | os.PathLike,
    num_sentences: int | None = None,
    swap: bool = False,
    one_indexed: bool = True,
    source_lengths: Sequence[int] | Sequence[Sequence[str]] | None = None,
    target_lengths: Sequence[int] | Sequence[Sequence[str]] | None = None,
) -> GoldAlignments:
    """Read a NAACL 2003 shared-task gold file: one link per line, ``SNUM i j [S|P] [confidence]``.

    ``SNUM`` is the 1-based sentence pair number; a missing ``S|P`` means sure; a 4th field that is a number is
    taken as the confidence (ignored).  With ``one_indexed`` (the NAACL convention) position 0 is the NULL word:
    those links are dropped and reported.

    :param num_sentences: number of sentence pairs (pairs without any link get an empty :class:`GoldAlignment`);
        default ``len(source_lengths)`` or ``len(target_lengths)`` if given, else the largest ``SNUM``.  Links of
        a pair number outside ``1..num_sentences`` are dropped and reported.
    :param swap: the first position column is the *target* language (``cs-en-ldmt/czen.wal``: English first,
        Czech the source); links are returned as ``(source_pos, target_pos)`` all the same.
    :param source_lengths: per pair, source token counts (or token lists) to drop out-of-range links;
        ``target_lengths`` likewise.
    :raises ValueError: naming the file and 1-based line of a malformed line.
    """
    path = Path(path)
    src_len, tgt_len = _lengths(source_lengths, "source_lengths"), _lengths(target_lengths, "target_lengths")
    if src_len is not None and tgt_len is not None and len(src_len) != len(tgt_len):
        raise ValueError(f"{path}: {len(src_len)} source lengths but {len(tgt_len)} target lengths")
    lines = read_lines(path)
    base = 1 if one_indexed else 0
    parsed: list[tuple[int, int, int, int, bool, str]] = []  # (line, snum, src_w, tgt_w, possible, text)
    for number, line in enumerate(lines, start=1):
        link = _naacl_link(path, number, line)
        if link is not None:
            snum, first, second, is_possible = link
            src_w, tgt_w = (second, first) if swap else (first, second)
            parsed.append((number, snum, src_w, tgt_w, is_possible, line.strip()))
    if num_sentences is None:
        if src_len is not None or tgt_len is not None:
            num_sentences = len(src_len if src_len is not None else tgt_len)  # type: ignore[arg-type]
        else:
            num_sentences = max((p[1] for p in parsed), default=0)
    else:
        for lengths, name in ((src_len, "source lengths"), (tgt_len, "target lengths")):
            _check_count(path, "pairs (num_sentences)", num_sentences, lengths, name)
    sure: list[set[Link]] = [set() for _ in range(num_sentences)]
    possible: list[set[Link]] = [set() for _ in range(num_sentences)]
    report: list[DroppedLink] = []
    for number, snum, src_w, tgt_w, is_possible, text in parsed:
        link = (src_w - base, tgt_w - base)
        if not 1 <= snum <= num_sentences:
            report.append(DroppedLink(snum, link, f"pair number {snum} is outside 1..{num_sentences}", number, text))
            continue
        if one_indexed and (src_w == 0 or tgt_w == 0):
            report.append(DroppedLink(snum, link, "NULL link (position 0)", number, text))
            continue
        problem = _range_problem(*link, snum - 1, src_len, tgt_len, base, src_w, tgt_w)
        if problem is not None:
            report.append(DroppedLink(snum, link, problem, number, text))
            continue
        (possible if is_possible else sure)[snum - 1].add(link)
    alignments = [GoldAlignment(s, p) for s, p in zip(sure, possible, strict=True)]
    return GoldAlignments(alignments, report, path)


def read_bitext(path: str | os.PathLike) -> tuple[list[list[str]], list[list[str]]]:
    """Read a ``source ||| target`` file (``awesome-align-examples/*.src-tgt``, ``cs-en-ldmt/corpus.cz-en``).

    Each side is split on whitespace runs; a UTF-8 byte-order mark at the start is dropped.

    :returns: ``(sources, targets)``, token lists line by line.
    :raises ValueError: naming the file and 1-based line of a line without exactly one ``|||`` or with an empty
        side.
    """
    path = Path(path)
    sources: list[list[str]] = []
    targets: list[list[str]] = []
    for number, line in enumerate(read_lines(path), start=1):
        count = line.count("|||")
        if count != 1:
            what = "no '|||' separator" if count == 0 else f"{count} '|||' separators (expected one)"
            raise ValueError(f"{path}: line {number} has {what}: {line[:80]!r}")
        src, tgt = line.split("|||")
        s_tok, t_tok = src.split(), tgt.split()
        for side, toks in (("source", s_tok), ("target", t_tok)):
            if not toks:
                raise ValueError(f"{path}: line {number} has an empty {side} side")
        sources.append(s_tok)
        targets.append(t_tok)
    return sources, targets
