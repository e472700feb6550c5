"""``pyro-attention experiment``: rows trained, evaluated and tabulated; interrupted rows resume exactly."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from pyro_attention import cli
from pyro_attention.tasks.translation import TranslationConfig
from pyro_attention.tasks.translation.runner import (
    ROW_FIELDS,
    ExperimentFileError,
    merge_rows,
    read_experiment,
    run_experiment,
)
from pyro_attention.tasks.translation.status import experiment_curves, experiment_status, status_table
from tests.support.autocast import bfloat16_products
from tests.support.paths import REPO

TINY = """
[shared]
data = "synthetic"
train_size = 16
val_size = 8
test_size = 6
batch_size = 8
embedding = 8
encoder = 8
decoder = 16
attention = 8
epochs = 2
patience = 0

[[rows]]
label = "soft"
model = "soft"

[[rows]]
label = "marginal-product"
model = "marginal"
output = "product"
attention_type = "general"
"""
TIMING = {"wall_s", "tokens_per_s", "decode_sentences_per_s", "wall_s_per_epoch"}


def _write(tmp_path: Path, text: str = TINY) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return path


def _numbers(table: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING and k != "config"} for row in table]


def test_rows_trained_evaluated_and_resumed_exactly(tmp_path):
    path = _write(tmp_path)
    whole = run_experiment(path, tmp_path / "whole", progress=False, log=None)
    assert [r["label"] for r in whole] == ["soft", "marginal-product"]
    assert set(ROW_FIELDS) <= set(whole[0])
    soft, marginal = whole
    assert soft["ppl_exact"] and marginal["ppl_exact"] and marginal["output"] == "product"
    assert soft["bleu_kmax5"] is None and marginal["bleu_kmax5"] is not None
    assert 0 <= marginal["bleu"] <= 100 and 0 <= marginal["bleu_tok_none"] <= 100
    assert soft["epochs"] == 2 and soft["train_sentences"] == 16
    # the same table over two sittings: one epoch per row, then the rest
    runs = tmp_path / "split"
    assert run_experiment(path, runs, max_epochs=1, progress=False, log=None) == []
    assert (runs / "soft" / "last.pt").is_file() and not (runs / "soft" / "trained.json").exists()
    resumed = run_experiment(path, runs, progress=False, log=None)
    assert _numbers(resumed) == _numbers(whole)
    assert len(json.loads((runs / "soft" / "sittings.json").read_text())) == 2
    # a finished row is skipped, not retrained
    stamp = (runs / "soft" / "result.json").stat().st_mtime_ns
    messages: list[str] = []
    run_experiment(path, runs, progress=False, log=messages.append)
    assert (runs / "soft" / "result.json").stat().st_mtime_ns == stamp
    assert any("[soft] finished" in m for m in messages)
    assert json.loads((runs / "table.json").read_text())[0]["label"] == "soft"
    assert "| marginal-product | marginal | - | product |" in (runs / "table.md").read_text()
    assert (runs / "val_ppl.png").stat().st_size > 0
    # each row carries its curve, from the two sittings' history.csv, so merged tables can still be drawn
    assert len(resumed[0]["val_ppl_per_epoch"]) == 2 == len(resumed[0]["wall_s_per_epoch"])
    assert resumed[0]["wall_s_per_epoch"][0] < resumed[0]["wall_s_per_epoch"][1]
    assert all(h > 0 for h in resumed[1]["val_prior_entropy_per_epoch"])
    # the marginal pair has an exact posterior and no guide; soft attention neither
    assert all(h > 0 for h in resumed[1]["val_posterior_entropy_per_epoch"])
    assert resumed[1]["val_guide_entropy_per_epoch"] == [None, None] and resumed[1]["guide_entropy"] is None
    assert 0 < marginal["posterior_entropy"] and soft["posterior_entropy"] is None


def test_validation_curve_runs_on_across_sittings(tmp_path):
    from pyro_attention.tasks.translation.curves import entropy_curve, epoch_curves, validation_curve

    csv = tmp_path / "history.csv"
    csv.write_text("kind,epoch,step,loss,tokens,lr,val_nll,val_ppl,val_exact,seconds\n"
                   "step,0,1,2.0,5,0.1,,,,1.0\nepoch,0,1,,,0.1,1.0,2.7,True,2.0\n"
                   "step,1,2,1.5,5,0.1,,,,0.5\nepoch,1,2,,,0.1,0.9,2.5,True,1.5\n")  # a resumed sitting
    assert validation_curve(csv) == ([2.0, 3.5], [2.7, 2.5])
    assert entropy_curve(csv) == [None, None]  # a history.csv from before the column
    csv.write_text("kind,epoch,step,loss,tokens,lr,val_nll,val_ppl,val_exact,val_prior_entropy,seconds\n"
                   "step,0,1,2.0,5,0.1,,,,,1.0\nepoch,0,1,,,0.1,1.0,2.7,True,0.5,2.0\n"
                   "step,1,2,1.5,5,0.1,,,,,0.5\nepoch,1,2,,,0.1,0.9,2.5,True,,1.5\n")
    assert entropy_curve(csv) == [0.5, None] and validation_curve(csv) == ([2.0, 3.5], [2.7, 2.5])
    nothing = [None, None]  # columns the file does not have
    assert epoch_curves(csv) == {"wall_s_per_epoch": [2.0, 3.5], "val_ppl_per_epoch": [2.7, 2.5],
                                 "val_prior_entropy_per_epoch": [0.5, None], "val_posterior_entropy_per_epoch": nothing,
                                 "val_guide_entropy_per_epoch": nothing, "val_guide_kl_per_epoch": nothing}


def test_the_entropy_panel_draws_the_guide_dashed_beside_the_prior(tmp_path, monkeypatch):
    import matplotlib.axes

    from pyro_attention.tasks.translation.curves import plot_rows

    drawn = []
    real = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                        lambda ax, *a, **k: drawn.append((k.get("linestyle"), k.get("label"))) or real(ax, *a, **k))
    rows = [{"label": "va", "val_ppl_per_epoch": [9.0, 5.0], "val_prior_entropy_per_epoch": [3.2, 2.5],
             "val_guide_entropy_per_epoch": [None, 1.0]},
            {"label": "soft", "val_ppl_per_epoch": [8.0, 6.0], "val_prior_entropy_per_epoch": [1.0, 0.9],
             "val_guide_entropy_per_epoch": [None, None]}]
    assert plot_rows(rows, tmp_path / "f.png", "t") == tmp_path / "f.png"
    entropy = [(style, label) for style, label in drawn if style is not None]  # the entropy panel sets a style
    assert sorted(entropy, key=str) == [("-", "soft"), ("-", "va"), ("--", None)]  # soft has no guide: no dashes


def test_a_merged_table_is_drawn_from_its_rows_curves(tmp_path, capsys):
    rows = [{"label": "timed", "val_ppl_per_epoch": [9.0, 5.0], "wall_s_per_epoch": [60.0, 120.0],
             "val_prior_entropy_per_epoch": [None, 0.7]},
            {"label": "untimed", "val_ppl_per_epoch": [8.0, 6.0, 5.5], "wall_s_per_epoch": None},
            {"label": "no-curve", "val_ppl": 4.0}]
    table = tmp_path / "table1.json"
    table.write_text(json.dumps(rows))
    assert cli.main(["experiment", "plot", str(table)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "table1-val_ppl.png")
    assert (tmp_path / "table1-val_ppl.png").stat().st_size > 0
    rows[0]["wall_s_per_epoch"] = [60.0]
    table.write_text(json.dumps(rows))
    with pytest.raises(SystemExit) as e:
        cli.main(["experiment", "plot", str(table), "--figure", str(tmp_path / "x.png")])
    assert e.value.code == 1 and not (tmp_path / "x.png").exists()
    assert "row 'timed': wall_s_per_epoch has 1 entries, val_ppl_per_epoch 2" in capsys.readouterr().err
    table.write_text('{"rows": []}')
    with pytest.raises(SystemExit):
        cli.main(["experiment", "plot", str(table)])
    assert "table1.json: a table is a JSON list of rows" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["experiment", "run", "--out", str(tmp_path)])
    assert e.value.code == 2 and "the following arguments are required: --config" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["experiment", "--config", str(table)])  # an action first
    assert e.value.code == 2 and "choose from 'run', 'status', 'curves', 'merge', 'plot'" in capsys.readouterr().err


def test_merge_puts_a_runs_folders_rows_into_a_table_of_several(tmp_path, capsys):
    """--merge: a finished row replaces the table's row of its label in place (its old note dropped, --note kept),
    a new one is added at the end, a row evaluated while paused goes in as unfinished; errors name the file."""
    path = _write(tmp_path)
    runs = tmp_path / "r"
    run_experiment(path, runs, only=["soft"], progress=False, log=None, bleu=False)
    table = tmp_path / "docs.json"
    table.write_text(json.dumps([{"label": "first", "val_ppl": 1.0},
                                 {"label": "soft", "val_ppl": 99.0, "note": "an older run"}]))
    assert cli.main(["experiment", "merge", str(table), "--out", str(runs), "--note", "CPU, one thread"]) == 0
    assert capsys.readouterr().out.strip() == f"{table}: replaced row soft from {runs}"
    rows = json.loads(table.read_text())
    result = json.loads((runs / "soft" / "result.json").read_text())
    assert [r["label"] for r in rows] == ["first", "soft"] and rows[1] == {**result, "note": "CPU, one thread"}
    run_experiment(path, runs, only=["marginal-product"], max_epochs=1, progress=False, log=None, bleu=False)
    run_experiment(path, runs, evaluate_paused=True, progress=False, log=None, bleu=False)
    assert merge_rows(table, runs) == [("marginal-product", "added"), ("soft", "replaced")]
    rows = json.loads(table.read_text())
    assert [(r["label"], r["finished"]) for r in rows[1:]] == [("soft", True), ("marginal-product", False)]
    assert "note" not in rows[1]  # merged again without a note: none, rather than one about another run
    fresh = tmp_path / "new.json"  # a table that does not exist yet is started
    assert merge_rows(fresh, runs, only=["soft"]) == [("soft", "added")]
    assert json.loads(fresh.read_text()) == [result]
    (runs / "late").mkdir()
    with pytest.raises(ValueError, match=r"late: no result.json \(nor result-paused.json\): the row has not been"):
        merge_rows(fresh, runs, only=["late"])
    with pytest.raises(SystemExit) as e:
        cli.main(["experiment", "merge", str(tmp_path / "exp.toml"), "--out", str(runs)])
    assert e.value.code == 1 and "exp.toml: not readable as JSON" in capsys.readouterr().err
    fresh.write_text('{"rows": []}')
    with pytest.raises(ValueError, match=r"new.json: a table is a JSON list of rows"):
        merge_rows(fresh, runs)
    with pytest.raises(ValueError, match=r"empty: no evaluated row"):
        (tmp_path / "empty").mkdir()
        merge_rows(table, tmp_path / "empty")
    for argv, message in ((["merge", str(table)], "the following arguments are required: --out"),
                          (["run", "--config", str(path), "--out", str(runs), "--note", "x"],
                           "unrecognized arguments: --note x")):
        with pytest.raises(SystemExit) as e:
            cli.main(["experiment", *argv])
        assert e.value.code == 2 and message in capsys.readouterr().err


def test_an_unfinished_row_and_its_device_are_marked_in_the_legend():
    from pyro_attention.tasks.translation.curves import curve_label

    assert curve_label({"label": "hard-sample", "finished": False}) == "hard-sample (unfinished)"
    assert curve_label({"label": "soft"}) == curve_label({"label": "soft", "finished": True}) == "soft"
    assert curve_label({"label": "soft", "device": "cpu"}) == "soft"
    assert curve_label({"label": "va-enum", "device": "cuda", "finished": False}) == "va-enum (cuda, unfinished)"


def test_a_paused_row_is_evaluated_as_it_is_and_then_resumes(tmp_path, capsys):
    """--evaluate-paused trains nothing: a half-trained row's best.pt is evaluated into result-paused.json
    ("finished": false, its epochs so far) and listed, marked, in the table; a row not started is said to be; the
    row then resumes, and its result.json supersedes the paused one in the table."""
    path = _write(tmp_path)
    runs = tmp_path / "r"
    assert run_experiment(path, runs, only=["soft"], max_epochs=1, progress=False, log=None) == []
    stamp = (runs / "soft" / "last.pt").stat().st_mtime_ns
    assert cli.main(["experiment", "run", "--config", str(path), "--out", str(runs), "--evaluate-paused", "--no-bleu",
                     "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "[marginal-product] not started: nothing to evaluate" in out and "| soft (unfinished) | soft |" in out
    assert not (runs / "marginal-product").exists()  # no folder (nor .lock) made for a row with nothing to do
    assert (runs / "soft" / "last.pt").stat().st_mtime_ns == stamp  # nothing trained
    paused = json.loads((runs / "soft" / "result-paused.json").read_text())
    assert paused["finished"] is False and paused["epochs"] == 1 and paused["best_epoch"] == 1
    assert not (runs / "soft" / "result.json").exists() and paused["val_ppl"] > 1 and paused["wall_s"] > 0
    assert [r["label"] for r in json.loads((runs / "table.json").read_text())] == ["soft"]
    table = run_experiment(path, runs, only=["soft"], progress=False, log=None, bleu=False)
    assert table[0]["finished"] is True and table[0]["epochs"] == 2


def test_only_some_rows_and_the_cli(tmp_path, capsys):
    path = _write(tmp_path)
    assert cli.main(["experiment", "run", "--config", str(path), "--out", str(tmp_path / "r"), "--rows", "soft",
                     "--no-bleu", "--quiet", "--device", "cpu", "--threads", "1", "--matmul-precision", "medium",
                     "--autocast", "bfloat16"]) == 0
    printed = capsys.readouterr().out
    assert "| soft | soft |" in printed and "marginal-product" not in printed
    row = json.loads((tmp_path / "r" / "soft" / "result.json").read_text())
    assert row["device"] == "cpu" and row["threads"] == 1
    sittings = json.loads((tmp_path / "r" / "soft" / "sittings.json").read_text())
    assert [(s["matmul_precision"], s["autocast"]) for s in sittings] == [("medium", "bfloat16")]  # how it multiplied
    assert torch.get_float32_matmul_precision() == "highest"  # the process's, restored
    assert not bfloat16_products()
    with pytest.raises(SystemExit) as e:
        cli.main(["experiment", "run", "--config", str(path), "--out", str(tmp_path / "r2"), "--rows", "soft",
                  "--no-bleu", "--quiet", "--matmul-precision", "bf16"])
    assert e.value.code == 1
    assert "matmul_precision must be one of highest, high, medium; got 'bf16'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["experiment", "run", "--config", str(path), "--out", str(tmp_path / "r3"), "--rows", "soft",
                  "--no-bleu", "--quiet", "--autocast", "bf16"])
    assert e.value.code == 1
    assert "autocast must be one of none, bfloat16; got 'bf16'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["experiment", "run", "--config", str(path), "--out", str(tmp_path / "r"), "--rows", "hard"])
    assert e.value.code == 2  # an error of the call, as train --config's
    assert "no row labelled ['hard']; the rows are ['soft', 'marginal-product']" in capsys.readouterr().err


def _two_epochs_of(tmp_path: Path, row: str) -> tuple[Path, Path, int]:
    """A three-epoch experiment file with ``row`` trained for two epochs: the file, the runs folder and the
    modification time of the row's ``last.pt`` (to show that what follows writes nothing)."""
    path = _write(tmp_path, TINY.replace("epochs = 2", "epochs = 3"))
    runs = tmp_path / "r"
    run_experiment(path, runs, only=[row], max_epochs=2, progress=False, log=None, bleu=False)
    return path, runs, (runs / row / "last.pt").stat().st_mtime_ns


