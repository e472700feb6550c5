"""Figures: prior vs exact posterior vs ``q`` alignment heatmaps (Deng et al. 2018, Figure 3) and PSIS k-hat.

Every figure names what it shows (pair, network, split: the suptitle or title), its axes ("region" /
"question" for region QA, "source (de)" / "target (en)" for translation, "example" / "k-hat"), draws its panels
in the fixed order prior, posterior, q, and labels deterministic attention's row "soft attention weights" (it is
not a prior over a random alignment).  ``*_figure`` functions return the figure; the others write a PNG.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from torch import Tensor

from pyro_attention.files import writing

LABELS = {"prior": "prior p(z|x)", "posterior": "posterior p(z|x,y)", "guide": "q(z|x,y)"}
#: deterministic attention has no prior over a random alignment: its row holds the soft attention weights
SOFT_LABEL = "soft attention weights"
#: panels are always drawn in this order
ORDER = ("prior", "posterior", "guide")
GOLD_LABEL = "gold region (the answer is read from it)"
KHAT_THRESHOLD = 0.7


def _names(distributions: dict[str, Tensor], who: str) -> list[str]:
    names = [k for k in ORDER if k in distributions]
    if not names:
        raise ValueError(f"{who}: no 'prior', 'posterior' or 'guide' entry to draw")
    return names


def _label(name: str, soft: bool) -> str:
    return SOFT_LABEL if soft and name == "prior" else LABELS[name]


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    with writing(path):  # a read-only folder, a full disk: "cannot write PATH: CAUSE"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def alignment_figure(
    distributions: dict[str, Tensor],
    examples: Sequence[int],
    source_labels: Sequence[Sequence[str]],
    titles: Sequence[str],
    suptitle: str,
    gold: Tensor | None = None,
    soft: bool = False,
) -> Figure:
    """Region QA: one heatmap per example, rows = the alignment distributions (prior, posterior, q, in that
    order), columns = the example's real regions; x axis "region", y axis "question".

    :param distributions: name -> ``(B, T, S)`` probabilities (e.g. from
        :func:`~pyro_attention.inference.alignment_posterior`); row ``T = 0`` is drawn.
    :param source_labels: per example, the names of its real regions.
    :param titles: per drawn example, its title (e.g. the question and answer).
    :param suptitle: what the figure shows: the pair, the network and the split.
    :param gold: optional ``(B,)`` gold region, outlined in red and named in the legend.
    :param soft: the pair is deterministic (soft) attention: its ``"prior"`` row is labelled "soft attention
        weights", since there is no random alignment.
    """
    names = _names(distributions, "alignment_heatmaps")
    fig = Figure(figsize=(8, 1.6 + 1.3 * len(names) * len(examples)))
    axes = fig.subplots(len(examples), 1, squeeze=False, gridspec_kw={"hspace": 1.0})
    for ax, i, title in zip(axes[:, 0], examples, titles, strict=True):
        labels = list(source_labels[i])
        n = len(labels)
        rows = [distributions[k][i, 0, :n].detach().cpu().numpy() for k in names]
        im = ax.imshow(rows, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        ax.set_yticks(range(len(names)), [_label(k, soft) for k in names], fontsize=8)
        ax.set_xticks(range(n), labels, fontsize=7, rotation=20, ha="right")
        ax.set_xlabel("region", fontsize=8)
        ax.set_ylabel("question", fontsize=8)
        ax.set_title(title, fontsize=9)
        for r, row in enumerate(rows):
            for c, v in enumerate(row):
                ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if v < 0.6 else "k")
        if gold is not None and int(gold[i]) >= 0:
            g = int(gold[i])
            ax.add_patch(Rectangle((g - 0.5, -0.5), 1, len(names), fill=False, edgecolor="red", lw=2))
            ax.legend(
                handles=[Patch(facecolor="none", edgecolor="red", lw=2, label=GOLD_LABEL)],
                loc="upper left",
                bbox_to_anchor=(1.0, 1.0),
                fontsize=7,
                frameon=False,
            )
    fig.colorbar(im, ax=axes[:, 0].tolist(), shrink=0.6, label="probability", location="left", pad=0.25)
    fig.suptitle(suptitle, fontsize=10)
    return fig


def alignment_heatmaps(
    distributions: dict[str, Tensor],
    examples: Sequence[int],
    source_labels: Sequence[Sequence[str]],
    titles: Sequence[str],
    path: str | Path,
    gold: Tensor | None = None,
    suptitle: str = "alignments",
    soft: bool = False,
) -> Path:
    """Write :func:`alignment_figure` to ``path`` (PNG) and return the path."""
    return _save(alignment_figure(distributions, examples, source_labels, titles, suptitle, gold, soft), path)


def translation_figure(
    distributions: dict[str, Tensor],
    example: int,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    title: str,
    source_lang: str | None = None,
    target_lang: str | None = None,
    soft: bool = False,
) -> Figure:
    """Prior / exact posterior / q alignment matrices of one sentence pair, tokens on the axes (Deng et al.
    2018, Figure 3): one panel per distribution in that order, rows = target tokens, columns = source tokens.

    :param distributions: name -> ``(B, T, S)`` probabilities (``alignment_posterior``).
    :param title: what the figure shows: the pair, the network, the split and the sentence (the suptitle).
    :param source_lang: e.g. ``"de"``: the x axes read "source (de)".
    :param target_lang: e.g. ``"en"``: the y axis reads "target (en)".
    :param soft: deterministic (soft) attention: its panel is titled "soft attention weights".
    """
    names = _names(distributions, "translation_heatmaps")
    S, T = len(source_tokens), len(target_tokens)
    fig = Figure(figsize=(1.0 + 0.45 * S * len(names), 1.8 + 0.35 * T))
    axes = fig.subplots(1, len(names), squeeze=False)
    xlabel = f"source ({source_lang})" if source_lang else "source"
    ylabel = f"target ({target_lang})" if target_lang else "target"
    for k, (ax, name) in enumerate(zip(axes[0], names, strict=True)):
        matrix = distributions[name][example, :T, :S].detach().cpu().numpy()
        im = ax.imshow(matrix, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        ax.set_xticks(range(S), list(source_tokens), rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(T), list(target_tokens) if k == 0 else [""] * T, fontsize=8)
        ax.set_xlabel(xlabel, fontsize=8)
        if k == 0:
            ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(_label(name, soft), fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.7, label="probability")
    fig.suptitle(title, fontsize=9)
    return fig


def translation_heatmaps(
    distributions: dict[str, Tensor],
    example: int,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | Path,
    title: str = "alignments",
    source_lang: str | None = None,
    target_lang: str | None = None,
    soft: bool = False,
) -> Path:
    """Write :func:`translation_figure` to ``path`` (PNG) and return the path."""
    fig = translation_figure(
        distributions, example, source_tokens, target_tokens, title, source_lang, target_lang, soft
    )
    return _save(fig, path)


def khat_figure(khat: Any, title: str) -> Figure:
    """PSIS k-hat of q per example (ArviZ's ``plot_khat``) with a title, the 0.7 threshold drawn and named in a
    legend (above it the importance weights of q against the model have too heavy a tail to trust), and the
    axes named "example" and "k-hat".

    :param khat: per-example k-hat values (e.g. ``idata.sample_stats["khat"]``); ``nan`` entries (undefined
        k-hat) are dropped.
    :raises ValueError: if no k-hat is defined.
    """
    from pyro_attention.inference.arviz_generation import khat_axes

    values = np.asarray(getattr(khat, "values", khat), dtype=np.float64).ravel()
    defined = values[np.isfinite(values)]
    if defined.size == 0:
        raise ValueError("khat_figure: k-hat is undefined (nan) for every example; nothing to plot")
    ax = khat_axes(defined, KHAT_THRESHOLD, figsize=(6, 3.5))
    fig = ax.get_figure()
    ax.axhline(KHAT_THRESHOLD, color="red", ls="--", lw=1, label=f"k-hat = {KHAT_THRESHOLD} (unreliable above)")
    ax.legend(fontsize=8, loc="best")
    ax.set_xlabel("example")
    ax.set_ylabel("k-hat (PSIS, q against p)")
    ax.set_title(title, fontsize=9)
    return fig


def khat_plot(khat: Any, title: str, path: str | Path) -> Path:
    """Write :func:`khat_figure` to ``path`` (PNG) and return the path."""
    return _save(khat_figure(khat, title), path)
