"""Translation experiments end to end: configuration, corpora, training with checkpoints, evaluation, translation.

This module is the glue behind ``pyro-attention train | evaluate | translate`` and is usable from Python:

* :class:`TranslationConfig` -- every option, CPU-small defaults, loadable from a JSON or TOML file
  (:meth:`TranslationConfig.from_file`; an unknown key is a ``ValueError`` listing the allowed ones);
* :func:`load_corpora` -- train / val (/ test) token lists for the synthetic task (the default, no files needed),
  Multi30k, IWSLT14 (which has only ``valid`` and ``test``: training on ``valid`` happens only when asked with
  ``train_split="valid"``, and then the *tail* of ``valid`` is held out for validation) or any parallel files;
* :func:`build_vocabs`, :func:`build_pair` -- vocabularies from the training side, a
  :class:`~pyro_attention.networks.Seq2Seq` and the model/guide pair;
* :func:`train` -- SVI on ``pair.elbo()`` with Pyro's :class:`~pyro.optim.ClippedAdam` update, taken in one fused
  pass by :class:`~pyro_attention.inference.optim.FusedClippedAdam` (per-parameter gradient
  clipping), length-bucketed batches, validation perplexity every epoch, learning-rate halving when it does
  not improve, early stopping, atomic checkpoints (``last.pt`` every epoch, ``best.pt`` at the best validation)
  and exact resumption (``resume=True``) -- the package's one training loop,
  :class:`~pyro_attention.inference.loop.Trainer`, with this module's callbacks (validation, history,
  checkpoints, TensorBoard, the epoch line, Ctrl-C / SIGTERM) and the generic ones (``SVIStep``, ``PlateauDecay``,
  ``EarlyStopping``, ``CsvLogger``, ``ProgressBar``);
* :func:`evaluate` -- exact perplexity (an importance-weighted bound for the Dirichlet pair), K-max perplexity,
  prior entropy per token and sacreBLEU of beam-search output;
* :func:`translate_lines` -- detokenised translations of raw lines.

**Learning-rate schedule.**  Pyro's optimiser keeps one torch optimiser per parameter; when the validation
perplexity of an epoch is not lower than the best so far, the ``lr`` of every one of their parameter groups is
multiplied by ``lr_decay`` (0.5: halved), and so is the ``lr`` the wrapper gives optimisers it creates later.
The current ``lr`` is part of the optimiser state, so a resumed run continues with it.

**Exact resumption.**  Checkpoints are written at the end of an epoch, after validation.  They hold the network,
the optimiser state (``optim.get_state()``), the torch / Python / NumPy RNG states at that moment, and the
counters; the order of the batches in epoch ``e`` is drawn from a generator seeded with ``(seed, e)`` alone.
A run resumed from ``last.pt`` therefore replays exactly what the uninterrupted run would have done (same
thread count assumed: floating-point reductions may differ across thread counts).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import platform
import re
import tempfile
import typing
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyro
import torch
from tqdm.auto import tqdm

from pyro_attention import __version__
from pyro_attention.data.synthetic_translation import make_synthetic_translation
from pyro_attention.data.text import (
    IWSLT14_LANGUAGES,
    MULTI30K_LANGUAGES,
    MULTI30K_SPLITS,
    Vocab,
    bucket_batches,
    data_dir,
    iwslt14_paths,
    multi30k_paths,
    read_lines,
    read_parallel,
    require_file,
)
from pyro_attention.data.translation import SPECIALS, TranslationBatch
from pyro_attention.inference.distributed import (
    DataParallelSVI,
    broadcast_object,
    broadcast_parameters,
    gather_objects,
    init_from_env,
    shard,
)
from pyro_attention.inference.loop import (
    Callback,
    CsvLogger,
    EarlyStopping,
    PlateauDecay,
    ProgressBar,
    SVIStep,
    Trainer,
    stop_requests,
)
from pyro_attention.inference.optim import FusedClippedAdam, check_lr
from pyro_attention.networks import Seq2Seq
from pyro_attention.networks.attention import ATTENTION_SCORES
from pyro_attention.networks.output import OUTPUT_LAYERS
from pyro_attention.networks.seq2seq import BRIDGES, INPUT_FEEDS
from pyro_attention.outputs import write_error, writing
from pyro_attention.pair import AlignmentPair
from pyro_attention.registry import ALL_PAIRS, PAIR_ESTIMATORS, check_options, make_pair

__all__ = [
    "CHECKPOINT_FORMAT",
    "DATA_KINDS",
    "STRUCTURAL_KEYS",
    "Checkpoint",
    "Corpora",
    "Split",
    "TrainResult",
    "TranslationConfig",
    "build_pair",
    "build_vocabs",
    "evaluate",
    "load_checkpoint",
    "load_corpora",
    "load_split",
    "read_config_file",
    "save_checkpoint",
    "train",
    "translate_lines",
]

DATA_KINDS = ("synthetic", "multi30k", "iwslt14", "parallel")
#: pairs with a choice of estimator
ESTIMATOR_PAIRS = tuple(PAIR_ESTIMATORS)
#: config keys that must agree between a checkpoint and the run that resumes it (with the vocabularies)
STRUCTURAL_KEYS = ("model", "estimator", "options", "embedding", "encoder", "decoder", "attention", "layers", "output",
                   "attention_type", "input_feed", "bridge", "init")
CHECKPOINT_FORMAT = "pyro_attention.translation.checkpoint"
SPLITS = ("train", "val", "test")
#: synthetic corpus sizes used when ``train_size`` / ``val_size`` / ``test_size`` are not given
SYNTHETIC_SIZES = {"train": 2000, "val": 200, "test": 200}
#: IWSLT14 pairs held out from the tail of ``valid`` for validation when ``val_size`` is not given
IWSLT14_HELD_OUT = 500
CSV_FIELDS = ("kind", "epoch", "step", "loss", "tokens", "lr", "val_nll", "val_ppl", "val_exact", "seconds")

Log = Callable[[str], None]


def _log(text: str) -> None:
    tqdm.write(text)


def _no_bar(progress: bool) -> bool | None:
    """tqdm's ``disable``: ``True`` without progress; else ``None``, with which tqdm turns itself off when its
    output (stderr) is not a terminal, so a log file or a pipe gets the per-epoch lines, not every bar update."""
    return None if progress else True


# ----------------------------------------------------------------------------------------------------------------
# Configuration


@dataclass
class TranslationConfig:
    """Every option of a translation run (the command-line flags carry the same names, ``_`` as ``-``).

    Data: ``data`` is ``"synthetic"`` (the package's generator; sizes ``train_size`` / ``val_size`` /
    ``test_size``, default 2000 / 200 / 200, seeds ``data_seed + 0 / 1 / 2``), ``"multi30k"``
    (``data_dir`` or ``$PYRO_ATTENTION_DATA``; lower-cased tokenised ``train`` / ``val`` / ``test_2016_flickr``),
    ``"iwslt14"`` (``train_split="valid"`` must be given: the corpus here has no train split) or ``"parallel"``
    (``train_src`` ... ``test_tgt`` paths).  ``max_len`` drops longer *training* pairs (reported);
    ``train_size`` keeps the first pairs after that.  ``min_freq`` / ``max_vocab`` shape the vocabularies, built
    from the training side.

    Model: ``model`` is a key of :data:`pyro_attention.registry.ALL_PAIRS` (the paper's pairs and the neighbours);
    ``estimator`` only for the pairs of :data:`~pyro_attention.registry.PAIR_ESTIMATORS` (``hard`` /
    ``variational``: ``"enum"`` or ``"sample"``, default ``"enum"``; ``gumbel``: ``"sampled"`` or
    ``"categorical"``); ``options``: keyword options of the pair's constructor (e.g. ``{"kl_scale": 0.01}``;
    ``--option kl_scale=0.01`` on the command line).  Sizes as :class:`~pyro_attention.networks.Seq2Seq`
    (``chunk_size=0``: no chunking of the enumerated output layer); ``output`` its output layer (``"tanh"``, the
    paper's, or ``"product"``, the product of experts whose exact enumeration costs about a soft step),
    ``attention_type`` its prior's score (``"mlp"``, the paper's; Luong's ``"general"`` or ``"dot"``) and
    ``attention`` the MLP score's size; ``input_feed`` what the decoder is fed (``"context"``, the prior's soft
    context, or ``"attentional"``, Luong's attentional state as OpenNMT-py feeds it), ``bridge`` its initial
    state (``"mean"`` of the source values, or the encoder's ``"final"`` states as OpenNMT-py; needs ``decoder`` =
    2 x ``encoder``) and ``init`` the initialisation (``0``: torch's defaults; ``0.1``: every parameter uniform in
    +-0.1, OpenNMT-py's ``param_init``).

    Optimisation: ``epochs``, ``batch_size`` (sentences), ``lr``, ``clip_norm`` (per parameter, ClippedAdam),
    ``lr_decay`` (factor applied when validation perplexity does not improve), ``patience`` (epochs without
    improvement before stopping; 0: never stop early), ``warmup_steps`` (Dirichlet pair: steps with the prior as
    guide), ``num_samples`` (importance samples of the Dirichlet pair's validation bound), ``seed``, ``threads``
    (torch threads; 0 leaves torch's choice), ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``: where
    the network, its optimiser state and the batches live; checkpoints are stored device-free, so a run trained on
    a GPU resumes or evaluates on a CPU and back; several processes under torchrun each take ``cuda:LOCAL_RANK``)
    and ``out`` (default ``runs/<model>-<estimator>``).
    """

    # data
    data: str = "synthetic"
    data_dir: str | None = None
    src: str = "de"
    tgt: str = "en"
    train_split: str | None = None
    val_split: str | None = None
    test_split: str | None = None
    bpe: bool = False
    train_src: str | None = None
    train_tgt: str | None = None
    val_src: str | None = None
    val_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    train_size: int | None = None
    val_size: int | None = None
    test_size: int | None = None
    max_len: int = 50
    min_freq: int = 1
    max_vocab: int | None = None
    data_seed: int = 0
    synthetic_vocab: int = 24
    synthetic_min_len: int = 3
    synthetic_max_len: int = 8
    # model
    model: str = "soft"
    estimator: str | None = None
    options: dict[str, Any] | None = None
    embedding: int = 64
    encoder: int = 64
    decoder: int = 128
    attention: int = 64
    layers: int = 1
    dropout: float = 0.0
    chunk_size: int = 8
    output: str = "tanh"
    attention_type: str = "mlp"
    input_feed: str = "context"
    bridge: str = "mean"
    init: float = 0.0
    # optimisation
    epochs: int = 10
    batch_size: int = 32
    lr: float = 3e-3
    clip_norm: float = 5.0
    lr_decay: float = 0.5
    patience: int = 3
    warmup_steps: int = 0
    num_samples: int = 20
    seed: int = 0
    threads: int = 1
    device: str = "cpu"
    out: str | None = None
    checkpoint_every: int = 0
    tensorboard: bool | None = None

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            setattr(self, f.name, _check_type(f.name, getattr(self, f.name), hints[f.name]))
        _choice("data", self.data, DATA_KINDS)
        _choice("output", self.output, tuple(OUTPUT_LAYERS))
        _choice("attention_type", self.attention_type, tuple(ATTENTION_SCORES))
        resolve_device(self.device)
        _choice("input_feed", self.input_feed, INPUT_FEEDS)
        _choice("bridge", self.bridge, BRIDGES)
        if self.bridge == "final" and self.decoder != 2 * self.encoder:
            raise ValueError(
                f"bridge 'final' needs decoder = 2 x encoder (the encoder's final states, both directions), got "
                f"decoder {self.decoder} and encoder {self.encoder}; use bridge 'mean', or change the sizes"
            )
        if not 0.0 <= self.init <= 1.0:
            raise ValueError(f"init must be in [0, 1] (0: torch's defaults; 0.1: OpenNMT-py's), got {self.init}")
        if self.attention_type == "dot" and self.decoder != 2 * self.encoder:
            raise ValueError(
                f"attention_type 'dot' needs decoder = 2 x encoder (the values' size), got decoder {self.decoder} "
                f"and encoder {self.encoder}; use attention_type 'general' or 'mlp', or change the sizes"
            )
        _choice("model", self.model, tuple(ALL_PAIRS))
        if self.model in ESTIMATOR_PAIRS:
            if self.estimator is None:
                self.estimator = PAIR_ESTIMATORS[self.model][0]
            _choice("estimator", self.estimator, PAIR_ESTIMATORS[self.model])
        elif self.estimator is not None:
            with_choice = "; ".join(f"{k}: {', '.join(v)}" for k, v in PAIR_ESTIMATORS.items())
            raise ValueError(
                f"estimator: model {self.model!r} has no estimator, got {self.estimator!r}; allowed: none "
                f"(estimators exist only for {with_choice})"
            )
        if self.options is not None:
            try:
                check_options(self.model, self.options)
            except ValueError as e:
                raise ValueError(f"options: {e}") from None
        for name in ("embedding", "encoder", "decoder", "attention", "layers", "epochs", "batch_size", "max_len",
                     "min_freq", "num_samples", "synthetic_min_len", "synthetic_max_len"):
            _at_least(name, getattr(self, name), 1)
        for name in ("chunk_size", "patience", "warmup_steps", "seed", "threads", "data_seed", "checkpoint_every"):
            _at_least(name, getattr(self, name), 0)
        for name in ("train_size", "val_size", "test_size"):
            if getattr(self, name) is not None:
                _at_least(name, getattr(self, name), 1)
        if self.max_vocab is not None:
            _at_least("max_vocab", self.max_vocab, 5)
        _at_least("synthetic_vocab", self.synthetic_vocab, 4)
        if self.synthetic_min_len > self.synthetic_max_len:
            raise ValueError(
                f"synthetic_min_len ({self.synthetic_min_len}) must not exceed synthetic_max_len "
                f"({self.synthetic_max_len})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        self.lr = check_lr(self.lr)
        if not 0 < self.clip_norm < math.inf:
            raise ValueError(f"clip_norm must be > 0 and finite, got {self.clip_norm}")
        if not 0.0 < self.lr_decay <= 1.0:
            raise ValueError(f"lr_decay must be in (0, 1], got {self.lr_decay}")
        if self.warmup_steps and not ALL_PAIRS[self.model].has_warmup:
            with_warmup = [k for k, v in ALL_PAIRS.items() if v.has_warmup]
            raise ValueError(
                f"warmup_steps: model {self.model!r} has no warm-up guide; only {', '.join(with_warmup)} has one"
            )
        self._check_data()

    def _check_data(self) -> None:
        if self.data == "multi30k":
            for name in ("src", "tgt"):
                _choice(name, getattr(self, name), MULTI30K_LANGUAGES)
            for name in ("train_split", "val_split", "test_split"):
                if getattr(self, name) is not None:
                    _choice(name, getattr(self, name), MULTI30K_SPLITS)
        elif self.data == "iwslt14":
            for name in ("src", "tgt"):
                _choice(name, getattr(self, name), IWSLT14_LANGUAGES)
            if self.train_split != "valid":
                raise ValueError(
                    f"train_split: IWSLT14 here has only the splits 'valid' and 'test' (no train split); to train "
                    f"on 'valid' say so with --train-split valid (the last val_size pairs of 'valid', default "
                    f"{IWSLT14_HELD_OUT}, are then held out for validation and 'test' is the test split); "
                    f"got {self.train_split!r}"
                )
            if self.val_split is not None or self.test_split not in (None, "test"):
                raise ValueError(
                    "val_split / test_split: not configurable for IWSLT14 (validation is the held-out tail of "
                    "'valid', the test split is 'test')"
                )
        elif self.data == "parallel":
            missing = [n for n in ("train_src", "train_tgt", "val_src", "val_tgt") if getattr(self, n) is None]
            if missing:
                raise ValueError(
                    "data 'parallel' needs the paths " + ", ".join("--" + n.replace("_", "-") for n in missing)
                )
        if self.src == self.tgt and self.data in ("multi30k", "iwslt14"):
            raise ValueError(f"src and tgt are both {self.src!r}")

    # -- construction -----------------------------------------------------------------------------------------
    @classmethod
    def keys(cls) -> list[str]:
        """The allowed configuration keys."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any], base: TranslationConfig | None = None) -> TranslationConfig:
        """A config from ``values`` (keys with ``-`` or ``_``), on top of ``base`` (default: the defaults).

        Changing ``model`` without naming ``estimator`` / ``options`` resets them to that model's defaults.

        :raises ValueError: for an unknown key (listing the allowed ones) or a bad value (naming the key).
        """
        values = _normalise_keys(values)
        if "model" in values and (base is None or base.model != values["model"]):
            values.setdefault("estimator", None)
            values.setdefault("options", None)
        start = dataclasses.asdict(base) if base is not None else {}
        return cls(**{**start, **values})

    @classmethod
    def from_file(cls, path: str | os.PathLike, **overrides: Any) -> TranslationConfig:
        """Read a JSON (``.json``) or TOML (``.toml``) file of flat ``key = value`` pairs; ``overrides`` win.

        :raises ValueError: for a bad value, naming the file when the value came from it.
        """
        overrides = _normalise_keys(overrides)
        values = {k: v for k, v in read_config_file(path).items() if k not in overrides}
        try:
            return cls.from_dict({**values, **overrides})
        except ValueError as e:
            if _message_key(str(e)) in values:
                raise ValueError(f"{path}: {e}") from None
            raise

    def replace(self, **changes: Any) -> TranslationConfig:
        """A copy with ``changes`` applied (validated)."""
        return type(self).from_dict(changes, base=self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def out_dir(self) -> Path:
        """``out``, or ``runs/<model>-<estimator>`` (``runs/<model>`` for pairs without an estimator)."""
        if self.out:
            return Path(self.out)
        return Path("runs") / (f"{self.model}-{self.estimator}" if self.estimator else self.model)

    @property
    def lowercased(self) -> bool:
        """Whether the corpus is lower-cased (Multi30k's and IWSLT14's prepared files are)."""
        return self.data in ("multi30k", "iwslt14")


def resolve_device(name: str, local_rank: int | None = None) -> torch.device:
    """``torch.device(name)`` if this machine has it, else a ``ValueError`` naming the device and what is here.

    ``local_rank`` (several processes): a bare ``"cuda"`` becomes ``cuda:local_rank``.
    """
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"device: {name!r} is not a device name; use cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device: {name!r} is not available on this machine (torch {torch.__version__} sees no "
                             "CUDA GPU; a CPU build of torch, or no driver); use device cpu")
        if device.index is None and local_rank is not None:
            device = torch.device("cuda", local_rank)
        if (device.index or 0) >= torch.cuda.device_count():
            raise ValueError(f"device: {name!r} does not exist here: this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device: {name!r} is not available on this machine; use device cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device: {name!r} is not supported for training; use cpu, cuda, cuda:N or mps")
    return device


def _on_cpu(value: Any) -> Any:
    """``value`` with every tensor (in nested dicts, lists and tuples) moved to the CPU: checkpoints are device-free."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: _on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value


def _normalise_keys(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    allowed = TranslationConfig.keys()
    unknown = []
    for key, value in values.items():
        name = str(key).replace("-", "_")
        if name not in allowed:
            unknown.append(str(key))
        out[name] = value
    if unknown:
        raise ValueError(
            f"unknown config key(s) {', '.join(repr(k) for k in unknown)}; allowed keys: {', '.join(allowed)}"
        )
    return out


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The ``key -> value`` table of a JSON or TOML config file (keys checked, values not yet).

    :raises ValueError: for an unknown key (naming the file and listing the allowed keys), a file that is not
        a flat table, or a suffix other than ``.json`` / ``.toml``.
    """
    path = require_file(path, "config file")
    suffix = path.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise ValueError(f"{path}: a config file must end in .json or .toml, got {suffix or 'no suffix'!r}")
    try:
        if suffix == ".json":
            values = json.loads(path.read_text(encoding="utf-8"))
        else:
            values = _toml().loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except ValueError as e:  # tomllib.TOMLDecodeError is a ValueError
        raise ValueError(f"{path}: {e}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a config file holds one table of key = value pairs")
    try:
        return _normalise_keys(values)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _toml():
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ValueError("reading TOML needs Python 3.11+ (tomllib) or the 'tomli' package") from None
    return tomllib


def _check_type(name: str, value: Any, hint: Any) -> Any:
    options = typing.get_args(hint) or (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ValueError(f"config key {name!r} must not be empty (null)")
    for kind in options:
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, (str, os.PathLike)):
            return str(value)
        if typing.get_origin(kind) is dict and isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return dict(value)
    names = " or ".join("null" if k is type(None) else getattr(k, "__name__", str(k)) for k in options)
    raise ValueError(f"config key {name!r} must be {names}, got {value!r}")


def _choice(name: str, value: Any, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _at_least(name: str, value: int, low: int) -> None:
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def _message_key(message: str) -> str | None:
    """The config key an error message is about (``"lr must be ..."``, ``"options: ..."``,
    ``"config key 'epochs' must be ..."``), or ``None``."""
    quoted = re.match(r"config key '(\w+)'", message)
    if quoted:
        return quoted.group(1)
    for key in sorted(TranslationConfig.keys(), key=len, reverse=True):
        if message.startswith((key + ":", key + " ")):
            return key
    return None


# ----------------------------------------------------------------------------------------------------------------
# Corpora


@dataclass
class Split:
    """Token lists of one split, and the references BLEU compares against.

    :param references: one string per pair: the raw reference (Multi30k ``raw/``), else the target side joined
        (synthetic) or detokenised; ``None`` when not asked for (training and validation splits).
    :param dropped: pairs dropped because one side was longer than ``max_len`` (training split only).
    :param total: pairs read (kept + dropped), before any ``*_size`` subset.
    """

    name: str
    source: list[list[str]]
    target: list[list[str]]
    references: list[str] | None
    description: str
    dropped: int = 0
    total: int = 0
    max_len: int | None = None

    def __len__(self) -> int:
        return len(self.source)

    def drop_report(self) -> str:
        return f"dropped {self.dropped} of {self.total} pairs longer than {self.max_len}"


@dataclass
class Corpora:
    train: Split
    val: Split
    test: Split | None = None


def _filter(source: list, target: list, refs: list | None, max_len: int | None) -> tuple[list, list, Any, int]:
    if max_len is None:
        return source, target, refs, 0
    keep = [i for i in range(len(source)) if len(source[i]) <= max_len and len(target[i]) <= max_len]
    kept_refs = None if refs is None else [refs[i] for i in keep]
    return [source[i] for i in keep], [target[i] for i in keep], kept_refs, len(source) - len(keep)


def _detok_refs(target: list[list[str]], lang: str) -> list[str]:
    from pyro_attention.metrics import detokenize

    return [detokenize(t, lang) for t in target]


def load_split(
    config: TranslationConfig,
    which: str,
    *,
    max_len: int | None = None,
    size: int | None = None,
    src_file: str | os.PathLike | None = None,
    tgt_file: str | os.PathLike | None = None,
    ref_file: str | os.PathLike | None = None,
    references: bool = True,
) -> Split:
    """One split (``"train"``, ``"val"`` or ``"test"``) of the configured corpus, or explicit files.

    :param max_len: drop pairs with a side longer than this (counted in ``dropped``).
    :param size: keep the first ``size`` pairs (after ``max_len``); synthetic: the number generated.
    :param src_file: with ``tgt_file``, read these parallel files instead (``ref_file``: raw references, one a
        line; default: the detokenised target side).
    :param references: also prepare the BLEU references (``False``: ``Split.references`` is ``None``).
    """
    if src_file is not None or tgt_file is not None:
        if src_file is None or tgt_file is None:
            raise ValueError("give both a source and a target file (--src-file and --tgt-file)")
        corpus = read_parallel(src_file, tgt_file, lowercase=config.lowercased)
        refs = _references(ref_file, corpus.lines, corpus.target, config.tgt) if references else None
        desc = f"{src_file} / {tgt_file}"
        return _finish(which, corpus.source, corpus.target, refs, desc, max_len, size)
    _choice("split", which, SPLITS)
    if config.data == "synthetic":
        n = size if size is not None else SYNTHETIC_SIZES[which]
        data = make_synthetic_translation(
            n,
            seed=config.data_seed + SPLITS.index(which),
            vocab_size=config.synthetic_vocab,
            min_len=config.synthetic_min_len,
            max_len=config.synthetic_max_len,
        )
        refs = [" ".join(t) for t in data.target] if references else None
        desc = f"synthetic {which} (seed {config.data_seed + SPLITS.index(which)}, vocabulary {config.synthetic_vocab})"
        return _finish(which, data.source, data.target, refs, desc, max_len, None)
    if config.data == "multi30k":
        root = data_dir(config.data_dir)
        name = getattr(config, f"{which}_split") or {"train": "train", "val": "val", "test": "test_2016_flickr"}[which]
        src_path, tgt_path = multi30k_paths(root, name, config.src, config.tgt)
        corpus = read_parallel(src_path, tgt_path)
        if references:
            raw = multi30k_paths(root, name, config.src, config.tgt, tokenized=False)[1]
            refs = _references(raw, corpus.lines, corpus.target, config.tgt)
        else:
            refs = None
        desc = f"Multi30k {name} {config.src}-{config.tgt} ({src_path.parent})"
        return _finish(which, corpus.source, corpus.target, refs, desc, max_len, size)
    if config.data == "iwslt14":
        root = data_dir(config.data_dir)
        name = "test" if which == "test" else "valid"
        corpus = read_parallel(*iwslt14_paths(root, name, config.bpe, config.src, config.tgt))
        source, target = corpus.source, corpus.target
        held = config.val_size or IWSLT14_HELD_OUT
        if which != "test":
            if held >= len(source):
                raise ValueError(f"val_size {held} leaves no IWSLT14 'valid' pair for training ({len(source)} in all)")
            source, target = (source[:-held], target[:-held]) if which == "train" else (source[-held:], target[-held:])
        refs = _detok_refs(target, config.tgt) if references else None
        part = {"train": f"'valid' without its last {held} pairs", "val": f"last {held} pairs of 'valid'",
                "test": "'test'"}[which]
        desc = f"IWSLT14 {config.src}-{config.tgt}{' BPE' if config.bpe else ''}: {part}"
        return _finish(which, source, target, refs, desc, max_len, size if which != "val" else None)
    # parallel
    src_path, tgt_path = getattr(config, f"{which}_src"), getattr(config, f"{which}_tgt")
    if src_path is None or tgt_path is None:
        raise ValueError(
            f"data 'parallel' has no {which} files: give --{which}-src and --{which}-tgt in the config, or "
            f"evaluate with --src-file and --tgt-file"
        )
    corpus = read_parallel(src_path, tgt_path)
    refs = _detok_refs(corpus.target, config.tgt) if references else None
    return _finish(which, corpus.source, corpus.target, refs, f"{src_path} / {tgt_path}", max_len, size)


def _references(ref_file: Any, lines: list[int], target: list[list[str]], lang: str) -> list[str]:
    if ref_file is None:
        return _detok_refs(target, lang)
    raw = read_lines(ref_file)
    if lines and lines[-1] > len(raw):
        raise ValueError(f"{ref_file}: {len(raw)} reference lines, fewer than the {lines[-1]} source lines")
    return [raw[n - 1] for n in lines]


def _finish(which, source, target, refs, desc, max_len, size) -> Split:  # noqa: ANN001
    total = len(source)
    source, target, refs, dropped = _filter(source, target, refs, max_len)
    if size is not None:
        source, target, refs = source[:size], target[:size], None if refs is None else refs[:size]
    if not source:
        why = f": all {dropped} pairs have a side longer than max_len {max_len}" if dropped == total > 0 else ""
        raise ValueError(f"{which} split ({desc}) holds no sentence pairs{why}")
    return Split(which, source, target, refs, desc, dropped, total, max_len)


def load_corpora(config: TranslationConfig, log: Log | None = _log, test: bool = False) -> Corpora:
    """Train and validation (and, with ``test=True``, test, with its BLEU references) splits of ``config``'s
    corpus.

    Training pairs longer than ``max_len`` are dropped, and ``log`` reports how many ("dropped N of M pairs
    longer than L"); validation and test splits are kept whole (``val_size`` / ``test_size`` take the first
    pairs).
    """
    train = load_split(config, "train", max_len=config.max_len, size=config.train_size, references=False)
    val = load_split(config, "val", size=config.val_size, references=False)
    tst = load_split(config, "test", size=config.test_size) if test else None
    if log is not None:
        log(f"train: {train.description}: {len(train)} pairs; {train.drop_report()}")
        log(f"val: {val.description}: {len(val)} pairs")
        if tst is not None:
            log(f"test: {tst.description}: {len(tst)} pairs")
    return Corpora(train, val, tst)


def build_vocabs(config: TranslationConfig, train: Split) -> tuple[Vocab, Vocab]:
    """Source and target :class:`~pyro_attention.data.Vocab` of the training side (``min_freq``, ``max_vocab``).

    :raises ValueError: when a vocabulary would hold no word at all (only ``<pad> <unk> <s> </s>``): every token
        would be ``<unk>``.
    """
    vocabs = (Vocab.build(train.source, config.min_freq, config.max_vocab),
              Vocab.build(train.target, config.min_freq, config.max_vocab))
    for side, vocab in zip(("source", "target"), vocabs, strict=True):
        if len(vocab) <= len(SPECIALS):
            raise ValueError(
                f"min_freq: no {side} word of {train.description} occurs {config.min_freq} times or more, so the "
                f"{side} vocabulary would hold only {list(SPECIALS)} and every token would be <unk>; lower "
                f"--min-freq (the most frequent {side} word occurs {_top_count(getattr(train, side))} times)"
            )
    return vocabs


def _top_count(sentences: list[list[str]]) -> int:
    from collections import Counter

    counts = Counter(token for sentence in sentences for token in sentence)
    return max(counts.values(), default=0)


def make_batches(split: Split, src_vocab: Vocab, tgt_vocab: Vocab, batch_size: int) -> list[TranslationBatch]:
    """Length-bucketed batches of ``split`` (fixed composition; :func:`train` permutes their order per epoch)."""
    return bucket_batches(
        [src_vocab.encode(s) for s in split.source], [tgt_vocab.encode(t) for t in split.target], batch_size
    )


# ----------------------------------------------------------------------------------------------------------------
# Model


def build_pair(config: TranslationConfig, src_vocab: Vocab, tgt_vocab: Vocab) -> tuple[Seq2Seq, AlignmentPair]:
    """The :class:`~pyro_attention.networks.Seq2Seq` network of ``config``'s sizes and its model/guide pair.

    Initial weights come from torch's global RNG (seed it first for reproducibility; :func:`train` does).
    """
    network = Seq2Seq(
        len(src_vocab),
        len(tgt_vocab),
        embedding_size=config.embedding,
        encoder_size=config.encoder,
        decoder_size=config.decoder,
        attention_size=config.attention,
        layers=config.layers,
        dropout=config.dropout,
        chunk_size=config.chunk_size or None,
        output=config.output,
        attention=config.attention_type,
        input_feed=config.input_feed,
        bridge=config.bridge,
        init=config.init,
    )
    pair = make_pair(config.model, network, config.estimator, **(config.options or {}))
    return network, pair


# ----------------------------------------------------------------------------------------------------------------
# Checkpoints


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``state`` with ``torch.save`` atomically: a temporary file in the same folder, flushed and fsync-ed,
    then ``os.replace``-d onto ``path``.  On any failure the temporary file is removed and an existing ``path``
    is left as it was; a failure to write is a :class:`~pyro_attention.outputs.WriteError` naming ``path``.
    """
    path = Path(path)
    with writing(path):  # a read-only folder, a full disk: "cannot write PATH: CAUSE", the old file intact
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
            with os.fdopen(fd, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    try:  # make the rename itself durable (POSIX); not possible everywhere
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return path
    try:
        os.fsync(dir_fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dir_fd)
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _rng_state() -> dict[str, Any]:
    import random

    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [s.cpu() for s in torch.cuda.get_rng_state_all()]
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import random

    torch.set_rng_state(state["torch"])
    version, keys, gauss = state["python"]
    random.setstate((version, tuple(keys), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class Checkpoint:
    """A loaded checkpoint: its config, vocabularies, the pair (network weights loaded) and the raw dict."""

    path: Path
    config: TranslationConfig
    src_vocab: Vocab
    tgt_vocab: Vocab
    network: Seq2Seq
    pair: AlignmentPair
    state: dict[str, Any]


def _read_checkpoint(path: Path) -> dict[str, Any]:
    if path.is_dir():
        candidates = [path / "best.pt", path / "last.pt"]
        found = next((p for p in candidates if p.is_file()), None)
        if found is None:
            raise FileNotFoundError(f"{path}: holds neither best.pt nor last.pt")
        path = found
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; a truncated copy has lost its directory
        raise ValueError(
            f"{path}: cannot be read as a checkpoint (not a torch zip archive: a truncated or damaged copy, or "
            "another kind of file)"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a damaged file
        raise ValueError(f"{path}: cannot be read as a checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not a {CHECKPOINT_FORMAT} file")
    missing = [key for key in _REQUIRED_KEYS if key not in state]
    if missing:
        raise ValueError(f"{path}: a damaged checkpoint: the entries {missing} are missing (a partial or edited copy; "
                         "use another checkpoint of the run, e.g. best.pt or last.pt)")
    if not isinstance(state["network"], dict):
        raise ValueError(f"{path}: a damaged checkpoint: 'network' is a {type(state['network']).__name__}, not weights")
    bad = [name for name, t in state["network"].items()
           if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise ValueError(f"{path}: the weights {bad[:5]}{' ...' if len(bad) > 5 else ''} hold NaN or infinite values "
                         "(training diverged before this checkpoint was written); use an earlier checkpoint")
    state["_path"] = str(path)
    return state


#: what every checkpoint holds (the rest has defaults for older formats)
_REQUIRED_KEYS = ("config", "src_vocab", "tgt_vocab", "network", "epoch", "step")


def load_checkpoint(path: str | os.PathLike, device: str | None = None) -> Checkpoint:
    """Load a checkpoint file (or a run folder: its ``best.pt``, else ``last.pt``) into a ready pair, on ``device``
    (default: the CPU, whatever device it was trained on)."""
    state = _read_checkpoint(Path(path))
    config = TranslationConfig.from_dict({**state["config"], "device": "cpu"})
    src_vocab, tgt_vocab = _vocab(state, "src_vocab"), _vocab(state, "tgt_vocab")
    network, pair = build_pair(config, src_vocab, tgt_vocab)
    _load_weights(pair, state)
    checkpoint = Checkpoint(Path(state["_path"]), config, src_vocab, tgt_vocab, network, pair, state)
    if device is not None:
        _move(checkpoint, device)
        checkpoint.config = config.replace(device=device)
    network.eval()
    return checkpoint


def _vocab(state: dict[str, Any], key: str) -> Vocab:
    """The checkpoint's source (``"src_vocab"``) or target (``"tgt_vocab"``) vocabulary; a damaged one is a
    ``ValueError`` naming the checkpoint and the vocabulary."""
    what = {"src_vocab": "source vocabulary", "tgt_vocab": "target vocabulary"}[key]
    return Vocab.from_json(state[key], f"checkpoint {state.get('_path', '(in memory)')}: {what} is damaged")


def _load_weights(pair: AlignmentPair, state: dict[str, Any]) -> None:
    """The network's weights and those of the modules the pair owns (structure potentials, scale heads)."""
    try:
        pair.load_state_dict({"network": state["network"], **state.get("pair_modules", {})})
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"{state.get('_path', 'checkpoint')}: weights do not fit {pair!r}: {e}") from None


def _check_param_store(state: dict[str, Any]) -> None:
    """Every parameter the checkpoint's param store held is back (restored through the pair's modules)."""
    live = dict(pyro.get_param_store().named_parameters())
    for name, value in state.get("param_store", {}).items():
        if name not in live or not torch.equal(live[name].detach().cpu(), value.cpu()):
            raise ValueError(
                f"{state.get('_path', 'checkpoint')}: Pyro parameter {name!r} of the checkpoint is not restored by "
                "the pair's modules (a pyro.param outside pair.modules()?)"
            )


def _tensorboard(config: TranslationConfig, out: Path) -> Any:
    """A ``SummaryWriter`` on ``out/tensorboard`` when ``config.tensorboard`` asks for one (``None``: when the
    ``tensorboard`` package is installed)."""
    if config.tensorboard is False:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard not installed
        if config.tensorboard:
            raise ValueError("tensorboard: the 'tensorboard' package is not installed (pip install tensorboard)") \
                from None
        return None
    return SummaryWriter(str(out / "tensorboard"))


def _vocab_difference(what: str, old: Vocab, new: Vocab) -> str | None:
    if old == new:
        return None
    first = next((i for i, (a, b) in enumerate(zip(old.itos, new.itos, strict=False)) if a != b), None)
    where = (
        f"first difference at id {first}: {old.itos[first]!r} vs {new.itos[first]!r}"
        if first is not None
        else "one is a prefix of the other"
    )
    return f"{what}: checkpoint {len(old)} entries, this run {len(new)} ({where})"


def check_compatible(state: dict[str, Any], config: TranslationConfig, src_vocab: Vocab, tgt_vocab: Vocab) -> None:
    """Refuse (``ValueError`` naming every difference) a checkpoint of another model, sizes or vocabularies."""
    old = state["config"]
    if state.get("package_version") != __version__:
        raise ValueError(
            f"{state.get('_path', 'checkpoint')} was written by pyro-attention {state.get('package_version')}, this "
            f"is {__version__}: resuming across versions is refused (evaluate and translate still read it; use "
            "another --out, or --overwrite to start afresh)"
        )
    defaults = {f.name: f.default for f in dataclasses.fields(TranslationConfig)}
    diffs = [
        f"{key}: checkpoint {old.get(key, defaults[key])!r}, this run {getattr(config, key)!r}"
        for key in STRUCTURAL_KEYS
        if old.get(key, defaults[key]) != getattr(config, key)
    ]
    for what, saved, new in (("source vocabulary", _vocab(state, "src_vocab"), src_vocab),
                             ("target vocabulary", _vocab(state, "tgt_vocab"), tgt_vocab)):
        diff = _vocab_difference(what, saved, new)
        if diff:
            diffs.append(diff)
    if diffs:
        raise ValueError(
            f"{state.get('_path', 'checkpoint')} does not belong to this run, refusing to resume: "
            + "; ".join(diffs)
            + " (use another --out, or --overwrite to start afresh)"
        )


# ----------------------------------------------------------------------------------------------------------------
# Training


@dataclass
class Validation:
    """Validation perplexity of one pass: exact, or an importance-weighted bound (``exact=False``)."""

    nll: float
    ppl: float
    exact: bool
    method: str
    tokens: int

    def label(self) -> str:
        return "PPL" if self.exact else "PPL bound (importance-weighted; an upper bound in expectation)"


def validate(pair: AlignmentPair, batches: Iterable[TranslationBatch], num_samples: int = 20) -> Validation:
    """Perplexity over ``batches`` with the network in eval mode: exact by enumeration for the categorical pairs
    and soft attention; for the Dirichlet pair the ``num_samples``-sample importance-weighted bound.
    """
    from pyro_attention.inference import log_likelihood

    net = pair.network
    was_training = net.training
    net.eval()
    total, tokens, exact, method = 0.0, 0, True, ""
    try:
        for batch in batches:
            ll = log_likelihood(pair, batch, num_samples=num_samples)
            total += float(ll.per_example.sum())
            tokens += int(ll.num_tokens.sum())
            exact, method = exact and ll.exact, ll.method
    finally:
        net.train(was_training)
    nll = -total / max(tokens, 1)
    return Validation(nll, math.exp(nll) if nll < _MAX_EXP else math.inf, exact, method, tokens)


#: ``math.exp`` overflows above this (a diverged model's perplexity is infinite, not an ``OverflowError``)
_MAX_EXP = math.log(torch.finfo(torch.float64).max)


@dataclass
class TrainResult:
    """What :func:`train` leaves: the trained pair (last epoch's weights), vocabularies and counters."""

    pair: AlignmentPair
    network: Seq2Seq
    src_vocab: Vocab
    tgt_vocab: Vocab
    out: Path
    epoch: int
    step: int
    best_metric: float
    best_epoch: int
    lr: float
    history: dict[str, Any]
    stopped_early: bool = False


def _empty_history() -> dict[str, Any]:
    return {"steps": {k: [] for k in ("epoch", "step", "loss", "tokens", "lr", "seconds")},
            "epochs": {k: [] for k in ("epoch", "step", "val_nll", "val_ppl", "val_exact", "lr", "seconds")}}


def _epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator that orders the batches of ``epoch``: a function of ``(seed, epoch)`` only."""
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch)


def _write_csv(path: Path, history: dict[str, Any]) -> None:
    """Rewrite the CSV from ``history`` (step rows and epoch rows, in the order they happened).

    A resumed run starts from the checkpoint's history, so rows of an interrupted epoch are dropped.
    """
    rows = []
    steps, epochs = history["steps"], history["epochs"]
    for i in range(len(steps["step"])):
        rows.append(_csv_row("step", **{k: v[i] for k, v in steps.items()}))
    for i in range(len(epochs["epoch"])):
        rows.append(_csv_row("epoch", **{k: v[i] for k, v in epochs.items()}))
    rows.sort(key=lambda r: (r["step"], r["kind"] == "epoch"))
    tmp = path.with_name(path.name + ".tmp")
    with writing(path):
        try:
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, CSV_FIELDS)
                writer.writeheader()
                writer.writerows(rows)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise


def _csv_row(kind: str, **values: Any) -> dict[str, Any]:
    """A row of ``history.csv``; its ``epoch`` counts from 1, as the log lines and the progress bar do (the
    ``history`` dict keeps the epoch's index, from 0: a step's epoch in progress, an epoch row's epoch done)."""
    row = {k: "" for k in CSV_FIELDS}
    row["kind"] = kind
    if "epoch" in values:
        values["epoch"] += 1
    for key, value in values.items():
        row[key] = f"{value:.9g}" if isinstance(value, float) else value
    return row


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by SIGINT (Ctrl-C) or SIGTERM after the current step, with ``last.pt`` written.

    :ivar checkpoint: the path of the checkpoint that was written.
    :ivar signal_name: ``"SIGINT"`` or ``"SIGTERM"``.
    :ivar epoch: the epochs completed (the message counts epochs from 1, as the log and the progress bar do).
    :ivar step: the steps completed.
    """

    def __init__(self, checkpoint: Path, signal_name: str, epoch: int, step: int, position: int = 0) -> None:
        where = f"in epoch {epoch + 1}, {position} batches in" if position else f"after epoch {epoch}"
        super().__init__(f"{signal_name}: stopped after step {step} ({where}); {checkpoint} written")
        self.checkpoint, self.signal_name, self.epoch, self.step = checkpoint, signal_name, epoch, step


def train(
    config: TranslationConfig,
    progress: bool = True,
    *,
    resume: bool = False,
    overwrite: bool = False,
    log: Log | None = _log,
) -> TrainResult:
    """Train ``config``'s pair by SVI and write checkpoints and ``history.csv`` to ``config.out_dir``.

    Every epoch: the length-bucketed batches in an order drawn from ``(seed, epoch)``, one
    ``SVI(pair.model, pair.guide, FusedClippedAdam, pair.elbo()).step`` each (``pair.warmup_guide`` for the first
    ``warmup_steps``); then validation perplexity; the learning rate is multiplied by ``lr_decay`` when it did not
    improve on the best; ``last.pt`` is written, and ``best.pt`` when it improved; training stops early after
    ``patience`` epochs in a row without improvement.

    :param resume: continue from ``last.pt`` in the output folder, restoring network, optimiser, RNG states,
        counters and history; the checkpoint must have the same model, estimator, sizes and vocabularies.
    :param overwrite: start afresh even if the output folder holds a checkpoint (otherwise refused).
    :raises FileNotFoundError: ``resume`` without a ``last.pt``.
    :raises FileExistsError: a fresh run into a folder that holds ``last.pt`` without ``overwrite``.
    :raises ValueError: a checkpoint that does not fit this run (naming every difference).
    :raises TrainingInterrupted: on SIGINT (Ctrl-C) or SIGTERM (one process): the current step is finished,
        ``last.pt`` written with the position in the epoch, and the run resumes exactly from there with
        ``resume=True``.  A second signal abandons the step at once (the previous ``last.pt`` is intact).
    """
    rank = init_from_env()[0]
    with _run_lock(config.out_dir) if rank == 0 else contextlib.nullcontext():
        return _train(config, progress, resume=resume, overwrite=overwrite, log=log)


@contextlib.contextmanager
def _run_lock(out: Path):  # noqa: ANN202 - a context manager
    """Hold ``out/.lock`` (``flock``, released when the process ends, however it ends) while training writes to
    ``out``; a second writer is refused with the holder's PID."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        yield
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        handle = open(out / ".lock", "a+", encoding="utf-8")
    except OSError as e:
        raise write_error(out / ".lock", e) from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise FileExistsError(
                f"{out} is being written by another training process (PID {holder}, lock {out / '.lock'}); wait for "
                "it to finish, stop it, or use another --out"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()  # releases the lock


def _train(
    config: TranslationConfig,
    progress: bool,
    *,
    resume: bool,
    overwrite: bool,
    log: Log | None,
) -> TrainResult:
    """The run: prepared by :func:`_prepare`, trained by the one loop (:class:`~pyro_attention.inference.loop.
    Trainer`) with translation's callbacks."""
    run, start = _prepare(config, resume=resume, overwrite=overwrite, log=log)
    plateau = PlateauDecay(run.optim, start["lr"], config.lr_decay, lambda _: run.val.ppl, best=start["best"],
                           best_epoch=start["best_epoch"], bad=start["bad"])
    early = EarlyStopping(plateau, config.patience, run.log)
    stopped = early.reached()
    remaining = 0 if stopped else max(max(config.epochs - start["epoch"], 0) * len(run.train_batches)
                                      - start["position"], 0)
    if remaining == 0 and not stopped:
        run.log(f"nothing to do: {start['epoch']} of {config.epochs} epochs done (raise --epochs to train further)")
    checkpoints = _Checkpointing(run, plateau)
    callbacks = [_Validate(run), plateau, _History(run, plateau), checkpoints]
    if run.rank == 0:
        callbacks.append(CsvLogger(run.csv_path, CSV_FIELDS, append=True,
                                   step_row=lambda _: _last_row("step", run.history["steps"]),
                                   epoch_row=lambda _: _last_row("epoch", run.history["epochs"])))
        callbacks.append(_TensorBoard(run))
    callbacks += [
        ProgressBar(type(run.pair).__name__, total=remaining, disable=_no_bar(progress and run.rank == 0),
                    dynamic_ncols=True),
        _EpochLog(run, plateau), early, _StopOnSignal(run, checkpoints),
    ]
    trainer = Trainer(_svi_step(run, plateau), run.epoch_batches, config.epochs, callbacks, epoch=start["epoch"],
                      global_step=start["step"], position=start["position"], epoch_loss=start["epoch_loss"],
                      epoch_tokens=start["epoch_tokens"]).fit()
    run.log(f"best validation PPL {plateau.best:.4f} at epoch {plateau.best_epoch + 1}; checkpoints in {run.out}")
    return TrainResult(run.pair, run.network, run.src_vocab, run.tgt_vocab, run.out, trainer.epoch, trainer.step,
                       plateau.best, plateau.best_epoch, plateau.lr, run.history, early.stopped)


@dataclass
class _Run:
    """A translation run being trained: what :func:`_train`'s callbacks share."""

    config: TranslationConfig
    rank: int
    world_size: int
    log: Log
    src_vocab: Vocab
    tgt_vocab: Vocab
    network: Seq2Seq
    pair: AlignmentPair
    optim: FusedClippedAdam
    train_batches: list[TranslationBatch]
    val_batches: list[TranslationBatch]
    history: dict[str, Any]
    val: Validation | None = None  # of the epoch just finished

    @property
    def out(self) -> Path:
        return self.config.out_dir

    @property
    def last_path(self) -> Path:
        return self.out / "last.pt"

    @property
    def csv_path(self) -> Path:
        return self.out / "history.csv"

    def epoch_batches(self, epoch: int) -> list[TranslationBatch]:
        """The batches of ``epoch`` in its order (drawn from ``(seed, epoch)``), the network in training mode."""
        self.network.train()
        order = torch.randperm(len(self.train_batches), generator=_epoch_generator(self.config.seed, epoch)).tolist()
        return [self.train_batches[i] for i in order]


def _prepare(
    config: TranslationConfig, *, resume: bool, overwrite: bool, log: Log | None
) -> tuple[_Run, dict[str, Any]]:
    """Data, vocabularies, the pair and its optimiser, restored from ``last.pt`` when resuming; the output folder
    made and ``history.csv`` (re)written.  Returns the run and the counters to start from."""
    rank, world_size = init_from_env()
    device = resolve_device(config.device, int(os.environ.get("LOCAL_RANK", rank)) if world_size > 1 else None)
    log = (log or (lambda _: None)) if rank == 0 else (lambda _: None)  # only process 0 logs and writes
    if config.threads:
        torch.set_num_threads(config.threads)
    saved = _saved_state(config, resume=resume, overwrite=overwrite)
    corpora = load_corpora(config, log)
    src_vocab, tgt_vocab = build_vocabs(config, corpora.train)
    if saved is not None:
        check_compatible(saved, config, src_vocab, tgt_vocab)
        changed = [k for k, v in config.to_dict().items() if saved["config"].get(k) != v and k not in ("epochs",)]
        if changed:
            log("note: changed since the checkpoint, applied from here on: " + ", ".join(
                f"{k} {saved['config'].get(k)!r} -> {getattr(config, k)!r}" for k in changed)
                + (" (the learning rate restarts at the new --lr)" if "lr" in changed else ""))
    log(f"vocabularies: source {len(src_vocab)}, target {len(tgt_vocab)} (min_freq {config.min_freq}, "
        f"max_vocab {config.max_vocab})")
    train_batches = [b.to(device) for b in make_batches(corpora.train, src_vocab, tgt_vocab, config.batch_size)]
    val_batches = [b.to(device) for b in make_batches(corpora.val, src_vocab, tgt_vocab, max(config.batch_size, 64))]
    pyro.clear_param_store()
    pyro.set_rng_seed(config.seed)
    network, pair = build_pair(config, src_vocab, tgt_vocab)
    for name, module in pair.modules().items():  # every parameter in the store before the first step
        module.to(device)
        pyro.module(name, module)
    start = dict(epoch=0, step=0, best=math.inf, best_epoch=-1, bad=0, lr=config.lr, position=0, epoch_loss=0.0,
                 epoch_tokens=0)
    if saved is not None:
        _load_weights(pair, saved)
        _check_param_store(saved)
        start.update(epoch=saved["epoch"], step=saved["step"], best=saved["best_metric"],
                     best_epoch=saved["best_epoch"], bad=saved["bad_epochs"], lr=saved["lr"],
                     position=saved.get("position", 0), epoch_loss=saved.get("epoch_loss", 0.0),
                     epoch_tokens=saved.get("epoch_tokens", 0))
        pair.set_step(start["step"])  # KL annealing continues where it stopped (a no-op for the other pairs)
    broadcast_parameters()
    if saved is not None and saved["config"].get("lr") != config.lr:
        start["lr"] = config.lr  # a new --lr replaces the saved (possibly decayed) one
    optim = _optimiser(config, start["lr"], saved)
    run = _Run(config, rank, world_size, log, src_vocab, tgt_vocab, network, pair, optim, train_batches, val_batches,
               saved["history"] if saved is not None else _empty_history())
    if saved is not None:
        _restore_rng(run, saved, start)
    _make_out(run)
    return run, start


def _saved_state(config: TranslationConfig, *, resume: bool, overwrite: bool) -> dict[str, Any] | None:
    """``last.pt`` of the output folder when resuming; a fresh run into a folder that holds one is refused
    (unless ``overwrite``)."""
    last_path = config.out_dir / "last.pt"
    if resume:
        if not last_path.is_file():
            raise FileNotFoundError(f"cannot resume: {last_path} does not exist (train without --resume first)")
        return _read_checkpoint(last_path)
    if last_path.exists() and not overwrite:
        raise FileExistsError(
            f"{config.out_dir} already holds a checkpoint ({last_path}); pass --resume to continue it, --overwrite to "
            f"start afresh, or choose another --out"
        )
    return None


def _optimiser(config: TranslationConfig, lr: float, saved: dict[str, Any] | None) -> FusedClippedAdam:
    """The optimiser at ``lr``, its state restored from ``saved`` with this run's ``lr`` and ``clip_norm``."""
    optim = FusedClippedAdam({"lr": lr, "clip_norm": config.clip_norm})
    if saved is not None:
        optim.set_state(saved["optim"])
        for state in optim._state_waiting_to_be_consumed.values():  # the optimiser's own copies of the settings
            for group in state["param_groups"]:
                group["lr"], group["clip_norm"] = lr, config.clip_norm
    return optim


def _restore_rng(run: _Run, saved: dict[str, Any], start: dict[str, Any]) -> None:
    """This process's random states of the checkpoint (written by as many processes as resume it), and say so."""
    ranks, written_by = saved.get("rng_ranks"), saved.get("world_size", 1)
    if written_by != run.world_size:
        raise ValueError(
            f"{run.last_path}: written by {written_by} process(es), resumed by {run.world_size}: the shards and "
            "sampling streams cannot continue exactly; resume with the same number of processes"
        )
    _set_rng_state(ranks[run.rank] if run.world_size > 1 else saved["rng"])
    epoch, position, epochs = start["epoch"], start["position"], run.config.epochs
    run.log(  # epochs counted from 1, as in the progress bar and the "epoch E/N" lines
        f"resumed from {run.last_path}: "
        + (f"in epoch {epoch + 1}/{epochs}, {position} batches in" if position else f"after epoch {epoch}/{epochs}")
        + f" (step {start['step']}), best validation {start['best']:.4g}, lr {start['lr']:.3g}"
    )


def _make_out(run: _Run) -> None:
    """Process 0: the output folder, without the temporary files of an interrupted save, and ``history.csv``
    rewritten from the history (a resumed run drops the rows of an interrupted epoch)."""
    if run.rank != 0:
        return
    with writing(run.out):
        run.out.mkdir(parents=True, exist_ok=True)
    for stale in run.out.glob(".*.pt.*.tmp"):  # a save that a crash interrupted (the checkpoint itself is intact)
        with contextlib.suppress(OSError):
            stale.unlink(missing_ok=True)
    _write_csv(run.csv_path, run.history)


def _svi_step(run: _Run, plateau: PlateauDecay) -> SVIStep:
    """One SVI step on this process's shard of a batch (the warm-up guide first), per token of the global batch."""
    config, elbo, pair = run.config, run.pair.elbo(), run.pair
    return SVIStep(
        DataParallelSVI(pair.model, pair.guide, run.optim, elbo),
        tokens=lambda batch: int(batch.target_mask.sum()),  # of the global batch: every process shards the same one
        diverged=lambda loss, t: (
            f"training diverged: non-finite loss {loss} at step {t.step + 1} (epoch {t.epoch + 1}) with lr "
            f"{plateau.lr:g}; lower --lr (or --clip-norm) and start again with --overwrite, or --resume from "
            f"{run.last_path} with the lower --lr"
        ),
        warmup=DataParallelSVI(pair.model, pair.warmup_guide, run.optim, elbo) if config.warmup_steps else None,
        warmup_steps=config.warmup_steps,
        shard=lambda batch: shard(batch, run.rank, run.world_size),
    )


def _last_row(kind: str, columns: dict[str, list]) -> dict[str, Any]:
    """The last entry of a history table as a ``history.csv`` row (``epoch`` counted from 1)."""
    return _csv_row(kind, **{k: v[-1] for k, v in columns.items()})


class _Validate(Callback):
    """After every epoch: validation perplexity (computed by process 0, shared with the others) as ``run.val``."""

    def __init__(self, run: _Run) -> None:
        self.run = run

    def on_epoch_end(self, trainer: Trainer) -> None:
        run = self.run
        run.val = broadcast_object(validate(run.pair, run.val_batches, run.config.num_samples) if run.rank == 0
                                   else None)


class _History(Callback):
    """The history a checkpoint keeps (and ``history.csv`` shows): a row per step and per epoch."""

    def __init__(self, run: _Run, plateau: PlateauDecay) -> None:
        self.run, self.plateau = run, plateau

    def _append(self, table: str, values: tuple) -> None:
        for key, value in zip(self.run.history[table], values, strict=True):
            self.run.history[table][key].append(value)

    def on_step_end(self, trainer: Trainer) -> None:
        self._append("steps", (trainer.epoch, trainer.step, trainer.loss, trainer.tokens, self.plateau.lr,
                               trainer.elapsed))

    def on_epoch_end(self, trainer: Trainer) -> None:
        val = self.run.val
        self._append("epochs", (trainer.epoch - 1, trainer.step, val.nll, val.ppl, val.exact, self.plateau.lr,
                                trainer.elapsed))


class _Checkpointing(Callback):
    """``last.pt`` every ``checkpoint_every`` steps inside an epoch and after every epoch; ``best.pt`` when the
    epoch improved.  Every process builds the state (gathering random states is a collective); process 0 writes."""

    def __init__(self, run: _Run, plateau: PlateauDecay) -> None:
        self.run, self.plateau = run, plateau

    def on_step_end(self, trainer: Trainer) -> None:
        every = self.run.config.checkpoint_every
        if every and trainer.step % every == 0 and trainer.mid_epoch:
            state = self.state(trainer, None)
            if self.run.rank == 0:
                save_checkpoint(state, self.run.last_path)

    def on_epoch_end(self, trainer: Trainer) -> None:
        state = self.state(trainer, self.run.val)
        if self.run.rank == 0:
            save_checkpoint(state, self.run.last_path)
            if self.plateau.improved:
                save_checkpoint(state, self.run.out / "best.pt")

    def state(self, trainer: Trainer, val: Validation | None) -> dict[str, Any]:
        """The checkpoint's contents now (``val``: the epoch's validation; ``None`` inside an epoch)."""
        run, plateau = self.run, self.plateau
        rng_ranks = gather_objects(_rng_state())  # a collective: every process takes part
        return {
            "format": CHECKPOINT_FORMAT,
            "format_version": 1,
            "package_version": __version__,
            "torch_version": str(torch.__version__),
            "pyro_version": str(pyro.__version__),
            "python_version": platform.python_version(),
            "config": run.config.to_dict(),
            "src_vocab": run.src_vocab.to_json(),
            "tgt_vocab": run.tgt_vocab.to_json(),
            "network": _on_cpu(run.network.state_dict()),
            "pair_modules": {name: _on_cpu(m.state_dict()) for name, m in run.pair.owned_modules().items()},
            "param_store": {name: p.detach().cpu().clone() for name, p in pyro.get_param_store().named_parameters()},
            "optim": _on_cpu(run.optim.get_state()),
            "rng": rng_ranks[0],
            "rng_ranks": rng_ranks if run.world_size > 1 else None,
            "world_size": run.world_size,
            "epoch": trainer.epoch,
            "step": trainer.step,
            "position": trainer.position,
            "epoch_loss": trainer.epoch_loss,
            "epoch_tokens": trainer.epoch_tokens,
            "metric": "val_ppl",
            "best_metric": plateau.best,
            "best_epoch": plateau.best_epoch,
            "bad_epochs": plateau.bad,
            "lr": plateau.lr,
            "val": dataclasses.asdict(val) if val is not None else None,
            "history": run.history,
        }


class _TensorBoard(Callback):
    """Process 0: loss, learning rate and tokens per second every step, validation every epoch, under
    ``out/tensorboard`` (when ``config.tensorboard`` asks for it: see :func:`_tensorboard`)."""

    def __init__(self, run: _Run) -> None:
        self.run, self.board = run, None

    def on_fit_start(self, trainer: Trainer) -> None:
        with writing(self.run.out / "tensorboard"):
            self.board = _tensorboard(self.run.config, self.run.out)

    def on_step_end(self, trainer: Trainer) -> None:
        if self.board is not None:
            steps = self.run.history["steps"]
            self.board.add_scalar("train/loss_per_token", trainer.loss, trainer.step)
            self.board.add_scalar("train/lr", steps["lr"][-1], trainer.step)
            self.board.add_scalar("train/tokens_per_s", trainer.seen / max(steps["seconds"][-1], 1e-9), trainer.step)

    def on_epoch_end(self, trainer: Trainer) -> None:
        if self.board is not None:
            self.board.add_scalar("val/nll_per_token", self.run.val.nll, trainer.step)
            self.board.add_scalar("val/ppl", self.run.val.ppl, trainer.step)
            self.board.flush()

    def on_fit_end(self, trainer: Trainer) -> None:
        if self.board is not None:
            self.board.close()


class _EpochLog(Callback):
    """The line every epoch logs: train loss, validation, best or the learning-rate decay."""

    def __init__(self, run: _Run, plateau: PlateauDecay) -> None:
        self.run, self.plateau = run, plateau

    def on_epoch_end(self, trainer: Trainer) -> None:
        val, plateau = self.run.val, self.plateau
        self.run.log(
            f"epoch {trainer.epoch}/{trainer.epochs} step {trainer.step}: train loss/token "
            f"{trainer.train_loss:.4f}, validation NLL/token {val.nll:.4f}, {val.label()} "
            f"{val.ppl:.4f}" + (" (best)" if plateau.improved else f", no improvement ({plateau.bad}); lr -> "
                                f"{plateau.lr:.3g}")
        )


class _StopOnSignal(Callback):
    """SIGINT / SIGTERM (one process) stop training after the current step: ``last.pt`` written (inside an epoch:
    with the position in it), :class:`TrainingInterrupted` raised.  A second signal abandons the step at once."""

    def __init__(self, run: _Run, checkpoints: _Checkpointing) -> None:
        self.run, self.checkpoints = run, checkpoints
        self.requests: Any = None
        self.flag: dict[str, str | None] = {"signal": None}

    def on_fit_start(self, trainer: Trainer) -> None:
        self.requests = stop_requests(self.run.world_size == 1)  # several processes: the launcher's handling
        self.flag = self.requests.__enter__()

    def on_step_end(self, trainer: Trainer) -> None:
        name, run = self.flag["signal"], self.run
        if name is not None and trainer.mid_epoch:
            save_checkpoint(self.checkpoints.state(trainer, None), run.last_path)
            run.log(f"{name}: stopped after step {trainer.step} (batch {trainer.position}/{trainer.epoch_length} of "
                    f"epoch {trainer.epoch + 1}/{trainer.epochs}); wrote {run.last_path}")
            raise TrainingInterrupted(run.last_path, name, trainer.epoch, trainer.step, trainer.position)

    def on_epoch_end(self, trainer: Trainer) -> None:
        name = self.flag["signal"]
        if name is not None and not trainer.should_stop and trainer.epoch < trainer.epochs:
            # arrived during the epoch's last step or its validation: the epoch's checkpoint is written
            self.run.log(f"{name}: stopped after epoch {trainer.epoch}/{trainer.epochs} (step {trainer.step}); wrote "
                         f"{self.run.last_path}")
            raise TrainingInterrupted(self.run.last_path, name, trainer.epoch, trainer.step)

    def on_fit_end(self, trainer: Trainer) -> None:
        if self.requests is not None:
            self.requests.__exit__(None, None, None)


# ----------------------------------------------------------------------------------------------------------------
# Evaluation and translation


def _as_checkpoint(checkpoint: Checkpoint | str | os.PathLike) -> Checkpoint:
    return checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)


def _move(ckpt: Checkpoint, device: str) -> None:
    where = resolve_device(device)
    for module in ckpt.pair.modules().values():
        module.to(where)


def _default_rule(pair: AlignmentPair, rule: str | None) -> str:
    from pyro_attention.inference.decode import DECODE_RULES

    if rule is not None:
        _choice("rule", rule, DECODE_RULES)
    return pair.check_rule(rule, decoding=True)  # None: the pair's default decoding rule


def _decode(
    ckpt: Checkpoint,
    sources: Sequence[Sequence[str]],
    beam: int,
    rule: str,
    k: int,
    length_penalty: float,
    max_decode_len: int | None,
    progress: bool,
) -> list[list[str]]:
    from pyro_attention.inference.decode import translate

    # sentences of similar length decoded together (beam search is batched), each with its own length limit
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[str]] = [[] for _ in sources]
    chunk = 64
    bar = tqdm(total=len(sources), disable=_no_bar(progress), desc="decoding", unit="sent", leave=False)
    for start in range(0, len(order), chunk):
        rows = order[start : start + chunk]
        ids = [ckpt.src_vocab.encode(sources[i]) for i in rows]
        width = max(len(x) for x in ids)
        source = torch.tensor([x + [0] * (width - len(x)) for x in ids], dtype=torch.long,
                              device=next(ckpt.network.parameters()).device)
        limits = [max_decode_len or 2 * len(sources[i]) + 10 for i in rows]
        hyps = translate(ckpt.pair, source, source != 0, beam, rule, k, limits, length_penalty, batch_size=chunk)
        for i, hyp in zip(rows, hyps, strict=True):
            out[i] = ckpt.tgt_vocab.decode(hyp)
        bar.update(len(rows))
    bar.close()
    return out


@torch.no_grad()
def evaluate(
    checkpoint: Checkpoint | str | os.PathLike,
    split: str = "test",
    *,
    src_file: str | os.PathLike | None = None,
    tgt_file: str | os.PathLike | None = None,
    ref_file: str | os.PathLike | None = None,
    data_dir: str | None = None,
    size: int | None = None,
    kmax: int = 5,
    beam: int = 5,
    rule: str | None = None,
    length_penalty: float = 0.0,
    max_decode_len: int | None = None,
    batch_size: int = 64,
    num_samples: int | None = None,
    bleu: bool = True,
    lowercase: bool | None = None,
    seed: int | None = 0,
    progress: bool = False,
    device: str | None = None,
) -> dict[str, Any]:
    """Perplexity, K-max perplexity, prior entropy and BLEU of a checkpoint on a split or on given files.

    :param split: ``"train"``, ``"val"`` or ``"test"`` of the corpus the checkpoint was trained on, unless
        ``src_file`` / ``tgt_file`` (and optionally raw ``ref_file``) are given.
    :param size: the first ``size`` pairs (synthetic: generate ``size``); default: the config's
        ``{split}_size`` (so ``split="val"`` scores what validation scored), else all.
    :param kmax: ``K`` of the K-max perplexity (categorical pairs; 0 skips it) and of ``rule="kmax"``.
    :param rule: decoding rule, ``"soft"``, ``"marginal"`` or ``"kmax"`` (default: ``"marginal"`` for the
        categorical pairs, ``"soft"`` otherwise).
    :param num_samples: importance samples of the Dirichlet pair's bound (default: the training config's).
    :param lowercase: case-insensitive BLEU (default: when the corpus is lower-cased, Multi30k and IWSLT14).
    :param seed: seeds Pyro's RNGs first (``pyro.set_rng_seed``) so that the Dirichlet pair's sampled bound is
        reproducible; ``None`` leaves them alone.
    :param device: where to evaluate (default: where the loaded checkpoint's network is, the CPU for a path).
    :returns: a dict with ``ppl`` (+ ``ppl_exact``, ``ppl_method``, ``nll``, ``tokens``), ``kmax_ppl``,
        ``prior_entropy`` (mean nats per target token), ``bleu`` and ``bleu_signature``, ``hypotheses``, ... and
        ``degenerate``: ``None``, or a warning when the model gives the same output whatever the input (every
        occurrence of a target token has the same log-probability, or every sentence decodes to the same output);
        the command line prints it.
    """
    from pyro_attention import metrics
    from pyro_attention.inference import alignment_posterior, kmax_log_likelihood, log_likelihood

    ckpt = _as_checkpoint(checkpoint)
    if device is not None:
        _move(ckpt, device)
    if seed is not None:
        pyro.set_rng_seed(seed)
    config = ckpt.config if data_dir is None else ckpt.config.replace(data_dir=data_dir)
    pair = ckpt.pair
    rule = _default_rule(pair, rule)  # checked even without BLEU: a rule the pair does not allow is a mistake
    if kmax < 0 or beam < 1 or batch_size < 1:
        raise ValueError(f"need kmax >= 0, beam >= 1, batch_size >= 1; got {kmax}, {beam}, {batch_size}")
    if size is None and src_file is None and split in SPLITS:
        size = getattr(config, f"{split}_size")  # the subset training used (val), or the configured one
    data = load_split(
        config, split, size=size, src_file=src_file, tgt_file=tgt_file, ref_file=ref_file, references=bleu
    )
    where = next(ckpt.network.parameters()).device
    batches = [b.to(where) for b in make_batches(data, ckpt.src_vocab, ckpt.tgt_vocab, batch_size)]
    ckpt.network.eval()
    samples = num_samples or config.num_samples
    total, tokens, exact, method = 0.0, 0, True, ""
    kmax_bound = kmax if "kmax" in pair.prediction_rules() else 0  # only categorical alignments have a K-max bound
    kmax_total = 0.0
    kmax_exact = True
    entropy_total = 0.0
    spread = _TokenSpread(len(ckpt.tgt_vocab))
    for batch in tqdm(batches, disable=_no_bar(progress), desc="scoring", unit="batch", leave=False):
        ll = log_likelihood(pair, batch, num_samples=samples)
        spread.add(batch.target, batch.target_mask, ll.per_token)
        total += float(ll.per_example.sum())
        tokens += int(ll.num_tokens.sum())
        exact, method = exact and ll.exact, ll.method
        if kmax_bound:
            km = kmax_log_likelihood(pair, batch, kmax)
            kmax_total += float(km.per_example.sum())
            kmax_exact = kmax_exact and km.exact
        ent, _ = metrics.prior_entropy(alignment_posterior(pair, batch)["prior"], batch.target_mask)
        entropy_total += ent
    result: dict[str, Any] = {
        "checkpoint": str(ckpt.path),
        "model": config.model,
        "estimator": config.estimator,
        "options": config.options,
        "split": split if src_file is None else str(src_file),
        "data": data.description,
        "sentences": len(data),
        "tokens": tokens,
        "nll": -total / tokens,
        "ppl": metrics.perplexity(total, tokens),
        "ppl_exact": exact,
        "ppl_method": method,
        "kmax": kmax_bound or None,
        "kmax_ppl": metrics.perplexity(kmax_total, tokens) if kmax_bound else None,
        "kmax_method": (
            f"K-max, K={kmax}, " + ("covers every source position: exact" if kmax_exact else "a lower bound on log p")
            if kmax_bound
            else None
        ),
        "prior_entropy": entropy_total / tokens,
        "bleu": None,
        "bleu_signature": None,
        "rule": rule,
        "beam": beam,
        "length_penalty": length_penalty,
        "hypotheses": None,
        "degenerate": None,
    }
    distinct_sources = len({tuple(s) for s in data.source})
    reasons = [spread.degenerate(-total / tokens, distinct_sources)] if exact else []
    if bleu:
        hyps = _decode(ckpt, data.source, beam, rule, kmax or 5, length_penalty, max_decode_len, progress)
        text = [metrics.detokenize(h, config.tgt) for h in hyps]
        lc = config.lowercased if lowercase is None else lowercase
        scored = metrics.bleu(text, data.references, lowercase=lc)
        result.update(bleu=scored.score, bleu_signature=scored.signature, bleu_text=scored.text, hypotheses=text)
        longest = max(hyps, key=len)
        if distinct_sources >= 5 and longest and all(h == longest[: len(h)] for h in hyps):
            # the same output for every source (cut at each sentence's length limit when </s> never comes)
            reasons.insert(0, f"every one of the {len(text)} sentences ({distinct_sources} different sources) "
                           f"translates to the same output {metrics.detokenize(longest, config.tgt)[:60]!r}"
                           + ("" if len(set(text)) == 1 else " (or a prefix of it)"))
    reasons = [r for r in reasons if r]
    if reasons:
        result["degenerate"] = ("degenerate: " + "; ".join(reasons) + ". The model ignores its input: training "
                                "collapsed or diverged (check --lr and the training curve in history.csv)")
    return result


class _TokenSpread:
    """How much the log-probability of each target token varies across its positions (sums per token id).

    A model that predicts the same next-token distribution everywhere (one that ignores the source and the
    prefix: training collapsed, or the output layer's bias drowns its weights) gives every occurrence of a token
    the same log-probability; a working model's vary by whole nats.
    """

    #: below this pooled spread (nats) the predictions do not depend on the input
    THRESHOLD = 1e-3

    def __init__(self, vocab_size: int) -> None:
        self.n = torch.zeros(vocab_size, dtype=torch.float64)
        self.sum = torch.zeros(vocab_size, dtype=torch.float64)
        self.sq = torch.zeros(vocab_size, dtype=torch.float64)

    def add(self, target: torch.Tensor, mask: torch.Tensor, per_token: torch.Tensor) -> None:
        ids = target[mask].cpu()
        lp = per_token[mask].detach().cpu().double()
        self.n.index_add_(0, ids, torch.ones_like(lp))
        self.sum.index_add_(0, ids, lp)
        self.sq.index_add_(0, ids, lp * lp)

    def degenerate(self, nll: float, sentences: int) -> str | None:  # sentences: how many different sources
        """What is wrong when the log-probabilities barely vary (and the model is not simply sure of every token),
        else ``None``."""
        seen = self.n >= 2
        if sentences < 2 or int(seen.sum()) < 2 or nll < 0.1:
            return None
        n, mean = self.n[seen], self.sum[seen] / self.n[seen]
        var = (self.sq[seen] / n - mean * mean).clamp(min=0.0)
        pooled = float(((n * var).sum() / n.sum()).sqrt())
        if pooled >= self.THRESHOLD:
            return None
        return (
            f"the model predicts the same next-token distribution for every input (each target token's "
            f"log-probability varies by {pooled:.1e} nats across its {int(n.sum())} positions in {sentences} "
            "different sentences)"
        )


def _tokenizer(kind: str, lang: str) -> Callable[[str], list[str]]:
    if kind == "none":
        return str.split
    if kind == "moses":
        from sacremoses import MosesTokenizer

        moses = MosesTokenizer(lang=lang)
        return lambda line: moses.tokenize(line, escape=True, aggressive_dash_splits=False)
    raise ValueError(f"tokenize must be one of none, moses; got {kind!r}")


@torch.no_grad()
def translate_lines(
    checkpoint: Checkpoint | str | os.PathLike,
    lines: Iterable[str],
    *,
    beam: int = 5,
    rule: str | None = None,
    k: int = 5,
    length_penalty: float = 0.0,
    max_decode_len: int | None = None,
    tokenize: str = "none",
    lowercase: bool | None = None,
    progress: bool = False,
    device: str | None = None,
) -> list[str]:
    """Detokenised translations of ``lines`` (one sentence each; an empty line gives an empty line).

    :param tokenize: ``"none"`` (the lines are tokenised like the training data: split on whitespace) or
        ``"moses"`` (Moses-tokenise raw text with ``sacremoses``, escaping as the Multi30k / IWSLT files do).
        BPE corpora need BPE-segmented input.
    :param lowercase: lower-case the input (default: when the training corpus is lower-cased).
    :param max_decode_len: at most this many target tokens (default ``2 * source length + 10``).
    :param device: where to decode (default: where a loaded checkpoint's network is, the CPU for a path).
    """
    from pyro_attention.metrics import detokenize

    if isinstance(lines, (str, bytes)):
        raise TypeError(
            f"translate_lines: lines must be a list (or other iterable) of sentences, got one {type(lines).__name__} "
            f"{lines[:40]!r}; wrap a single sentence in a list: [{lines[:40]!r}]"
        )
    ckpt = _as_checkpoint(checkpoint)
    if device is not None:
        _move(ckpt, device)
    rule = _default_rule(ckpt.pair, rule)
    split = _tokenizer(tokenize, ckpt.config.src)
    lc = ckpt.config.lowercased if lowercase is None else lowercase
    sources = [split(line.lower() if lc else line) for line in lines]
    real = [i for i, s in enumerate(sources) if s]
    hyps = _decode(ckpt, [sources[i] for i in real], beam, rule, k, length_penalty, max_decode_len, progress)
    out = [""] * len(sources)
    for i, hyp in zip(real, hyps, strict=True):
        out[i] = detokenize(hyp, ckpt.config.tgt)
    return out

