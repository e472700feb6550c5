"""The peer toolkit (OpenNMT-py 3.5.1) as benchmarks/peer.py runs it: its own virtual environment, the data in its
layout, its vocabulary and training configuration, a training run followed block by block."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is not a package
from processes import TreeMonitor, tree_cpu_seconds, wait_process  # noqa: E402

PEER_VERSION = "3.5.1"
#: the peer's venv, exactly as VISION.md installs it (torch first, then OpenNMT-py without its pins, then its imports)
PEER_INSTALL = (
    ["install", "torch==2.13.0"],
    ["install", "--no-deps", f"OpenNMT-py=={PEER_VERSION}"],
    ["install", "configargparse", "pyyaml", "six", "pyonmttok", "numpy", "spacy", "pyahocorasick", "rapidfuzz",
     "fasttext-wheel", "regex", "sacrebleu", "psutil"],
)
SPLITS = ("train", "val")
LANGS = ("de", "en")
#: the peer's model and optimisation options (benchmarks/peer.py), before the run-specific ones
PEER_CONFIG: dict[str, Any] = dict(
    encoder_type="brnn", enc_hid_size=512, dec_hid_size=512, word_vec_size=256, layers=1,
    global_attention="general", input_feed=1, dropout=[0.3], optim="adam", learning_rate=0.001, batch_size=64,
    batch_type="sents", src_words_min_frequency=2, tgt_words_min_frequency=2, src_seq_length=50,
    tgt_seq_length=50, num_workers=2,
)

STEP_LINE = re.compile(
    r"Step\s+(?P<step>\d+)/\s*(?P<total>\d+); acc:\s*(?P<acc>[\d.]+); ppl:\s*(?P<ppl>[\d.einf+]+); "
    r"xent:\s*(?P<xent>[\d.]+); lr:\s*[\d.e-]+; sents:\s*(?P<sents>\d+); "
    r"bsz:\s*(?P<src>\d+)/\s*(?P<tgt>\d+)/\s*(?P<bsents>\d+);"
)
LOG_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
PEER_INFO = {
    "src_vocab": re.compile(r"\* src vocab size = (\d+)"),
    "tgt_vocab": re.compile(r"\* tgt vocab size = (\d+)"),
    "encoder_params": re.compile(r"\bencoder: (\d+)"),
    "decoder_params": re.compile(r"\bdecoder: (\d+)"),
    "parameters": re.compile(r"number of parameters: (\d+)"),
    "trainable": re.compile(r"Trainable parameters = (.*)$"),
}


def thread_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    return env


def peer_env(threads: int) -> dict[str, str]:
    """:func:`thread_env` for a peer command that loads a checkpoint: OpenNMT-py 3.5.1 pickles its options
    (``argparse.Namespace``), which torch >= 2.6 loads only with weights-only loading off."""
    return {**thread_env(threads), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}


# -- the peer --------------------------------------------------------------------------------------------------
def _peer_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _peer_versions(venv: Path) -> dict[str, str] | None:
    code = "import json, onmt, torch; print(json.dumps({'onmt': onmt.__version__, 'torch': torch.__version__}))"
    try:
        out = subprocess.run([str(_peer_python(venv)), "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return None


def ensure_peer_venv(venv: Path, log: Path | None = None) -> dict[str, str]:
    """The peer's venv at ``venv``: reused when ``onmt`` and ``torch`` import there, else created with
    ``python -m venv`` and the three ``pip`` commands of :data:`PEER_INSTALL` (output appended to ``log``,
    default ``<venv>.install.log``).  Returns the versions found.

    :raises RuntimeError: when a command fails or the venv still does not import ``onmt`` afterwards.
    """
    venv = venv.expanduser()
    found = _peer_versions(venv)
    if found is not None:
        return found
    log = log or venv.with_name(venv.name + ".install.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"peer: creating the venv {venv} (OpenNMT-py {PEER_VERSION}; log {log}) ...", file=sys.stderr)
    commands = [[sys.executable, "-m", "venv", str(venv)]]
    commands += [[str(venv / "bin" / "pip"), *args] for args in PEER_INSTALL]
    with open(log, "a", encoding="utf-8") as out:
        for command in commands:
            out.write("$ " + " ".join(command) + "\n")
            out.flush()
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
            # pip's resolver complains about OpenNMT-py's pins (torch<2.3, ...) after --no-deps: not a failure
            if done.returncode != 0:
                raise RuntimeError(f"peer venv: {' '.join(command)} failed (exit {done.returncode}); see {log}")
    found = _peer_versions(venv)
    if found is None:
        raise RuntimeError(f"peer venv {venv}: 'import onmt, torch' still fails after installing; see {log}")
    return found


def prepare_data(data_dir: Path, work: Path, splits: tuple[str, ...] = SPLITS) -> dict[str, Path]:
    """Gunzip Multi30k's tokenised ``splits`` (default train / val) into ``work/data/{split}.{lang}`` with
    whitespace runs collapsed."""
    out_dir = work / "data"
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split in splits:
        for lang in LANGS:
            source = data_dir / "multi30k" / "tok" / f"{split}.lc.norm.tok.{lang}.gz"
            if not source.is_file():
                raise FileNotFoundError(f"{source}: no such file (--data-dir must hold multi30k/tok/)")
            target = out_dir / f"{split}.{lang}"
            if not target.is_file() or target.stat().st_mtime < source.stat().st_mtime:
                tmp = target.with_name(target.name + ".tmp")
                with gzip.open(source, "rt", encoding="utf-8") as f, open(tmp, "w", encoding="utf-8") as g:
                    for line in f:
                        g.write(" ".join(line.split()) + "\n")
                os.replace(tmp, target)
            paths[f"{split}.{lang}"] = target
    return paths


def to_yaml(values: dict[str, Any]) -> str:
    """Flat YAML for OpenNMT (JSON scalars and lists are YAML; ``data`` is a nested mapping)."""
    lines = []
    for key, value in values.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            for name, corpus in value.items():
                lines.append(f"  {name}:")
                lines.extend(f"    {k}: {json.dumps(v)}" for k, v in corpus.items())
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def _peer_data(paths: dict[str, Path], peer_dir: Path) -> dict[str, Any]:
    return {
        "data": {"corpus_1": {"path_src": str(paths["train.de"]), "path_tgt": str(paths["train.en"]),
                              "transforms": ["filtertoolong"]}},
        "src_vocab": str(peer_dir / "vocab.src"),
        "tgt_vocab": str(peer_dir / "vocab.tgt"),
        "src_seq_length": PEER_CONFIG["src_seq_length"],
        "tgt_seq_length": PEER_CONFIG["tgt_seq_length"],
    }


def build_peer_vocab(venv: Path, paths: dict[str, Path], work: Path, threads: int) -> dict[str, Any]:
    """``onmt_build_vocab -n_sample -1`` on the training corpus (once; untimed)."""
    peer_dir = work / "peer"
    peer_dir.mkdir(parents=True, exist_ok=True)
    config = {**_peer_data(paths, peer_dir), "save_data": str(peer_dir / "vocab"), "overwrite": True,
              "n_sample": -1}
    path = peer_dir / "build_vocab.yaml"
    path.write_text(to_yaml(config), encoding="utf-8")
    start = time.perf_counter()
    done = subprocess.run([str(venv / "bin" / "onmt_build_vocab"), "-config", str(path)], capture_output=True,
                          text=True, env=thread_env(threads))
    (peer_dir / "build_vocab.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        raise RuntimeError(f"onmt_build_vocab failed (exit {done.returncode}): {done.stderr[-2000:]}")
    words = {side: sum(1 for _ in open(peer_dir / f"vocab.{side}", encoding="utf-8")) for side in ("src", "tgt")}
    return {"config": config, "seconds": round(time.perf_counter() - start, 1), "counted_words": words}


def peer_train_config(paths: dict[str, Path], work: Path, block: int, warmup: int, steps: int) -> dict[str, Any]:
    peer_dir = work / "peer"
    total = warmup + steps
    return {
        **_peer_data(paths, peer_dir),
        **PEER_CONFIG,
        "train_steps": total,
        "report_every": 1,
        "valid_steps": total + 1_000_000,
        "save_checkpoint_steps": total + 1_000_000,
        "save_model": str(peer_dir / f"block{block}" / "model"),
        "seed": 1 + block,
        "overwrite": True,
    }


def run_peer(venv: Path, paths: dict[str, Path], work: Path, block: int, warmup: int, steps: int,
             threads: int) -> dict[str, Any]:
    """One run of ``onmt_train``: warm-up + timed steps, measured as the module docstring says."""
    config = peer_train_config(paths, work, block, warmup, steps)
    block_dir = work / "peer" / f"block{block}"
    shutil.rmtree(block_dir, ignore_errors=True)
    block_dir.mkdir(parents=True)
    config_path = block_dir / "train.yaml"
    config_path.write_text(to_yaml(config), encoding="utf-8")
    load = os.getloadavg()
    started = time.perf_counter()
    proc = subprocess.Popen([str(venv / "bin" / "onmt_train"), "-config", str(config_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, env=thread_env(threads),
                            start_new_session=True)
    monitor = TreeMonitor(proc.pid)
    monitor.start()
    try:
        return _follow_peer(proc, monitor, config, block_dir, block, warmup, steps, threads, load, started)
    except BaseException:
        if proc.returncode is None:  # interrupted or failed: end the trainer and its workers (its own group)
            try:
                os.killpg(proc.pid, 9)
                wait_process(proc)
            except (ProcessLookupError, ChildProcessError):
                pass
        monitor.stop()
        raise


def _follow_peer(proc: subprocess.Popen, monitor: TreeMonitor, config: dict[str, Any], block_dir: Path, block: int,
                 warmup: int, steps: int, threads: int, load: tuple[float, float, float],
                 started: float) -> dict[str, Any]:
    log_path = block_dir / "train.log"
    marks: dict[int, tuple[float, float]] = {}  # step -> (arrival time, tree CPU seconds)
    step_rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {}
    tail: list[str] = []
    first_step_at = None
    with open(log_path, "w", encoding="utf-8") as log:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.perf_counter()
            log.write(line)
            tail = (tail + [line])[-40:]
            match = STEP_LINE.search(line)
            if match is None:
                for key, pattern in PEER_INFO.items():
                    found = pattern.search(line)
                    if found and key not in info:
                        info[key] = int(found.group(1)) if found.group(1).isdigit() else found.group(1).strip()
                continue
            step = int(match["step"])
            if first_step_at is None:
                first_step_at = now
            if step in (warmup, warmup + steps):
                marks[step] = (now, tree_cpu_seconds(proc.pid))
            stamp = LOG_STAMP.search(line)
            step_rows.append({
                "step": step, "tgt_tokens": int(match["tgt"]), "src_tokens": int(match["src"]),
                "sents": int(match["sents"]), "xent": float(match["xent"]), "arrived": now - started,
                "stamp": stamp.group(1) if stamp else None,
            })
    code, usage = wait_process(proc)
    monitor.stop()
    memory = monitor.report(usage.ru_maxrss)
    total_seconds = time.perf_counter() - started
    for leftover in block_dir.glob("model_step_*.pt"):  # OpenNMT's final checkpoint, written after the window
        leftover.unlink()
    if code != 0 or warmup not in marks or warmup + steps not in marks:
        raise RuntimeError(f"onmt_train (block {block}) failed (exit {code}); last lines of {log_path}:\n"
                           + "".join(tail))
    timed = [r for r in step_rows if warmup < r["step"] <= warmup + steps]
    (t0, c0), (t1, c1) = marks[warmup], marks[warmup + steps]
    stamps = {r["step"]: _stamp_seconds(r["stamp"]) for r in step_rows if r["stamp"]}
    per_step = [stamps[s] - stamps[s - 1] for s in range(warmup + 1, warmup + steps + 1)
                if s in stamps and s - 1 in stamps]
    log_wall = stamps[warmup + steps] - stamps[warmup] if warmup in stamps and warmup + steps in stamps else None
    return {
        "side": "peer", "block": block, "seed": config["seed"], "threads": threads, "load_average_before": load,
        "steps": steps, "warmup": warmup,
        "wall_s": t1 - t0, "cpu_s": c1 - c0, "tgt_tokens": sum(r["tgt_tokens"] for r in timed),
        "src_tokens": sum(r["src_tokens"] for r in timed), "sentences": sum(r["sents"] for r in timed),
        "log_wall_s": log_wall, "step_s": per_step, "step_tokens": [r["tgt_tokens"] for r in timed],
        "mean_xent": statistics.fmean(r["xent"] for r in timed),
        "setup_s": (first_step_at - started) if first_step_at else None, "run_s": total_seconds,
        "run_cpu_s": usage.ru_utime + usage.ru_stime, "memory": memory, "info": info, "config": config,
        "log": str(log_path),
    }


def _stamp_seconds(stamp: str | None) -> float:
    value = dt.datetime.strptime(stamp or "", "%Y-%m-%d %H:%M:%S,%f")
    return value.timestamp()
