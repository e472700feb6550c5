"""The bad-input catalogues' shared parts: the entry type (:class:`Mistake`), its categories, the check every entry
must pass (:func:`check_mistake`), and the helpers the entries commit their mistakes with (files in a work folder,
tiny networks and batches, a trained run, the command line).

Each layer's catalogue lives beside that layer's tests (``tests/data/test_bad_data_inputs.py``,
``tests/models/test_bad_model_inputs.py``, ... ``tests/cli/test_bad_cli_inputs.py``); ``tests/test_bad_inputs.py``
gathers them for docs/troubleshooting.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import io
import os
import re
import shutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
import torch

from pyro_attention import cli
from pyro_attention.data import RegionBatch, make_region_qa
from pyro_attention.data.corpora import DATA_ENV, multi30k_paths
from pyro_attention.data.translation import collate
from pyro_attention.inference import log_likelihood
from pyro_attention.models import MarginalLikelihood
from pyro_attention.networks import RegionQA, Seq2Seq
from pyro_attention.tasks.translation import TranslationConfig, save_checkpoint, train
from tests.support.paths import REPO

TINY = dict(
    train_size=16, val_size=8, batch_size=8, embedding=8, encoder=8, decoder=16, attention=8, epochs=1, threads=0
)

WORK: list[Path] = []  # the folder for this run's files (set by the ``mistake_work_dir`` fixture or by a script)


def start_work(folder: Path) -> None:
    """Make ``folder`` the work folder of the entries (and forget the trained run of the previous one)."""
    WORK[:] = [folder]
    tiny_run.cache_clear()


# ----------------------------------------------------------------------------------------------------------------
# Helpers: files, tiny networks and batches, a trained run, the command line


def work_path(name: str) -> Path:
    return WORK[0] / name


def work_file(name: str, text: str | bytes) -> Path:
    path = work_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def region_net() -> tuple[RegionQA, RegionBatch]:
    """Region QA: B=4 scenes of 3..6 regions with F=13 features, 8 answers, a question vocabulary of 9."""
    ds = make_region_qa(4, seed=0)
    return RegionQA(ds.feature_size, len(ds.answers), vocab_size=len(ds.vocab), hidden_size=8), ds.data


def region_ll(**change) -> None:
    """Commit a mistake in a region batch: ``change`` maps a field to a function of the good batch."""
    net, batch = region_net()
    bad = dataclasses.replace(batch, **{k: f(batch) for k, f in change.items()})
    log_likelihood(MarginalLikelihood(net), bad)


def seq2seq_10_12() -> Seq2Seq:
    """Source vocabulary 10, target vocabulary 12."""
    return Seq2Seq(10, 12, embedding_size=4, encoder_size=4, decoder_size=8, attention_size=4)


def translation_ll(**change) -> None:
    """Commit a mistake in a translation batch (B=2, S=3, T=4; the second pair padded on both sides)."""
    batch = collate([([4, 5, 6], [4, 5]), ([7, 8], [6, 7, 8])])
    bad = dataclasses.replace(batch, **{k: f(batch) for k, f in change.items()})
    log_likelihood(MarginalLikelihood(seq2seq_10_12()), bad)


def with_value(x: torch.Tensor, index: tuple, value) -> torch.Tensor:  # noqa: ANN001
    x = x.clone()
    x[index] = value
    return x


def work_gz(name: str, text: str) -> Path:
    path = work_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(text)
    return path


def work_parallel(name: str, src: str, tgt: str) -> tuple[Path, Path]:
    return work_file(f"{name}.src", src), work_file(f"{name}.tgt", tgt)


def tiny_config(**kw) -> TranslationConfig:
    return TranslationConfig(**{**TINY, **kw})


@functools.cache
def tiny_run() -> Path:
    """One tiny soft-attention run on the synthetic corpus (2 steps); its folder holds last.pt and best.pt."""
    out = work_path("run")
    train(tiny_config(out=str(out)), progress=False, log=None)
    return out


def busy_folder_run() -> None:
    """Train into a folder whose lock another writer (here: this process, through its own open file) holds."""
    import fcntl

    out = work_path("busy")
    out.mkdir(exist_ok=True)
    with open(out / ".lock", "w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        holder.write("4242\n")
        holder.flush()
        train(tiny_config(out=str(out)), progress=False, log=None)


def run_experiment(toml: str, *flags: str) -> None:
    """``pyro-attention experiment run`` on an experiment file ``exp.toml`` holding ``toml``, runs folder ``runs``."""
    run_cli("experiment", "run", "--config", work_file("exp.toml", toml), "--out", work_path("runs"), *flags)


def status_with(runs: str, name: str, text: str) -> None:
    """``pyro-attention experiment status`` on a one-row file whose row folder ``runs/a`` holds ``name`` with
    ``text`` (a row file edited by hand)."""
    work_file(f"{runs}/a/{name}", text)
    one_row = '[shared]\n[[rows]]\nlabel = "a"\nmodel = "soft"\n'
    run_cli("experiment", "status", "--config", work_file("exp.toml", one_row), "--out", work_path(runs))


def run_cli(*argv: str) -> None:
    """Run the command line; its exit becomes ``SystemExit("exit status N: <the last line on stderr>")`` (the
    ``error:`` line; argparse prints the usage before it)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.main([str(a) for a in argv])
        except SystemExit as e:
            last = (err.getvalue().strip().splitlines() or [""])[-1]
            raise SystemExit(f"exit status {e.code}: {last}") from None


def without_data_env(fn: Callable[[], object]) -> None:
    with mock.patch.dict(os.environ):
        os.environ.pop(DATA_ENV, None)
        fn()


