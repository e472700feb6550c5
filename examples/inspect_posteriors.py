"""Inspect alignment posteriors with ArviZ: train pairs on synthetic region QA, write NetCDF, print diagnostics.

For each pair, :func:`pyro_attention.inference.to_inference_data` builds ArviZ data (an ``InferenceData`` on
ArviZ 0.2x, an ``xarray.DataTree`` on ArviZ >= 1) with prior
and posterior alignment draws, the exact per-token log-likelihood and per-example ELBO, KL and PSIS k-hat of q;
:func:`~pyro_attention.inference.diagnostics` summarises them in one table (k-hat of q against the exact
posterior, the ELBO gap = KL, entropies of prior / posterior / q and how often their argmaxes agree).  For the
Dirichlet pair, which has no exact posterior, NUTS on the alignment of a few held-out examples (two chains,
R-hat and ESS from ``az.summary``) is the reference q is compared with.  The
variational pair's data is written to ``--out`` as NetCDF, and its k-hat plot (where k-hat is defined) and a
forest plot of the relaxed pair's draws of the attention weights of one example are saved next to it.

    python examples/inspect_posteriors.py --epochs 4 --out posterior.nc

References:
[1] Deng, Kim, Chiu, Guo, Rush, "Latent Alignment and Variational Attention", NeurIPS 2018.
[2] Vehtari, Simpson, Gelman, Yao, Gabry, "Pareto Smoothed Importance Sampling", 2015 (k-hat).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from pyro_attention.data import make_region_qa
from pyro_attention.inference import (
    compare_to_guide,
    diagnostics,
    fit,
    format_diagnostics,
    nuts_alignment,
    save_netcdf,
    to_inference_data,
)
from pyro_attention.inference.arviz_generation import forest_figure, summary
from pyro_attention.networks import RegionQA
from pyro_attention.plots import khat_plot
from pyro_attention.tasks.region_qa import make_pair, row_label

ROWS = [("marginal", None), ("hard", "enum"), ("variational", "enum"), ("variational", "sample"), ("relaxed", None)]


def main(args: argparse.Namespace) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    torch.set_num_threads(args.threads)
    train = make_region_qa(args.train_size, seed=args.seed)
    held_out = make_region_qa(args.val_size, seed=args.seed + 1)
    rows, saved, relaxed, nuts_rows = {}, None, None, []
    for name, estimator in ROWS:
        torch.manual_seed(args.seed)
        net = RegionQA(train.feature_size, len(train.answers), vocab_size=len(train.vocab), hidden_size=args.hidden)
        pair = make_pair(name, estimator, net)
        fit(pair, train, num_epochs=args.epochs, lr=args.lr, seed=args.seed, progress=False)
        label = row_label(name, estimator)
        rows[label] = diagnostics(pair, held_out.data, num_samples=args.num_samples)
        if name == "relaxed":
            relaxed = to_inference_data(
                pair, held_out.data, num_samples=args.num_samples, source_labels=held_out.region_names
            )
            if args.nuts:
                nuts_rows = _nuts_check(pair, held_out, args)
        if (name, estimator) == ("variational", "enum"):
            saved = to_inference_data(
                pair, held_out.data, num_samples=args.num_samples, source_labels=held_out.region_names
            )
    print(format_diagnostics(rows))
    if nuts_rows:
        print("\nrelaxed (Dirichlet) pair: NUTS on the alignment of single held-out examples, network fixed")
        print("| example | regions | max R-hat | min ESS (bulk) | L1(q mean, NUTS mean) | L1(prior mean, NUTS mean) |")
        print("|---|---|---|---|---|---|")
        for r in nuts_rows:
            print(
                f"| {r['example']} | {r['regions']} | {r['r_hat']:.3f} | {r['ess']:.0f} | {r['l1_q']:.3f} | "
                f"{r['l1_prior']:.3f} |"
            )
    out = save_netcdf(saved, args.out)
    print(f"wrote the ArviZ data of variational (enum) to {out.resolve()}")
    khat = saved.sample_stats["khat"]
    if np.isfinite(khat.values).any():
        path = khat_plot(
            khat, "PSIS k-hat of q per held-out scene: variational (enum), RegionQA", out.with_suffix(".khat.png")
        )
        print(f"wrote {path}")
    else:
        print(
            "k-hat is undefined for every example (q has fewer than 10 distinct importance weights: one region-QA "
            "target over a handful of regions); no k-hat plot"
        )
    # draws exist for the continuous (Dirichlet) alignment only: its q over the regions of one held-out scene
    regions = list(range(int(held_out.data.region_mask[0].sum())))
    fig = forest_figure(relaxed, var_names=["weights"], coords={"example": 0, "target": 0, "source": regions})
    fig.suptitle("relaxed (Dirichlet), RegionQA, held-out scene 0: draws from q of the weights", fontsize=9)
    fig.supxlabel("attention weight")
    fig.savefig(out.with_suffix(".forest.png"), dpi=100, bbox_inches="tight")
    plt.close("all")
    print(f"wrote {out.with_suffix('.forest.png')}")
    return {"rows": rows, "idata": saved, "nuts": nuts_rows}


def _nuts_check(pair, data, args: argparse.Namespace) -> list[dict]:  # noqa: ANN001
    """NUTS reference posteriors for the first ``--nuts`` held-out examples (padding sliced off)."""
    out = []
    for i in range(args.nuts):
        one = data.data[i : i + 1]
        n = int(one.region_mask.sum())
        one.regions, one.region_mask = one.regions[:, :n], one.region_mask[:, :n]
        nuts = nuts_alignment(
            pair, one, num_samples=args.nuts_samples, warmup_steps=args.nuts_samples, num_chains=2, seed=args.seed
        )
        table = summary(nuts, var_names=["align"])
        cmp = compare_to_guide(pair, one, nuts)
        out.append(
            {
                "example": i,
                "regions": n,
                "r_hat": float(table["r_hat"].max()),
                "ess": float(table["ess_bulk"].min()),
                "l1_q": float(cmp["l1_q"].mean()),
                "l1_prior": float(cmp["l1_prior"].mean()),
            }
        )
    return out


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--val-size", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--num-samples", type=int, default=100, help="draws per group and for k-hat")
    parser.add_argument("--nuts", type=int, default=3, help="held-out examples for the NUTS check of relaxed")
    parser.add_argument("--nuts-samples", type=int, default=200, help="NUTS draws (and warm-up steps) per chain")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="posterior.nc")
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
