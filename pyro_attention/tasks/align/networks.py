"""The network families of ``pyro-attention align`` (:data:`ALIGN_NETWORKS`): what each is and how it trains
on a gold corpus, one direction at a time."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyro_attention.data.text import Vocab, bucket_batches
from pyro_attention.tasks.align import config as families
from pyro_attention.tasks.align.config import AlignConfig, NetworkOptions
from pyro_attention.tasks.align.corpus import GoldCorpus


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
    #: source position 0 is the NULL word (:func:`~pyro_attention.networks.lexical.with_null_word`)
    null_word: bool = False
    #: the output has a decoder's expert (:class:`~pyro_attention.networks.lexical.DecoderExpert`)
    decoder_expert: bool = False


def training_text(corpus: GoldCorpus, reverse: bool, gold_repeat: int = 1) -> tuple[list[list[str]], list[list[str]]]:
    """The training sentences: the gold pairs (``gold_repeat`` times, as unlabelled text) and the extra text."""
    src = corpus.source * gold_repeat + corpus.extra_source
    tgt = corpus.target * gold_repeat + corpus.extra_target
    return (tgt, src) if reverse else (src, tgt)


class AlignNetwork:
    """A network family for ``pyro-attention align``: what its output layer is, which pairs it takes, and how
    it is trained on a gold corpus (one direction)."""

    #: the ``output`` reported with its rows
    output: str = ""
    #: pairs it can be trained with (``None``: every pair)
    pairs: tuple[str, ...] | None = None
    #: whether it takes a NULL word (``--null-prob``)
    null_word: bool = False
    #: whether both directions can be trained in one loop (``--agreement``, ``--table-prior``: :meth:`train_jointly`)
    agreement: bool = False
    #: the options it reads (:class:`~pyro_attention.tasks.align.config.NetworkOptions`): ``config.options``
    options: type[NetworkOptions] = NetworkOptions

    def __init__(self, name: str, description: str, options: type[NetworkOptions] | None = None) -> None:
        self.name, self.description = name, description
        if options is not None:
            self.options = options

    def check(self, models: list[str]) -> None:
        """Refuse pairs this network cannot carry, naming the allowed ones."""
        bad = [m for m in models if self.pairs is not None and m not in self.pairs]
        if bad:
            raise ValueError(f"models: network {self.name!r} takes only {list(self.pairs)}, got {bad}")

    def train(self, corpus: GoldCorpus, config: AlignConfig, model: str, reverse: bool,
              log: Callable[[str], None]) -> Trained:  # pragma: no cover - interface
        raise NotImplementedError

    def train_jointly(self, corpus: GoldCorpus, config: AlignConfig, model: str,
                      log: Callable[[str], None]) -> tuple[Trained, Trained]:  # pragma: no cover - interface
        """Both directions trained together (networks with ``agreement``): ``(forward, reverse)``."""
        raise NotImplementedError


#: the options of an align run that a Seq2Seq aligner's translation run takes as they are
_SEQ2SEQ_KEYS = ("max_len", "epochs", "batch_size", "lr", "seed", "threads")


class Seq2SeqAligner(AlignNetwork):
    """A translation network (``network``: :class:`~pyro_attention.networks.Seq2Seq` or
    :class:`~pyro_attention.networks.TransformerSeq2Seq`) with output layer ``output``, trained by
    :func:`pyro_attention.tasks.translation.train` (the gold pairs are its validation set)."""

    options = families.Seq2SeqSizes

    def __init__(self, name: str, description: str, output: str, network: str = "lstm",
                 options: type[families.NetworkOptions] | None = None) -> None:
        super().__init__(name, description, options)
        self.output, self.network = output, network

    def train(self, corpus: GoldCorpus, config: AlignConfig, model: str, reverse: bool,
              log: Callable[[str], None]) -> Trained:
        from pyro_attention.tasks.translation import TranslationConfig, train

        start = time.perf_counter()
        out = Path(config.out) / f"{self.name}-{model}{'-reverse' if reverse else ''}"
        out.mkdir(parents=True, exist_ok=True)
        src, tgt = training_text(corpus, reverse, config.gold_repeat)
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
            model=model,
            estimator="enum" if model in ("hard", "variational") else None,
            output=self.output,
            network=self.network,
            out=str(out),
            patience=0,
            **{k: getattr(config, k) for k in _SEQ2SEQ_KEYS},
            **config.options.settings(),  # the network's sizes
        )
        result = train(tc, progress=False, overwrite=True, log=log)
        return Trained(result.pair, result.src_vocab, result.tgt_vocab, time.perf_counter() - start)


@dataclass
class Bitext:
    """Token ids of a parallel text, batched by length (bucket order shuffled per epoch) for :func:`fit`."""

    source: list[list[int]]
    target: list[list[int]]

    def batches(self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None) -> list:
        return bucket_batches(self.source, self.target, batch_size, shuffle, generator)

    def table(self, source_vocab: int, target_vocab: int, min_count: int = 1) -> Any:
        """A free lexical table stored at the word pairs that co-occur in at least ``min_count`` of these sentence
        pairs (:class:`~pyro_attention.networks.tables.SparseTable`)."""
        from pyro_attention.networks.tables import SparseTable, cooccurrences

        return SparseTable(source_vocab, target_vocab,
                           cooccurrences(self.source, self.target, target_vocab, min_count))


class LexicalAligner(AlignNetwork):
    """A network with the lexical expert (:mod:`pyro_attention.networks.lexical`), trained with the ``marginal``
    pair by :func:`pyro_attention.inference.fit` (``TraceEnum_ELBO``: exact enumeration of the alignment)."""

    output = "lexical"
    pairs = ("marginal",)

    def __init__(self, name: str, description: str, build: Callable[[int, int, AlignConfig, Bitext], Any],
                 null_word: bool = False, options: type[NetworkOptions] | None = None) -> None:
        super().__init__(name, description, options)
        self.null_word = null_word
        self.build = build

    def train(self, corpus: GoldCorpus, config: AlignConfig, model: str, reverse: bool,
              log: Callable[[str], None]) -> Trained:
        start = time.perf_counter()
        null = self.null_word and bool(config.options.null_prob)
        src_vocab, tgt_vocab, data = _bitext(corpus, reverse, null, config.gold_repeat)
        pair = _fit_lexical(self.build(len(src_vocab), len(tgt_vocab), config, data), data, config.epochs,
                            config.batch_size, config.lr, config.seed, log,
                            f"{self.name} {model}{' reverse' if reverse else ''}")
        return Trained(pair, src_vocab, tgt_vocab, time.perf_counter() - start, null)


def _bitext(corpus: GoldCorpus, reverse: bool, null_word: bool = False,
            gold_repeat: int = 1) -> tuple[Vocab, Vocab, Bitext]:
    """Vocabularies and ids of the training text (``null_word``: the NULL word in front of every source sentence;
    ``gold_repeat``: :func:`training_text`)."""
    from pyro_attention.networks.lexical import with_null_word

    src, tgt = training_text(corpus, reverse, gold_repeat)
    src_vocab, tgt_vocab = Vocab.build(src), Vocab.build(tgt)
    source = [src_vocab.encode(s) for s in src]
    if null_word:
        source = [with_null_word(s) for s in source]
    return src_vocab, tgt_vocab, Bitext(source, [tgt_vocab.encode(t) for t in tgt])


def _fit_lexical(network: Any, data: Bitext, epochs: int, batch_size: int, lr: float, seed: int,
                 log: Callable[[str], None], label: str, param_lr: dict[str, float] | None = None) -> Any:
    """The ``marginal`` pair of ``network`` trained by :func:`~pyro_attention.inference.fit`, its losses logged."""
    import pyro

    from pyro_attention.inference import fit
    from pyro_attention.registry import make_pair

    pyro.set_rng_seed(seed)
    pair = make_pair("marginal", network)
    result = fit(pair, data, num_epochs=epochs, batch_size=batch_size, lr=lr, param_lr=param_lr, seed=seed,
                 progress=True, log=lambda line: log(f"{label}: {line}"))  # a bar on a terminal, else lines
    log(f"{label}: {len(data.source)} pairs, vocabularies {network.source_vocab} / {network.num_classes}, "
        f"{result.steps} steps in {result.seconds:.0f} s; mean loss per token by epoch {_by_epoch(result, epochs)}")
    return pair


def _by_epoch(result: Any, epochs: int) -> str:
    """A fit's mean loss per step in each epoch, as text."""
    steps = max(1, result.steps // max(1, epochs))
    return " ".join(f"{sum(result.losses[k: k + steps]) / len(result.losses[k: k + steps]):.3f}"
                    for k in range(0, result.steps, steps))


#: IBM Model 1's batch size where it starts a staged network's lexical table (the free-table runs of
#: docs/results.md); its learning rate is ``--ibm1-lr``
IBM1_BATCH_SIZE = 512


class StagedAligner(AlignNetwork):
    """IBM Model 1 first, then a network holding it as its lexical model (as GIZA++ trains Model 1 before the HMM).

    ``ibm1_epochs`` epochs of :class:`~pyro_attention.networks.lexical.IBM1Network` (free table, batches of
    :data:`IBM1_BATCH_SIZE`, learning rate ``ibm1_lr``), then ``build(ibm1, source_vocab, target_vocab,
    config)``: ``epochs`` epochs, its own parameters at ``lr`` and the table at ``table_lr``; both stages by the
    ``marginal`` pair's exact enumeration."""

    output = "lexical"
    pairs = ("marginal",)

    def __init__(self, name: str, description: str, build: Callable[[Any, int, int, AlignConfig], Any],
                 null_word: bool = False, agreement: bool = False, options: type[NetworkOptions] | None = None) -> None:
        super().__init__(name, description, options)
        self.null_word, self.agreement = null_word, agreement
        self.build = build

    def _ibm1(self, corpus: GoldCorpus, config: AlignConfig, reverse: bool,
              log: Callable[[str], None]) -> tuple[Any, Vocab, Vocab, Bitext, bool]:
        """One direction's IBM Model 1 network (untrained), its vocabularies and text; the size of its table
        logged."""
        from pyro_attention.networks.lexical import IBM1Network

        options = config.options
        null = self.null_word and bool(options.null_prob)
        src_vocab, tgt_vocab, data = _bitext(corpus, reverse, null, config.gold_repeat)
        table = data.table(len(src_vocab), len(tgt_vocab), options.min_cooccurrence)
        log(f"{self.name}{' reverse' if reverse else ''}: lexical table of {table.num_entries:,} word pairs "
            f"(co-occurring in >= {options.min_cooccurrence} sentence pairs; vocabularies {len(src_vocab):,} x "
            f"{len(tgt_vocab):,})")
        lexical = IBM1Network(len(src_vocab), len(tgt_vocab), null_prob=options.null_prob if null else None,
                              table=table)
        return lexical, src_vocab, tgt_vocab, data, null

    def train(self, corpus: GoldCorpus, config: AlignConfig, model: str, reverse: bool,
              log: Callable[[str], None]) -> Trained:
        options = config.options
        start = time.perf_counter()
        lexical, src_vocab, tgt_vocab, data, null = self._ibm1(corpus, config, reverse, log)
        label = f"{self.name} {model}{' reverse' if reverse else ''}"
        if options.ibm1_epochs:
            lexical = _fit_lexical(lexical, data, options.ibm1_epochs, IBM1_BATCH_SIZE, options.ibm1_lr, config.seed,
                                   log, f"{label}, IBM Model 1").network
        network = self.build(lexical, len(src_vocab), len(tgt_vocab), config)
        pair = _fit_lexical(network, data, config.epochs, config.batch_size, config.lr, config.seed, log, label,
                            param_lr={"lexical.": options.table_lr})
        _log_learned(network, config, label, log)
        return Trained(pair, src_vocab, tgt_vocab, time.perf_counter() - start, null,
                       getattr(network, "decoder_expert", None) is not None)

    def train_jointly(self, corpus: GoldCorpus, config: AlignConfig, model: str,
                      log: Callable[[str], None]) -> tuple[Trained, Trained]:
        """Both directions in one loop (:func:`~pyro_attention.tasks.align.agreement.fit_agreement`): with
        ``agreement`` by agreement, with ``table_prior`` the tables by EM (their posterior mean under a Dirichlet
        prior, :class:`~pyro_attention.tasks.align.agreement.DirichletTables`).  IBM Model 1 first, each direction on
        its own posterior (by EM from uniform tables with ``table_prior``, else by gradient as :meth:`train` trains
        it: agreement from uniform tables was worse in a pilot, docs/results.md), then the two networks on their
        tables, ``epochs`` epochs (the tables at ``table_lr`` when by gradient).  Each direction's ``seconds`` is
        half the whole."""
        from pyro_attention.registry import make_pair
        from pyro_attention.tasks.align.agreement import JointBitext, fit_agreement

        options = config.options
        if not self.agreement:
            raise ValueError(f"agreement: network {self.name!r} cannot train both directions together")
        start = time.perf_counter()
        f_lex, f_src, f_tgt, f_data, null = self._ibm1(corpus, config, False, log)
        r_lex, r_src, r_tgt, r_data, _ = self._ibm1(corpus, config, True, log)
        joint = JointBitext(f_data.source, f_data.target, r_data.source, r_data.target)

        prior = options.table_prior or None
        how = " and ".join(x for x in ("by agreement" if options.agreement else "",
                                       f"tables by EM, Dirichlet({prior:g})" if prior else "") if x)
        if options.ibm1_epochs and prior:  # EM from uniform tables, each direction's own posterior
            result = fit_agreement(f_lex, r_lex, joint, num_epochs=options.ibm1_epochs, batch_size=IBM1_BATCH_SIZE,
                                   lr=options.ibm1_lr, seed=config.seed, agreement=False, table_prior=prior,
                                   progress=True,
                                   log=lambda line: log(f"{self.name} {model}, IBM Model 1 by EM: {line}"))
            log(f"{self.name} {model}, IBM Model 1 both directions, tables by EM, Dirichlet({prior:g}): "
                f"{len(joint.source)} pairs, {result.steps} steps in {result.seconds:.0f} s; mean NLL per token by "
                f"epoch {_by_epoch(result, options.ibm1_epochs)}")
        elif options.ibm1_epochs:  # apart: agreement from uniform tables starves every word's row against NULL's
            f_lex, r_lex = (_fit_lexical(lex, data, options.ibm1_epochs, IBM1_BATCH_SIZE, options.ibm1_lr, config.seed,
                                         log, f"{self.name} {model}{suffix}, IBM Model 1").network
                            for lex, data, suffix in ((f_lex, f_data, ""), (r_lex, r_data, " reverse")))
        forward = self.build(f_lex, len(f_src), len(f_tgt), config)
        reverse = self.build(r_lex, len(r_src), len(r_tgt), config)
        result = fit_agreement(forward, reverse, joint, num_epochs=config.epochs, batch_size=config.batch_size,
                               lr=config.lr, param_lr={"lexical.": options.table_lr}, seed=config.seed,
                               agreement=options.agreement, table_prior=prior, progress=True,
                               log=lambda line: log(f"{self.name} {model} {how or 'both directions'}: {line}"))
        log(f"{self.name} {model} both directions {how}: {len(joint.source)} pairs, vocabularies {len(f_src)} / "
            f"{len(f_tgt)}, {result.steps} steps in {result.seconds:.0f} s; mean NLL per token (both directions) by "
            f"epoch {_by_epoch(result, config.epochs)}")
        seconds = (time.perf_counter() - start) / 2
        out = []
        for network, src_vocab, tgt_vocab, label in ((forward, f_src, f_tgt, f"{self.name} {model}"),
                                                     (reverse, r_src, r_tgt, f"{self.name} {model} reverse")):
            _log_learned(network, config, label, log)
            out.append(Trained(make_pair("marginal", network), src_vocab, tgt_vocab, seconds, null,
                               getattr(network, "decoder_expert", None) is not None))
        return out[0], out[1]


def _log_learned(network: Any, config: AlignConfig, label: str, log: Callable[[str], None]) -> None:
    """Log a staged network's learned diagonal tension and jump scores."""
    learned = [f"diagonal tension {network.diagonal.tension:.3f} (from {config.options.tension:g})"
               if network.diagonal is not None else ""]
    if network.transition is not None:  # both staged networks have .diagonal and .transition (None: off)
        theta = network.transition.theta.detach()
        learned.append("jump scores " + " ".join(f"{j:+d}:{x:.2f}" for j, x in
                                                  zip(range(-len(theta) // 2 + 1, len(theta) // 2 + 1),
                                                      theta.tolist(), strict=True)))
    log(f"{label}: " + "; ".join(x for x in learned if x))


def _distortion(lexical: Any, source_vocab: int, target_vocab: int, config: AlignConfig) -> Any:
    from pyro_attention.networks.distortion import DistortionNetwork

    options = config.options
    return DistortionNetwork(source_vocab, target_vocab, lexical=lexical, tension=options.tension or None,
                             max_jump=options.max_jump or None, embedding_size=options.embedding,
                             encoder_size=options.encoder, decoder_size=options.decoder,
                             attention_size=options.attention)


def _hmm(lexical: Any, source_vocab: int, target_vocab: int, config: AlignConfig) -> Any:
    from pyro_attention.networks.lexical import DecoderExpert, HMMNetwork

    options = config.options
    expert = (DecoderExpert(target_vocab, options.embedding, options.decoder_expert) if options.decoder_expert
              else None)
    return HMMNetwork(source_vocab, target_vocab, lexical=lexical, tension=options.tension or None,
                      max_jump=options.max_jump or HMM_MAX_JUMP, null_prob=options.null_prob or None,
                      decoder_expert=expert)


#: the HMM network's largest jump where ``--max-jump`` is 0
HMM_MAX_JUMP = 5


def _ibm1(source_vocab: int, target_vocab: int, config: AlignConfig, data: Bitext) -> Any:
    from pyro_attention.networks.lexical import IBM1Network

    options = config.options  # a free table (IBM Model 1 exactly), stored at the co-occurring word pairs
    return IBM1Network(source_vocab, target_vocab, null_prob=options.null_prob or None,
                       table=data.table(source_vocab, target_vocab, options.min_cooccurrence))


def _ibm1_rank(source_vocab: int, target_vocab: int, config: AlignConfig, data: Bitext) -> Any:
    from pyro_attention.networks.lexical import IBM1Network

    return IBM1Network(source_vocab, target_vocab, embedding_size=config.options.embedding)


#: ``--network`` values
ALIGN_NETWORKS: dict[str, AlignNetwork] = {
    n.name: n for n in (
        Seq2SeqAligner("seq2seq", "Seq2Seq, the paper's tanh output layer", "tanh"),
        Seq2SeqAligner("product", "Seq2Seq, product-of-experts output (decoder expert u_t + source expert v_s)",
                       "product"),
        Seq2SeqAligner("transformer", "TransformerSeq2Seq, its alignment one dedicated attention head, product-of-"
                       "experts output (--embedding its width, --layers, --heads, --feedforward, --embedding-values; "
                       "its top layer's cross-attention averaged over heads is scored too)", "product",
                       network="transformer",
                       options=families.TransformerSizes),
        LexicalAligner("ibm1", "IBM Model 1: uniform prior, lexical expert with a free (full-rank) table (a NULL word "
                       "with --null-prob)", _ibm1, null_word=True, options=families.IBM1Options),
        LexicalAligner("ibm1-rank", "IBM Model 1 with a rank-E lexical table: uniform prior, lexical expert on the "
                       "source word's E-dimensional embedding (--embedding E)", _ibm1_rank,
                       options=families.RankOptions),
        StagedAligner("distortion", "IBM Model 1 (--ibm1-epochs), then Seq2Seq's learned prior (a neural "
                      "distortion model: --embedding, --encoder, --decoder, --attention; --tension, --max-jump) on "
                      "its lexical table (at --table-lr)", _distortion, options=families.DistortionOptions),
        StagedAligner("hmm", "IBM Model 1 (--ibm1-epochs), then an HMM prior on its lexical table (at --table-lr): "
                      f"fast_align's diagonal (--tension) and jumps over the previous word's filtered posterior "
                      f"(--max-jump, 0: {HMM_MAX_JUMP}), no LSTM; a NULL word with --null-prob; a decoder's "
                      "expert with --decoder-expert; both directions together by agreement with --agreement", _hmm,
                      null_word=True, agreement=True, options=families.HMMOptions),
    )
}
