"""Training throughput of our ``soft`` pair against the peer toolkit, OpenNMT-py 3.5.1, on Multi30k De->En.

    python benchmarks/peer.py                          # 3 interleaved blocks of 110 timed steps a side, 1 thread
    python benchmarks/peer.py --threads 2 --json ~/runs/peer-bench/peer-2threads.json
    python benchmarks/peer.py --steps 5 --warmup 2 --blocks 1      # a smoke run (both sides work)
    python benchmarks/peer.py --ours-only --attention-type mlp     # only our side
    python benchmarks/peer.py --threads 2 --autocast bfloat16      # our steps under bfloat16 autocast

A benchmark, not a test: it measures and asserts nothing about times.  Run it on a quiet machine; the thread
count is part of every result (two torch threads on two shared cores collapse when anything else runs).

**What runs.**  ``--blocks`` blocks; each block trains both sides from scratch, one after the other, in a fresh
process each (peer, ours in block 0; ours, peer in block 1; ...: who starts rotates, so a slow drift of a shared
machine hits both).  Each run takes ``--warmup`` untimed steps, then ``--steps`` timed steps, on batches in a
random order of the whole training corpus (seed ``1 + block``; torch, Python and NumPy seeded on both sides).
``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` are ``--threads`` for both processes, and ours also calls
``torch.set_num_threads(--threads)``.

**Data.**  ``<data-dir>/multi30k/tok/{train,val}.lc.norm.tok.{de,en}.gz`` (lower-cased, Moses-tokenised).  Ours
reads the files itself (``translation.load_corpora``, which splits on whitespace runs).  For the peer they are
gunzipped into ``<work>/data/`` with every whitespace run collapsed to one space (``train.en`` line 16,217
holds a double space, which breaks its vocabulary file); only ``train`` goes into its config (no validation
runs on either side).  Both sides drop training pairs with a side longer than 50 tokens and keep words seen at
least twice in the (filtered) training side.

**Our configuration** (``pyro_attention.tasks.translation``, the package's own Python API, not the CLI):
``TranslationConfig(data="multi30k", min_freq=2, max_len=50, model="soft", embedding=256, encoder=256`` (per
direction) ``, decoder=512, attention=256, layers=1, dropout=0.3, lr=1e-3, batch_size=64`` ``)`` and
``attention_type=--attention-type`` (default ``"general"``, Luong's bilinear score, the peer's) when
``TranslationConfig`` has that key -- otherwise the network's default MLP attention is used and the JSON says
so; ``autocast=--autocast`` (default ``"none"``: float32; ``"bfloat16"``: the model and guide calls under
``torch.autocast``, as the trainer runs them).  Then what
:func:`pyro_attention.tasks.translation.train` does before its loop: ``load_corpora``,
``build_vocabs``, ``make_batches`` (length-bucketed batches of 64 sentences), ``pyro.clear_param_store()``,
``pyro.set_rng_seed``, ``build_pair``, ``pyro.module`` for every module of the pair, ``network.train()``,
``FusedClippedAdam({"lr": 1e-3, "clip_norm": 5.0})`` (Pyro's ClippedAdam update, per-parameter clipping, in one
fused pass; the trainer's) and
``DataParallelSVI(pair.model, pair.guide, optim, pair.elbo(), autocast=...)``.  A step is ``svi.step(batch)`` on one
prepared batch (forward, ELBO, backward, optimiser update, gradients reset); the batch order is
``torch.randperm`` with a generator seeded ``seed * 1_000_003`` (the trainer's order of epoch 0).

**The peer's configuration**: ``encoder_type brnn,
enc_hid_size 512`` (256 per direction) ``, dec_hid_size 512, word_vec_size 256, layers 1, global_attention
general, input_feed 1, dropout 0.3, optim adam, learning_rate 0.001, batch_size 64, batch_type sents,
src/tgt_words_min_frequency 2, src/tgt_seq_length 50`` (the ``filtertoolong`` transform), and for the
measurement ``report_every 1, train_steps warmup + steps, valid_steps / save_checkpoint_steps`` beyond the run
(no validation, no checkpoint inside it; the final checkpoint OpenNMT writes after the last step is outside the
timed window and deleted), ``seed 1 + block``; everything else at OpenNMT-py 3.5.1's defaults (among them
``num_workers 2`` spawned data workers, ``bucket_size 262144``, ``max_grad_norm 5`` (global norm),
``param_init 0.1``, ``normalization sents``; with a bucket larger than the corpus each worker cycles through
its share of the corpus until its bucket is full, which is most of the peer's untimed set-up time and of its
workers' memory).  Its vocabulary is built once with ``onmt_build_vocab -n_sample -1``
(untimed, reused by every block).  The venv comes from :func:`ensure_peer_venv`.

**What is timed, exactly.**  Ours: in the worker process, ``time.perf_counter()`` and ``os.times()`` (user +
system, children included) just before timed step 1 and just after timed step ``--steps``: exactly the
``--steps`` calls of ``svi.step``; corpus reading, vocabularies, batches, network construction and the warm-up
are outside.  The peer: ``onmt_train``'s output is read line by line as it is written; with ``report_every 1``
OpenNMT logs one ``Step k/...`` line right after optimiser step ``k`` (and after its own statistics).  The
window runs from the arrival of the line of step ``warmup`` to that of step ``warmup + steps``: exactly the
``--steps`` training steps (each with the batch fetch from its data-loader queue and its one log line),
excluding vocabulary loading, model construction, worker start-up and the warm-up.  Its wall time is that of
the arrival clock (the log's own millisecond timestamps give the same to a few ms and per-step times; both are
in the JSON).  Its CPU time is read from ``/proc`` at those two moments: ``utime + stime`` of the trainer and
every live descendant (the data workers, which prefetch batches concurrently, and any helper) plus the
``cutime + cstime`` of reaped ones.

**Counted the same way on both sides:** target tokens of the actual batches, including ``</s>`` and excluding
``<s>`` and padding -- ours ``batch.target_mask.sum()``, the peer's ``n_words`` (the non-padding tokens of
``tgt[1:]``, logged per step as the middle ``bsz`` field when ``report_every`` is 1).

**Reported for both:** target tokens/s (timed tokens / timed wall seconds, pooled over blocks; and the median
of the blocks), CPU-seconds per 1,000 target tokens, CPU-seconds per step, seconds per step (mean over the
timed window and median of single steps), tokens per step, and peak RSS: for every process of the run's tree
(ours: the one worker; the peer: trainer + data workers + helpers) its own peak (``VmHWM``, sampled from
``/proc`` every 0.2 s; ours also reports its own ``ru_maxrss``, and the larger is kept), summed.  Also the
largest simultaneous sum of ``VmRSS`` and of ``Pss`` (``smaps_rollup``; shared pages counted once) seen while
sampling, and the untimed set-up time of each run (from starting its process to the end of its first warm-up
step).

Outputs: ``--json`` (default ``<work>/peer-bench.json``) with both configurations and every measurement
(per block, per step), and a markdown table on standard output.  Scratch files live under ``--work``
(default ``~/runs/peer-bench``, refused inside the repository).  Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is not a package
from processes import TreeMonitor  # noqa: E402
from toolkit import (  # noqa: E402
    PEER_CONFIG,
    PEER_VERSION,
    build_peer_vocab,
    ensure_peer_venv,
    prepare_data,
    run_peer,
    thread_env,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
RESULT_MARK = "PEER-BENCH-RESULT "

#: our side (TranslationConfig keys); ``attention_type`` is added only when the config knows it
OURS_CONFIG: dict[str, Any] = dict(
    data="multi30k", src="de", tgt="en", min_freq=2, max_len=50, model="soft", embedding=256, encoder=256,
    decoder=512, attention=256, layers=1, dropout=0.3, lr=1e-3, batch_size=64,
)


# -- ours ------------------------------------------------------------------------------------------------------
def ours_config(args: argparse.Namespace, seed: int) -> tuple[Any, str, bool]:
    """Our ``TranslationConfig``, the attention it uses, and whether ``attention_type`` could be passed."""
    from pyro_attention.tasks.translation import TranslationConfig

    values = dict(OURS_CONFIG, data_dir=str(args.data_dir), threads=args.threads, seed=seed, autocast=args.autocast)
    known = "attention_type" in TranslationConfig.keys()
    if known:
        values["attention_type"] = args.attention_type
    config = TranslationConfig(**values)
    return config, (args.attention_type if known else "mlp"), known


def ours_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Our side, in this (worker) process: set up as ``translation.train`` does, then time ``svi.step``."""
    started = time.perf_counter()
    import resource

    import pyro
    import torch

    from pyro_attention import __version__
    from pyro_attention.inference.distributed import DataParallelSVI
    from pyro_attention.inference.optim import FusedClippedAdam
    from pyro_attention.precision import AUTOCAST_DTYPES
    from pyro_attention.tasks.translation import build_pair, build_vocabs, load_corpora, make_batches

    torch.set_num_threads(args.threads)
    config, attention, passed = ours_config(args, args._seed)
    corpora = load_corpora(config, log=None)
    src_vocab, tgt_vocab = build_vocabs(config, corpora.train)
    batches = make_batches(corpora.train, src_vocab, tgt_vocab, config.batch_size)
    pyro.clear_param_store()
    pyro.set_rng_seed(config.seed)
    network, pair = build_pair(config, src_vocab, tgt_vocab)
    for name, module in pair.modules().items():
        pyro.module(name, module)
    network.train()
    optim = FusedClippedAdam({"lr": config.lr, "clip_norm": config.clip_norm})  # the trainer's optimiser
    svi = DataParallelSVI(pair.model, pair.guide, optim, pair.elbo(), autocast=AUTOCAST_DTYPES[config.autocast])
    # the trainer's batch order of epoch 0 (translation.epoch_generator(seed, 0))
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(config.seed * 1_000_003)).tolist()
    total = args.warmup + args.steps
    chosen = [batches[order[i % len(order)]] for i in range(total)]
    tokens = [int(b.target_mask.sum()) for b in chosen]
    params = {n: p for name, m in pair.modules().items() for n, p in m.named_parameters(prefix=name)}
    before = {n: float(p.detach().double().sum()) for n, p in params.items()}
    setup = time.perf_counter() - started

    step_s, losses = [], []
    for i, batch in enumerate(chosen):
        if i == args.warmup:
            cpu0, wall0 = _own_cpu(), time.perf_counter()
        t = time.perf_counter()
        loss = svi.step(batch)
        step_s.append(time.perf_counter() - t)
        losses.append(loss / tokens[i])
        if i == 0:
            first_step_end = time.time()
    wall, cpu = time.perf_counter() - wall0, _own_cpu() - cpu0
    updated = sum(p.numel() for n, p in params.items() if float(p.detach().double().sum()) != before[n])
    return {
        "side": "ours", "seed": config.seed, "threads": torch.get_num_threads(), "steps": args.steps,
        "warmup": args.warmup, "wall_s": wall, "cpu_s": cpu, "tgt_tokens": sum(tokens[args.warmup:]),
        "src_tokens": sum(int(b.source_mask.sum()) for b in chosen[args.warmup:]),
        "sentences": sum(len(b) for b in chosen[args.warmup:]), "step_s": step_s[args.warmup:],
        "step_tokens": tokens[args.warmup:], "mean_xent": statistics.fmean(losses[args.warmup:]),
        "setup_in_worker_s": setup, "first_step_end_epoch": first_step_end,
        "maxrss_self_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1.024e-3, 1),
        "info": {
            "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab), "train_sentences": len(corpora.train),
            "dropped_pairs": corpora.train.dropped, "batches": len(batches),
            "parameters": sum(p.numel() for p in params.values()), "parameters_updated": updated,
            "attention": attention, "attention_type_passed": passed, "pair": type(pair).__name__,
            "network": repr(network) if len(repr(network)) < 4000 else type(network).__name__,
        },
        "config": config.to_dict(),
        "versions": {"pyro_attention": __version__, "torch": torch.__version__, "pyro": pyro.__version__,
                     "python": platform.python_version()},
    }


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run_ours(args: argparse.Namespace, block: int) -> dict[str, Any]:
    """Our side in a subprocess (``--_worker ours``), its tree's memory sampled as the peer's is."""
    command = [sys.executable, str(Path(__file__).resolve()), "--_worker", "ours", "--_seed", str(1 + block),
               "--data-dir", str(args.data_dir), "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--threads", str(args.threads), "--attention-type", args.attention_type, "--autocast", args.autocast]
    load = os.getloadavg()
    started, started_epoch = time.perf_counter(), time.time()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=thread_env(args.threads))
    monitor = TreeMonitor(proc.pid)
    monitor.start()
    out, err = proc.communicate()  # reaps the child; wait4 cannot be used after it
    monitor.stop()
    run_s = time.perf_counter() - started
    lines = [line for line in out.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"our worker (block {block}) failed (exit {proc.returncode}):\n{err[-4000:]}")
    result = json.loads(lines[-1][len(RESULT_MARK):])
    result.update(block=block, load_average_before=load, run_s=run_s, memory=monitor.report(),
                  setup_s=result["first_step_end_epoch"] - started_epoch)
    memory = result["memory"]  # the worker's own ru_maxrss is its exact peak; the sampler may miss the last rise
    if len(memory["processes"]) == 1:
        memory["peak_rss_sum_mb"] = max(memory["peak_rss_sum_mb"], result["maxrss_self_mb"])
        memory["peak_rss_main_mb"] = max(memory["peak_rss_main_mb"], result["maxrss_self_mb"])
    return result


