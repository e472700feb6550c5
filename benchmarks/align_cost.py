"""What aligning a text costs: ``pyro-attention align --src --tgt --out`` (its default recipe) against eflomal on the
same text, wall time and peak memory of each whole process, interleaved.

    python benchmarks/align_cost.py --src TEXT.de --tgt TEXT.en [--gold-links GOLD --links-format pharaoh0] \
        [--repeats 3] [--threads 1]
    python benchmarks/align_cost.py --corpus enfr|csen --data-dir DATA [--extra-size 29000] [--source-prefix 4]
    python benchmarks/align_cost.py --zipf-pairs 1000000 --zipf-vocab 100000 --min-cooccurrence 2
    python benchmarks/align_cost.py --src TEXT.de --tgt TEXT.en --align-flags="--gibbs-sweeps 30"   # other flags

A measurement, not a test.  Each repeat runs both aligners one after the other (the order alternating), each as
its own process, and reads its peak resident memory from the kernel (``os.wait4``); the medians are printed and,
with ``--json``, written.  With ``--gold-links`` (links of the first lines of the text) both aligners' links are
scored: ours as written, eflomal's in both directions and every symmetrisation (its best is its row).
``--corpus`` makes the text of a gold set as ``pyro-attention align --corpus`` reads it -- its gold sentence pairs
once, then ``--extra-size`` Multi30k pairs, words cut by ``--source-prefix`` / ``--target-prefix`` -- and scores the
gold pairs' links.  ``--zipf-pairs`` generates the text instead (:func:`zipf_text`): word frequencies that follow
Zipf's law, as real text's do, so the number of word pairs that co-occur grows as it does on real text.  eflomal
comes from ``pip install eflomal`` (``--eflomal``: its path).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is not a package
from align_eflomal import link_sets, read_links  # noqa: E402


def zipf_text(folder: Path, pairs: int, vocab: int, length: int = 20, seed: int = 0) -> tuple[Path, Path]:
    """A generated parallel text: source words ``Zipf(1.1)`` over ``vocab`` words, sentences of ``length // 2`` to
    ``3 * length // 2`` words; each target word the source word's fixed translation (a permutation of the
    vocabulary), 20 % of them replaced by words of the same distribution, then neighbours swapped at random."""
    rng = np.random.default_rng(seed)
    translation = rng.permutation(vocab)
    src_path, tgt_path = folder / "zipf.src", folder / "zipf.tgt"
    with open(src_path, "w", encoding="utf-8") as src, open(tgt_path, "w", encoding="utf-8") as tgt:
        for start in range(0, pairs, 100_000):
            n = min(100_000, pairs - start)
            lengths = rng.integers(length // 2, 3 * length // 2 + 1, n)
            words = (rng.zipf(1.1, lengths.sum()) - 1) % vocab
            noise = rng.random(len(words)) < 0.2
            target = np.where(noise, (rng.zipf(1.1, len(words)) - 1) % vocab, translation[words])
            swap = np.flatnonzero(rng.random(len(words) - 1) < 0.1)
            target[swap], target[swap + 1] = target[swap + 1], target[swap]  # (crosses a sentence end rarely)
            for s, t in zip(np.split(words, lengths.cumsum()[:-1]), np.split(target, lengths.cumsum()[:-1]),
                            strict=True):
                src.write(" ".join(f"s{w}" for w in s) + "\n")
                tgt.write(" ".join(f"t{w}" for w in t) + "\n")
    return src_path, tgt_path


def timed(command: list[str]) -> dict[str, float]:
    """Run ``command``; its wall seconds, CPU seconds (user + system, every thread) and peak resident memory (GiB)
    from the kernel's account of that process (eflomal runs its samplers and directions in parallel: its CPU time
    can exceed its wall time)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{command[0]} failed:\n{stderr.decode(errors='replace')[-2000:]}")
    return {"seconds": time.perf_counter() - start, "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "peak_gib": usage.ru_maxrss / 2**20}


def score(links: list[set[tuple[int, int]]], gold: Any) -> dict[str, float]:
    """AER, precision and recall (%) of ``links`` against ``gold``."""
    from pyro_attention.aer import alignment_error_rate

    result = alignment_error_rate(links, gold)
    return {"aer": 100 * result.aer, "precision": 100 * result.precision, "recall": 100 * result.recall}


def score_eflomal(forward: Path, reverse: Path, gold: Any) -> dict[str, Any]:
    """eflomal's links scored in both directions and every symmetrisation; its best AER first."""
    sets = link_sets(read_links(forward, len(gold)), read_links(reverse, len(gold)))
    scored = {name: score(links, gold) for name, links in sets.items()}
    best = min(scored, key=lambda name: scored[name]["aer"])
    return {**scored[best], "best": best, "by_symmetrisation": {k: round(v["aer"], 2) for k, v in scored.items()}}


def gold_text(folder: Path, args: argparse.Namespace) -> tuple[Path, Path, Any]:
    """A gold set's text (its pairs once, then the extra text) written to two files, and its gold links."""
    from pyro_attention.tasks.align import AlignConfig
    from pyro_attention.tasks.align.corpus import load_gold_corpus
    from pyro_attention.tasks.align.networks import training_text

    config = AlignConfig(corpus=args.corpus, data_dir=args.data_dir, extra_size=args.extra_size,
                         source_prefix=args.source_prefix, target_prefix=args.target_prefix,
                         network="hmm", models=["marginal"])
    corpus = load_gold_corpus(config, print)
    paths = []
    for name, side in zip(("gold.src", "gold.tgt"), training_text(corpus, False), strict=True):
        paths.append(folder / name)
        paths[-1].write_text("".join(" ".join(words) + "\n" for words in side), encoding="utf-8")
    return paths[0], paths[1], list(corpus.gold)


def user_gold(args: argparse.Namespace, src: Path, tgt: Path) -> Any:
    """The ``--gold-links`` of the text's first lines, links outside a sentence dropped."""
    from pyro_attention.data.alignments import read_pharaoh

    count = sum(1 for _ in open(args.gold_links, encoding="utf-8"))
    lengths = [[len(line.split()) for line in path.read_text(encoding="utf-8").splitlines()[:count]]
               for path in (src, tgt)]
    return list(read_pharaoh(args.gold_links, args.links_format == "pharaoh1", *lengths))


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=("enfr", "csen"), help="a gold set's text instead (scored on its gold)")
    parser.add_argument("--data-dir", help="the data folder (default: $PYRO_ATTENTION_DATA)")
    parser.add_argument("--extra-size", type=int, default=29000, help="Multi30k pairs after the gold set's")
    parser.add_argument("--source-prefix", type=int, default=0, help="cut source words to this many characters")
    parser.add_argument("--target-prefix", type=int, default=0, help="cut target words to this many characters")
    parser.add_argument("--src", help="source text, one sentence per line")
    parser.add_argument("--tgt", help="target text, line-aligned")
    parser.add_argument("--zipf-pairs", type=int, default=0, help="generate a text of this many pairs instead")
    parser.add_argument("--zipf-vocab", type=int, default=100_000, help="its vocabulary size per side")
    parser.add_argument("--gold-links", help="gold links of the text's first lines (scores both aligners)")
    parser.add_argument("--links-format", default="pharaoh0", choices=("pharaoh0", "pharaoh1"))
    parser.add_argument("--repeats", type=int, default=1, help="runs of each aligner, interleaved (medians)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of pyro-attention align")
    parser.add_argument("--min-cooccurrence", type=int, default=1, help="pyro-attention align's table pruning")
    parser.add_argument("--align-flags", default="", help="more flags for pyro-attention align, e.g. "
                        "'--gibbs-sweeps 30'")
    parser.add_argument("--eflomal", default="eflomal-align", help="the eflomal-align program")
    parser.add_argument("--no-eflomal", action="store_true", help="time pyro-attention align alone")
    parser.add_argument("--json", help="write the measurements here")
    return parser


