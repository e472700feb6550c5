"""Issue #17, the classes that are not one bad value: failed writes, the command line's help, epoch numbering,
progress bars in logs, degenerate models.  (Single mistakes and their messages: the bad-input catalogues,
``tests/test_bad_inputs.py``.)"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import os
import stat
from pathlib import Path
from unittest import mock

import pytest
import torch

from pyro_attention import cli
from pyro_attention.files import WriteError, write_text
from pyro_attention.tasks.translation import TranslationConfig, save_checkpoint, train

TINY = dict(
    train_size=16, val_size=8, batch_size=8, embedding=8, encoder=8, decoder=16, attention=8, epochs=1, threads=0
)
FLAGS = [a for k, v in TINY.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def _cli(*argv: object) -> tuple[int, str, str]:
    """Run the command line: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code
    return int(code or 0), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny soft-attention run (two epochs): its folder holds last.pt, best.pt and history.csv."""
    out = tmp_path_factory.mktemp("run")
    train(TranslationConfig(**{**TINY, "epochs": 2}, out=str(out)), progress=False, log=None)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Writing outputs: one error naming the file and the cause; the previous checkpoint intact


@pytest.mark.parametrize(
    "error, cause",
    [
        (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"),
         r"torch could not write it \(unexpected pos 704 vs 598\)"),
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), r"No space left on device \(errno 28\)"),
        (OSError(errno.EROFS, os.strerror(errno.EROFS)), r"Read-only file system \(errno 30\)"),
    ],
)
@pytest.mark.parametrize("where", ["save", "replace"])
def test_failed_checkpoint_write_names_the_file_and_keeps_the_old_one(run, tmp_path, error, cause, where):
    if where == "replace" and isinstance(error, RuntimeError):
        pytest.skip("os.replace raises OSError only")
    state = torch.load(run / "last.pt", weights_only=True)
    path = save_checkpoint(state, tmp_path / "last.pt")
    before = path.read_bytes()
    target = (torch, "save") if where == "save" else (os, "replace")
    with mock.patch.object(*target, side_effect=error):
        with pytest.raises(WriteError, match=f"cannot write {path}: {cause}"):
            save_checkpoint({**state, "step": 12345}, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temporary file left behind


def test_train_on_a_file_system_that_turns_read_only_exits_1_and_keeps_last_pt(run, tmp_path):
    """The CLI: one ``error:`` line naming the file, exit status 1, ``last.pt`` as it was."""
    out = tmp_path / "run"
    assert _cli("train", "--quiet", "--out", out, *FLAGS)[0] == 0
    before = (out / "last.pt").read_bytes()
    real_replace = os.replace

    def replace(src, dst):  # noqa: ANN001, ANN202 - checkpoints can no longer be written
        if str(dst).endswith(".pt"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real_replace(src, dst)

    with mock.patch.object(os, "replace", side_effect=replace):
        code, _, err = _cli("train", "--quiet", "--out", out, "--resume", "--epochs", "2", *FLAGS[:-4])
    assert code == 1, err
    assert err.strip().splitlines()[-1] == (
        f"pyro-attention train: error: cannot write {out / 'last.pt'}: Read-only file system (errno 30)"
    )
    assert "Traceback" not in err
    assert (out / "last.pt").read_bytes() == before


def test_read_only_out_folder(tmp_path):
    """A real read-only folder (chmod; as root chmod does not stop writes, so this case is simulated above)."""
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(out, os.W_OK):
            pytest.skip("running as root: a chmod'ed folder stays writable")
        code, _, err = _cli("train", "--quiet", "--out", out, *FLAGS)
        assert code == 1
        assert err.strip().splitlines()[-1].startswith(f"pyro-attention train: error: cannot write {out}/")
        assert "Permission denied (errno 13)" in err and "Traceback" not in err
    finally:
        out.chmod(stat.S_IRWXU)


def test_write_text_is_atomic(tmp_path):
    path = write_text(tmp_path / "a.json", "old\n")
    with mock.patch.object(os, "replace", side_effect=OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))):
        with pytest.raises(WriteError, match=r"a\.json: No space left on device \(errno 28\)"):
            write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


# ----------------------------------------------------------------------------------------------------------------
# --help: every option has help text and shows its default


def _subparsers(parser: argparse.ArgumentParser | None = None, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its words (``"train"``, ``"experiment run"``), nested actions included."""
    parser = parser or cli.make_parser()
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    found = {}
    for name, sub in (action.choices.items() if action is not None else ()):
        found[prefix + name] = sub
        found.update(_subparsers(sub, prefix + name + " "))
    return found


