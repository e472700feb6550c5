"""``pyro-attention train | evaluate | translate`` on the synthetic corpus with tiny sizes (a few seconds each).

Also: exact resumption (RNG states, optimiser state and batch order restored), refused checkpoints, config
files, atomic checkpoint writes, and one epoch on a 64-pair Multi30k subset when the shared data is present.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import os
import re
import sys
from pathlib import Path

import pytest
import torch

from pyro_attention import cli
from pyro_attention.tasks.translation import (
    CHECKPOINT_FORMAT,
    BeamSearch,
    TranslationConfig,
    evaluate,
    load_checkpoint,
    save_checkpoint,
    train,
    translate_lines,
)
from tests.support.paths import SHARED_DATA
from tests.support.signals import signal_on_step

TINY = [
    "--train-size", "16", "--val-size", "8", "--batch-size", "8",
    "--embedding", "8", "--encoder", "8", "--decoder", "16", "--attention", "8", "--quiet",
]  # fmt: skip


def _train(out: Path, *extra: str) -> int:
    return cli.main(["train", "--out", str(out), *TINY, *extra])


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A marginal-likelihood run: 1 epoch of 2 steps (16 pairs, batches of 8)."""
    out = tmp_path_factory.mktemp("marginal")
    assert _train(out, "--model", "marginal", "--epochs", "1") == 0
    return out


def _no_temp_files(folder: Path) -> bool:
    return not [name for name in os.listdir(folder) if name.endswith(".tmp")]


