"""``pyro-attention inspect``: a trained translation checkpoint's alignments as ArviZ data, figures and a table.

Loads a checkpoint written by ``pyro-attention train``, takes the first ``size`` pairs of a split, and writes
:func:`~pyro_attention.inference.to_inference_data` as NetCDF (tokens as ``source_label`` / ``target_label``
coordinates), one heatmap per sentence of prior / exact posterior / q (:func:`pyro_attention.plots.
translation_heatmaps`), the k-hat plot (:func:`pyro_attention.plots.khat_plot`) where k-hat is defined, and
returns the diagnostics row (:func:`~pyro_attention.inference.diagnostics`).  Every figure's title names the pair,
the network and the split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from pyro_attention.data.translation import collate
from pyro_attention.inference import (
    alignment_posterior,
    diagnostics,
    format_diagnostics,
    save_netcdf,
    to_inference_data,
)
from pyro_attention.plots import khat_plot, translation_heatmaps


@torch.no_grad()
def inspect_checkpoint(
    checkpoint: str | Path,
    out: str | Path,
    plots: str | Path | None = None,
    split: str = "val",
    size: int = 20,
    num_samples: int = 100,
    num_plots: int = 4,
    data_dir: str | None = None,
) -> dict[str, Any]:
    """Write ``out`` (NetCDF) and figures under ``plots``; return ``{"idata", "diagnostics", "table", "figures"}``."""
    from pyro_attention.tasks.translation import load_checkpoint, load_split

    ckpt = load_checkpoint(checkpoint)
    pair = ckpt.pair
    config = ckpt.config if data_dir is None else ckpt.config.replace(data_dir=data_dir)
    data = load_split(config, split, size=size, references=False)
    if len(data) == 0:
        raise ValueError(f"split {split!r} is empty")
    batch = collate(
        [(ckpt.src_vocab.encode(s), ckpt.tgt_vocab.encode(t)) for s, t in zip(data.source, data.target, strict=True)]
    )
    targets = [list(t) + ["</s>"] for t in data.target]
    idata = to_inference_data(pair, batch, num_samples=num_samples, source_labels=data.source, target_labels=targets)
    save_netcdf(idata, out)
    row = diagnostics(pair, batch, num_samples=num_samples)
    figures = []
    label = type(pair).__name__ + (f" ({pair.estimator})" if pair.has_estimator_choice() else "")
    shows = f"{label}, {type(pair.network).__name__} network, {split} split"
    if plots is not None:
        probs = alignment_posterior(pair, batch)
        for i in range(min(num_plots, len(data))):
            figures.append(
                translation_heatmaps(
                    probs,
                    i,
                    data.source[i],
                    targets[i],
                    Path(plots) / f"alignment_{i}.png",
                    title=f"{shows}: sentence pair {i}",
                    source_lang=getattr(config, "src", None),
                    target_lang=getattr(config, "tgt", None),
                    soft=pair.deterministic,
                )
            )
        khat = idata.sample_stats["khat"] if "khat" in idata.sample_stats else None
        if khat is not None and np.isfinite(khat.values).any():
            title = f"PSIS k-hat of q per sentence pair: {shows}"
            figures.append(khat_plot(khat, title, Path(plots) / "khat.png"))
    return {"idata": idata, "diagnostics": row, "table": format_diagnostics({label: row}), "figures": figures}
