"""The options of ``pyro-attention align`` (:class:`AlignConfig`) and what they may be."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from pyro_attention.tasks.common import OptimConfig, check_bounds, option, with_default
from pyro_attention.tasks.translation.options import check_transformer_width

if TYPE_CHECKING:
    from pyro_attention.tasks.align.gibbs import CollapsedGibbs

CORPORA = ("enfr", "csen")
#: ``--links-format`` values: Pharaoh ``i-j`` / ``ipj`` 0- or 1-indexed, NAACL ``SNUM i j [S|P]``
LINK_FORMATS = ("pharaoh0", "pharaoh1", "naacl")
#: ``--links-order``: which side a link's first number counts on
LINK_ORDERS = ("source-target", "target-source")

#: ``extra_size``'s default: Multi30k training pairs added to a corpus's gold set as unlabelled text
EXTRA_SIZE = 5000

#: thresholds tried for ``posterior-threshold`` links
THRESHOLD_GRID = tuple(round(0.05 * k, 2) for k in range(1, 20))


@dataclass
class AlignConfig(OptimConfig):
    """Options of an AER run (CPU-sized defaults); the optimisation settings are :class:`OptimConfig`'s."""

    epochs: int = with_default(OptimConfig, "epochs", 5)
    batch_size: int = with_default(OptimConfig, "batch_size", 32, help="sentences per batch")
    corpus: str = "enfr"
    data_dir: str | None = None
    extra_size: int = option(EXTRA_SIZE, "extra Multi30k training pairs (the corpus's gold sets only)", low=0)
    max_len: int = option(60, "drop training pairs with a longer side", low=1)
    gold_repeat: int = option(1, "the gold sentence pairs appear this many times in the training text (weights the "
                              "gold set's own domain against the extra text; unlabelled: no link is read)", low=1)
    source_prefix: int = option(0, "keep the first N characters of every word on the corpus's source side (cs for "
                                "csen, en for enfr) before training and scoring: eflomal's --source-prefix, a crude "
                                "stemmer for an inflected language (0: whole words)", low=0)
    target_prefix: int = option(0, "the same on the corpus's target side (eflomal's --target-prefix; 0: whole words)",
                                low=0)
    both_directions: bool = False
    threads: int = option(1, "torch threads", low=1)
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
    #: what that family reads (its :class:`NetworkOptions` class; ``None``: its defaults)
    options: NetworkOptions | None = None
    #: thresholds tried for ``posterior-threshold`` links (chosen on the other half of the gold pairs)
    thresholds: tuple[float, ...] = field(default_factory=lambda: THRESHOLD_GRID)

    def __post_init__(self) -> None:
        self.check_optimisation()
        if self.corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {CORPORA}, got {self.corpus!r}")
        if self.links_format not in LINK_FORMATS:
            raise ValueError(f"links_format must be one of {', '.join(LINK_FORMATS)}, got {self.links_format!r}")
        if self.links_order not in LINK_ORDERS:
            raise ValueError(f"links_order must be one of {', '.join(LINK_ORDERS)}, got {self.links_order!r}")
        if self.gold_links is None:
            for name, default in (("links_format", "pharaoh1"), ("links_order", "source-target")):
                if getattr(self, name) != default:
                    raise ValueError(f"{name}: says how --gold-links is written; give --gold-links too (the corpus's "
                                     "own gold links have their own format)")
        own = (self.gold_text, self.gold_src, self.gold_tgt, self.gold_links)
        if any(x is not None for x in own):
            if self.gold_links is None:
                raise ValueError("gold_links: a user's gold set needs the links file (--gold-links)")
            if (self.gold_text is None) == (self.gold_src is None and self.gold_tgt is None):
                raise ValueError("gold_text / gold_src + gold_tgt: give the sentence pairs either as one 'source ||| "
                                 "target' file (--gold-text) or as two parallel files (--gold-src and --gold-tgt)")
            if self.gold_text is None and (self.gold_src is None or self.gold_tgt is None):
                raise ValueError("gold_src / gold_tgt: two parallel files need both --gold-src and --gold-tgt")
        if (self.gold_links is not None or self.extra_src is not None) and self.extra_size not in (0, EXTRA_SIZE):
            raise ValueError(f"extra_size: {self.extra_size} sentence pairs of the corpus's Multi30k text; a gold set "
                             "of your own trains on all of --extra-src / --extra-tgt (cut the files instead)")
        if (self.extra_src is None) != (self.extra_tgt is None):
            raise ValueError("extra_src / extra_tgt: extra training text needs both --extra-src and --extra-tgt")
        from pyro_attention.registry import ALL_PAIRS
        from pyro_attention.tasks.align.networks import ALIGN_NETWORKS

        unknown = [m for m in self.models if m not in ALL_PAIRS]
        if unknown:
            raise ValueError(f"models: unknown {unknown}; choose from {list(ALL_PAIRS)}")
        if self.network not in ALIGN_NETWORKS:
            raise ValueError(f"network must be one of {', '.join(ALIGN_NETWORKS)}, got {self.network!r}")
        ALIGN_NETWORKS[self.network].check(self.models)
        family = ALIGN_NETWORKS[self.network].options
        if self.options is None:
            self.options = family()
        elif type(self.options) is not family:
            raise ValueError(f"options: network {self.network!r} reads {family.__name__}, got "
                             f"{type(self.options).__name__}")
        check_bounds(self.options, f"{type(self).__name__}: ")
        self.options.check(self)
        if not self.thresholds or not all(0.0 < t <= 1.0 for t in self.thresholds):
            raise ValueError(f"thresholds: need at least one, each in (0, 1], got {self.thresholds}")

    @classmethod
    def from_flags(cls, **values: Any) -> AlignConfig:
        """The config of flat ``values`` (the command line's flags, by field name): the chosen network's options go
        into its :class:`NetworkOptions`; one it does not read, set to other than its default, is a ``ValueError``
        naming the networks that read it (it would be ignored)."""
        from pyro_attention.tasks.align.networks import ALIGN_NETWORKS

        network = values.get("network", "seq2seq")
        if network not in ALIGN_NETWORKS:
            raise ValueError(f"network must be one of {', '.join(ALIGN_NETWORKS)}, got {network!r}")
        family = ALIGN_NETWORKS[network].options
        reads = {f.name for f in fields(family)}
        defaults = network_option_defaults()
        own = {k: v for k, v in values.items() if k in defaults}
        for name, value in own.items():
            if name not in reads and value != defaults[name]:
                readers = [n for n, net in ALIGN_NETWORKS.items() if name in {f.name for f in fields(net.options)}]
                raise ValueError(f"{name}: network {network!r} does not use it (it would be ignored); "
                                 f"{', '.join(readers)} do (--network)")
        rest = {k: v for k, v in values.items() if k not in defaults}
        return cls(**rest, options=family(**{k: v for k, v in own.items() if k in reads}))


