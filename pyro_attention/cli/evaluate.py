"""``pyro-attention evaluate``: perplexity, K-max perplexity, prior entropy and BLEU of a checkpoint; and the
decoding flags it shares with ``translate``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

import torch

from pyro_attention.cli.common import CHECKPOINT_HELP, add_command, exit_with_error, float_in, int_at_least

if TYPE_CHECKING:
    from pyro_attention.tasks.translation import BeamSearch, Evaluation


def _print_scores(res: Evaluation) -> None:
    print(
        f"evaluate {res.checkpoint} ({res.model}{', ' + res.estimator if res.estimator else ''}) on "
        f"{res.data}: {res.sentences} sentences, {res.tokens} target tokens (with </s>)"
    )
    if not res.error.estimated:
        print(f"perplexity           {res.ppl:.4f}  ({res.error.text()}: {res.ppl_method}; NLL/token {res.nll:.4f})")
    else:
        from pyro_attention.inference.arviz_generation import MIN_PSIS_DRAWS

        hint = f" -- use --num-samples {MIN_PSIS_DRAWS} or more" if res.error.draws < MIN_PSIS_DRAWS else ""
        print(f"perplexity bound     {res.ppl:.4f} ± {res.ppl_mc_se:.4f}  (Monte Carlo s.e.; "
              f"{res.error.diagnostics_text()}{hint}; {res.ppl_method}; importance-weighted bound, not exact)")
    if res.kmax_ppl is not None:
        print(f"K-max perplexity     {res.kmax_ppl:.4f}  ({res.kmax_method})")
    else:
        print("K-max perplexity     -  (needs a categorical alignment)")
    for name, value in (("prior entropy", res.prior_entropy), ("posterior entropy", res.posterior_entropy),
                        ("guide entropy", res.guide_entropy), ("KL(guide || post.)", res.guide_kl)):
        if value is not None:  # the distributions the pair has
            print(f"{name:<20} {value:.4f}  nats per target token")
    if res.bleu is not None:
        search = res.search
        print(f"BLEU                 {res.bleu:.2f}  (beam {search.beam}, rule {search.rule}, length penalty "
              f"{search.length_penalty:g})")
        print(f"sacreBLEU signature  {res.bleu_signature}")
        print(f"sacreBLEU            {res.bleu_text}")
    if res.degenerate:
        print(f"pyro-attention evaluate: warning: {res.degenerate}", file=sys.stderr)


#: the flags passed to :func:`~pyro_attention.tasks.translation.evaluate` as they are, by name
_PASSED = ("src_file", "tgt_file", "ref_file", "data_dir", "size", "kmax", "batch_size", "num_samples", "device")


def _evaluate(args: argparse.Namespace) -> int:
    import json

    from pyro_attention.files import write_text
    from pyro_attention.tasks.translation import evaluate

    inputs = {os.path.realpath(f) for f in (args.src_file, args.tgt_file, args.ref_file) if f}
    for flag, out in (("--hypotheses", args.hypotheses), ("--json", args.json)):
        if out and os.path.realpath(out) in inputs:
            args.parser.error(f"argument {flag}: {out} is one of the files read (--src-file / --tgt-file / --ref-file);"
                              " writing there would overwrite it")
    if args.no_bleu:
        given = [flag for flag, value in (("--hypotheses", args.hypotheses), ("--lowercase-bleu", args.lowercase_bleu))
                 if value is not None]
        if given:
            args.parser.error(f"argument {given[0]}: it goes with decoding, which --no-bleu skips (drop one of them)")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        res = evaluate(
            args.checkpoint,
            args.split,
            **{k: getattr(args, k) for k in _PASSED},
            search=beam_search(args, args.kmax or 5),
            bleu=not args.no_bleu,
            lowercase=args.lowercase_bleu,
            progress=not args.quiet,
        )
    except (ValueError, OSError) as e:
        exit_with_error(args.parser, e)
    _print_scores(res)
    try:
        if args.hypotheses and res.hypotheses is not None:
            write_text(args.hypotheses, "".join(h + "\n" for h in res.hypotheses))
            print(f"wrote {len(res.hypotheses)} translations to {args.hypotheses}")
        if args.json:
            write_text(args.json, json.dumps(res.to_dict(hypotheses=False), indent=2) + "\n")
    except OSError as e:
        exit_with_error(args.parser, e)
    return 0


def beam_search(args: argparse.Namespace, k: int) -> BeamSearch:
    """The :class:`~pyro_attention.tasks.translation.BeamSearch` of :func:`add_decoding_options`' flags, with ``K``
    of the K-max rule ``k``."""
    from pyro_attention.tasks.translation import BeamSearch

    return BeamSearch(beam=args.beam, rule=args.rule, k=k, length_penalty=args.length_penalty,
                      max_len=args.max_decode_len)


def add_decoding_options(p: argparse.ArgumentParser) -> None:
    from pyro_attention.pair import Rule

    p.add_argument("--beam", type=int_at_least(1), default=5, help="beam size (1: greedy; default 5)")
    p.add_argument(
        "--rule",
        choices=Rule.names(),
        default=None,
        help="prediction rule (default marginal for categorical pairs, soft otherwise)",
    )
    p.add_argument(
        "--length-penalty", type=float_in(0, float("inf")), default=0.0, help="GNMT length penalty alpha (0: none)"
    )
    p.add_argument(
        "--max-decode-len",
        type=int_at_least(1),
        default=None,
        help="longest translation (default 2 x source length + 10)",
    )
    p.add_argument("--threads", type=int_at_least(0), default=1, help="torch threads (1; 0: torch's choice)")
    p.add_argument("--device", default=None, help="cpu (default), cuda, cuda:N or mps: where the model runs")


def add_evaluate(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    """``pyro-attention evaluate``."""
    ev = add_command(sub, "evaluate", _evaluate, "perplexity, K-max perplexity, prior entropy and BLEU of a checkpoint",
                     "Score a checkpoint on a split of its corpus or on given files.")
    ev.add_argument("checkpoint", help=CHECKPOINT_HELP)
    ev.add_argument("--split", choices=("train", "val", "test"), default="test", help="split (default test)")
    ev.add_argument("--src-file", help="score these source sentences instead of a split (with --tgt-file)")
    ev.add_argument("--tgt-file", help="their tokenised targets")
    ev.add_argument("--ref-file", help="raw references for BLEU, line-aligned (default: detokenised targets)")
    ev.add_argument("--data-dir", help="where the corpus lives now (default: as in training)")
    ev.add_argument("--size", type=int_at_least(1), help="first N pairs only (synthetic: generate N)")
    ev.add_argument(
        "--kmax",
        type=int_at_least(0),
        default=5,
        help="K of the K-max perplexity and of --rule kmax (default 5; 0: skip K-max)",
    )
    ev.add_argument("--batch-size", type=int_at_least(1), default=64, help="sentences per scoring batch")
    ev.add_argument(
        "--num-samples",
        type=int_at_least(1),
        help="importance samples per token (relaxed; default: the training config's, at least 100)",
    )
    ev.add_argument("--no-bleu", action="store_true", help="skip decoding and BLEU")
    ev.add_argument(
        "--lowercase-bleu",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="case-insensitive BLEU (default: when the corpus is lower-cased)",
    )
    ev.add_argument("--hypotheses", help="write the detokenised translations to this file")
    ev.add_argument("--json", help="write the scores to this JSON file")
    ev.add_argument("--quiet", action="store_true", help="no progress bars")
    add_decoding_options(ev)
