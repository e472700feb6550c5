"""Alignment Error Rate (Och & Ney 2003) and turning attention / posterior matrices into hard links.

Links are 0-indexed ``(source_pos, target_pos)`` pairs throughout, as read by
:mod:`pyro_attention.data.alignments`.  With predicted links A, sure gold links S and possible gold links
P ⊇ S (where an annotation has no possible links, P = S -- :class:`~pyro_attention.data.alignments.GoldAlignment`
guarantees ``possible ⊇ sure``, so this holds by construction)::

    precision = |A ∩ P| / |A|        recall = |A ∩ S| / |S|
    AER       = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

Corpus scores are micro-averaged: every count is summed over all sentence pairs before dividing (the usual
convention, and what the NAACL 2003 / WPT 2005 scorers do).  A ratio with a zero denominator is ``nan``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pyro_attention.data.alignments import GoldAlignment, invert
from pyro_attention.files import write_text

#: a set of ``(i, j)`` links
Links = set[tuple[int, int]]
#: one link set, or one per sentence pair
LinkSets = Links | frozenset[tuple[int, int]] | Sequence[Links | frozenset[tuple[int, int]]]

__all__ = [
    "SYMMETRIZATIONS",
    "AERResult",
    "alignment_error_rate",
    "combine_posteriors",
    "grow_diag",
    "intersect",
    "links_from_probs",
    "symmetrize",
    "union",
]

Link = tuple[int, int]


@dataclass(frozen=True)
class AERResult:
    """Corpus-level alignment scores.

    :param aer: alignment error rate in ``[0, 1]`` (lower is better).
    :param precision: ``|A ∩ P| / |A|``.
    :param recall: ``|A ∩ S| / |S|``.
    :param num_predicted: ``|A|`` summed over pairs.
    :param num_sure: ``|S|`` summed over pairs.
    :param num_possible: ``|P|`` summed over pairs, with ``P ⊇ S`` (sure links included).
    """

    aer: float
    precision: float
    recall: float
    num_predicted: int
    num_sure: int
    num_possible: int

    def __str__(self) -> str:
        return (
            f"AER {100 * self.aer:.2f}  precision {100 * self.precision:.2f}  recall {100 * self.recall:.2f}  "
            f"(|A| {self.num_predicted}, |S| {self.num_sure}, |P| {self.num_possible})"
        )


def _ratio(num: int, den: int) -> float:
    return num / den if den else math.nan


def alignment_error_rate(
    predicted: Sequence[Iterable[Link]], gold: Sequence[GoldAlignment | Iterable[Link]]
) -> AERResult:
    """Corpus AER, precision and recall of ``predicted`` links against ``gold`` (Och & Ney 2003).

    :param predicted: per sentence pair, the predicted ``(source_pos, target_pos)`` links A.
    :param gold: per sentence pair, a :class:`GoldAlignment` (a plain set of links counts as sure only, P = S).
    :raises ValueError: if the two sequences differ in length.
    """
    if len(predicted) != len(gold):
        raise ValueError(f"alignment_error_rate: {len(predicted)} predicted alignments for {len(gold)} gold ones")
    n_a = n_s = n_p = a_and_s = a_and_p = 0
    for a, g in zip(predicted, gold, strict=True):
        a = {(int(i), int(j)) for i, j in a}
        if isinstance(g, GoldAlignment):
            sure, possible = g.sure, g.possible | g.sure
        else:
            sure = possible = {(int(i), int(j)) for i, j in g}
        n_a += len(a)
        n_s += len(sure)
        n_p += len(possible)
        a_and_s += len(a & sure)
        a_and_p += len(a & possible)
    total = n_a + n_s
    aer = 1.0 - (a_and_s + a_and_p) / total if total else math.nan
    return AERResult(aer, _ratio(a_and_p, n_a), _ratio(a_and_s, n_s), n_a, n_s, n_p)


# ----------------------------------------------------------------------------------------------------------------
# From probabilities to links


def _positions(mask: Tensor) -> Tensor:
    """Word position of every cell along the last dim: the rank among the ``True`` cells (``-1`` elsewhere)."""
    return torch.where(mask, mask.long().cumsum(-1) - 1, torch.full_like(mask, -1, dtype=torch.long))


def links_from_probs(
    probs: Tensor,
    threshold: float | None = None,
    source_mask: Tensor | None = None,
    target_mask: Tensor | None = None,
) -> set[Link] | list[set[Link]]:
    """Hard ``(source_pos, target_pos)`` links from alignment probabilities (attention weights, posteriors).

    :param probs: ``(T, S)`` for one sentence pair or ``(B, T, S)`` for a batch: row ``t`` is the distribution
        over source positions for target token ``t``.
    :param threshold: ``None``: one link per (unmasked) target token, to its most probable unmasked source
        token (ties go to the first); a number: every unmasked cell with ``probs >= threshold``.
    :param source_mask: ``(S,)`` / ``(B, S)`` bool, ``True`` at source *words*; default all.
    :param target_mask: ``(T,)`` / ``(B, T)`` bool, ``True`` at target *words*; default all.  Mask out padding
        and special tokens (``<s>``, ``</s>``) so they get no links.
    :returns: a set of links for ``(T, S)`` input, a list of ``B`` sets for ``(B, T, S)``.  Positions count the
        ``True`` cells of the masks only: the ``k``-th unmasked source token is source position ``k``, so a
        leading ``<s>`` that is masked out shifts nothing against the gold, which numbers words from 0.
    """
    if probs.dim() not in (2, 3):
        raise ValueError(f"links_from_probs: probs must be (T, S) or (B, T, S), got shape {tuple(probs.shape)}")
    single = probs.dim() == 2
    p = probs.detach().unsqueeze(0) if single else probs.detach()
    B, T, S = p.shape
    masks = []
    for name, mask, size in (("source_mask", source_mask, S), ("target_mask", target_mask, T)):
        if mask is None:
            mask = torch.ones(B, size, dtype=torch.bool, device=p.device)
        else:
            mask = mask.to(device=p.device, dtype=torch.bool)
            if single:
                mask = mask.unsqueeze(0)
            if tuple(mask.shape) != (B, size):
                expected = (size,) if single else (B, size)
                raise ValueError(f"links_from_probs: {name} must have shape {expected}, got {tuple(mask.shape)}")
        masks.append(mask)
    src_mask, tgt_mask = masks
    cell = tgt_mask.unsqueeze(-1) & src_mask.unsqueeze(-2)  # (B, T, S)
    if threshold is None:
        scores = p.float().masked_fill(~src_mask.unsqueeze(-2), -math.inf)
        best = scores.argmax(-1)  # (B, T)
        keep = tgt_mask & src_mask.any(-1, keepdim=True)
        chosen = torch.zeros_like(cell)
        chosen.scatter_(-1, best.unsqueeze(-1), True)
        chosen &= keep.unsqueeze(-1)
    else:
        chosen = cell & (p >= threshold)
    src_pos, tgt_pos = _positions(src_mask), _positions(tgt_mask)
    out: list[set[Link]] = [set() for _ in range(B)]
    for b, t, s in chosen.nonzero().tolist():
        out[b].add((int(src_pos[b, s]), int(tgt_pos[b, t])))
    return out[0] if single else out


# ----------------------------------------------------------------------------------------------------------------
# Combining link sets


def _is_link_set(x: Any) -> bool:
    return isinstance(x, set | frozenset)


def intersect(a: LinkSets, b: LinkSets) -> Links | list[Links]:
    """``a ∩ b`` for two link sets, or pair by pair for two equally long sequences of link sets."""
    if _is_link_set(a) and _is_link_set(b):
        return set(a) & set(b)
    if len(a) != len(b):
        raise ValueError(f"intersect: {len(a)} and {len(b)} alignments")
    return [set(x) & set(y) for x, y in zip(a, b, strict=True)]


def union(a: LinkSets, b: LinkSets) -> Links | list[Links]:
    """``a ∪ b`` for two link sets, or pair by pair for two equally long sequences of link sets."""
    if _is_link_set(a) and _is_link_set(b):
        return set(a) | set(b)
    if len(a) != len(b):
        raise ValueError(f"union: {len(a)} and {len(b)} alignments")
    return [set(x) | set(y) for x, y in zip(a, b, strict=True)]


#: the symmetrisation heuristics of :func:`symmetrize`
SYMMETRIZATIONS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag(forward: set, backward: set, final: str | None = None) -> set:
    """Koehn et al. (2005)'s heuristics on one sentence pair's ``(source, target)`` link sets.

    Start from ``forward ∩ backward``; *grow-diag*: sweep over the current links in sorted order and add every
    link of ``forward ∪ backward`` that neighbours one of them (horizontally, vertically or diagonally) and whose
    source or target word is still unaligned, until a sweep adds nothing.  ``final="or"`` (*grow-diag-final*):
    then add the remaining links of ``forward``, then of ``backward`` (each in sorted order), whose source *or*
    target word is unaligned; ``final="and"`` (*grow-diag-final-and*): whose source *and* target word are.
    """
    if final not in (None, "or", "and"):
        raise ValueError(f"grow_diag: final must be None, 'or' or 'and', got {final!r}")
    links = set(forward) & set(backward)
    both = set(forward) | set(backward)
    src = {s for s, _ in links}
    tgt = {t for _, t in links}

    def add(link: tuple[int, int]) -> None:
        links.add(link)
        src.add(link[0])
        tgt.add(link[1])

    grown = True
    while grown:
        grown = False
        for s, t in sorted(links):
            for ds, dt in _NEIGHBOURS:
                new = (s + ds, t + dt)
                if new in both and new not in links and (new[0] not in src or new[1] not in tgt):
                    add(new)
                    grown = True
    if final is not None:
        for side in (forward, backward):
            for new in sorted(side):
                free = (new[0] not in src, new[1] not in tgt)
                if new not in links and (any(free) if final == "or" else all(free)):
                    add(new)
    return links


def symmetrize(forward: LinkSets, backward: LinkSets, method: str = "intersection") -> Links | list[Links]:
    """Combine the links of the two translation directions.

    Convention: ``forward`` comes from the source -> target model and holds ``(source_pos, target_pos)`` links;
    ``backward`` comes from the model of the reverse direction (the target language as *its* source), so its
    links are ``(target_pos, source_pos)``, exactly as :func:`links_from_probs` returns them for that model.
    ``backward`` is inverted to ``(source_pos, target_pos)`` and then combined with ``forward`` by ``method``, one
    of :data:`SYMMETRIZATIONS`: ``"intersection"`` (high precision), ``"union"`` (high recall), or Koehn et al.
    (2005)'s ``"grow-diag"``, ``"grow-diag-final"`` and ``"grow-diag-final-and"`` (:func:`grow_diag`).

    Works on one pair (two link sets) or a corpus (two equally long sequences of link sets).
    """
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"symmetrize: unknown method {method!r}; allowed: {', '.join(map(repr, SYMMETRIZATIONS))}")
    final = {"grow-diag": None, "grow-diag-final": "or", "grow-diag-final-and": "and"}
    if method in final:
        def combine(a, b):  # noqa: ANN001, ANN202 - link sets or sequences of them
            if _is_link_set(a):
                return grow_diag(a, b, final[method])
            if len(a) != len(b):
                raise ValueError(f"symmetrize: {len(a)} and {len(b)} alignments")
            return [grow_diag(x, y, final[method]) for x, y in zip(a, b, strict=True)]
    else:
        combine = intersect if method == "intersection" else union
    if _is_link_set(backward):
        return combine(forward, invert(backward))
    return combine(forward, [invert(x) for x in backward])


#: ways to combine the two directions' alignment *probabilities* before linking (:func:`combine_posteriors`)
POSTERIOR_COMBINATIONS = ("posterior-mean", "posterior-product")


def combine_posteriors(forward: Tensor, backward: Tensor, method: str = "posterior-mean") -> Tensor:
    """One sentence pair's two directions' alignment probabilities as one ``(T, S)`` matrix to threshold.

    ``forward`` ``(T, S)``: row ``t`` is the source->target model's distribution over source words for target word
    ``t``; ``backward`` ``(S, T)``: the reverse model's, row ``s`` over target words for source word ``s`` (the
    layout each model's :func:`links_from_probs` takes).  ``"posterior-mean"``: the cell-wise mean of ``forward``
    and ``backward.T`` (a soft union); ``"posterior-product"``: their product (a soft intersection: a link needs
    both directions' mass, as the agreement decoding of Liang, Taskar & Klein 2006 thresholds it).  Link the result
    with ``links_from_probs(..., threshold=...)``; the threshold is chosen on held-out gold, never the scored pairs.

    :raises ValueError: naming the shapes when ``backward`` is not ``forward`` transposed, or the method.
    """
    if method not in POSTERIOR_COMBINATIONS:
        raise ValueError(f"combine_posteriors: unknown method {method!r}; allowed: "
                         f"{', '.join(map(repr, POSTERIOR_COMBINATIONS))}")
    if forward.dim() != 2 or backward.shape != forward.shape[::-1]:
        raise ValueError(f"combine_posteriors: forward {tuple(forward.shape)} (T, S) needs backward (S, T) = "
                         f"{tuple(forward.shape[::-1])}, got {tuple(backward.shape)}")
    reverse = backward.transpose(0, 1).to(forward.dtype)
    return (forward + reverse) / 2 if method == "posterior-mean" else forward * reverse


def merge_json(path: str | Path, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Write ``new`` into the JSON list at ``path``, replacing rows with the same corpus, model, output, source,
    symmetrisation and number of training pairs (other rows are kept -- a pilot on fewer pairs never replaces a
    full run; the file is written atomically)."""
    path = Path(path)
    old = []
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a JSON list of AER rows ({e}); give another --json file") from None
        if not isinstance(old, list) or not all(isinstance(r, dict) for r in old):
            raise ValueError(f"{path}: not a JSON list of AER rows (it holds a {type(old).__name__}); give another "
                             "--json file")
    key = ("corpus", "model", "output", "source", "symmetrisation", "train_sentences")
    replaced = {tuple(r.get(k) for k in key) for r in new}
    merged = [r for r in old if tuple(r.get(k) for k in key) not in replaced] + new
    write_text(path, json.dumps(merged, indent=1) + "\n")
    return merged