def damaged_checkpoint(kind: str) -> Path:
    last = tiny_run() / "last.pt"
    if kind == "truncated":
        return work_file("truncated.pt", last.read_bytes()[:600])
    if kind == "text":
        return work_file("notes.pt", "these are my notes, not a checkpoint\n")
    if kind == "foreign":
        path = work_path("foreign.pt")
        torch.save({"model": {"weight": torch.zeros(2)}}, path)
        return path
    state = torch.load(last, weights_only=True)
    if kind == "missing-entry":
        del state["tgt_vocab"]
        return save_checkpoint(state, work_path("missing-entry.pt"))
    key = next(k for k in state["network"] if k.endswith("tgt_embed.weight"))
    if kind == "nan":
        state["network"][key][1, 0] = float("nan")
        return save_checkpoint(state, work_path("nan.pt"))
    if kind == "vocab-json":  # the target vocabulary's JSON cut short (an edited or half-copied file)
        state["tgt_vocab"] = state["tgt_vocab"][:25]
        return save_checkpoint(state, work_path("vocab-json.pt"))
    if kind == "vocab-type":  # the source vocabulary replaced by something that is not JSON text
        state["src_vocab"] = 42
        return save_checkpoint(state, work_path("vocab-type.pt"))
    state["network"][key] = torch.zeros(3, 3)  # "weights": a network weight of another shape
    return save_checkpoint(state, work_path("reshaped.pt"))


def failing_checkpoint_write(error: BaseException | None = None) -> None:
    """Save a checkpoint over an existing one while ``torch.save`` fails (by default as its zip writer does on a
    full disk)."""
    state = torch.load(tiny_run() / "last.pt", weights_only=True)
    path = save_checkpoint(state, work_path("full/last.pt"))
    error = error or RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    full = mock.Mock(return_value=shutil._ntuple_diskusage(10 * 2**30, 10 * 2**30, 0))  # a full disk
    with mock.patch.object(torch, "save", side_effect=error), mock.patch.object(shutil, "disk_usage", full):
        save_checkpoint(state, path)


def diverging_run() -> None:
    """``pyro-attention train`` whose first step returns a NaN loss (as a far too high learning rate does)."""
    from pyro_attention.inference.distributed import DataParallelSVI

    with mock.patch.object(DataParallelSVI, "step", return_value=float("nan")):
        run_cli("train", "--quiet", "--out", work_path("diverged"), *tiny_flags())


def tiny_flags() -> list[str]:
    """``TINY`` as command-line flags."""
    return [a for k, v in TINY.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def old_version_run() -> Path:
    state = torch.load(tiny_run() / "last.pt", weights_only=True)
    state["package_version"] = "0.0.1"
    save_checkpoint(state, work_path("old-version/last.pt"))
    return work_path("old-version")


def multi30k_layout(split_lang: str = "fr") -> None:
    root = work_path("data")
    for lang in ("de", "en"):
        work_gz(f"data/multi30k/tok/val.lc.norm.tok.{lang}.gz", "ein hund\n")
    multi30k_paths(root, "val", "de", split_lang)


def null_hmm():  # noqa: ANN202
    from pyro_attention.networks.lexical import HMMNetwork

    return HMMNetwork(9, 8, null_prob=0.2)


def decoder_expert_hmm():  # noqa: ANN202
    from pyro_attention.networks.lexical import DecoderExpert, HMMNetwork

    return HMMNetwork(9, 8, decoder_expert=DecoderExpert(7))


# ----------------------------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------------------------
# The entries


@dataclass(frozen=True)
class Mistake:
    id: str
    category: str
    what: str  # the mistake, as the user would describe it
    commit: Callable[[], object]
    error: type[BaseException]
    message: str  # a regex the message must match; it names the item
    fix: str  # what to do instead (for docs/troubleshooting.md)


FILES, DIRS, VOCAB, GOLD, NAMES, CONFIG, CKPT, TENSORS, SIZES, WRITES = (
    "Corpus and text files",
    "Data directories and corpus layouts",
    "Vocabularies",
    "Gold alignments",
    "Unknown names: pairs, estimators, options, rules, tasks",
    "Configuration",
    "Checkpoints and resuming",
    "Tensors: values, shapes, dtypes, padding",
    "Sizes and counts",
    "Writing outputs: checkpoints, CSV, JSON, figures",
)


def _raised_here(error: BaseException) -> bool:
    """The exception was raised by this package (its innermost frame is in the repository, not in torch or Pyro)."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(REPO)


def check_mistake(mistake: Mistake) -> None:
    """Commit ``mistake``: it must raise its error type with a message matching its regex, raised by this package
    (never from deep inside torch or Pyro); a command-line mistake ends in one ``error:`` line, exit status 1 or 2."""
    with pytest.raises(mistake.error, match=mistake.message) as info:
        mistake.commit()
    assert type(info.value) is mistake.error, f"{type(info.value).__name__}: {info.value}"
    if mistake.error is SystemExit:
        assert re.match(r"exit status [12]: ", str(info.value)) and "Traceback" not in str(info.value)
    else:
        assert _raised_here(info.value), "".join(traceback.format_exception(info.value))


def mistake_test(catalogue: list[Mistake]) -> Callable[[Mistake], None]:
    """The test of a layer's catalogue: each entry committed once, in the module's own work folder
    (``test_mistake_gets_a_clear_error = mistake_test(CATALOGUE)``)."""

    @pytest.mark.usefixtures("mistake_work_dir")
    @pytest.mark.parametrize("mistake", catalogue, ids=[m.id for m in catalogue])
    def test_mistake_gets_a_clear_error(mistake: Mistake) -> None:
        check_mistake(mistake)

    return test_mistake_gets_a_clear_error
