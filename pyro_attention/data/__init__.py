"""Batches, readers and synthetic generators."""

from pyro_attention.data.region_qa import RegionBatch, RegionQADataset, make_region_qa

__all__ = ["RegionBatch", "RegionQADataset", "make_region_qa"]
