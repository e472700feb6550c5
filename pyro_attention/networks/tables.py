r"""A free lexical table stored only where an aligner reads it: ``t(y | x)`` over the word pairs that co-occur in
some sentence pair of the training text.

An aligner reads its table at ``(x_s, y_t)`` of one sentence pair, so it reads only word pairs that co-occur
(:func:`cooccurrences` collects them, with ``</s>`` after every target sentence as the network predicts
it).  The other entries of a row matter only through its normaliser, and they are all alike: they start equal,
every gradient step and every EM step treats them equally, so they stay equal.  One shared logit per row, its
*rest* ``r_x``, stands for the ``m_x = V - n_x`` of them, and

.. math::

    \log t(y \mid x) = w_{xy} - \log\Big(\sum_{y' \in C(x)} e^{w_{xy'}} + m_x e^{r_x}\Big), \qquad
    \log t(y \mid x) = r_x - \log(\dots) \text{ for } y \notin C(x),

the same function of the same parameters as the dense ``V_src x V_tgt`` table
(:class:`~pyro_attention.networks.lexical.IBM1Network` without one), with memory that grows with the number of
co-occurring pairs instead of the product of the vocabularies.  ``r_x`` receives the gradient of *one* of the
entries it stands for (the sum over them divided by ``m_x``), so Adam moves it exactly as it moves each of them in
the dense table; EM (:meth:`set_from_counts`) gives it their common value.

**Pruning** (``min_count``): on a huge corpus, word pairs that co-occur in fewer than ``min_count`` sentence pairs
are not stored.  A pruned pair is then read from its row's rest, the shared value of every word the row does not
store, and its expected counts go to the rest (spread evenly over the ``m_x`` words).  ``min_count=1`` (default)
stores every co-occurring pair and is exact.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import chain

import numpy as np
import torch
from torch import Tensor, nn

from pyro_attention.data.translation import EOS
from pyro_attention.networks.base import ExpertLogits

__all__ = ["KEPT_BYTES", "PASS_PAIRS", "SparseTable", "cooccurrences"]


#: the most word pairs (repeats included) one pass of :func:`cooccurrences` collects: its memory bound
PASS_PAIRS = 2**25

#: the most bytes of lookups one table keeps within :meth:`SparseTable.kept_lookups` (256 MiB)
KEPT_BYTES = 2**28


def cooccurrences(source: Sequence[Sequence[int]], target: Sequence[Sequence[int]], target_vocab: int,
                  min_count: int = 1, chunk: int = 20_000) -> np.ndarray:
    """The sorted keys ``x * target_vocab + y`` of the word pairs ``(x, y)`` that co-occur in at least ``min_count``
    sentence pairs (each target sentence with ``</s>`` at its end, as a network predicts it).

    Memory stays bounded on a huge corpus: the source words are split into ranges of about :data:`PASS_PAIRS` word
    pairs each, and each range is counted in its own pass over the text, ``chunk`` sentence pairs at a time.

    :param source: source sentences as the network reads them (the NULL word in front where it has one).
    :param target: target sentences (ids, without ``</s>``).
    """
    if len(source) != len(target):
        raise ValueError(f"cooccurrences: {len(source)} source and {len(target)} target sentences; they must be pairs")
    if min_count < 1:
        raise ValueError(f"cooccurrences: min_count must be >= 1, got {min_count}")
    src_len = np.fromiter(map(len, source), np.int64, len(source))
    tgt_len = np.fromiter(map(len, target), np.int64, len(target)) + 1  # </s>
    src = np.fromiter(chain.from_iterable(source), np.int64, int(src_len.sum()))
    tgt = np.fromiter(chain.from_iterable((*y, EOS) for y in target), np.int64, int(tgt_len.sum()))
    src_off = np.concatenate([[0], src_len.cumsum()])
    tgt_off = np.concatenate([[0], tgt_len.cumsum()])
    if not len(src):
        return np.empty(0, dtype=np.int64)
    mass = np.bincount(src, weights=np.repeat(tgt_len, src_len)).cumsum()  # word pairs up to each source id
    passes = max(1, int(np.ceil(mass[-1] / PASS_PAIRS)))
    edges = [0, *(np.searchsorted(mass, mass[-1] * np.arange(1, passes) / passes) + 1).tolist(), len(mass)]
    out = []
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        if high <= low:
            continue
        keys, counts = [], []
        for start in range(0, len(source), chunk):
            stop = min(len(source), start + chunk)
            k, c = _sentence_counts(src[src_off[start]: src_off[stop]], src_len[start:stop], tgt,
                                    tgt_off[start:stop], tgt_len[start:stop], target_vocab, low, high)
            keys.append(k)
            counts.append(c)
        k, total = _merged(np.concatenate(keys), np.concatenate(counts))
        out.append(k if min_count == 1 else k[total >= min_count])
    return np.concatenate(out)


def _sentence_counts(src: np.ndarray, src_len: np.ndarray, tgt: np.ndarray, tgt_start: np.ndarray,
                     tgt_len: np.ndarray, target_vocab: int, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of the pairs of some sentence pairs whose source word is in ``[low, high)``, and in how
    many of those sentence pairs each occurs."""
    sentence = np.repeat(np.arange(len(src_len)), src_len)
    keep = (src >= low) & (src < high)
    words, sentence = src[keep], sentence[keep]
    repeats = tgt_len[sentence]
    first = np.repeat(tgt_start[sentence], repeats)
    within = np.arange(int(repeats.sum())) - np.repeat(repeats.cumsum() - repeats, repeats)
    keys = np.repeat(words, repeats) * target_vocab + tgt[first + within]
    tagged = np.sort(keys * len(src_len) + np.repeat(sentence, repeats))
    tagged = tagged[np.concatenate([[True], tagged[1:] != tagged[:-1]])[: len(tagged)]]  # once per sentence pair
    return _merged(tagged // len(src_len), np.ones(len(tagged), dtype=np.int64), ordered=True)


def _merged(keys: np.ndarray, counts: np.ndarray, ordered: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` in order and the sum of the ``counts`` of each (a sort and a run-length sum: numpy's
    ``unique`` hashes, several times slower here)."""
    if not len(keys):
        return keys, counts
    if not ordered:
        order = np.argsort(keys, kind="stable")
        keys, counts = keys[order], counts[order]
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    return keys[starts], np.add.reduceat(counts, starts)


class SparseTable(nn.Module):
    """A free lexical table ``t(y | x)`` over the word pairs in ``keys`` (the module docstring).

    :param source_vocab: ``V_src``.
    :param target_vocab: ``V``.
    :param keys: the stored pairs' sorted keys ``x * V + y`` (:func:`cooccurrences`).
    """

    def __init__(self, source_vocab: int, target_vocab: int, keys: Tensor | np.ndarray) -> None:
        super().__init__()
        keys = torch.as_tensor(keys, dtype=torch.long)
        if keys.dim() != 1 or (len(keys) and (keys[0] < 0 or keys[-1] >= source_vocab * target_vocab)):
            raise ValueError(f"SparseTable: keys must be a 1-d tensor of x * {target_vocab} + y below "
                             f"{source_vocab} * {target_vocab}, got shape {tuple(keys.shape)}")
        if len(keys) > 1 and not bool((keys[1:] > keys[:-1]).all()):
            raise ValueError("SparseTable: keys must be sorted and distinct")
        self.source_vocab, self.target_vocab = source_vocab, target_vocab
        self.register_buffer("keys", keys, persistent=False)
        self.register_buffer("rows", keys // target_vocab, persistent=False)
        stored = torch.bincount(self.rows, minlength=source_vocab)
        self.register_buffer("offsets", torch.cat([stored.new_zeros(1), stored.cumsum(0)]), persistent=False)
        self.register_buffer("multiplicity", (target_vocab - stored).double(), persistent=False)
        self.logits = nn.Parameter(torch.zeros(len(keys)))
        self.rest = nn.Parameter(torch.zeros(source_vocab))
        self._cached: tuple[tuple, Tensor] | None = None
        self._last_lookup: tuple[Tensor, Tensor, tuple[Tensor, Tensor]] | None = None
        self._kept: dict[tuple[int, int], tuple[Tensor, Tensor, Tensor, Tensor]] | None = None
        self._kept_room = 0  # bytes the kept lookups may still take

    @property
    def num_entries(self) -> int:
        """The number of stored pairs."""
        return len(self.keys)

    def _rest(self) -> Tensor:
        """``r_x`` with the gradient of one of the ``m_x`` entries it stands for (the sum divided by ``m_x``)."""
        scale = self.multiplicity.clamp(min=1.0).to(self.rest.dtype)
        return self.rest.detach() + (self.rest - self.rest.detach()) / scale

    def log_normalizers(self) -> Tensor:
        """``log sum_y exp(logit[x, y])`` ``(V_src,)``: the stored entries plus ``m_x`` times the rest (cached
        while the table is not trained by gradient)."""
        training = torch.is_grad_enabled() and (self.logits.requires_grad or self.rest.requires_grad)
        version = tuple((p._version, p.data_ptr(), p.dtype, p.device) for p in (self.logits, self.rest))  # .to() too
        if not training and self._cached is not None and self._cached[0] == version:
            return self._cached[1]
        rest = self._rest() + self.multiplicity.log().to(self.rest.dtype)  # -inf where a row stores every word
        top = torch.maximum(rest.detach().scatter_reduce(0, self.rows, self.logits.detach(), "amax"),
                            rest.detach())
        total = (rest - top).exp().index_add(0, self.rows, (self.logits - top[self.rows]).exp())
        out = top + total.log()
        if not training:
            self._cached = (version, out)
        return out

    @contextmanager
    def kept_lookups(self, max_bytes: int = KEPT_BYTES) -> Iterator[None]:
        """Within the ``with`` block each batch's lookup (:meth:`_lookup`) is kept and reused whenever the same id
        tensors come again: training for several epochs on batches collated once
        (:class:`~pyro_attention.tasks.align.agreement.JointBitext`) searches each batch once instead of once an
        epoch.  A kept batch holds 5 bytes per ``(t, s)`` cell until the block ends; once ``max_bytes`` are held,
        later batches are searched every time, so memory stays bounded on a huge corpus."""
        if self._kept is not None:  # nested: the outer block keeps them
            yield
            return
        self._kept, self._kept_room = {}, max_bytes
        try:
            yield
        finally:
            self._kept, self._kept_room = None, 0

    def _lookup(self, source: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """``(index, stored)`` ``(B, T, S)`` of the pairs ``(source[b, s], target[b, t])``: the entry's position and
        whether it is stored (the last batch's answer is kept: EM reads it, then counts at it; every batch's within
        :meth:`kept_lookups`)."""
        last = self._last_lookup
        if last is not None and last[0] is source and last[1] is target:
            return last[2]
        kept = None if self._kept is None else self._kept.get((id(source), id(target)))
        if kept is not None:
            found = (kept[2].long(), kept[3])
        else:
            found = self._search(source, target)
            if self._kept is not None:
                self._keep(source, target, found)
        self._last_lookup = (source, target, found)  # holding the tensors: their identity cannot be reused
        return found

    def _keep(self, source: Tensor, target: Tensor, found: tuple[Tensor, Tensor]) -> None:
        """Keep a batch's lookup (int32 positions where they fit) while :meth:`kept_lookups` has room for it."""
        compact = found[0].int() if self.num_entries < 2**31 else found[0]
        size = compact.numel() * compact.element_size() + found[1].numel()
        if size <= self._kept_room:  # the tensors held too: their identity cannot be reused while kept
            self._kept[(id(source), id(target))] = (source, target, compact, found[1])
            self._kept_room -= size

    def _search(self, source: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        query = source.unsqueeze(1) * self.target_vocab + target.unsqueeze(2)
        if not self.num_entries:
            return torch.zeros_like(query), torch.zeros_like(query, dtype=torch.bool)
        ordered, order = torch.sort(query.flatten())  # sorted queries search the keys in cache order: ~3x faster
        index = torch.empty_like(ordered).index_copy_(0, order, torch.searchsorted(self.keys, ordered))
        index = index.clamp(max=self.num_entries - 1).view_as(query)
        return index, self.keys[index] == query

    def observed(self, source: Tensor, target: Tensor) -> Tensor:
        """``log t(y_t | x_s)`` ``(B, T, S)`` for source ids ``(B, S)`` and target ids ``(B, T)`` (a padded position
        reads its row's rest: finite, for the caller to mask)."""
        index, stored = self._lookup(source, target)
        logits = torch.where(stored, self.logits[index], self._rest()[source].unsqueeze(1))
        return logits - self.log_normalizers()[source].unsqueeze(1)

    def log_probs(self, words: Tensor) -> Tensor:
        """``log t(. | x)`` ``(U, V)`` for source ids ``(U,)``: the rows made dense."""
        norm = self.log_normalizers()[words]
        stored = self.offsets[words + 1] - self.offsets[words]
        owner = torch.repeat_interleave(torch.arange(len(words), device=words.device), stored)
        first = self.offsets[words] - (stored.cumsum(0) - stored)  # entry = first[owner] + running position
        entry = first[owner] + torch.arange(len(owner), device=words.device)
        dense = (self._rest()[words] - norm).unsqueeze(1).expand(len(words), self.target_vocab)
        return dense.index_put((owner, self.keys[entry] % self.target_vocab), self.logits[entry] - norm[owner])

    def experts(self, source: Tensor, u: Tensor | None = None) -> ExpertLogits:
        """The lexical expert's log-probabilities once per distinct word of ``source`` ``(B, S)`` and the
        decoder's expert ``u`` (``None``: ``u == 0``), as
        :func:`~pyro_attention.networks.lexical.word_experts` gives them for a dense table."""
        words, inverse = torch.unique(source, return_inverse=True)
        return ExpertLogits(u, self.log_probs(words), inverse)

    # -- EM -----------------------------------------------------------------------------------------------------
    def new_counts(self) -> Tensor:
        """Zero expected counts: one per stored pair, then one per row for its rest."""
        return torch.zeros(self.num_entries + self.source_vocab, dtype=torch.float64, device=self.keys.device)

    def positions(self, source: Tensor, target: Tensor) -> Tensor:
        """Where the pairs ``(source[b, s], target[b, t])`` count ``(B, T, S)``: the stored pair's entry, else
        ``num_entries + source[b, s]``, its row's rest (the layout of :meth:`new_counts`)."""
        index, stored = self._lookup(source, target)
        return torch.where(stored, index, self.num_entries + source.unsqueeze(1))

    def add_counts(self, counts: Tensor, source: Tensor, target: Tensor, weights: Tensor) -> None:
        """Add ``weights`` ``(B, T, S)`` (zero where padded) to the counts of ``(source[b, s], target[b, t])``."""
        at = self.positions(source, target)
        counts.index_add_(0, at.flatten(), weights.detach().to(torch.float64).flatten())

    def set_from_counts(self, counts: Tensor, alpha: float) -> None:
        """``t(y | x) = (c(x, y) + alpha) / (c(x) + V alpha)``: the posterior mean under a ``Dirichlet(alpha)``
        prior; a row's rest count is spread evenly over the words it stands for."""
        stored, rest = counts[: self.num_entries], counts[self.num_entries:]
        total = rest.index_add(0, self.rows, stored)
        denominator = (total + self.target_vocab * alpha).log()
        with torch.no_grad():
            self.logits.copy_(((stored + alpha).log() - denominator[self.rows]).to(self.logits.dtype))
            self.rest.copy_(((rest / self.multiplicity.clamp(min=1.0) + alpha).log() - denominator)
                            .to(self.rest.dtype))
