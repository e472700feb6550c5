"""Every pair by name: the paper's five and their neighbours, their estimators and options, and table rows.

:func:`make_pair` is how the experiment tables, the translation CLI and its checkpoints build a pair from
text: a name (a key of :data:`ALL_PAIRS`), an estimator where the pair has a choice of them
(:data:`PAIR_ESTIMATORS`: their names; an estimator object of :mod:`pyro_attention.inference.estimators` is
accepted too), and keyword options of the pair's constructor (``kl_scale=0.01``), each checked
with an error that lists what is allowed.  A :class:`PairSpec` is one row of a comparison table.
"""

from __future__ import annotations

import ast
import inspect
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyro_attention.inference.estimators import Estimator, resolve
from pyro_attention.models import NEIGHBOURS, PAIRS
from pyro_attention.networks.base import AttentionNetwork
from pyro_attention.pair import AlignmentPair

#: every pair by name: the paper's (:data:`~pyro_attention.models.PAIRS`) then the neighbours
ALL_PAIRS: dict[str, type[AlignmentPair]] = {**PAIRS, **NEIGHBOURS}

#: pairs with a choice of estimator: name -> the names of the estimators its class accepts (``cls.estimators``),
#: the default first; every pair takes it as its constructor's ``estimator`` argument
PAIR_ESTIMATORS: dict[str, tuple[str, ...]] = {
    name: tuple(e.name for e in cls.estimators) for name, cls in ALL_PAIRS.items() if len(cls.estimators) > 1
}

#: constructor options filled from the network when not given (sizes of pair-owned modules, so that they
#: exist before a checkpoint's weights are loaded into them)
_SIZE_OPTIONS = ("context_size", "value_size")


