"""Which flags of ``pyro-attention align --src --tgt --out`` align best, chosen on held-out gold: each variant of
the recipe run on the text of each gold set, its link file scored.

    python benchmarks/studies/align_recipe.py --data-dir DATA --texts deen \
        --variant "recipe=" --variant "1 epoch=--epochs 1" --variant "Dirichlet(0.001)=--table-prior 0.001"
    python benchmarks/studies/align_recipe.py --data-dir DATA --texts enfr enfr-cut csen csen-cut \
        --variant "recipe=" --json recipe.json

A measurement, not a test.  A text is a gold set's sentence pairs once, then ``--extra-size`` Multi30k training
pairs of the same languages (as ``benchmarks/align_cost.py --corpus`` writes it): ``deen`` the 100 German-English
Europarl pairs of Bicici (2011), sure links only -- the held-out set the recipe's flags are chosen on; ``enfr`` the
Hansards (NAACL 2003) and ``csen`` the Czech-English pairs of Marecek (2016), scored after the choice; ``-cut``
their words cut to 4 characters (both sides for Hansards, the Czech side for cs-en, as in docs/results.md).  Each
variant is one ``align --src --tgt --out`` process with the variant's flags after the recipe's (the flags given win),
one torch thread unless ``--threads``; its links of the gold pairs are scored (AER, precision, recall in %), and
each later variant's AER minus the first's gets a standard error from a paired bootstrap over the gold pairs
(``--bootstrap`` draws): whether the gold set resolves the difference.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not a package
from align_cost import gold_text, score  # noqa: E402
from align_eflomal import read_links  # noqa: E402

#: the texts: gold set (``--corpus`` of align, or ``deen``) and the cut (source, target characters; 0: whole words)
TEXTS = {"deen": ("deen", 0, 0), "enfr": ("enfr", 0, 0), "enfr-cut": ("enfr", 4, 4), "csen": ("csen", 0, 0),
         "csen-cut": ("csen", 4, 0)}


@dataclass
class Text:
    """A parallel text in two files whose first ``len(gold)`` lines have gold links."""

    name: str
    src: Path
    tgt: Path
    gold: list[Any]


def deen_text(folder: Path, data_dir: Path, extra_size: int) -> Text:
    """The 100 German-English Europarl gold pairs, then ``extra_size`` Multi30k training pairs, lower-cased."""
    from pyro_attention.data.alignments import read_pharaoh

    gold_dir, multi30k = data_dir / "gold-alignments" / "de-en-europarl-bicici", data_dir / "multi30k" / "tok"
    sides = []
    for gold_file, extra_file in (("test.de", "train.lc.norm.tok.de.gz"), ("test.en", "train.lc.norm.tok.en.gz")):
        lines = (gold_dir / gold_file).read_text(encoding="utf-8").lstrip("\ufeff").splitlines()
        with gzip.open(multi30k / extra_file, "rt", encoding="utf-8") as extra:
            lines += [line for _, line in zip(range(extra_size), extra, strict=False)]
        sides.append([" ".join(line.split()).lower() for line in lines])
    src, tgt = folder / "deen.src", folder / "deen.tgt"
    for path, lines in ((src, sides[0]), (tgt, sides[1])):
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    lengths = [[len(line.split()) for line in side[:100]] for side in sides]
    return Text("deen", src, tgt, list(read_pharaoh(gold_dir / "de-en.wa", False, *lengths)))


def make_text(name: str, folder: Path, data_dir: Path, extra_size: int) -> Text:
    """The text ``name`` (:data:`TEXTS`) written to ``folder``."""
    corpus, source_prefix, target_prefix = TEXTS[name]
    if corpus == "deen":
        return deen_text(folder, data_dir, extra_size)
    sub = folder / name
    sub.mkdir()
    args = argparse.Namespace(corpus=corpus, data_dir=str(data_dir), extra_size=extra_size,
                              source_prefix=source_prefix, target_prefix=target_prefix)
    src, tgt, gold = gold_text(sub, args)
    return Text(name, src, tgt, gold)


def align_variant(text: Text, flags: Sequence[str], folder: Path, threads: int = 1) -> list[set[tuple[int, int]]]:
    """One ``align --src --tgt --out`` process with ``flags``: the links of the gold pairs."""
    links = folder / "links.txt"
    command = [sys.executable, "-m", "pyro_attention.cli", "align", "--src", str(text.src), "--tgt", str(text.tgt),
               "--out", str(links), "--threads", str(threads), *flags]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed:\n{done.stderr[-2000:]}")
    return read_links(links, len(text.gold))


def paired_bootstrap_se(first: Sequence[Any], other: Sequence[Any], gold: Sequence[Any], draws: int = 1000,
                        seed: int = 0) -> float:
    """The standard error, in AER points, of ``other``'s AER minus ``first``'s on ``gold``: the sentence pairs
    resampled with replacement ``draws`` times, both link sets alike (a paired bootstrap)."""
    from pyro_attention.aer import alignment_error_rate

    rng = random.Random(seed)
    diffs = []
    for _ in range(draws):
        pick = [rng.randrange(len(gold)) for _ in gold]
        sample = [gold[i] for i in pick]
        diffs.append(100 * (alignment_error_rate([other[i] for i in pick], sample).aer
                            - alignment_error_rate([first[i] for i in pick], sample).aer))
    return statistics.stdev(diffs)


def parse_variant(spec: str) -> tuple[str, list[str]]:
    """``"LABEL=FLAGS"`` as ``(label, flags)``."""
    label, sep, flags = spec.partition("=")
    if not sep or not label:
        raise argparse.ArgumentTypeError(f"--variant: expected LABEL=FLAGS (FLAGS may be empty), got {spec!r}")
    return label, shlex.split(flags)


def bootstrap_draws(value: str) -> int:
    """``--bootstrap``: 0 (none) or at least 2 draws (a standard error needs two)."""
    draws = int(value)
    if draws != 0 and draws < 2:
        raise argparse.ArgumentTypeError(f"--bootstrap: 0 (none) or at least 2 draws, got {value}")
    return draws


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="the data folder")
    parser.add_argument("--texts", nargs="+", choices=tuple(TEXTS), default=list(TEXTS), help="gold sets' texts")
    parser.add_argument("--variant", type=parse_variant, action="append", dest="variants",
                        help='LABEL=FLAGS, align flags after the recipe\'s (default: "recipe=", the recipe alone)')
    parser.add_argument("--extra-size", type=int, default=29000, help="Multi30k pairs after the gold pairs")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each align process")
    parser.add_argument("--bootstrap", type=bootstrap_draws, default=1000,
                        help="draws of the paired bootstrap of each variant's AER minus the first's (0: none)")
    parser.add_argument("--json", help="write the rows here")
    return parser


def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    variants = args.variants or [("recipe", [])]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in args.texts:
            text = make_text(name, folder, args.data_dir, args.extra_size)
            first = None
            for label, flags in variants:
                links = align_variant(text, flags, folder, args.threads)
                row = {"text": name, "variant": label, "flags": shlex.join(flags), **score(links, text.gold)}
                against = ""
                if first is None:
                    first = (row["aer"], links)
                elif args.bootstrap:
                    row["se_against_first"] = paired_bootstrap_se(first[1], links, text.gold, args.bootstrap)
                    against = f"  {row['aer'] - first[0]:+.2f} +- {row['se_against_first']:.2f} against the first"
                rows.append(row)
                print(f"{name:9s} {label:24s} AER {row['aer']:6.2f}  P {row['precision']:5.1f}  "
                      f"R {row['recall']:5.1f}{against}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return rows


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return make_parser().parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
