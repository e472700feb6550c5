"""The workloads ``benchmarks/run.py`` times: region QA and translation batches at a size, one Pyro SVI step of a
pair on them, the hand-written step of the same loss, and the check that both give the same loss and gradients."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyro
import pyro.optim
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is not a package
from step_time import PAIRS  # noqa: E402

from pyro_attention.data.region_qa import RegionBatch  # noqa: E402
from pyro_attention.data.translation import TranslationBatch  # noqa: E402
from pyro_attention.inference.distributed import DataParallelSVI  # noqa: E402
from pyro_attention.networks import RegionQA, Seq2Seq, TransformerSeq2Seq  # noqa: E402
from pyro_attention.networks.output import OUTPUT_LAYERS as NETWORK_OUTPUTS  # noqa: E402

#: the pairs and output layers of the output-layer section (``--outputs``)
OUTPUT_PAIRS = ("soft", "marginal", "hard-enum", "va-enum", "va-sample")
OUTPUT_LAYERS = ("tanh", "product")
#: K of the K-max likelihood timed beside the exact one
KMAX = 5


# -- workloads -----------------------------------------------------------------------------------------------
@dataclass
class Workload:
    """One size: a seeded network factory, a batch, and the output layer's forward FLOPs over all ``S``."""

    name: str
    spec: dict[str, Any]
    make_network: Callable[..., Any]
    batch: Any
    tokens: int
    output_flops: float
    info: dict[str, Any] = field(default_factory=dict)


