"""Translation corpora: the synthetic task, Multi30k, IWSLT14 or any parallel files as :class:`Split` token
lists; vocabularies, length-bucketed batches, and the network and pair a config builds."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyro_attention.data.corpora import data_dir, iwslt14_paths, multi30k_paths
from pyro_attention.data.synthetic_translation import make_synthetic_translation
from pyro_attention.data.text import Vocab, bucket_batches, read_lines, read_parallel
from pyro_attention.data.translation import SPECIALS, TranslationBatch
from pyro_attention.networks import Seq2Seq, TransformerSeq2Seq, TranslationNetwork
from pyro_attention.networks.attention import ATTENTION_SCORES
from pyro_attention.networks.output import OUTPUT_LAYERS
from pyro_attention.networks.recurrence import BRIDGES, INPUT_FEEDS
from pyro_attention.pair import AlignmentPair
from pyro_attention.registry import make_pair
from pyro_attention.tasks.translation.config import (
    IWSLT14_HELD_OUT,
    SPLITS,
    SYNTHETIC_SIZES,
    Log,
    TranslationConfig,
    check_choice,
    log_to_stdout,
)


@dataclass
class Split:
    """Token lists of one split, and the references BLEU compares against.

    :param references: one string per pair: the raw reference (Multi30k ``raw/``), else the target side joined
        (synthetic) or detokenised; ``None`` when not asked for (training and validation splits).
    :param dropped: pairs dropped because one side was longer than ``max_len`` (training split only).
    :param total: pairs read (kept + dropped), before any ``*_size`` subset.
    """

    name: str
    source: list[list[str]]
    target: list[list[str]]
    references: list[str] | None
    description: str
    dropped: int = 0
    total: int = 0
    max_len: int | None = None

    def __len__(self) -> int:
        return len(self.source)

    def drop_report(self) -> str:
        return f"dropped {self.dropped} of {self.total} pairs longer than {self.max_len}"


@dataclass
class Corpora:
    train: Split
    val: Split
    test: Split | None = None


def _filter(source: list, target: list, refs: list | None, max_len: int | None) -> tuple[list, list, Any, int]:
    if max_len is None:
        return source, target, refs, 0
    keep = [i for i in range(len(source)) if len(source[i]) <= max_len and len(target[i]) <= max_len]
    kept_refs = None if refs is None else [refs[i] for i in keep]
    return [source[i] for i in keep], [target[i] for i in keep], kept_refs, len(source) - len(keep)


def _detok_refs(target: list[list[str]], lang: str) -> list[str]:
    from pyro_attention.metrics import detokenize

    return [detokenize(t, lang) for t in target]


def load_split(
    config: TranslationConfig,
    which: str,
    *,
    max_len: int | None = None,
    size: int | None = None,
    src_file: str | os.PathLike | None = None,
    tgt_file: str | os.PathLike | None = None,
    ref_file: str | os.PathLike | None = None,
    references: bool = True,
) -> Split:
    """One split (``"train"``, ``"val"`` or ``"test"``) of the configured corpus, or explicit files.

    :param max_len: drop pairs with a side longer than this (counted in ``dropped``).
    :param size: keep the first ``size`` pairs (after ``max_len``); synthetic: the number generated (default the
        config's ``<split>_size``, else 2000 / 200 / 200).
    :param src_file: with ``tgt_file``, read these parallel files instead (``ref_file``: raw references, one a
        line; default: the detokenised target side).
    :param references: also prepare the BLEU references (``False``: ``Split.references`` is ``None``).
    """
    if ref_file is not None and src_file is None:
        raise ValueError(f"ref_file: {ref_file} holds the references of --src-file / --tgt-file; a split of the "
                         "corpus has its own (give the files too, or drop --ref-file)")
    if src_file is not None or tgt_file is not None:
        if src_file is None or tgt_file is None:
            raise ValueError("give both a source and a target file (--src-file and --tgt-file)")
        corpus = read_parallel(src_file, tgt_file, lowercase=config.lowercased)
        refs = _references(ref_file, corpus.lines, corpus.target, config.tgt) if references else None
        desc = f"{src_file} / {tgt_file}"
        return _finish(which, corpus.source, corpus.target, refs, desc, max_len, size)
    check_choice("split", which, SPLITS)
    if config.data == "synthetic":
        n = size if size is not None else getattr(config, f"{which}_size") or SYNTHETIC_SIZES[which]
        data = make_synthetic_translation(
            n,
            seed=config.data_seed + SPLITS.index(which),
            vocab_size=config.synthetic_vocab,
            min_len=config.synthetic_min_len,
            max_len=config.synthetic_max_len,
        )
        refs = [" ".join(t) for t in data.target] if references else None
        desc = f"synthetic {which} (seed {config.data_seed + SPLITS.index(which)}, vocabulary {config.synthetic_vocab})"
        return _finish(which, data.source, data.target, refs, desc, max_len, None)
    if config.data == "multi30k":
        root = data_dir(config.data_dir)
        name = getattr(config, f"{which}_split") or {"train": "train", "val": "val", "test": "test_2016_flickr"}[which]
        src_path, tgt_path = multi30k_paths(root, name, config.src, config.tgt)
        corpus = read_parallel(src_path, tgt_path)
        if references:
            raw = multi30k_paths(root, name, config.src, config.tgt, tokenized=False)[1]
            refs = _references(raw, corpus.lines, corpus.target, config.tgt)
        else:
            refs = None
        desc = f"Multi30k {name} {config.src}-{config.tgt} ({src_path.parent})"
        return _finish(which, corpus.source, corpus.target, refs, desc, max_len, size)
    if config.data == "iwslt14":
        root = data_dir(config.data_dir)
        name = "test" if which == "test" else "valid"
        corpus = read_parallel(*iwslt14_paths(root, name, config.bpe, config.src, config.tgt))
        source, target = corpus.source, corpus.target
        held = config.val_size or IWSLT14_HELD_OUT
        if which != "test":
            if held >= len(source):
                raise ValueError(f"val_size {held} leaves no IWSLT14 'valid' pair for training ({len(source)} in all)")
            source, target = (source[:-held], target[:-held]) if which == "train" else (source[-held:], target[-held:])
        refs = _detok_refs(target, config.tgt) if references else None
        part = {"train": f"'valid' without its last {held} pairs", "val": f"last {held} pairs of 'valid'",
                "test": "'test'"}[which]
        desc = f"IWSLT14 {config.src}-{config.tgt}{' BPE' if config.bpe else ''}: {part}"
        return _finish(which, source, target, refs, desc, max_len, size if which != "val" else None)
    # parallel
    src_path, tgt_path = getattr(config, f"{which}_src"), getattr(config, f"{which}_tgt")
    if src_path is None or tgt_path is None:
        raise ValueError(
            f"data 'parallel' has no {which} files: give --{which}-src and --{which}-tgt in the config, or "
            f"evaluate with --src-file and --tgt-file"
        )
    corpus = read_parallel(src_path, tgt_path)
    refs = _detok_refs(corpus.target, config.tgt) if references else None
    return _finish(which, corpus.source, corpus.target, refs, f"{src_path} / {tgt_path}", max_len, size)


def _references(ref_file: Any, lines: list[int], target: list[list[str]], lang: str) -> list[str]:
    if ref_file is None:
        return _detok_refs(target, lang)
    raw = read_lines(ref_file)
    if lines and lines[-1] > len(raw):
        raise ValueError(f"{ref_file}: {len(raw)} reference lines, fewer than the {lines[-1]} source lines")
    return [raw[n - 1] for n in lines]


def _finish(which, source, target, refs, desc, max_len, size) -> Split:  # noqa: ANN001
    total = len(source)
    source, target, refs, dropped = _filter(source, target, refs, max_len)
    if size is not None:
        source, target, refs = source[:size], target[:size], None if refs is None else refs[:size]
    if not source:
        why = f": all {dropped} pairs have a side longer than max_len {max_len}" if dropped == total > 0 else ""
        raise ValueError(f"{which} split ({desc}) holds no sentence pairs{why}")
    return Split(which, source, target, refs, desc, dropped, total, max_len)


def load_corpora(config: TranslationConfig, log: Log | None = log_to_stdout, test: bool = False) -> Corpora:
    """Train and validation (and, with ``test=True``, test, with its BLEU references) splits of ``config``'s
    corpus.

    Training pairs longer than ``max_len`` are dropped, and ``log`` reports how many ("dropped N of M pairs
    longer than L"); validation and test splits are kept whole (``val_size`` / ``test_size`` take the first
    pairs).
    """
    train = load_split(config, "train", max_len=config.max_len, size=config.train_size, references=False)
    val = load_split(config, "val", size=config.val_size, references=False)
    tst = load_split(config, "test", size=config.test_size) if test else None
    if log is not None:
        log(f"train: {train.description}: {len(train)} pairs; {train.drop_report()}")
        log(f"val: {val.description}: {len(val)} pairs")
        if tst is not None:
            log(f"test: {tst.description}: {len(tst)} pairs")
    return Corpora(train, val, tst)


def build_vocabs(config: TranslationConfig, train: Split) -> tuple[Vocab, Vocab]:
    """Source and target :class:`~pyro_attention.data.Vocab` of the training side (``min_freq``, ``max_vocab``).

    :raises ValueError: when a vocabulary would hold no word at all (only ``<pad> <unk> <s> </s>``): every token
        would be ``<unk>``.
    """
    vocabs = (Vocab.build(train.source, config.min_freq, config.max_vocab),
              Vocab.build(train.target, config.min_freq, config.max_vocab))
    for side, vocab in zip(("source", "target"), vocabs, strict=True):
        if len(vocab) <= len(SPECIALS):
            raise ValueError(
                f"min_freq: no {side} word of {train.description} occurs {config.min_freq} times or more, so the "
                f"{side} vocabulary would hold only {list(SPECIALS)} and every token would be <unk>; lower "
                f"--min-freq (the most frequent {side} word occurs {_top_count(getattr(train, side))} times)"
            )
    return vocabs


def _top_count(sentences: list[list[str]]) -> int:
    from collections import Counter

    counts = Counter(token for sentence in sentences for token in sentence)
    return max(counts.values(), default=0)


def make_batches(split: Split, src_vocab: Vocab, tgt_vocab: Vocab, batch_size: int) -> list[TranslationBatch]:
    """Length-bucketed batches of ``split`` (fixed composition; :func:`train` permutes their order per epoch)."""
    return bucket_batches(
        [src_vocab.encode(s) for s in split.source], [tgt_vocab.encode(t) for t in split.target], batch_size
    )


# ----------------------------------------------------------------------------------------------------------------
# Model


def _lstm(config: TranslationConfig, source_vocab: int, target_vocab: int, **parts: Any) -> Seq2Seq:
    return Seq2Seq(source_vocab, target_vocab, embedding_size=config.embedding, encoder_size=config.encoder,
                   decoder_size=config.decoder, attention_size=config.attention, layers=config.layers,
                   input_feed=INPUT_FEEDS[config.input_feed], bridge=BRIDGES[config.bridge], **parts)


def _transformer(config: TranslationConfig, source_vocab: int, target_vocab: int,
                 **parts: Any) -> TransformerSeq2Seq:
    return TransformerSeq2Seq(source_vocab, target_vocab, model_size=config.embedding, heads=config.heads,
                              feedforward_size=config.feedforward, layers=config.layers,
                              attention_size=config.attention, embedding_values=config.embedding_values, **parts)


#: ``network`` names -> the function building that network of a config's sizes
NETWORKS: dict[str, Callable[..., TranslationNetwork]] = {"lstm": _lstm, "transformer": _transformer}


def build_pair(config: TranslationConfig, src_vocab: Vocab,
               tgt_vocab: Vocab) -> tuple[TranslationNetwork, AlignmentPair]:
    """The network of ``config`` (:class:`~pyro_attention.networks.Seq2Seq` or
    :class:`~pyro_attention.networks.TransformerSeq2Seq`) at its sizes, and its model/guide pair.

    Initial weights come from torch's global RNG (seed it first for reproducibility; :func:`train` does).
    """
    network = NETWORKS[config.network](
        config, len(src_vocab), len(tgt_vocab), dropout=config.dropout, chunk_size=config.chunk_size or None,
        keep_bytes=round(config.keep_gib * 2**30), output=OUTPUT_LAYERS[config.output],
        attention=ATTENTION_SCORES[config.attention_type], init=config.init,
    )
    pair = make_pair(config.model, network, config.estimator, **(config.options or {}))
    return network, pair
