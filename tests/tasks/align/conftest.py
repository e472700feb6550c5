"""Fixtures of the aligner's tests."""

from __future__ import annotations

import pytest

from pyro_attention.tasks.align.links import recipe_config
from tests.tasks.align.test_links import WORDS, write_bitext


@pytest.fixture
def trained_recipe(tmp_path):
    """Both directions of the recipe trained briefly on a small text (forward, reverse, the text)."""
    from pyro_attention.data.text import read_parallel
    from pyro_attention.tasks.align.corpus import GoldCorpus
    from pyro_attention.tasks.align.networks import ALIGN_NETWORKS

    src, tgt = write_bitext(tmp_path, WORDS + [("the small green cat", "die kleine grüne katze")], repeat=3)
    config = recipe_config({"ibm1_epochs": 2, "epochs": 1, "batch_size": 8}, {"ibm1_epochs", "epochs", "batch_size"},
                           out=str(tmp_path))
    text = read_parallel(src, tgt)
    corpus = GoldCorpus(text.source, text.target, None, [], [], "test")
    forward, reverse = ALIGN_NETWORKS["hmm"].train_jointly(corpus, config, "marginal", lambda _: None)
    return forward, reverse, text

