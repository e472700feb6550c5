"""Link rules on saved alignments, no training: the two directions' posteriors combined, then linked by one
threshold or grown between two (grow-diag on probabilities), every choice tuned on the other half of the gold.

    python benchmarks/studies/align_rescore.py --probs ~/runs/hansards/hmm-null-marginal.probs.pt --corpus enfr \
        --data-dir ../shared/data

A measurement, not a test.  ``--probs`` is the file ``pyro-attention align --both-directions`` writes
(``OUT/<network>-<pair>.probs.pt``: both directions' alignment distributions of the gold pairs); the gold set is
named as ``align`` names it (``--corpus``, or ``--gold-text`` / ``--gold-links`` ...: the same options).  For each
alignment source (``--sources``) and each of :data:`~pyro_attention.aer.POSTERIOR_COMBINATIONS` the cell-wise
combination ``P`` of the forward and the reverse posterior is linked three ways:

* ``threshold``: every cell with ``P >= τ`` (what ``align`` reports as that combination);
* ``grow``: Koehn et al.'s grow-diag with ``P >= τ_hi`` as the intersection and ``P >= τ_lo`` as the union
  (:func:`~pyro_attention.aer.grow_diag` of the two link sets): a cell between the thresholds is kept only next to a
  kept one, where its source or target word is still unaligned;
* ``grow-final-and``: then every remaining ``P >= τ_lo`` cell whose source *and* target word are unaligned.

Every threshold (or pair of them) is chosen on the other half of the gold pairs (pairs 0, 2, 4, ... scored with
the choice best on pairs 1, 3, 5, ..., and the reverse), as ``align``'s threshold links are: no pair is scored
with a choice tuned on itself.  Prints AER / precision / recall in % and the choices.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

RULES = ("threshold", "grow", "grow-final-and")


def rescore(forward: list[torch.Tensor], backward: list[torch.Tensor], gold: list, grid: Sequence[float],
            method: str, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """The three link rules of the module docstring on one source's combined posteriors; one dict per rule."""
    from pyro_attention.aer import alignment_error_rate, combine_posteriors, grow_diag, links_from_probs
    from pyro_attention.tasks.align.scoring import held_out_choice

    matrices = [combine_posteriors(f, b, method) for f, b in zip(forward, backward, strict=True)]
    at = {th: [links_from_probs(m, threshold=th) for m in matrices] for th in grid}
    pairs = list(itertools.combinations(sorted(grid, reverse=True), 2))  # (hi, lo), hi > lo
    candidates = {
        "threshold": at,
        "grow": {(hi, lo): [grow_diag(a, b) for a, b in zip(at[hi], at[lo], strict=True)] for hi, lo in pairs},
        "grow-final-and": {(hi, lo): [grow_diag(a, b, "and") for a, b in zip(at[hi], at[lo], strict=True)]
                           for hi, lo in pairs},
    }
    rows = []
    for rule in RULES:
        links, chosen = held_out_choice(candidates[rule], gold)
        result = alignment_error_rate(links, gold)
        rows.append({"combination": method, "rule": rule, "aer": 100 * result.aer,
                     "precision": 100 * result.precision, "recall": 100 * result.recall,
                     "links": result.num_predicted, "chosen": chosen})
        log(f"{method} {rule}: AER {100 * result.aer:.2f} (choices {chosen[0]} / {chosen[1]})")
    return rows


def make_parser() -> argparse.ArgumentParser:
    from pyro_attention.cli.align import add_gold_set_options

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probs", required=True, help="OUT/<network>-<pair>.probs.pt of `align --both-directions`")
    parser.add_argument("--sources", nargs="+", default=["smoothed", "posterior"],
                        help="alignment sources in the file to rescore (default: smoothed posterior)")
    parser.add_argument("--grid", type=float, nargs="+", default=None,
                        help="thresholds tried (default: align's, 0.05 ... 0.95; posterior-product also 0.01-0.03)")
    parser.set_defaults(gold_options=add_gold_set_options(parser, extra_text=False))  # as align reads a gold set
    return parser


def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    from pyro_attention.aer import POSTERIOR_COMBINATIONS
    from pyro_attention.tasks.align import AlignConfig
    from pyro_attention.tasks.align.config import THRESHOLD_GRID
    from pyro_attention.tasks.align.corpus import load_gold_corpus

    torch.set_num_threads(1)
    saved = torch.load(Path(args.probs).expanduser(), map_location="cpu", weights_only=True)
    if not isinstance(saved, dict) or saved.get("backward") is None:
        raise SystemExit(f"{args.probs}: needs both directions (a run of `pyro-attention align --both-directions`)")
    config = AlignConfig(extra_size=0, **{k: getattr(args, k) for k in args.gold_options})
    corpus = load_gold_corpus(config, lambda _: None)
    gold = list(corpus.gold)
    rows = []
    for source in args.sources:
        if source not in saved["forward"]:
            raise SystemExit(f"--sources: {source!r} is not in {args.probs}; it has {sorted(saved['forward'])}")
        forward = [p[:, int(saved["forward_null"]):] for p in saved["forward"][source]]
        backward = [p[:, int(saved["backward_null"]):] for p in saved["backward"][source]]
        if len(forward) != len(gold):
            raise SystemExit(f"{args.probs}: {len(forward)} pairs, the gold set {len(gold)}: another gold set?")
        for method in POSTERIOR_COMBINATIONS:
            grid = args.grid or ((0.01, 0.02, 0.03, *THRESHOLD_GRID) if method == "posterior-product"
                                 else THRESHOLD_GRID)
            rows += [{"source": source, **r} for r in rescore(forward, backward, gold, grid, method, print)]
    print("| source | combination | rule | AER | precision | recall | links | choices (even / odd pairs) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['source']} | {r['combination']} | {r['rule']} | {r['aer']:.2f} | {r['precision']:.1f} | "
              f"{r['recall']:.1f} | {r['links']} | {r['chosen'][0]} / {r['chosen'][1]} |")
    return rows


if __name__ == "__main__":
    sys.exit(main(make_parser().parse_args()) and 0)