@pytest.mark.parametrize("command", list(_subparsers()))
def test_every_option_has_help_and_shows_its_default(command):
    parser = _subparsers()[command]
    formatter = parser._get_formatter()
    missing, no_default = [], []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        if not action.help:
            missing.append(name)
            continue
        default = action.default
        if not action.option_strings or default in (None, "", argparse.SUPPRESS) or isinstance(default, bool):
            continue
        text = formatter._expand_help(action)
        shown = [f"{v:g}" if isinstance(v, float) else str(v) for v in (default if isinstance(default, list) else
                                                                         [default])]
        if not all(s in text for s in shown) or "default" not in text:
            no_default.append(f"{name}: {text!r} (default {default!r})")
    assert not missing, f"pyro-attention {command}: options without help: {missing}"
    assert not no_default, f"pyro-attention {command}: help that does not show the default: {no_default}"


@pytest.mark.parametrize("command", ["demo", "inspect", "align"])
def test_help_runs(command):
    code, out, err = _cli(command, "--help")
    assert code == 0 and "(default: " in out, err


# ----------------------------------------------------------------------------------------------------------------
# Epochs are counted from 1 everywhere: the progress bar, the log lines, the resume and interruption messages


class _RecordingBar:
    """Stands in for tqdm: records every postfix."""

    postfixes: list[dict] = []

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        pass

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, **kwargs) -> None:  # noqa: ANN003
        self.postfixes.append(kwargs)

    def close(self) -> None:
        pass


def test_epochs_are_counted_from_1_in_the_bar_the_log_and_the_resume_message(tmp_path, monkeypatch):
    import signal

    from pyro_attention.inference import loop
    from pyro_attention.inference.distributed import DataParallelSVI
    from pyro_attention.tasks.translation import TrainingInterrupted

    _RecordingBar.postfixes = []
    monkeypatch.setattr(loop, "tqdm", _RecordingBar)  # the bar of the training loop (inference/loop.py)
    config = TranslationConfig(**{**TINY, "epochs": 2}, out=str(tmp_path / "run"))  # 2 batches an epoch
    lines: list[str] = []
    train(config, progress=True, log=lines.append)
    assert [p["epoch"] for p in _RecordingBar.postfixes] == ["1/2", "1/2", "2/2", "2/2"]
    epochs = [line.split(" step")[0] for line in lines if line.startswith("epoch ")]
    assert epochs == ["epoch 1/2", "epoch 2/2"]
    assert lines[-1].startswith("best validation PPL") and " at epoch " in lines[-1]
    import csv

    with open(tmp_path / "run" / "history.csv", newline="", encoding="utf-8") as f:
        rows = [(r["kind"], r["epoch"]) for r in csv.DictReader(f)]
    assert rows == [("step", "1"), ("step", "1"), ("epoch", "1"), ("step", "2"), ("step", "2"), ("epoch", "2")]

    lines.clear()  # resumed between epochs: after epoch 2 of 3
    train(config.replace(epochs=3), progress=False, resume=True, log=lines.append)
    assert any(f"resumed from {tmp_path / 'run' / 'last.pt'}: after epoch 2/3 (step 4)" in line for line in lines)
    assert [line.split(" step")[0] for line in lines if line.startswith("epoch ")] == ["epoch 3/3"]

    # stopped in the middle of epoch 4 (its first batch), then resumed there
    step = DataParallelSVI.step

    def stepping(self, batch):  # noqa: ANN001, ANN202
        signal.raise_signal(signal.SIGINT)
        return step(self, batch)

    lines.clear()
    with monkeypatch.context() as mp:
        mp.setattr(DataParallelSVI, "step", stepping)
        with pytest.raises(TrainingInterrupted, match=r"stopped after step 7 \(in epoch 4, 1 batches in\)") as stop:
            train(config.replace(epochs=4), progress=False, resume=True, log=lines.append)
    assert stop.value.epoch == 3  # epochs completed
    assert any("stopped after step 7 (batch 1/2 of epoch 4/4)" in line for line in lines), lines
    lines.clear()
    train(config.replace(epochs=4), progress=False, resume=True, log=lines.append)
    assert any(": in epoch 4/4, 1 batches in (step 7)" in line for line in lines), lines
    assert [line.split(" step")[0] for line in lines if line.startswith("epoch ")] == ["epoch 4/4"]


# ----------------------------------------------------------------------------------------------------------------
# Progress bars: on a terminal only; a log file or a pipe gets the per-epoch lines, not every bar update


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _train_cli(out: Path, stderr: io.StringIO) -> tuple[int, str, str]:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(["train", "--out", str(out), *FLAGS, "--epochs", "2"])
    return code, stdout.getvalue(), stderr.getvalue()