# -- summary ---------------------------------------------------------------------------------------------------
def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    wall = sum(r["wall_s"] for r in runs)
    cpu = sum(r["cpu_s"] for r in runs)
    tokens = sum(r["tgt_tokens"] for r in runs)
    steps = sum(r["steps"] for r in runs)
    singles = [s for r in runs for s in r["step_s"]]
    return {
        "blocks": len(runs),
        "timed_steps": steps,
        "tgt_tokens": tokens,
        "tokens_per_s": tokens / wall,
        "tokens_per_s_block_median": statistics.median(r["tgt_tokens"] / r["wall_s"] for r in runs),
        "cpu_s_per_1k_tokens": 1000 * cpu / tokens,
        "cpu_s_per_step": cpu / steps,
        "s_per_step": wall / steps,
        "s_per_step_median": statistics.median(singles) if singles else None,
        "tokens_per_step": tokens / steps,
        "cpu_utilisation": cpu / wall,
        "peak_rss_sum_mb": max(r["memory"]["peak_rss_sum_mb"] for r in runs),
        "peak_rss_main_mb": max(r["memory"]["peak_rss_main_mb"] for r in runs),
        "max_concurrent_pss_mb": max(r["memory"]["max_concurrent_pss_mb"] for r in runs),
        "processes": max(len(r["memory"]["processes"]) for r in runs),
        "setup_s_median": statistics.median(r["setup_s"] for r in runs if r.get("setup_s") is not None),
        "mean_xent": statistics.fmean(r["mean_xent"] for r in runs),
    }


