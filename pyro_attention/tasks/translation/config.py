"""Translation runs: :class:`TranslationConfig` (every option, loadable from a JSON or TOML file), its
checks, the device it runs on, and the module's constants."""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import torch
from tqdm.auto import tqdm

from pyro_attention.data.corpora import IWSLT14_LANGUAGES, MULTI30K_LANGUAGES, MULTI30K_SPLITS, require_file
from pyro_attention.inference.loop import MATMUL_PRECISIONS
from pyro_attention.precision import AUTOCAST_DTYPES
from pyro_attention.registry import ALL_PAIRS, PAIR_ESTIMATORS, check_options
from pyro_attention.tasks.common import OptimConfig, option, with_default
from pyro_attention.tasks.translation.options import (
    NETWORK_OPTIONS,
    CorpusOptions,
    ModelOptions,
    check_transformer_width,
)

#: pairs with a choice of estimator
ESTIMATOR_PAIRS = tuple(PAIR_ESTIMATORS)
#: config keys that must agree between a checkpoint and the run that resumes it (with the vocabularies)
STRUCTURAL_KEYS = ("model", "estimator", "options", "network", "embedding", "encoder", "decoder", "attention", "layers",
                   "heads", "feedforward", "embedding_values", "output", "attention_type", "input_feed", "bridge",
                   "init")
CHECKPOINT_FORMAT = "pyro_attention.translation.checkpoint"
SPLITS = ("train", "val", "test")
#: synthetic corpus sizes used when ``train_size`` / ``val_size`` / ``test_size`` are not given
SYNTHETIC_SIZES = {"train": 2000, "val": 200, "test": 200}
#: IWSLT14 pairs held out from the tail of ``valid`` for validation when ``val_size`` is not given
IWSLT14_HELD_OUT = 500
CSV_FIELDS = ("kind", "epoch", "step", "loss", "tokens", "lr", "val_nll", "val_ppl", "val_exact", "val_prior_entropy",
              "val_posterior_entropy", "val_guide_entropy", "val_guide_kl", "seconds")
#: the alignment means of a validation (:class:`Validation`) or an evaluation, by their
#: :func:`~pyro_attention.inference.entropy_sums` key (nats per target token)
ALIGNMENT_FIELDS = {"prior": "prior_entropy", "posterior": "posterior_entropy", "guide": "guide_entropy",
                    "guide_kl": "guide_kl"}

Log = Callable[[str], None]


def log_to_stdout(text: str) -> None:
    tqdm.write(text)


def tqdm_disabled(progress: bool) -> bool | None:
    """tqdm's ``disable``: ``True`` without progress; else ``None``, with which tqdm turns itself off when its
    output (stderr) is not a terminal, so a log file or a pipe gets the per-epoch lines, not every bar update."""
    return None if progress else True


