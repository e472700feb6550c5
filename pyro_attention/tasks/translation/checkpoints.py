"""Translation checkpoints: atomic writes, reading with clear errors, RNG states, and the checks that a
checkpoint fits the run that resumes it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyro
import torch

from pyro_attention import __version__
from pyro_attention.checks import weight_differences
from pyro_attention.data.text import Vocab
from pyro_attention.files import writing
from pyro_attention.networks import Seq2Seq
from pyro_attention.pair import AlignmentPair
from pyro_attention.tasks.translation.config import (
    CHECKPOINT_FORMAT,
    STRUCTURAL_KEYS,
    TranslationConfig,
    resolve_device,
)
from pyro_attention.tasks.translation.corpora import build_pair
from pyro_attention.tasks.translation.migration import upgrade


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``state`` with ``torch.save`` atomically: a temporary file in the same folder, flushed and fsync-ed,
    then ``os.replace``-d onto ``path``.  On any failure the temporary file is removed and an existing ``path``
    is left as it was; a failure to write is a :class:`~pyro_attention.files.WriteError` naming ``path``.
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


def capture_rng_state() -> dict[str, Any]:
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


def restore_rng_state(state: dict[str, Any]) -> None:
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


def read_checkpoint(path: Path) -> dict[str, Any]:
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
    state = upgrade(state, str(path))
    state["_path"] = str(path)
    return state


#: what every checkpoint holds (the rest: what its format holds, :mod:`~pyro_attention.tasks.translation.migration`)
_REQUIRED_KEYS = ("config", "src_vocab", "tgt_vocab", "network")


def move_checkpoint(ckpt: Checkpoint, device: str) -> None:
    where = resolve_device(device)
    for module in ckpt.pair.modules().values():
        module.to(where)


def load_checkpoint(path: str | os.PathLike, device: str | None = None) -> Checkpoint:
    """Load a checkpoint file (or a run folder: its ``best.pt``, else ``last.pt``) into a ready pair, on ``device``
    (default: the CPU, whatever device it was trained on)."""
    state = read_checkpoint(Path(path))
    config = TranslationConfig.from_dict({**state["config"], "device": "cpu"})
    src_vocab, tgt_vocab = _vocab(state, "src_vocab"), _vocab(state, "tgt_vocab")
    network, pair = build_pair(config, src_vocab, tgt_vocab)
    load_weights(pair, state)
    checkpoint = Checkpoint(Path(state["_path"]), config, src_vocab, tgt_vocab, network, pair, state)
    if device is not None:
        move_checkpoint(checkpoint, device)
        checkpoint.config = config.replace(device=device)
    network.eval()
    return checkpoint


def _vocab(state: dict[str, Any], key: str) -> Vocab:
    """The checkpoint's source (``"src_vocab"``) or target (``"tgt_vocab"``) vocabulary; a damaged one is a
    ``ValueError`` naming the checkpoint and the vocabulary."""
    what = {"src_vocab": "source vocabulary", "tgt_vocab": "target vocabulary"}[key]
    return Vocab.from_json(state[key], f"checkpoint {state.get('_path', '(in memory)')}: {what} is damaged")


def load_weights(pair: AlignmentPair, state: dict[str, Any]) -> None:
    """The network's weights and those of the modules the pair owns (structure potentials, scale heads)."""
    try:
        pair.load_state_dict({"network": state["network"], **state["pair_modules"]})
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"{state.get('_path', 'checkpoint')}: {e}") from None


def warm_start(
    pair: AlignmentPair, path: str | os.PathLike, src_vocab: Vocab, tgt_vocab: Vocab
) -> tuple[list[str], list[str]]:
    """Copy into ``pair.network`` every weight of the checkpoint at ``path`` (a file or a run folder) whose name and
    shape it shares -- a fresh run started from another run's network (``--init-from``), e.g. a variational pair
    from a marginal one (a ``Seq2Seq`` carries the inference network in both; a marginal run never trains it, so
    it arrives as that run initialised it).  The optimiser, counters and random states are not taken.  A
    checkpoint of other vocabularies, or with a weight of the same name and another shape, is a ``ValueError``
    naming it; so is one with no weight in common.

    :returns: the names of the weights copied and of those left as initialised.
    """
    state = read_checkpoint(Path(path))
    diffs = [d for d in (_vocab_difference("source vocabulary", _vocab(state, "src_vocab"), src_vocab),
                         _vocab_difference("target vocabulary", _vocab(state, "tgt_vocab"), tgt_vocab)) if d]
    if diffs:
        raise ValueError(f"{path}: init_from needs this run's vocabularies: " + "; ".join(diffs)
                         + " (the same data, min_freq and max_vocab as that run)")
    own = pair.network.state_dict()
    names = list(own)
    wrong = weight_differences(own, state["network"], strict=False)
    if wrong:
        sizes = _size_differences(state)
        raise ValueError(f"{path}: init_from: weights {'; '.join(wrong)}; give this run the checkpoint's sizes"
                         + (f" ({sizes})" if sizes else " (embedding, encoder, decoder, attention)"))
    fresh = list(pair.network.load_state_dict(state["network"], strict=False).missing_keys)
    if len(fresh) == len(names):
        raise ValueError(f"{path}: init_from: no weight in common with this network ({type(pair.network).__name__})")
    return [n for n in names if n not in fresh], fresh


def _size_differences(state: dict[str, Any]) -> str:
    """The checkpoint's network sizes, as flags (``--embedding 8 --encoder 8 ...``)."""
    saved = state.get("config") or {}
    keys = [k for k in ("embedding", "encoder", "decoder", "attention", "layers") if k in saved]
    return " ".join(f"--{k} {saved[k]}" for k in keys)


def check_param_store(state: dict[str, Any]) -> None:
    """Every parameter the checkpoint's param store held is back (restored through the pair's modules)."""
    live = dict(pyro.get_param_store().named_parameters())
    for name, value in state["param_store"].items():
        if name not in live or not torch.equal(live[name].detach().cpu(), value.cpu()):
            raise ValueError(
                f"{state.get('_path', 'checkpoint')}: Pyro parameter {name!r} of the checkpoint is not restored by "
                "the pair's modules (a pyro.param outside pair.modules()?)"
            )


def tensorboard_writer(config: TranslationConfig, out: Path) -> Any:
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