ROWS = (
    ("target tokens/s (pooled)", "tokens_per_s", "{:.0f}"),
    ("target tokens/s (median of blocks)", "tokens_per_s_block_median", "{:.0f}"),
    ("CPU-s per 1,000 target tokens", "cpu_s_per_1k_tokens", "{:.3f}"),
    ("CPU-s per step", "cpu_s_per_step", "{:.3f}"),
    ("s per step (mean)", "s_per_step", "{:.3f}"),
    ("s per step (median)", "s_per_step_median", "{:.3f}"),
    ("target tokens per step", "tokens_per_step", "{:.0f}"),
    ("CPU utilisation (cores)", "cpu_utilisation", "{:.2f}"),
    ("peak RSS, processes summed (MB)", "peak_rss_sum_mb", "{:.0f}"),
    ("peak RSS, main process (MB)", "peak_rss_main_mb", "{:.0f}"),
    ("max simultaneous PSS (MB)", "max_concurrent_pss_mb", "{:.0f}"),
    ("processes", "processes", "{:d}"),
    ("set-up to end of first step (s, untimed)", "setup_s_median", "{:.1f}"),
    ("train loss per target token (timed steps)", "mean_xent", "{:.3f}"),
)


def table(result: dict[str, Any]) -> str:
    sides = [s for s in ("ours", "peer") if result.get(s)]
    ours_name = f"ours: soft, {result['ours']['attention']} attention" if result.get("ours") else ""
    names = {"ours": ours_name, "peer": f"OpenNMT-py {PEER_VERSION}"}
    head = "| metric | " + " | ".join(names[s] for s in sides) + (" | ours / peer |" if len(sides) == 2 else " |")
    lines = [
        f"Multi30k De->En, {result['threads']} thread(s), {result['blocks']} block(s) x {result['steps']} timed "
        f"steps (+{result['warmup']} warm-up), batches of 64 sentences; order {', '.join(result['order'])}",
        "",
        head,
        "|" + "---|" * (len(sides) + 1 + (len(sides) == 2)),
    ]
    for label, key, fmt in ROWS:
        values = [result[s]["summary"][key] for s in sides]
        cells = ["" if v is None else fmt.format(v) for v in values]
        ratio = ""
        if len(sides) == 2 and None not in values and values[1] and key != "processes":
            ratio = f"{values[0] / values[1]:.2f}x"
        lines.append(f"| {label} | " + " | ".join(cells) + (f" | {ratio} |" if len(sides) == 2 else " |"))
    lines.append("")
    for side in sides:
        per = ", ".join(f"{r['tgt_tokens'] / r['wall_s']:.0f}" for r in result[side]["runs"])
        lines.append(f"{side}: tokens/s per block {per}")
    return "\n".join(lines)


