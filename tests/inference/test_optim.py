"""``FusedClippedAdam`` computes Pyro's ``ClippedAdam`` update, keeps its state format and its lr schedule."""

from __future__ import annotations

import copy

import pyro
import pytest
import torch
from pyro.optim import ClippedAdam

from pyro_attention.inference.optim import FusedClippedAdam


def _run(optim_class, steps: int = 6, lrd: float = 1.0, clip: float = 0.3):
    pyro.clear_param_store()
    g = torch.Generator().manual_seed(0)
    params = [pyro.param(f"p{i}", torch.randn(shape, generator=g)).unconstrained() for i, shape in
              enumerate([(3, 4), (5,), (2, 2, 2)])]
    optim = optim_class({"lr": 0.05, "clip_norm": clip, "lrd": lrd, "betas": (0.8, 0.95)})
    for k in range(steps):
        for i, p in enumerate(params):
            # p2 gets no gradient on odd steps: its step count (and so its bias correction) falls behind
            p.grad = None if (i == 2 and k % 2) else torch.randn(p.shape, generator=g)
        optim(params)
    return [p.detach().clone() for p in params], copy.deepcopy(optim.get_state())


@pytest.mark.parametrize("lrd", [1.0, 0.9])
def test_fused_equals_pyro_clipped_adam(lrd):
    want, ref_state = _run(ClippedAdam, lrd=lrd)
    got, fused_state = _run(FusedClippedAdam, lrd=lrd)
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ref_state.keys() == fused_state.keys()
    for name in ref_state:
        r, f = ref_state[name], fused_state[name]
        assert r["param_groups"][0]["lr"] == pytest.approx(f["param_groups"][0]["lr"])
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.allclose(r["state"][0][key], f["state"][0][key], rtol=1e-5, atol=1e-7)
        assert r["state"][0]["step"] == f["state"][0]["step"]


def test_state_round_trip_continues_identically():
    """A state saved from the fused optimiser and loaded into a fresh one (as a resumed run does) continues
    exactly as the uninterrupted one."""
    pyro.clear_param_store()
    g = torch.Generator().manual_seed(0)
    params = [pyro.param(f"p{i}", torch.randn(3, generator=g)).unconstrained() for i in range(3)]
    first = FusedClippedAdam({"lr": 0.05, "clip_norm": 0.3, "betas": (0.8, 0.95)})
    for _ in range(3):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        first(params)
    state = copy.deepcopy(first.get_state())  # as saved to disk: not the live tensors the next step updates
    saved = [p.detach().clone() for p in params]
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(p.shape, generator=g) for p in params]
    for p, gr in zip(params, grads, strict=True):
        p.grad = gr.clone()
    first(params)
    uninterrupted = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, s in zip(params, saved, strict=True):
            p.copy_(s)
    resumed = FusedClippedAdam({"lr": 0.05, "clip_norm": 0.3, "betas": (0.8, 0.95)})
    resumed.set_state(state)
    for p, gr in zip(params, grads, strict=True):
        p.grad = gr.clone()
    resumed(params)
    assert all(torch.equal(p, u) for p, u in zip(params, uninterrupted, strict=True))


def test_without_the_fused_kernel_it_is_pyros_step(monkeypatch):
    import pyro_attention.inference.optim as module

    want, _ = _run(ClippedAdam)
    monkeypatch.setattr(module, "_FUSED_CPU", False)
    got, _ = _run(FusedClippedAdam)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
