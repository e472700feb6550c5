"""Signals delivered during a training step, as Ctrl-C or ``kill`` would deliver them."""

from __future__ import annotations

import signal

import pytest

from pyro_attention.inference.distributed import DataParallelSVI


def signal_on_step(monkeypatch: pytest.MonkeyPatch, signum: int, at: int, times: int = 1) -> None:
    """Deliver ``signum`` to this process ``times`` times during the ``at``-th SVI step (as Ctrl-C would)."""
    calls = {"n": 0}
    step = DataParallelSVI.step

    def stepping(self, batch):  # noqa: ANN001, ANN202
        calls["n"] += 1
        if calls["n"] == at:
            for _ in range(times):
                signal.raise_signal(signum)
        return step(self, batch)

    monkeypatch.setattr(DataParallelSVI, "step", stepping)
