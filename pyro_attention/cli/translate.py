"""``pyro-attention translate``: detokenised translations of a file or stdin."""

from __future__ import annotations

import argparse
import sys

import torch

from pyro_attention.cli.common import _fail, _int_at_least
from pyro_attention.cli.evaluate import _add_decoding_options


def _translate(args: argparse.Namespace) -> int:
    from pyro_attention.data.text import read_lines
    from pyro_attention.tasks.translation import translate_lines

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        lines = sys.stdin.read().splitlines() if args.input == "-" else read_lines(args.input)
        out = translate_lines(
            args.checkpoint,
            lines,
            beam=args.beam,
            rule=args.rule,
            k=args.kmax,
            length_penalty=args.length_penalty,
            max_decode_len=args.max_decode_len,
            tokenize=args.tokenize,
            lowercase=args.lowercase,
            progress=args.progress,
            device=args.device,
        )
    except (ValueError, OSError) as e:
        _fail(args.parser, e)
    for line in out:
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return 0


def add_translate(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    """``pyro-attention translate``."""
    tl = sub.add_parser(
        "translate",
        help="translate a file or stdin to stdout",
        description="Translate one sentence per line; detokenised output on stdout.",
    )
    tl.add_argument("checkpoint", help="a .pt checkpoint or a run folder (its best.pt, else last.pt)")
    tl.add_argument("input", nargs="?", default="-", help="input file (plain or .gz); '-' or none: stdin")
    tl.add_argument("--kmax", type=_int_at_least(1), default=5, help="K of --rule kmax (5)")
    tl.add_argument(
        "--tokenize",
        choices=("none", "moses"),
        default="none",
        help="none: input is tokenised like the training data; moses: tokenise raw text (sacremoses)",
    )
    tl.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="lower-case the input (default: when the training corpus is lower-cased)",
    )
    tl.add_argument("--progress", action="store_true", help="a progress bar on stderr")
    _add_decoding_options(tl)
    tl.set_defaults(func=_translate, parser=tl)
