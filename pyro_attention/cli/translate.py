"""``pyro-attention translate``: detokenised translations of a file or stdin."""

from __future__ import annotations

import argparse
import sys

import torch

from pyro_attention.cli.common import CHECKPOINT_HELP, add_command, exit_with_error, int_at_least
from pyro_attention.cli.evaluate import add_decoding_options, beam_search

#: the flags passed to :func:`~pyro_attention.tasks.translation.translate_lines` as they are, by name
_PASSED = ("tokenize", "lowercase", "progress", "device")


def _translate(args: argparse.Namespace) -> int:
    from pyro_attention.data.text import read_lines
    from pyro_attention.tasks.translation import translate_lines

    if args.kmax is not None and args.rule != "kmax":
        args.parser.error(f"argument --kmax: K of the K-max rule; it goes with --rule kmax (got --rule {args.rule})"
                          if args.rule else "argument --kmax: K of the K-max rule; add --rule kmax")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        lines = sys.stdin.read().splitlines() if args.input == "-" else read_lines(args.input)
        out = translate_lines(args.checkpoint, lines, search=beam_search(args, args.kmax or 5),
                              **{k: getattr(args, k) for k in _PASSED})
    except (ValueError, OSError) as e:
        exit_with_error(args.parser, e)
    for line in out:
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return 0


def add_translate(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    """``pyro-attention translate``."""
    tl = add_command(sub, "translate", _translate, "translate a file or stdin to stdout",
                     "Translate one sentence per line; detokenised output on stdout.")
    tl.add_argument("checkpoint", help=CHECKPOINT_HELP)
    tl.add_argument("input", nargs="?", default="-", help="input file (plain or .gz); '-' or none: stdin")
    tl.add_argument("--kmax", type=int_at_least(1), default=None, help="K of --rule kmax (default 5)")
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
    add_decoding_options(tl)
