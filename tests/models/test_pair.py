"""The shared plumbing: the guide's encoding is reused by the model once, and never when stale."""

from __future__ import annotations

import pyro
import pytest
import torch
from pyro import poutine

from pyro_attention.models import HardAttention, RelaxedAttention, VariationalAttention
from tests.support.toy_network import ToyNetwork, make_toy_batch


class CountingNetwork(ToyNetwork):
    calls = 0

    def encode(self, batch):
        CountingNetwork.calls += 1
        return super().encode(batch)


@pytest.mark.parametrize(
    "make", [lambda n: VariationalAttention(n), lambda n: HardAttention(n, "sample"), lambda n: RelaxedAttention(n)]
)
def test_one_encode_per_svi_step(make):
    torch.manual_seed(0)
    pair = make(CountingNetwork())
    svi = pyro.infer.SVI(pair.model, pair.guide, pyro.optim.Adam({"lr": 0.1}), pair.elbo())
    batch = make_toy_batch()
    CountingNetwork.calls = 0
    for _ in range(3):
        svi.step(batch)
    assert CountingNetwork.calls == 3


def test_stale_encoding_is_not_reused(float64):
    torch.manual_seed(0)
    net, batch = ToyNetwork(), make_toy_batch()
    pair = VariationalAttention(net)
    pair.guide(batch)  # leaves an encoding behind
    with torch.no_grad():
        net.out.bias.add_(1.0)  # as an optimiser step would
    trace = poutine.trace(poutine.condition(pair.model, {"align": torch.zeros(2, 2, dtype=torch.long)})).get_trace(
        batch
    )
    fresh = poutine.trace(poutine.condition(pair.model, {"align": torch.zeros(2, 2, dtype=torch.long)})).get_trace(
        batch
    )
    assert torch.equal(trace.log_prob_sum(), fresh.log_prob_sum())
    # another batch object with the same contents is encoded afresh too
    pair.guide(batch)
    other = make_toy_batch()
    enc = pair.encode(other)
    assert enc.batch is other


def test_fit_logs_every_step_to_csv(tmp_path):
    import csv

    from pyro_attention.data import make_region_qa
    from pyro_attention.inference import fit
    from pyro_attention.models import MarginalLikelihood
    from pyro_attention.networks import RegionQA

    data = make_region_qa(40, seed=0)
    net = RegionQA(data.feature_size, len(data.answers), vocab_size=len(data.vocab), hidden_size=8)
    path = tmp_path / "log.csv"
    result = fit(MarginalLikelihood(net), data, data, num_epochs=2, batch_size=16, progress=False, log_csv=path)
    rows = list(csv.DictReader(path.open()))
    steps = [r for r in rows if r["kind"] == "step"]
    assert len(steps) == result.steps == 6 and [int(r["step"]) for r in steps] == list(range(1, 7))
    assert [float(r["loss"]) for r in steps] == pytest.approx(result.losses)
    assert [float(r["val_nll"]) for r in rows if r["kind"] == "val"] == pytest.approx(result.val_nll)
