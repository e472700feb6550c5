"""What :func:`~pyro_attention.inference.fit` returns on tiny problems (fixed seeds).

``snapshot()`` computes the losses and validation NLLs; ``tests/support/data/fit_losses_before.pt`` holds the values
computed before ``fit`` became a use of :class:`~pyro_attention.inference.loop.Trainer` (#16 item 3), and
``tests/inference/test_loop.py`` compares them exactly.  Regenerate (only when a change of numbers is intended):
``python -m tests.support.loop_snapshot``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pyro_attention.data import make_region_qa
from pyro_attention.inference import fit
from pyro_attention.models import MarginalLikelihood, RelaxedAttention, SoftAttention, VariationalAttention
from pyro_attention.networks import RegionQA
from tests.support.toy_network import ToyNetwork, make_toy_batch

BEFORE = Path(__file__).parent / "data" / "fit_losses_before.pt"


def _region_net(data: Any) -> RegionQA:
    torch.manual_seed(0)
    return RegionQA(data.feature_size, len(data.answers), vocab_size=len(data.vocab), hidden_size=8)


def snapshot() -> dict[str, dict[str, list[float]]]:
    """``{case: {"losses": [...], "val_nll": [...], "steps": [n]}}`` for each tiny problem."""
    train, val = make_region_qa(40, seed=0), make_region_qa(16, seed=1)
    cases: dict[str, Any] = {
        "soft": lambda: fit(SoftAttention(_region_net(train)), train, val, num_epochs=2, batch_size=16, lr=1e-2,
                            progress=False),
        "marginal": lambda: fit(MarginalLikelihood(_region_net(train)), train, val, num_epochs=2, batch_size=16,
                                lr=1e-2, seed=3, progress=False),
        "variational-sample": lambda: fit(VariationalAttention(_region_net(train), "sample"), train, val,
                                          num_epochs=2, batch_size=16, lr=1e-2, progress=False, num_samples=5),
        "relaxed-warmup": lambda: fit(RelaxedAttention(_region_net(train)), train, val, num_epochs=2, batch_size=16,
                                      lr=1e-2, warmup_steps=2, progress=False, num_samples=5),
    }
    torch.manual_seed(0)
    toy = ToyNetwork()
    batch = make_toy_batch(pad_source=1, pad_target=1)
    cases["toy-list"] = lambda: fit(SoftAttention(toy), [batch] * 4, num_epochs=2, lr=1e-2, progress=False)
    out = {}
    for name, run in cases.items():
        result = run()
        out[name] = {"losses": list(result.losses), "val_nll": list(result.val_nll), "steps": [result.steps]}
    return out


if __name__ == "__main__":
    torch.save(snapshot(), BEFORE)
    print(f"wrote {BEFORE}")