@dataclass
class TranslationConfig(OptimConfig, ModelOptions, CorpusOptions):
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
    ``--option kl_scale=0.01`` on the command line).  ``network`` is ``"lstm"``
    (:class:`~pyro_attention.networks.Seq2Seq`) or ``"transformer"``
    (:class:`~pyro_attention.networks.TransformerSeq2Seq`: its width ``embedding``, ``layers``, ``heads``,
    ``feedforward``, ``embedding_values``; ``encoder``, ``decoder``, ``input_feed`` and ``bridge`` are the LSTM's
    alone).  Sizes as the network's (``chunk_size=0``: no chunking of the enumerated output layer; ``keep_gib``: GiB
    of its log-probabilities kept for the backward pass, the rest recomputed there); ``output`` its output layer
    (``"tanh"``, the paper's, or ``"product"``, the product of experts whose exact enumeration costs about a soft
    step), ``attention_type`` its prior's score (``"mlp"``, the paper's and the LSTM's default; Luong's
    ``"general"`` or ``"dot"``; ``"scaled"``, one scaled dot-product head, the Transformer's default) and
    ``attention`` the score's size; ``input_feed`` what the decoder is fed (``"context"``, the prior's soft context,
    or ``"attentional"``, Luong's attentional state as OpenNMT-py feeds it), ``bridge`` its initial state
    (``"mean"`` of the source values, or the encoder's ``"final"`` states as OpenNMT-py; needs ``decoder`` = 2 x
    ``encoder``) and ``init`` the initialisation (``0``: torch's defaults, Glorot for the Transformer; ``0.1``:
    every parameter uniform in +-0.1, OpenNMT-py's ``param_init``).

    Optimisation: ``epochs``, ``batch_size`` (sentences), ``lr``, ``clip_norm`` (per parameter, ClippedAdam),
    ``lr_decay`` (factor applied when validation perplexity does not improve), ``patience`` (epochs without
    improvement before stopping; 0: never stop early), ``warmup_steps`` (Dirichlet pair: steps with the prior as
    guide), ``num_samples`` (importance samples of the Dirichlet pair's validation bound), ``seed``, ``threads``
    (torch threads; 0 leaves torch's choice), ``matmul_precision`` (``torch.set_float32_matmul_precision`` while
    training steps run: ``"highest"``, ``"high"`` or ``"medium"``, bfloat16 products; validation, evaluation and
    decoding keep float32), ``autocast`` (``"bfloat16"``: the model and guide of the training steps under
    ``torch.autocast``, :mod:`pyro_attention.precision`; evaluation keeps float32), ``device`` (``"cpu"``,
    ``"cuda"``, ``"cuda:N"``, ``"mps"``: where the network, its optimiser state and the batches live; checkpoints
    are stored device-free, so a run trained on a GPU resumes or evaluates on a CPU and back; several processes
    under torchrun each take ``cuda:LOCAL_RANK``) and ``out`` (default ``runs/<model>-<estimator>``).  ``init_from``
    starts a fresh run from another run's network weights (those of the same name and shape;
    :func:`~pyro_attention.tasks.translation.checkpoints.warm_start`); a resumed run ignores it.
    """

    # data: CorpusOptions; model: ModelOptions; optimisation: OptimConfig's epochs, batch_size, lr, seed and these
    epochs: int = with_default(OptimConfig, "epochs", 10, help="epochs in all, counting resumed ones")
    batch_size: int = with_default(OptimConfig, "batch_size", 32, help="sentences per batch")
    clip_norm: float = option(5.0, "per-parameter gradient norm clip", interval=(0.0, math.inf, True, False))
    lr_decay: float = option(0.5, "lr factor when validation PPL does not improve", interval=(0.0, 1.0, True, False))
    patience: int = option(3, "stop after N epochs without improvement ({default}; 0: never)", low=0)
    warmup_steps: int = option(0, "relaxed: steps with the prior as guide", low=0)
    guide_steps: int = option(0, "variational: extra steps of the inference network alone (the model fixed) on "
                              "each batch before its step, as He et al. 2019 train a lagging inference network "
                              "({default}: none)", low=0)
    guide_steps_for: int = option(0, "take --guide-steps during the first N training steps only ({default}: all)",
                                  low=0)
    num_samples: int = option(20, "importance samples of the relaxed bound", low=1)
    threads: int = option(1, "torch threads ({default}; 0: torch's choice)", low=0)
    matmul_precision: str = option(
        "highest", "torch.set_float32_matmul_precision of the training steps: highest (float32 products; default), "
        "high or medium (bfloat16 products with float32 results: about 1.5x faster steps on a CPU with AMX); "
        "validation, evaluation and decoding keep float32", choices=MATMUL_PRECISIONS)
    autocast: str = option(
        "none", "torch.autocast of the training steps' model and guide: none (default) or bfloat16 (the "
        "network's products in bfloat16, 2.0-2.3x faster steps measured on a CPU with AVX512-BF16; the likelihood, KL "
        "terms, enumeration kernels and ELBO stay float32); validation, evaluation and decoding keep float32",
        choices=tuple(AUTOCAST_DTYPES))
    device: str = option("cpu", "cpu (default), cuda, cuda:N or mps: where the network trains")
    out: str | None = option(None, "output folder (default runs/<model>-<estimator>)")
    init_from: str | None = option(None, "a checkpoint (best.pt, last.pt or its run folder) whose network weights "
                                   "start a fresh run: every weight of the same name and shape is copied, the others "
                                   "keep their initialisation; the vocabularies must be the same")
    checkpoint_every: int = option(0, "also write last.pt every N steps inside an epoch ({default}: at epoch ends "
                                   "only)", low=0)
    checkpoint_minutes: float = option(0.0, "also write last.pt inside an epoch once N minutes of training have "
                                       "passed since it was last written ({default}: at epoch ends only)",
                                       interval=(0.0, math.inf, False, True))
    tensorboard: bool | None = option(None, "log to <out>/tensorboard (default: when the tensorboard package is "
                                      "installed)")

    #: the messages name the key alone (``"lr must be ..."``): the command line turns the key into its flag
    message_prefix: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            setattr(self, f.name, _check_type(f.name, getattr(self, f.name), hints[f.name]))
        self.check_optimisation()  # lr, and every field's bounds, range and choices
        resolve_device(self.device)
        self._check_network()
        if self.bridge == "final" and self.decoder != 2 * self.encoder:
            raise ValueError(
                f"bridge 'final' needs decoder = 2 x encoder (the encoder's final states, both directions), got "
                f"decoder {self.decoder} and encoder {self.encoder}; use bridge 'mean', or change the sizes"
            )
        if self.attention_type == "dot" and self.decoder != 2 * self.encoder:
            raise ValueError(
                f"attention_type 'dot' needs decoder = 2 x encoder (the values' size), got decoder {self.decoder} "
                f"and encoder {self.encoder}; use attention_type 'general' or 'mlp', or change the sizes"
            )
        self._check_model()
        if self.synthetic_min_len > self.synthetic_max_len:
            raise ValueError(
                f"synthetic_min_len ({self.synthetic_min_len}) must not exceed synthetic_max_len "
                f"({self.synthetic_max_len})"
            )
        self._check_data()

    def _check_network(self) -> None:
        """No option of the other network away from its default; the transformer's width a multiple of its heads;
        the attention score defaults to the network's own (mlp, scaled)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for network, keys in NETWORK_OPTIONS.items():
            changed = [k for k in keys if network != self.network and getattr(self, k) != defaults[k]]
            if changed:
                raise ValueError(f"{changed[0]}: only network {network!r} reads it, this run's network is "
                                 f"{self.network!r}; drop it, or choose network {network!r}")
        if self.attention_type is None:
            self.attention_type = "scaled" if self.network == "transformer" else "mlp"
        if self.network == "transformer":
            check_transformer_width(self.embedding, self.heads)

    def _check_model(self) -> None:
        """The estimator and options of the pair, and a warm-up only where the pair has a warm-up guide."""
        if self.model in ESTIMATOR_PAIRS:
            if self.estimator is None:
                self.estimator = PAIR_ESTIMATORS[self.model][0]
            check_choice("estimator", self.estimator, PAIR_ESTIMATORS[self.model])
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
        if self.guide_steps_for and not self.guide_steps:
            raise ValueError(f"guide_steps_for: {self.guide_steps_for} steps of what? It limits guide_steps, which "
                             "is 0 (none); give guide_steps too, or drop guide_steps_for")
        if self.warmup_steps and not ALL_PAIRS[self.model].has_warmup:
            with_warmup = [k for k, v in ALL_PAIRS.items() if v.has_warmup]
            raise ValueError(
                f"warmup_steps: model {self.model!r} has no warm-up guide; only {', '.join(with_warmup)} has one"
            )

    def _check_data(self) -> None:
        if self.data == "multi30k":
            for name in ("src", "tgt"):
                check_choice(name, getattr(self, name), MULTI30K_LANGUAGES)
            for name in ("train_split", "val_split", "test_split"):
                if getattr(self, name) is not None:
                    check_choice(name, getattr(self, name), MULTI30K_SPLITS)
        elif self.data == "iwslt14":
            for name in ("src", "tgt"):
                check_choice(name, getattr(self, name), IWSLT14_LANGUAGES)
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
        values = normalise_keys(values)
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
        overrides = normalise_keys(overrides)
        values = {k: v for k, v in read_config_file(path).items() if k not in overrides}
        try:
            return cls.from_dict({**values, **overrides})
        except ValueError as e:
            if message_key(str(e)) in values:
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


def on_cpu(value: Any) -> Any:
    """``value`` with every tensor (in nested dicts, lists and tuples) moved to the CPU: checkpoints are device-free."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_cpu(v) for v in value)
    return value


def normalise_keys(values: dict[str, Any], unlisted: Sequence[str] = ()) -> dict[str, Any]:
    """``values`` with their keys as ``TranslationConfig``'s (``-`` read as ``_``); an unknown key is an error that
    lists the allowed keys, less ``unlisted`` (keys a caller sets itself and refuses with its own message)."""
    out = {}
    allowed = TranslationConfig.keys()
    unknown = []
    for key, value in values.items():
        name = str(key).replace("-", "_")
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1)
            unknown.append(repr(str(key)) + (f" (did you mean {close[0]!r}?)" if close else ""))
        out[name] = value
    if unknown:
        listed = [k for k in allowed if k not in unlisted]
        raise ValueError(f"unknown config key(s) {', '.join(unknown)}; allowed keys: {', '.join(listed)}")
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
            values = toml_module().loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except ValueError as e:  # tomllib.TOMLDecodeError is a ValueError
        raise ValueError(f"{path}: {e}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a config file holds one table of key = value pairs")
    try:
        return normalise_keys(values)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def toml_module() -> ModuleType:
    """``tomllib`` (Python 3.11+), else the ``tomli`` backport."""
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


def check_choice(name: str, value: Any, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _at_least(name: str, value: int, low: int) -> None:
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def message_key(message: str) -> str | None:
    """The config key an error message is about (``"lr must be ..."``, ``"options: ..."``,
    ``"config key 'epochs' must be ..."``), or ``None``."""
    quoted = re.match(r"config key '(\w+)'", message)
    if quoted:
        return quoted.group(1)
    for key in sorted(TranslationConfig.keys(), key=len, reverse=True):
        if message.startswith((key + ":", key + " ")):
            return key
    return None