@dataclass
class NetworkOptions:
    """The options one network family of ``pyro-attention align`` reads (:attr:`AlignNetwork.options
    <pyro_attention.tasks.align.networks.AlignNetwork.options>`): an option exists only where it means something."""

    def check(self, config: AlignConfig) -> None:
        """A ``ValueError`` for a combination with the rest of ``config`` that cannot work (none by default)."""

    def trains_jointly(self) -> bool:
        """Whether both directions are trained in one loop (:meth:`AlignNetwork.train_jointly`)."""
        return False

    def link_sampler(self, seed: int) -> CollapsedGibbs | None:
        """The sampler that joins the exact posterior when linking a text
        (:func:`~pyro_attention.tasks.align.links.text_links`; none by default)."""
        return None

    def settings(self) -> dict[str, Any]:
        """The options by name (for the rows' model names and notes)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


SIZES_HELP = "(networks seq2seq, product, distortion)"


@dataclass
class Seq2SeqSizes(NetworkOptions):
    """Networks ``seq2seq`` and ``product``: the Seq2Seq's sizes."""

    embedding: int = option(64, "embedding size (seq2seq, product, distortion; transformer: its width; ibm1-rank: the "
                            "table's rank; hmm: the decoder's expert's embeddings)", low=1)
    encoder: int = option(64, f"BiLSTM size per direction {SIZES_HELP}", low=1)
    decoder: int = option(128, f"decoder LSTM size {SIZES_HELP}", low=1)
    attention: int = option(64, f"MLP attention size {SIZES_HELP}; transformer: its alignment head's size", low=1)


