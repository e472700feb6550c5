"""What every command of ``pyro-attention`` shares: argparse types with clear messages, the one-line error of a
run-time failure, and the help formatter that shows defaults."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Any


def int_at_least(low: int) -> Callable[[str], int]:
    """A flag's type: an integer ``>= low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value

    return parse


def float_in(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Callable[[str], float]:
    """A flag's type: a number in the interval, by the rule and in the words a config's field uses
    (``must be a number >= 0 and finite, got 'inf'``)."""
    from pyro_attention.tasks.common import interval_text, within_bounds

    where = interval_text(low, high, low_open, high_open)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number {where}, got {text!r}") from None
        if not within_bounds(value, low, high, low_open, high_open):
            raise argparse.ArgumentTypeError(f"must be a number {where}, got {text!r}")
        return value

    return parse


def _positive_float(text: str) -> float:
    return float_in(0.0, float("inf"), low_open=True)(text)


def _learning_rate(text: str) -> float:
    """``--lr``: a number in ``(0, MAX_LR]`` (as ``TranslationConfig`` and ``fit`` check it)."""
    from pyro_attention.inference.optim import MAX_LR

    return float_in(0.0, MAX_LR, low_open=True)(text)


#: the help of a command's ``checkpoint`` argument
CHECKPOINT_HELP = "a .pt checkpoint or a run folder (its best.pt, else last.pt)"


def add_command(
    sub: Any, name: str, func: Any, help: str, description: str | None = None  # noqa: A002 - argparse's name
) -> argparse.ArgumentParser:
    """The sub-parser of ``pyro-attention <name>`` (``sub``: the sub-parsers action), with ``func`` as its handler:
    ``args.func``, and the sub-parser as ``args.parser`` (for its errors)."""
    parser = sub.add_parser(name, help=help, description=description)
    parser.set_defaults(func=func, parser=parser)
    return parser


def option_error(parser: argparse.ArgumentParser, message: str, keys: Sequence[str]) -> typing.NoReturn:
    """``parser.error`` (exit status 2) for a bad option or combination of options, naming the flag when the
    message starts with one of the config ``keys`` (``null_prob: ...`` -> ``argument --null-prob: ...``)."""
    for key in sorted(keys, key=len, reverse=True):
        if message.startswith(key + ":"):
            message = f"argument --{key.replace('_', '-')}: {message[len(key) + 1 :].lstrip()}"
            break
        if message.startswith(key + " "):
            message = f"argument --{key.replace('_', '-')}: {message}"
            break
    parser.error(message)


def exit_with_error(parser: argparse.ArgumentParser, error: Exception) -> typing.NoReturn:
    """A run-time error (data, checkpoint): one line on stderr and exit status 1, without the usage text.

    A decoding rule that the checkpoint's pair does not allow is an option error (``parser.error``, status 2).
    """
    from pyro_attention.pair import RuleError

    if isinstance(error, RuleError):
        parser.error(f"argument --rule: {error}")
    print(f"{parser.prog}: error: {os_error_text(error)}", file=sys.stderr)
    raise SystemExit(1)


def os_error_text(error: BaseException, path: str | os.PathLike | None = None) -> str:
    """An ``OSError`` straight from the system (``[Errno 13] Permission denied: 'x'``) as ``x: Permission denied
    (errno 13)``, or ``cannot write PATH: ...`` when ``path`` is the file being written; any other error as it is
    (this package's messages name their file already)."""
    from pyro_attention.files import WriteError, write_error

    if not isinstance(error, OSError) or isinstance(error, WriteError) or error.errno is None:
        return str(error)
    if path is not None:
        return str(write_error(path, error))
    if error.filename:
        return f"{error.filename}: {error.strerror} (errno {error.errno})"
    return str(error)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Adds ``(default: X)`` to an option's help unless the help already names its default; options without one
    (``None``, flags that are off, options that only override a config file) are left as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default in (None, "")
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or "default" in text
            or "%(default)" in text
        ):
            return text
        if isinstance(default, (list, tuple)):
            shown = " ".join(map(str, default))
        else:
            shown = f"{default:g}" if isinstance(default, float) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


