"""What every task's config shares: :class:`OptimConfig` (epochs, batch size, learning rate, seed: declared and
checked once) and :func:`option`, a config field that carries its command-line help and its bounds.

The flags of ``pyro-attention`` are generated from these fields (``pyro_attention.cli.common.add_config_options``):
``--batch-size`` for ``batch_size``, an integer ``>= low`` where the field has a lower bound, the help text of the
field, its default; a task does not know the command line, its fields only describe themselves.  A config checks
the same bounds where it is built (:func:`check_bounds`), so a value is refused with the same rule from a flag, a
config file or Python.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pyro_attention.inference.optim import LR_RANGE, MAX_LR, check_lr


def option(
    default: Any = None,
    help: str = "",  # noqa: A002 - argparse's name
    *,
    low: int | None = None,
    interval: tuple[float, float, bool, bool] | None = None,
    choices: Sequence[str] | None = None,
    note: str = "",
    flag: dict[str, Any] | None = None,
) -> Any:
    """A config field with its bounds and what its command-line flag needs.

    :param help: the flag's help text; ``{default}`` in it is replaced by the default (``pyro-attention train``'s
        flags, which only override a config file, name their default in the text).
    :param low: an integer field's lower bound (checked by :func:`check_bounds`; the flag takes integers ``>= low``).
    :param interval: a number field's ``(low, high, low_open, high_open)`` range (checked; the flag's type), with
        ``note`` after the range in the message.
    :param choices: the values a string field may take (checked; the flag's choices).
    :param flag: how the flag differs from the generated one: ``name`` (``"--option"``), ``dest``, ``action``,
        ``metavar``, ``choices``.
    """
    metadata = {"help": help, "low": low, "interval": interval, "choices": None if choices is None else
                tuple(choices), "note": note, "flag": dict(flag or {})}
    return field(default=default, metadata=metadata)


def with_default(config: type, name: str, default: Any, help: str | None = None) -> Any:  # noqa: A002
    """Field ``name`` of the dataclass ``config`` with another default (a task's own number of epochs, say) and,
    given ``help``, another help text: the same bounds."""
    (f,) = [f for f in dataclasses.fields(config) if f.name == name]
    return field(default=default, metadata={**f.metadata, **({} if help is None else {"help": help})})


def check_bounds(config: Any, prefix: str = "") -> None:
    """Every field of ``config`` that is not ``None`` within what its :func:`option` allows: an integer at least its
    ``low`` (``"<prefix>epochs must be >= 1, got 0"``), a number in its ``interval`` (``"dropout must be in [0, 1),
    got 1.0"``; the field's ``note`` follows the range), one of its ``choices`` (``"output must be one of tanh,
    product; got 'x'"``)."""
    for f in dataclasses.fields(config):
        meta, value, name = f.metadata, getattr(config, f.name), prefix + f.name
        if value is None:
            continue
        low, interval, choices = meta.get("low"), meta.get("interval"), meta.get("choices")
        if low is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        if interval is not None and not within_bounds(value, *interval):
            raise ValueError(f"{name} must be {interval_text(*interval)}{meta.get('note', '')}, got {value}")
        if choices is not None and value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def within_bounds(value: Any, low: float, high: float, low_open: bool, high_open: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return False
    if high == math.inf and value == math.inf:  # an interval open to infinity takes finite numbers
        return False
    return (value > low if low_open else value >= low) and (value < high if high_open else value <= high)


def interval_text(low: float, high: float, low_open: bool = False, high_open: bool = False) -> str:
    """``in (0, 1]``, or ``> 0 and finite`` for an interval open to infinity."""
    if high == math.inf:
        return f"{'>' if low_open else '>='} {low:g} and finite"
    return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


@dataclass
class OptimConfig:
    """The optimisation settings every task shares (translation, region QA, CLEVR, align): a task's config is an
    ``OptimConfig`` with its own fields (and its own defaults, :func:`with_default`).

    Checked where the config is built: ``epochs`` and ``batch_size`` at least 1, ``seed`` at least 0, ``lr`` in
    ``(0, 1]`` (:func:`~pyro_attention.inference.optim.check_lr`); every other field with a lower bound too.  The
    messages start with the config's name (``RegionQAConfig: lr must be ...``) unless it sets ``message_prefix``.
    """

    epochs: int = option(10, "training epochs", low=1)
    batch_size: int = option(32, "examples per batch", low=1)
    lr: float = option(3e-3, f"Adam learning rate, in {LR_RANGE}", interval=(0.0, MAX_LR, True, False))
    seed: int = option(0, "seed of weights, sampling and batch order", low=0)

    #: how the config's error messages start; ``None``: its class name and a colon
    message_prefix: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        self.check_optimisation()

    def check_optimisation(self) -> None:
        """The learning rate (``lr`` becomes a float) and what every field allows (:func:`check_bounds`)."""
        prefix = f"{type(self).__name__}: " if self.message_prefix is None else self.message_prefix
        self.lr = check_lr(self.lr, prefix + "lr")
        check_bounds(self, prefix)
