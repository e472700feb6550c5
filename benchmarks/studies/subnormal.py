"""What subnormal numbers cost the enumeration kernels on this CPU: the record behind docs/performance.md's row
"no subnormal numbers in the kernel's backward products".

A trained model puts most of a row's ``V`` probabilities below float32's smallest normal number (1.2e-38), and an
exact marginal's upstream gradient of a row (the posterior weight of its alignment) often lies there too.  This
times, at one torch thread, each case once per round (``--repeats`` rounds, medians):

* ``mm``: a product of the backward pass's shape (``rows x V`` transposed by ``rows x H``) whose second operand is
  half subnormal, and the same operand with those entries set to 0;
* ``kernel``: :func:`~pyro_attention.distributions.kernels.observed_log_softmax`, forward and backward, on one chunk
  (``rows`` rows, ``H``, ``V``, everything kept) with unpeaked rows, with peaked rows (hidden states scaled by
  ``--peak``) and with peaked rows whose upstream gradients are 1e-40 for 30 % of them;
* ``product``: :func:`~pyro_attention.distributions.kernels.product_log_normalizer`, forward and backward, at
  ``B T S V`` with two experts that prefer the same words, ``scale * a + noise``, for ``--scales``.

It only calls functions that every version of the package has, so running it in two installs (``python
benchmarks/studies/subnormal.py`` with each one's Python) compares them.  It measures and asserts nothing; say what else
ran on the cores beside it.

    python benchmarks/studies/subnormal.py
    python benchmarks/studies/subnormal.py --repeats 1 --cases kernel product
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from pyro_attention.distributions.kernels import observed_log_softmax, product_log_normalizer

CASES = ("mm", "kernel", "product")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES), help="what to time")
    parser.add_argument("--rows", type=int, default=6144, help="kernel and mm: rows of the chunk (B T S share)")
    parser.add_argument("--hidden", type=int, default=512, help="H")
    parser.add_argument("--vocab", type=int, default=5921, help="V (Multi30k's target vocabulary)")
    parser.add_argument("--peak", type=float, default=4.0, help="kernel: scale of the peaked rows' hidden states")
    parser.add_argument("--shape", type=int, nargs=3, default=[64, 12, 13], metavar=("B", "T", "S"),
                        help="product: batch, target and source lengths")
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 10.0, 30.0],
                        help="product: scales of the experts' shared preference")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (median reported)")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _mm_cases(args: argparse.Namespace, g: torch.Generator) -> dict[str, Callable[[], object]]:
    tiny = torch.finfo(torch.float32).tiny
    p = torch.rand(args.rows, args.vocab, generator=g) * 1e-3
    gh = torch.randn(args.rows, args.hidden, generator=g)
    gh[torch.rand(args.rows, generator=g) < 0.5] *= 1e-40 / 3.0  # half the rows subnormal
    flushed = gh.masked_fill(gh.abs() < tiny, 0.0)
    out = torch.zeros(args.vocab, args.hidden)
    return {"mm, half of one operand subnormal": lambda: out.addmm_(p.t(), gh, alpha=-1.0),
            "mm, those entries 0": lambda: out.addmm_(p.t(), flushed, alpha=-1.0)}


def _kernel_cases(args: argparse.Namespace, g: torch.Generator) -> dict[str, Callable[[], object]]:
    w = torch.randn(args.vocab, args.hidden, generator=g) * 0.2
    b = torch.zeros(args.vocab)
    y = torch.randint(args.vocab, (args.rows,), generator=g)
    some_tiny = torch.rand(args.rows, generator=g)
    some_tiny[torch.rand(args.rows, generator=g) < 0.3] = 1e-40

    def run(scale: float, upstream: torch.Tensor) -> Callable[[], object]:
        h = torch.randn(args.rows, args.hidden, generator=g) * scale

        def step() -> None:
            hh, ww, bb = (t.clone().requires_grad_() for t in (h, w, b))
            out = observed_log_softmax(hh, ww, bb, y, args.rows, 2**34)
            (out * upstream).sum().backward()

        return step

    ones = torch.ones(args.rows)
    return {"kernel, unpeaked rows": run(0.05, ones), f"kernel, peaked rows (x{args.peak:g})": run(args.peak, ones),
            "kernel, peaked rows, 30 % of upstream gradients 1e-40": run(args.peak, some_tiny)}


def _product_cases(args: argparse.Namespace, g: torch.Generator) -> dict[str, Callable[[], object]]:
    B, T, S = args.shape
    cases = {}
    for scale in args.scales:
        common = torch.randn(B, 1, args.vocab, generator=g) * scale
        u = (common + torch.randn(B, T, args.vocab, generator=g)).requires_grad_()
        v = (common + torch.randn(B, S, args.vocab, generator=g)).requires_grad_()
        below = ((u - u.amax(-1, keepdim=True)) < -87.34).float().mean().item()
        cases[f"product, scale {scale:g} ({below:.0%} of exp(u - max) below the normal range)"] = (
            lambda u=u, v=v: product_log_normalizer(u, v).sum().backward())
    return cases


def main(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(args.seed)
    makers = {"mm": _mm_cases, "kernel": _kernel_cases, "product": _product_cases}
    print(f"torch {torch.__version__}, one thread, median of {args.repeats}")
    print("| case | seconds |\n|---|---|")
    for case in args.cases:
        for name, fn in makers[case](args, g).items():
            fn()  # warm-up
            print(f"| {name} | {_median_seconds(fn, args.repeats):.3f} |", flush=True)


if __name__ == "__main__":
    main(make_parser().parse_args())
