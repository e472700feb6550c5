"""``pyro-attention align``: links from every alignment source, scored against gold alignments."""

from __future__ import annotations

import dataclasses
import os
import sys
import textwrap
from pathlib import Path

import pytest

from pyro_attention import cli
from pyro_attention.aer import alignment_error_rate
from pyro_attention.data import make_synthetic_translation
from pyro_attention.tasks.align import (
    AlignConfig,
    Seq2SeqSizes,
    alignment_links,
    format_rows,
    load_gold_corpus,
    run_align,
)
from pyro_attention.tasks.translation import TranslationConfig, train
from tests.support.paths import SHARED_DATA

DATA = SHARED_DATA
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


def test_align_option_combinations_are_usage_errors(capsys):
    """A combination of options AlignConfig refuses exits with status 2 (a usage error, as argparse's own) and
    names the flag; it does not reach the data."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["align", "--network", "seq2seq", "--null-prob", "0.2"])
    assert stop.value.code == 2
    assert "pyro-attention align: error: argument --null-prob: network 'seq2seq' does not use it" in (
        capsys.readouterr().err)
    with pytest.raises(SystemExit) as stop:
        cli.main(["align", "--gold-links", "links.txt"])  # a user's gold set without its sentence pairs
    assert stop.value.code == 2 and "argument --gold-text" in capsys.readouterr().err


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
        options=Seq2SeqSizes(**TINY),
    )
    rows = run_align(config, log=lambda _: None)
    assert {(r.source, r.direction) for r in rows} >= {
        ("prior", "forward"), ("posterior", "intersection"), ("posterior", "posterior-mean"),
        ("posterior", "posterior-product")}
    assert all(0.0 <= r.result.aer <= 1.0 for r in rows)
    assert format_rows(rows).startswith("| model | alignment source | direction | AER |")


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "gold-alignments").exists(), reason="../shared/data (gold alignments) is absent")
def test_align_any_pair(tmp_path):
    """Every pair can be scored against gold links: a deterministic one reports its weights, RWS its prior,
    exact posterior (and its threshold links) and q."""
    config = AlignConfig(
        data_dir=str(DATA), extra_size=0, epochs=1, models=["segmentation", "rws"], out=str(tmp_path),
        options=Seq2SeqSizes(**TINY),
    )
    rows = run_align(config, log=lambda _: None)
    assert {(r.model, r.source) for r in rows} == {
        ("segmentation", "weights"), ("rws", "prior"), ("rws", "posterior"), ("rws", "posterior-threshold"),
        ("rws", "q"),
    }
    assert all(0.0 <= r.result.aer <= 1.0 for r in rows)


# -- a gold set of the user's own ---------------------------------------------------------------------------------
PAIRS = ["the house is small ||| das haus ist klein", "the cat ||| die katze", "a small cat ||| eine kleine katze"]
# 1-indexed Pharaoh, source (English) first; pair 2's "3-3" lies outside the sentence
PHARAOH1 = ["1-1 2-2 3-3 4-4", "1-1 2-2 3-3", "1-1 2p2 3-3"]


def _swap_to_0(link: str) -> str:
    """A 1-indexed source-first Pharaoh link as a 0-indexed target-first one: ``2p3`` -> ``2p1``."""
    sep = "p" if "p" in link else "-"
    i, j = link.split(sep)
    return f"{int(j) - 1}{sep}{int(i) - 1}"


def _files(tmp_path: Path) -> dict[str, Path]:
    files = {"text": tmp_path / "gold.txt", "src": tmp_path / "gold.en", "tgt": tmp_path / "gold.de",
             "pharaoh1": tmp_path / "gold.p1", "pharaoh0-swapped": tmp_path / "gold.p0", "naacl": tmp_path / "gold.wa"}
    files["text"].write_text("\ufeff" + "\n".join(PAIRS) + "\n", encoding="utf-8")  # with a byte-order mark
    files["src"].write_text("".join(p.split(" ||| ")[0] + "\n" for p in PAIRS))
    files["tgt"].write_text("".join(p.split(" ||| ")[1] + "\n" for p in PAIRS))
    files["pharaoh1"].write_text("\n".join(PHARAOH1) + "\n")
    swapped = [" ".join(_swap_to_0(link) for link in line.split()) for line in PHARAOH1]
    files["pharaoh0-swapped"].write_text("\n".join(swapped) + "\n")
    naacl = []
    for n, line in enumerate(PHARAOH1, 1):
        for link in line.split():
            i, j = link.replace("p", "-").split("-")
            naacl.append(f"{n} {j} {i} {'P' if 'p' in link else 'S'}")  # target first
    files["naacl"].write_text("\n".join(naacl) + "\n")
    return files


def test_a_users_gold_set_in_every_format_reads_the_same(tmp_path):
    from pyro_attention.tasks.align import load_user_gold

    f = _files(tmp_path)
    logs: list[str] = []
    base = AlignConfig(gold_text=str(f["text"]), gold_links=str(f["pharaoh1"]))
    reference = load_user_gold(base, logs.append)
    assert reference.source[0] == ["the", "house", "is", "small"]  # the BOM is gone
    assert reference.gold[1].sure == {(0, 0), (1, 1)} and reference.gold[2].possible_only == {(1, 1)}
    assert any(m.startswith("gold: dropped") and "3-3" in m for m in logs)  # pair 2 has 2 words a side
    for config in (
        AlignConfig(gold_src=str(f["src"]), gold_tgt=str(f["tgt"]), gold_links=str(f["pharaoh1"])),
        AlignConfig(gold_text=str(f["text"]), gold_links=str(f["pharaoh0-swapped"]), links_format="pharaoh0",
                    links_order="target-source"),
        AlignConfig(gold_text=str(f["text"]), gold_links=str(f["naacl"]), links_format="naacl",
                    links_order="target-source"),
    ):
        corpus = load_user_gold(config, lambda _: None)
        assert corpus.source == reference.source and corpus.target == reference.target
        assert [(g.sure, g.possible) for g in corpus.gold] == [(g.sure, g.possible) for g in reference.gold]


def test_a_users_gold_set_mistakes_name_the_file(tmp_path):
    from pyro_attention.tasks.align import load_user_gold

    f = _files(tmp_path)
    short = tmp_path / "short.de"
    short.write_text("das haus ist klein\ndie katze\n")
    with pytest.raises(ValueError, match=r"gold.en has 3 sentences but .*short.de has 2"):
        load_user_gold(AlignConfig(gold_src=str(f["src"]), gold_tgt=str(short), gold_links=str(f["pharaoh1"])))
    blank = tmp_path / "blank.en"
    blank.write_text("the house is small\n\na small cat\n")
    with pytest.raises(ValueError, match=r"blank.en:2: empty sentence"):
        load_user_gold(AlignConfig(gold_src=str(blank), gold_tgt=str(f["tgt"]), gold_links=str(f["pharaoh1"])))
    few = tmp_path / "few.p1"
    few.write_text("1-1\n")
    with pytest.raises(ValueError, match="few.p1"):
        load_user_gold(AlignConfig(gold_text=str(f["text"]), gold_links=str(few)))
    with pytest.raises(ValueError, match="needs the links file"):
        AlignConfig(gold_text=str(f["text"]))
    with pytest.raises(ValueError, match="either as one 'source \\|\\|\\| target' file"):
        AlignConfig(gold_text=str(f["text"]), gold_src=str(f["src"]), gold_tgt=str(f["tgt"]),
                    gold_links=str(f["pharaoh1"]))
    with pytest.raises(ValueError, match="links_format must be one of pharaoh0, pharaoh1, naacl"):
        AlignConfig(gold_text=str(f["text"]), gold_links=str(f["pharaoh1"]), links_format="giza")


def test_align_a_users_gold_set_from_the_command_line(tmp_path, capsys):
    f = _files(tmp_path)
    extra_src, extra_tgt = tmp_path / "more.en", tmp_path / "more.de"
    extra_src.write_text("the house\nthe small house\n" * 4)
    extra_tgt.write_text("das haus\ndas kleine haus\n" * 4)
    code = cli.main(["align", "--gold-text", str(f["text"]), "--gold-links", str(f["pharaoh1"]),
                     "--extra-src", str(extra_src), "--extra-tgt", str(extra_tgt), "--models", "marginal",
                     "--epochs", "1", "--both-directions", "--out", str(tmp_path / "runs"),
                     *[x for k, v in TINY.items() for x in (f"--{k}", str(v))]])
    assert code == 0
    printed = capsys.readouterr().out
    assert "user gold set" in printed and "grow-diag-final-and" in printed and "posterior" in printed


def test_a_stopped_align_run_does_not_train_a_finished_direction_again(tmp_path, monkeypatch):
    """Each direction's alignments are kept in OUT/<network>-<model>-<direction>.trained.pt: a rerun with the same
    settings and text reads them (same rows, no training); another setting, other text or a damaged file trains."""
    from pyro_attention.tasks.align.networks import ALIGN_NETWORKS

    f = _files(tmp_path)
    config = AlignConfig(gold_text=str(f["text"]), gold_links=str(f["pharaoh1"]), network="ibm1",
                         models=["marginal"], epochs=1, both_directions=True, out=str(tmp_path / "runs"))
    first = run_align(config, log=lambda _: None)
    files = sorted(p.name for p in (tmp_path / "runs").glob("*.trained.pt"))
    assert files == ["ibm1-marginal-forward.trained.pt", "ibm1-marginal-reverse.trained.pt"]
    network = ALIGN_NETWORKS["ibm1"]
    real, trained = network.train, []
    monkeypatch.setattr(type(network), "train", lambda self, *a, **k: trained.append(a[3]) or real(*a, **k))
    logs: list[str] = []
    again = run_align(dataclasses.replace(config, thresholds=(0.5,)), log=logs.append)  # scoring only
    def untuned(rows: list) -> list:  # the rows that do not depend on the threshold grid
        return [(r.source, r.direction, r.result) for r in rows if "thresholds" not in r.note]

    assert not trained and untuned(again) == untuned(first) and len(untuned(first)) > 10
    assert sum("read from" in m for m in logs) == 2
    (tmp_path / "runs" / "ibm1-marginal-reverse.trained.pt").write_bytes(b"damaged")
    run_align(config, log=lambda _: None)
    assert trained == [True]  # only the damaged direction
    run_align(dataclasses.replace(config, epochs=2), log=lambda _: None)
    assert trained == [True, False, True]


def test_the_rescoring_benchmark_links_saved_alignments_without_training(tmp_path, capsys):
    """benchmarks/studies/align_rescore.py on a tiny align run's probs.pt: its threshold rule is align's posterior-mean
    row, and the grow rules are scored with choices tuned on the other half (hi > lo)."""
    from tests.support.scripts import load_script

    f = _files(tmp_path)
    config = AlignConfig(gold_text=str(f["text"]), gold_links=str(f["pharaoh1"]), network="ibm1",
                         models=["marginal"], epochs=1, both_directions=True, out=str(tmp_path / "runs"))
    rows = run_align(config, log=lambda _: None)
    rescore = load_script("benchmarks/studies", "align_rescore")
    args = rescore.make_parser().parse_args(["--probs", str(tmp_path / "runs" / "ibm1-marginal.probs.pt"),
                                              "--gold-text", str(f["text"]), "--gold-links", str(f["pharaoh1"]),
                                              "--sources", "posterior"])
    out = rescore.main(args)
    assert [(r["combination"], r["rule"]) for r in out] == [
        (c, rule) for c in ("posterior-mean", "posterior-product") for rule in rescore.RULES]
    mean = next(r for r in rows if r.source == "posterior" and r.direction == "posterior-mean")
    assert out[0]["aer"] == pytest.approx(100 * mean.result.aer)
    assert all(hi > lo for r in out if r["rule"] != "threshold" for hi, lo in r["chosen"])
    assert "| posterior | posterior-mean | grow |" in capsys.readouterr().out


def test_the_eflomal_benchmark_scores_the_peer_on_align_s_training_text(tmp_path, capsys, monkeypatch):
    """benchmarks/align_eflomal.py: the training text handed to eflomal is align's (gold pairs gold_repeat times,
    then the extra text, words cut by --source-prefix), and the first copy of the gold pairs' links are scored
    forward, reverse and symmetrised -- here with a stand-in eflomal that links word i to word i."""
    from tests.support.scripts import load_script

    f = _files(tmp_path)
    fake = tmp_path / "bin" / "eflomal-align"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""\
        import os, shutil, sys
        a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
        shutil.copy(a["-s"], os.environ["SOURCE_COPY"])
        lines = [s.split() for s in open(a["-s"], encoding="utf-8")]
        for out in (a["-f"], a["-r"]):
            open(out, "w").write("".join(" ".join(f"{i}-{i}" for i in range(len(s))) + "\\n" for s in lines))
        """))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SOURCE_COPY", str(tmp_path / "source-seen"))
    bench = load_script("benchmarks", "align_eflomal")
    args = bench.make_parser().parse_args(["--gold-text", str(f["text"]), "--gold-links", str(f["pharaoh1"]),
                                           "--gold-repeat", "2", "--source-prefix", "2"])
    rows = bench.main(args)
    gold = [line.split(" ||| ")[0].lower().split() for line in PAIRS]
    assert (tmp_path / "source-seen").read_text(encoding="utf-8").splitlines() == [
        " ".join(w[:2] for w in s) for s in gold * 2]
    assert [r["symmetrisation"] for r in rows] == ["forward", "reverse", "intersection", "union", "grow-diag",
                                                   "grow-diag-final", "grow-diag-final-and"]
    corpus = load_gold_corpus(AlignConfig(gold_text=str(f["text"]), gold_links=str(f["pharaoh1"]),
                                          models=["marginal"], network="hmm"), log=lambda _: None)
    diagonal = [{(i, i) for i in range(len(s))} for s in gold]
    assert rows[0]["aer"] == pytest.approx(100 * alignment_error_rate(diagonal, corpus.gold).aer)
    assert rows[2]["aer"] == rows[0]["aer"]  # the same links both ways: every symmetrisation is them
    assert "| forward |" in capsys.readouterr().out
    args.eflomal = "no-such-eflomal"
    with pytest.raises(SystemExit, match="not a program on the PATH"):
        bench.main(args)