def _lengths(g: torch.Generator, B: int, L: int) -> torch.Tensor:
    return torch.randint(max(1, L // 2), L + 1, (B,), generator=g)


def make_workload(name: str, spec: dict[str, Any], device: torch.device, seed: int = 0) -> Workload:
    """A synthetic batch of the size (``S // 2 .. S`` real sources, ``T // 2 .. T`` real targets) and a network."""
    g = torch.Generator().manual_seed(seed)
    B, S, D = spec["B"], spec["S"], spec["D"]
    if spec["task"] == "qa":
        F, A = spec["F"], spec["A"]
        mask = torch.arange(S).unsqueeze(0) < _lengths(g, B, S).unsqueeze(1)
        regions = torch.randn(B, S, F, generator=g) * mask.unsqueeze(-1)
        batch = RegionBatch(
            regions.to(device), mask.to(device), torch.randn(B, spec["Q"], generator=g).to(device),
            torch.randint(A, (B,), generator=g).to(device),
        )  # fmt: skip

        def make_network(chunk_size: int | None = None) -> RegionQA:
            torch.manual_seed(seed)
            return RegionQA(F, A, question_size=spec["Q"], hidden_size=D).to(device)

        # the output layer's final product U (A x D) for every (b, s)
        return Workload(name, spec, make_network, batch, B, 2.0 * B * S * D * A)
    T, V = spec["T"], spec["V"]
    smask = torch.arange(S).unsqueeze(0) < _lengths(g, B, S).unsqueeze(1)
    tmask = torch.arange(T).unsqueeze(0) < _lengths(g, B, T).unsqueeze(1)
    source = torch.randint(4, V, (B, S), generator=g) * smask
    target = torch.randint(4, V, (B, T), generator=g) * tmask
    target_in = torch.cat([torch.full((B, 1), 2), target[:, :-1]], 1) * tmask
    batch = TranslationBatch(*(x.to(device) for x in (source, smask, target_in, target, tmask)))

    def make_network(chunk_size: int | None = 8) -> Seq2Seq:
        torch.manual_seed(seed)
        net = Seq2Seq(
            V, V, embedding_size=D, encoder_size=D // 2, decoder_size=D, attention_size=D, chunk_size=chunk_size
        )
        return net.to(device)

    # the output layer's final product U (V x D) for every (s, b, t)
    return Workload(name, spec, make_network, batch, int(tmask.sum()), 2.0 * S * B * T * D * V)


def pyro_step(workload: Workload, pair_name: str, lr: float) -> Callable[[], float]:
    factory = PAIRS[pair_name][0]
    pair = factory(workload.make_network())
    svi = DataParallelSVI(pair.model, pair.guide, pyro.optim.Adam({"lr": lr}), pair.elbo(), distributed=False)

    def step() -> float:
        # each variant owns its network; Pyro's global store must hold this one's parameters (pyro.module
        # re-registers them; Adam's state is keyed by the parameter tensors and survives the clearing)
        pyro.clear_param_store()
        return svi.step(workload.batch)

    return step


def torch_step(workload: Workload, loss_fn: Callable[..., torch.Tensor], lr: float) -> Callable[[], float]:
    net = workload.make_network()
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)

    def step() -> float:
        optimizer.zero_grad()
        loss = loss_fn(net, workload.batch)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def _grads(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: (torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()) for n, p in net.named_parameters()}


def check_pair(workload: Workload, pair_name: str, seed: int = 0) -> dict[str, Any]:
    """Pyro's loss (deterministic pairs) and gradients against the hand-written ones (validation on)."""
    factory, loss_fn, deterministic = PAIRS[pair_name]
    out: dict[str, Any] = {}
    with pyro.validation_enabled(True):
        pyro.clear_param_store()
        net_pyro, net_torch = workload.make_network(), workload.make_network()
        pair = factory(net_pyro)
        if deterministic:
            loss_pyro = float(pair.elbo().loss(pair.model, pair.guide, workload.batch))
            with torch.no_grad():
                loss_torch = float(loss_fn(net_torch, workload.batch))
            out["loss_rel_err"] = abs(loss_pyro - loss_torch) / max(abs(loss_pyro), 1e-30)
        pyro.set_rng_seed(seed)
        pair.elbo().loss_and_grads(pair.model, pair.guide, workload.batch)
        torch.manual_seed(seed)
        loss_fn(net_torch, workload.batch).backward()
        gp, gt = _grads(net_pyro), _grads(net_torch)
        num = math.sqrt(sum(float((gp[n] - gt[n]).pow(2).sum()) for n in gp))
        den = math.sqrt(sum(float(g.pow(2).sum()) for g in gp.values()))
        out["grad_rel_err"] = num / max(den, 1e-30)
        pyro.clear_param_store()
    out["passed"] = out["grad_rel_err"] < 1e-4 and out.get("loss_rel_err", 0.0) < 1e-4
    return out


def output_workload(spec: dict[str, Any], output: str, device: torch.device, seed: int = 0) -> Workload:
    """A full-length batch (every source S, every target T tokens) and a ``Seq2Seq`` with ``output`` layer, or a
    ``TransformerSeq2Seq`` where ``spec`` gives ``heads`` (its width ``d``, ``ff``, ``layers``)."""
    g = torch.Generator().manual_seed(seed)
    B, S, T, V = spec["B"], spec["S"], spec["T"], spec["V"]
    source = torch.randint(4, spec["Vs"], (B, S), generator=g)
    target = torch.randint(4, V, (B, T), generator=g)
    target_in = torch.cat([torch.full((B, 1), 2), target[:, :-1]], 1)
    ones = torch.ones(B, S, dtype=torch.bool), torch.ones(B, T, dtype=torch.bool)
    batch = TranslationBatch(*(x.to(device) for x in (source, ones[0], target_in, target, ones[1])))

    def make_network(chunk_size: int | None = 8) -> Seq2Seq | TransformerSeq2Seq:
        torch.manual_seed(seed)
        parts = dict(attention_size=spec["att"], dropout=spec["dropout"], chunk_size=chunk_size,
                     output=NETWORK_OUTPUTS[output])
        if "heads" in spec:
            net = TransformerSeq2Seq(spec["Vs"], V, model_size=spec["d"], heads=spec["heads"],
                                     feedforward_size=spec["ff"], layers=spec["layers"], **parts)
        else:
            net = Seq2Seq(spec["Vs"], V, embedding_size=spec["E"], encoder_size=spec["enc"], decoder_size=spec["dec"],
                          **parts)
        return net.to(device).train()

    H = spec["d"] if "heads" in spec else spec["dec"]
    return Workload(f"{output}", spec, make_network, batch, B * T, 2.0 * S * B * T * H * V)
