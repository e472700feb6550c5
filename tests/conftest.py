"""Test configuration (as Pyro's tests/conftest.py): validation on, param store cleared, one thread."""

from __future__ import annotations

import signal

import pyro
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _pyro_state():
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    pyro.enable_validation(True)
    dtype = torch.get_default_dtype()
    yield
    torch.set_default_dtype(dtype)
    pyro.clear_param_store()


@pytest.fixture
def float64():
    """Exactness tests run in double precision."""
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


#: what ``Categorical(logits).sample()`` draws under seed 0 for the logits of :func:`snapshot_draws` with the torch
#: that made the snapshots in tests/data (2.13; 2.14 draws the same, 2.1 does not: its batched multinomial differs)
SNAPSHOT_DRAWS = [[2, 0, 1, 0], [2, 0, 2, 1]]


@pytest.fixture
def snapshot_draws():
    """Skip a test comparing sampled values with a snapshot when this torch draws categoricals differently from the
    torch that made the snapshot: the draws, not the code, would differ."""
    torch.manual_seed(0)
    logits = torch.arange(24.0, dtype=torch.float64).reshape(2, 4, 3).sin()
    draws = torch.distributions.Categorical(logits=logits).sample().tolist()
    if draws != SNAPSHOT_DRAWS:
        pytest.skip(f"torch {torch.__version__} draws categoricals differently from the torch that made the snapshot "
                    f"({draws} against {SNAPSHOT_DRAWS} under seed 0): its sampled values cannot match")


@pytest.fixture(autouse=True)
def _sigint_as_in_a_terminal():
    """A shell starts a background job (``pytest &``) with SIGINT ignored, and Python then leaves it ignored: each
    test starts with Python's own SIGINT handler, as in a terminal, so the Ctrl-C tests behave the same either way."""
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def mistake_work_dir(tmp_path_factory):
    """A bad-input catalogue's work folder (``tests.support.mistakes``), one for each catalogue module."""
    from tests.support.mistakes import start_work, tiny_run

    start_work(tmp_path_factory.mktemp("bad_inputs"))
    yield
    tiny_run.cache_clear()
