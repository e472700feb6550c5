"""Batches, readers and synthetic generators."""

from pyro_attention.data.alignments import (
    DroppedLink,
    GoldAlignment,
    GoldAlignments,
    invert,
    read_bitext,
    read_naacl,
    read_pharaoh,
)
from pyro_attention.data.clevr import (
    ClevrDataset,
    ClevrFormatError,
    ClevrQuestion,
    ClevrSplits,
    Scene,
    clevr_splits,
    generate_questions,
    load_clevr,
    read_questions,
    read_scenes,
    region_features,
)
from pyro_attention.data.corpora import data_dir, iwslt14_paths, multi30k_paths
from pyro_attention.data.region_qa import RegionBatch, RegionQADataset, make_region_qa
from pyro_attention.data.subword import apply_subword, train_subword
from pyro_attention.data.synthetic_translation import (
    SyntheticTranslation,
    encode_synthetic,
    make_synthetic_translation,
    translate_synthetic,
)
from pyro_attention.data.text import (
    ParallelCorpus,
    Vocab,
    bucket_batches,
    bucket_indices,
    read_lines,
    read_parallel,
    undo_bpe,
    unescape_moses,
)

__all__ = [
    "RegionBatch", "RegionQADataset", "make_region_qa",
    "SyntheticTranslation", "encode_synthetic", "make_synthetic_translation", "translate_synthetic",
    "ParallelCorpus", "Vocab", "apply_subword", "bucket_batches", "bucket_indices", "data_dir", "iwslt14_paths",
    "multi30k_paths", "read_lines", "read_parallel", "train_subword", "undo_bpe", "unescape_moses",
    "ClevrDataset", "ClevrFormatError", "ClevrQuestion", "ClevrSplits", "Scene", "clevr_splits", "generate_questions",
    "load_clevr", "read_questions", "read_scenes", "region_features",
    "DroppedLink", "GoldAlignment", "GoldAlignments", "invert", "read_bitext", "read_naacl", "read_pharaoh",
]
