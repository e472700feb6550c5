"""Smoke tests of the benchmarks at tiny sizes: every pair times, every fairness check passes, run.py writes its
JSON, markdown block and plots."""

from __future__ import annotations

import argparse
import json
import math
from types import ModuleType

import pyro
import pytest
import torch

from tests.support.scripts import load_script

TINY = [
    "--batch-size",
    "4",
    "--regions",
    "5",
    "--hidden",
    "16",
    "--answers",
    "7",
    "--features",
    "6",
    "--question-size",
    "3",
    "--repeats",
    "2",
    "--warmup",
    "1",
]


def _load(name: str) -> ModuleType:
    return load_script("benchmarks", name)


@pytest.fixture(scope="module")
def step_time() -> ModuleType:
    return _load("step_time")


def test_step_time_tiny(step_time: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    result = step_time.main(step_time.make_parser().parse_args(TINY))
    assert torch.get_num_threads() == threads  # restored
    assert set(result["times"]) == set(step_time.PAIRS) == set(result["checks"])
    assert len(step_time.PAIRS) == 6
    for name, t in result["times"].items():
        for side in ("pyro", "torch"):
            assert math.isfinite(t[side]) and t[side] > 0, (name, side, t)
        assert t["ratio"] == pytest.approx(t["pyro"] / t["torch"])
    for name, c in result["checks"].items():
        assert c["passed"], (name, c)
        assert c["grad_rel_err"] < step_time.GRAD_RTOL
        if c["deterministic"]:
            assert c["loss_rel_err"] < step_time.LOSS_RTOL
    assert {n for n, c in result["checks"].items() if not c["deterministic"]} == {"hard-sample", "va-sample"}
    assert result["threads"] == 1 and result["validation"] is False
    assert result["pyro_version"] == pyro.__version__
    out = capsys.readouterr().out
    assert "threads 1" in out and f"pyro-ppl {pyro.__version__}" in out and "enable_validation(False)" in out
    for name in step_time.PAIRS:
        assert name in out


def test_step_time_subset(step_time: ModuleType) -> None:
    args = step_time.make_parser().parse_args([*TINY, "--pairs", "va-enum", "--repeats", "1"])
    result = step_time.main(args)
    assert list(result["times"]) == ["va-enum"] and result["checks"]["va-enum"]["passed"]


def test_fairness_check_catches_a_wrong_loss(step_time: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-written loss that drops the KL term must fail the check (the check is not vacuous)."""
    hw = step_time.handwritten

    def no_kl(net: torch.nn.Module, batch: object) -> torch.Tensor:
        enc = net.encode(batch)
        log_q = torch.log_softmax(hw.posterior_logits(net, enc), dim=-1)
        return -hw._expected(log_q, hw.aligned_table(net, enc), enc.source_mask)

    factory, _, deterministic = step_time.PAIRS["va-enum"]
    monkeypatch.setitem(step_time.PAIRS, "va-enum", (factory, no_kl, deterministic))
    with pytest.raises(AssertionError, match="fairness check failed"):
        step_time.main(step_time.make_parser().parse_args([*TINY, "--pairs", "va-enum"]))


def test_enum_memory_tiny(capsys):
    module = load_script("benchmarks/studies", "enum_memory")
    args = [
        "--batch-size",
        "2",
        "--length",
        "4",
        "--hidden",
        "8",
        "--vocab",
        "20",
        "--chunks",
        "0",
        "2",
        "--steps",
        "1",
    ]
    rows = module.main(module.make_parser().parse_args(args))
    assert [r["chunk"] for r in rows] == [0, 2]
    assert all(r["step_s"] > 0 and r["peak_gib"] > 0 for r in rows)
    assert "peak RSS [GiB]" in capsys.readouterr().out


@pytest.fixture
def run_with_memory():
    """``benchmarks/run.py``, skipping where this torch cannot follow storages for the CPU memory measure."""
    run = load_script("benchmarks", "run")
    if not load_script("benchmarks", "measure").storages_are_tracked():
        pytest.skip(f"torch {torch.__version__} gives a new storage object per call: CPU memory is not measured")
    return run


def test_run_tiny(tmp_path, capsys, run_with_memory):
    """``benchmarks/run.py --tiny``: every section measured, JSON + markdown block + plots written, prose kept."""
    run = run_with_memory
    md = tmp_path / "performance.md"
    md.write_text("# Performance\n\nprose that must survive\n")
    argv = ["--tiny", "--out", str(tmp_path), "--sizes", "qa", "small", "--curve-lengths", "3", "--repeats", "1"]
    argv += ["--straightforward"]
    threads = torch.get_num_threads()
    result = run.main(run.make_parser().parse_args(argv))
    assert torch.get_num_threads() == threads
    assert set(result["steps"]) == {"qa", "small"} and result["matmul_limit"] > 0
    for r in result["steps"].values():
        assert all(c["passed"] for c in r["checks"].values()) and set(r["checks"]) == set(run.PAIRS)
        for name in run.PAIRS:
            for side in ("pyro", "torch"):
                assert r["times"][f"{side}/{name}"] > 0 and r["memory"][f"{side}/{name}"] > 0
        assert r["times"]["torch-straightforward/marginal"] > 0
    assert set(result["throughput"]) == {"small"}
    assert [row["S"] for row in result["curves"]["rows"]] == [3]
    saved = json.loads((tmp_path / "performance-quick.json").read_text())
    assert saved["steps"]["qa"]["times"] == result["steps"]["qa"]["times"]
    text = md.read_text()
    assert "prose that must survive" in text and "<!-- benchmark:quick:begin -->" in text and "pyro/torch" in text
    for plot in result["plots"]:
        assert (tmp_path / plot).stat().st_size > 0
    # a second run replaces the block rather than appending another
    run.main(run.make_parser().parse_args([*argv, "--sizes", "qa", "--curve-lengths", "--no-plots"]))
    assert md.read_text().count("<!-- benchmark:quick:begin -->") == 1


def test_tensor_memory_refuses_a_torch_whose_storages_it_cannot_follow(monkeypatch):
    measure = load_script("benchmarks", "measure")
    monkeypatch.setattr(measure, "storages_are_tracked", lambda: False)
    with pytest.raises(RuntimeError, match="a freed storage cannot be seen; use a newer torch"):
        measure.TensorMemory()


def test_tensor_memory_tracker():
    """The CPU memory measure counts new storages, not views of existing ones, and subtracts freed ones."""
    measure = load_script("benchmarks", "measure")
    if not measure.storages_are_tracked():
        pytest.skip(f"torch {torch.__version__} gives a new storage object per call: CPU memory is not measured")
    x = torch.randn(256, 256)  # exists before: not counted
    with measure.TensorMemory() as tracker:
        y = x.t().contiguous()  # 256 KiB
        z = y * 2  # 256 KiB
        del y, z
        v = x.view(-1)  # a view: nothing new
        del v
    assert tracker.peak == 2 * 256 * 256 * 4
    assert tracker.current == 0


def test_run_outputs_section_tiny(tmp_path, capsys, run_with_memory) -> None:
    """``run.py --outputs``: every pair on both output layers, per thread count, into its own JSON and block."""
    run = run_with_memory
    argv = ["--outputs", "--tiny", "--full", "--repeats", "1", "--large-repeats", "1", "--output-threads", "1",
            "--out", str(tmp_path)]
    result = run.main(run.make_parser().parse_args(argv), argv)
    assert set(result["outputs"]) == {"multi30k@1", "large@1"}
    for r in result["outputs"].values():
        assert set(r["times"]) == {f"{o}/{p}" for o in run.OUTPUT_LAYERS for p in run.OUTPUT_PAIRS}
        assert all(math.isfinite(t) and t > 0 for t in r["times"].values())
    saved = json.loads((tmp_path / "performance-outputs.json").read_text())
    assert saved["mode"] == "outputs"
    block = (tmp_path / "performance.md").read_text()
    assert "<!-- benchmark:outputs:begin -->" in block and "| product /soft |" in block


def test_run_transformer_section_tiny(tmp_path, capsys, run_with_memory) -> None:
    """``run.py --transformer``: every pair on both output layers of a tiny ``TransformerSeq2Seq``, its own JSON and
    block."""
    run = run_with_memory
    argv = ["--transformer", "--tiny", "--repeats", "1", "--output-threads", "1", "--out", str(tmp_path)]
    result = run.main(run.make_parser().parse_args(argv), argv)
    (r,) = result["outputs"].values()
    assert set(r["times"]) == {f"{o}/{p}" for o in run.OUTPUT_LAYERS for p in run.OUTPUT_PAIRS}
    assert all(math.isfinite(t) and t > 0 for t in r["times"].values())
    assert json.loads((tmp_path / "performance-transformer.json").read_text())["mode"] == "transformer"
    block = (tmp_path / "performance.md").read_text()
    assert "<!-- benchmark:transformer:begin -->" in block and "Transformer d=8, 2 heads, 2 layers" in block


def test_micro_tiny(capsys) -> None:
    micro = load_script("benchmarks/studies", "micro")
    result = micro.main(micro.make_parser().parse_args(["--tiny", "--repeats", "2"]))
    assert set(result) == {"log_prob", "optimiser", "matmul", "decoding"}
    assert all(t > 0 for section in result.values() for t in section.values())
    assert "FusedClippedAdam" in capsys.readouterr().out


def test_decode_speed_tiny(tmp_path, capsys) -> None:
    """benchmarks/decode_speed.py times our side on a tiny synthetic checkpoint and scores its output."""
    import gzip

    from pyro_attention import cli

    decode_speed = load_script("benchmarks", "decode_speed")
    run = tmp_path / "run"
    tiny = ["--train-size", "16", "--val-size", "8", "--batch-size", "8", "--embedding", "8", "--encoder", "8",
            "--decoder", "16", "--attention", "8", "--quiet", "--epochs", "1", "--model", "marginal"]
    assert cli.main(["train", "--out", str(run), *tiny]) == 0
    tok = tmp_path / "data" / "multi30k" / "tok"
    tok.mkdir(parents=True)
    for lang, text in (("de", "a b c\nb c\n"), ("en", "x y\ny\n")):
        with gzip.open(tok / f"test_2016_flickr.lc.norm.tok.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write(text)
    args = decode_speed.parse_args(["--ours", f"m={run}:kmax", "--data-dir", str(tmp_path / "data"), "--work",
                                    str(tmp_path / "work"), "--blocks", "1", "--beam", "2", "--torch-products"])
    result = decode_speed.main(args)
    onednn, torch_products = result["runs"]
    assert onednn["sentences"] == 2 and onednn["decode_s"] > 0 and onednn["rule"] == "kmax"
    assert (onednn["products"], torch_products["products"], torch_products["side"]) == ("onednn", "torch", "m/torch")
    assert onednn["bleu_tok_none"] == torch_products["bleu_tok_none"]
    assert result["summary"]["m@1"]["sentences_per_s"] > 0 and result["summary"]["m/torch@1"]["sentences_per_s"] > 0
    assert "| m | kmax | 1 |" in capsys.readouterr().out
    assert json.loads(args.json.read_text())["beam"] == 2
    with pytest.raises(SystemExit):
        decode_speed.parse_args(["--ours", "no-equals-sign"])
    assert decode_speed.peer_seconds("[x] Total translation time (s): 12.3\n") == 12.3


def test_align_priors_tiny(tmp_path) -> None:
    """benchmarks/studies/align_priors.py trains every prior on the same EM IBM Model 1 table of a toy gold set and
    scores each; the table-only row has no prior AER, the HMM row has its smoothed posterior."""
    align_priors = load_script("benchmarks/studies", "align_priors")
    pairs = ["the house ||| das haus", "the cat ||| die katze", "a small cat ||| eine kleine katze",
             "the small house ||| das kleine haus"]
    (tmp_path / "gold.txt").write_text("\n".join(pairs) + "\n")
    (tmp_path / "gold.p1").write_text("1-1 2-2\n1-1 2-2\n1-1 2-2 3-3\n1-1 2-2 3-3\n")
    args = align_priors.parse_args(["--gold-text", str(tmp_path / "gold.txt"), "--gold-links",
                                    str(tmp_path / "gold.p1"), "--epochs", "1", "--batch-size", "2"])
    rows = {r["prior"]: r for r in align_priors.main(args)}
    assert list(rows) == list(align_priors.PRIORS)
    assert "aer_prior" not in rows["ibm1"] and "aer_smoothed" in rows["hmm"] and "aer_smoothed" not in rows["neural"]
    assert all(0 <= r["aer_posterior"] <= 100 for r in rows.values())
    assert all(math.isfinite(r["loss_last_epoch"]) for p, r in rows.items() if p != "ibm1")


def test_align_recipe_tiny(tmp_path) -> None:
    """benchmarks/studies/align_recipe.py runs ``align --src --tgt --out`` with a variant's flags on a text and
    scores its gold pairs' links; the paired bootstrap's standard error is zero where the difference is the same in
    every draw; a variant without ``=`` is refused by name."""
    align_recipe = load_script("benchmarks/studies", "align_recipe")
    pairs = [("das haus", "the house"), ("die katze", "the cat"), ("eine kleine katze", "a small cat"),
             ("das kleine haus", "the small house")] * 3
    (tmp_path / "t.src").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "t.tgt").write_text("".join(t + "\n" for _, t in pairs))
    gold = [{(0, 0), (1, 1)}, {(0, 0), (1, 1)}, {(0, 0), (1, 1), (2, 2)}, {(0, 0), (1, 1), (2, 2)}]
    text = align_recipe.Text("toy", tmp_path / "t.src", tmp_path / "t.tgt", gold)
    label, flags = align_recipe.parse_variant("one epoch=--epochs 1 --ibm1-epochs 1")
    assert (label, flags) == ("one epoch", ["--epochs", "1", "--ibm1-epochs", "1"])
    links = align_recipe.align_variant(text, flags, tmp_path)
    row = align_recipe.score(links, gold)
    assert len(links) == len(gold) and 0 <= row["aer"] <= 100 and 0 <= row["precision"] <= 100
    assert align_recipe.paired_bootstrap_se(links, links, gold, draws=20) == 0.0  # the same links: no difference
    shifted = [{(s + 1, t) for s, t in g} for g in gold]  # every link wrong: AER 100 against AER 0
    assert align_recipe.paired_bootstrap_se(gold, shifted, gold, draws=20) == 0.0
    one_wrong = [gold[0] | {(1, 0)}, *gold[1:]]  # one extra link in one pair: the difference depends on the draw
    assert align_recipe.paired_bootstrap_se(gold, one_wrong, gold, draws=50) > 0.0
    with pytest.raises(argparse.ArgumentTypeError, match="LABEL=FLAGS"):
        align_recipe.parse_variant("--epochs 1")
    with pytest.raises(argparse.ArgumentTypeError, match="--bootstrap: 0 \\(none\\) or at least 2 draws, got -1"):
        align_recipe.bootstrap_draws("-1")


def test_prior_pull_tiny(tmp_path, capsys) -> None:
    """benchmarks/studies/prior_pull.py on tiny trained checkpoints: its objectives and distributions agree with the
    trainer's exact validation (NLL, entropies, KL(q || posterior) = -ELBO - NLL); a soft pair is refused."""
    from pyro_attention.tasks.translation import TranslationConfig, load_checkpoint, train, validate
    from pyro_attention.tasks.translation.corpora import load_split, make_batches

    prior_pull = load_script("benchmarks/studies", "prior_pull")
    tiny = dict(train_size=24, val_size=12, batch_size=8, embedding=8, encoder=8, decoder=16, attention=8, epochs=1)
    for model in ("variational", "marginal", "soft"):
        train(TranslationConfig(model=model, out=str(tmp_path / model), **tiny), progress=False, log=None)
    args = prior_pull.make_parser().parse_args(
        [str(tmp_path / m / "last.pt") for m in ("variational", "marginal")] + ["--json", str(tmp_path / "p.json")])
    va, marginal = prior_pull.main(args)
    assert json.loads((tmp_path / "p.json").read_text()) == [va, marginal]
    assert "| cos_dH_kl |" in capsys.readouterr().out
    checks = {}
    for row, model in ((va, "variational"), (marginal, "marginal")):
        ckpt = load_checkpoint(tmp_path / model / "last.pt")
        data = load_split(ckpt.config, "val", size=ckpt.config.val_size, references=False)
        check = checks[model] = validate(ckpt.pair, make_batches(data, ckpt.src_vocab, ckpt.tgt_vocab, 64))
        assert row["tokens"] == check.tokens
        assert row["value_marginal"] == pytest.approx(check.nll, rel=1e-5)
        assert row["h_prior"] == pytest.approx(check.prior_entropy, rel=1e-4)
        assert row["h_posterior"] == pytest.approx(check.posterior_entropy, rel=1e-4)
        assert 0 <= row["agree_posterior"] <= 1 and row["kl_posterior_prior"] >= 0 and row["l_range"] >= 0
        assert 0 < row["prior_last"] < 1
        assert -1 <= row["cos_dH_marginal"] <= 1 and row["grad_norm_marginal"] > 0
    assert va["h_guide"] == pytest.approx(checks["variational"].guide_entropy, rel=1e-4)
    # -ELBO = NLL + KL(q || p(z | x, y)) exactly, and the ELBO's two terms add up
    assert va["value_neg_elbo"] - va["value_marginal"] == pytest.approx(checks["variational"].guide_kl, abs=1e-5)
    assert va["value_neg_elbo"] == pytest.approx(va["value_neg_expected_ll"] + va["value_kl"], rel=1e-6)
    assert "h_guide" not in marginal and "cos_dH_kl" not in marginal
    with pytest.raises(ValueError, match="needs a categorical pair.*SoftAttention"):
        prior_pull.measure(tmp_path / "soft" / "last.pt")


def test_keep_share_counts_the_kernels_recomputed_rows(tmp_path, capsys) -> None:
    """benchmarks/studies/keep_share.py on a tiny synthetic row: nothing kept, everything recomputed (4 products a row);
    a budget above the largest batch, nothing (3); in between, a share between."""
    module = load_script("benchmarks/studies", "keep_share")
    config = tmp_path / "exp.toml"
    config.write_text('[shared]\ndata = "synthetic"\ntrain_size = 40\nbatch_size = 8\nchunk_size = 2\n'
                      '[[rows]]\nlabel = "hard"\nmodel = "hard"\n')
    out = module.main(module.make_parser().parse_args(["--config", str(config), "--row", "hard",
                                                       "--keep-gib", "0", "1e-4", "1"]))
    assert [r["products_per_row"] for r in (out[0], out[2])] == [4.0, 3.0]
    assert 0 < out[1]["recomputed_share"] < 1 and out[0]["largest_batch_gb"] * 1e9 > 1e-4 * 2**30
    assert "| 2 | 0 | 100.0% | 4.00 |" in capsys.readouterr().out
    timed = module.main(module.make_parser().parse_args(["--config", str(config), "--row", "hard", "--keep-gib", "0",
                                                         "1", "--time", "1"]))
    assert [r["timed_recomputed"] for r in timed] == [1.0, 0.0] and all(r["seconds"] > 0 for r in timed)
    assert "timed: batch " in capsys.readouterr().out
    # smaller chunks fill a budget more closely: never more recomputed at one budget, fewer somewhere
    sizes = module.main(module.make_parser().parse_args(["--config", str(config), "--row", "hard", "--keep-gib",
                                                         "1e-5", "5e-5", "--chunk-size", "0", "1", "--time", "1"]))
    share = {(r["chunk_size"], r["keep_gib"]): r["recomputed_share"] for r in sizes}
    assert all(share[1, k] <= share[0, k] for k in (1e-5, 5e-5)) and share[1, 1e-5] < share[0, 1e-5]
    assert all(r["seconds"] > 0 for r in sizes) and "| all | 1e-05 |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--chunk-size must be >= 0"):
        module.main(module.make_parser().parse_args(["--config", str(config), "--row", "hard", "--chunk-size", "-1"]))


def test_subnormal_tiny(capsys) -> None:
    """benchmarks/studies/subnormal.py at tiny sizes: every case of every kind timed, one table row each."""
    module = load_script("benchmarks/studies", "subnormal")
    args = module.make_parser().parse_args(["--rows", "16", "--hidden", "4", "--vocab", "30", "--shape", "2", "3", "4",
                                            "--scales", "1", "30", "--repeats", "1"])
    module.main(args)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 2 + 3 + 2
    assert all(float(row.rsplit("|", 2)[1]) >= 0 for row in rows)


def test_matmul_precision_tiny(capsys) -> None:
    """benchmarks/studies/matmul_precision.py on a fresh synthetic run: both precisions on each batch, gradients that
    agree to bfloat16 rounding, the process's precision restored."""
    module = load_script("benchmarks/studies", "matmul_precision")
    rows = module.main(module.make_parser().parse_args(["--model", "marginal", "--batches", "2"]))
    assert len(rows) == 2 and all(r["highest_s"] > 0 and r["medium_s"] > 0 for r in rows)
    assert all(abs(r["diff"]) < 0.05 and r["rel"] < 0.05 and r["cos"] > 0.99 for r in rows)
    assert torch.get_float32_matmul_precision() == "highest"
    assert "fresh marginal on synthetic data; 2 batches" in capsys.readouterr().out


def test_marginal_decoding_tiny(capsys) -> None:
    """benchmarks/studies/marginal_decoding.py on a fresh synthetic network: both formulas decode every sentence, give
    the same translations, and the package's formula is back in place afterwards."""
    from pyro_attention.tasks.translation import decoding

    keep = decoding._Marginal.__call__
    module = load_script("benchmarks/studies", "marginal_decoding")
    result = module.main(module.make_parser().parse_args(["--limit", "6", "--rounds", "1"]))
    assert result["sentences"] == 6 and result["differ"] == 0
    assert all(len(v) == 1 and v[0] > 0 for v in result["seconds"].values())
    assert decoding._Marginal.__call__ is keep
    assert "translations that differ: 0 of 6" in capsys.readouterr().out


def test_padding_skip_tiny(capsys) -> None:
    """benchmarks/studies/padding_skip.py on a fresh synthetic run: both ways timed on each batch, the table alone and
    the whole step; skipping the padded pairs changes neither the loss nor the gradients; the pairs' table and the
    process's precision are back in place afterwards."""
    import pyro_attention.models._categorical as categorical
    from pyro_attention.distributions.enumeration import observed_table

    module = load_script("benchmarks/studies", "padding_skip")
    for extra in ([], ["--step"]):
        rows = module.main(module.make_parser().parse_args(["--batches", "2", *extra]))
        assert len(rows) == 2 and all(r["cpu_skipped"] >= 0 and r["wall_computed"] > 0 for r in rows)
        assert all(0 <= r["padded"] < 1 for r in rows) and any(r["padded"] > 0 for r in rows)
    assert all(abs(r["loss_diff"]) < 1e-3 and r["grad_rel"] < 1e-2 for r in rows)  # the step's, bfloat16 products
    assert categorical.observed_table is observed_table
    assert torch.get_float32_matmul_precision() == "highest"
    assert "fresh marginal on synthetic data; 2 batches; timed: the training step" in capsys.readouterr().out


def test_align_cost_tiny(tmp_path, capsys) -> None:
    """``benchmarks/align_cost.py`` on a generated Zipfian text of 40 pairs, ``pyro-attention align`` alone: it
    times the whole process, reads its peak memory from the kernel and writes the medians; the generated text has
    one line per pair on both sides."""
    align_cost = _load("align_cost")
    src, tgt = align_cost.zipf_text(tmp_path, 40, 30, length=6)
    lines = [p.read_text(encoding="utf-8").splitlines() for p in (src, tgt)]
    assert len(lines[0]) == len(lines[1]) == 40
    assert all(len(s.split()) == len(t.split()) for s, t in zip(*lines, strict=True))  # a word per word
    out = tmp_path / "cost.json"
    args = align_cost.make_parser().parse_args(["--zipf-pairs", "40", "--zipf-vocab", "30", "--no-eflomal",
                                                "--json", str(out), "--align-flags=--gibbs-sweeps 2"])
    result = align_cost.main(args)
    assert result["pairs"] == 40 and set(result) >= {"pyro-attention", "threads", "cpu"}
    measured = result["pyro-attention"]
    assert measured["seconds"] > 0 and 0.05 < measured["peak_gib"] < 8
    assert json.loads(out.read_text())["pairs"] == 40


def test_peer_quality_reads_the_toolkits_logs(tmp_path) -> None:
    """benchmarks/peer_quality.py: each validation belongs to the checkpoint saved next, the per-sentence gold score
    becomes a per-token perplexity, the Transformer configuration has the size of
    examples/configs/transformer-multi30k.toml with no label smoothing, and the learning rate follows our trainer's
    plateau schedule."""
    peer_quality = load_script("benchmarks", "peer_quality")
    log = ("Validation perplexity: 9.5\n[x] Saving checkpoint /w/model_step_454.pt\nStep 500/18160; ...\n"
           "Validation perplexity: 7.25\n[x] earlystopper has_stopped!\n[x] Saving checkpoint /w/model_step_908.pt\n"
           "Validation perplexity: 7.5\n")
    assert peer_quality.validations(log) == [(454, 9.5), (908, 7.25), (-1, 7.5)]
    reports = ("[x] Starting training on CPU\n[x] Step 50/ 908; acc: 1; ppl: 9; xent: 2; lr: 0.0005; sents: 3200; "
               "bsz: 700/ 800/64; 100/120 tok/s;  30 sec;\n[x] Step 100/ 908; acc: 1; ppl: 9; xent: 2; lr: 0.0005; "
               "sents: 3200; bsz: 700/ 800/64; 900/1000 tok/s;  60 sec;\n[x] Step 150/ 908; acc: 1; ppl: 9; xent: 2; "
               "lr: 0.0005; sents: 3200; bsz: 700/ 800/64; 800/1100 tok/s;  90 sec;\n")
    assert peer_quality.target_tokens_per_s(reports) == 1050.0  # the first report of a call (start-up) left out
    refs = ["a b c", "d"]  # 4 + 2 target tokens with </s>
    assert peer_quality.test_ppl(-3.0, 2, refs) == pytest.approx(math.exp(6.0 / 6))
    with pytest.raises(RuntimeError, match="scored 3 sentences, the reference has 2"):
        peer_quality.test_ppl(-3.0, 3, refs)
    args = peer_quality.parse_args(["--work", str(tmp_path / "work"), "--patience", "2"])
    paths = {f"{split}.{lang}": tmp_path / f"{split}.{lang}" for split in ("train", "val") for lang in ("de", "en")}
    config = peer_quality.train_config("transformer", paths, args.work / "transformer", args)
    assert (config["layers"], config["hidden_size"], config["heads"], config["transformer_ff"]) == (3, 256, 4, 1024)
    assert config["label_smoothing"] == 0.0 and config["max_grad_norm"] == 5.0
    assert config["normalization"] == "sents"  # the toolkit's default; --normalization tokens is our token mean
    tokens = peer_quality.parse_args(["--work", str(tmp_path / "work"), "--normalization", "tokens"])
    assert peer_quality.train_config("transformer", paths, args.work, tokens)["normalization"] == "tokens"
    # the next onmt_train call: one epoch at the plateau schedule's rate, or one call to the end at a constant rate
    saved = {454: tmp_path / "model_step_454.pt", 908: tmp_path / "model_step_908.pt"}
    plateau = peer_quality.plateau_call(config, saved, [9.0, 9.5], 40, 3)
    assert (plateau["train_steps"], plateau["learning_rate"]) == (1362, config["learning_rate"] / 2)
    assert (plateau["train_from"], plateau["reset_optim"]) == (str(saved[908]), "keep_states")
    constant = peer_quality.constant_call(config, saved, [9.0, 9.5], 40, 3)
    assert (constant["train_steps"], constant["learning_rate"], constant["early_stopping"]) == (40 * 454, 5e-4, 3)
    assert (constant["train_from"], constant["reset_optim"]) == (str(saved[908]), "none")
    assert "train_from" not in peer_quality.constant_call(config, {}, [], 40, 3)
    # our trainer's plateau schedule: halve after each epoch that sets no new lowest, stop after `patience` in a row
    assert peer_quality.schedule([], 1.0) == (1.0, 0)
    assert peer_quality.schedule([9.0, 7.0, 7.5, 6.0, 6.5, 6.2], 1.0) == (0.125, 2)
    assert config["valid_steps"] == config["save_checkpoint_steps"] == 454
    assert config["data"]["valid"]["path_src"] == str(paths["val.de"])
    with pytest.raises(SystemExit):
        peer_quality.parse_args(["--work", str(peer_quality.decode_speed.ROOT / "runs")])


def test_peer_benchmark_trains_our_side_under_autocast() -> None:
    """benchmarks/peer.py's worker takes our steps under bfloat16 autocast when asked, on the real corpus."""
    from tests.support.paths import SHARED_DATA

    if not (SHARED_DATA / "multi30k" / "tok").is_dir():
        pytest.skip(f"needs Multi30k under {SHARED_DATA}")
    peer = load_script("benchmarks", "peer")
    args = peer.parse_args(["--_worker", "ours", "--steps", "1", "--warmup", "1", "--autocast", "bfloat16",
                            "--data-dir", str(SHARED_DATA)])
    run = peer.ours_worker(args)
    assert run["config"]["autocast"] == "bfloat16" and math.isfinite(run["mean_xent"]) and run["tgt_tokens"] > 0
    assert run["info"]["parameters_updated"] > 0
