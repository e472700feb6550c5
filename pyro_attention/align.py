"""Alignment error rate of latent alignments against human gold alignments (``pyro-attention align``).

A translation model is trained (:func:`pyro_attention.translation.train`) on parallel text that *includes the
gold sentence pairs as unlabelled text* (plus, optionally, extra parallel text), then, on the gold pairs, every
alignment source is turned into links -- the argmax source word of each target word -- and scored with AER,
precision and recall (Och & Ney 2003, :mod:`pyro_attention.aer`):

* ``prior``: ``p(z_t | x, y_<t)`` of a categorical pair (what it would attend to before seeing ``y_t``);
* ``posterior``: the exact ``p(z_t | x, y)`` by enumeration (Bayes' rule, sees ``y_t``);
* ``q``: the amortised inference network of :class:`~pyro_attention.models.VariationalAttention`;
* ``soft``: the attention weights of a :class:`~pyro_attention.models.SoftAttention` model.

With ``both_directions`` a second set of models is trained target -> source and each source's links are also
reported for the reverse direction and for every symmetrisation of the two (intersection, union, grow-diag,
grow-diag-final, grow-diag-final-and: :data:`pyro_attention.aer.SYMMETRIZATIONS`).

Corpora (from ``--data-dir`` / ``$PYRO_ATTENTION_DATA``): ``enfr`` -- English-French Hansards (NAACL 2003; 447
pairs, 1-indexed Pharaoh with possible links), extra text Multi30k en-fr train; ``csen`` -- Czech-English WSJ
(515 pairs, NAACL format, English column first), extra text Multi30k cs-en train.  Tokens are lower-cased
(Multi30k is lower-cased).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pyro_attention.aer import SYMMETRIZATIONS, AERResult, alignment_error_rate, links_from_probs, symmetrize
from pyro_attention.data.alignments import GoldAlignments, read_bitext, read_naacl, read_pharaoh
from pyro_attention.data.text import data_dir as resolve_data_dir
from pyro_attention.data.text import multi30k_paths, read_parallel
from pyro_attention.data.translation import collate
from pyro_attention.inference import alignment_posterior

CORPORA = ("enfr", "csen")
#: ``--links-format`` values: Pharaoh ``i-j`` / ``ipj`` 0- or 1-indexed, NAACL ``SNUM i j [S|P]``
LINK_FORMATS = ("pharaoh0", "pharaoh1", "naacl")
#: ``--links-order``: which side a link's first number counts on
LINK_ORDERS = ("source-target", "target-source")


@dataclass
class AlignConfig:
    """Options of an AER run (CPU-sized defaults)."""

    corpus: str = "enfr"
    data_dir: str | None = None
    extra_size: int = 5000
    max_len: int = 60
    epochs: int = 5
    batch_size: int = 32
    lr: float = 3e-3
    embedding: int = 64
    encoder: int = 64
    decoder: int = 128
    attention: int = 64
    both_directions: bool = False
    seed: int = 0
    threads: int = 1
    out: str = "runs/align"
    models: list[str] = field(default_factory=lambda: ["soft", "variational"])
    #: a user's gold set instead of ``corpus``: ``source ||| target`` lines (``gold_text``) or two parallel files
    gold_text: str | None = None
    gold_src: str | None = None
    gold_tgt: str | None = None
    gold_links: str | None = None
    links_format: str = "pharaoh1"
    links_order: str = "source-target"
    #: unlabelled training text besides the gold sentences (two parallel files), instead of Multi30k
    extra_src: str | None = None
    extra_tgt: str | None = None
    lowercase: bool = True

    def __post_init__(self) -> None:
        if self.corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {CORPORA}, got {self.corpus!r}")
        if self.links_format not in LINK_FORMATS:
            raise ValueError(f"links_format must be one of {', '.join(LINK_FORMATS)}, got {self.links_format!r}")
        if self.links_order not in LINK_ORDERS:
            raise ValueError(f"links_order must be one of {', '.join(LINK_ORDERS)}, got {self.links_order!r}")
        own = (self.gold_text, self.gold_src, self.gold_tgt, self.gold_links)
        if any(x is not None for x in own):
            if self.gold_links is None:
                raise ValueError("gold_links: a user's gold set needs the links file (--gold-links)")
            if (self.gold_text is None) == (self.gold_src is None and self.gold_tgt is None):
                raise ValueError("gold_text / gold_src + gold_tgt: give the sentence pairs either as one 'source ||| "
                                 "target' file (--gold-text) or as two parallel files (--gold-src and --gold-tgt)")
            if self.gold_text is None and (self.gold_src is None or self.gold_tgt is None):
                raise ValueError("gold_src / gold_tgt: two parallel files need both --gold-src and --gold-tgt")
        if (self.extra_src is None) != (self.extra_tgt is None):
            raise ValueError("extra_src / extra_tgt: extra training text needs both --extra-src and --extra-tgt")
        from pyro_attention.registry import ALL_PAIRS

        unknown = [m for m in self.models if m not in ALL_PAIRS]
        if unknown:
            raise ValueError(f"models: unknown {unknown}; choose from {list(ALL_PAIRS)}")


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
        source, target = _read_side(config.gold_src), _read_side(config.gold_tgt)
        if len(source) != len(target):
            raise ValueError(f"{config.gold_src} has {len(source)} sentences but {config.gold_tgt} has {len(target)}: "
                             "the two sides must be line-aligned")
        where = f"{config.gold_src} / {config.gold_tgt}"
    swap = config.links_order == "target-source"
    if config.links_format == "naacl":
        gold = read_naacl(config.gold_links, num_pairs=len(source), swap=swap, source_lengths=source,
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
    """The gold sentence pairs, their links (out-of-range links reported and dropped) and the extra text."""
    if config.gold_links is not None:
        return load_user_gold(config, log)
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


def _write(path: Path, sentences: list[list[str]]) -> Path:
    path.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    return path


def _train(corpus: GoldCorpus, config: AlignConfig, model: str, reverse: bool, log: Callable[[str], None]):  # noqa: ANN202
    from pyro_attention.translation import TranslationConfig, train

    out = Path(config.out) / f"{model}{'-reverse' if reverse else ''}"
    out.mkdir(parents=True, exist_ok=True)
    src, tgt = corpus.source + corpus.extra_source, corpus.target + corpus.extra_target
    if reverse:
        src, tgt = tgt, src
    gold_src, gold_tgt = (corpus.target, corpus.source) if reverse else (corpus.source, corpus.target)
    files = {
        "train_src": _write(out / "train.src", src),
        "train_tgt": _write(out / "train.tgt", tgt),
        "val_src": _write(out / "val.src", gold_src),
        "val_tgt": _write(out / "val.tgt", gold_tgt),
    }
    tc = TranslationConfig(
        data="parallel",
        **{k: str(v) for k, v in files.items()},
        max_len=config.max_len,
        model=model,
        estimator="enum" if model in ("hard", "variational") else None,
        embedding=config.embedding,
        encoder=config.encoder,
        decoder=config.decoder,
        attention=config.attention,
        epochs=config.epochs,
        batch_size=config.batch_size,
        lr=config.lr,
        seed=config.seed,
        threads=config.threads,
        out=str(out),
        patience=0,
    )
    return train(tc, progress=False, overwrite=True, log=log)


@torch.no_grad()
def alignment_links(
    result, source: list[list[str]], target: list[list[str]], batch_size: int = 32
) -> dict[str, list[set[tuple[int, int]]]]:  # noqa: ANN001
    """Argmax links of every alignment distribution of a trained pair on the given sentence pairs, in order."""
    links: dict[str, list[set[tuple[int, int]]]] = {}
    pair = result.pair
    pair.network.eval()
    for start in range(0, len(source), batch_size):
        chunk = list(range(start, min(len(source), start + batch_size)))
        batch = collate([(result.src_vocab.encode(source[i]), result.tgt_vocab.encode(target[i])) for i in chunk])
        probs = alignment_posterior(pair, batch)
        words = torch.zeros_like(batch.target_mask)
        for row, i in enumerate(chunk):
            words[row, : len(target[i])] = True  # real words only: no </s>
        for name, p in probs.items():
            name = "q" if name == "guide" else name
            links.setdefault(name, []).extend(links_from_probs(p, source_mask=batch.source_mask, target_mask=words))
    return links


@dataclass
class AlignRow:
    model: str
    source: str
    direction: str
    result: AERResult


def run_align(config: AlignConfig, log: Callable[[str], None] = print) -> list[AlignRow]:
    """Train the models and score every alignment source against the gold links."""
    torch.set_num_threads(config.threads)
    corpus = load_gold_corpus(config, log)
    log(
        f"{corpus.description}: {len(corpus.source)} gold pairs ({corpus.gold.num_sure} sure links), "
        f"{len(corpus.extra_source)} extra training pairs"
    )
    rows: list[AlignRow] = []
    for model in config.models:
        start = time.perf_counter()
        forward = alignment_links(_train(corpus, config, model, False, log), corpus.source, corpus.target)
        log(f"trained {model} ({time.perf_counter() - start:.0f} s)")
        backward = None
        if config.both_directions:
            trained = _train(corpus, config, model, True, log)
            backward = alignment_links(trained, corpus.target, corpus.source)
        for name, predicted in forward.items():
            label = "soft" if model == "soft" else name  # a soft model's "prior" is its attention weights
            if name == "prior" and pyro_latent(model) == "none":
                label = "weights"  # a deterministic pair's prior is its attention weights
            rows.append(AlignRow(model, label, "forward", alignment_error_rate(predicted, corpus.gold)))
            if backward is not None:
                reverse = backward[name]
                inverted = [{(s, t) for t, s in links} for links in reverse]
                rows.append(AlignRow(model, label, "reverse", alignment_error_rate(inverted, corpus.gold)))
                for method in SYMMETRIZATIONS:
                    both = symmetrize(predicted, reverse, method)
                    rows.append(AlignRow(model, label, method, alignment_error_rate(both, corpus.gold)))
    return rows


def pyro_latent(model: str) -> str:
    """The ``latent`` kind of pair ``model`` (``"none"`` for deterministic attention)."""
    from pyro_attention.registry import ALL_PAIRS

    return ALL_PAIRS[model].latent


def format_rows(rows: list[AlignRow]) -> str:
    lines = ["| model | alignment source | direction | AER | precision | recall | links |", "|" + "---|" * 7]
    for r in rows:
        a = r.result
        lines.append(
            f"| {r.model} | {r.source} | {r.direction} | {a.aer:.3f} | {a.precision:.3f} | {a.recall:.3f} "
            f"| {a.num_predicted} |"
        )
    return "\n".join(lines)
