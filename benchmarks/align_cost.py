"""What aligning a text costs: ``pyro-attention align --src --tgt --out`` (its default recipe) against eflomal on the
same text, wall time and peak memory of each whole process, interleaved.

    python benchmarks/align_cost.py --src TEXT.de --tgt TEXT.en [--gold-links GOLD --links-format pharaoh0] \
        [--repeats 3] [--threads 1]
    python benchmarks/align_cost.py --zipf-pairs 1000000 --zipf-vocab 100000 --no-eflomal

A measurement, not a test.  Each repeat runs both aligners one after the other (the order alternating), each as
its own process, and reads its peak resident memory from the kernel (``os.wait4``); the medians are printed and,
with ``--json``, written.  With ``--gold-links`` (links of the first lines of the text) both aligners' links are
scored: ours as written, eflomal's symmetrised with grow-diag-final-and.  ``--zipf-pairs`` generates the text
instead (:func:`zipf_text`): word frequencies that follow Zipf's law, as real text's do, so the number of word pairs
that co-occur grows as it does on real text.  eflomal comes from ``pip install eflomal`` (``--eflomal``: its path).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


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
    """Run ``command``; its wall seconds and peak resident memory (GiB) from the kernel's account of that process."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{command[0]} failed:\n{stderr.decode(errors='replace')[-2000:]}")
    return {"seconds": time.perf_counter() - start, "peak_gib": usage.ru_maxrss / 2**20}


def score(links_path: Path, gold: Any, reverse_path: Path | None = None) -> dict[str, float]:
    """AER (%) of the first ``len(gold)`` lines of a Pharaoh file (with ``reverse_path``: eflomal's two directions
    symmetrised by grow-diag-final-and)."""
    from pyro_attention.aer import alignment_error_rate, symmetrize
    from pyro_attention.data.alignments import invert

    def read(path: Path) -> list[set[tuple[int, int]]]:
        lines = path.read_text(encoding="utf-8").splitlines()[: len(gold)]
        return [{(int(i), int(j)) for i, j in (x.split("-") for x in line.split())} for line in lines]

    links = read(links_path)
    if reverse_path is not None:
        links = symmetrize(links, [invert(r) for r in read(reverse_path)], "grow-diag-final-and")
    result = alignment_error_rate(links, gold)
    return {"aer": 100 * result.aer, "precision": 100 * result.precision, "recall": 100 * result.recall}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", help="source text, one sentence per line")
    parser.add_argument("--tgt", help="target text, line-aligned")
    parser.add_argument("--zipf-pairs", type=int, default=0, help="generate a text of this many pairs instead")
    parser.add_argument("--zipf-vocab", type=int, default=100_000, help="its vocabulary size per side")
    parser.add_argument("--gold-links", help="gold links of the text's first lines (scores both aligners)")
    parser.add_argument("--links-format", default="pharaoh0", choices=("pharaoh0", "pharaoh1"))
    parser.add_argument("--repeats", type=int, default=1, help="runs of each aligner, interleaved (medians)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of pyro-attention align")
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
        if args.zipf_pairs:
            src, tgt = zipf_text(folder, args.zipf_pairs, args.zipf_vocab)
        elif args.src and args.tgt:
            src, tgt = Path(args.src), Path(args.tgt)
        else:
            raise SystemExit("give --src and --tgt, or --zipf-pairs")
        commands = {"pyro-attention": [sys.executable, "-m", "pyro_attention.cli", "align", "--src", str(src),
                                       "--tgt", str(tgt), "--out", str(folder / "ours.links"),
                                       "--threads", str(args.threads)]}
        if eflomal is not None:
            commands["eflomal"] = [eflomal, "-s", str(src), "-t", str(tgt), "-f", str(folder / "fwd"), "-r",
                                   str(folder / "rev"), "--overwrite"]
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
        for repeat in range(args.repeats):
            for name in (list(commands) if repeat % 2 == 0 else list(commands)[::-1]):
                runs[name].append(timed(commands[name]))
                print(f"{name} run {repeat + 1}: {runs[name][-1]['seconds']:.1f} s, "
                      f"{runs[name][-1]['peak_gib']:.2f} GiB", flush=True)
        pairs = sum(1 for _ in open(src, encoding="utf-8"))
        result: dict[str, Any] = {"pairs": pairs, "threads": args.threads, "repeats": args.repeats,
                                  "cpu": os.cpu_count()}
        for name, measured in runs.items():
            result[name] = {key: statistics.median(m[key] for m in measured) for key in ("seconds", "peak_gib")}
        if args.gold_links:
            from pyro_attention.data.alignments import read_pharaoh

            count = sum(1 for _ in open(args.gold_links, encoding="utf-8"))
            lengths = [[len(line.split()) for line in path.read_text(encoding="utf-8").splitlines()[:count]]
                       for path in (src, tgt)]
            gold = read_pharaoh(args.gold_links, args.links_format == "pharaoh1", *lengths)
            result["pyro-attention"].update(score(folder / "ours.links", list(gold)))
            if eflomal is not None:
                result["eflomal"].update(score(folder / "fwd", list(gold), folder / "rev"))
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    sys.exit(main(make_parser().parse_args()) and 0)
