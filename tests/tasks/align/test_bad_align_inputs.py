"""Bad input to the aligner (``AlignConfig`` and its networks): this layer's entries of the bad-input catalogue, each a
mistake committed once that must get a clear error (:func:`tests.support.mistakes.check_mistake`;
docs/troubleshooting.md lists every layer's)."""

from __future__ import annotations

import torch

from pyro_attention.data.translation import collate
from pyro_attention.networks.lexical import IBM1Network
from pyro_attention.networks.tables import SparseTable
from pyro_attention.tasks.align import AlignConfig, HMMOptions
from tests.support import mistakes as m

CATALOGUE: list[m.Mistake] = [
    m.Mistake(
        "null-word-missing", m.GOLD, "a batch for a network with a NULL word (`null_prob`) whose source sentences lack "
        "it at position 0",
        lambda: m.null_hmm().encode(collate([([4, 5], [6])])),
        ValueError, r"HMMNetwork\(null_prob=\.\.\.\): source position 0 must be the NULL word <s> \(id 1\) in every "
        r"row; row 0 holds id 4 \(prepend it with pyro_attention\.networks\.lexical\.with_null_word\)",
        "Put the NULL word in front of every source sentence (`with_null_word(ids)`); `pyro-attention align "
        "--null-prob` does it for you.",
    ),
    m.Mistake(
        "null-prob-network", m.GOLD, "`pyro-attention align --null-prob` with a network that has no NULL word",
        lambda: AlignConfig.from_flags(network="distortion", models=["marginal"], null_prob=0.2),
        ValueError, r"null_prob: network 'distortion' does not use it \(it would be ignored\); ibm1, hmm do",
        "Use `--network ibm1` or `--network hmm`, or leave `--null-prob` out.",
    ),
    m.Mistake(
        "decoder-expert-network", m.GOLD, "`pyro-attention align --decoder-expert` with a network that takes none",
        lambda: AlignConfig.from_flags(network="ibm1", models=["marginal"], decoder_expert=64),
        ValueError, r"decoder_expert: network 'ibm1' does not use it \(it would be ignored\); hmm do",
        "Use `--network hmm`, or leave `--decoder-expert` out (`--network product` has its own decoder's expert).",
    ),
    m.Mistake(
        "decoder-expert-classes", m.GOLD, "a DecoderExpert for another target vocabulary than its HMMNetwork's",
        lambda: m.decoder_expert_hmm(),
        ValueError, r"HMMNetwork: decoder_expert has 7 classes, the network 8",
        "Build the DecoderExpert with the network's target vocabulary size.",
    ),
    m.Mistake(
        "sparse-table-unsorted", m.TENSORS, "a SparseTable with keys out of order",
        lambda: SparseTable(6, 6, torch.tensor([9, 7])),
        ValueError, r"SparseTable: keys must be sorted and distinct",
        "Build the keys with `pyro_attention.networks.tables.cooccurrences` (sorted, distinct).",
    ),
    m.Mistake(
        "sparse-table-rank", m.CONFIG, "IBM1Network with a sparse table and a low rank (`embedding_size`)",
        lambda: IBM1Network(6, 6, embedding_size=4, table=SparseTable(6, 6, torch.tensor([7]))),
        ValueError, r"IBM1Network: a sparse table is a free table; embedding_size must be 0, got 4",
        "Leave `embedding_size` at 0 with a sparse table (a rank-E table is a neural one, dense by nature).",
    ),
    m.Mistake(
        "unknown-align-corpus", m.NAMES, "an unknown gold corpus for `align`",
        lambda: AlignConfig(corpus="deen"),
        ValueError, r"corpus must be one of \('enfr', 'csen'\), got 'deen'",
        "Use one of the listed corpora.",
    ),
    m.Mistake(
        "align-table-prior-decoder-expert", m.CONFIG, "`--table-prior` with `--decoder-expert` (no closed-form M-step "
        "for a product of experts)",
        lambda: AlignConfig(network="hmm", models=["marginal"], both_directions=True,
                            options=HMMOptions(table_prior=0.01, decoder_expert=8)),
        ValueError, r"table_prior: the closed-form M-step sets a table alone; with --decoder-expert 8 the emission "
        r"is a product",
        "Use one of the two: `--table-prior` (tables by EM) or `--decoder-expert` (trained by gradient).",
    ),
    m.Mistake(
        "align-gibbs-one-sweep", m.CONFIG, "`--gibbs-sweeps 1` (its one sweep is the burn-in: nothing to average)",
        lambda: AlignConfig(network="hmm", models=["marginal"], options=HMMOptions(gibbs_sweeps=1)),
        ValueError, r"gibbs_sweeps: --gibbs-sweeps 1 leaves no sweep after the burn-in; use 0 \(none\) or >= 2",
        "Use 0 (the exact posterior alone) or at least 2 sweeps.",
    ),
    m.Mistake(
        "align-gibbs-decoder-expert", m.CONFIG, "`--gibbs-sweeps` with `--decoder-expert` (the sampler integrates "
        "out a table alone)",
        lambda: AlignConfig(network="hmm", models=["marginal"], options=HMMOptions(gibbs_sweeps=6, decoder_expert=8)),
        ValueError, r"gibbs_sweeps: the sampler integrates out a lexical table alone; with --decoder-expert 8",
        "Use one of the two.",
    ),
    m.Mistake(
        "links-format-without-gold-links", m.CONFIG, "`--links-format` (or `--links-order`) without `--gold-links` "
        "(ignored: the corpus's links have their own format)",
        lambda: AlignConfig(links_format="naacl"),
        ValueError, r"links_format: says how --gold-links is written; give --gold-links too",
        "Give `--gold-links` with it, or drop it.",
    ),
    m.Mistake(
        "option-the-network-does-not-use", m.CONFIG, "an option the chosen `--network` does not read (`--tension` "
        "for a Seq2Seq aligner: it was ignored)",
        lambda: AlignConfig.from_flags(network="seq2seq", tension=2.0),
        ValueError, r"tension: network 'seq2seq' does not use it \(it would be ignored\); distortion, hmm do",
        "Drop the option, or choose a network that reads it.",
    ),
    m.Mistake(
        "extra-size-with-own-gold-set", m.CONFIG, "`--extra-size N` with a gold set of your own (it counts the "
        "corpus's Multi30k text, which such a run does not read: it was ignored)",
        lambda: AlignConfig(gold_text="pairs.txt", gold_links="links.txt", extra_size=100),
        ValueError, r"extra_size: 100 sentence pairs of the corpus's Multi30k text; a gold set of your own trains on "
                    r"all of --extra-src / --extra-tgt",
        "Drop `--extra-size`; cut the `--extra-src` / `--extra-tgt` files to the size you want.",
    ),
]  # fmt: skip


test_mistake_gets_a_clear_error = m.mistake_test(CATALOGUE)
