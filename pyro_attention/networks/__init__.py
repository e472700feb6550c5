"""Deterministic task networks (no sample statements), and the parts a network is assembled from: attention scores,
output layers, and the decoder's input feed and bridge (given to a network as classes:
``Seq2Seq(V_src, V_tgt, attention=GeneralScore, output=ProductOfExperts)``): an LSTM and a Transformer
encoder-decoder for translation, a region-QA network."""

from pyro_attention.networks.attention import (
    AttentionScore,
    DotProductScore,
    DotScore,
    GeneralScore,
    MLPScore,
    ScaledDotScore,
)
from pyro_attention.networks.base import (
    AttentionNetwork,
    Encoded,
    ExpertLogits,
    HeadNetwork,
    expected_context,
    gather_context,
    mask_scores,
)
from pyro_attention.networks.output import ConcatTanhOutput, OutputLayer, ProductOfExperts, TanhOutput
from pyro_attention.networks.recurrence import AttentionalFeed, Bridge, ContextFeed, FinalBridge, InputFeed, MeanBridge
from pyro_attention.networks.region_qa import RegionQA
from pyro_attention.networks.seq2seq import Seq2Seq, TranslationNetwork
from pyro_attention.networks.transformer import TransformerSeq2Seq

__all__ = [
    "AttentionNetwork", "Encoded", "ExpertLogits", "HeadNetwork", "RegionQA", "Seq2Seq", "TransformerSeq2Seq",
    "TranslationNetwork", "expected_context",
    "gather_context", "mask_scores",
    "AttentionScore", "DotProductScore", "DotScore", "GeneralScore", "MLPScore", "ScaledDotScore",
    "ConcatTanhOutput", "OutputLayer", "ProductOfExperts", "TanhOutput",
    "AttentionalFeed", "Bridge", "ContextFeed", "FinalBridge", "InputFeed", "MeanBridge",
]