def test_no_progress_bar_updates_when_stderr_is_not_a_terminal(tmp_path, run):
    code, out, err = _train_cli(tmp_path / "log", io.StringIO())
    assert code == 0
    assert "\r" not in err and "step/s" not in err and "it/s" not in err, err
    assert "epoch 1/2 step 2:" in out and "epoch 2/2 step 4:" in out  # the per-epoch lines stay
    _, out, err = _cli("evaluate", run, "--split", "val")  # scoring and decoding bars too
    assert "\r" not in err and "perplexity" in out, err


def test_progress_bar_on_a_terminal(tmp_path):
    _, out, err = _train_cli(tmp_path / "tty", _Terminal())
    assert "\r" in err and "epoch=2/2" in err  # (updates closer than tqdm's mininterval are not drawn)
    assert "epoch 1/2 step 2:" in out


# ----------------------------------------------------------------------------------------------------------------
# A degenerate model (the same output distribution for every input) is reported by evaluate


def _degenerate_checkpoint(run: Path, folder: Path) -> Path:
    """``run``'s checkpoint with the output layer's weights zeroed: its bias alone decides every prediction."""
    state = torch.load(run / "last.pt", weights_only=True)
    state["network"] = {k: torch.zeros_like(v) if k.endswith("head.out.weight") else v
                        for k, v in state["network"].items()}
    return save_checkpoint(state, folder / "degenerate.pt")


def test_evaluate_reports_a_degenerate_model(run, tmp_path):
    from pyro_attention.tasks.translation import evaluate

    healthy = evaluate(run, "val", bleu=True, kmax=0)
    assert healthy.degenerate is None
    bad = _degenerate_checkpoint(run, tmp_path)
    scored = evaluate(bad, "val", bleu=False, kmax=0)  # the cheap check: log-probabilities, no decoding
    assert scored.degenerate.startswith("degenerate: the model predicts the same next-token distribution for "
                                           "every input")
    decoded = evaluate(bad, "val", bleu=True, kmax=0)
    assert decoded.degenerate.startswith("degenerate: every one of the 8 sentences")  # ... or a prefix of it
    longest = max(decoded.hypotheses, key=len)  # the same token over and over, cut at each length limit
    assert all(longest.startswith(h) for h in decoded.hypotheses)
    assert "the same next-token distribution" in decoded.degenerate
    code, out, err = _cli("evaluate", bad, "--split", "val", "--quiet", "--json", tmp_path / "scores.json")
    assert code == 0 and "perplexity" in out
    assert "pyro-attention evaluate: warning: degenerate: every one of the 8 sentences" in err
    assert "degenerate: every one" in (tmp_path / "scores.json").read_text()


def test_a_file_in_the_way_is_named(tmp_path):
    blocker = tmp_path / "notes"
    blocker.write_text("x\n")
    with pytest.raises(WriteError, match=rf"cannot write {blocker}/a/b\.txt: .*\(errno 20\): {blocker} is a file, "
                                         "not a folder"):
        write_text(blocker / "a" / "b.txt", "text")


@pytest.mark.parametrize("config", ["RegionQAConfig", "ClevrConfig", "AlignConfig"])
def test_task_configs_check_the_learning_rate_where_it_enters(config):
    """Every task's config refuses a learning rate out of (0, 1] when it is built, naming the config (not later,
    inside fit)."""
    from pyro_attention.tasks.align import AlignConfig
    from pyro_attention.tasks.clevr import ClevrConfig
    from pyro_attention.tasks.region_qa import RegionQAConfig

    cls = {"RegionQAConfig": RegionQAConfig, "ClevrConfig": ClevrConfig, "AlignConfig": AlignConfig}[config]
    for bad in (1e30, 0.0, float("nan"), "0.1"):
        with pytest.raises(ValueError, match=rf"{config}: lr must be a learning rate in \(0, 1\]"):
            cls(lr=bad)


def test_align_json_that_is_damaged_or_unwritable_is_named(tmp_path, monkeypatch):
    import errno
    import os

    from pyro_attention.files import WriteError
    from pyro_attention.tasks.align import merge_json

    damaged = tmp_path / "aer.json"
    damaged.write_text("[{", encoding="utf-8")
    with pytest.raises(ValueError, match=r"aer.json: not a JSON list of AER rows"):
        merge_json(damaged, [])
    damaged.write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"aer.json: not a JSON list of AER rows \(it holds a dict\)"):
        merge_json(damaged, [])
    good = tmp_path / "good.json"
    row = {"corpus": "enfr", "model": "m", "output": "o", "source": "posterior", "symmetrisation": "forward"}
    assert merge_json(good, [row]) == [row]

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(WriteError, match=r"cannot write .*good.json: No space left on device"):
        merge_json(good, [dict(row, model="n")])
    assert json.loads(good.read_text()) == [row]