def test_status_reads_where_each_row_stands_and_trains_nothing(tmp_path, capsys):
    """--status: not started, half-trained (where it resumes, best and last validation, patience used), trained
    but not evaluated, finished (test PPL), a first epoch under way, a damaged last.pt said in its row, and the
    CLI's errors for an unknown row and a runs folder that is not there."""
    path, runs, stamp = _two_epochs_of(tmp_path, "soft")
    assert cli.main(["experiment", "status", "--config", str(path), "--out", str(runs)]) == 0
    printed = capsys.readouterr().out
    assert (runs / "soft" / "last.pt").stat().st_mtime_ns == stamp and not (runs / "marginal-product").exists()
    soft, marginal = experiment_status(path, runs)
    history = (runs / "soft" / "history.csv").read_text().splitlines()
    val = [float(line.split(",")[7]) for line in history if line.startswith("epoch,")]
    assert (soft["state"], soft["epochs"], soft["max_epochs"], soft["position"], soft["epoch_batches"]) == (
        "training", 2, 3, 0, 2)
    assert soft["best_val_ppl"] == pytest.approx(min(val)) and soft["last_val_ppl"] == pytest.approx(val[-1])
    assert soft["best_epoch"] == 1 + val.index(min(val)) and soft["bad_epochs"] == (val[1] >= val[0])
    assert soft["lr"] > 0 and soft["wall_s"] > 0 and soft["sittings"] == 1 and soft["test_ppl"] is None
    assert (soft["logged_epoch"], soft["logged_step"]) == (2, 4) and 0 <= soft["logged_age_s"] < 600
    seconds = {int(x[2]): float(x[-1]) for x in (line.split(",") for line in history) if x[0] == "step"}
    pace = (seconds[2] - seconds[1] + seconds[4] - seconds[3]) / 2  # not 2 -> 3: the first validation is between
    assert sorted(seconds) == [1, 2, 3, 4] and soft["s_per_step"] == pytest.approx(pace)
    assert (marginal["state"], marginal["epochs"], marginal["best_val_ppl"]) == ("not started", 0, None)
    assert f"| soft | resumes after epoch 2 | 2 / 3 | {min(val):.3f} ({soft['best_epoch']}) |" in printed
    assert "| marginal-product | not started | 0 / 3 | - |" in printed
    # finished, then trained but not evaluated (its result.json deleted, as one does to tabulate it again)
    table = run_experiment(path, runs, only=["soft"], progress=False, log=None, bleu=False)
    done = experiment_status(path, runs, only=["soft"])[0]
    assert (done["state"], done["epochs"], done["test_ppl"], done["ppl_exact"]) == (
        "finished", 3, table[0]["test_ppl"], True)
    assert done["best_val_ppl"] == table[0]["val_ppl"] and done["bleu"] is None
    assert "| soft | finished (epoch limit) | 3 / 3 |" in status_table([done])
    (runs / "soft" / "result.json").unlink()
    trained = experiment_status(path, runs, only=["soft"])[0]
    assert (trained["state"], trained["epochs"], trained["test_ppl"]) == ("trained", 3, None)
    assert "| soft | trained (epoch limit), not yet evaluated | 3 / 3 |" in status_table([trained])
    # a first epoch under way (history.csv, no last.pt yet); then a damaged checkpoint, named in its row
    (runs / "marginal-product").mkdir()
    (runs / "marginal-product" / "history.csv").write_text(  # its first step, and a line cut short by a kill
        "\n".join((runs / "soft" / "history.csv").read_text().splitlines()[:2]) + "\nstep,1,")
    started = experiment_status(path, runs, only=["marginal-product"])[0]
    assert (started["state"], started["logged_epoch"], started["logged_step"], started["s_per_step"]) == (
        "started", 1, 1, None)
    assert started["busy"] is False  # nobody holds its .lock: the sitting that started it has gone
    assert "| marginal-product | first epoch stopped before its first last.pt (starts afresh) | 0 / 3 |" in (
        status_table([started]))
    assert "| marginal-product | first epoch under way, no last.pt yet | 0 / 3 |" in status_table(
        [{**started, "busy": True}])
    assert re.search(r"\| step 1 \(epoch 1\), \d+ s ago \|$", status_table([started]))
    slow = status_table([{**started, "s_per_step": 123.44}, {**started, "s_per_step": 0.6234}]).splitlines()
    assert slow[-2].endswith(" s ago, 123.4 s/step |") and slow[-1].endswith(" s ago, 0.62 s/step |")
    (runs / "marginal-product" / "last.pt").write_bytes(b"not a checkpoint")
    broken = experiment_status(path, runs, only=["marginal-product"])[0]
    assert broken["state"] == "unreadable" and "last.pt: cannot be read as a checkpoint" in broken["error"]
    with pytest.raises(SystemExit) as e:
        cli.main(["experiment", "status", "--config", str(path), "--out", str(runs), "--rows", "hard"])
    assert e.value.code == 2 and "no row labelled ['hard']" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # a mistyped --out is said, not shown as rows never started
        cli.main(["experiment", "status", "--config", str(path), "--out", str(tmp_path / "rr")])
    assert e.value.code == 1 and "rr: no such runs folder (no row of" in capsys.readouterr().err