def pair_options(name: str) -> dict[str, Any]:
    """The keyword options of pair ``name``'s constructor and their defaults (estimator keyword excluded)."""
    cls = _pair_class(name)
    skip = {"self", "network", "estimator"}
    return {
        p.name: p.default
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name not in skip and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def _pair_class(name: str) -> type[AlignmentPair]:
    if name not in ALL_PAIRS:
        raise ValueError(f"unknown pair {name!r}; choose from {', '.join(ALL_PAIRS)}")
    return ALL_PAIRS[name]


def check_estimator(name: str, estimator: Estimator | str | None) -> Estimator | str | None:
    """``estimator`` for pair ``name`` (its default's name when ``None``); ``ValueError`` listing the allowed ones.

    A name comes back as given, an estimator object too (when the pair accepts its kind).
    """
    cls = _pair_class(name)
    allowed = PAIR_ESTIMATORS.get(name)
    if allowed is None:
        if estimator is not None:
            with_choice = ", ".join(f"{k} ({'/'.join(v)})" for k, v in PAIR_ESTIMATORS.items())
            raise ValueError(
                f"pair {name!r} has no choice of estimator, got {estimator!r}; estimators exist for {with_choice}"
            )
        return None
    if estimator is None:
        return allowed[0]
    if isinstance(estimator, Estimator):
        resolve(estimator, cls.estimators, f"pair {name!r}")
        return estimator
    if estimator not in allowed:
        raise ValueError(f"estimator {estimator!r} of pair {name!r}: choose from {', '.join(allowed)}")
    return estimator


def check_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` if every key is a constructor option of pair ``name`` and every value has the type the
    constructor declares (an ``int`` is a ``float`` too; ``bool`` is neither); else ``ValueError`` naming it."""
    allowed = pair_options(name)
    unknown = [k for k in options if k not in allowed]
    if unknown:
        listed = ", ".join(f"{k}={v!r}" for k, v in allowed.items()) or "none"
        raise ValueError(f"pair {name!r} has no option {', '.join(map(repr, unknown))}; its options: {listed}")
    hints = typing.get_type_hints(_pair_class(name).__init__)
    for key, value in options.items():
        hint = hints.get(key)
        if hint is not None and not _has_type(value, hint):
            raise ValueError(
                f"pair {name!r}: option {key}={value!r} must be {_type_name(hint)}, got {type(value).__name__} "
                f"(default {allowed[key]!r})"
            )
    return dict(options)


def _has_type(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the annotation ``hint`` (plain classes, ``X | None``; others are not checked)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_has_type(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    return "None" if hint is type(None) else getattr(hint, "__name__", str(hint))


def make_pair(
    name: str, network: AttentionNetwork, estimator: Estimator | str | None = None, **options: Any
) -> AlignmentPair:
    """Build pair ``name`` on ``network``.

    :param estimator: for pairs in :data:`PAIR_ESTIMATORS`: a name there or an estimator object of
        :mod:`pyro_attention.inference.estimators` (``None``: the first, the default).
    :param options: keyword options of the pair's constructor (see :func:`pair_options`); sizes of modules the
        pair owns (``context_size``, ``value_size``) default to ``network.value_size``.
    :raises ValueError: unknown name, estimator or option (the message lists the allowed ones).
    """
    cls = _pair_class(name)
    estimator = check_estimator(name, estimator)
    kwargs = check_options(name, options)
    for key in _SIZE_OPTIONS:
        if key in pair_options(name) and kwargs.get(key) is None and hasattr(network, "value_size"):
            kwargs[key] = network.value_size
    if estimator is not None:
        kwargs["estimator"] = estimator
    return cls(network, **kwargs)


def parse_options(items: Iterable[str]) -> dict[str, Any]:
    """``["kl_scale=0.01", "guide_scores=prior"]`` -> ``{"kl_scale": 0.01, "guide_scores": "prior"}``.

    Values are Python literals where they parse as one (numbers, ``True``, ``None``), else strings.
    """
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"option {item!r}: expected KEY=VALUE, e.g. kl_scale=0.01")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()
        out[key.strip()] = value
    return out


@dataclass(frozen=True)
class PairSpec:
    """One row of a comparison table: a pair name, its estimator and constructor options."""

    name: str
    estimator: Estimator | str | None = None
    options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        check_estimator(self.name, self.estimator)
        check_options(self.name, dict(self.options))

    @classmethod
    def of(cls, row: PairSpec | Sequence[Any] | str) -> PairSpec:
        """A spec from a spec, a name, ``(name, estimator)`` or ``(name, estimator, options dict)``."""
        if isinstance(row, PairSpec):
            return row
        if isinstance(row, str):
            return cls(row)
        name, estimator, *rest = row
        options = rest[0] if rest else {}
        return cls(name, estimator, tuple(sorted(dict(options).items())))

    @property
    def label(self) -> str:
        parts = ([str(self.estimator)] if self.estimator else []) + [f"{k}={v}" for k, v in self.options]
        return f"{self.name} ({', '.join(parts)})" if parts else self.name

    def build(self, network: AttentionNetwork) -> AlignmentPair:
        return make_pair(self.name, network, self.estimator, **dict(self.options))


#: the paper's rows (Deng et al. 2018, Tables 1 and 2), in order
PAPER_ROWS: list[PairSpec] = [
    PairSpec("soft"),
    PairSpec("marginal"),
    PairSpec("hard", "enum"),
    PairSpec("hard", "sample"),
    PairSpec("variational", "enum"),
    PairSpec("variational", "sample"),
    PairSpec("relaxed"),
]

#: the neighbours' rows, with the settings measured to train on region QA (docs/neighbours.md): the KL of the
#: Gaussian-context and BAM pairs weighted 0.01 (BAM's own code averages it over positions), BAM's guide on the
#: prior's scores (its own setting), the Gumbel pair with the categorical KL (the sampled Concrete KL does not
#: learn at tau = 0.1)
NEIGHBOUR_ROWS: list[PairSpec] = [
    PairSpec("segmentation"),
    PairSpec("syntactic"),
    PairSpec("segmentation-marginal"),
    PairSpec("gaussian", options=(("kl_scale", 0.01),)),
    PairSpec("bayesian", options=(("guide_scores", "prior"), ("kl_scale", 0.01))),
    PairSpec("gumbel", "categorical"),
    PairSpec("rws"),
]
