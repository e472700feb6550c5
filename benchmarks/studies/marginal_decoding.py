"""Beam search with the ``tanh`` layer's exact marginal: ``log_mixture_of_softmaxes`` (one ``exp`` per logit and a
batched product; the package's) against the formula it replaced, ``logsumexp_s (log p(s) + log_softmax(l_s))``:
the record behind docs/performance.md's paragraph on it.

Both decode the same sentences (sorted by length, ``--limit`` of them from the ``--offset``-th shortest of the
test split; beam 5, 64 sentences at a time, as ``evaluate`` decodes), alternating in one process for
``--rounds`` rounds (the order swapping each round), and the translations are compared sentence by sentence.

``--checkpoint`` is a run's ``best.pt`` or ``last.pt`` with a ``tanh`` output layer and a pair that decodes with
the ``marginal`` rule (its data where its config says); without it, a fresh ``marginal`` network on the package's
synthetic corpus (what the test runs).  It measures and asserts nothing; say what else ran on the cores.

    python benchmarks/studies/marginal_decoding.py --checkpoint ~/runs/table1-iwslt14/va-enum/last.pt --limit 128 \\
        --offset 3000
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace
from typing import Any

import torch

from pyro_attention.tasks.translation import TranslationConfig, decoding
from pyro_attention.tasks.translation.checkpoints import Checkpoint, load_checkpoint
from pyro_attention.tasks.translation.corpora import build_pair, build_vocabs, load_corpora, load_split
from pyro_attention.tasks.translation.translating import BeamSearch, decode_batches


def logsumexp_marginal(self: Any, src: Any, h: torch.Tensor, scores: torch.Tensor, fed: torch.Tensor) -> torch.Tensor:
    """The formula ``_Marginal`` used for the ``tanh`` layer before ``log_mixture_of_softmaxes``."""
    log_prior = decoding._log_prior(src, scores)
    per_alignment = self.net.step_logits(h.unsqueeze(1), src.values).log_softmax(-1)  # (N, S, V)
    return (log_prior.unsqueeze(-1) + per_alignment).logsumexp(1)


FORMULAS = {"mixture": decoding._Marginal.__call__, "logsumexp": logsumexp_marginal}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="a tanh run's best.pt or last.pt (default: a fresh run)")
    parser.add_argument("--limit", type=int, default=64, help="sentences decoded")
    parser.add_argument("--offset", type=int, default=0, help="start at the N-th shortest test sentence")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both formulas")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    return parser


def _setup(path: str | None) -> tuple[Checkpoint | SimpleNamespace, list[list[str]], str]:
    if path is not None:
        ck = load_checkpoint(path)
        return ck, load_split(ck.config, "test", size=None).source, f"{path} (epoch {ck.state['epoch']})"
    config = TranslationConfig(model="marginal", train_size=64, val_size=8, test_size=16)
    corpora = load_corpora(config, log=None, test=True)
    src, tgt = build_vocabs(config, corpora.train)
    network, pair = build_pair(config, src, tgt)
    network.eval()
    fresh = SimpleNamespace(pair=pair, network=network, src_vocab=src, tgt_vocab=tgt)  # what decode_batches reads
    return fresh, corpora.test.source, "a fresh marginal network on synthetic data"


def main(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    ckpt, sources, what = _setup(args.checkpoint)
    chosen = sorted(sources, key=len)[args.offset : args.offset + args.limit]
    print(f"{what}: {len(chosen)} sentences (mean length {sum(map(len, chosen)) / max(len(chosen), 1):.1f}), "
          f"beam 5, {torch.get_num_threads()} thread(s)")
    seconds: dict[str, list[float]] = {name: [] for name in FORMULAS}
    outputs: dict[str, list] = {}
    keep = decoding._Marginal.__call__
    try:
        for k in range(args.rounds):
            for name in FORMULAS if k % 2 == 0 else list(FORMULAS)[::-1]:
                decoding._Marginal.__call__ = FORMULAS[name]
                start = time.perf_counter()
                outputs[name] = decode_batches(ckpt, chosen, BeamSearch(rule="marginal"))
                seconds[name].append(time.perf_counter() - start)
                print(f"round {k + 1}, {name}: {seconds[name][-1]:.2f} s, "
                      f"{len(chosen) / seconds[name][-1]:.2f} sentences/s", flush=True)
    finally:
        decoding._Marginal.__call__ = keep
    differ = sum(a != b for a, b in zip(outputs["mixture"], outputs["logsumexp"], strict=True))
    print(f"translations that differ: {differ} of {len(chosen)}")
    return {"seconds": seconds, "differ": differ, "sentences": len(chosen)}


if __name__ == "__main__":
    main(make_parser().parse_args())