@dataclass
class TransformerSizes(NetworkOptions):
    """Network ``transformer``: the TransformerSeq2Seq's sizes (its width is ``embedding``)."""

    embedding: int = with_default(Seq2SeqSizes, "embedding", 64)
    attention: int = with_default(Seq2SeqSizes, "attention", 64)
    layers: int = option(2, "network transformer: encoder layers, and decoder layers", low=1)
    heads: int = option(4, "network transformer: heads of its soft multi-head attention", low=1)
    feedforward: int = option(256, "network transformer: feed-forward size of every layer", low=1)
    embedding_values: bool = option(False, "network transformer: the source expert reads the aligned word's "
                                    "embedding instead of the encoder's output (docs/transformer.md: variational "
                                    "attention learned to align only so)")

    def check(self, config: AlignConfig) -> None:
        check_transformer_width(self.embedding, self.heads)


@dataclass
class IBM1Options(NetworkOptions):
    """Network ``ibm1``: IBM Model 1's free table, with a NULL word where ``null_prob`` > 0."""

    null_prob: float = option(0.0, "networks ibm1 and hmm: a NULL word at source position 0 with prior probability "
                              "null_prob at every target word (Och & Ney's p0; a word aligned to it gets no link; 0: "
                              "no NULL word)", interval=(0.0, 1.0, False, True))
    min_cooccurrence: int = option(1, "networks ibm1, distortion and hmm: the free lexical table stores the word pairs "
                                   "that co-occur in at least this many sentence pairs (1: every pair an aligner "
                                   "can read, the same model as a dense table; more: a smaller table for a huge "
                                   "corpus, a pruned pair reads its row's shared value)", low=1)


@dataclass
class RankOptions(NetworkOptions):
    """Network ``ibm1-rank``: IBM Model 1 with a rank-``embedding`` table."""

    embedding: int = option(64, "the lexical table's rank", low=1)


@dataclass
class StagedOptions(NetworkOptions):
    """What the staged networks (``distortion``, ``hmm``) share: the IBM Model 1 stage and the prior's diagonal and
    jumps."""

    ibm1_epochs: int = option(5, "networks distortion and hmm: IBM Model 1 epochs that train the lexical table first "
                              "(0: a uniform table)", low=0)
    ibm1_lr: float = option(0.1, "networks distortion and hmm: the Adam learning rate of that IBM Model 1 stage (on "
                            "the table's logits, batches of 512 sentences)", interval=(0.0, 1.0, True, False))
    tension: float = option(4.0, "networks distortion and hmm: the start of the prior's learned diagonal tension "
                            "(fast_align's -lambda |i/m - j/n|; 0: no diagonal term)",
                            interval=(0.0, float("inf"), False, True))
    max_jump: int = option(0, "networks distortion and hmm: an HMM transition over the previous word's filtered "
                           "posterior in the prior, jumps clipped to +-max_jump (0: none for distortion, 5 for hmm)",
                           low=0)
    table_lr: float = option(1e-2, "networks distortion and hmm: the lexical table's learning rate while the prior "
                             "trains", interval=(0.0, 1.0, True, False))
    min_cooccurrence: int = with_default(IBM1Options, "min_cooccurrence", 1)


@dataclass
class DistortionOptions(StagedOptions, Seq2SeqSizes):
    """Network ``distortion``: IBM Model 1, then a Seq2Seq's prior of these sizes on its table."""


