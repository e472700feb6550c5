"""The command-line reference page (``docs/cli.md``): every command's ``--help``, as the parser prints it.

``python -m pyro_attention.cli.reference > docs/cli.md`` writes it; ``tests/test_docs_build.py`` keeps the page equal
to the parser.
"""

from __future__ import annotations

import argparse
import os
from unittest import mock

from pyro_attention.cli.main import make_parser

#: the help text's width (argparse reads the terminal's; the page must not depend on it)
WIDTH = 100


def commands(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command under ``parser``, depth first, with its full name."""
    out = [(prefix, parser)]
    for action in parser._actions:  # argparse keeps sub-commands in its (public) parser's action list
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += commands(sub, f"{prefix} {name}")
    return out


def cli_reference() -> str:
    """The page: a section per command, its ``--help`` in a code block."""
    with mock.patch.dict(os.environ, {"COLUMNS": str(WIDTH)}):
        every = commands(make_parser(), "pyro-attention")
        sections = [f"## `{name}`\n\n```text\n{parser.format_help().rstrip()}\n```\n" for name, parser in every]
    return ("# Command-line reference\n\nEvery command's `--help` (generated: `python -m pyro_attention.cli.reference "
            "> docs/cli.md`).\n\n" + "\n".join(sections))


if __name__ == "__main__":
    print(cli_reference(), end="")
