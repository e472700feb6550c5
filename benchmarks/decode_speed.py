"""Beam-search decoding speed of our translation checkpoints against the peer toolkit's ``onmt_translate``.

    python benchmarks/decode_speed.py --ours soft=~/runs/soft-toolkit/soft-toolkit \\
        --peer-model ~/runs/decode-speed/peer/block0/model_step_908.pt --threads 1 2
    python benchmarks/decode_speed.py --ours soft=RUN --train-peer-steps 908      # train the peer's model first
    python benchmarks/decode_speed.py --ours marginal=RUN:marginal --ours kmax=RUN:kmax --limit 100

A benchmark, not a test: it measures and asserts nothing about times.  Run it on a quiet machine; the thread
count is part of every result.

**What runs.**  For every thread count, ``--blocks`` blocks; in each block every side decodes the first
``--limit`` sentences of Multi30k's ``test_2016_flickr`` (German, lower-cased and tokenised; default all 1,000)
in a fresh process, the order of the sides rotating from block to block so that a drift of a shared machine
hits all of them.  ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` are the thread count for every process, and ours
also calls ``torch.set_num_threads``.

* **Ours** (``--ours LABEL=RUN[:RULE]``, any number): :func:`pyro_attention.tasks.translation.translate_lines` on the
  loaded checkpoint (``best.pt`` of a run folder, or a ``.pt``), beam ``--beam``, the rule given (default: the
  pair's), no length penalty, at most ``2 x source length + 10`` tokens; sentences are sorted by length and
  decoded 64 at a time (batched beam search), the products through oneDNN
  (:mod:`pyro_attention.networks.onednn`; ``--torch-products`` also runs each checkpoint with torch's own, labelled
  ``LABEL/torch``).  Timed: the ``translate_lines`` call (``time.perf_counter``), after the checkpoint is loaded.
* **The peer** (``--peer-model``: an OpenNMT-py 3.5.1 checkpoint; or ``--train-peer-steps N``: train one first
  with the configuration of ``benchmarks/peer.py``, untimed): ``onmt_translate -beam_size BEAM
  -batch_size 64 -batch_type sents -report_time`` with its other defaults (length penalty ``avg``, at most 250
  tokens).  Timed: its own ``Total translation time (s)`` (printed to 0.1 s), which starts after the model is
  loaded, like ours.

Reported for every run: sentences/s, generated target tokens/s (whitespace tokens of the output, without
``</s>``), the whole process's wall time (imports and model loading included), and BLEU of the output (sacreBLEU
``tokenize="none"`` against the lower-cased tokenised reference, as the peer was scored; our output, which
``translate_lines`` detokenises, is Moses-tokenised again first, a near-identity round trip -- a row's official
BLEU is ``evaluate``'s), so that speeds of models of different quality are read with their output lengths in
view.  Output: ``--json`` and a markdown
table.  Scratch files live under ``--work`` (default ``~/runs/decode-speed``, refused inside the repository).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer  # noqa: E402  (benchmarks/peer.py: where results go, the data folder)
import toolkit  # noqa: E402  (benchmarks/toolkit.py: the peer's venv, data and training configuration)

ROOT = Path(__file__).resolve().parents[1]
RESULT_MARK = "DECODE-SPEED-RESULT "
PEER_TIME = re.compile(r"Total translation time \(s\): ([\d.]+)")
TEST = "test_2016_flickr"


def parse_ours(spec: str) -> dict[str, Any]:
    """``LABEL=RUN[:RULE]`` -> ``{"label", "checkpoint", "rule"}`` (``rule`` ``None``: the pair's default)."""
    label, sep, rest = spec.partition("=")
    if not sep or not label or not rest:
        raise argparse.ArgumentTypeError(f"--ours {spec!r}: expected LABEL=RUN[:RULE], e.g. soft=~/runs/x/soft")
    path, _, rule = rest.partition(":")
    if rule and rule not in ("soft", "marginal", "kmax"):
        raise argparse.ArgumentTypeError(f"--ours {spec!r}: rule must be one of soft, marginal, kmax; got {rule!r}")
    return {"label": label, "checkpoint": str(Path(path).expanduser()), "rule": rule or None}


def peer_seconds(log: str) -> float:
    """The peer's decoding time from ``onmt_translate -report_time``'s log."""
    found = PEER_TIME.findall(log)
    if not found:
        raise RuntimeError("onmt_translate printed no 'Total translation time (s)' line; its log ends:\n" + log[-2000:])
    return float(found[-1])


def test_files(data_dir: Path, work: Path, limit: int | None) -> dict[str, Path]:
    """The first ``limit`` lines of ``test_2016_flickr`` (de, en), whitespace runs collapsed, in ``work/data``."""
    paths = {}
    for lang, full in ((k.rsplit(".", 1)[1], v) for k, v in toolkit.prepare_data(data_dir, work, (TEST,)).items()):
        lines = full.read_text(encoding="utf-8").splitlines()[:limit]
        paths[lang] = full.with_name(f"{TEST}.{len(lines)}.{lang}")
        paths[lang].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def bleu_tok_none(hyps: list[str], refs: list[str]) -> float:
    import sacrebleu

    return round(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", force=True).score, 2)


def _measured(side: str, seconds: float, wall: float, hyps: list[str], refs: list[str], threads: int,
              block: int) -> dict[str, Any]:
    tokens = sum(len(h.split()) for h in hyps)
    return {"side": side, "threads": threads, "block": block, "sentences": len(hyps), "decode_s": seconds,
            "process_wall_s": round(wall, 2), "sentences_per_s": len(hyps) / seconds if seconds else None,
            "target_tokens": tokens, "tokens_per_s": tokens / seconds if seconds else None,
            "bleu_tok_none": bleu_tok_none(hyps, refs), "load_avg_before": os.getloadavg()}


def ours_worker(args: argparse.Namespace) -> dict[str, Any]:
    """In the fresh process: load the checkpoint, then time ``translate_lines`` on the test sentences."""
    import torch

    torch.set_num_threads(args.threads[0])
    from pyro_attention.tasks.translation import BeamSearch, load_checkpoint, translate_lines

    spec = parse_ours(args.ours[0])
    if args._torch_products:  # torch's own float32 products (its BLAS), as before decoding multiplied through oneDNN
        import contextlib

        from pyro_attention.tasks.translation import decoding

        decoding.onednn_inference = lambda net: contextlib.nullcontext()
    path = Path(spec["checkpoint"])
    if path.is_dir():
        path = path / "best.pt" if (path / "best.pt").is_file() else path / "last.pt"
    ckpt = load_checkpoint(path)
    lines = Path(args._src).read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    hyps = translate_lines(ckpt, lines, search=BeamSearch(beam=args.beam, rule=spec["rule"]), tokenize="none",
                           lowercase=False)
    seconds = time.perf_counter() - start
    # the tokenised output (the same whitespace tokens the peer writes): detokenised lines are scored elsewhere
    Path(args._out).write_text("\n".join(hyps) + "\n", encoding="utf-8")
    return {"decode_s": seconds, "rule": spec["rule"] or "default", "checkpoint": str(path),
            "products": "torch" if args._torch_products else "onednn"}


def run_ours(args: argparse.Namespace, spec: dict[str, Any], src: Path, refs: list[str], threads: int,
             block: int) -> dict[str, Any]:
    out = args.work / f"ours-{spec['label'].replace('/', '-')}-t{threads}-b{block}.txt"
    spec_text = f"{spec['label']}={spec['checkpoint']}" + (f":{spec['rule']}" if spec["rule"] else "")
    command = [sys.executable, __file__, "--_worker", "--ours", spec_text, "--threads", str(threads),
               "--beam", str(args.beam), "--_src", str(src), "--_out", str(out), "--work", str(args.work)]
    if spec.get("torch_products"):
        command.append("--_torch-products")
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=toolkit.thread_env(threads), cwd=ROOT)
    wall = time.perf_counter() - start
    marks = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if done.returncode != 0 or not marks:
        raise RuntimeError(f"our decoder ({spec['label']}) failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    info = json.loads(marks[-1][len(RESULT_MARK):])
    hyps = out.read_text(encoding="utf-8").splitlines()
    return {**_measured(spec["label"], info["decode_s"], wall, _retokenise(hyps), refs, threads, block), **info}


def _retokenise(hyps: list[str]) -> list[str]:
    """``translate_lines`` detokenises (Moses); BLEU ``tokenize="none"`` wants the tokenised form back."""
    from sacremoses import MosesTokenizer

    moses = MosesTokenizer(lang="en")
    return [moses.tokenize(h, escape=True, aggressive_dash_splits=False, return_str=True) for h in hyps]


def run_peer(args: argparse.Namespace, model: Path, src: Path, refs: list[str], threads: int,
             block: int) -> dict[str, Any]:
    out = args.work / f"peer-t{threads}-b{block}.txt"
    command = [str(args.peer_venv / "bin" / "onmt_translate"), "-model", str(model), "-src", str(src), "-output",
               str(out), "-beam_size", str(args.beam), "-batch_size", "64", "-batch_type", "sents", "-gpu", "-1",
               "-report_time"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=toolkit.peer_env(threads))
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"onmt_translate failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    hyps = out.read_text(encoding="utf-8").splitlines()
    seconds = peer_seconds(done.stdout + done.stderr)
    return {**_measured("peer", seconds, wall, hyps, refs, threads, block), "model": str(model)}


def train_peer(args: argparse.Namespace) -> Path:
    """An OpenNMT-py model at the peer's configuration after ``--train-peer-steps`` steps (untimed)."""
    paths = toolkit.prepare_data(args.data_dir, args.work)
    toolkit.build_peer_vocab(args.peer_venv, paths, args.work, max(args.threads))
    config = toolkit.peer_train_config(paths, args.work, 0, 0, args.train_peer_steps)
    config["report_every"] = 50
    block_dir = args.work / "peer" / "block0"
    block_dir.mkdir(parents=True, exist_ok=True)
    path = block_dir / "train.yaml"
    path.write_text(toolkit.to_yaml(config), encoding="utf-8")
    print(f"peer: training {args.train_peer_steps} steps ({path}) ...", file=sys.stderr, flush=True)
    with open(block_dir / "train.log", "w", encoding="utf-8") as log:
        done = subprocess.run([str(args.peer_venv / "bin" / "onmt_train"), "-config", str(path)], stdout=log,
                              stderr=subprocess.STDOUT, env=toolkit.thread_env(max(args.threads)))
    model = block_dir / f"model_step_{args.train_peer_steps}.pt"
    if done.returncode != 0 or not model.is_file():
        raise RuntimeError(f"onmt_train failed (exit {done.returncode}); see {block_dir / 'train.log'}")
    return model


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled sentences/s and tokens/s of one side at one thread count, and the median over blocks."""
    seconds = sum(r["decode_s"] for r in runs)
    return {"blocks": len(runs), "sentences_per_s": sum(r["sentences"] for r in runs) / seconds,
            "tokens_per_s": sum(r["target_tokens"] for r in runs) / seconds,
            "median_sentences_per_s": statistics.median(r["sentences_per_s"] for r in runs),
            "bleu_tok_none": runs[0]["bleu_tok_none"], "target_tokens": runs[0]["target_tokens"]}


def table(result: dict[str, Any]) -> str:
    rows = ["| side | rule | threads | sentences/s | target tokens/s | output tokens | BLEU tok none |",
            "|---|---|---|---|---|---|---|"]
    for key, s in result["summary"].items():
        side, threads = key.rsplit("@", 1)
        rule = result["rules"].get(side, "")
        rows.append(f"| {side} | {rule} | {threads} | {s['sentences_per_s']:.1f} | {s['tokens_per_s']:.0f} | "
                    f"{s['target_tokens']} | {s['bleu_tok_none']:.2f} |")
    return "\n".join(rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ours", action="append", type=str, default=[], metavar="LABEL=RUN[:RULE]",
                   help="one of our checkpoints (a run folder or .pt) and its prediction rule; repeatable")
    p.add_argument("--peer-model", type=Path, default=None, help="an OpenNMT-py checkpoint to decode with")
    p.add_argument("--train-peer-steps", type=int, default=0,
                   help="train the peer's model for N steps first (untimed) when --peer-model is not given")
    p.add_argument("--peer-venv", type=Path, default=Path("~/peer/onmt"), help="the peer's venv (created if "
                   "missing, as benchmarks/peer.py does) (default ~/peer/onmt)")
    p.add_argument("--data-dir", type=Path, default=peer.DEFAULT_DATA, help="folder holding multi30k/ "
                   "(default ../shared/data)")
    p.add_argument("--threads", type=int, nargs="+", default=[1], help="thread counts to measure (default 1)")
    p.add_argument("--beam", type=int, default=5, help="beam size (default 5)")
    p.add_argument("--blocks", type=int, default=2, help="interleaved blocks per thread count (default 2)")
    p.add_argument("--limit", type=int, default=None, help="decode only the first N test sentences (default all)")
    p.add_argument("--work", type=Path, default=Path("~/runs/decode-speed"), help="scratch folder outside the "
                   "repository (default ~/runs/decode-speed)")
    p.add_argument("--json", type=Path, default=None, help="output JSON (default <work>/decode-speed.json)")
    p.add_argument("--torch-products", action="store_true", help="also decode every --ours checkpoint with torch's "
                   "own float32 products instead of oneDNN's (labelled LABEL/torch): the speed before decoding "
                   "multiplied through oneDNN")
    p.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--_torch-products", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--_src", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.work, args.peer_venv = args.work.expanduser().resolve(), args.peer_venv.expanduser()
    if not args._worker and ROOT in (args.work, *args.work.parents):
        p.error(f"--work {args.work} is inside the repository; choose a folder outside it")
    args.json = (args.json or args.work / "decode-speed.json").expanduser()
    for spec in args.ours:  # refuse a malformed one before anything runs
        try:
            parse_ours(spec)
        except argparse.ArgumentTypeError as error:
            p.error(str(error))
    if not args.ours and args.peer_model is None and not args.train_peer_steps:
        p.error("nothing to measure: give --ours and/or --peer-model (or --train-peer-steps)")
    return args


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args._worker:
        print(RESULT_MARK + json.dumps(ours_worker(args)), flush=True)
        return {}
    args.work.mkdir(parents=True, exist_ok=True)
    files = test_files(args.data_dir, args.work, args.limit)
    refs = files["en"].read_text(encoding="utf-8").splitlines()
    specs = [parse_ours(s) for s in args.ours]
    if args.torch_products:
        specs += [{**s, "label": f"{s['label']}/torch", "torch_products": True} for s in specs]
    model = args.peer_model
    if model is None and args.train_peer_steps:
        toolkit.ensure_peer_venv(args.peer_venv)
        model = train_peer(args)
    sides: list[Any] = [*specs, "peer"] if model is not None else specs
    result: dict[str, Any] = {
        "benchmark": "benchmarks/decode_speed.py",
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "beam": args.beam, "sentences": len(refs), "test": TEST, "peer_model": str(model) if model else None,
        "rules": {s["label"]: s["rule"] or "default" for s in specs}, "runs": [],
    }
    for threads in args.threads:
        for block in range(args.blocks):
            shift = block % len(sides)
            for side in sides[shift:] + sides[:shift]:
                label = "peer" if side == "peer" else side["label"]
                print(f"threads {threads}, block {block + 1}/{args.blocks}: {label} ...", file=sys.stderr, flush=True)
                if side == "peer":
                    run = run_peer(args, model, files["de"], refs, threads, block)
                else:
                    run = run_ours(args, side, files["de"], refs, threads, block)
                result["runs"].append(run)
                print(f"  {run['sentences_per_s']:.1f} sentences/s, {run['tokens_per_s']:.0f} tokens/s, "
                      f"BLEU {run['bleu_tok_none']}", file=sys.stderr, flush=True)
    result["summary"] = {}
    for threads in args.threads:
        for label in [s["label"] for s in specs] + (["peer"] if model is not None else []):
            runs = [r for r in result["runs"] if r["side"] == label and r["threads"] == threads]
            result["summary"][f"{label}@{threads}"] = summarise(runs)
    return peer.write_result(result, table(result), args.json)


if __name__ == "__main__":
    main(parse_args())
