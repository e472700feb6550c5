"""The bad-input catalogue: every user mistake we know of, each committed once, each with a clear error.

One entry per mistake: an id, the category and a one-line description, a zero-argument callable that commits the
mistake through a public entry point (a reader, a batch, a pair, ``fit`` / ``log_likelihood`` / ``predict``, the
translation config and checkpoints, the command line), the exception type expected and a regex the message
must match.  The regex checks that the message *names the item*: the file and line, the tensor and its shape
or dtype, the option and the allowed values.  The error must be raised by this package (never from deep inside
torch or Pyro), and command-line mistakes must end in one ``error:`` line with exit status 1 or 2.

``docs/troubleshooting.md`` lists every entry (``test_every_mistake_is_documented`` keeps it from drifting);
``python -m tests.test_bad_inputs`` prints its tables from a real run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import gzip
import io
import json
import os
import re
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
import torch

from pyro_attention import cli
from pyro_attention.aer import alignment_error_rate, combine_posteriors, links_from_probs, symmetrize
from pyro_attention.data import RegionBatch, make_region_qa
from pyro_attention.data.alignments import read_bitext, read_naacl, read_pharaoh
from pyro_attention.data.clevr import ClevrFormatError, read_scenes
from pyro_attention.data.corpora import DATA_ENV, data_dir, multi30k_paths
from pyro_attention.data.text import Vocab, bucket_batches, read_lines, read_parallel
from pyro_attention.data.translation import collate
from pyro_attention.files import WriteError
from pyro_attention.inference import (
    fit,
    kmax_log_likelihood,
    log_likelihood,
    map_alignment,
    nuts_alignment,
    predict,
    save_netcdf,
    to_inference_data,
)
from pyro_attention.metrics import bleu, perplexity
from pyro_attention.models import MarginalLikelihood, RelaxedAttention, SoftAttention
from pyro_attention.networks import RegionQA, Seq2Seq
from pyro_attention.pair import RuleError
from pyro_attention.plots import alignment_heatmaps
from pyro_attention.registry import make_pair, parse_options
from pyro_attention.tasks.align import AlignConfig
from pyro_attention.tasks.translation import (
    BeamSearch,
    TranslationConfig,
    evaluate,
    load_checkpoint,
    load_corpora,
    save_checkpoint,
    train,
    translate_lines,
)
from pyro_attention.tasks.translation.decoding import greedy, translate
from tests.support.paths import REPO

DOC = REPO / "docs" / "troubleshooting.md"
TINY = dict(
    train_size=16, val_size=8, batch_size=8, embedding=8, encoder=8, decoder=16, attention=8, epochs=1, threads=0
)

_WORK: list[Path] = []  # the folder for this run's files (set by the fixture or by __main__)


@pytest.fixture(scope="module", autouse=True)
def _work_dir(tmp_path_factory):
    _WORK[:] = [tmp_path_factory.mktemp("bad_inputs")]
    _run.cache_clear()
    yield
    _run.cache_clear()


# ----------------------------------------------------------------------------------------------------------------
# Helpers: files, tiny networks and batches, a trained run, the command line


def _path(name: str) -> Path:
    return _WORK[0] / name


def _file(name: str, text: str | bytes) -> Path:
    path = _path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _region() -> tuple[RegionQA, RegionBatch]:
    """Region QA: B=4 scenes of 3..6 regions with F=13 features, 8 answers, a question vocabulary of 9."""
    ds = make_region_qa(4, seed=0)
    return RegionQA(ds.feature_size, len(ds.answers), vocab_size=len(ds.vocab), hidden_size=8), ds.data


def _region_ll(**change) -> None:
    """Commit a mistake in a region batch: ``change`` maps a field to a function of the good batch."""
    net, batch = _region()
    bad = dataclasses.replace(batch, **{k: f(batch) for k, f in change.items()})
    log_likelihood(MarginalLikelihood(net), bad)


def _seq2seq() -> Seq2Seq:
    """Source vocabulary 10, target vocabulary 12."""
    return Seq2Seq(10, 12, embedding_size=4, encoder_size=4, decoder_size=8, attention_size=4)


def _translation_ll(**change) -> None:
    """Commit a mistake in a translation batch (B=2, S=3, T=4; the second pair padded on both sides)."""
    batch = collate([([4, 5, 6], [4, 5]), ([7, 8], [6, 7, 8])])
    bad = dataclasses.replace(batch, **{k: f(batch) for k, f in change.items()})
    log_likelihood(MarginalLikelihood(_seq2seq()), bad)


def _set(x: torch.Tensor, index: tuple, value) -> torch.Tensor:  # noqa: ANN001
    x = x.clone()
    x[index] = value
    return x


def _gz(name: str, text: str) -> Path:
    path = _path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(text)
    return path


def _parallel(name: str, src: str, tgt: str) -> tuple[Path, Path]:
    return _file(f"{name}.src", src), _file(f"{name}.tgt", tgt)


def _config(**kw) -> TranslationConfig:
    return TranslationConfig(**{**TINY, **kw})


@functools.cache
def _run() -> Path:
    """One tiny soft-attention run on the synthetic corpus (2 steps); its folder holds last.pt and best.pt."""
    out = _path("run")
    train(_config(out=str(out)), progress=False, log=None)
    return out


def _busy_folder() -> None:
    """Train into a folder whose lock another writer (here: this process, through its own open file) holds."""
    import fcntl

    out = _path("busy")
    out.mkdir(exist_ok=True)
    with open(out / ".lock", "w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        holder.write("4242\n")
        holder.flush()
        train(_config(out=str(out)), progress=False, log=None)


def _experiment(toml: str, *flags: str) -> None:
    """``pyro-attention experiment run`` on an experiment file ``exp.toml`` holding ``toml``, runs folder ``runs``."""
    _cli("experiment", "run", "--config", _file("exp.toml", toml), "--out", _path("runs"), *flags)


def _status_with(runs: str, name: str, text: str) -> None:
    """``pyro-attention experiment status`` on a one-row file whose row folder ``runs/a`` holds ``name`` with
    ``text`` (a row file edited by hand)."""
    _file(f"{runs}/a/{name}", text)
    _cli("experiment", "status", "--config", _file("exp.toml", '[shared]\n[[rows]]\nlabel = "a"\nmodel = "soft"\n'),
         "--out", _path(runs))


def _cli(*argv: str) -> None:
    """Run the command line; its exit becomes ``SystemExit("exit status N: <the last line on stderr>")`` (the
    ``error:`` line; argparse prints the usage before it)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.main([str(a) for a in argv])
        except SystemExit as e:
            last = (err.getvalue().strip().splitlines() or [""])[-1]
            raise SystemExit(f"exit status {e.code}: {last}") from None


def _no_data_env(fn: Callable[[], object]) -> None:
    with mock.patch.dict(os.environ):
        os.environ.pop(DATA_ENV, None)
        fn()


def _damaged_checkpoint(kind: str) -> Path:
    last = _run() / "last.pt"
    if kind == "truncated":
        return _file("truncated.pt", last.read_bytes()[:600])
    if kind == "text":
        return _file("notes.pt", "these are my notes, not a checkpoint\n")
    if kind == "foreign":
        path = _path("foreign.pt")
        torch.save({"model": {"weight": torch.zeros(2)}}, path)
        return path
    state = torch.load(last, weights_only=True)
    if kind == "missing-entry":
        del state["tgt_vocab"]
        return save_checkpoint(state, _path("missing-entry.pt"))
    key = next(k for k in state["network"] if k.endswith("tgt_embed.weight"))
    if kind == "nan":
        state["network"][key][1, 0] = float("nan")
        return save_checkpoint(state, _path("nan.pt"))
    if kind == "vocab-json":  # the target vocabulary's JSON cut short (an edited or half-copied file)
        state["tgt_vocab"] = state["tgt_vocab"][:25]
        return save_checkpoint(state, _path("vocab-json.pt"))
    if kind == "vocab-type":  # the source vocabulary replaced by something that is not JSON text
        state["src_vocab"] = 42
        return save_checkpoint(state, _path("vocab-type.pt"))
    state["network"][key] = torch.zeros(3, 3)  # "weights": a network weight of another shape
    return save_checkpoint(state, _path("reshaped.pt"))


def _failing_checkpoint_write(error: BaseException | None = None) -> None:
    """Save a checkpoint over an existing one while ``torch.save`` fails (by default as its zip writer does on a
    full disk)."""
    state = torch.load(_run() / "last.pt", weights_only=True)
    path = save_checkpoint(state, _path("full/last.pt"))
    error = error or RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    full = mock.Mock(return_value=shutil._ntuple_diskusage(10 * 2**30, 10 * 2**30, 0))  # a full disk
    with mock.patch.object(torch, "save", side_effect=error), mock.patch.object(shutil, "disk_usage", full):
        save_checkpoint(state, path)


def _diverging_run() -> None:
    """``pyro-attention train`` whose first step returns a NaN loss (as a far too high learning rate does)."""
    from pyro_attention.inference.distributed import DataParallelSVI

    with mock.patch.object(DataParallelSVI, "step", return_value=float("nan")):
        _cli("train", "--quiet", "--out", _path("diverged"), *_tiny_flags())


