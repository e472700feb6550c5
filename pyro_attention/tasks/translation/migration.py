"""Checkpoints of older formats, upgraded on reading, format by format, to the one this package writes.

Every checkpoint records ``format_version``.  :func:`upgrade` applies, in order, each step from the checkpoint's
version to :data:`FORMAT_VERSION`; a step takes a checkpoint of its version and returns one of the next.  The rest
of the package reads only the current format: no ``state.get(key, default)`` for a key an older run lacked, no
renaming hooks in the networks.

* **1 -> 2.**  Format 1 was written for a while before some entries existed and before the parts of
  :class:`~pyro_attention.networks.Seq2Seq` were objects of their own.  The step gives the entries a run of that
  time lacks their meaning then (no position inside an epoch, one process, no modules owned by the pair, the
  batches of an epoch as the steps of its first, the history columns recorded since as empty cells), and renames
  the weights -- in the network's state dict, Pyro's param store and the optimiser state, which are keyed by
  parameter name -- from ``att_h.*``, ``out.*``, ``init_h.*``, ``feed_proj.*`` to ``score.att_h.*``,
  ``head.out.*``, ``bridge.init_h.*``, ``feed.proj.*``.
* **2 -> 3.**  The state of the training loop and of the learning-rate schedule has an owner: the flat counters
  (``epoch``, ``step``, ``position``, ``epoch_loss``, ``epoch_tokens``) become ``trainer`` (the
  :class:`~pyro_attention.inference.loop.Trainer`'s ``state_dict()``), and ``best_metric``, ``best_epoch``,
  ``bad_epochs``, ``lr`` become ``plateau`` (the :class:`~pyro_attention.inference.loop.PlateauDecay`'s).

A checkpoint newer than this package (a higher version) is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyro.params.param_store import param_with_module_name

#: the format this package writes
FORMAT_VERSION = 3

#: format 1's names of :class:`~pyro_attention.networks.Seq2Seq`'s weights -> today's (prefixes)
SEQ2SEQ_RENAMES = {
    "att_h.": "score.att_h.", "att_x.": "score.att_x.", "att_v.": "score.att_v.",
    "out_h.": "head.out_h.", "out_c.": "head.out_c.", "out.": "head.out.",
    "init_h.": "bridge.init_h.", "feed_proj.": "feed.proj.",
}  # fmt: skip

#: the columns of format 2's history of epochs (format 1 gained the alignment columns over its life)
_EPOCH_COLUMNS_2 = ("epoch", "step", "val_nll", "val_ppl", "val_exact", "val_prior_entropy", "val_posterior_entropy",
                    "val_guide_entropy", "val_guide_kl", "lr", "seconds")
#: the entries a format-1 checkpoint may lack, with what their absence meant
_FORMAT_1_DEFAULTS = {
    "position": 0, "epoch_loss": 0.0, "epoch_tokens": 0, "epoch_batches": None, "pair_modules": {},
    "param_store": {}, "optim": {}, "world_size": 1, "rng_ranks": None, "package_version": None,
}  # fmt: skip


def _renamed(name: str) -> str:
    old = next((o for o in SEQ2SEQ_RENAMES if name.startswith(o)), None)
    return name if old is None else SEQ2SEQ_RENAMES[old] + name[len(old):]


def _network_param(key: str) -> str:
    """A Pyro parameter name ``"network$$$att_h.weight"`` under today's weight name."""
    owner, _, name = key.partition("$$$")
    return param_with_module_name(owner, _renamed(name)) if owner == "network" and name else key


def _format_1_to_2(state: dict[str, Any]) -> dict[str, Any]:
    state = {**_FORMAT_1_DEFAULTS, **state}
    state["network"] = {_renamed(k): v for k, v in state["network"].items()}
    for store in ("param_store", "optim"):
        state[store] = {_network_param(k): v for k, v in state[store].items()}
    if "history" in state:  # a list per column: a column added since is empty for its past epochs
        epochs = state["history"]["epochs"]
        state["history"]["epochs"] = {k: epochs[k] if k in epochs else [None] * len(epochs["epoch"])
                                      for k in _EPOCH_COLUMNS_2}
        if state["epoch_batches"] is None and epochs["step"]:  # every epoch has the same batches: the first's steps
            state["epoch_batches"] = epochs["step"][0]
    return {**state, "format_version": 2}


_TRAINER_2 = ("epoch", "step", "position", "epoch_loss", "epoch_tokens")
_PLATEAU_2 = {"best_metric": "best", "best_epoch": "best_epoch", "bad_epochs": "bad", "lr": "lr"}


def _format_2_to_3(state: dict[str, Any]) -> dict[str, Any]:
    moved = set(_TRAINER_2) | set(_PLATEAU_2)
    return {**{k: v for k, v in state.items() if k not in moved},
            "trainer": {k: state[k] for k in _TRAINER_2},
            "plateau": {new: state[old] for old, new in _PLATEAU_2.items()},
            "format_version": 3}


#: version -> the step that upgrades a checkpoint of that version to the next
STEPS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _format_1_to_2, 2: _format_2_to_3}


def upgrade(state: dict[str, Any], where: str = "checkpoint") -> dict[str, Any]:
    """``state`` (a checkpoint's dict) in the current format, :data:`FORMAT_VERSION`.

    :param where: the checkpoint's path, for messages.
    :raises ValueError: naming ``where``, for a version this package does not know (newer than it, or not a number).
    """
    version = state.get("format_version", 1)
    if not isinstance(version, int) or version < 1 or version > FORMAT_VERSION:
        raise ValueError(f"{where}: checkpoint format {version!r}; this pyro-attention reads formats 1 to "
                         f"{FORMAT_VERSION} (a checkpoint written by a newer release: upgrade pyro-attention)")
    while version < FORMAT_VERSION:
        state = STEPS[version](state)
        version = state["format_version"]
    return state
