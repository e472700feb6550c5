"""``pyro-attention evaluate``: perplexity, K-max perplexity, prior entropy and BLEU of a checkpoint; and the
decoding flags it shares with ``translate``."""

from __future__ import annotations

import argparse
import sys

import torch

from pyro_attention.cli.common import CHECKPOINT_HELP, add_command, exit_with_error, float_in, int_at_least


def _print_scores(res: dict) -> None:
    print(
        f"evaluate {res['checkpoint']} ({res['model']}{', ' + res['estimator'] if res['estimator'] else ''}) on "
        f"{res['data']}: {res['sentences']} sentences, {res['tokens']} target tokens (with </s>)"
    )
    if res["ppl_exact"]:
        print(f"perplexity           {res['ppl']:.4f}  (exact: {res['ppl_method']}; NLL/token {res['nll']:.4f})")
    else:
        khat = "k-hat undefined" if res["khat_max"] is None else f"max PSIS k-hat {res['khat_max']:.2f}"
        if not res["ppl_reliable"] and res["khat_over_threshold"]:
            khat += f"; UNRELIABLE: k-hat > 0.7 on {res['khat_over_threshold']:.1%} of tokens"
        elif not res["ppl_reliable"]:
            khat += "; UNRELIABLE: too few draws per token to check k-hat (--num-samples 25 or more)"
        print(f"perplexity bound     {res['ppl']:.4f} ± {res['ppl_mc_se']:.4f}  (Monte Carlo s.e.; {khat}; "
              f"{res['ppl_method']}; importance-weighted bound, not exact)")
    if res["kmax_ppl"] is not None:
        print(f"K-max perplexity     {res['kmax_ppl']:.4f}  ({res['kmax_method']})")
    else:
        print("K-max perplexity     -  (needs a categorical alignment)")
    print(f"prior entropy        {res['prior_entropy']:.4f}  nats per target token")
    for name, key in (("posterior entropy", "posterior_entropy"), ("guide entropy", "guide_entropy"),
                      ("KL(guide || post.)", "guide_kl")):
        if res.get(key) is not None:  # the distributions the pair has
            print(f"{name:<20} {res[key]:.4f}  nats per target token")
    if res["bleu"] is not None:
        print(
            f"BLEU                 {res['bleu']:.2f}  (beam {res['beam']}, rule {res['rule']}, length penalty "
            f"{res['length_penalty']:g})"
        )
        print(f"sacreBLEU signature  {res['bleu_signature']}")
        print(f"sacreBLEU            {res['bleu_text']}")
    if res.get("degenerate"):
        print(f"pyro-attention evaluate: warning: {res['degenerate']}", file=sys.stderr)


#: the flags passed to :func:`~pyro_attention.tasks.translation.evaluate` as they are, by name
_PASSED = ("src_file", "tgt_file", "ref_file", "data_dir", "size", "kmax", "beam", "rule", "length_penalty",
           "max_decode_len", "batch_size", "num_samples", "device")


def _evaluate(args: argparse.Namespace) -> int:
    import json

    from pyro_attention.files import write_text
    from pyro_attention.tasks.translation import evaluate

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        res = evaluate(
            args.checkpoint,
            args.split,
            **{k: getattr(args, k) for k in _PASSED},
            bleu=not args.no_bleu,
            lowercase=args.lowercase_bleu,
            progress=not args.quiet,
        )
    except (ValueError, OSError) as e:
        exit_with_error(args.parser, e)
    _print_scores(res)
    try:
        if args.hypotheses and res["hypotheses"] is not None:
            write_text(args.hypotheses, "".join(h + "\n" for h in res["hypotheses"]))
            print(f"wrote {len(res['hypotheses'])} translations to {args.hypotheses}")
        if args.json:
            scores = {k: v for k, v in res.items() if k != "hypotheses"}
            write_text(args.json, json.dumps(scores, indent=2) + "\n")
    except OSError as e:
        exit_with_error(args.parser, e)
    return 0


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