def _tiny_flags() -> list[str]:
    """``TINY`` as command-line flags."""
    return [a for k, v in TINY.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def _old_version_run() -> Path:
    state = torch.load(_run() / "last.pt", weights_only=True)
    state["package_version"] = "0.0.1"
    save_checkpoint(state, _path("old-version/last.pt"))
    return _path("old-version")


def _multi30k(split_lang: str = "fr") -> None:
    root = _path("data")
    for lang in ("de", "en"):
        _gz(f"data/multi30k/tok/val.lc.norm.tok.{lang}.gz", "ein hund\n")
    multi30k_paths(root, "val", "de", split_lang)


def _null_hmm():  # noqa: ANN202
    from pyro_attention.networks.lexical import HMMNetwork

    return HMMNetwork(9, 8, null_prob=0.2)


def _decoder_expert_hmm():  # noqa: ANN202
    from pyro_attention.networks.lexical import DecoderExpert, HMMNetwork

    return HMMNetwork(9, 8, decoder_expert=DecoderExpert(7))


# ----------------------------------------------------------------------------------------------------------------
# The catalogue


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

CATALOGUE: list[Mistake] = [
    # -- corpus and text files -----------------------------------------------------------------------------------
    Mistake(
        "corpus-old-mac-line-endings", FILES, "a corpus with old-Mac `\\r` line endings (it trained on 1 pair instead "
        "of 3)",
        lambda: read_parallel(*_parallel("mac", "ein hund\reine katze\rein haus\r", "a dog\ra cat\ra house\r")),
        ValueError, r"mac\.src: line 1 holds a carriage return \(\\r\) inside it: the file has old-Mac line endings",
        "Convert the line endings to `\\n` (`tr '\\r' '\\n'`).",
    ),
    Mistake(
        "directory-for-a-file", FILES, "a directory given where a file belongs (it was called 'no such file')",
        lambda: _cli("train", "--config", str(_WORK[0])),
        SystemExit, r"exit status [12]: .*: is a directory, not a config file",
        "Give the file inside the directory.",
    ),
    Mistake(
        "corpus-line-counts", FILES, "source and target files of a parallel corpus have different numbers of lines",
        lambda: read_parallel(*_parallel("counts", "ein hund\neine katze\n", "a dog\n")),
        ValueError, r"counts\.src has 2 lines, .*counts\.tgt has 1 lines",
        "Line the files up (one sentence pair per line in both); check for a lost or extra line.",
    ),
    Mistake(
        "corpus-empty-line", FILES, "an empty (or whitespace-only) line in a parallel corpus",
        lambda: read_parallel(*_parallel("empty", "ein hund\neine katze\n", "a dog\n   \n")),
        ValueError, r"empty\.tgt: line 2 is empty",
        "Remove the pair from both files (or fill in the missing sentence).",
    ),
    Mistake(
        "corpus-invalid-utf8", FILES, "a corpus line that is not valid UTF-8 (e.g. a Latin-1 file)",
        lambda: read_lines(_file("latin1.de", b"ein hund\n" + "fährt\n".encode("latin-1"))),
        ValueError, r"latin1\.de: line 2 is not valid UTF-8",
        "Re-encode the file as UTF-8 (`iconv -f latin1 -t utf-8`).",
    ),
    Mistake(
        "corpus-missing-file", FILES, "a corpus file that does not exist",
        lambda: read_parallel(_path("nope.src"), _path("nope.tgt")),
        FileNotFoundError, r"nope\.src: no such file",
        "Check the path (relative paths are relative to the working directory).",
    ),
    Mistake(
        "corpus-not-gzip", FILES, "a file named `.gz` that is not gzip-compressed",
        lambda: read_lines(_file("plain.de.gz", "ein hund\n")),
        ValueError, r"plain\.de\.gz: cannot be read as gzip",
        "Compress it (`gzip file`) or drop the `.gz` suffix.",
    ),
    Mistake(
        "corpus-max-len-not-positive", FILES, "`max_len=0` when reading a corpus",
        lambda: read_parallel(*_parallel("ok", "ein hund\n", "a dog\n"), max_len=0),
        ValueError, r"max_len must be a positive integer or None, got 0",
        "Give a positive length, or `None` for no limit.",
    ),
    Mistake(
        "corpus-all-pairs-too-long", FILES, "`max_len` so small that every training pair is dropped",
        lambda: load_corpora(
            _config(
                data="parallel", max_len=1, train_size=None, val_size=None,
                train_src=str(_file("long.src", "ein hund\neine katze\n")),
                train_tgt=str(_file("long.tgt", "a dog\na cat\n")),
                val_src=str(_file("v.src", "hund\n")), val_tgt=str(_file("v.tgt", "dog\n")),
            ),
            log=None,
        ),
        ValueError, r"train split \(.*long\.src / .*long\.tgt\) holds no sentence pairs: all 2 pairs have a side "
        r"longer than max_len 1",
        "Raise `max_len` (`--max-len`).",
    ),
    Mistake(
        "parallel-missing-val-files", FILES, "`--data parallel` without validation files",
        lambda: _config(data="parallel", train_src="a.src", train_tgt="a.tgt"),
        ValueError, r"data 'parallel' needs the paths --val-src, --val-tgt",
        "Give `--val-src` and `--val-tgt` (a held-out part of your corpus).",
    ),
    Mistake(
        "parallel-cli-line-counts", FILES, "`pyro-attention train --data parallel` on files of different lengths",
        lambda: _cli(
            "train", "--data", "parallel", "--quiet", "--out", _path("parallel-run"),
            "--train-src", _file("p.src", "ein hund\neine katze\n"), "--train-tgt", _file("p.tgt", "a dog\n"),
            "--val-src", _file("pv.src", "hund\n"), "--val-tgt", _file("pv.tgt", "dog\n"),
        ),
        SystemExit, r"exit status 1: pyro-attention train: error: parallel files differ in length: .*p\.src has 2 "
        r"lines, .*p\.tgt has 1 lines",
        "Line the files up.",
    ),
    Mistake(
        "references-too-short", FILES, "a BLEU reference file with fewer lines than the source file",
        lambda: evaluate(
            _run(), src_file=_file("e.src", "a b\nc d\n"), tgt_file=_file("e.tgt", "a b\nc d\n"),
            ref_file=_file("e.ref", "a b\n"),
        ),
        ValueError, r"e\.ref: 1 reference lines, fewer than the 2 source lines",
        "Give the raw references of the same sentences, one a line.",
    ),
    Mistake(
        "bitext-no-separator", FILES, "a `source ||| target` line without the separator",
        lambda: read_bitext(_file("x.src-tgt", "ein hund ||| a dog\neine katze a cat\n")),
        ValueError, r"x\.src-tgt: line 2 has no '\|\|\|' separator",
        "Write every line as `source tokens ||| target tokens`.",
    ),
    Mistake(
        "translate-input-invalid-utf8", FILES, "`pyro-attention translate` on an input file that is not UTF-8",
        lambda: _cli("translate", _run(), _file("input.txt", b"a b\n" + "\xe9t\xe9\n".encode("latin-1"))),
        SystemExit, r"exit status 1: pyro-attention translate: error: .*input\.txt: line 2 is not valid UTF-8",
        "Re-encode the input as UTF-8.",
    ),
    # -- data directories ------------------------------------------------------------------------------------------
    Mistake(
        "data-dir-unset", DIRS, "a corpus on disk without `--data-dir` or `PYRO_ATTENTION_DATA`",
        lambda: _no_data_env(lambda: data_dir(None)),
        FileNotFoundError, r"no data directory given: pass --data-dir PATH or set the PYRO_ATTENTION_DATA",
        "Pass `--data-dir PATH` or `export PYRO_ATTENTION_DATA=PATH`.",
    ),
    Mistake(
        "data-dir-missing", DIRS, "`--data-dir` pointing to a folder that does not exist",
        lambda: load_corpora(_config(data="multi30k", data_dir=str(_path("no-such-data"))), log=None),
        FileNotFoundError, r"data directory .*no-such-data \(from --data-dir .*\) does not exist",
        "Fix the path.",
    ),
    Mistake(
        "corpus-folder-missing", DIRS, "a data directory without the corpus folder (`multi30k/`)",
        lambda: load_corpora(_config(data="multi30k", data_dir=str(_WORK[0])), log=None),
        FileNotFoundError, r"multi30k: no such directory \(expected the multi30k corpus under ",
        "Point `--data-dir` at the folder that holds `multi30k/` (or at `multi30k/` itself).",
    ),
    Mistake(
        "multi30k-missing-file", DIRS, "a language pair that the corpus folder lacks a file for",
        _multi30k,
        FileNotFoundError, r"multi30k/tok/val\.lc\.norm\.tok\.fr\.gz: no such file",
        "Choose a language (and split) that exists: Czech has no 2017 test sets.",
    ),
    Mistake(
        "multi30k-unknown-split", DIRS, "an unknown Multi30k split",
        lambda: multi30k_paths(_WORK[0], "dev"),
        ValueError, r"unknown Multi30k split 'dev'; allowed: train, val, test_2016_flickr",
        "Use one of the listed splits.",
    ),
    Mistake(
        "multi30k-unknown-language", DIRS, "an unknown Multi30k language",
        lambda: _config(data="multi30k", src="xx"),
        ValueError, r"src must be one of de, en, fr, cs; got 'xx'",
        "Use one of the listed languages.",
    ),
    Mistake(
        "clevr-scenes-missing", DIRS, "a CLEVR scene file that does not exist",
        lambda: read_scenes(_path("CLEVR_val_scenes.json.gz")),
        FileNotFoundError, r"CLEVR_val_scenes\.json\.gz.*does not exist",
        "Point `--data-dir` at the folder holding `clevr/`.",
    ),
    Mistake(
        "clevr-scenes-not-json", DIRS, "a CLEVR scene file that is not JSON",
        lambda: read_scenes(_gz("broken_scenes.json.gz", "{not json")),
        ClevrFormatError, r"broken_scenes\.json\.gz.*not valid JSON",
        "Download the scene file again; it is damaged.",
    ),
    # -- vocabularies ----------------------------------------------------------------------------------------------
    Mistake(
        "vocab-file-not-vocab", VOCAB, "loading a vocabulary from a JSON file that is not one",
        lambda: Vocab.load(_file("vocab.json", json.dumps({"hund": 4}))),
        ValueError, r"vocab\.json: not a pyro_attention\.Vocab JSON document",
        "Load a file written by `Vocab.save`.",
    ),
    Mistake(
        "vocab-id-out-of-range", VOCAB, "decoding an id that the vocabulary does not have",
        lambda: Vocab(["hund", "katze"]).decode([4, 99]),
        ValueError, r"Vocab\.decode: id 99 is out of range for vocabulary size 6",
        "Decode with the vocabulary the ids were made with.",
    ),
    Mistake(
        "vocab-encode-string", VOCAB, "encoding a sentence string instead of a token list",
        lambda: Vocab(["hund"]).encode("ein hund"),
        TypeError, r"Vocab\.encode expects a list of tokens, not a string",
        "Split first: `vocab.encode(sentence.split())`.",
    ),
    Mistake(
        "vocab-duplicate-token", VOCAB, "a vocabulary with a token twice (or a special token)",
        lambda: Vocab(["hund", "katze", "hund"]),
        ValueError, r"Vocab: 'hund' is a duplicate",
        "Deduplicate the token list (`Vocab.build` does).",
    ),
    Mistake(
        "vocab-max-size-too-small", VOCAB, "a vocabulary size limit below the four special tokens",
        lambda: Vocab.build([["a", "b"]], max_size=2),
        ValueError, r"Vocab\.build: max_size must be >= 4 \(the specials\), got 2",
        "Allow at least 4 entries (`<pad> <s> </s> <unk>`) plus the words.",
    ),
    # -- gold alignments -------------------------------------------------------------------------------------------
    Mistake(
        "gold-pharaoh-malformed", GOLD, "a Pharaoh gold line with a token that is not a link",
        lambda: read_pharaoh(_file("bad.gold", "0-0 1-1\n0-0 2_2\n"), one_indexed=False),
        ValueError, r"bad\.gold: line 2: '2_2' is not a link",
        "Write links as `i-j` (sure) or `ipj` (possible).",
    ),
    Mistake(
        "gold-pharaoh-line-count", GOLD, "a gold file with another number of lines than sentence pairs",
        lambda: read_pharaoh(_file("short.gold", "0-0\n1-1\n"), one_indexed=False, source_lengths=[2, 2, 2]),
        ValueError, r"short\.gold: 2 lines but 3 source lengths",
        "Give one gold line per sentence pair (an empty line for a pair without links).",
    ),
    Mistake(
        "gold-naacl-malformed", GOLD, "a NAACL gold line without `SNUM i j`",
        lambda: read_naacl(_file("bad.wa", "1 1\n")),
        ValueError, r"bad\.wa: line 1: expected 'SNUM i j \[S\|P\] \[confidence\]', got '1 1'",
        "One link a line: sentence number, source position, target position, optional S/P.",
    ),
    Mistake(
        "gold-link-outside-source", GOLD, "a gold link to a source position past the end of the sentence",
        lambda: collate([([4, 5], [6, 7])], gold=[[0, 5]]),
        ValueError, r"collate: gold alignment 0 links target token 1 to source position 5, outside the 2 source "
        r"tokens",
        "Use 0-based source positions below the source length, or -1 for an unaligned token.",
    ),
    Mistake(
        "gold-link-count", GOLD, "a gold alignment with another number of links than target tokens",
        lambda: collate([([4, 5], [6])], gold=[[0, 1]]),
        ValueError, r"collate: gold alignment 0 has 2 links for 1 target tokens",
        "Give one source position (or -1) per target token.",
    ),
    Mistake(
        "gold-link-to-padding", GOLD, "a batch whose gold alignment points at a padded source position",
        lambda: _translation_ll(gold=lambda b: _set(torch.full_like(b.target, -1), (1, 0), 2)),
        ValueError, r"gold\[1, 0\] = 2 points outside the 2 real source tokens of example 1",
        "Gold positions must be real source positions, or -1.",
    ),
    Mistake(
        "gold-region-out-of-range", GOLD, "a region-QA gold region outside the scene's real regions",
        lambda: _region_ll(gold=lambda b: b.gold + 10),
        ValueError, r"gold\[0\] = \d+ points outside the \d+ real regions of example 0 \(use -1",
        "Use the index of a real region, or -1 for 'no gold region'.",
    ),
    Mistake(
        "aer-count-mismatch", GOLD, "scoring a different number of predicted alignments than gold ones",
        lambda: alignment_error_rate([{(0, 0)}, {(1, 1)}], [{(0, 0)}]),
        ValueError, r"alignment_error_rate: 2 predicted alignments for 1 gold ones",
        "Predict one alignment per gold sentence pair, in the same order.",
    ),
    Mistake(
        "null-word-missing", GOLD, "a batch for a network with a NULL word (`null_prob`) whose source sentences lack "
        "it at position 0",
        lambda: _null_hmm().encode(collate([([4, 5], [6])])),
        ValueError, r"HMMNetwork\(null_prob=\.\.\.\): source position 0 must be the NULL word <s> \(id 1\) in every "
        r"row; row 0 holds id 4 \(prepend it with pyro_attention\.networks\.lexical\.with_null_word\)",
        "Put the NULL word in front of every source sentence (`with_null_word(ids)`); `pyro-attention align "
        "--null-prob` does it for you.",
    ),
    Mistake(
        "null-prob-network", GOLD, "`pyro-attention align --null-prob` with a network that has no NULL word",
        lambda: AlignConfig(network="distortion", models=["marginal"], null_prob=0.2),
        ValueError, r"null_prob: network 'distortion' has no NULL word; only ibm1, hmm take --null-prob, got 0\.2",
        "Use `--network ibm1` or `--network hmm`, or leave `--null-prob` out.",
    ),
    Mistake(
        "decoder-expert-network", GOLD, "`pyro-attention align --decoder-expert` with a network that takes none",
        lambda: AlignConfig(network="ibm1", models=["marginal"], decoder_expert=64),
        ValueError, r"decoder_expert: network 'ibm1' takes no decoder's expert here; only hmm take "
        r"--decoder-expert, got 64",
        "Use `--network hmm`, or leave `--decoder-expert` out (`--network product` has its own decoder's expert).",
    ),
    Mistake(
        "decoder-expert-classes", GOLD, "a DecoderExpert for another target vocabulary than its HMMNetwork's",
        lambda: _decoder_expert_hmm(),
        ValueError, r"HMMNetwork: decoder_expert has 7 classes, the network 8",
        "Build the DecoderExpert with the network's target vocabulary size.",
    ),
    # -- unknown names ---------------------------------------------------------------------------------------------
    Mistake(
        "unknown-pair", NAMES, "a pair name that does not exist",
        lambda: make_pair("transformer", _region()[0]),
        ValueError, r"unknown pair 'transformer'; choose from soft, marginal, hard, variational, relaxed, .*rws",
        "Use one of the listed names (`pyro_attention.registry.ALL_PAIRS`).",
    ),
    Mistake(
        "unknown-estimator", NAMES, "an estimator the pair does not have",
        lambda: make_pair("hard", _region()[0], "reinforce"),
        ValueError, r"estimator 'reinforce' of pair 'hard': choose from enum, sample",
        "Use one of the listed estimators.",
    ),
    Mistake(
        "estimator-without-choice", NAMES, "an estimator for a pair that has no choice of estimator",
        lambda: make_pair("soft", _region()[0], "enum"),
        ValueError, r"pair 'soft' has no choice of estimator, got 'enum'; estimators exist for hard \(enum/sample\)",
        "Leave the estimator out for this pair.",
    ),
    Mistake(
        "unknown-pair-option", NAMES, "a constructor option the pair does not have",
        lambda: make_pair("gaussian", _region()[0], klscale=0.01),
        ValueError, r"pair 'gaussian' has no option 'klscale'; its options: prior='standard', .*kl_scale=1\.0",
        "Use one of the listed options (spelled as listed).",
    ),
    Mistake(
        "option-without-value", NAMES, "`--option kl_scale` without `=VALUE`",
        lambda: parse_options(["kl_scale"]),
        ValueError, r"option 'kl_scale': expected KEY=VALUE, e\.g\. kl_scale=0\.01",
        "Write `--option kl_scale=0.01`.",
    ),
    Mistake(
        "cli-unknown-model", NAMES, "`pyro-attention train --model` with a misspelt pair",
        lambda: _cli("train", "--model", "sof"),
        SystemExit,
        r"exit status 2: pyro-attention train: error: argument --model: invalid choice: 'sof' \(choose from "
        r"'?soft'?, '?marginal'?",
        "Use one of the listed models.",
    ),
    Mistake(
        "cli-unknown-task", NAMES, "`pyro-attention demo --task` with an unknown task",
        lambda: _cli("demo", "--task", "vqa"),
        SystemExit, r"exit status 2: pyro-attention demo: error: argument --task: invalid choice: 'vqa' \(choose from "
        r"'?synthetic'?, '?clevr'?\)",
        "Use `synthetic` or `clevr`.",
    ),
    Mistake(
        "cli-unknown-command", NAMES, "an unknown `pyro-attention` command",
        lambda: _cli("fit"),
        SystemExit, r"exit status 2: pyro-attention: error: argument command: invalid choice: 'fit' \(choose from "
        r"'?demo'?, '?train'?, '?evaluate'?, '?translate'?, '?align'?, '?inspect'?",
        "Use one of the listed commands (`pyro-attention --help`).",
    ),
    Mistake(
        "unknown-predict-rule", NAMES, "an unknown prediction rule",
        lambda: predict(SoftAttention(_region()[0]), _region()[1], rule="mean"),
        RuleError, r"rule must be one of \('marginal', 'soft', 'kmax'\), got 'mean'",
        "Use one of the listed rules.",
    ),
    Mistake(
        "unknown-decode-rule", NAMES, "an unknown decoding rule",
        lambda: greedy(MarginalLikelihood(_seq2seq()), torch.tensor([[4, 5]]), torch.tensor([[True, True]]), "mean"),
        RuleError, r"rule must be one of \('marginal', 'soft', 'kmax'\), got 'mean'",
        "Use one of the listed rules.",
    ),
    Mistake(
        "rule-needs-categorical", NAMES, "decoding a soft-attention checkpoint with the `marginal` rule",
        lambda: translate_lines(_run(), ["a b"], search=BeamSearch(rule="marginal")),
        RuleError, r"rule 'marginal' needs a categorical alignment; SoftAttention allows only 'soft'",
        "Use `--rule soft` for pairs without a categorical alignment (or leave `--rule` out).",
    ),
    Mistake(
        "evaluate-rule-without-bleu", NAMES, "`evaluate --no-bleu` with a rule the pair does not allow",
        lambda: _cli("evaluate", _run(), "--rule", "kmax", "--no-bleu", "--quiet"),
        SystemExit,
        r"exit status 2: pyro-attention evaluate: error: argument --rule: rule 'kmax' needs a categorical "
        r"alignment; SoftAttention allows only 'soft'",
        "Use a rule the pair allows.",
    ),
    Mistake(
        "unknown-split", NAMES, "evaluating an unknown split",
        lambda: evaluate(_run(), "dev"),
        ValueError, r"split must be one of train, val, test; got 'dev'",
        "Use train, val or test (or `--src-file` / `--tgt-file`).",
    ),
    Mistake(
        "unknown-tokenizer", NAMES, "an unknown input tokeniser for `translate`",
        lambda: translate_lines(_run(), ["a b"], tokenize="spacy"),
        ValueError, r"tokenize must be one of none, moses; got 'spacy'",
        "Use `none` (already tokenised) or `moses`.",
    ),
    Mistake(
        "unknown-align-corpus", NAMES, "an unknown gold corpus for `align`",
        lambda: AlignConfig(corpus="deen"),
        ValueError, r"corpus must be one of \('enfr', 'csen'\), got 'deen'",
        "Use one of the listed corpora.",
    ),
    Mistake(
        "unknown-symmetrize-method", NAMES, "an unknown symmetrisation heuristic",
        lambda: symmetrize([{(0, 0)}], [{(0, 0)}], "grow-diagonal"),
        ValueError, r"symmetrize: unknown method 'grow-diagonal'; allowed: 'intersection', 'union', 'grow-diag', "
        r"'grow-diag-final', 'grow-diag-final-and'",
        "Use one of the listed heuristics.",
    ),
    Mistake(
        "unknown-posterior-combination", NAMES, "an unknown way to combine both directions' posteriors",
        lambda: combine_posteriors(torch.ones(2, 3), torch.ones(3, 2), "posterior-max"),
        ValueError, r"combine_posteriors: unknown method 'posterior-max'; allowed: 'posterior-mean', "
        r"'posterior-product'",
        "Use one of the listed combinations.",
    ),
    Mistake(
        "posterior-combination-shapes", NAMES, "combining two directions' posteriors of different sentence pairs",
        lambda: combine_posteriors(torch.ones(2, 3), torch.ones(2, 3)),
        ValueError, r"combine_posteriors: forward \(2, 3\) \(T, S\) needs backward \(S, T\) = \(3, 2\), got \(2, 3\)",
        "Pass the reverse model's matrix of the same pair, `(S, T)`: source words over target words.",
    ),
    Mistake(
        "kmax-non-categorical", NAMES, "K-max likelihood of a pair without a categorical alignment",
        lambda: kmax_log_likelihood(RelaxedAttention(_region()[0]), _region()[1], 2),
        ValueError, r"K-max needs a categorical alignment; RelaxedAttention has latent 'simplex'",
        "Use `log_likelihood` for this pair.",
    ),
    Mistake(
        "marginal-without-latent", NAMES, "`predict(rule='marginal')` for soft attention",
        lambda: predict(SoftAttention(_region()[0]), _region()[1], rule="marginal"),
        RuleError, r"SoftAttention has no latent alignment to marginalise; use rule='soft'",
        "Use `rule='soft'` (or `rule=None`: the pair's own rule).",
    ),
    Mistake(
        "map-without-latent", NAMES, "`map_alignment` of soft attention",
        lambda: map_alignment(SoftAttention(_region()[0]), _region()[1]),
        ValueError, r"SoftAttention has no categorical alignment to decode",
        "Read its attention weights with `alignment_posterior` instead.",
    ),
    Mistake(
        "nuts-non-simplex", NAMES, "NUTS on a pair with a discrete alignment",
        lambda: nuts_alignment(MarginalLikelihood(_region()[0]), _region()[1][:1]),
        ValueError, r"nuts_alignment is for continuous alignments; MarginalLikelihood has 'categorical'",
        "Use `alignment_posterior` (the exact posterior) for categorical pairs.",
    ),
    # -- configuration ---------------------------------------------------------------------------------------------
    Mistake(
        "config-unknown-key", CONFIG, "a configuration key that does not exist",
        lambda: TranslationConfig.from_dict({"epochz": 3}),
        ValueError,
        r"unknown config key\(s\) 'epochz' \(did you mean 'epochs'\?\); allowed keys: data, data_dir, src, tgt",
        "Use the suggested key or one of the listed keys (`-` and `_` are interchangeable).",
    ),
    Mistake(
        "config-file-unknown-key", CONFIG, "a config file with a key that does not exist",
        lambda: TranslationConfig.from_file(_file("run.toml", 'model = "hard"\nbatchsize = 4\n')),
        ValueError,
        r"run\.toml: unknown config key\(s\) 'batchsize' \(did you mean 'batch_size'\?\); allowed keys: .*batch_size",
        "Use one of the listed keys.",
    ),
    Mistake(
        "cli-config-unknown-key", CONFIG, "`pyro-attention train --config` with an unknown key",
        lambda: _cli("train", "--config", _file("cli.json", json.dumps({"epochz": 1}))),
        SystemExit,
        r"exit status 2: pyro-attention train: error: .*cli\.json: unknown config key\(s\) 'epochz' "
        r"\(did you mean 'epochs'\?\); allowed keys",
        "Use one of the listed keys.",
    ),
    Mistake(
        "experiment-shared-unknown-key", CONFIG, "an experiment file whose `[shared]` table has a misspelt key",
        lambda: _experiment('[shared]\nembeding = 8\n[[rows]]\nlabel = "a"\nmodel = "soft"\n'),
        SystemExit,
        r"exp\.toml: \[shared\]: unknown config key\(s\) 'embeding' \(did you mean 'embedding'\?\)",
        "Use the suggested key; every key of `[shared]` and of a row is a `pyro-attention train` option.",
    ),
    Mistake(
        "experiment-row-bad-model", CONFIG, "an experiment row naming a pair that does not exist",
        lambda: _experiment('[shared]\nepochs = 1\n[[rows]]\nlabel = "a"\nmodel = "sofft"\n'),
        SystemExit, r"exp\.toml: row 1 \('a'\): model must be one of soft, marginal, hard, .*; got 'sofft'",
        "Use one of the listed pairs.",
    ),
    Mistake(
        "experiment-unknown-row", CONFIG, "`pyro-attention experiment run --rows` naming a row the file lacks",
        lambda: _experiment('[shared]\nepochs = 1\n[[rows]]\nlabel = "soft"\nmodel = "soft"\n', "--rows", "sfot"),
        SystemExit, r"exp\.toml: no row labelled \['sfot'\] \(did you mean \['soft'\]\?\); the rows are \['soft'\]",
        "Use the labels of the file's `[[rows]]`.",
    ),
    Mistake(
        "experiment-status-no-runs", CONFIG,
        "`pyro-attention experiment status` naming a runs folder that is not there",
        lambda: _cli("experiment", "status", "--config",
                     _file("exp.toml", '[shared]\n[[rows]]\nlabel = "a"\nmodel = "soft"\n'), "--out", _path("no-runs")),
        SystemExit, r"exit status 1: .*no-runs: no such runs folder \(no row of .*exp\.toml has started there\)",
        "Check `--out`: it is the folder the rows were trained in.",
    ),
    Mistake(
        "experiment-damaged-json", CONFIG,
        "a row's `result.json`, `trained.json` or `sittings.json` edited or cut short by hand",
        lambda: _status_with("cut-runs", "sittings.json", '[{"wall_s": 12.5, "until'),
        SystemExit, r"exit status 1: .*cut-runs/a/sittings\.json: not readable as JSON \(Unterminated string",
        "Mend the file or remove it (the runner writes its own atomically; a removed `sittings.json` loses the wall "
        "time of earlier sittings, a removed `result.json` is evaluated again).",
    ),
    Mistake(
        "experiment-sittings-shape", CONFIG,
        "a row's `sittings.json` edited into JSON of another shape (an object, an entry without its numbers)",
        lambda: _status_with("shape-runs", "sittings.json", '[{"wall_s": 12.5, "until_step": 40}, {"wall_s": "1 h"}]'),
        SystemExit, r'exit status 1: .*shape-runs/a/sittings\.json: not a list of sittings \(\{"wall_s": seconds, '
                    r'"until_step": step, \.\.\.\} each\): entry 1 is \{"wall_s": "1 h"\}',
        "Mend the entry (`wall_s` in seconds and `until_step` as numbers) or remove the file (losing the wall time "
        "of earlier sittings).",
    ),
    Mistake(
        "experiment-record-shape", CONFIG,
        "a row's `result.json` or `trained.json` edited into JSON of another shape (a list, an object lacking keys)",
        lambda: _status_with("keys-runs", "trained.json", '{"epochs": 3, "best_epoch": 2}'),
        SystemExit, r"exit status 1: .*keys-runs/a/trained\.json: lacks 'best_val_ppl', 'stopped_early', 'steps', "
                    r"'target_tokens' and 1 more of the keys the runner writes there",
        "Mend the file or remove it: a removed `result.json` is evaluated again, a removed `trained.json` is written "
        "again from `last.pt` when the row resumes.",
    ),
    Mistake(
        "experiment-merge-unevaluated", CONFIG,
        "`pyro-attention experiment merge TABLE.json --out RUNS --rows ROW` for a row not yet evaluated",
        lambda: (_file("merge-runs/a/history.csv", "kind,epoch,step\n"),
                 _cli("experiment", "merge", _path("table.json"), "--out", _path("merge-runs"), "--rows", "a")),
        SystemExit, r"exit status 1: .*merge-runs/a: no result\.json \(nor result-paused\.json\): the row has not "
                    r"been evaluated; 'pyro-attention experiment status' says where it stands",
        "Let the row finish (or `--evaluate-paused` it), then merge it; `experiment status` says where it stands.",
    ),
    Mistake(
        "config-wrong-type", CONFIG, "a config value of the wrong type",
        lambda: TranslationConfig.from_file(_file("typed.json", json.dumps({"epochs": "ten"}))),
        ValueError, r"config key 'epochs' must be int, got 'ten'",
        "Write numbers as numbers, not strings.",
    ),
    Mistake(
        "config-bad-suffix", CONFIG, "a config file that is neither `.json` nor `.toml`",
        lambda: TranslationConfig.from_file(_file("run.yaml", "epochs: 3\n")),
        ValueError, r"run\.yaml: a config file must end in \.json or \.toml, got '\.yaml'",
        "Write the config as JSON or TOML.",
    ),
    Mistake(
        "config-invalid-json", CONFIG, "a JSON config file with a syntax error",
        lambda: TranslationConfig.from_file(_file("broken.json", "{epochs: 3}")),
        ValueError, r"broken\.json: not valid JSON \(Expecting property name enclosed in double quotes: line 1",
        "Fix the JSON at the reported line and column.",
    ),
    Mistake(
        "config-not-a-table", CONFIG, "a JSON config file that is a list, not a table",
        lambda: TranslationConfig.from_file(_file("list.json", "[3]")),
        ValueError, r"list\.json: a config file holds one table of key = value pairs",
        'Write one object of `"key": value` pairs.',
    ),
    Mistake(
        "config-missing-file", CONFIG, "a config file that does not exist",
        lambda: TranslationConfig.from_file(_path("none.json")),
        FileNotFoundError, r"none\.json: no such config file",
        "Check the path.",
    ),
    Mistake(
        "config-value-out-of-range", CONFIG, "a value outside its range (dropout 1.5)",
        lambda: TranslationConfig(dropout=1.5),
        ValueError, r"dropout must be in \[0, 1\), got 1\.5",
        "Use a value in the stated range.",
    ),
    Mistake(
        "config-option-of-another-model", CONFIG, "a pair option that the configured model does not have",
        lambda: TranslationConfig(model="soft", options={"kl_scale": 0.1}),
        ValueError, r"options: pair 'soft' has no option 'kl_scale'; its options: none",
        "Drop the option, or choose the model it belongs to.",
    ),
    Mistake(
        "config-warmup-without-guide", CONFIG, "`warmup_steps` for a pair that has no warm-up guide",
        lambda: TranslationConfig(model="marginal", warmup_steps=5),
        ValueError, r"warmup_steps: model 'marginal' has no warm-up guide; only relaxed",
        "Use warm-up steps only with the listed pairs.",
    ),
    # -- checkpoints -----------------------------------------------------------------------------------------------
    Mistake(
        "checkpoint-missing", CKPT, "a checkpoint path that does not exist",
        lambda: load_checkpoint(_path("runs/none/best.pt")),
        FileNotFoundError, r"runs/none/best\.pt: no such checkpoint",
        "Check the path (`--out` of the training run).",
    ),
    Mistake(
        "checkpoint-empty-folder", CKPT, "a run folder without `best.pt` or `last.pt`",
        lambda: load_checkpoint(_path("runs/empty").mkdir(parents=True, exist_ok=True) or _path("runs/empty")),
        FileNotFoundError, r"runs/empty: holds neither best\.pt nor last\.pt",
        "Point at the folder of a run that wrote a checkpoint.",
    ),
    Mistake(
        "checkpoint-not-a-checkpoint", CKPT, "a file that is not a checkpoint at all",
        lambda: load_checkpoint(_damaged_checkpoint("text")),
        ValueError, r"notes\.pt: cannot be read as a checkpoint \(not a torch zip archive",
        "Give the `.pt` file written by `pyro-attention train`.",
    ),
    Mistake(
        "checkpoint-truncated", CKPT, "a truncated checkpoint (an interrupted copy)",
        lambda: load_checkpoint(_damaged_checkpoint("truncated")),
        ValueError, r"truncated\.pt: cannot be read as a checkpoint \(not a torch zip archive: a truncated",
        "Copy the file again (checkpoints are written atomically, so the original is whole).",
    ),
    Mistake(
        "checkpoint-foreign", CKPT, "a torch file written by another program",
        lambda: load_checkpoint(_damaged_checkpoint("foreign")),
        ValueError, r"foreign\.pt: not a pyro_attention\.translation\.checkpoint file",
        "Give a checkpoint written by `pyro-attention train`.",
    ),
    Mistake(
        "checkpoint-missing-entry", CKPT, "a checkpoint with an entry removed (it was a bare `KeyError`)",
        lambda: load_checkpoint(_damaged_checkpoint("missing-entry")),
        ValueError, r"missing-entry\.pt: a damaged checkpoint: the entries \['tgt_vocab'\] are missing",
        "Use another checkpoint of the run (`best.pt` or `last.pt`).",
    ),
    Mistake(
        "checkpoint-nan-weights", CKPT, "a checkpoint whose weights hold NaN (it translated to garbage with exit 0)",
        lambda: _cli("translate", str(_damaged_checkpoint("nan")), str(_file("in.txt", "3 4 5\n"))),
        SystemExit, r"exit status 1: .*nan\.pt: the weights \['tgt_embed\.weight'\] hold NaN or infinite values",
        "Training diverged: use an earlier checkpoint, a lower `--lr`.",
    ),
    Mistake(
        "checkpoint-weights-do-not-fit", CKPT, "a checkpoint whose weights do not fit the network of its config",
        lambda: load_checkpoint(_damaged_checkpoint("weights")),
        ValueError, r"(?s)reshaped\.pt: weights do not fit SoftAttention\(\): .*size mismatch for tgt_embed\.weight",
        "The file was edited or mixed up; use the checkpoint as written.",
    ),
    Mistake(
        "resume-other-version", CKPT, "resuming a checkpoint written by another version of the package",
        lambda: train(_config(out=str(_old_version_run())), progress=False, resume=True, log=None),
        ValueError, r"old-version/last\.pt was written by pyro-attention 0\.0\.1, this is .*: resuming across "
        r"versions is refused",
        "Finish the run with the version that started it, or start afresh (evaluate and translate still read it).",
    ),
    Mistake(
        "resume-without-last", CKPT, "`--resume` into a folder without `last.pt`",
        lambda: train(_config(out=str(_path("fresh"))), progress=False, resume=True, log=None),
        FileNotFoundError, r"cannot resume: .*fresh/last\.pt does not exist \(train without --resume first\)",
        "Train without `--resume` first, or point `--out` at the run to continue.",
    ),
    Mistake(
        "resume-other-model", CKPT, "resuming a checkpoint with another model",
        lambda: train(_config(out=str(_run()), model="marginal"), progress=False, resume=True, log=None),
        ValueError, r"last\.pt does not belong to this run, refusing to resume: model: checkpoint 'soft', this "
        r"run 'marginal'",
        "Resume with the checkpoint's settings, or use another `--out` (or `--overwrite`).",
    ),
    Mistake(
        "resume-other-vocabulary", CKPT, "resuming with settings that build another vocabulary",
        lambda: train(_config(out=str(_run()), min_freq=2), progress=False, resume=True, log=None),
        ValueError, r"refusing to resume: .*source vocabulary: checkpoint \d+ entries, this run \d+",
        "Resume with the same data and vocabulary settings.",
    ),
    Mistake(
        "fresh-run-over-checkpoint", CKPT, "a fresh run into a folder that holds a checkpoint",
        lambda: train(_config(out=str(_run())), progress=False, log=None),
        FileExistsError, r"run already holds a checkpoint \(.*last\.pt\); pass --resume to continue it, "
        r"--overwrite to start afresh",
        "Pass `--resume`, `--overwrite`, or another `--out`.",
    ),
    Mistake(
        "cli-evaluate-not-a-checkpoint", CKPT, "`pyro-attention evaluate` on a file that is not a checkpoint",
        lambda: _cli("evaluate", _damaged_checkpoint("text"), "--quiet"),
        SystemExit, r"exit status 1: pyro-attention evaluate: error: .*notes\.pt: cannot be read as a checkpoint",
        "Give the `.pt` file (or run folder) written by `pyro-attention train`.",
    ),
    # -- tensors ---------------------------------------------------------------------------------------------------
    Mistake(
        "regions-nan", TENSORS, "a NaN feature in a real region",
        lambda: _region_ll(regions=lambda b: _set(b.regions, (3, 0, 2), float("nan"))),
        ValueError, r"regions: non-finite feature \(NaN or inf\) at example 3, region 0",
        "Clean the features (padded regions may hold anything; real ones must be finite).",
    ),
    Mistake(
        "question-vectors-inf", TENSORS, "an infinite value in question vectors",
        lambda: log_likelihood(
            SoftAttention(RegionQA(13, 8, question_size=2, hidden_size=4)),
            dataclasses.replace(_region()[1], question=torch.tensor([[0.0, 1.0]] * 3 + [[float("inf"), 0.0]])),
        ),
        ValueError, r"question: non-finite values \(NaN or inf\) in question vectors",
        "Clean the question vectors.",
    ),
    Mistake(
        "regions-all-padding", TENSORS, "an example whose regions are all padding",
        lambda: _region_ll(region_mask=lambda b: _set(b.region_mask, 2, False)),
        ValueError, r"region_mask: example\(s\) \[2\] have no real region \(all padding\)",
        "Drop the example (attention needs at least one region).",
    ),
    Mistake(
        "source-all-padding", TENSORS, "a translation example whose source is all padding",
        lambda: _translation_ll(source_mask=lambda b: _set(b.source_mask, 1, False)),
        ValueError, r"source_mask: example\(s\) \[1\] have an empty source \(all padding\)",
        "Drop the pair (attention needs at least one source token).",
    ),
    Mistake(
        "target-all-padding", TENSORS, "a translation example whose target is all padding",
        lambda: _translation_ll(target_mask=lambda b: _set(b.target_mask, 0, False)),
        ValueError, r"target_mask: example\(s\) \[0\] have an empty target \(all padding\)",
        "Drop the pair; a real target ends at least in `</s>`.",
    ),
    Mistake(
        "empty-source-sentence", TENSORS, "a zero-length source sentence",
        lambda: collate([([4, 5], [6]), ([], [6, 7])]),
        ValueError, r"collate: pair 1 has an empty source sentence",
        "Drop the pair.",
    ),
    Mistake(
        "empty-target-sentence", TENSORS, "a zero-length target sentence",
        lambda: collate([([4, 5], [6]), ([7], [])]),
        ValueError, r"collate: pair 1 has an empty target sentence",
        "Drop the pair.",
    ),
    Mistake(
        "source-id-out-of-vocab", TENSORS, "a source id >= the source vocabulary size",
        lambda: _translation_ll(source=lambda b: _set(b.source, (0, 1), 40)),
        ValueError, r"source\[0, 1\] = 40 is out of range for vocabulary size 10",
        "Encode with the vocabulary the network was built for (`len(vocab)`).",
    ),
    Mistake(
        "target-id-out-of-vocab", TENSORS, "a target id >= the target vocabulary size",
        lambda: _translation_ll(target=lambda b: _set(b.target, (1, 2), 12)),
        ValueError, r"target\[1, 2\] = 12 is out of range for vocabulary size 12",
        "Encode with the vocabulary the network was built for.",
    ),
    Mistake(
        "question-id-out-of-vocab", TENSORS, "a question token id >= the question vocabulary size",
        lambda: _region_ll(question=lambda b: _set(b.question, (0, 0), 50)),
        ValueError, r"question\[0, 0\] = 50 is out of range for vocabulary size 9",
        "Encode questions with the network's vocabulary.",
    ),
    Mistake(
        "answer-out-of-range", TENSORS, "an answer id >= the number of answer classes",
        lambda: _region_ll(answer=lambda b: _set(b.answer, 1, 99)),
        ValueError, r"answer\[1\] = 99 is out of range for 8 answer classes \(0\.\.7\)",
        "Build the network with as many answer classes as the data has.",
    ),
    Mistake(
        "regions-integer-dtype", TENSORS, "integer region features",
        lambda: _region_ll(regions=lambda b: b.regions.long()),
        ValueError, r"regions must be a floating-point tensor of features, got dtype torch\.int64",
        "Convert with `.float()`.",
    ),
    Mistake(
        "region-mask-not-bool", TENSORS, "a 0/1 float mask instead of a bool mask",
        lambda: _region_ll(region_mask=lambda b: b.region_mask.float()),
        ValueError, r"region_mask must be a bool tensor, got dtype torch\.float32",
        "Convert with `.bool()`.",
    ),
    Mistake(
        "answer-not-long", TENSORS, "float answer ids",
        lambda: _region_ll(answer=lambda b: b.answer.float()),
        ValueError, r"answer must be a long tensor of class ids, got dtype torch\.float32",
        "Convert with `.long()`.",
    ),
    Mistake(
        "question-ids-not-long", TENSORS, "float (or int32) question ids for a network with a vocabulary",
        lambda: _region_ll(question=lambda b: b.question.float()),
        ValueError, r"question must be \(B, L\) long token ids for a network with a vocabulary \(vocab_size=9\), "
        r"got dtype torch\.float32",
        "Convert with `.long()`; question *vectors* need a network built with `question_size`.",
    ),
    Mistake(
        "question-ids-for-vector-network", TENSORS, "token-id questions for a network built for question vectors",
        lambda: log_likelihood(SoftAttention(RegionQA(13, 8, question_size=2, hidden_size=4)), _region()[1]),
        ValueError, r"question must be \(B, Q\) float vectors for a network without a vocabulary \(built with "
        r"question_size\), got dtype torch\.int64",
        "Build the network with `vocab_size=len(vocab)` for token questions.",
    ),
    Mistake(
        "source-not-long", TENSORS, "float source ids",
        lambda: _translation_ll(source=lambda b: b.source.float()),
        ValueError, r"source must be a \(B, S\) long tensor, got shape \(2, 3\) dtype torch\.float32",
        "Convert with `.long()`.",
    ),
    Mistake(
        "regions-wrong-rank", TENSORS, "one scene's (S, F) regions where a batch (B, S, F) is expected",
        lambda: _region_ll(regions=lambda b: b.regions[0]),
        ValueError, r"regions must be \(B, S, F\), got shape \(6, 13\)",
        "Add the batch dimension (`regions.unsqueeze(0)`, and the same for the other fields).",
    ),
    Mistake(
        "regions-feature-size", TENSORS, "region features of another size than the network's",
        lambda: _region_ll(regions=lambda b: b.regions[..., :5]),
        ValueError, r"regions: expected feature size 13, got shape \(4, 6, 5\)",
        "Build the network with `feature_size` = the data's last dimension.",
    ),
    Mistake(
        "region-mask-shape", TENSORS, "a region mask of another shape than the regions",
        lambda: _region_ll(region_mask=lambda b: b.region_mask[:, :3]),
        ValueError, r"region_mask must be \(B, S\) = \(4, 6\) like regions, got shape \(4, 3\)",
        "Give one mask entry per region.",
    ),
    Mistake(
        "target-in-shape", TENSORS, "decoder inputs of another length than the targets",
        lambda: _translation_ll(target_in=lambda b: b.target_in[:, :3]),
        ValueError, r"target_in must be a \(B, T\) = \(2, 4\) torch\.int64 tensor, got \(2, 3\)",
        "Build batches with `collate` (it adds `<s>` and `</s>` consistently).",
    ),
    Mistake(
        "mask-with-holes", TENSORS, "a source mask with padding before a real token",
        lambda: _translation_ll(source_mask=lambda b: _set(b.source_mask, (0, 1), False)),
        ValueError, r"source_mask\[0\]: padding at position 1 before a real position 2 \(real tokens must come "
        r"first",
        "Put real tokens first and padding last (`collate` does).",
    ),
    Mistake(
        "padding-id-inside-target", TENSORS, "the padding id 0 at a real target position",
        lambda: _translation_ll(target=lambda b: _set(b.target, (0, 1), 0)),
        ValueError, r"target\[0, 1\] = 0 \(<pad>\) at a real position \(its mask is True there\)",
        "Ids 0..3 are `<pad> <s> </s> <unk>`; encode words with `Vocab.encode` (ids >= 4 or `<unk>`).",
    ),
    Mistake(
        "decode-source-out-of-vocab", TENSORS, "decoding source ids >= the source vocabulary size",
        lambda: translate(MarginalLikelihood(_seq2seq()), torch.tensor([[4, 5, 40]]), torch.ones(1, 3).bool()),
        ValueError, r"source\[0, 2\] = 40 is out of range for vocabulary size 10",
        "Encode with the checkpoint's source vocabulary.",
    ),
    Mistake(
        "decode-mask-shape", TENSORS, "decoding with a source mask of another shape",
        lambda: greedy(MarginalLikelihood(_seq2seq()), torch.tensor([[4, 5]]), torch.tensor([[True]])),
        ValueError, r"source_mask must be a \(B, S\) = \(1, 2\) bool tensor, got \(1, 1\) torch\.bool",
        "Give `source_mask = source != 0`.",
    ),
    Mistake(
        "features-dtype-mismatch", TENSORS, "float64 features for a float32 network",
        lambda: _region_ll(regions=lambda b: b.regions.double()),
        ValueError, r"regions has dtype torch\.float64 but the network's parameters are torch\.float32",
        "Convert one of them: `regions.float()`, or `network.double()`.",
    ),
    Mistake(
        "wrong-batch-type", TENSORS, "a translation batch given to the region-QA network",
        lambda: log_likelihood(SoftAttention(_region()[0]), collate([([4], [5])])),
        TypeError, r"RegionQA\.encode expects a RegionBatch, got TranslationBatch",
        "Use the batch type of the task network (`RegionBatch` / `TranslationBatch`).",
    ),
    Mistake(
        "pair-on-a-plain-module", TENSORS, "a pair built on a plain `nn.Module` instead of a task network",
        lambda: SoftAttention(torch.nn.Linear(2, 2)),
        TypeError, r"SoftAttention: network must be an AttentionNetwork, got Linear",
        "Subclass `pyro_attention.networks.AttentionNetwork` (encode, output_logits, posterior_scores).",
    ),
    # -- sizes and counts ------------------------------------------------------------------------------------------
    Mistake(
        "network-size-zero", SIZES, "a network with a zero-sized vocabulary or layer",
        lambda: Seq2Seq(0, 12),
        ValueError, r"Seq2Seq: source_vocab must be >= 4, got 0",
        "Build the network from the vocabulary: `Seq2Seq(len(src_vocab), len(tgt_vocab), ...)`.",
    ),
    Mistake(
        "kmax-k-zero", SIZES, "K-max likelihood with K = 0",
        lambda: kmax_log_likelihood(MarginalLikelihood(_region()[0]), _region()[1], 0),
        ValueError, r"k must be >= 1, got 0",
        "Use K >= 1 (K >= the source length gives the exact value).",
    ),
    Mistake(
        "predict-kmax-k-zero", SIZES, "`predict(rule='kmax', k=0)` (it returned all-zero probabilities)",
        lambda: predict(MarginalLikelihood(_region()[0]), _region()[1], rule="kmax", k=0),
        ValueError, r"rule='kmax' needs k >= 1, got k=0",
        "Use k >= 1.",
    ),
    Mistake(
        "num-samples-zero", SIZES, "an importance-sampled likelihood with 0 samples",
        lambda: log_likelihood(RelaxedAttention(_region()[0]), _region()[1], num_samples=0),
        ValueError, r"num_samples must be >= 1, got 0",
        "Use num_samples >= 1 (more is tighter).",
    ),
    Mistake(
        "inference-data-one-sample", SIZES, "ArviZ data from a single draw",
        lambda: to_inference_data(MarginalLikelihood(_region()[0]), _region()[1], num_samples=1),
        ValueError, r"num_samples must be >= 2, got 1",
        "Draw at least 2 samples.",
    ),
    Mistake(
        "fit-batch-size-zero", SIZES, "training with batch size 0",
        lambda: fit(SoftAttention(_region()[0]), [_region()[1]], batch_size=0, progress=False),
        ValueError, r"fit: need num_epochs >= 0, batch_size >= 1, .*got num_epochs=1, batch_size=0",
        "Use batch_size >= 1.",
    ),
    Mistake(
        "fit-no-batches", SIZES, "training on an empty list of batches (it silently did nothing)",
        lambda: fit(SoftAttention(_region()[0]), [], progress=False),
        ValueError, r"fit: the training data \(list\) holds no batches; nothing to train on",
        "Check that the data loaded (an empty file, a filter that dropped everything).",
    ),
    Mistake(
        "fit-warmup-without-guide", SIZES, "warm-up steps for a pair without a warm-up guide",
        lambda: fit(SoftAttention(_region()[0]), [_region()[1]], warmup_steps=3, progress=False),
        ValueError, r"fit: warmup_steps=3 but SoftAttention has no warmup_guide",
        "Use warm-up only with pairs that define `warmup_guide` (the Dirichlet pair).",
    ),
    Mistake(
        "beam-size-zero", SIZES, "beam search with beam size 0",
        lambda: translate(MarginalLikelihood(_seq2seq()), torch.tensor([[4, 5]]), torch.ones(1, 2).bool(), 0),
        ValueError, r"need beam_size >= 1, max_len >= 1, k >= 1, batch_size >= 1; got 0, 50, 5, 64",
        "Use beam_size >= 1 (1 is greedy).",
    ),
    Mistake(
        "evaluate-negative-kmax", SIZES, "evaluation with a negative K",
        lambda: evaluate(_run(), "val", kmax=-1, bleu=False),
        ValueError, r"evaluate: kmax must be an int >= 0 \(0: no K-max perplexity\), got -1",
        "Use kmax >= 0 (0 skips the K-max perplexity).",
    ),
    Mistake(
        "beam-search-no-beam", SIZES, "decoding settings with a beam of width 0",
        lambda: BeamSearch(beam=0),
        ValueError, r"BeamSearch: beam must be an int >= 1, got 0",
        "Use beam >= 1 (1 is greedy).",
    ),
    Mistake(
        "region-qa-no-examples", SIZES, "generating a synthetic region-QA split of no (or negative) size",
        lambda: make_region_qa(-1),
        ValueError, r"num_examples must be >= 1, got -1",
        "Ask for at least one example.",
    ),
    Mistake(
        "region-qa-bad-probability", SIZES, "an ambiguity that is not a probability",
        lambda: make_region_qa(3, ambiguity=2.0),
        ValueError, r"ambiguity must be a probability in \[0, 1\], got 2\.0",
        "Use a value in [0, 1].",
    ),
    Mistake(
        "bucket-batch-size-zero", SIZES, "length-bucketed batches of size 0",
        lambda: bucket_batches([[4]], [[5]], 0),
        ValueError, r"bucket_batches: batch_size must be >= 1, got 0",
        "Use batch_size >= 1.",
    ),
    Mistake(
        "bleu-count-mismatch", SIZES, "BLEU of a different number of hypotheses than references",
        lambda: bleu(["a b", "c"], ["a b"]),
        ValueError, r"bleu: 2 hypotheses but 1 references",
        "Give one hypothesis per reference, in the same order.",
    ),
    Mistake(
        "perplexity-no-tokens", SIZES, "perplexity over zero tokens",
        lambda: perplexity(-3.0, 0),
        ValueError, r"perplexity needs a positive token count, got 0",
        "Count the real target tokens (`target_mask.sum()`).",
    ),
    Mistake(
        "option-wrong-type", CONFIG, "a pair option of the wrong type (`--option kl_scale=abc`; it reached the pair "
        "untyped and failed inside it)",
        lambda: _cli("train", "--model", "gaussian", "--option", "kl_scale=abc", "--quiet"),
        SystemExit, r"exit status 2: .*option kl_scale='abc' must be float, got str \(default 1.0\)",
        "Give a value of the type named (`--option kl_scale=0.01`).",
    ),
    Mistake(
        "fit-infinite-lr", SIZES, "training with an infinite learning rate (it returned all-NaN weights)",
        lambda: fit(SoftAttention(_region()[0]), [_region()[1]], lr=float("inf"), progress=False),
        ValueError, r"fit: lr must be a learning rate in \(0, 1\] .*got inf",
        "Use a finite learning rate > 0 (1e-3 to 3e-3 is typical).",
    ),
    Mistake(
        "translate-lines-string", TENSORS, "`translate_lines` given one string instead of a list of sentences (it "
        "translated each character)",
        lambda: translate_lines(_run(), "3 4 5"),
        TypeError, r"translate_lines: lines must be a list .* got one str '3 4 5'; wrap a single sentence in a list",
        "Pass a list of sentences: `translate_lines(ckpt, [\"3 4 5\"])`.",
    ),
    Mistake(
        "min-freq-empties-vocabulary", VOCAB, "a `--min-freq` so high that a vocabulary holds only the specials (it "
        "trained a model of `<unk>`s)",
        lambda: train(_config(out=str(_path("minfreq")), min_freq=1000), progress=False, log=None),
        ValueError, r"min_freq: no source word of synthetic train .* occurs 1000 times or more.*lower --min-freq "
        r"\(the most frequent source word occurs \d+ times\)",
        "Lower `--min-freq` below the count the message gives.",
    ),
    Mistake(
        "run-folder-busy", CKPT, "a second `train` into a folder another process is training into (they interleaved "
        "last.pt, best.pt and history.csv)",
        lambda: _busy_folder(),
        FileExistsError, r"is being written by another training process \(PID 4242, lock .*\.lock\)",
        "Wait for the other run, stop it, or use another `--out`.",
    ),
    Mistake(
        "alignment-probs-shape", SIZES, "alignment probabilities of the wrong rank for link extraction",
        lambda: links_from_probs(torch.rand(2, 2, 3, 4)),
        ValueError, r"links_from_probs: probs must be \(T, S\) or \(B, T, S\), got shape \(2, 2, 3, 4\)",
        "Give (T, S) for one sentence or (B, T, S) for a batch.",
    ),
    # -- issue #17: learning rates ------------------------------------------------------------------------------
    Mistake(
        "cli-lr-out-of-range", CONFIG, "`pyro-attention train --lr 1e30` (it ended in an `OverflowError` traceback "
        "after an epoch)",
        lambda: _cli("train", "--lr", "1e30", "--quiet", "--out", _path("lr-run")),
        SystemExit, r"exit status 2: pyro-attention train: error: argument --lr: must be a number in \(0, 1\], "
        r"got '1e30'",
        "Use a learning rate in (0, 1]; 1e-3 to 3e-3 is typical for Adam.",
    ),
    Mistake(
        "config-file-lr-out-of-range", CONFIG, "a config file with `lr = 1e30`",
        lambda: _cli("train", "--config", _file("lr.json", json.dumps({"lr": 1e30})), "--quiet"),
        SystemExit, r"exit status 2: pyro-attention train: error: .*lr\.json: lr must be a learning rate in "
        r"\(0, 1\] .*got 1e\+30",
        "Fix the value in the file (the message names it).",
    ),
    Mistake(
        "config-lr-out-of-range", CONFIG, "`TranslationConfig(lr=1e30)` (or `train` with it, from Python)",
        lambda: TranslationConfig(lr=1e30),
        ValueError, r"lr must be a learning rate in \(0, 1\] .*got 1e\+30",
        "Use a learning rate in (0, 1].",
    ),
    Mistake(
        "fit-lr-out-of-range", SIZES, "`fit(..., lr=1e30)`",
        lambda: fit(SoftAttention(_region()[0]), [_region()[1]], lr=1e30, progress=False),
        ValueError, r"fit: lr must be a learning rate in \(0, 1\] .*got 1e\+30",
        "Use a learning rate in (0, 1].",
    ),
    Mistake(
        "training-diverged", CONFIG, "a run whose loss becomes NaN or infinite (too high a learning rate; it was a "
        "`FloatingPointError` traceback)",
        lambda: _diverging_run(),
        SystemExit, r"exit status 1: pyro-attention train: error: training diverged: non-finite loss nan at step 1 "
        r"\(epoch 1\) with lr 0\.003; lower --lr",
        "Lower `--lr` (or `--clip-norm`) and start again with `--overwrite`, or `--resume` with the lower `--lr`.",
    ),
    # -- issue #17: writing outputs -------------------------------------------------------------------------------
    Mistake(
        "out-folder-not-writable", WRITES, "`pyro-attention train --out` where no folder can be made (under a file; "
        "a read-only folder is the same: it was a raw `OSError` traceback)",
        lambda: _cli("train", "--quiet", "--out", _file("a-file", "x\n") / "run", *_tiny_flags()),
        SystemExit, r"exit status 1: pyro-attention train: error: cannot write .*a-file/run/\.lock: Not a directory "
        r"\(errno 20\)",
        "Choose an `--out` you can write to.",
    ),
    Mistake(
        "checkpoint-write-fails", WRITES, "a checkpoint write that torch's zip writer cannot finish (a full disk; it "
        "was `RuntimeError: [enforce fail at inline_container.cc]`)",
        lambda: _failing_checkpoint_write(),
        WriteError, r"cannot write .*full/last\.pt: torch could not write it \(unexpected pos 704 vs 598\); "
        r"0\.0 MiB free on its disk \(full\)",
        "Free space on the disk (or use another `--out`); the previous checkpoint is intact.",
    ),
    Mistake(
        "checkpoint-read-only", WRITES, "a checkpoint written into a read-only folder or file system",
        lambda: _failing_checkpoint_write(OSError(errno.EROFS, os.strerror(errno.EROFS))),
        WriteError, r"cannot write .*full/last\.pt: Read-only file system \(errno 30\)",
        "Use an `--out` on a writable file system; the previous checkpoint is intact.",
    ),
    Mistake(
        "evaluate-json-disk-full", WRITES, "`pyro-attention evaluate --json` onto a full disk (here `/dev/full`)",
        lambda: _cli("evaluate", _run(), "--no-bleu", "--quiet", "--json", "/dev/full"),
        SystemExit, r"exit status 1: pyro-attention evaluate: error: cannot write /dev/full: No space left on device "
        r"\(errno 28\)",
        "Free space on the disk, or write elsewhere.",
    ),
    Mistake(
        "figure-not-writable", WRITES, "a heatmap written where no folder can be made (a raw `OSError` from "
        "matplotlib)",
        lambda: alignment_heatmaps(
            {"prior": torch.full((1, 1, 2), 0.5)}, [0], [["a", "b"]], ["t"], _file("b-file", "x\n") / "figs/a.png"
        ),
        WriteError, r"cannot write .*b-file/figs/a\.png: Not a directory \(errno 20\)",
        "Give a folder you can write to.",
    ),
    Mistake(
        "demo-out-not-writable", WRITES, "`pyro-attention demo --out` that cannot be written (it failed only after "
        "a minute of training, when the figure was saved)",
        lambda: _cli("demo", "--out", _file("d-file", "x\n") / "demo"),
        SystemExit, r"exit status 1: pyro-attention demo: error: cannot write .*d-file/demo: Not a directory "
        r"\(errno 20\): .*d-file is a file, not a folder",
        "Give an `--out` folder you can write to.",
    ),
    Mistake(
        "fit-log-csv-not-writable", WRITES, "`fit(log_csv=...)` where the file cannot be made",
        lambda: fit(SoftAttention(_region()[0]), [_region()[1]], progress=False,
                    log_csv=_file("c-file", "x\n") / "log.csv"),
        WriteError, r"cannot write .*c-file/log\.csv: Not a directory \(errno 20\)",
        "Give a path you can write to.",
    ),
    Mistake(
        "netcdf-not-writable", WRITES, "`save_netcdf(data, path)` (what `pyro-attention inspect --out` calls) where "
        "no folder can be made",
        lambda: save_netcdf(to_inference_data(SoftAttention(_region()[0]), _region()[1], num_samples=4),
                            _file("e-file", "x\n") / "post.nc"),
        WriteError, r"cannot write .*e-file/post\.nc: File exists \(errno 17\): .*e-file is a file, not a folder",
        "Give a path you can write to; an existing file there is left as it was.",
    ),
    # -- issue #17: damaged vocabularies -------------------------------------------------------------------------
    Mistake(
        "checkpoint-vocab-damaged", VOCAB, "a checkpoint whose target vocabulary JSON is damaged (the message named "
        "neither the file nor the vocabulary)",
        lambda: load_checkpoint(_damaged_checkpoint("vocab-json")),
        ValueError, r"checkpoint .*vocab-json\.pt: target vocabulary is damaged: not valid JSON \(",
        "Use another checkpoint of the run (`best.pt` or `last.pt`), or the original file.",
    ),
    Mistake(
        "checkpoint-vocab-not-text", VOCAB, "a checkpoint whose source vocabulary is not JSON text at all",
        lambda: _cli("translate", _damaged_checkpoint("vocab-type"), _file("in2.txt", "3 4\n")),
        SystemExit, r"exit status 1: pyro-attention translate: error: checkpoint .*vocab-type\.pt: source vocabulary "
        r"is damaged: not a pyro_attention\.Vocab JSON document \(got int, not JSON text\)",
        "Use another checkpoint of the run.",
    ),
    Mistake(
        "vocab-file-not-json", VOCAB, "a vocabulary file that is not valid JSON (cut short)",
        lambda: Vocab.load(_file("cut.json", Vocab(["hund"]).to_json()[:30])),
        ValueError, r"cut\.json: not valid JSON \(Unterminated string",
        "Write the vocabulary again with `Vocab.save`.",
    ),
    Mistake(
        "vocab-file-missing", VOCAB, "a vocabulary file that does not exist (a bare `FileNotFoundError`)",
        lambda: Vocab.load(_path("no-vocab.json")),
        FileNotFoundError, r"no-vocab\.json: no such vocabulary file",
        "Check the path.",
    ),
    Mistake(
        "vocab-file-bad-token", VOCAB, "a vocabulary file with a token that is not a string",
        lambda: Vocab.load(_file("num.json", Vocab(["hund"]).to_json().replace('"hund"', "7"))),
        ValueError, r"num\.json: Vocab: tokens must be non-empty strings, got 7",
        "Write the vocabulary with `Vocab.save` (tokens are strings).",
    ),
    # -- issue #17: options of demo / align / inspect are typed and ranged (their --help shows every default) ----
    Mistake(
        "demo-size-not-positive", NAMES, "`pyro-attention demo --train-size 0` (an untyped int: it failed inside "
        "the data generator)",
        lambda: _cli("demo", "--train-size", "0"),
        SystemExit, r"exit status 2: pyro-attention demo: error: argument --train-size: must be an integer >= 1, "
        r"got '0'",
        "Give a positive size (`pyro-attention demo --help` lists every option with its default).",
    ),
    Mistake(
        "align-seed-negative", NAMES, "`pyro-attention align --seed -1`",
        lambda: _cli("align", "--seed", "-1"),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --seed: must be an integer >= 0, got '-1'",
        "Give a seed >= 0.",
    ),
    Mistake(
        "align-agreement-one-direction", CONFIG, "`pyro-attention align --network hmm --models marginal --agreement` "
        "without `--both-directions`",
        lambda: _cli("align", "--network", "hmm", "--models", "marginal", "--agreement"),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --agreement: --agreement trains both "
        r"directions together; add --both-directions",
        "Add `--both-directions` (agreement needs both), or drop `--agreement`.",
    ),
    Mistake(
        "align-table-prior-decoder-expert", CONFIG, "`--table-prior` with `--decoder-expert` (no closed-form M-step "
        "for a product of experts)",
        lambda: AlignConfig(network="hmm", models=["marginal"], both_directions=True, table_prior=0.01,
                            decoder_expert=8),
        ValueError, r"table_prior: the closed-form M-step sets a table alone; with --decoder-expert 8 the emission "
        r"is a product",
        "Use one of the two: `--table-prior` (tables by EM) or `--decoder-expert` (trained by gradient).",
    ),
]  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Tests


def _raised_here(error: BaseException) -> bool:
    """The exception was raised by this package (its innermost frame is in the repository, not in torch or Pyro)."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(REPO)


@pytest.mark.parametrize("mistake", CATALOGUE, ids=[m.id for m in CATALOGUE])
def test_mistake_gets_a_clear_error(mistake: Mistake):
    with pytest.raises(mistake.error, match=mistake.message) as info:
        mistake.commit()
    assert type(info.value) is mistake.error, f"{type(info.value).__name__}: {info.value}"
    if mistake.error is SystemExit:
        assert re.match(r"exit status [12]: ", str(info.value)) and "Traceback" not in str(info.value)
    else:
        assert _raised_here(info.value), "".join(traceback.format_exception(info.value))


def test_catalogue_is_large_and_ids_are_unique():
    ids = [m.id for m in CATALOGUE]
    assert len(ids) >= 30
    assert len(set(ids)) == len(ids), [i for i in ids if ids.count(i) > 1]
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)


def test_every_mistake_is_documented():
    text = DOC.read_text(encoding="utf-8")
    missing = [m.id for m in CATALOGUE if f"`{m.id}`" not in text]
    assert not missing, f"add these catalogue entries to {DOC.relative_to(REPO)}: {missing}"


# ----------------------------------------------------------------------------------------------------------------
# ``python -m tests.test_bad_inputs``: the tables of docs/troubleshooting.md, messages from a real run


def _message(mistake: Mistake) -> str:
    try:
        mistake.commit()
    except BaseException as e:  # noqa: BLE001 - every entry raises
        text = re.split(r"\n\s*Trace Shapes:", str(e))[0]  # Pyro appends the trace's shapes
        text = " ".join(line.strip() for line in text.splitlines())
        text = text.replace(str(_WORK[0]), "/path/to")
        if len(text) > 260:
            text = text[:257] + "..."
        return text.replace("|", "\\|")
    raise AssertionError(f"{mistake.id}: no error")


def _tables() -> str:
    out = []
    for category in dict.fromkeys(m.category for m in CATALOGUE):
        out += [f"### {category}", "", "| id | mistake | error | fix |", "|---|---|---|---|"]
        for m in (m for m in CATALOGUE if m.category == category):
            what, fix = m.what.replace("|", "\\|"), m.fix.replace("|", "\\|")
            out.append(f"| `{m.id}` | {what} | {m.error.__name__}: `{_message(m)}` | {fix} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        _WORK[:] = [Path(tmp)]
        sys.stdout.write(_tables())