# -- the command -----------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder holding multi30k/ (default "
                   "../shared/data from the repository root)")
    p.add_argument("--steps", type=int, default=110, help="timed steps per block and side (default 110)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps before them (default 10; at least 1)")
    p.add_argument("--blocks", type=int, default=3, help="interleaved blocks (default 3)")
    p.add_argument("--threads", type=int, choices=(1, 2), default=1, help="torch / OpenMP threads (default 1)")
    p.add_argument("--peer-venv", type=Path, default=Path("~/peer/onmt"), help="the peer's venv (created if "
                   "missing; default ~/peer/onmt)")
    p.add_argument("--work", type=Path, default=Path("~/runs/peer-bench"), help="scratch folder outside the "
                   "repository (default ~/runs/peer-bench)")
    p.add_argument("--json", type=Path, default=None, help="output JSON (default <work>/peer-bench.json)")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--ours-only", action="store_true", help="measure only our side")
    only.add_argument("--peer-only", action="store_true", help="measure only the peer")
    p.add_argument("--attention-type", choices=("mlp", "general", "dot"), default="general",
                   help="our prior's score (TranslationConfig.attention_type; default general, the peer's)")
    p.add_argument("--autocast", choices=("none", "bfloat16"), default="none",
                   help="our training steps under torch.autocast (TranslationConfig.autocast; default none: float32)")
    p.add_argument("--_worker", choices=("ours",), default=None, help=argparse.SUPPRESS)
    p.add_argument("--_seed", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("steps", "warmup", "blocks"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    args.data_dir = args.data_dir.expanduser().resolve()
    args.peer_venv = args.peer_venv.expanduser().absolute()
    args.work = args.work.expanduser().resolve()
    if args.work == ROOT or ROOT in args.work.parents:
        p.error(f"--work {args.work} is inside the repository; choose a folder outside it")
    args.json = (args.json.expanduser() if args.json else args.work / "peer-bench.json").absolute()
    return args


def write_result(result: dict[str, Any], markdown: str, path: Path) -> dict[str, Any]:
    """Add ``markdown`` to ``result``, write it as JSON to ``path`` and print the table; returns ``result``."""
    result["markdown"] = markdown
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(markdown)
    print(f"\nJSON: {path}")
    return result


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args._worker == "ours":
        print(RESULT_MARK + json.dumps(ours_worker(args)), flush=True)
        return {}
    sides = ["ours"] if args.ours_only else ["peer"] if args.peer_only else ["peer", "ours"]
    args.work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "benchmark": "benchmarks/peer.py",
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                 "processor": platform.processor()},
        "threads": args.threads, "steps": args.steps, "warmup": args.warmup, "blocks": args.blocks,
        "data_dir": str(args.data_dir), "work": str(args.work),
        "counting": "target tokens including </s>, excluding <s> and padding, of the batches actually trained on",
        "order": [],
    }
    if "peer" in sides:
        versions = ensure_peer_venv(args.peer_venv)
        paths = prepare_data(args.data_dir, args.work)
        vocab = build_peer_vocab(args.peer_venv, paths, args.work, args.threads)
        result["peer"] = {"venv": str(args.peer_venv), "versions": versions, "vocab_build": vocab,
                          "model_options": PEER_CONFIG, "runs": []}
    if "ours" in sides:
        result["ours"] = {"config": {**OURS_CONFIG, "clip_norm": 5.0, "clip": "FusedClippedAdam, per parameter"},
                          "attention": None, "runs": []}
    for block in range(args.blocks):
        order = sides if block % 2 == 0 else sides[::-1]
        for side in order:
            print(f"block {block + 1}/{args.blocks}: {side} ...", file=sys.stderr, flush=True)
            if side == "peer":
                run = run_peer(args.peer_venv, paths, args.work, block, args.warmup, args.steps, args.threads)
            else:
                run = run_ours(args, block)
                result["ours"]["attention"] = run["info"]["attention"]
                result["ours"]["attention_type_passed"] = run["info"]["attention_type_passed"]
                if not run["info"]["attention_type_passed"]:
                    result["ours"]["note"] = ("TranslationConfig has no 'attention_type' key: the network's default "
                                              "MLP attention was used")
            result[side]["runs"].append(run)
            result["order"].append(f"{side}{block}")
            print(f"  {side}: {run['tgt_tokens'] / run['wall_s']:.0f} target tokens/s, "
                  f"{run['wall_s'] / run['steps']:.3f} s/step, {1000 * run['cpu_s'] / run['tgt_tokens']:.3f} "
                  f"CPU-s/1k tokens, peak RSS {run['memory']['peak_rss_sum_mb']:.0f} MB", file=sys.stderr, flush=True)
    for side in sides:
        result[side]["summary"] = summarise(result[side]["runs"])
    if len(sides) == 2:
        o, q = result["ours"]["summary"], result["peer"]["summary"]
        result["ratios_ours_over_peer"] = {k: o[k] / q[k] for k in ("tokens_per_s", "cpu_s_per_1k_tokens",
                                                                    "cpu_s_per_step", "s_per_step",
                                                                    "peak_rss_sum_mb") if q[k]}
    return write_result(result, table(result), args.json)


if __name__ == "__main__":
    main(parse_args())