def add_config_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    config: type,
    names: Sequence[str] | None = None,
    *,
    given_only: bool = False,
    defaults: dict[str, Any] | None = None,
) -> None:
    """A flag per field of the dataclass ``config`` (``names``: these fields, in this order; default: every field),
    generated from the field (:func:`pyro_attention.tasks.common.option`): ``--batch-size`` for ``batch_size``, an
    integer ``>= low`` where the field has a lower bound, a number in its ``interval``, a switch for a ``bool``, the
    argparse settings of its ``flag`` metadata, its help text and its default (``defaults`` override it).

    ``given_only``: the flag's default is ``argparse.SUPPRESS`` (only flags given on the command line override a
    config file) and its help names the field's default, in parentheses or where the text says ``{default}``.
    """
    fields = {f.name: f for f in dataclasses.fields(config)}
    hints = typing.get_type_hints(config)
    for name in names or list(fields):
        f = fields[name]
        meta = f.metadata
        own = f.default_factory() if f.default is dataclasses.MISSING else f.default
        default = (defaults or {}).get(name, own)
        kwargs: dict[str, Any] = {"default": default, "help": meta.get("help", "")}
        if meta.get("choices") is not None:
            kwargs["choices"] = meta["choices"]
        if meta.get("low") is not None:
            kwargs["type"] = int_at_least(meta["low"])
        elif meta.get("interval") is not None:
            kwargs["type"] = float_in(*meta["interval"])
        elif hints[name] is bool:
            kwargs["action"] = "store_true"
        elif hints[name] == bool | None:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif hints[name] in (int, float):
            kwargs["type"] = hints[name]
        flag = dict(meta.get("flag", {}))
        option = flag.pop("name", "--" + name.replace("_", "-"))
        kwargs.update(flag)
        kwargs["help"] = _with_default(kwargs["help"], default, given_only)
        if given_only:
            kwargs["default"] = argparse.SUPPRESS
        parser.add_argument(option, **kwargs)


def _with_default(text: str, default: Any, parentheses: bool) -> str:
    """A help text with ``{default}`` replaced by ``default``; with ``parentheses``, one that does not say
    ``{default}`` names it in parentheses at the end, unless it already speaks of its default or it is ``None`` or a
    switch."""
    shown = f"{default:g}" if isinstance(default, float) else str(default)
    if "{default}" in text:
        return text.format(default=shown)
    if not parentheses or default is None or isinstance(default, bool) or "default" in text:
        return text
    return f"{text} ({shown})"


def given_flags(args: argparse.Namespace) -> set[str]:
    """The destinations of the flags given on the command line of ``args`` (``args.argv``, parsed again by
    ``args.parser`` into a namespace holding a marker for every destination: argparse fills in a default only
    where the namespace has none)."""
    marker = object()
    namespace = argparse.Namespace(**{name: marker for name in vars(args)})
    args.parser.parse_args(args.argv[1:], namespace=namespace)
    return {name for name, value in vars(namespace).items() if value is not marker}


def config_values(config: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of the dataclass ``config`` that ``args`` has (flags of :func:`add_config_options`), by name."""
    given = vars(args)
    return {f.name: given[f.name] for f in dataclasses.fields(config) if f.name in given}


def rows_flag(labels: Sequence[str]) -> list:
    """The rows of ``--pairs`` (labels of :data:`pyro_attention.tasks.region_qa.ALL_ROWS`); an unknown label ends
    the program with a message naming the flag."""
    from pyro_attention.tasks.region_qa import rows_by_label

    try:
        return rows_by_label(labels)
    except ValueError as e:
        raise SystemExit(f"--pairs: {e}") from None


def add_run_options(parser: argparse.ArgumentParser, markdown: str = "the table", threads: bool = True) -> None:
    """The flags of a run that prints a table (the examples): ``--threads`` (unless ``threads`` is ``False``: the
    config has it), ``--markdown FILE`` (also write ``markdown`` to it) and ``--quiet``."""
    if threads:
        parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--markdown", default="", help=f"also write {markdown} to this file")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