def test_a_sitting_killed_without_a_record_is_counted_to_its_last_checkpoint(tmp_path):
    """A sitting killed outright (SIGKILL, machine lost) writes no sittings.json entry; its time up to the last
    checkpoint is read from last.pt's history -- by --status at once, and into sittings.json when the row resumes."""
    from pyro_attention.tasks.translation.rowfiles import unrecorded_sittings

    path = _write(tmp_path, TINY.replace("epochs = 2", "epochs = 3"))
    runs = tmp_path / "r"
    for _ in range(2):  # two sittings of one epoch each
        run_experiment(path, runs, only=["soft"], max_epochs=1, progress=False, log=None, bleu=False)
    sittings_json = runs / "soft" / "sittings.json"
    recorded = json.loads(sittings_json.read_text())
    sittings_json.write_text(json.dumps(recorded[:1]))  # the second sitting, as if killed after its checkpoint
    history = [line.split(",") for line in (runs / "soft" / "history.csv").read_text().splitlines()]
    second = float(history[-1][-1])  # its clock when it wrote last.pt (after its epoch's validation)
    assert history[-1][0] == "epoch" and second < recorded[1]["wall_s"]
    status = experiment_status(path, runs, only=["soft"])[0]
    assert status["sittings"] == 2 and status["wall_s"] == pytest.approx(recorded[0]["wall_s"] + second)
    messages: list[str] = []
    run_experiment(path, runs, only=["soft"], progress=False, log=messages.append, bleu=False)
    assert any("1 sitting(s) ended without a record" in m for m in messages)
    first, lost, third = json.loads(sittings_json.read_text())
    assert first == recorded[0] and third["until_epoch"] == 3 and "interrupted" not in third
    assert lost == {"wall_s": pytest.approx(second), "until_epoch": 2, "until_step": 4, "threads": None,
                    "interrupted": "unrecorded"}
    trained = json.loads((runs / "soft" / "trained.json").read_text())
    assert trained["wall_s"] == pytest.approx(first["wall_s"] + second + third["wall_s"])
    # two killed sittings in a row: each sitting's clock restarts at zero
    steps = {"step": [1, 2, 3, 4, 5, 6], "epoch": [0, 0, 1, 1, 2, 2], "seconds": [1.0, 2.0, 0.5, 1.0, 0.4, 0.9]}
    epochs = {"step": [2, 4], "epoch": [0, 1], "seconds": [2.5, 1.5]}
    state = {"trainer": {"epoch": 2, "step": 6}, "history": {"steps": steps, "epochs": epochs}}
    assert unrecorded_sittings([{"wall_s": 2.5, "until_epoch": 1, "until_step": 2}], state) == [
        {"wall_s": 1.5, "until_epoch": 2, "until_step": 4, "threads": None, "interrupted": "unrecorded"},
        {"wall_s": 0.9, "until_epoch": 2, "until_step": 6, "threads": None, "interrupted": "unrecorded"}]
    assert unrecorded_sittings([{"wall_s": 2.5, "until_epoch": 2, "until_step": 6}], state) == []


