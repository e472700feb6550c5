"""Alignment error rate of latent alignments against human gold alignments (``pyro-attention align``).

A translation model is trained (:func:`pyro_attention.translation.train`) on parallel text that *includes the
gold sentence pairs as unlabelled text* (plus, optionally, extra parallel text), then, on the gold pairs, every
alignment source is turned into links -- the argmax source word of each target word -- and scored with AER,
precision and recall (Och & Ney 2003, :mod:`pyro_attention.aer`):

* ``prior``: ``p(z_t | x, y_<t)`` of a categorical pair (what it would attend to before seeing ``y_t``);
* ``posterior``: the exact ``p(z_t | x, y)`` by enumeration (Bayes' rule, sees ``y_t``);
* ``q``: the amortised inference network of :class:`~pyro_attention.models.VariationalAttention`;
* ``soft``: the attention weights of a :class:`~pyro_attention.models.SoftAttention` model.

* ``posterior-threshold``: every source word whose exact posterior is at least a threshold (any number of links
  per target word, none included).  The threshold is chosen from :data:`THRESHOLD_GRID` by AER on one half of the
  gold pairs and applied to the *other* half (even-numbered pairs scored with the threshold tuned on the
  odd-numbered ones and vice versa), so no pair is scored with a threshold tuned on itself.

The network (``network``, :data:`ALIGN_NETWORKS`) is an object that trains itself: ``seq2seq`` (the paper's
``tanh`` output layer) and ``product`` (the product of experts) train :class:`~pyro_attention.networks.Seq2Seq`
with :func:`pyro_attention.translation.train`; ``ibm1`` (uniform prior, lexical expert on the source word's
embedding: IBM Model 1 with a neural lexical table, :class:`~pyro_attention.networks.lexical.IBM1Network`) and
``distortion`` (Seq2Seq's learned prior with the same lexical expert,
:class:`~pyro_attention.networks.lexical.DistortionNetwork`) train with :func:`pyro_attention.inference.fit` --
the ``marginal`` pair's exact enumeration (``TraceEnum_ELBO``) either way.

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
from typing import Any

import torch

from pyro_attention.aer import SYMMETRIZATIONS, AERResult, alignment_error_rate, links_from_probs, symmetrize
from pyro_attention.aer import merge_json as merge_json  # re-exported: it lived here
from pyro_attention.data.alignments import GoldAlignments, read_bitext, read_naacl, read_pharaoh
from pyro_attention.data.text import Vocab, bucket_batches, multi30k_paths, read_parallel
from pyro_attention.data.text import data_dir as resolve_data_dir
from pyro_attention.data.translation import collate
from pyro_attention.inference import alignment_posterior
from pyro_attention.inference.optim import check_lr

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
    #: the network family, a key of :data:`ALIGN_NETWORKS`
    network: str = "seq2seq"
    #: thresholds tried for ``posterior-threshold`` links (chosen on the other half of the gold pairs)
    thresholds: tuple[float, ...] = field(default_factory=lambda: THRESHOLD_GRID)

    def __post_init__(self) -> None:
        check_lr(self.lr, "AlignConfig: lr")
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
        if self.network not in ALIGN_NETWORKS:
            raise ValueError(f"network must be one of {', '.join(ALIGN_NETWORKS)}, got {self.network!r}")
        ALIGN_NETWORKS[self.network].check(self.models)
        if not self.thresholds or not all(0.0 < t <= 1.0 for t in self.thresholds):
            raise ValueError(f"thresholds: need at least one, each in (0, 1], got {self.thresholds}")


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


@dataclass
class Trained:
    """A trained pair with its vocabularies and training time (what :func:`alignment_probs` needs)."""

    pair: Any
    src_vocab: Vocab
    tgt_vocab: Vocab
    seconds: float


def _training_text(corpus: GoldCorpus, reverse: bool) -> tuple[list[list[str]], list[list[str]]]:
    src, tgt = corpus.source + corpus.extra_source, corpus.target + corpus.extra_target
    return (tgt, src) if reverse else (src, tgt)


class AlignNetwork:
    """A network family for ``pyro-attention align``: what its output layer is, which pairs it takes, and how
    it is trained on a gold corpus (one direction)."""

    #: the ``output`` reported with its rows
    output: str = ""
    #: pairs it can be trained with (``None``: every pair)
    pairs: tuple[str, ...] | None = None

    def __init__(self, name: str, description: str) -> None:
        self.name, self.description = name, description

    def check(self, models: list[str]) -> None:
        """Refuse pairs this network cannot carry, naming the allowed ones."""
        bad = [m for m in models if self.pairs is not None and m not in self.pairs]
        if bad:
            raise ValueError(f"models: network {self.name!r} takes only {list(self.pairs)}, got {bad}")

    def train(self, corpus: GoldCorpus, config: AlignConfig, model: str, reverse: bool,
              log: Callable[[str], None]) -> Trained:  # pragma: no cover - interface
        raise NotImplementedError


class Seq2SeqAligner(AlignNetwork):
    """:class:`~pyro_attention.networks.Seq2Seq` with output layer ``output``, trained by
    :func:`pyro_attention.translation.train` (the gold pairs are its validation set)."""

    def __init__(self, name: str, description: str, output: str) -> None:
        super().__init__(name, description)
        self.output = output

    def train(self, corpus: GoldCorpus, config: AlignConfig, model: str, reverse: bool,
              log: Callable[[str], None]) -> Trained:
        from pyro_attention.translation import TranslationConfig, train

        start = time.perf_counter()
        out = Path(config.out) / f"{self.name}-{model}{'-reverse' if reverse else ''}"
        out.mkdir(parents=True, exist_ok=True)
        src, tgt = _training_text(corpus, reverse)
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
            output=self.output,
            epochs=config.epochs,
            batch_size=config.batch_size,
            lr=config.lr,
            seed=config.seed,
            threads=config.threads,
            out=str(out),
            patience=0,
        )
        result = train(tc, progress=False, overwrite=True, log=log)
        return Trained(result.pair, result.src_vocab, result.tgt_vocab, time.perf_counter() - start)


@dataclass
class _Bitext:
    """Token ids of a parallel text, batched by length (bucket order shuffled per epoch) for :func:`fit`."""

    source: list[list[int]]
    target: list[list[int]]

    def batches(self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None) -> list:
        return bucket_batches(self.source, self.target, batch_size, shuffle, generator)


class LexicalAligner(AlignNetwork):
    """A network with the lexical expert (:mod:`pyro_attention.networks.lexical`), trained with the ``marginal``
    pair by :func:`pyro_attention.inference.fit` (``TraceEnum_ELBO``: exact enumeration of the alignment)."""

    output = "lexical"
    pairs = ("marginal",)

    def __init__(self, name: str, description: str, build: Callable[[int, int, AlignConfig], Any]) -> None:
        super().__init__(name, description)
        self.build = build

    def train(self, corpus: GoldCorpus, config: AlignConfig, model: str, reverse: bool,
              log: Callable[[str], None]) -> Trained:
        import pyro

        from pyro_attention.inference import fit
        from pyro_attention.registry import make_pair

        start = time.perf_counter()
        src, tgt = _training_text(corpus, reverse)
        src_vocab, tgt_vocab = Vocab.build(src), Vocab.build(tgt)
        data = _Bitext([src_vocab.encode(s) for s in src], [tgt_vocab.encode(t) for t in tgt])
        pyro.set_rng_seed(config.seed)
        pair = make_pair(model, self.build(len(src_vocab), len(tgt_vocab), config))
        result = fit(pair, data, num_epochs=config.epochs, batch_size=config.batch_size, lr=config.lr,
                     seed=config.seed, progress=False)
        steps = max(1, result.steps // max(1, config.epochs))
        per_epoch = [sum(result.losses[k: k + steps]) / len(result.losses[k: k + steps])
                     for k in range(0, result.steps, steps)]
        log(f"{self.name} {model}{' reverse' if reverse else ''}: {len(src)} pairs, vocabularies {len(src_vocab)} / "
            f"{len(tgt_vocab)}, {result.steps} steps in {result.seconds:.0f} s; mean loss per token by epoch "
            + " ".join(f"{x:.3f}" for x in per_epoch))
        return Trained(pair, src_vocab, tgt_vocab, time.perf_counter() - start)


def _ibm1(source_vocab: int, target_vocab: int, config: AlignConfig) -> Any:
    from pyro_attention.networks.lexical import IBM1Network

    return IBM1Network(source_vocab, target_vocab, embedding_size=0)  # a free table: IBM Model 1 exactly


def _ibm1_rank(source_vocab: int, target_vocab: int, config: AlignConfig) -> Any:
    from pyro_attention.networks.lexical import IBM1Network

    return IBM1Network(source_vocab, target_vocab, embedding_size=config.embedding)


def _distortion(source_vocab: int, target_vocab: int, config: AlignConfig) -> Any:
    from pyro_attention.networks.lexical import DistortionNetwork

    return DistortionNetwork(source_vocab, target_vocab, embedding_size=config.embedding,
                             encoder_size=config.encoder, decoder_size=config.decoder,
                             attention_size=config.attention)


#: ``--network`` values
ALIGN_NETWORKS: dict[str, AlignNetwork] = {
    n.name: n for n in (
        Seq2SeqAligner("seq2seq", "Seq2Seq, the paper's tanh output layer", "tanh"),
        Seq2SeqAligner("product", "Seq2Seq, product-of-experts output (decoder expert u_t + source expert v_s)",
                       "product"),
        LexicalAligner("ibm1", "IBM Model 1: uniform prior, lexical expert with a free (full-rank) table", _ibm1),
        LexicalAligner("ibm1-rank", "IBM Model 1 with a rank-E lexical table: uniform prior, lexical expert on the "
                       "source word's E-dimensional embedding (--embedding E)", _ibm1_rank),
        LexicalAligner("distortion", "Seq2Seq's learned prior (a neural distortion model), lexical expert",
                       _distortion),
    )
}


@torch.no_grad()
def alignment_probs(
    result: Trained, source: list[list[str]], target: list[list[str]], batch_size: int = 32
) -> dict[str, list[torch.Tensor]]:  # noqa: ANN001
    """Every alignment distribution of a trained pair on the given sentence pairs, in order: per source name
    (``prior``, ``posterior``, ``q``) a list of ``(T_i, S_i)`` matrices over the real words (no ``</s>``)."""
    out: dict[str, list[torch.Tensor]] = {}
    pair = result.pair
    pair.network.eval()
    for start in range(0, len(source), batch_size):
        chunk = list(range(start, min(len(source), start + batch_size)))
        batch = collate([(result.src_vocab.encode(source[i]), result.tgt_vocab.encode(target[i])) for i in chunk])
        probs = alignment_posterior(pair, batch)
        for name, p in probs.items():
            name = "q" if name == "guide" else name
            out.setdefault(name, []).extend(
                p[row, : len(target[i]), : len(source[i])].float() for row, i in enumerate(chunk))
    return out


def argmax_links(probs: list[torch.Tensor]) -> list[set[tuple[int, int]]]:
    """Each target word linked to its most probable source word (ties to the first)."""
    return [links_from_probs(p) for p in probs]


def alignment_links(
    result: Trained, source: list[list[str]], target: list[list[str]], batch_size: int = 32
) -> dict[str, list[set[tuple[int, int]]]]:  # noqa: ANN001
    """Argmax links of every alignment distribution of a trained pair on the given sentence pairs, in order."""
    return {k: argmax_links(v) for k, v in alignment_probs(result, source, target, batch_size).items()}


#: thresholds tried for ``posterior-threshold`` links
THRESHOLD_GRID = tuple(round(0.05 * k, 2) for k in range(1, 20))


def threshold_links(
    probs: list[torch.Tensor],
    gold: list,
    grid: tuple[float, ...] = THRESHOLD_GRID,
    reverse: bool = False,
) -> tuple[list[set[tuple[int, int]]], tuple[float, float]]:
    """Links to every source word whose probability is at least a threshold chosen on the *other* half.

    Pairs ``0, 2, 4, ...`` are linked with the threshold of ``grid`` that gives the lowest AER on pairs
    ``1, 3, 5, ...``, and those with the one best on pairs ``0, 2, 4, ...``: no pair is scored with a threshold
    tuned on itself.

    :param probs: per pair, ``(T, S)`` alignment probabilities of the model's own direction.
    :param gold: per pair, the gold links (``(source, target)`` of the *corpus*).
    :param reverse: ``probs`` come from the reverse model (its links are ``(target, source)`` of the corpus).
    :returns: the links (in the model's direction, like :func:`links_from_probs`) and the two thresholds
        (for the even pairs, for the odd pairs).
    """
    if len(probs) != len(gold):
        raise ValueError(f"threshold_links: {len(probs)} alignments for {len(gold)} gold ones")
    cache = {th: [links_from_probs(p, threshold=th) for p in probs] for th in grid}

    def score(th: float, half: int) -> float:
        idx = range(half, len(probs), 2)
        links = [cache[th][i] for i in idx]
        if reverse:
            links = [{(s, t) for t, s in x} for x in links]
        return alignment_error_rate(links, [gold[i] for i in idx]).aer

    chosen = tuple(min(grid, key=lambda th, h=half: score(th, 1 - h)) for half in (0, 1))
    return [cache[chosen[i % 2]][i] for i in range(len(probs))], chosen  # type: ignore[return-value]


@dataclass
class AlignRow:
    model: str
    source: str
    direction: str
    result: AERResult
    output: str = ""
    network: str = "seq2seq"
    train_pairs: int = 0
    wall_s: float = 0.0
    note: str = ""


def run_align(config: AlignConfig, log: Callable[[str], None] = print) -> list[AlignRow]:
    """Train the models and score every alignment source against the gold links."""
    from pyro_attention.registry import ALL_PAIRS

    torch.set_num_threads(config.threads)
    network = ALIGN_NETWORKS[config.network]
    corpus = load_gold_corpus(config, log)
    log(
        f"{corpus.description}: {len(corpus.source)} gold pairs ({corpus.gold.num_sure} sure links), "
        f"{len(corpus.extra_source)} extra training pairs; network {network.name}: {network.description}"
    )
    train_pairs = len(corpus.source) + len(corpus.extra_source)
    gold = list(corpus.gold)
    rows: list[AlignRow] = []
    for model in config.models:
        trained = network.train(corpus, config, model, False, log)
        forward = alignment_probs(trained, corpus.source, corpus.target)
        log(f"trained {network.name} {model} ({trained.seconds:.0f} s)")
        backward, back_seconds = None, 0.0
        if config.both_directions:
            back = network.train(corpus, config, model, True, log)
            backward, back_seconds = alignment_probs(back, corpus.target, corpus.source), back.seconds
            log(f"trained {network.name} {model} reverse ({back.seconds:.0f} s)")

        def row(label: str, direction: str, links: list, seconds: float, note: str = "",
                model: str = model) -> AlignRow:
            return AlignRow(model, label, direction, alignment_error_rate(links, gold), network.output,
                            network.name, train_pairs, seconds, note)

        for name, probs in forward.items():
            label = "soft" if model == "soft" else name  # a soft model's "prior" is its attention weights
            if name == "prior" and ALL_PAIRS[model].deterministic:
                label = "weights"  # a deterministic pair's prior is its attention weights
            variants = [(label, argmax_links(probs), None if backward is None else argmax_links(backward[name]), "")]
            if name == "posterior":
                fwd, chosen = threshold_links(probs, gold, config.thresholds)
                note = f"thresholds {chosen[0]:g} / {chosen[1]:g} (even / odd pairs, each tuned on the other half)"
                bwd = None
                if backward is not None:
                    bwd, back_chosen = threshold_links(backward[name], gold, config.thresholds, reverse=True)
                    note += f"; reverse {back_chosen[0]:g} / {back_chosen[1]:g}"
                log(f"posterior-threshold: {note}")
                variants.append(("posterior-threshold", fwd, bwd, note))
            for source_label, fwd, bwd, note in variants:
                rows.append(row(source_label, "forward", fwd, trained.seconds, note))
                if bwd is not None:
                    inverted = [{(s, t) for t, s in links} for links in bwd]
                    rows.append(row(source_label, "reverse", inverted, back_seconds, note))
                    for method in SYMMETRIZATIONS:
                        rows.append(row(source_label, method, symmetrize(fwd, bwd, method),
                                        trained.seconds + back_seconds, note))
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


#: the ``symmetrisation`` values written to the JSON results
JSON_SYMMETRISATIONS = ("forward", "reverse", "intersection", "union", "grow-diag", "grow-diag-final")


def json_rows(rows: list[AlignRow], corpus: str) -> list[dict[str, Any]]:
    """Rows for ``docs/results/aer.json``: ``corpus``, ``model`` (``<network>-<pair>``), ``output``, ``source``,
    ``symmetrisation``, ``aer`` / ``precision`` / ``recall`` in %, ``train_pairs``, ``wall_s`` (training, both
    directions for a symmetrised row) and ``note``."""
    out = []
    for r in rows:
        if r.direction not in JSON_SYMMETRISATIONS:
            continue
        a = r.result
        out.append({
            "corpus": corpus, "model": f"{r.network}-{r.model}", "output": r.output,
            "source": "soft" if r.source == "weights" else r.source, "symmetrisation": r.direction,
            "aer": round(100 * a.aer, 2), "precision": round(100 * a.precision, 2),
            "recall": round(100 * a.recall, 2), "train_pairs": r.train_pairs, "wall_s": round(r.wall_s, 1),
            "note": r.note,
        })
    return out
