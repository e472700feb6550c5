"""Deterministic task networks (no sample statements)."""

from pyro_attention.networks.base import (
    AttentionNetwork,
    Encoded,
    ExpertLogits,
    HeadNetwork,
    expected_context,
    gather_context,
    mask_scores,
)
from pyro_attention.networks.region_qa import RegionQA
from pyro_attention.networks.seq2seq import Seq2Seq

__all__ = [
    "AttentionNetwork", "Encoded", "ExpertLogits", "HeadNetwork", "RegionQA", "Seq2Seq", "expected_context",
    "gather_context", "mask_scores",
]
