"""Test configuration (as Pyro's tests/conftest.py): validation on, param store cleared, one thread."""

from __future__ import annotations

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