@pytest.mark.parametrize("text,message", [
    (TINY.replace('label = "marginal-product"', 'label = "soft"'), r"row 2 \('soft'\): the label 'soft' is used twice"),
    (TINY.replace('label = "soft"\n', ""), "row 1: needs a label"),
    (TINY.replace('output = "product"', 'output = "linear"'),
     r"row 2 \('marginal-product'\): output must be one of tanh, product; got 'linear'"),
    (TINY.replace("patience = 0", "patience = 0\nout = 'x'"), "'out' is set by the runner"),
    (TINY.replace("epochs = 2", "epoch = 2"), "unknown"),
    # the allowed keys it lists leave out 'out', which the runner sets and refuses
    (TINY.replace("epochs = 2", "epoch = 2"), r"allowed keys: data, (?:(?!\bout\b)[a-z_, ])*, tensorboard$"),
    ("[shared]\n", "a non-empty list"),
])  # fmt: skip
def test_bad_experiment_files_name_the_row(tmp_path, text, message):
    with pytest.raises(ExperimentFileError, match=message):
        read_experiment(_write(tmp_path, text))


def test_an_unreadable_experiment_file_is_an_experiment_file_error(tmp_path):
    """What the command line answers with exit status 2 (an error of the call) is one exception type, raised
    before anything runs: a missing file, a folder, bytes that are not UTF-8, text that is not TOML."""
    bad = tmp_path / "latin1.toml"
    bad.write_bytes('[shared]\n# Übersetzung\n'.encode("latin-1"))
    broken = _write(tmp_path, "[shared\n")
    for path, message in ((tmp_path / "nope.toml", r"nope.toml: no such experiment file"),
                          (tmp_path, "is a directory, not an experiment file"),
                          (bad, r"latin1.toml: 'utf-8' codec can't decode byte 0xdc"),
                          (broken, re.escape(str(broken)) + ": ")):
        with pytest.raises(ExperimentFileError, match=message):
            read_experiment(path)


