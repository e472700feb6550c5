"""What every command of ``pyro-attention`` shares: argparse types with clear messages, the one-line error of a
run-time failure, and the help formatter that shows defaults."""

from __future__ import annotations

import argparse
import os
import sys


def _int_at_least(low: int):  # noqa: ANN202 - an argparse type
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value

    return parse


def _float_in(low: float, high: float, low_open: bool = False, high_open: bool = False):  # noqa: ANN202
    lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
    where = f"in {lo}{low:g}, {high:g}{hi}" if high != float("inf") else f"{'>' if low_open else '>='} {low:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number {where}, got {text!r}") from None
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
        if not ok:
            raise argparse.ArgumentTypeError(f"must be a number {where}, got {text!r}")
        return value

    return parse


def _positive_float(text: str) -> float:
    return _float_in(0.0, float("inf"), low_open=True)(text)


def _learning_rate(text: str) -> float:
    """``--lr``: a number in ``(0, MAX_LR]`` (as ``TranslationConfig`` and ``fit`` check it)."""
    from pyro_attention.inference.optim import MAX_LR

    return _float_in(0.0, MAX_LR, low_open=True)(text)


def _fail(parser: argparse.ArgumentParser, error: Exception) -> None:
    """A run-time error (data, checkpoint): one line on stderr and exit status 1, without the usage text.

    A decoding rule that the checkpoint's pair does not allow is an option error (``parser.error``, status 2).
    """
    if str(error).startswith("rule "):
        parser.error(f"argument --rule: {error}")
    print(f"{parser.prog}: error: {_os_error_text(error)}", file=sys.stderr)
    raise SystemExit(1)


def _os_error_text(error: BaseException, path: str | os.PathLike | None = None) -> str:
    """An ``OSError`` straight from the system (``[Errno 13] Permission denied: 'x'``) as ``x: Permission denied
    (errno 13)``, or ``cannot write PATH: ...`` when ``path`` is the file being written; any other error as it is
    (this package's messages name their file already)."""
    from pyro_attention.outputs import WriteError, write_error

    if not isinstance(error, OSError) or isinstance(error, WriteError) or error.errno is None:
        return str(error)
    if path is not None:
        return str(write_error(path, error))
    if error.filename:
        return f"{error.filename}: {error.strerror} (errno {error.errno})"
    return str(error)


class _DefaultsHelpFormatter(argparse.HelpFormatter):
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
