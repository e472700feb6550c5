"""``pyro-attention align``: links from every alignment source, scored against gold alignments."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyro_attention import cli
from pyro_attention.aer import alignment_error_rate
from pyro_attention.align import AlignConfig, alignment_links, format_rows, run_align
from pyro_attention.data import make_synthetic_translation
from pyro_attention.translation import TranslationConfig, train

DATA = Path(os.environ.get("PYRO_ATTENTION_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
TINY = dict(embedding=8, encoder=8, decoder=16, attention=8)


def test_links_from_every_alignment_source_on_synthetic_gold(tmp_path):
    config = TranslationConfig(
        data="synthetic",
        train_size=300,
        val_size=20,
        test_size=20,
        model="variational",
        estimator="enum",
        epochs=2,
        out=str(tmp_path),
        **TINY,
    )
    result = train(config, progress=False, log=None)
    corpus = make_synthetic_translation(40, seed=5)
    links = alignment_links(result, corpus.source, corpus.target)
    assert set(links) == {"prior", "posterior", "q"}
    for name, predicted in links.items():
        assert len(predicted) == 40
        # one link per target word, inside the sentence
        for links_i, src, tgt in zip(predicted, corpus.source, corpus.target, strict=True):
            assert len(links_i) == len(tgt)
            assert all(0 <= s < len(src) and 0 <= t < len(tgt) for s, t in links_i)
        score = alignment_error_rate(predicted, [set(zip(g, range(len(g)), strict=True)) for g in corpus.gold])
        assert 0.0 <= score.aer <= 1.0, name


def test_align_config_errors():
    with pytest.raises(ValueError, match="corpus must be one of"):
        AlignConfig(corpus="deen")
    with pytest.raises(ValueError, match=r"models: unknown \['relaxd'\]; choose from \['soft', 'marginal'"):
        AlignConfig(models=["relaxd"])
    with pytest.raises(SystemExit):
        cli.main(["align", "--corpus", "xx"])


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "gold-alignments").exists(), reason="../shared/data (gold alignments) is absent")
def test_align_on_hansards_tiny(tmp_path):
    config = AlignConfig(
        data_dir=str(DATA),
        extra_size=10,
        epochs=1,
        models=["marginal"],
        out=str(tmp_path),
        both_directions=True,
        **TINY,
    )
    rows = run_align(config, log=lambda _: None)
    assert {(r.source, r.direction) for r in rows} >= {("prior", "forward"), ("posterior", "intersection")}
    assert all(0.0 <= r.result.aer <= 1.0 for r in rows)
    assert format_rows(rows).startswith("| model | alignment source | direction | AER |")


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "gold-alignments").exists(), reason="../shared/data (gold alignments) is absent")
def test_align_any_pair(tmp_path):
    """Every pair can be scored against gold links: a deterministic one reports its weights, RWS its prior,
    exact posterior and q."""
    config = AlignConfig(
        data_dir=str(DATA), extra_size=0, epochs=1, models=["segmentation", "rws"], out=str(tmp_path), **TINY
    )
    rows = run_align(config, log=lambda _: None)
    assert {(r.model, r.source) for r in rows} == {
        ("segmentation", "weights"), ("rws", "prior"), ("rws", "posterior"), ("rws", "q"),
    }
    assert all(0.0 <= r.result.aer <= 1.0 for r in rows)
