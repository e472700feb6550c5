"""The parser of ``pyro-attention`` (one sub-command per module of this package) and :func:`main`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyro_attention.cli.align import add_align
from pyro_attention.cli.common import DefaultsHelpFormatter, os_error_text
from pyro_attention.cli.demo import add_demo
from pyro_attention.cli.evaluate import add_evaluate
from pyro_attention.cli.experiment import add_experiment
from pyro_attention.cli.inspect import add_inspect
from pyro_attention.cli.train import add_train
from pyro_attention.cli.translate import add_translate

#: the parser's description: the first line of the package's docstring
DESCRIPTION = "The ``pyro-attention`` command."


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyro-attention", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_demo, add_train, add_evaluate, add_translate, add_align, add_inspect, add_experiment):
        add(sub)
    for command in sub.choices.values():  # every option's help says its default
        command.formatter_class = DefaultsHelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = make_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except OSError as error:  # a file that cannot be written (or read): one line naming it, not a traceback
        if error.errno is None and not error.filename:
            raise
        prog = args.parser.prog if hasattr(args, "parser") else f"pyro-attention {args.command}"
        print(f"{prog}: error: {os_error_text(error)}", file=sys.stderr)
        raise SystemExit(1) from None