@dataclass
class HMMOptions(StagedOptions):
    """Network ``hmm``: IBM Model 1, then an HMM prior on its table; a NULL word, a decoder's expert, and both
    directions trained together by agreement or with Dirichlet tables."""

    null_prob: float = with_default(IBM1Options, "null_prob", 0.0)
    decoder_expert: int = option(0, "network hmm: a decoder's expert, a target-side LSTM of this many units over "
                                 "y_<t whose logits u_t join the lexical table in a product, p(y_t | x_s, y_<t) ∝ "
                                 "t(y_t | x_s) exp(u_t[y_t]), from u = 0 (embeddings: --embedding; 0: none)", low=0)
    embedding: int = with_default(Seq2SeqSizes, "embedding", 64)
    table_prior: float = option(0.0, "network hmm, with --both-directions: the lexical tables by EM instead of by "
                                "gradient, each epoch set to their posterior mean under a symmetric Dirichlet(ALPHA) "
                                "prior given the exact expected counts (add-ALPHA smoothing; IBM Model 1 by EM too): a "
                                "rare word then collects fewer stray links (0: by gradient)",
                                interval=(0.0, float("inf"), False, True))
    #: train both directions together by agreement (Liang et al. 2006; needs ``both_directions``):
    #: :mod:`pyro_attention.tasks.align.agreement`
    agreement: bool = False
    gibbs_sweeps: int = option(0, "network hmm, linking --src/--tgt: also sample each direction's links by "
                               "collapsed Gibbs sampling, the lexical tables integrated out under a Dirichlet"
                               "(--gibbs-alpha) prior and the trained chain kept, this many sweeps (the first third "
                               "discarded); a link's probability is then the mean of the exact and the sampled "
                               "posteriors (0: the exact posterior alone)", low=0)
    gibbs_alpha: float = option(1e-4, "network hmm: the Dirichlet prior of the tables --gibbs-sweeps integrates out",
                                interval=(0.0, float("inf"), False, True))

    def check(self, config: AlignConfig) -> None:
        for name, value, flag in (("agreement", self.agreement, "--agreement"),
                                  ("table_prior", self.table_prior, f"--table-prior {self.table_prior:g}")):
            if value and not config.both_directions:
                raise ValueError(f"{name}: {flag} trains both directions together; add --both-directions")
        if self.gibbs_sweeps == 1:
            raise ValueError("gibbs_sweeps: --gibbs-sweeps 1 leaves no sweep after the burn-in; use 0 (none) or >= 2")
        if self.gibbs_sweeps and self.decoder_expert:
            raise ValueError(f"gibbs_sweeps: the sampler integrates out a lexical table alone; with --decoder-expert "
                             f"{self.decoder_expert} the emission is a product with the decoder's expert (use one of "
                             "--gibbs-sweeps and --decoder-expert)")
        if self.table_prior and self.decoder_expert:
            raise ValueError(f"table_prior: the closed-form M-step sets a table alone; with --decoder-expert "
                             f"{self.decoder_expert} the emission is a product with the decoder's expert (use one of "
                             "--table-prior and --decoder-expert)")

    def trains_jointly(self) -> bool:
        return bool(self.agreement or self.table_prior)

    def link_sampler(self, seed: int) -> CollapsedGibbs | None:
        from pyro_attention.tasks.align.gibbs import CollapsedGibbs

        return CollapsedGibbs(self.gibbs_sweeps, self.gibbs_alpha, seed) if self.gibbs_sweeps else None


#: every family's options class
OPTION_CLASSES = (Seq2SeqSizes, TransformerSizes, IBM1Options, RankOptions, StagedOptions, DistortionOptions,
                  HMMOptions)


def network_option_defaults() -> dict[str, Any]:
    """Every network option's name and default (the same in every family that has it)."""
    out: dict[str, Any] = {}
    for cls in OPTION_CLASSES:
        for f in fields(cls):
            out.setdefault(f.name, f.default)
    return out