def main(args: argparse.Namespace) -> dict[str, Any]:
    eflomal = None if args.no_eflomal else shutil.which(args.eflomal)
    if not args.no_eflomal and eflomal is None:
        raise SystemExit(f"--eflomal: {args.eflomal!r} is not a program on the PATH (pip install eflomal)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gold = None
        if args.zipf_pairs:
            src, tgt = zipf_text(folder, args.zipf_pairs, args.zipf_vocab)
        elif args.corpus:
            src, tgt, gold = gold_text(folder, args)
        elif args.src and args.tgt:
            src, tgt = Path(args.src), Path(args.tgt)
        else:
            raise SystemExit("give --src and --tgt, or --zipf-pairs")
        commands = {"pyro-attention": [sys.executable, "-m", "pyro_attention.cli", "align", "--src", str(src),
                                       "--tgt", str(tgt), "--out", str(folder / "ours.links"),
                                       "--threads", str(args.threads), "--min-cooccurrence",
                                       str(args.min_cooccurrence), *shlex.split(args.align_flags)]}
        if eflomal is not None:
            commands["eflomal"] = [eflomal, "-s", str(src), "-t", str(tgt), "-f", str(folder / "fwd"), "-r",
                                   str(folder / "rev"), "--overwrite"]
        if args.gold_links:
            gold = user_gold(args, src, tgt)
        scorers = {"pyro-attention": lambda: score(read_links(folder / "ours.links", len(gold)), gold),
                   "eflomal": lambda: score_eflomal(folder / "fwd", folder / "rev", gold)}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in commands}
        for repeat in range(args.repeats):
            for name in (list(commands) if repeat % 2 == 0 else list(commands)[::-1]):
                runs[name].append(timed(commands[name]))
                if gold is not None:
                    runs[name][-1].update(scorers[name]())
                print(f"{name} run {repeat + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in runs[name][-1].items()
                                                             if isinstance(v, float)), flush=True)
        result: dict[str, Any] = {"pairs": sum(1 for _ in open(src, encoding="utf-8")), "threads": args.threads,
                                  "repeats": args.repeats, "cpu": os.cpu_count()}
        for name, measured in runs.items():
            result[name] = {key: statistics.median(m[key] for m in measured) for key in measured[0]
                            if isinstance(measured[0][key], float)}
            result[name]["runs"] = measured
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    sys.exit(main(make_parser().parse_args()) and 0)
