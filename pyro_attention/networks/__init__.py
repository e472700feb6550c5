"""Deterministic task networks (no sample statements)."""

from pyro_attention.networks.base import (
    AttentionNetwork,
    Encoded,
    expected_context,
    gather_context,
    mask_scores,
)
from pyro_attention.networks.region_qa import RegionQA

__all__ = ["AttentionNetwork", "Encoded", "RegionQA", "expected_context", "gather_context", "mask_scores"]
