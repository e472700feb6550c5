"""A plain EM IBM Model 1 (Brown et al. 1993) in numpy: the reference the neural IBM Model 1 is checked against.

The same model as :class:`pyro_attention.networks.lexical.IBM1Network` with the ``marginal`` pair: uniform
alignment prior over the source words, no NULL word (with ``null_prob=p0``: a NULL word with prior ``p0``, the
words sharing ``1 - p0``, as ``IBM1Network(null_prob=p0)``), a lexical table ``t(f | e)``, and every target
sentence ends in ``</s>`` (the neural model predicts it like a word).  EM starts from a uniform table.

Run as a script for the real-data number (forward posterior-argmax AER on the Hansards / cs-en gold, trained on
the gold sentences plus all Multi30k pairs of the language pair, lower-cased)::

    python -m tests.support.ibm1_em --corpus enfr --data-dir ../shared/data --iterations 5
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

EOS = "</s>"
NULL = "<null>"


class EMIBM1:
    """IBM Model 1 trained by EM on ``source`` / ``target`` sentences (lists of tokens).

    :param eos: append ``</s>`` to every target sentence (as the neural model's targets have it).
    :param null_prob: ``p0``: a NULL word in front of every source sentence with prior ``p0`` (``None``: none).
    """

    def __init__(self, source: Sequence[Sequence[str]], target: Sequence[Sequence[str]], eos: bool = True,
                 null_prob: float | None = None) -> None:
        self.eos, self.null_prob = eos, null_prob
        self.e_ids: dict[str, int] = {}
        self.f_ids: dict[str, int] = {}
        keys, rows, priors = [], [], []
        row = 0
        for src, tgt in zip(source, target, strict=True):
            e = np.array([self.e_ids.setdefault(w, len(self.e_ids)) for w in self._source(src)], dtype=np.int64)
            f = np.array([self.f_ids.setdefault(w, len(self.f_ids)) for w in self._target(tgt)], dtype=np.int64)
            keys.append((e[None, :] << 32) | f[:, None])  # (T, S) cell keys (e, f)
            rows.append(np.repeat(np.arange(row, row + len(f)), len(e)))
            priors.append(np.tile(self._prior(len(src)), len(f)))
            row += len(f)
        flat = np.concatenate([k.reshape(-1) for k in keys])
        self.prior = np.concatenate(priors)  # per cell: the alignment prior of its source position
        self.rows = np.concatenate(rows)
        self.num_rows = row
        self.params, self.index = np.unique(flat, return_inverse=True)
        self.param_e = (self.params >> 32).astype(np.int64)
        self.t = np.ones(len(self.params))  # uniform start (any constant: the first posteriors are uniform)
        self.table = dict(zip(self.params.tolist(), range(len(self.params)), strict=True))

    def _target(self, tgt: Sequence[str]) -> list[str]:
        return [*tgt, EOS] if self.eos else list(tgt)

    def _source(self, src: Sequence[str]) -> list[str]:
        return list(src) if self.null_prob is None else [NULL, *src]

    def _prior(self, n: int) -> np.ndarray:
        """The alignment prior over the source positions of a sentence of ``n`` words (NULL first, if any)."""
        if self.null_prob is None:
            return np.full(n, 1.0 / n)
        return np.array([self.null_prob] + [(1.0 - self.null_prob) / n] * n)

    def iterate(self, iterations: int = 5) -> EMIBM1:
        """``iterations`` EM steps: expected link counts under the posterior, then ``t(f | e) = c(e, f) / c(e)``."""
        for _ in range(iterations):
            w = self.prior * self.t[self.index]
            post = w / np.bincount(self.rows, weights=w, minlength=self.num_rows)[self.rows]
            counts = np.bincount(self.index, weights=post, minlength=len(self.params))
            self.t = counts / np.bincount(self.param_e, weights=counts)[self.param_e]
        return self

    def posterior(self, src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
        """``p(z_t = s | e, f)`` ``(T, S)`` for the target words (``</s>`` excluded; its row is not a word); with a
        NULL word ``(T, 1 + S)``, column 0 the NULL word's."""
        e = [self.e_ids.get(w, -1) for w in self._source(src)]
        f = [self.f_ids.get(w, -1) for w in tgt]
        t = np.array([[self.t[self.table[(ei << 32) | fj]] if (ei >= 0 and fj >= 0 and (ei << 32) | fj in self.table)
                       else 1e-12 for ei in e] for fj in f]) * self._prior(len(src))
        return t / t.sum(-1, keepdims=True)

    def log_likelihood(self, source: Sequence[Sequence[str]], target: Sequence[Sequence[str]]) -> float:
        """``sum log p(f | e)`` (the alignment prior above, targets with ``</s>`` when ``eos``)."""
        total = 0.0
        for src, tgt in zip(source, target, strict=True):
            e = [self.e_ids[w] for w in self._source(src)]
            prior = self._prior(len(src))
            for w in self._target(tgt):
                fj = self.f_ids[w]
                total += np.log(sum(p * self.t[self.table[(ei << 32) | fj]] for p, ei in zip(prior, e, strict=True)))
        return total


def argmax_links(post: np.ndarray, null_word: bool = False) -> set[tuple[int, int]]:
    """``(source, target)`` links: each target word to its most probable source word (``null_word``: column 0 is
    the NULL word, a word whose argmax it is gets no link)."""
    if null_word:
        return {(int(s) - 1, t) for t, s in enumerate(post.argmax(-1)) if s > 0}
    return {(int(s), t) for t, s in enumerate(post.argmax(-1))}


def main(argv: Sequence[str] | None = None) -> None:
    from pyro_attention.aer import SYMMETRIZATIONS, alignment_error_rate, symmetrize
    from pyro_attention.tasks.align import AlignConfig, load_gold_corpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="enfr", choices=["enfr", "csen"])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--extra-size", type=int, default=29000)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--null-prob", type=float, default=None, help="a NULL word with this prior (default none)")
    parser.add_argument("--json", default="", help="merge the rows (model em-ibm1, em-ibm1-null) into this JSON list")
    args = parser.parse_args(argv)
    corpus = load_gold_corpus(AlignConfig(corpus=args.corpus, data_dir=args.data_dir, extra_size=args.extra_size),
                              log=lambda _: None)
    src, tgt = corpus.source + corpus.extra_source, corpus.target + corpus.extra_target
    links, seconds = {}, {}
    for direction, (a, b, gs, gt) in {"forward": (src, tgt, corpus.source, corpus.target),
                                      "reverse": (tgt, src, corpus.target, corpus.source)}.items():
        start = time.perf_counter()
        model = EMIBM1(a, b, null_prob=args.null_prob).iterate(args.iterations)
        links[direction] = [argmax_links(model.posterior(s, t), args.null_prob is not None)
                            for s, t in zip(gs, gt, strict=True)]
        seconds[direction] = time.perf_counter() - start
    rows = {"forward": links["forward"], "reverse": [{(s, t) for t, s in x} for x in links["reverse"]]}
    for method in SYMMETRIZATIONS:
        rows[method] = symmetrize(links["forward"], links["reverse"], method)
    out = []
    for name, predicted in rows.items():
        result = alignment_error_rate(predicted, corpus.gold)
        wall = seconds.get(name, seconds["forward"] + seconds["reverse"])
        print(f"EM IBM Model 1 ({args.iterations} iterations, {len(src)} pairs, {wall:.0f} s), {args.corpus} "
              f"{name}: {result}")
        null = args.null_prob is not None
        out.append({"corpus": args.corpus, "model": "em-ibm1-null" if null else "em-ibm1", "output": "table",
                    "source": "posterior",
                    "symmetrisation": name, "aer": round(100 * result.aer, 2),
                    "precision": round(100 * result.precision, 2), "recall": round(100 * result.recall, 2),
                    "train_sentences": len(src), "wall_s": round(wall, 1),
                    "note": f"tests/support/ibm1_em.py, {args.iterations} EM iterations from a uniform table"
                            + (f"; null_prob {args.null_prob:g}" if null else "")})
    if args.json:
        from pyro_attention.tasks.align import JSON_SYMMETRISATIONS, merge_json

        merge_json(args.json, [r for r in out if r["symmetrisation"] in JSON_SYMMETRISATIONS])


if __name__ == "__main__":
    main()
