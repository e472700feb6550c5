"""Micro-benchmarks behind the "what was tried" table of docs/performance.md (soft attention against a toolkit).

    python benchmarks/studies/micro.py               # the toolkit's Multi30k sizes, 1 thread
    python benchmarks/studies/micro.py --threads 2

Each line is the median of ``--repeats`` timed calls after one untimed call, the variants of a line interleaved:

* **observed-token log-probability**, forward + backward, at ``N x V`` logits (default 909 x 5,921: one batch of
  64 Multi30k sentences): ``raw[y] - logsumexp(raw)`` (the former ``OutputCategorical.log_prob``) against one fused
  ``log_softmax(raw)[y]`` (the current one) and ``torch.nn.functional.cross_entropy``;
* **the optimiser step** over the parameters of ``Seq2Seq`` at the toolkit's size (embeddings 256, BiLSTM 2 x 256,
  decoder 512, vocabularies 7,859 / 5,921; the inference network's parameters excluded, as in a soft-attention
  step): Pyro's ``ClippedAdam`` against :class:`~pyro_attention.inference.optim.FusedClippedAdam`;
* **the output layer's product** ``(N x 512) (512 x V)`` in float32 and bfloat16 (``torch.mm``);
* **a decoding step's products** at ``--beam-rows`` rows (default 320: 64 sentences x beam 5), under ``no_grad``:
  the output layer ``nn.Linear(512, V)`` and the decoder's ``nn.LSTMCell(768, 512)`` against their oneDNN twins
  (:mod:`pyro_attention.networks.onednn`, what beam search multiplies with).

It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import pyro
import torch
from pyro.optim import ClippedAdam
from torch import nn

from pyro_attention.inference.optim import FusedClippedAdam
from pyro_attention.networks import Seq2Seq
from pyro_attention.networks.onednn import OneDNNLinear, OneDNNLSTMCell


def _median(fns: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def log_prob_variants(N: int, V: int) -> dict[str, Callable[[], None]]:
    g = torch.Generator().manual_seed(0)
    raw0, y = torch.randn(N, V, generator=g), torch.randint(V, (N,), generator=g)

    def run(f: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def call() -> None:
            raw = raw0.clone().requires_grad_()
            f(raw).sum().backward()

        return call

    return {
        "raw[y] - logsumexp(raw)": run(lambda r: r.gather(-1, y[:, None]).squeeze(-1) - torch.logsumexp(r, -1)),
        "log_softmax(raw)[y]": run(lambda r: r.log_softmax(-1).gather(-1, y[:, None]).squeeze(-1)),
        "cross_entropy": run(lambda r: -torch.nn.functional.cross_entropy(r, y, reduction="none")),
    }


def optimiser_variants(sizes: dict[str, int]) -> dict[str, Callable[[], float]]:
    out = {}
    for name, cls in (("pyro ClippedAdam", ClippedAdam), ("FusedClippedAdam", FusedClippedAdam)):
        pyro.clear_param_store()
        torch.manual_seed(0)
        net = Seq2Seq(sizes["Vs"], sizes["V"], sizes["E"], sizes["enc"], sizes["dec"], sizes["att"])
        pyro.module(f"network-{name}", net)
        params = [p for n, p in net.named_parameters() if not n.startswith("q_")]
        optim = cls({"lr": 1e-3, "clip_norm": 5.0})

        def step(params: list = params, optim: object = optim) -> float:
            """One optimiser call on fresh random gradients; its seconds (the gradients' generation excluded)."""
            for p in params:
                p.grad = torch.randn_like(p)
            start = time.perf_counter()
            optim(params)
            return time.perf_counter() - start

        out[name] = step
    return out


def matmul_variants(N: int, H: int, V: int) -> dict[str, Callable[[], None]]:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(N, H, generator=g), torch.randn(H, V, generator=g)
    a16, b16 = a.bfloat16(), b.bfloat16()
    return {"float32 mm": lambda: torch.mm(a, b), "bfloat16 mm": lambda: torch.mm(a16, b16)}


def decoding_variants(N: int, E: int, H: int, V: int) -> dict[str, Callable[[], None]]:
    torch.manual_seed(0)
    linear, cell = nn.Linear(H, V), nn.LSTMCell(E + H, H)
    twin_linear, twin_cell = OneDNNLinear(linear), OneDNNLSTMCell(cell)
    x, inp, state = torch.randn(N, H), torch.randn(N, E + H), (torch.randn(N, H), torch.randn(N, H))
    return {"nn.Linear (output)": lambda: linear(x), "oneDNN twin (output)": lambda: twin_linear(x),
            "nn.LSTMCell": lambda: cell(inp, state), "oneDNN twin (LSTM cell)": lambda: twin_cell(inp, state)}


def main(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    torch.set_num_threads(args.threads)
    sizes = dict(Vs=60, V=50, E=8, enc=8, dec=16, att=8) if args.tiny else dict(
        Vs=7859, V=5921, E=256, enc=256, dec=512, att=256)
    N = 7 if args.tiny else args.rows
    result = {"log_prob": _median(log_prob_variants(N, sizes["V"]), args.repeats)}
    steps = optimiser_variants(sizes)
    timed: dict[str, list[float]] = {k: [] for k in steps}
    for i in range(args.repeats + 1):
        for name, step in steps.items():
            seconds = step()
            if i:
                timed[name].append(seconds)
    result["optimiser"] = {k: statistics.median(v) for k, v in timed.items()}
    result["matmul"] = _median(matmul_variants(N, sizes["dec"], sizes["V"]), args.repeats)
    with torch.no_grad():
        result["decoding"] = _median(decoding_variants(7 if args.tiny else args.beam_rows, sizes["E"], sizes["dec"],
                                                       sizes["V"]), args.repeats)
    print(f"benchmarks/studies/micro.py: {torch.get_num_threads()} thread(s), torch {torch.__version__}, N={N}, "
          f"V={sizes['V']}, median of {args.repeats}")
    for section, times in result.items():
        for name, seconds in times.items():
            print(f"  {section:10s} {name:26s} {seconds * 1000:8.2f} ms")
    return result


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rows", type=int, default=909, help="N: target tokens of a batch")
    parser.add_argument("--beam-rows", type=int, default=320, help="rows of a decoding step (sentences x beam)")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (for the test)")
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
