"""Figures: prior vs exact posterior vs ``q`` alignment heatmaps (Deng et al. 2018, Figure 3)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from torch import Tensor  # noqa: E402

LABELS = {"prior": "prior p(z|x)", "posterior": "posterior p(z|x,y)", "guide": "q(z|x,y)"}


def alignment_heatmaps(
    distributions: dict[str, Tensor],
    examples: Sequence[int],
    source_labels: Sequence[Sequence[str]],
    titles: Sequence[str],
    path: str | Path,
    gold: Tensor | None = None,
) -> Path:
    """Write one heatmap per example, rows = the alignment distributions, columns = real source positions.

    :param distributions: name -> ``(B, T, S)`` probabilities (e.g. from
        :func:`~pyro_attention.inference.alignment_posterior`); ``T = 1`` rows are drawn for region QA, every
        target position for translation.
    :param source_labels: per example, the names of its real source positions.
    :param gold: optional ``(B,)`` gold source position, outlined in each row.
    """
    names = [k for k in ("prior", "posterior", "guide") if k in distributions]
    if not names:
        raise ValueError("alignment_heatmaps: no 'prior', 'posterior' or 'guide' entry to draw")
    fig, axes = plt.subplots(
        len(examples),
        1,
        figsize=(8, 1.2 + 1.3 * len(names) * len(examples)),
        squeeze=False,
        gridspec_kw={"hspace": 1.0},
    )
    for ax, i, title in zip(axes[:, 0], examples, titles, strict=True):
        labels = list(source_labels[i])
        n = len(labels)
        rows = [distributions[k][i, 0, :n].detach().cpu().numpy() for k in names]
        im = ax.imshow(rows, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        ax.set_yticks(range(len(names)), [LABELS[k] for k in names], fontsize=8)
        ax.set_xticks(range(n), labels, fontsize=7, rotation=20, ha="right")
        ax.set_title(title, fontsize=9)
        for r, row in enumerate(rows):
            for c, v in enumerate(row):
                ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if v < 0.6 else "k")
        if gold is not None:
            g = int(gold[i])
            ax.add_patch(plt.Rectangle((g - 0.5, -0.5), 1, len(names), fill=False, edgecolor="red", lw=2))
    fig.colorbar(im, ax=axes[:, 0].tolist(), shrink=0.6, label="probability")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def translation_heatmaps(
    distributions: dict[str, Tensor],
    example: int,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | Path,
    title: str = "",
) -> Path:
    """Prior / exact posterior / q alignment matrices of one sentence pair, tokens on the axes (Deng et al.
    2018, Figure 3): one panel per distribution, rows = target tokens, columns = source tokens.

    :param distributions: name -> ``(B, T, S)`` probabilities (``alignment_posterior``).
    """
    names = [k for k in ("prior", "posterior", "guide") if k in distributions]
    if not names:
        raise ValueError("translation_heatmaps: no 'prior', 'posterior' or 'guide' entry to draw")
    S, T = len(source_tokens), len(target_tokens)
    fig, axes = plt.subplots(1, len(names), figsize=(1.0 + 0.45 * S * len(names), 1.5 + 0.35 * T), squeeze=False)
    for k, (ax, name) in enumerate(zip(axes[0], names, strict=True)):
        matrix = distributions[name][example, :T, :S].detach().cpu().numpy()
        im = ax.imshow(matrix, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        ax.set_xticks(range(S), list(source_tokens), rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(T), list(target_tokens) if k == 0 else [""] * T, fontsize=8)
        ax.set_title(LABELS[name], fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.7, label="probability")
    if title:
        fig.suptitle(title, fontsize=9)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
