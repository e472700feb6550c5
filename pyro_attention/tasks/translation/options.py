"""The data and model options of a translation run (:class:`CorpusOptions`, :class:`ModelOptions`: the flags of
``pyro-attention train``'s ``data`` and ``model`` groups); ``TranslationConfig`` joins them with the optimisation
options and checks them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pyro_attention.networks.attention import ATTENTION_SCORES
from pyro_attention.networks.output import OUTPUT_LAYERS
from pyro_attention.networks.recurrence import BRIDGES, INPUT_FEEDS
from pyro_attention.registry import ALL_PAIRS, PAIR_ESTIMATORS
from pyro_attention.tasks.common import option

DATA_KINDS = ("synthetic", "multi30k", "iwslt14", "parallel")
#: ``network`` names -> the options only that network reads (each must keep its default under the other)
NETWORK_OPTIONS = {"lstm": ("encoder", "decoder", "input_feed", "bridge"),
                   "transformer": ("heads", "feedforward", "embedding_values")}


def check_transformer_width(embedding: int, heads: int) -> None:
    """A ``ValueError`` unless the Transformer's width ``embedding`` is even and a multiple of ``heads`` (the
    translation config's check and the aligner's, before any data is read)."""
    if embedding % 2 or embedding % heads:
        raise ValueError(f"embedding: the transformer's width must be even and a multiple of heads, got embedding "
                         f"{embedding} and heads {heads}")


@dataclass
class CorpusOptions:
    """The data options of :class:`TranslationConfig` (the flags of ``pyro-attention train``'s ``data`` group)."""

    data: str = option("synthetic", "corpus (default synthetic: no files needed)", choices=DATA_KINDS)
    data_dir: str | None = option(None, "folder holding multi30k/ and iwslt14-de-en/ (default: $PYRO_ATTENTION_DATA)")
    src: str = option("de", "source language (Multi30k: de en fr cs; IWSLT14: de en; default {default})")
    tgt: str = option("en", "target language (default {default})")
    train_split: str | None = option(None, "Multi30k split to train on (default train); IWSLT14 has no train split: "
                                     "training on 'valid' happens only with --train-split valid")
    val_split: str | None = option(None, "Multi30k validation split (default val)")
    test_split: str | None = option(None, "Multi30k test split (default test_2016_flickr)")
    bpe: bool = option(False, "IWSLT14: the 14k joint BPE files")
    train_src: str | None = option(None, "--data parallel: train src file (plain/.gz)")
    train_tgt: str | None = option(None, "--data parallel: train tgt file (plain/.gz)")
    val_src: str | None = option(None, "--data parallel: val src file (plain/.gz)")
    val_tgt: str | None = option(None, "--data parallel: val tgt file (plain/.gz)")
    test_src: str | None = option(None, "--data parallel: test src file (plain/.gz)")
    test_tgt: str | None = option(None, "--data parallel: test tgt file (plain/.gz)")
    train_size: int | None = option(None, "first N training pairs (synthetic: generate N; default 2000 / all)", low=1)
    val_size: int | None = option(None, "first N validation pairs (synthetic default 200; IWSLT14: pairs held out "
                                  "from the end of valid, default 500)", low=1)
    test_size: int | None = option(None, "synthetic test pairs (default 200)", low=1)
    max_len: int = option(50, "drop training pairs with a longer side", low=1)
    min_freq: int = option(1, "vocabulary: minimum count in training", low=1)
    max_vocab: int | None = option(None, "vocabulary: at most N entries incl. 4 specials", low=5)
    data_seed: int = option(0, "synthetic data seed ({default}; splits: +0/+1/+2)", low=0)
    synthetic_vocab: int = option(24, "synthetic source words", low=4)
    synthetic_min_len: int = option(3, "synthetic shortest source", low=1)
    synthetic_max_len: int = option(8, "synthetic longest source", low=1)


@dataclass
class ModelOptions:
    """The model options of :class:`TranslationConfig` (the flags of ``pyro-attention train``'s ``model`` group)."""

    model: str = option("soft", "the pair (default {default})", choices=tuple(ALL_PAIRS))
    estimator: str | None = option(
        None,
        "; ".join(f"{k}: {'/'.join(v)}" for k, v in PAIR_ESTIMATORS.items()) + " (the first is the default)",
        flag={"choices": tuple(dict.fromkeys(e for v in PAIR_ESTIMATORS.values() for e in v))},
    )
    options: dict[str, Any] | None = option(
        None,
        "an option of the pair's constructor, e.g. --option kl_scale=0.01 (repeatable)",
        flag={"name": "--option", "dest": "options", "action": "append", "metavar": "KEY=VALUE"},
    )
    network: str = option("lstm", "the encoder-decoder: lstm (BiLSTM encoder, LSTM decoder; default) or transformer "
                          "(pre-LN Transformer, the alignment one dedicated attention head; its width is --embedding)",
                          choices=tuple(NETWORK_OPTIONS))
    embedding: int = option(64, "embedding size (transformer: the width of every layer)", low=1)
    encoder: int = option(64, "lstm: BiLSTM size per direction", low=1)
    decoder: int = option(128, "lstm: decoder LSTM size", low=1)
    attention: int = option(64, "the alignment score's size ({default}; --attention-type mlp and scaled)", low=1)
    layers: int = option(1, "encoder layers, and decoder layers", low=1)
    heads: int = option(4, "transformer: heads of the soft multi-head attention ({default})", low=1)
    feedforward: int = option(256, "transformer: feed-forward size of every layer ({default})", low=1)
    embedding_values: bool = option(False, "transformer: the contexts average (or pick) the source words' "
                                    "embeddings rather than the encoder's output")
    dropout: float = option(0.0, "dropout", interval=(0.0, 1.0, False, True))
    chunk_size: int = option(8, "source positions per chunk of the enumerated output layer ({default}; 0: all at "
                             "once)", low=0)
    keep_gib: float = option(1.0, "GiB of the enumerated output layer's log-probabilities kept for the backward "
                             "pass ({default}); the rest is recomputed there, a fourth product with the layer's "
                             "weights: more memory, fewer FLOPs", interval=(0.0, math.inf, False, True))
    output: str = option("tanh", "output layer: tanh (U tanh(W[h; c]), the paper's; default) or product (product of "
                         "experts exp(u_t + v_s): exact enumeration at about the cost of a soft step)",
                         choices=tuple(OUTPUT_LAYERS))
    attention_type: str | None = option(None, "the prior's score: mlp (Bahdanau, the paper's; lstm's default), general "
                                        "or dot (Luong; dot needs --decoder = 2 x --encoder), scaled (one head of "
                                        "scaled dot-product attention; transformer's default)",
                                        choices=tuple(ATTENTION_SCORES))
    input_feed: str = option("context", "what the decoder is fed with the previous word: context (the prior's soft "
                             "context; default) or attentional (Luong's attentional state tanh(W[h; c]), as "
                             "OpenNMT-py)", choices=tuple(INPUT_FEEDS))
    bridge: str = option("mean", "decoder initial state: mean (tanh(W mean_s x_s); default) or final (the encoder's "
                         "final states, as OpenNMT-py; needs --decoder = 2 x --encoder)", choices=tuple(BRIDGES))
    init: float = option(0.0, "0: torch's default initialisation (default); e.g. 0.1: every parameter uniform in "
                         "+-0.1 (OpenNMT-py)", interval=(0.0, 1.0, False, False),
                         note=" (0: torch's defaults; 0.1: OpenNMT-py's)")