def test_train_two_steps(tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(out, "--model", "variational", "--estimator", "sample", "--epochs", "1") == 0
    printed = capsys.readouterr().out
    assert "dropped 0 of 16 pairs longer than 50" in printed
    assert "validation NLL/token" in printed and "PPL" in printed
    assert {p.name for p in out.iterdir()} == {"last.pt", "best.pt", "history.csv", ".lock"}
    state = torch.load(out / "last.pt", weights_only=True)
    assert state["format"] == CHECKPOINT_FORMAT
    for key in (
        "config",
        "package_version",
        "src_vocab",
        "tgt_vocab",
        "network",
        "optim",
        "rng",
        "trainer",
        "plateau",
        "history",
    ):
        assert key in state, key
    assert state["trainer"]["epoch"] == 1 and state["trainer"]["step"] == 2
    assert state["config"]["model"] == "variational" and state["config"]["estimator"] == "sample"
    assert set(state["rng"]) == {"torch", "python", "numpy"}
    assert state["optim"] and all(k.startswith("network$$$") for k in state["optim"])
    with open(out / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["kind"] for r in rows] == ["step", "step", "epoch"]
    assert float(rows[-1]["val_ppl"]) == pytest.approx(state["plateau"]["best"])
    assert 0 < float(rows[-1]["val_prior_entropy"]) < math.log(100) and rows[0]["val_prior_entropy"] == ""
    for column in ("val_posterior_entropy", "val_guide_entropy"):  # the variational pair has both, and the KL
        assert 0 < float(rows[-1][column]) < math.log(100) and rows[0][column] == ""
    assert float(rows[-1]["val_guide_kl"]) > 0
    assert "prior entropy" in printed and "guide entropy" in printed and "KL(guide || posterior)" in printed
    assert _no_temp_files(out)


@pytest.mark.parametrize("missing", [
    ("val_prior_entropy", "val_posterior_entropy", "val_guide_entropy", "val_guide_kl"),  # commit 4c6a17f
    ("val_posterior_entropy", "val_guide_entropy", "val_guide_kl"),  # commit 3471abd
])
def test_a_checkpoint_from_before_the_entropy_columns_resumes(tmp_path, missing):
    """Format 1 gained the alignment columns of its history over its life; the upgrade to format 2 gives a
    checkpoint without them empty cells for its past epochs, in the columns' places."""
    from pyro_attention.tasks.translation.callbacks import empty_history
    from pyro_attention.tasks.translation.migration import upgrade

    out = tmp_path / "old"
    assert _train(out, "--model", "marginal", "--epochs", "1") == 0
    state = _format_1(torch.load(out / "last.pt", weights_only=True))
    for column in missing:  # as a checkpoint of that commit has it
        state["history"]["epochs"].pop(column, None)
    torch.save(state, out / "last.pt")
    assert list(upgrade(state)["history"]["epochs"]) == list(empty_history()["epochs"])
    assert _train(out, "--model", "marginal", "--epochs", "2", "--resume") == 0
    with open(out / "history.csv", newline="") as f:
        epochs = [r for r in csv.DictReader(f) if r["kind"] == "epoch"]
    for column in missing:
        assert epochs[0][column] == "", column
    assert float(epochs[1]["val_prior_entropy"]) > 0 and float(epochs[1]["val_posterior_entropy"]) > 0
    assert epochs[1]["val_guide_entropy"] == ""  # the marginal pair has no guide


def test_evaluate(run, capsys, tmp_path):
    scores = tmp_path / "scores.json"
    hyps = tmp_path / "hyps.txt"
    code = cli.main(
        [
            "evaluate",
            str(run),
            "--size",
            "6",
            "--beam",
            "2",
            "--kmax",
            "2",
            "--quiet",
            "--json",
            str(scores),
            "--hypotheses",
            str(hyps),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "perplexity           " in printed and "(exact: enumeration" in printed
    assert "K-max perplexity" in printed and "K=2" in printed
    assert "prior entropy" in printed and "posterior entropy" in printed  # the marginal pair: no guide, no KL
    assert "guide entropy" not in printed and "KL(guide" not in printed
    assert "BLEU" in printed and "sacreBLEU signature  nrefs:1|case:mixed|eff:no|tok:13a" in printed
    saved = json.loads(scores.read_text())
    assert saved["ppl_exact"] and saved["ppl"] > 1 and saved["sentences"] == 6
    # K-max sums over fewer alignments: a lower bound on log p, so a higher perplexity
    assert saved["kmax_ppl"] >= saved["ppl"] - 1e-6
    assert 0 <= saved["prior_entropy"] <= torch.log(torch.tensor(8.0)).item()
    assert 0 <= saved["posterior_entropy"] <= torch.log(torch.tensor(8.0)).item() and saved["guide_kl"] is None
    assert 0 <= saved["bleu"] <= 100
    assert len(hyps.read_text().splitlines()) == 6


def test_evaluate_python_api_matches_cli_numbers(run):
    res = evaluate(run / "last.pt", "val", kmax=0, bleu=False)
    assert res.kmax_ppl is None and res.bleu is None
    state = torch.load(run / "last.pt", weights_only=True)
    assert res.ppl == pytest.approx(state["val"]["ppl"], rel=1e-5)  # the validation number of training


def test_translate_file_and_stdin(run, tmp_path, capsys, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("s1 s2 s3\n\ns0 s5 s6\n", encoding="utf-8")
    assert cli.main(["translate", str(run / "best.pt"), str(src), "--beam", "2"]) == 0
    from_file = capsys.readouterr().out.splitlines()
    assert len(from_file) == 3 and from_file[1] == "" and from_file[0]
    monkeypatch.setattr(sys, "stdin", io.StringIO("s1 s2 s3\n\ns0 s5 s6\n"))
    assert cli.main(["translate", str(run), "--beam", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == from_file
    assert translate_lines(run, ["s1 s2 s3"], search=BeamSearch(beam=2)) == from_file[:1]


def test_resume_is_exact(tmp_path, capsys):
    """1 epoch, then --resume --epochs 2 == 2 epochs in one go (same seed), with sampling and dropout."""
    opts = ["--model", "hard", "--estimator", "sample", "--dropout", "0.2", "--train-size", "24", "--lr", "0.05"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert _train(a, *opts, "--epochs", "1") == 0
    assert cli.main(["train", "--out", str(a), "--resume", "--epochs", "2", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "resumed from" in printed  # a longer run is a change like any other, and said
    assert "note: changed since the checkpoint, applied from here on: epochs 1 -> 2" in printed
    assert _train(b, *opts, "--epochs", "2") == 0
    sa, sb = (torch.load(p / "last.pt", weights_only=True) for p in (a, b))
    assert sa["trainer"]["epoch"] == sb["trainer"]["epoch"] == 2 and sa["trainer"]["step"] == sb["trainer"]["step"] == 6
    assert sa["network"].keys() == sb["network"].keys()
    for key in sa["network"]:
        assert torch.equal(sa["network"][key], sb["network"][key]), key
    assert sa["history"]["steps"]["loss"] == sb["history"]["steps"]["loss"]
    assert sa["history"]["epochs"]["val_ppl"] == sb["history"]["epochs"]["val_ppl"]
    assert sa["plateau"]["lr"] == sb["plateau"]["lr"]
    for name in sa["optim"]:
        for k, v in sa["optim"][name]["state"].get(0, {}).items():
            other = sb["optim"][name]["state"][0][k]
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(other)), (name, k)
    assert torch.equal(sa["rng"]["torch"], sb["rng"]["torch"])
    assert cli.main(["train", "--out", str(a), "--resume", "--epochs", "2", "--quiet"]) == 0  # already there
    assert "nothing to do: 2 of 2 epochs done (raise --epochs to train further)" in capsys.readouterr().out
    assert torch.load(a / "last.pt", weights_only=True)["trainer"]["step"] == 6


def test_resume_refuses_another_model_or_vocabulary(run, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--out", str(run), "--resume", "--model", "soft", "--quiet"])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert "refusing to resume" in err and "model: checkpoint 'marginal', this run 'soft'" in err
    with pytest.raises(SystemExit):
        cli.main(["train", "--out", str(run), "--resume", "--min-freq", "2", "--quiet"])
    assert "source vocabulary: checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train", "--out", str(run), "--resume", "--encoder", "9", "--quiet"])
    assert "encoder: checkpoint 8, this run 9" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a fresh run never overwrites a checkpoint silently
        _train(run, "--model", "marginal", "--epochs", "1")
    assert "--resume" in capsys.readouterr().err


def test_config_files(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "hard"\nepochz = 3\n', encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"unknown config key\(s\) 'epochz' \(did you mean 'epochs'\?\); allowed keys: data, data_dir"
    ):
        TranslationConfig.from_file(bad)
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--config", str(bad)])
    assert e.value.code == 2 and "epochz" in capsys.readouterr().err
    good = tmp_path / "run.json"
    good.write_text(json.dumps({"model": "hard", "estimator": "sample", "batch-size": 4, "epochs": 7}))
    config = TranslationConfig.from_file(good, epochs=2)
    assert (config.model, config.estimator, config.batch_size, config.epochs) == ("hard", "sample", 4, 2)
    assert config.out_dir == Path("runs/hard-sample")
    toml = tmp_path / "run.toml"
    toml.write_text('model = "variational"\nlr = 1\ndropout = 0.1\n', encoding="utf-8")
    config = TranslationConfig.from_file(toml)
    assert config.estimator == "enum" and config.lr == 1.0 and isinstance(config.lr, float)
    typed = tmp_path / "typed.json"
    typed.write_text(json.dumps({"epochs": "ten"}))
    with pytest.raises(ValueError, match="'epochs' must be int"):
        TranslationConfig.from_file(typed)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "sof"], "argument --model: invalid choice: 'sof'"),
        (["--model", "soft", "--estimator", "enum"], "argument --estimator: model 'soft' has no estimator"),
        (["--estimator", "exact", "--model", "hard"], "argument --estimator: invalid choice: 'exact'"),
        (["--epochs", "0"], "argument --epochs: must be an integer >= 1"),
        (["--dropout", "1.5"], "argument --dropout: must be a number in [0, 1)"),
        # a flag refuses what its config field refuses, in the same words (the flag took inf, the config refused it)
        (["--clip-norm", "inf"], "argument --clip-norm: must be a number > 0 and finite, got 'inf'"),
        (["--checkpoint-minutes", "nan"], "argument --checkpoint-minutes: must be a number >= 0 and finite, got 'nan'"),
        (["--data", "iwslt14"], "--train-split valid"),
        (["--data", "multi30k", "--src", "xx"], "argument --src: src must be one of de, en, fr, cs"),
        (["--warmup-steps", "3"], "argument --warmup-steps: model 'soft' has no warm-up guide; only relaxed"),
    ],
)
def test_bad_options_are_argparse_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", *argv])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_relaxed_reports_a_bound(tmp_path, capsys):
    out = tmp_path / "relaxed"
    assert _train(out, "--model", "relaxed", "--epochs", "1", "--num-samples", "2") == 0
    assert "PPL bound (importance-weighted" in capsys.readouterr().out
    assert cli.main(["evaluate", str(out), "--size", "4", "--beam", "1", "--num-samples", "2", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "perplexity bound" in printed and "K-max perplexity     -" in printed
    assert re.search(r"perplexity bound +[0-9.]+ ± [0-9.]+  \(Monte Carlo s\.e\.; ESS >= [0-9]+; (max k-hat -?[0-9.]+|"
                     r"k-hat undefined)", printed), printed
    # 2 draws per token are too few to fit k-hat (LogLikelihood.reliable's rule); by default evaluation draws at least
    # 100 whatever the training config's --num-samples (2 here)
    assert "UNRELIABLE (K=2 draws: k-hat needs at least 25) -- use --num-samples 25 or more" in printed
    scores = tmp_path / "scores.json"
    assert cli.main(["evaluate", str(out), "--size", "4", "--beam", "1", "--quiet", "--json", str(scores)]) == 0
    assert "K=100," in json.loads(scores.read_text())["ppl_method"] and "UNRELIABLE (K=" not in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli.main(["evaluate", str(out), "--size", "4", "--rule", "marginal", "--quiet"])
    assert e.value.code == 2 and "argument --rule" in capsys.readouterr().err


def test_checkpoint_writes_are_atomic(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint({"x": torch.ones(3)}, path)

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"x": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.equal(torch.load(path, weights_only=True)["x"], torch.ones(3))
    assert os.listdir(tmp_path) == ["last.pt"]


def test_failed_save_during_training_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    config = TranslationConfig(
        train_size=16,
        val_size=8,
        batch_size=8,
        embedding=8,
        encoder=8,
        decoder=16,
        attention=8,
        epochs=1,
        out=str(tmp_path),
    )
    train(config, progress=False, log=None)
    before = torch.load(tmp_path / "last.pt", weights_only=True)

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError):
        train(config.replace(epochs=2), progress=False, resume=True, log=None)
    monkeypatch.undo()
    after = load_checkpoint(tmp_path / "last.pt")
    assert after.state["trainer"]["epoch"] == before["trainer"]["epoch"] == 1
    assert all(torch.equal(after.state["network"][k], before["network"][k]) for k in before["network"])
    assert _no_temp_files(tmp_path)


@pytest.mark.parametrize("minutes, every, mid_epoch", [
    (2.0, 0, [(2, 2), (4, 4), (8, 2), (10, 4)]),  # a step takes a minute; the clock restarts at each epoch's write
    (0.0, 4, [(4, 4), (8, 2)]),  # every 4th step inside an epoch
    (3.0, 4, [(3, 3), (4, 4), (8, 2), (11, 5)]),  # both; either kind of write restarts the clock
])
def test_checkpoints_inside_an_epoch_by_steps_and_by_minutes(tmp_path, monkeypatch, minutes, every, mid_epoch):
    """``checkpoint_minutes`` writes ``last.pt`` inside an epoch once that many minutes have passed since the last
    write (an epoch's end included); ``checkpoint_every`` every N steps.  The clock is the trainer's, faked here to
    a minute a step: 6 steps an epoch, 2 epochs."""
    from pyro_attention.inference.loop import Trainer
    from pyro_attention.tasks.translation import callbacks

    monkeypatch.setattr(Trainer, "elapsed", property(lambda trainer: 60.0 * (trainer.step - trainer.first_step)))
    original_fit = Trainer.fit

    def fit(trainer):
        trainer.first_step = trainer.step
        return original_fit(trainer)

    monkeypatch.setattr(Trainer, "fit", fit)
    writes = []
    monkeypatch.setattr(callbacks, "save_checkpoint",
                        lambda state, path: writes.append((Path(path).name, state["trainer"]["step"],
                                                          state["trainer"]["position"])))
    config = TranslationConfig(train_size=48, val_size=8, batch_size=8, embedding=8, encoder=8, decoder=16,
                               attention=8, epochs=2, out=str(tmp_path), checkpoint_minutes=minutes,
                               checkpoint_every=every)
    train(config, progress=False, log=None)
    assert [(step, position) for name, step, position in writes if position] == mid_epoch
    assert [step for name, step, position in writes if name == "last.pt" and not position] == [6, 12]


def test_keep_gib_reaches_the_enumeration_kernel_and_only_changes_rounding(tmp_path, monkeypatch):
    """``keep_gib`` is the kernel's ``keep_bytes`` (GiB of log-probabilities kept for the backward pass); everything
    kept or everything recomputed, the gradients of a training step are the same up to float rounding."""
    import pyro

    from pyro_attention.distributions import enumeration
    from pyro_attention.tasks.translation.corpora import build_pair, build_vocabs, load_corpora, make_batches

    seen = []
    real = enumeration.observed_log_softmax

    def spy(hidden, weight, bias, target, rows, keep_bytes):
        seen.append(keep_bytes)
        return real(hidden, weight, bias, target, rows, keep_bytes)

    monkeypatch.setattr(enumeration, "observed_log_softmax", spy)
    config = TranslationConfig(model="hard", estimator="enum", train_size=16, val_size=8, batch_size=8, embedding=8,
                               encoder=8, decoder=16, attention=8, epochs=1, keep_gib=0.5, out=str(tmp_path))
    train(config, progress=False, log=None)
    assert seen and set(seen) == {2**29}
    corpora = load_corpora(config, None)
    src_vocab, tgt_vocab = build_vocabs(config, corpora.train)
    batch = make_batches(corpora.train, src_vocab, tgt_vocab, 8)[0]
    pyro.clear_param_store()
    network, pair = build_pair(config, src_vocab, tgt_vocab)
    grads = {}
    for keep in (0, 2**30):
        network.keep_bytes = keep
        pair.elbo().loss_and_grads(pair.model, pair.guide, batch)
        grads[keep] = {name: p.grad.clone() for name, p in network.named_parameters() if p.grad is not None}
        network.zero_grad(set_to_none=True)
    assert grads[0].keys() == grads[2**30].keys() and grads[0]
    for name, g in grads[0].items():
        assert torch.allclose(g, grads[2**30][name], rtol=1e-4, atol=1e-7), name
    with pytest.raises(ValueError, match=r"keep_gib must be >= 0 and finite, got -1"):
        TranslationConfig(keep_gib=-1)


def test_checkpoint_minutes_is_checked():
    with pytest.raises(ValueError, match=r"checkpoint_minutes must be >= 0 and finite, got -1"):
        TranslationConfig(checkpoint_minutes=-1)
    with pytest.raises(ValueError, match=r"config key 'checkpoint_minutes' must be float, got '20 min'"):
        TranslationConfig(checkpoint_minutes="20 min")


def _multi30k_root() -> Path | None:
    return SHARED_DATA if (SHARED_DATA / "multi30k" / "tok").is_dir() else None  # $PYRO_ATTENTION_DATA first


@pytest.mark.skipif(_multi30k_root() is None, reason=f"Multi30k not found under {SHARED_DATA} or $PYRO_ATTENTION_DATA")
def test_multi30k_one_epoch_on_64_pairs(tmp_path, capsys):
    root = _multi30k_root()
    out = tmp_path / "m30k"
    code = cli.main(
        [
            "train",
            "--data",
            "multi30k",
            "--data-dir",
            str(root),
            "--train-size",
            "64",
            "--val-size",
            "16",
            "--epochs",
            "1",
            "--batch-size",
            "32",
            "--embedding",
            "8",
            "--encoder",
            "8",
            "--decoder",
            "16",
            "--attention",
            "8",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "Multi30k train de-en" in printed and "64 pairs; dropped" in printed
    assert "of 29000 pairs longer than 50" in printed
    assert (out / "best.pt").is_file()
    res = evaluate(out, "test", size=4, search=BeamSearch(beam=1), kmax=0)
    assert res.sentences == 4 and "case:lc" in res.bleu_signature
    assert res.ppl_exact and res.ppl > 1


def test_inspect_end_to_end_on_synthetic(tmp_path, capsys):
    """train -> inspect: NetCDF with the tokens as coordinates, heatmaps, the diagnostics table."""
    from pyro_attention.inference import load_netcdf

    run = tmp_path / "run"
    assert (
        cli.main(
            [
                "train",
                "--model",
                "variational",
                "--epochs",
                "1",
                "--train-size",
                "32",
                "--val-size",
                "8",
                "--batch-size",
                "8",
                "--embedding",
                "8",
                "--encoder",
                "8",
                "--decoder",
                "8",
                "--attention",
                "8",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    out = tmp_path / "post.nc"
    assert (
        cli.main(
            [
                "inspect",
                str(run),
                "--out",
                str(out),
                "--plots",
                str(tmp_path / "plots"),
                "--size",
                "4",
                "--num-samples",
                "10",
                "--num-plots",
                "2",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| VariationalAttention (enum) |" in printed
    idata = load_netcdf(out)
    assert idata.constant_data["target_label"].shape[0] == 4
    assert (tmp_path / "plots" / "alignment_1.png").exists()
    with pytest.raises(SystemExit):
        cli.main(["inspect", str(tmp_path / "missing"), "--out", str(out)])


@pytest.mark.parametrize("attention_type", ["general", "mlp"])
def test_product_output_checkpoint_round_trip(tmp_path, attention_type):
    """``--output product --attention-type ...`` trains, is stored in the checkpoint and comes back exactly."""
    from pyro_attention.networks.output import ProductOfExperts

    out = tmp_path / "product"
    extra = ("--model", "marginal", "--epochs", "1", "--output", "product", "--attention-type", attention_type)
    assert _train(out, *extra) == 0
    ckpt = load_checkpoint(out / "last.pt")
    assert ckpt.config.output == "product" and ckpt.config.attention_type == attention_type
    assert isinstance(ckpt.network.head, ProductOfExperts) and ckpt.network.score.name == attention_type
    res = evaluate(out / "last.pt", "val", kmax=0, bleu=False)
    state = torch.load(out / "last.pt", weights_only=True)
    assert res.ppl_exact and res.ppl == pytest.approx(state["val"]["ppl"], rel=1e-5)
    # resuming with another output layer is refused, naming it
    with pytest.raises(ValueError, match="output: checkpoint 'product', this run 'tanh'"):
        train(TranslationConfig.from_dict({**ckpt.config.to_dict(), "output": "tanh", "epochs": 2}), resume=True)


def test_transformer_trains_evaluates_translates_and_round_trips(tmp_path, capsys):
    """``--network transformer`` trains every option into the checkpoint, comes back exactly (its exact validation
    perplexity recomputed from the checkpoint), translates, and resuming as an LSTM is refused naming the key."""
    from pyro_attention.networks import ProductOfExperts, TransformerSeq2Seq

    out = tmp_path / "transformer"
    extra = ("--model", "variational", "--epochs", "1", "--network", "transformer", "--heads", "2", "--feedforward",
             "16", "--output", "product", "--embedding-values")
    tiny = ["--train-size", "16", "--val-size", "8", "--batch-size", "8", "--embedding", "8", "--attention", "8",
            "--quiet"]
    assert cli.main(["train", "--out", str(out), *tiny, *extra]) == 0
    ckpt = load_checkpoint(out / "last.pt")
    assert isinstance(ckpt.network, TransformerSeq2Seq) and isinstance(ckpt.network.head, ProductOfExperts)
    assert ckpt.network.embedding_values and ckpt.config.attention_type == "scaled" and ckpt.network.heads == 2
    res = evaluate(out / "last.pt", "val", kmax=0, bleu=False)
    state = torch.load(out / "last.pt", weights_only=True)
    assert res.ppl_exact and res.ppl == pytest.approx(state["val"]["ppl"], rel=1e-5)
    capsys.readouterr()
    (tmp_path / "in.txt").write_text("s1 s2 s3\ns4 s5\n")
    assert cli.main(["translate", str(out), str(tmp_path / "in.txt"), "--beam", "2", "--rule", "marginal"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    with pytest.raises(ValueError, match="network: checkpoint 'transformer', this run 'lstm'"):
        train(TranslationConfig.from_dict({**ckpt.config.to_dict(), "network": "lstm", "heads": 4, "feedforward": 256,
                                           "embedding_values": False, "epochs": 2}), resume=True)


def test_toolkit_decoder_options_checkpoint_round_trip(tmp_path):
    """``--input-feed attentional --bridge final --init 0.1`` (OpenNMT-py's decoder) train, are stored in the
    checkpoint, come back exactly, and resuming with another choice is refused naming it."""
    out = tmp_path / "toolkit"
    extra = ("--epochs", "1", "--encoder", "8", "--decoder", "16", "--input-feed", "attentional", "--bridge", "final",
             "--init", "0.1")
    assert _train(out, *extra) == 0
    ckpt = load_checkpoint(out / "last.pt")
    assert (ckpt.config.input_feed, ckpt.config.bridge, ckpt.config.init) == ("attentional", "final", 0.1)
    assert (ckpt.network.feed.name, ckpt.network.bridge.name) == ("attentional", "final")
    res = evaluate(out / "last.pt", "val", kmax=0, bleu=False)
    state = torch.load(out / "last.pt", weights_only=True)
    assert res.ppl == pytest.approx(state["val"]["ppl"], rel=1e-5)
    with pytest.raises(ValueError, match="input_feed: checkpoint 'attentional', this run 'context'"):
        train(TranslationConfig.from_dict({**ckpt.config.to_dict(), "input_feed": "context", "epochs": 2}),
              resume=True)
    with pytest.raises(ValueError, match="bridge 'final' needs decoder = 2 x encoder"):
        TranslationConfig(encoder=8, decoder=12, bridge="final")
    with pytest.raises(ValueError, match="init must be in"):
        TranslationConfig(init=2.0)


def _format_1(state: dict) -> dict:
    """A checkpoint of today's format as format 1 wrote it before the Seq2Seq parts were objects and before the
    entries format 2 always has: the counters flat, weights, Pyro param store and Adam state under the old names,
    the later entries absent."""
    from pyro_attention.tasks.translation.migration import SEQ2SEQ_RENAMES

    def old_name(name: str) -> str:
        return next((o + name[len(n):] for o, n in SEQ2SEQ_RENAMES.items() if name.startswith(n)), name)

    state = copy.deepcopy(state)
    trainer, plateau = state.pop("trainer"), state.pop("plateau")
    state.update(epoch=trainer["epoch"], step=trainer["step"], best_metric=plateau["best"],
                 best_epoch=plateau["best_epoch"], bad_epochs=plateau["bad"], lr=plateau["lr"])
    state = {k: v for k, v in state.items() if k not in ("epoch_batches", "world_size", "rng_ranks")}
    state["format_version"] = 1
    state["network"] = {old_name(k): v for k, v in state["network"].items()}
    for store in ("param_store", "optim"):  # Pyro's names: "network$$$score.att_h.weight"
        state[store] = {"$$$".join(old_name(part) for part in k.split("$$$")): v for k, v in state[store].items()}
    state["history"]["epochs"].pop("val_guide_kl")
    return state


def test_a_format_1_checkpoint_is_upgraded_on_reading(tmp_path):
    """Reading a checkpoint upgrades it format by format (``migration.upgrade``): a format-1 file evaluates to the
    same numbers as the format-2 file it was made from; a format newer than the package is refused by name."""
    from pyro_attention.tasks.translation.migration import FORMAT_VERSION, upgrade

    out = tmp_path / "run"
    assert _train(out, "--model", "marginal", "--output", "product", "--input-feed", "attentional", "--epochs",
                  "1") == 0
    state = torch.load(out / "last.pt", weights_only=True)
    assert state["format_version"] == FORMAT_VERSION == 3
    old = _format_1(state)
    assert {"init_h.weight", "feed_proj.weight", "att_h.weight"} <= set(old["network"])
    upgraded = upgrade(dict(old))
    assert upgraded.keys() == state.keys() and upgraded["network"].keys() == state["network"].keys()
    assert upgraded["trainer"] == {**state["trainer"], "position": 0, "epoch_loss": 0.0, "epoch_tokens": 0}
    assert upgraded["plateau"] == state["plateau"]
    assert upgraded["optim"].keys() == state["optim"].keys() and upgraded["epoch_batches"] == state["epoch_batches"]
    assert upgraded["history"]["epochs"]["val_guide_kl"] == [None]
    torch.save(old, tmp_path / "old.pt")
    same = evaluate(out / "last.pt", "val", bleu=False).ppl
    assert evaluate(tmp_path / "old.pt", "val", bleu=False).ppl == same
    with pytest.raises(ValueError, match=r"new\.pt: checkpoint format 4; this pyro-attention reads formats 1 to 3"):
        torch.save({**state, "format_version": 4}, tmp_path / "new.pt")
        load_checkpoint(tmp_path / "new.pt")


def test_a_run_saved_in_format_1_resumes_exactly(tmp_path):
    """A ``last.pt`` of format 1 (weights, Pyro param store and Adam state under ``att_h.*``, ``out.*``,
    ``init_h.*``, ``feed_proj.*``; no position, epoch loss or process count) resumes as if it had been written
    today: 1 epoch + resume == 2 epochs, Adam state included."""
    opts = ["--model", "marginal", "--output", "product", "--input-feed", "attentional", "--dropout", "0.2",
            "--train-size", "24", "--lr", "0.05"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert _train(a, *opts, "--epochs", "1") == 0
    old = _format_1(torch.load(a / "last.pt", weights_only=True))
    assert "network$$$feed_proj.weight" in old["optim"] and "network$$$init_h.bias" in old["param_store"]
    torch.save(old, a / "last.pt")
    assert cli.main(["train", "--out", str(a), "--resume", "--epochs", "2", "--quiet"]) == 0
    assert _train(b, *opts, "--epochs", "2") == 0
    sa, sb = (torch.load(p / "last.pt", weights_only=True) for p in (a, b))
    assert sa["network"].keys() == sb["network"].keys() and sa["optim"].keys() == sb["optim"].keys()
    for key in sa["network"]:
        assert torch.equal(sa["network"][key], sb["network"][key]), key
    assert sa["optim"]["network$$$feed.proj.weight"]["state"][0]["step"] == 6  # the Adam state of epoch 1 went on
    for name in sa["optim"]:
        for k, v in sa["optim"][name]["state"].get(0, {}).items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(sb["optim"][name]["state"][0][k])), (name, k)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_after_the_step_writes_last_pt_and_the_run_resumes_exactly(tmp_path, monkeypatch, signame):
    import signal

    from pyro_attention.tasks.translation import TrainingInterrupted

    base = dict(train_size=24, val_size=8, batch_size=8, embedding=8, encoder=8, decoder=16, attention=8, epochs=2,
                model="marginal")
    whole = train(TranslationConfig.from_dict({**base, "out": str(tmp_path / "whole")}), progress=False, log=None)
    config = TranslationConfig.from_dict({**base, "out": str(tmp_path / "cut")})
    with monkeypatch.context() as mp:
        signal_on_step(mp, getattr(signal, signame), at=4)  # the first step of epoch 2 (3 batches an epoch)
        with pytest.raises(TrainingInterrupted) as stop:
            train(config, progress=False, log=None)
    assert stop.value.signal_name == signame and stop.value.step == 4
    state = torch.load(tmp_path / "cut" / "last.pt", weights_only=True)
    assert state["trainer"] == {**state["trainer"], "step": 4, "position": 1, "epoch": 1}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored
    resumed = train(config, progress=False, resume=True, log=None)
    assert resumed.step == whole.step
    after = resumed.network.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in whole.network.state_dict().items())


def test_ctrl_c_on_the_command_line_exits_130_and_prints_the_resume_command(tmp_path, monkeypatch, capsys):
    import signal

    out = tmp_path / "run"
    signal_on_step(monkeypatch, signal.SIGINT, at=1)
    assert _train(out, "--epochs", "2") == 130
    err = capsys.readouterr().err
    assert "SIGINT: stopped after step 1" in err and "Continue with:" in err
    command = err.split("Continue with:")[1].strip()
    assert command.startswith("pyro-attention train --out") and command.endswith("--epochs 2 --resume")
    monkeypatch.undo()
    assert _train(out, "--epochs", "2", "--resume") == 0
    # the last step of the last epoch: the run is complete, nothing to resume, exit 0
    signal_on_step(monkeypatch, signal.SIGINT, at=2)
    assert _train(tmp_path / "done", "--epochs", "1") == 0


def test_a_second_signal_abandons_the_step(tmp_path, monkeypatch):
    import signal

    config = TranslationConfig.from_dict(dict(train_size=16, val_size=8, batch_size=8, embedding=8, encoder=8,
                                              decoder=16, attention=8, epochs=1, out=str(tmp_path / "r")))
    signal_on_step(monkeypatch, signal.SIGINT, at=1, times=2)
    with pytest.raises(KeyboardInterrupt, match="second SIGINT: abandoned"):
        train(config, progress=False, log=None)
    assert not (tmp_path / "r" / "last.pt").exists()  # nothing half-written


def test_a_second_writer_into_the_same_folder_is_refused_with_the_holders_pid(tmp_path):
    """While one process trains into --out, another is refused (naming the holder); after it, the folder is free."""
    import fcntl

    out = tmp_path / "busy"
    out.mkdir()
    with open(out / ".lock", "w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        holder.write("4242\n")
        holder.flush()
        config = TranslationConfig.from_dict(dict(train_size=16, val_size=8, batch_size=8, embedding=8, encoder=8,
                                                  decoder=16, attention=8, epochs=1, out=str(out)))
        # flock is per open file description: this process's second open is refused like another process's
        with pytest.raises(FileExistsError, match=r"being written by another training process \(PID 4242"):
            train(config, progress=False, log=None)
    assert train(config, progress=False, log=None).epoch == 1


def test_resume_with_a_new_lr_applies_it_and_says_so(tmp_path, capsys):
    out = tmp_path / "lr"
    assert _train(out, "--epochs", "1", "--patience", "0") == 0
    assert _train(out, "--epochs", "2", "--patience", "0", "--lr", "0.01", "--clip-norm", "2", "--resume") == 0
    printed = capsys.readouterr().out
    assert "changed since the checkpoint, applied from here on: " in printed and "lr 0.003 -> 0.01" in printed
    state = torch.load(out / "last.pt", weights_only=True)
    groups = [g for s in state["optim"].values() for g in s["param_groups"]]
    assert groups and all(g["clip_norm"] == 2 for g in groups)
    assert all(g["lr"] in (0.01, 0.01 * 0.5) for g in groups) and state["plateau"]["lr"] in (0.01, 0.005)


def test_an_ignored_sigint_stays_ignored(tmp_path, monkeypatch):
    """A background job started by a shell ignores SIGINT: training must not start catching it."""
    import signal

    seen = {}
    monkeypatch.setattr(signal, "getsignal", lambda sig: signal.SIG_IGN if sig == signal.SIGINT else None)
    real = signal.signal

    def recording(sig, handler):  # noqa: ANN001, ANN202
        seen.setdefault(sig, handler)
        return real(sig, handler)

    monkeypatch.setattr(signal, "signal", recording)
    config = TranslationConfig.from_dict(dict(train_size=16, val_size=8, batch_size=8, embedding=8, encoder=8,
                                              decoder=16, attention=8, epochs=1, out=str(tmp_path / "r")))
    train(config, progress=False, log=None)
    assert signal.SIGINT not in seen and signal.SIGTERM in seen


def test_device_option(tmp_path):
    """``--device``: checked where it enters, naming what this machine has; the run's tensors live there and its
    checkpoints are device-free (a GPU run resumes and evaluates on a CPU)."""
    from pyro_attention.tasks.translation import resolve_device
    from pyro_attention.tasks.translation.runner import row_config

    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="'gpu' is not a device name; use cpu, cuda, cuda:N or mps"):
        resolve_device("gpu")
    with pytest.raises(ValueError, match="device: 'meta' is not supported for training"):
        TranslationConfig(device="meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="'cuda' is not available on this machine"):
            TranslationConfig(device="cuda")
        with pytest.raises(SystemExit):
            _train(tmp_path / "cuda", "--device", "cuda")
    out = tmp_path / "cpu"
    assert _train(out, "--device", "cpu", "--epochs", "1") == 0
    state = torch.load(out / "last.pt", weights_only=True)
    assert state["config"]["device"] == "cpu"
    tensors = [t for t in state["network"].values()] + list(state["param_store"].values())
    assert all(t.device.type == "cpu" for t in tensors)
    ckpt = load_checkpoint(out / "last.pt", device="cpu")
    assert next(ckpt.network.parameters()).device.type == "cpu"
    res = evaluate(ckpt, "val", kmax=0, bleu=False, device="cpu")
    assert res.ppl == pytest.approx(state["val"]["ppl"], rel=1e-5)
    config = row_config({"data": "synthetic", "device": "cpu"}, {"label": "a"}, tmp_path, {"threads": 2})
    assert config.threads == 2 and config.out_dir == tmp_path / "a"


def test_init_from_starts_a_fresh_run_from_another_runs_network(tmp_path, capsys):
    """``--init-from``: a variational run starts from a marginal run's network (every weight of the same name and
    shape copied -- here all but the other output layer's -- the rest as initialised, said in the log); other
    vocabularies, other sizes and a missing file are refused, naming what differs; a resumed run ignores it."""
    from pyro_attention.tasks.translation import build_pair, build_vocabs, load_corpora, warm_start

    source = tmp_path / "marginal"
    assert _train(source, "--model", "marginal", "--epochs", "1", "--output", "product") == 0
    saved = load_checkpoint(source / "last.pt").network.state_dict()
    config = TranslationConfig(model="variational", train_size=16, val_size=8, embedding=8, encoder=8, decoder=16,
                               attention=8)
    vocabs = build_vocabs(config, load_corpora(config, log=None).train)
    _, pair = build_pair(config, *vocabs)
    before = {k: v.clone() for k, v in pair.network.state_dict().items()}
    loaded, fresh = warm_start(pair, source, *vocabs)  # a run folder: its best.pt
    state = pair.network.state_dict()
    assert set(loaded) == set(saved) - {n for n in saved if n.startswith("head.")}
    assert set(fresh) == {n for n in state if n.startswith("head.")} and fresh  # the tanh layer's own weights
    assert all(torch.equal(state[n], saved[n]) for n in loaded)
    assert all(torch.equal(state[n], before[n]) for n in fresh)
    # through the command line: the log says what was copied
    capsys.readouterr()
    args = ["--model", "variational", "--epochs", "1", "--init-from", str(source / "last.pt")]
    assert cli.main(["train", "--out", str(tmp_path / "va"), *TINY[:-1], *args]) == 0
    assert re.search(rf"init_from {re.escape(str(source / 'last.pt'))}: {len(loaded)} of {len(state)} weights "
                     r"copied; as initialised: head\.", capsys.readouterr().out)
    # a resumed run ignores it (the checkpoint has the weights), even when the file has gone
    (source / "last.pt").rename(source / "gone.pt")
    assert _train(tmp_path / "va", *args[:-4], "--epochs", "2", "--resume", "--init-from", str(source / "last.pt")) == 0
    (source / "gone.pt").rename(source / "last.pt")
    other = TranslationConfig(model="variational", train_size=40, val_size=8)
    other_vocabs = build_vocabs(other, load_corpora(other, log=None).train)
    with pytest.raises(ValueError, match="init_from needs this run's vocabularies: source vocabulary: checkpoint"):
        warm_start(build_pair(other, *other_vocabs)[1], source, *other_vocabs)
    wider = TranslationConfig(model="variational", train_size=16, val_size=8, embedding=12, encoder=8, decoder=16,
                              attention=8)
    with pytest.raises(ValueError, match=r"init_from: weights \d+ of another size \(src_embed\.weight is \(\d+, 8\) "
                                         r"there, \(\d+, 12\) here.*; give this run the checkpoint's sizes "
                                         r"\(--embedding 8 --encoder 8 --decoder 16 --attention 8"):
        warm_start(build_pair(wider, *vocabs)[1], source / "last.pt", *vocabs)
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        warm_start(pair, tmp_path / "nowhere.pt", *vocabs)
    capsys.readouterr()
    with pytest.raises(SystemExit, match="1"):
        _train(tmp_path / "x", "--init-from", str(tmp_path / "nowhere.pt"))
    captured = capsys.readouterr()
    assert "nowhere.pt: no such checkpoint (init_from)" in captured.err and "vocabularies" not in captured.out


def test_guide_steps_train_the_inference_network_alone(tmp_path, capsys):
    """``--guide-steps K``: K steps of the variational pair's inference network alone before each step (the model's
    weights untouched by them), during the first ``--guide-steps-for`` steps; a pair without a guide of its own
    is refused, naming the option."""
    import pyro

    from pyro_attention.inference import SubsetOptim
    from pyro_attention.inference.distributed import DataParallelSVI
    from pyro_attention.tasks.translation import build_pair, build_vocabs, load_corpora, make_batches
    from pyro_attention.tasks.translation.training import FusedClippedAdam

    config = TranslationConfig(model="variational", train_size=16, val_size=8, embedding=8, encoder=8, decoder=16,
                               attention=8)
    corpora = load_corpora(config, log=None)
    vocabs = build_vocabs(config, corpora.train)
    net, pair = build_pair(config, *vocabs)
    pyro.clear_param_store()
    for name, module in pair.modules().items():
        pyro.module(name, module)
    own = {id(p) for p in pair.guide_parameters()}
    assert own and own < {id(p) for p in net.parameters()}
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    optim = FusedClippedAdam({"lr": 0.01, "clip_norm": 5.0})
    DataParallelSVI(pair.model, pair.guide, SubsetOptim(optim, pair.guide_parameters()), pair.elbo()).step(
        make_batches(corpora.train, *vocabs, 8)[0])
    moved = {n for n, p in net.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert moved == {n for n, p in net.named_parameters() if id(p) in own}
    assert all(p.grad is None for p in net.parameters())
    # end to end: 2 guide steps before each of the first step's; the same run without them differs
    args = ["--model", "variational", "--epochs", "1"]
    assert _train(tmp_path / "g", *args, "--guide-steps", "2", "--guide-steps-for", "1") == 0
    assert _train(tmp_path / "plain", *args) == 0
    with_steps, plain = (load_checkpoint(tmp_path / d / "last.pt").network.state_dict() for d in ("g", "plain"))
    assert not torch.equal(with_steps["q_bilinear.weight"], plain["q_bilinear.weight"])
    with pytest.raises(ValueError, match="guide_steps_for: 3 steps of what"):
        TranslationConfig(model="variational", guide_steps_for=3)
    with pytest.raises(ValueError, match="guide_steps: MarginalLikelihood has no parameters of its guide's own"):
        train(TranslationConfig(model="marginal", train_size=16, val_size=8, embedding=8, encoder=8, decoder=16,
                                attention=8, epochs=1, guide_steps=1, out=str(tmp_path / "m")), progress=False,
              log=None)


def test_load_split_generates_the_configured_synthetic_size():
    """``load_split(config, "test")`` of a synthetic config generates the config's ``test_size`` (as ``evaluate``
    does), not the generator's default."""
    from pyro_attention.tasks.translation import load_split

    config = TranslationConfig(test_size=7, val_size=5)
    assert len(load_split(config, "test", references=False).source) == 7
    assert len(load_split(config, "val", references=False).source) == 5
    assert len(load_split(config, "test", size=3, references=False).source) == 3
