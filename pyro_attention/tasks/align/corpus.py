"""Gold sentence pairs and their links: the corpora of ``pyro-attention align`` (Hansards en-fr, WSJ cs-en) or a
user's gold set, with the unlabelled text trained on besides them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyro_attention.data.alignments import GoldAlignments, read_bitext, read_naacl, read_pharaoh
from pyro_attention.data.corpora import data_dir as resolve_data_dir
from pyro_attention.data.corpora import multi30k_paths
from pyro_attention.data.text import different_files, read_parallel
from pyro_attention.tasks.align.config import AlignConfig


@dataclass
class GoldCorpus:
    source: list[list[str]]
    target: list[list[str]]
    gold: GoldAlignments
    extra_source: list[list[str]]
    extra_target: list[list[str]]
    description: str


def _lower(sentences: list[list[str]]) -> list[list[str]]:
    return [[w.lower() for w in s] for s in sentences]


def _prefixed(sentences: list[list[str]], length: int) -> list[list[str]]:
    return [[w[:length] for w in s] for s in sentences] if length else sentences


def truncated(corpus: GoldCorpus, source_prefix: int = 0, target_prefix: int = 0) -> GoldCorpus:
    """``corpus`` with every word cut to its first ``source_prefix`` / ``target_prefix`` characters on the source /
    target side (0: whole words) -- eflomal's ``--source-prefix`` / ``--target-prefix`` stemming.  Positions, and so
    the gold links, are unchanged: only which words share a row of the lexical table changes.

    :raises ValueError: naming a negative length (Python's ``w[:-n]`` would drop characters instead)."""
    for name, n in (("source_prefix", source_prefix), ("target_prefix", target_prefix)):
        if n < 0:
            raise ValueError(f"{name} must be a number of characters >= 0 (0: whole words), got {n}")
    if not source_prefix and not target_prefix:
        return corpus
    return GoldCorpus(_prefixed(corpus.source, source_prefix), _prefixed(corpus.target, target_prefix), corpus.gold,
                      _prefixed(corpus.extra_source, source_prefix), _prefixed(corpus.extra_target, target_prefix),
                      corpus.description + "; words cut to their first "
                      + " / ".join(f"{n} characters ({side})" for n, side in
                                   ((source_prefix, "source"), (target_prefix, "target")) if n))


def load_user_gold(config: AlignConfig, log: Callable[[str], None] = print) -> GoldCorpus:
    """A user's gold set (``gold_text`` or ``gold_src`` + ``gold_tgt``, ``gold_links`` in ``links_format`` and
    ``links_order``) and extra text (``extra_src`` / ``extra_tgt``; none without them).

    :raises ValueError: naming the file (and line) for unequal line counts, malformed lines or links; links
        outside a sentence are reported and dropped.
    """
    if config.gold_text is not None:
        source, target = read_bitext(config.gold_text)
        where = config.gold_text
    else:
        different_files(config.gold_src, config.gold_tgt)
        source, target = _read_side(config.gold_src), _read_side(config.gold_tgt)
        if len(source) != len(target):
            raise ValueError(f"{config.gold_src} has {len(source)} sentences but {config.gold_tgt} has {len(target)}: "
                             "the two sides must be line-aligned")
        where = f"{config.gold_src} / {config.gold_tgt}"
    swap = config.links_order == "target-source"
    if config.links_format == "naacl":
        gold = read_naacl(config.gold_links, num_sentences=len(source), swap=swap, source_lengths=source,
                          target_lengths=target)
    else:
        first, second = (target, source) if swap else (source, target)
        gold = read_pharaoh(config.gold_links, one_indexed=config.links_format == "pharaoh1",
                            source_lengths=first, target_lengths=second)
        if swap:  # the file's (target, source) links as (source, target)
            gold = GoldAlignments([g.inverted() for g in gold], gold.report, gold.path)
    for dropped in gold.report:
        log(f"gold: dropped {dropped}")
    extra_src, extra_tgt = [], []
    if config.extra_src is not None:
        extra = read_parallel(config.extra_src, config.extra_tgt, max_len=config.max_len)
        extra_src, extra_tgt = extra.source, extra.target
    lower = _lower if config.lowercase else (lambda x: x)
    return GoldCorpus(lower(source), lower(target), gold, lower(extra_src), lower(extra_tgt),
                      f"user gold set {where} ({config.links_format}, {config.links_order})")


def _read_side(path: str | None) -> list[list[str]]:
    from pyro_attention.data.text import read_lines

    out = []
    for number, line in enumerate(read_lines(path), start=1):
        tokens = line.split()
        if not tokens:
            raise ValueError(f"{path}:{number}: empty sentence (every line of a gold set must hold one)")
        out.append(tokens)
    return out


def load_gold_corpus(config: AlignConfig, log: Callable[[str], None] = print) -> GoldCorpus:
    """The gold sentence pairs, their links (out-of-range links reported and dropped) and the extra text, words cut
    to ``source_prefix`` / ``target_prefix`` characters where those are set (:func:`truncated`)."""
    if config.gold_links is not None:
        corpus = load_user_gold(config, log)
    else:
        corpus = _load_builtin(config, log)
    return truncated(corpus, config.source_prefix, config.target_prefix)


def _load_builtin(config: AlignConfig, log: Callable[[str], None]) -> GoldCorpus:
    root = resolve_data_dir(config.data_dir)
    gold_dir = root / "gold-alignments"
    if config.corpus == "enfr":
        folder = gold_dir / "awesome-align-examples"
        source, target = read_bitext(folder / "enfr.src-tgt")
        gold = read_pharaoh(folder / "enfr.gold", one_indexed=True, source_lengths=source, target_lengths=target)
        src_lang, tgt_lang, desc = "en", "fr", "English-French Hansards (NAACL 2003)"
    else:
        folder = gold_dir / "cs-en-ldmt"
        source, target = read_bitext(folder / "corpus.cz-en")
        gold = read_naacl(folder / "czen.wal", swap=True, source_lengths=source, target_lengths=target)
        src_lang, tgt_lang, desc = "cs", "en", "Czech-English WSJ (Marecek 2016)"
    for dropped in gold.report:
        log(f"gold: dropped {dropped}")
    extra_src: list[list[str]] = []
    extra_tgt: list[list[str]] = []
    if config.extra_size:
        paths = multi30k_paths(root, "train", src_lang, tgt_lang)
        extra = read_parallel(*paths, max_len=config.max_len)
        extra_src, extra_tgt = extra.source[: config.extra_size], extra.target[: config.extra_size]
    return GoldCorpus(_lower(source), _lower(target), gold, extra_src, extra_tgt, desc)