@pytest.mark.parametrize("name", ["table1-multi30k.toml", "table1-iwslt14.toml"])
def test_shipped_experiment_files_are_valid(name):
    shared, rows = read_experiment(REPO / "examples" / "configs" / name)
    labels = [r["label"] for r in rows]
    assert labels[:7] == ["soft", "marginal", "hard-enum", "hard-sample", "va-enum", "va-sample", "relaxed"]
    assert {r.get("output") for r in rows if r["label"].endswith("-product")} == {"product"}
    # Multi30k at the toolkit's size; IWSLT14 (a quarter of the pairs, twice the length) at half its widths
    width = {"table1-multi30k.toml": 256, "table1-iwslt14.toml": 128}[name]
    assert shared["embedding"] == width and shared["decoder"] == 2 * width and shared["dropout"] == 0.3


def test_the_transformer_experiment_file_is_valid():
    """examples/configs/transformer-multi30k.toml: the paper's five rows and three on embedding values, every one a
    valid Transformer config."""
    shared, rows = read_experiment(REPO / "examples" / "configs" / "transformer-multi30k.toml")
    assert [r["label"] for r in rows] == ["soft", "marginal", "va-enum", "va-sample", "hard-sample",
                                          "marginal-embedding-values", "va-enum-embedding-values",
                                          "va-sample-embedding-values"]
    configs = [TranslationConfig(**{**shared, **{k: v for k, v in row.items() if k != "label"}}) for row in rows]
    assert all(c.network == "transformer" and c.attention_type == "scaled" and c.embedding == 256 for c in configs)
    assert [c.embedding_values for c in configs] == [False] * 5 + [True] * 3


def test_the_gpu_smoke_file_has_every_row_of_table1():
    """benchmarks/every_row_tiny.toml (gpu_sitting.sh's SMOKE) tries every row the Table 1 files train."""
    repo = REPO
    _, tiny = read_experiment(repo / "benchmarks" / "every_row_tiny.toml")
    _, table = read_experiment(repo / "examples" / "configs" / "table1-multi30k.toml")
    assert [r["label"] for r in tiny] == [r["label"] for r in table] and tiny == table


def test_ctrl_c_during_a_row_exits_130_and_the_next_call_finishes_the_same_table(tmp_path, monkeypatch, capsys):
    import signal

    from tests.support.signals import signal_on_step

    path = _write(tmp_path)
    whole = run_experiment(path, tmp_path / "whole", progress=False, log=None, bleu=False)
    runs = tmp_path / "cut"
    with monkeypatch.context() as mp:
        signal_on_step(mp, signal.SIGINT, at=5)  # row 2's first step (row 1: 2 epochs of 2 batches)
        code = cli.main(["experiment", "run", "--config", str(path), "--out", str(runs), "--no-bleu", "--quiet"])
    assert code == 130 and "run the same command again to continue" in capsys.readouterr().err
    assert (runs / "soft" / "result.json").is_file() and not (runs / "marginal-product" / "result.json").exists()
    assert json.loads((runs / "marginal-product" / "sittings.json").read_text())[0]["interrupted"] == "SIGINT"
    cut = {r["label"]: r for r in experiment_status(path, runs)}["marginal-product"]  # where --status says it resumes
    assert (cut["state"], cut["epochs"], cut["position"], cut["best_val_ppl"], cut["sittings"]) == ("training", 0, 1,
                                                                                                    None, 1)
    assert cut["epoch_batches"] == 2  # known before the first epoch ends: last.pt says it
    assert "| marginal-product | resumes in epoch 1 at batch 1/2 | 0 / 2 | - |" in status_table([cut])
    assert (cut["logged_kind"], cut["logged_batch"]) == ("step", 1)  # its last line: step 1, the first of 2
    assert re.search(r"\| step 1 \(epoch 1, batch 1/2\), \d+ s ago \|$", status_table([cut]))
    assert cut["busy"] is False
    # where the lock cannot be told (busy None), the age of the last step says whether the row is training now
    live, stale = ({**cut, "s_per_step": 3.0, "logged_age_s": age, "busy": None} for age in (2.0, 900.0))
    assert status_table([live]).endswith(", 2 s ago, 3 s/step, epoch ends in ~3 s |")  # one batch to go
    assert "| marginal-product | training now; last.pt in epoch 1 at batch 1/2 | 0 / 2 |" in status_table([live])
    assert status_table([stale]).endswith(", 15 min ago, 3 s/step |")  # not training now: no estimate
    assert "| marginal-product | resumes in epoch 1 at batch 1/2 |" in status_table([stale])
    again = run_experiment(path, runs, progress=False, log=None, bleu=False)
    assert _numbers(again) == _numbers(whole)


