"""Word alignment with latent alignments (``pyro-attention align``): links for a text of your own, and the alignment
error rate against human gold alignments.

**A text of your own** (:func:`align_text`, ``align --src FILE --tgt FILE --out links.txt``): the best recipe known
(:data:`RECIPE`: an HMM aligner with a NULL word, both directions by agreement, lexical tables by EM under a
Dirichlet prior) trains on the text and writes Pharaoh links for every pair, where the mean of the two directions'
exact posteriors reaches :data:`LINK_THRESHOLD` (:mod:`~pyro_attention.tasks.align.links`).  The free lexical
tables are stored at the word pairs that co-occur in the text only
(:class:`~pyro_attention.networks.tables.SparseTable`), so memory grows with those pairs, not with the product of
the vocabularies.

**Against gold**: a translation model is trained (:func:`pyro_attention.tasks.translation.train`) on parallel text
that *includes the gold sentence pairs as unlabelled text* (plus, optionally, extra parallel text), then, on the gold
pairs, every
alignment source is turned into links -- the argmax source word of each target word -- and scored with AER,
precision and recall (Och & Ney 2003, :mod:`pyro_attention.aer`):

* ``prior``: ``p(z_t | x, y_<t)`` of a categorical pair (what it would attend to before seeing ``y_t``);
* ``posterior``: the exact ``p(z_t | x, y)`` by enumeration (Bayes' rule, sees ``y_t``);
* ``q``: the amortised inference network of :class:`~pyro_attention.models.VariationalAttention`;
* ``soft``: the attention weights of a :class:`~pyro_attention.models.SoftAttention` model;
* ``smoothed``: an HMM network's own posterior ``p(z_t | x, y)`` (forward-backward,
  :meth:`~pyro_attention.networks.lexical.HMMNetwork.smoothed_posterior`), where the pair's exact per-token
  posterior is the filtered ``p(z_t | x, y_<=t)``.

* ``posterior-threshold`` (and ``smoothed-threshold``): every source word whose exact posterior is at least a
  threshold (any number of links per target word, none included).  The threshold is chosen from
  :data:`THRESHOLD_GRID` by AER on one half of the gold pairs and applied to the *other* half (even-numbered pairs
  scored with the threshold tuned on the odd-numbered ones and vice versa), so no pair is scored with a threshold
  tuned on itself.

The network (``network``, :data:`ALIGN_NETWORKS`) is an object that trains itself: ``seq2seq`` (the paper's
``tanh`` output layer) and ``product`` (the product of experts) train :class:`~pyro_attention.networks.Seq2Seq`
with :func:`pyro_attention.tasks.translation.train`; ``ibm1`` (uniform prior, lexical expert on the source word's
embedding: IBM Model 1 with a neural lexical table, :class:`~pyro_attention.networks.lexical.IBM1Network`),
``distortion`` (IBM Model 1 first, then Seq2Seq's learned prior on its free lexical table,
:class:`~pyro_attention.networks.distortion.DistortionNetwork`) and ``hmm`` (IBM Model 1 first, then an HMM prior --
fast_align's diagonal and jumps over the previous word's filtered posterior -- on its table,
:class:`~pyro_attention.networks.lexical.HMMNetwork`; both :class:`StagedAligner`) train with
:func:`pyro_attention.inference.fit` -- the ``marginal`` pair's exact enumeration (``TraceEnum_ELBO``) either way.

With ``both_directions`` a second set of models is trained target -> source and each source's links are also
reported for the reverse direction and for every symmetrisation of the two (intersection, union, grow-diag,
grow-diag-final, grow-diag-final-and: :data:`pyro_attention.aer.SYMMETRIZATIONS`).

With ``agreement`` (network ``hmm``, both directions) the two directions are trained *together* after each one's
IBM Model 1 stage: Liang, Taskar & Klein's (2006) alignment by agreement, each direction's lexical table learning
from the product of both directions' exact (forward-backward) posteriors
(:mod:`~pyro_attention.tasks.align.agreement`).

Corpora (from ``--data-dir`` / ``$PYRO_ATTENTION_DATA``): ``enfr`` -- English-French Hansards (NAACL 2003; 447
pairs, 1-indexed Pharaoh with possible links), extra text Multi30k en-fr train; ``csen`` -- Czech-English WSJ
(515 pairs, NAACL format, English column first), extra text Multi30k cs-en train.  Tokens are lower-cased
(Multi30k is lower-cased).

The package: :mod:`~pyro_attention.tasks.align.config` (:class:`AlignConfig`), :mod:`~pyro_attention.tasks.align.corpus`
(gold sets), :mod:`~pyro_attention.tasks.align.networks` (:data:`ALIGN_NETWORKS`, how each trains),
:mod:`~pyro_attention.tasks.align.agreement` (both directions together),
:mod:`~pyro_attention.tasks.align.scoring` (links, AER rows, :func:`run_align`, tables and JSON) and
:mod:`~pyro_attention.tasks.align.links` (a text of your own).
"""

from __future__ import annotations

from pyro_attention.aer import merge_json
from pyro_attention.tasks.align.config import (
    CORPORA,
    LINK_FORMATS,
    LINK_ORDERS,
    THRESHOLD_GRID,
    AlignConfig,
    DistortionOptions,
    HMMOptions,
    IBM1Options,
    NetworkOptions,
    RankOptions,
    Seq2SeqSizes,
    StagedOptions,
    TransformerSizes,
)
from pyro_attention.tasks.align.corpus import GoldCorpus, load_gold_corpus, load_user_gold
from pyro_attention.tasks.align.links import (
    LINK_THRESHOLD,
    RECIPE,
    TextLinks,
    align_text,
    recipe_config,
    text_links,
    write_links,
)
from pyro_attention.tasks.align.networks import (
    ALIGN_NETWORKS,
    AlignNetwork,
    LexicalAligner,
    Seq2SeqAligner,
    StagedAligner,
    Trained,
)
from pyro_attention.tasks.align.scoring import (
    JSON_SYMMETRISATIONS,
    AlignRow,
    alignment_links,
    alignment_probs,
    argmax_links,
    format_rows,
    json_rows,
    pyro_latent,
    run_align,
    threshold_links,
)

__all__ = [
    "ALIGN_NETWORKS", "CORPORA", "JSON_SYMMETRISATIONS", "LINK_FORMATS", "LINK_ORDERS", "LINK_THRESHOLD", "RECIPE",
    "THRESHOLD_GRID", "TextLinks", "align_text", "recipe_config", "text_links", "write_links",
    "AlignConfig", "DistortionOptions", "HMMOptions", "IBM1Options", "NetworkOptions", "RankOptions", "Seq2SeqSizes",
    "TransformerSizes",
    "StagedOptions", "AlignNetwork", "AlignRow", "GoldCorpus", "LexicalAligner", "Seq2SeqAligner", "StagedAligner",
    "Trained",
    "alignment_links", "alignment_probs", "argmax_links", "format_rows", "json_rows", "load_gold_corpus",
    "load_user_gold", "merge_json", "pyro_latent", "run_align", "threshold_links",
]
