"""eflomal, the peer aligner, on exactly the text ``pyro-attention align`` trains on, scored by the package's AER.

    python benchmarks/align_eflomal.py --corpus csen --data-dir ../shared/data --extra-size 29000 \
        [--gold-repeat 5] [--source-prefix 4] [--eflomal /path/to/eflomal-align]

A measurement, not a test, and not a dependency: it needs ``eflomal-align`` (``pip install eflomal``, Östling &
Tiedemann 2016: IBM Model 1, HMM and fertility by collapsed Gibbs sampling) on the ``PATH`` or given by
``--eflomal``.  The training text is :func:`pyro_attention.tasks.align.corpus.load_gold_corpus`'s with
``align``'s options -- the gold sentence pairs (``--gold-repeat`` times, unlabelled) then ``--extra-size``
Multi30k pairs, lower-cased, words cut by ``--source-prefix`` / ``--target-prefix`` -- written to two files;
eflomal aligns all of it in both directions (its defaults otherwise), and the links of the first copy of the gold
pairs are scored forward, reverse and symmetrised (:data:`pyro_attention.aer.SYMMETRIZATIONS`, the package's own
grow-diag).  Prints AER / precision / recall in % and eflomal's seconds.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def read_links(path: Path, count: int) -> list[set[tuple[int, int]]]:
    """The first ``count`` lines of an eflomal (0-indexed Pharaoh, ``source-target``) links file."""
    lines = path.read_text(encoding="utf-8").splitlines()[:count]
    if len(lines) != count:
        raise SystemExit(f"{path}: {len(lines)} lines, expected at least {count}")
    return [{(int(i), int(j)) for i, j in (link.split("-") for link in line.split())} for line in lines]


def link_sets(forward: list[set[tuple[int, int]]],
              reverse: list[set[tuple[int, int]]]) -> dict[str, list[set[tuple[int, int]]]]:
    """eflomal's two directions (both ``source-target``) and every symmetrisation of them, by name."""
    from pyro_attention.aer import SYMMETRIZATIONS, symmetrize
    from pyro_attention.data.alignments import invert

    sets = {"forward": forward, "reverse": reverse}
    sets.update({m: symmetrize(forward, [invert(r) for r in reverse], m) for m in SYMMETRIZATIONS})
    return sets


def make_parser() -> argparse.ArgumentParser:
    from pyro_attention.cli.align import add_gold_set_options
    from pyro_attention.cli.common import add_config_options
    from pyro_attention.tasks.align import AlignConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.set_defaults(gold_options=add_gold_set_options(parser))  # a gold set and its extra text, as align
    # align's own flags for the training text (help, bounds and defaults from AlignConfig; all of Multi30k here)
    add_config_options(parser, AlignConfig, ("extra_size", "gold_repeat", "source_prefix", "target_prefix"),
                       defaults={"extra_size": 29000})
    parser.add_argument("--eflomal", default="eflomal-align", help="the eflomal-align program")
    return parser


def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    from pyro_attention.aer import alignment_error_rate
    from pyro_attention.tasks.align import AlignConfig
    from pyro_attention.tasks.align.corpus import load_gold_corpus
    from pyro_attention.tasks.align.networks import training_text

    program = shutil.which(args.eflomal)
    if program is None:
        raise SystemExit(f"--eflomal: {args.eflomal!r} is not a program on the PATH (pip install eflomal)")
    own = args.gold_links is not None  # a gold set of the user's own trains on its --extra-src, not on --extra-size
    options = (*args.gold_options, *(() if own else ("extra_size",)), "gold_repeat", "source_prefix", "target_prefix")
    config = AlignConfig(models=["marginal"], network="hmm", **{k: getattr(args, k) for k in options})
    corpus = load_gold_corpus(config, print)
    gold = list(corpus.gold)
    src, tgt = training_text(corpus, False, config.gold_repeat)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, side in (("src", src), ("tgt", tgt)):
            (folder / name).write_text("".join(" ".join(s) + "\n" for s in side), encoding="utf-8")
        start = time.perf_counter()
        command = [program, "-s", str(folder / "src"), "-t", str(folder / "tgt"), "-f", str(folder / "fwd"), "-r",
                   str(folder / "rev"), "--overwrite"]
        if subprocess.run(command).returncode != 0:
            raise SystemExit(f"{program} failed (exit status above) on {len(src)} training pairs")
        seconds = time.perf_counter() - start
        forward = read_links(folder / "fwd", len(gold))
        reverse = read_links(folder / "rev", len(gold))  # also source-target, as atools reads it
    print(f"{corpus.description}; {len(src)} training pairs; eflomal {seconds:.0f} s")
    sets = link_sets(forward, reverse)
    rows = []
    print("| symmetrisation | AER | precision | recall | links |")
    print("|---|---|---|---|---|")
    for name, links in sets.items():
        result = alignment_error_rate(links, gold)
        rows.append({"symmetrisation": name, "aer": 100 * result.aer, "precision": 100 * result.precision,
                     "recall": 100 * result.recall, "links": result.num_predicted, "seconds": seconds})
        print(f"| {name} | {100 * result.aer:.2f} | {100 * result.precision:.1f} | {100 * result.recall:.1f} | "
              f"{result.num_predicted} |")
    return rows


if __name__ == "__main__":
    sys.exit(main(make_parser().parse_args()) and 0)
