"""Which way each training term pulls a categorical prior's entropy, at a translation checkpoint's weights.

    python benchmarks/studies/prior_pull.py ~/runs/table1-iwslt14/va-enum-product/best.pt --split val
    python benchmarks/studies/prior_pull.py RUN/best.pt OTHER/best.pt --batches 4 --json pull.json

A measurement, not a test.  For every checkpoint of a categorical pair (marginal, hard, variational), on the
``--split`` batches in eval mode (no dropout), with ``l[t, s] = log p(y_t | x, z_t = s)`` (the enumeration kernel's
table), the prior ``p(z_t | x)``, the exact posterior ``p(z_t | x, y)`` and, for pairs with a guide, ``q(z_t | x, y)``:

* the distributions: mean entropies per target token, ``KL(q || p)`` and ``KL(posterior || p)``, how often the
  guide's and the posterior's most probable source position is the prior's (``agree_*``), and the prior's mass on
  the last real source position (``prior_last``: the sentence's final token; sources carry no ``</s>``);
* how much the likelihood depends on the alignment: the prior-weighted standard deviation of ``l[t, :]`` and its
  range over the real source positions (``l_sd``, ``l_range``, nats), and ``gain``, ``log p(y_t | x)`` less the
  same sum under a uniform alignment (what the prior's choice is worth, nats per token);
* for each training objective -- the marginal NLL ``-log sum_s p(s) e^{l_s}``, and for guided pairs the negative
  ELBO and its two terms ``-E_q[l]`` and ``KL(q || p)`` -- its value per token (``value_*``), the norm of its
  gradient on the prior's score parameters (``network.score``; ``grad_norm_*``) and the cosine between its descent
  direction there and the gradient of the prior's entropy (``cos_dH_*``: above 0 a small step on that objective
  alone broadens the prior, below 0 it sharpens it).

The ELBO here is the enumerated one (``E_q`` and the KL summed exactly), the ``enum`` estimator's objective; the
decoder's input feed makes ``l`` depend on earlier priors, so every gradient includes that path.  One thread unless
``--threads``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

OBJECTIVES = ("marginal", "neg_elbo", "neg_expected_ll", "kl")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs="+", help="checkpoints (best.pt / last.pt) of categorical translation pairs")
    p.add_argument("--split", default="val", choices=("train", "val", "test"), help="split to score (default val)")
    p.add_argument("--batches", type=int, default=None, help="only the first N batches (shortest sentences first)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")
    return p


def _total(x: Tensor, mask: Tensor) -> Tensor:
    """The sum of per-token ``x`` ``(B, T)`` over the real target tokens."""
    return (x * mask).sum()


def measure(checkpoint: str | Path, split: str = "val", batches: int | None = None, batch_size: int = 64) -> dict:
    """The quantities of the module docstring for one checkpoint, as a flat dict (means per target token)."""
    from pyro_attention.distributions.enumeration import observed_table
    from pyro_attention.inference import entropy
    from pyro_attention.models._categorical import CategoricalAlignmentModel, GuidedCategoricalAlignment
    from pyro_attention.tasks.translation import load_checkpoint
    from pyro_attention.tasks.translation.corpora import load_split, make_batches

    ckpt = load_checkpoint(checkpoint)
    pair, net = ckpt.pair, ckpt.network
    if not isinstance(pair, CategoricalAlignmentModel):
        raise ValueError(f"{checkpoint}: prior_pull needs a categorical pair (marginal, hard, variational); this is "
                         f"{type(pair).__name__}")
    guided = isinstance(pair, GuidedCategoricalAlignment)
    data = load_split(ckpt.config, split, size=getattr(ckpt.config, f"{split}_size", None), references=False)
    where = next(net.parameters()).device
    todo = [b.to(where) for b in make_batches(data, ckpt.src_vocab, ckpt.tgt_vocab, batch_size)[:batches]]
    params = [p for p in net.score.parameters() if p.requires_grad]
    objectives = OBJECTIVES if guided else OBJECTIVES[:1]
    grads = {k: [torch.zeros_like(p) for p in params] for k in (*objectives, "entropy")}
    sums: dict[str, float] = {}
    tokens = 0
    net.eval()
    for batch in todo:
        enc = net.encode(batch)
        real = enc.source_mask.unsqueeze(1)  # (B, 1, S)
        mask = enc.target_mask
        lp = torch.log_softmax(pair.prior_logits(enc), -1).masked_fill(~real, -1e30)
        table = observed_table(net, enc, net.chunk_size).masked_fill(~real, 0.0)
        joint = lp + table
        terms = {"marginal": -_total(joint.logsumexp(-1), mask), "entropy": _total(entropy(lp.exp()), mask)}
        if guided:
            lq = torch.log_softmax(pair.guide_logits(enc), -1).masked_fill(~real, -1e30)
            q = lq.exp()
            terms["neg_expected_ll"] = -_total((q * table).sum(-1), mask)
            terms["kl"] = _total((q * (lq - lp)).sum(-1), mask)
            terms["neg_elbo"] = terms["neg_expected_ll"] + terms["kl"]
        for key, value in terms.items():
            for g, d in zip(grads[key], torch.autograd.grad(value, params, retain_graph=True), strict=True):
                g += d
            if key != "entropy":
                sums[f"value_{key}"] = sums.get(f"value_{key}", 0.0) + float(value.detach())
        with torch.no_grad():
            prior = lp.exp()
            lpost = torch.log_softmax(joint, -1).masked_fill(~real, -1e30)
            spread = table - (prior * table).sum(-1, keepdim=True)
            at_real = table.masked_fill(~real, -1e30)  # padded sources out of the max and the sum
            uniform = at_real.logsumexp(-1) - real.sum(-1).log()
            found = {
                "h_prior": entropy(lp.exp()), "h_posterior": entropy(lpost.exp()),
                "kl_posterior_prior": (lpost.exp() * (lpost - lp)).sum(-1),
                "agree_posterior": (lpost.argmax(-1) == lp.argmax(-1)).float(),
                "l_sd": (prior * spread**2).sum(-1).sqrt(),
                "l_range": at_real.amax(-1) - table.masked_fill(~real, 1e30).amin(-1),
                "gain": joint.logsumexp(-1) - uniform,
                "prior_last": prior.gather(-1, (real.sum(-1, keepdim=True) - 1).expand(*mask.shape, 1)).squeeze(-1),
            }
            if guided:
                found.update(h_guide=entropy(q), kl_guide_prior=(q * (lq - lp)).sum(-1),
                             agree_guide=(lq.argmax(-1) == lp.argmax(-1)).float())
            for key, value in found.items():
                sums[key] = sums.get(key, 0.0) + float(_total(value, mask))
        tokens += int(mask.sum())
    row: dict[str, Any] = {"checkpoint": str(checkpoint), "pair": type(pair).__name__, "split": split,
                           "batches": len(todo), "tokens": tokens}
    row.update({key: value / max(tokens, 1) for key, value in sums.items()})
    flat_h = torch.cat([g.flatten() for g in grads["entropy"]])
    for key in objectives:
        flat = torch.cat([g.flatten() for g in grads[key]])
        row[f"grad_norm_{key}"] = float(flat.norm())
        # descent direction -g; d H / d step = -<grad H, g> / |g|; as a cosine with grad H
        row[f"cos_dH_{key}"] = float(-(flat_h @ flat) / (flat_h.norm() * flat.norm()).clamp_min(1e-30))
    return row


def markdown(rows: list[dict]) -> str:
    """The rows as a markdown table (one column per checkpoint)."""
    keys = [k for k in rows[0] if k not in ("checkpoint",)]
    for r in rows[1:]:
        keys += [k for k in r if k not in keys and k != "checkpoint"]
    names = ["/".join(Path(r["checkpoint"]).parts[-3:-1]) or r["checkpoint"] for r in rows]  # RUNS/ROW
    lines = ["| quantity | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(rows)]
    for k in keys:
        cells = [r.get(k, "-") for r in rows]
        lines.append(f"| {k} | " + " | ".join(f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> list[dict]:
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        rows = [measure(c, args.split, args.batches, args.batch_size) for c in args.checkpoints]
    finally:
        torch.set_num_threads(threads)
    print(markdown(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main(make_parser().parse_args(sys.argv[1:]))