def test_status_tells_a_row_worked_on_now_by_its_lock_and_a_second_runner_is_refused(tmp_path):
    """A row whose folder's .lock another process holds is "training now" (however old its last step) or "being
    evaluated now"; once released it "resumes" / is "not yet evaluated".  The runner holds the lock for a row's
    evaluation too, so a second runner on the same row is refused with the holder's PID."""
    import fcntl

    path = _write(tmp_path)
    runs = tmp_path / "r"
    run_experiment(path, runs, only=["soft"], max_epochs=1, progress=False, log=None, bleu=False)
    folder = runs / "soft"
    with open(folder / ".lock", "w") as holder:  # another process, as far as flock can tell: its own open file
        fcntl.flock(holder, fcntl.LOCK_EX)
        holder.write("4242\n")
        holder.flush()
        busy = experiment_status(path, runs, only=["soft"])[0]
        assert busy["busy"] is True and (busy["state"], busy["logged_kind"]) == ("training", "epoch")
        assert "| soft | training now; last.pt after epoch 1 | 1 / 2 |" in status_table([busy])
        assert "| soft | training now;" in status_table([{**busy, "logged_age_s": 86400.0}])  # the lock decides
        with pytest.raises(FileExistsError, match=r"being written by another training process \(PID 4242"):
            run_experiment(path, runs, only=["soft"], progress=False, log=None, bleu=False)
    idle = experiment_status(path, runs, only=["soft"])[0]
    assert idle["busy"] is False and "| soft | resumes after epoch 1 | 1 / 2 |" in status_table([idle])
    run_experiment(path, runs, only=["soft"], progress=False, log=None, bleu=False)
    (folder / "result.json").unlink()  # trained, its evaluation to come
    with open(folder / ".lock", "w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        holder.write("4242\n")
        holder.flush()
        evaluating = experiment_status(path, runs, only=["soft"])[0]
        assert "| soft | trained (epoch limit), being evaluated now | 2 / 2 |" in status_table([evaluating])
        with pytest.raises(FileExistsError, match=r"\(PID 4242"):  # the evaluation is not run twice at once
            run_experiment(path, runs, only=["soft"], progress=False, log=None, bleu=False)
    assert not (folder / "result.json").exists()
    run_experiment(path, runs, only=["soft"], progress=False, log=None, bleu=False)
    assert (folder / "result.json").is_file() and experiment_status(path, runs, only=["soft"])[0]["busy"] is False


def test_the_run_lock_is_reentrant_and_waits_out_a_brief_holder(tmp_path):
    """Within a process the lock nests (the runner holds a row, the training it calls takes it again); a holder
    that lets go within ``retry_s`` (--status's instant probe) is waited out; one that does not is refused."""
    import fcntl
    import threading

    from pyro_attention.tasks.translation.rowfiles import run_busy, run_lock

    folder = tmp_path / "row"
    assert run_busy(folder) is False  # no .lock at all
    with run_lock(folder):
        with run_lock(folder):
            assert run_busy(folder) is True
        assert run_busy(folder) is True  # the outer block still holds it
        assert (folder / ".lock").read_text() == f"{os.getpid()}\n"
    assert run_busy(folder) is False
    holder = open(folder / ".lock", "a")
    fcntl.flock(holder, fcntl.LOCK_SH)  # a --status probe, held a little long
    threading.Timer(0.3, holder.close).start()
    with run_lock(folder, retry_s=10.0):
        pass
    with open(folder / ".lock", "a") as holder:
        fcntl.flock(holder, fcntl.LOCK_SH)
        with pytest.raises(FileExistsError, match="is being written by another training process"):
            with run_lock(folder, retry_s=0.2):
                pass


def test_a_table_that_cannot_be_written_names_the_file(tmp_path, monkeypatch):
    """The runner's table, JSON and figure go through the package's writer: a full disk is one error naming the
    file, and the previous file stays."""
    import errno
    import os

    from pyro_attention.files import WriteError
    from pyro_attention.tasks.translation import rowfiles

    target = tmp_path / "table.json"
    rowfiles.write_json(target, [1])

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(WriteError, match=r"cannot write .*table.json: No space left on device \(errno 28\)"):
        rowfiles.write_json(target, [2])
    assert json.loads(target.read_text()) == [1] and [p.name for p in tmp_path.iterdir()] == ["table.json"]
    # a runs folder that cannot be made (a file where a folder of its path should be) is said as such
    with pytest.raises(WriteError, match=r"cannot write .*table\.json/runs: Not a directory .*table\.json is a file"):
        run_experiment(_write(tmp_path), target / "runs", progress=False, log=None)


def test_the_background_queue_runs_rows_in_turn_and_logs_each(tmp_path):
    import subprocess
    import sys

    repo = REPO
    exe = tmp_path / "pyro-attention"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pyro_attention "$@"\n')
    exe.chmod(0o755)
    config = _write(tmp_path, TINY.replace("epochs = 2", "epochs = 1"))
    runs = tmp_path / "runs" / "table"
    env = {**os.environ, "PYRO_ATTENTION_EXE": str(exe), "PYRO_ATTENTION_RUNS": str(tmp_path / "base")}
    done = subprocess.run(["bash", str(repo / "benchmarks" / "experiment_queue.sh"), str(config), str(runs), "soft",
                           "no-such-row", "soft"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "runs" / "table.log").read_text()
    assert log.count(" row soft (") == 2 and "row no-such-row exited with 2" in log and "queue done" in log
    assert log.count(", threads 1)") == 3  # one thread unless PYRO_ATTENTION_THREADS says otherwise
    assert "[soft] finished" in log  # the second time: skipped, not retrained
    assert json.loads((runs / "soft" / "result.json").read_text())["label"] == "soft"
    assert not (tmp_path / "base").exists() or not list((tmp_path / "base").glob("venv-*"))  # nothing built
    bad = subprocess.run(["bash", str(repo / "benchmarks" / "experiment_queue.sh"), str(config), str(runs), "soft"],
                         env={**env, "PYRO_ATTENTION_THREADS": "two"}, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "PYRO_ATTENTION_THREADS must be a whole number >= 1, got 'two'" in bad.stderr
    bad = subprocess.run(["bash", str(repo / "benchmarks" / "experiment_queue.sh"), str(config), str(runs), "soft"],
                         env={**env, "PYRO_ATTENTION_MATMUL_PRECISION": "low"}, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "MATMUL_PRECISION must be highest, high or medium, got 'low'" in bad.stderr


def test_two_queues_started_together_on_a_new_commit_build_its_venv_once(tmp_path):
    """The second queue waits for the first's build (it used to remove the venv the first was installing)."""
    import subprocess
    import sys

    repo = REPO
    fake = tmp_path / "fakebin"
    fake.mkdir()
    events = tmp_path / "events"
    # a stand-in `python3 -m venv DIR` whose pip takes a second and records when it starts and ends
    (fake / "python3").write_text(f"""#!/bin/sh
venv=$4  # python3 -m venv --system-site-packages DIR
mkdir -p "$venv/bin"
printf '#!/bin/sh\\nexit 0\\n' > "$venv/bin/python"
printf '#!/bin/sh\\necho start >> {events}\\nsleep 1\\necho end >> {events}\\n' > "$venv/bin/pip"
printf '#!/bin/sh\\nexec "{sys.executable}" -m pyro_attention "$@"\\n' > "$venv/bin/pyro-attention"
chmod +x "$venv/bin/python" "$venv/bin/pip" "$venv/bin/pyro-attention"
""")
    (fake / "python3").chmod(0o755)
    config = _write(tmp_path, TINY)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "PYRO_ATTENTION_RUNS": str(tmp_path / "base")}
    env.pop("PYRO_ATTENTION_EXE", None)
    queues = [subprocess.Popen(["bash", str(repo / "benchmarks" / "experiment_queue.sh"), str(config),
                                str(tmp_path / "runs" / f"table{i}"), "no-such-row"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    for queue in queues:
        _, err = queue.communicate(timeout=120)
        assert queue.returncode == 0, err
    # a pip install per build, and builds never overlap: one build, which the second queue used
    assert events.read_text().split() == ["start", "end"]
    logs = [(tmp_path / "runs" / f"table{i}.log").read_text() for i in range(2)]
    assert sum(log.count("building ") for log in logs) == 1
    assert all("row no-such-row exited with 2" in log for log in logs)
    assert len(list((tmp_path / "base").glob("venv-*/.built"))) == 1


def test_a_stopped_decoding_goes_on_where_it_stopped(tmp_path, monkeypatch):
    """DecodeCache: the chunks decoded before a kill are read back (a line cut short is dropped), only the rest
    is decoded, and the output is the uninterrupted decoding's; another decoding or checkpoint starts afresh."""
    from pyro_attention.tasks.translation import decoding
    from pyro_attention.tasks.translation.checkpoints import load_checkpoint
    from pyro_attention.tasks.translation.translating import BeamSearch, DecodeCache, decode_batches

    runs = tmp_path / "r"
    run_experiment(_write(tmp_path), runs, only=["soft"], max_epochs=1, progress=False, log=None)
    best = runs / "soft" / "best.pt"
    ckpt = load_checkpoint(best)
    words = [w for w in ckpt.src_vocab.itos if not w.startswith("<")]
    sources = [[words[(i * 7 + j) % len(words)] for j in range(1 + i % 5)] for i in range(150)]  # 3 chunks of 64
    whole = decode_batches(ckpt, sources, BeamSearch(2, "soft"))

    calls = []
    real = decoding.translate

    def counted(*args, **kwargs):
        calls.append(1)
        if stop_after is not None and len(calls) > stop_after:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(decoding, "translate", counted)
    path = runs / "soft" / "decoded-soft.jsonl"
    stop_after = 1
    with pytest.raises(KeyboardInterrupt):
        decode_batches(ckpt, sources, BeamSearch(2, "soft"), cache=DecodeCache(path))
    assert len(path.read_text().splitlines()) == 2  # the key and the first chunk
    with open(path, "a") as f:
        f.write('{"start": 64, "hy')  # a chunk cut short by a kill
    stop_after, calls = None, []
    cache = DecodeCache(path)
    assert decode_batches(ckpt, sources, BeamSearch(2, "soft"), cache=cache) == whole
    assert len(calls) == 2 and cache.sentences == 150 and cache.seconds > 0
    calls = []
    assert decode_batches(ckpt, sources, BeamSearch(2, "soft"), cache=DecodeCache(path)) == whole and not calls
    decode_batches(ckpt, sources, BeamSearch(3, "soft"), cache=DecodeCache(path))  # another beam: afresh
    assert len(calls) == 3
    calls = []
    os.utime(best, ns=(best.stat().st_atime_ns, best.stat().st_mtime_ns + 10**9))  # a new best.pt: afresh
    decode_batches(ckpt, sources, BeamSearch(3, "soft"), cache=DecodeCache(path))
    assert len(calls) == 3


def test_a_stopped_row_evaluation_does_not_score_or_decode_again(tmp_path, monkeypatch):
    """The runner keeps a row's split scores and decodings in its folder: evaluating the same best.pt again
    redoes neither (the row is the same), and a new best.pt is evaluated afresh."""
    from pyro_attention.tasks.translation import decoding, runner

    path = _write(tmp_path)
    runs = tmp_path / "r"
    first = run_experiment(path, runs, only=["marginal-product"], progress=False, log=None)
    folder = runs / "marginal-product"
    assert {p.name for p in folder.glob("scored-*.json")} == {"scored-val.json", "scored-test.json"}
    assert {p.name for p in folder.glob("decoded-*.jsonl")} == {"decoded-marginal.jsonl", "decoded-kmax.jsonl"}
    calls = []
    monkeypatch.setattr(runner, "evaluate", lambda *a, **k: calls.append("score"))
    monkeypatch.setattr(decoding, "translate", lambda *a, **k: calls.append("decode"))
    shared, rows = runner.read_experiment(path)
    config = runner.row_config(shared, rows[1], runs)
    again = runner.evaluate_row(config, folder, "marginal-product")
    assert not calls and _numbers([again]) == _numbers(first)


def test_a_gpu_sitting_trains_rows_at_once_then_evaluates_the_paused_ones(tmp_path):
    """benchmarks/gpu_sitting.sh on the CPU: a row that stops early is evaluated by its own run, a row still training
    at TRAIN_END is stopped by SIGTERM and its best.pt evaluated as it is; what is small comes back in runs.tgz."""
    import subprocess
    import sys
    import tarfile

    repo = REPO
    config = _write(tmp_path, TINY.replace("epochs = 2", "epochs = 1") + '\n[[rows]]\nlabel = "long"\nmodel = "soft"\n'
                    "epochs = 100000\n")
    runs, out = tmp_path / "runs", tmp_path / "out"
    # 40 s: past both rows' start-up (imports, data) even on a loaded machine; the short row ends well before
    env = {**os.environ, "TRAIN_END": "40", "EVAL_END": "200", "OUT": str(out), "PY": sys.executable}
    done = subprocess.run(["bash", str(repo / "benchmarks" / "gpu_sitting.sh"), "cpu", str(runs),
                           f"{config}:soft,long"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    log = (out / "log.txt").read_text()
    assert "SIGTERM exp/long" in log and "SIGTERM exp/soft" not in log and "did not finish" not in log
    with tarfile.open(out / "runs.tgz") as tgz:
        names = {n.removeprefix("./") for n in tgz.getnames()}
        finished = json.load(tgz.extractfile("./exp/soft/result.json"))
        paused = json.load(tgz.extractfile("./exp/long/result-paused.json"))
    assert not any(n.endswith(".pt") for n in names) and "exp/long/history.csv" in names
    assert finished["finished"] is True and finished["epochs"] == 1
    assert paused["finished"] is False and paused["epochs"] >= 1 and paused["bleu"] is not None


def test_curves_print_each_rows_validation_per_epoch_and_train_nothing(tmp_path, capsys):
    """--curves: one markdown table per row from its history.csv (validation PPL, new bests in bold, learning rate,
    the entropies the pair records, the clock), a row not started said so, nothing written."""
    path, runs, stamp = _two_epochs_of(tmp_path, "marginal-product")
    assert cli.main(["experiment", "curves", "--config", str(path), "--out", str(runs)]) == 0
    printed = capsys.readouterr().out
    assert (runs / "marginal-product" / "last.pt").stat().st_mtime_ns == stamp
    epochs = [line.split(",") for line in (runs / "marginal-product" / "history.csv").read_text().splitlines()
              if line.startswith("epoch,")]
    assert len(epochs) == 2
    assert "soft:\n\nnot started" in printed
    table = printed.split("marginal-product:\n\n")[1].splitlines()
    assert table[0] == ("| epoch | step | lr | val PPL | H(prior) | H(exact posterior) | clock [h] |")
    for line, rec in zip(table[2:4], epochs, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[:3] == [rec[1], rec[2], f"{float(rec[5]):.3g}"]
        assert cells[3].strip("*") == f"{float(rec[7]):.3f}" and cells[4] == f"{float(rec[9]):.3f}"
    assert table[2].split("|")[4].strip().startswith("**")  # the first epoch is a new best
    (runs / "soft").mkdir()
    (runs / "soft" / "history.csv").write_text((runs / "marginal-product" / "history.csv").read_text().split(
        "\nepoch,")[0])  # steps of a first epoch, no epoch line yet
    assert "soft:\n\nno epoch finished yet" in experiment_curves(path, runs, only=["soft"])


def test_an_estimated_perplexity_is_printed_with_its_error_and_reliability():
    """``~`` marks an estimate, ``± s.e.`` its Monte Carlo error (test split: what the row records), `` !`` an
    estimate that is not reliable; an exact value is a plain number; a row from before the error was recorded keeps
    ``~`` alone."""
    from pyro_attention.tasks.translation.runner import ppl_cell

    exact = {"test_ppl": 5.331, "val_ppl": 5.09, "ppl_exact": True, "test_ppl_mc_se": None, "ppl_reliable": True}
    estimate = {**exact, "ppl_exact": False, "test_ppl_mc_se": 0.0213}
    assert ppl_cell(exact) == "5.33" and ppl_cell(exact, "val_ppl") == "5.09"
    assert ppl_cell(estimate) == "~5.33 ± 0.02" and ppl_cell(estimate, "val_ppl") == "~5.09"
    assert ppl_cell({**estimate, "ppl_reliable": False}) == "~5.33 ± 0.02 !"
    old = {k: v for k, v in estimate.items() if k not in ("test_ppl_mc_se", "ppl_reliable")}
    assert ppl_cell(old) == "~5.33" and ppl_cell({**exact, "test_ppl": None}) == "-"
