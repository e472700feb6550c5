"""Translation evaluation: perplexities, K-max perplexity, prior entropy and sacreBLEU of beam-search output
(:func:`evaluate`), and detokenised translations of raw lines (:func:`translate_lines`)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyro
import torch
from tqdm.auto import tqdm

from pyro_attention.data.translation import TranslationBatch
from pyro_attention.files import write_text, writing
from pyro_attention.pair import AlignmentPair, Rule
from pyro_attention.tasks.translation.checkpoints import Checkpoint, load_checkpoint, move_checkpoint
from pyro_attention.tasks.translation.config import (
    ALIGNMENT_FIELDS,
    SPLITS,
    TranslationConfig,
    tqdm_disabled,
)
from pyro_attention.tasks.translation.corpora import Split, load_split, make_batches

#: the fewest importance samples per token an evaluation draws for an estimated likelihood (the training config's
#: ``num_samples``, often 20 for the validation bound, is raised to it): PSIS k-hat needs at least 25
EVAL_DRAWS = 100


def _as_checkpoint(checkpoint: Checkpoint | str | os.PathLike) -> Checkpoint:
    return checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)


class DecodeCache:
    """Decoded chunks of sentences kept in a JSON-lines file, so that a decoding stopped part way (a sitting that
    ended, a kill) goes on where it stopped: beam search over a test set with the exact marginal of a ``tanh``
    output layer takes hours on a CPU.

    The first line is the decoding's key (the checkpoint file's path, size and modification time, the rule, beam,
    ``k``, length settings and a hash of the sources): a file written for another checkpoint or decoding is started
    afresh.  Each further line is one chunk ``{"start", "hyps", "seconds"}`` (the chunk's first position in the
    length-sorted order, its target ids, the seconds it took), appended and flushed to disk when the chunk is done;
    a last line cut short by a kill is dropped when the file is opened again.

    :param path: the file (its folder must exist); :attr:`seconds` and :attr:`sentences` sum the chunks read and
        written, for a decoding speed that counts every sitting's chunks at the rate they were decoded.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.chunks: dict[int, list[list[int]]] = {}
        self.seconds = 0.0
        self.sentences = 0

    def open(self, key: dict[str, Any]) -> None:
        """Read the chunks decoded under ``key`` (none where the file is missing or holds another key) and rewrite
        the file as its key and those chunks (atomically), ready for :meth:`add`."""
        header = json.loads(json.dumps({"key": key}))
        lines: list[dict[str, Any]] = []
        if self.path.is_file():
            parsed = []
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    parsed.append(json.loads(line))
                except json.JSONDecodeError:  # cut short by a kill: it (and anything after) is decoded again
                    break
            if parsed and parsed[0] == header:
                lines = [c for c in parsed[1:] if isinstance(c, dict) and {"start", "hyps", "seconds"} <= set(c)]
        self.chunks = {int(c["start"]): c["hyps"] for c in lines}
        self.seconds = sum(float(c["seconds"]) for c in lines)
        self.sentences = sum(len(c["hyps"]) for c in lines)
        write_text(self.path, "".join(json.dumps(x) + "\n" for x in [header, *lines]))

    def add(self, start: int, hyps: list[list[int]], seconds: float) -> None:
        """Append one decoded chunk and flush it to disk."""
        self.chunks[start] = hyps
        self.seconds += seconds
        self.sentences += len(hyps)
        with writing(self.path), open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"start": start, "hyps": hyps, "seconds": seconds}) + "\n")
            f.flush()
            os.fsync(f.fileno())


def checkpoint_key(path: str | os.PathLike) -> dict[str, Any]:
    """A checkpoint file as it is now (its resolved path, size and modification time; ``None`` for a file that is
    not there): what results kept for it must match (:class:`DecodeCache`, the runner's split scores)."""
    path = Path(path)
    stat = path.stat() if path.is_file() else None
    return {"checkpoint": str(path.resolve()), "bytes": stat.st_size if stat else None,
            "mtime_ns": stat.st_mtime_ns if stat else None}


def _decoding_key(ckpt: Checkpoint, sources: Sequence[Sequence[str]], **settings: Any) -> dict[str, Any]:
    """What a :class:`DecodeCache` must match: the checkpoint file, the decoding's settings and the sources."""
    digest = hashlib.sha256("\n".join(" ".join(s) for s in sources).encode("utf-8")).hexdigest()
    return {**checkpoint_key(ckpt.path), **settings, "sources": len(sources), "sha256": digest}


def decode_batches(
    ckpt: Checkpoint,
    sources: Sequence[Sequence[str]],
    beam: int,
    rule: Rule,
    k: int,
    length_penalty: float,
    max_decode_len: int | None,
    progress: bool,
    cache: DecodeCache | None = None,
) -> list[list[str]]:
    from pyro_attention.tasks.translation.decoding import translate

    # sentences of similar length decoded together (beam search is batched), each with its own length limit
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[str]] = [[] for _ in sources]
    chunk = 64
    if cache is not None:
        cache.open(_decoding_key(ckpt, sources, beam=beam, rule=str(rule), k=k, length_penalty=length_penalty,
                                 max_decode_len=max_decode_len, chunk=chunk))
    bar = tqdm(total=len(sources), disable=tqdm_disabled(progress), desc="decoding", unit="sent", leave=False)
    for start in range(0, len(order), chunk):
        rows = order[start : start + chunk]
        hyps = None if cache is None else cache.chunks.get(start)
        if hyps is None or len(hyps) != len(rows):
            began = time.perf_counter()
            ids = [ckpt.src_vocab.encode(sources[i]) for i in rows]
            width = max(len(x) for x in ids)
            source = torch.tensor([x + [0] * (width - len(x)) for x in ids], dtype=torch.long,
                                  device=next(ckpt.network.parameters()).device)
            limits = [max_decode_len or 2 * len(sources[i]) + 10 for i in rows]
            hyps = translate(ckpt.pair, source, source != 0, beam, rule, k, limits, length_penalty, batch_size=chunk)
            if cache is not None:
                cache.add(start, hyps, time.perf_counter() - began)
        for i, hyp in zip(rows, hyps, strict=True):
            out[i] = ckpt.tgt_vocab.decode(hyp)
        bar.update(len(rows))
    bar.close()
    return out


@torch.no_grad()
def evaluate(
    checkpoint: Checkpoint | str | os.PathLike,
    split: str = "test",
    *,
    src_file: str | os.PathLike | None = None,
    tgt_file: str | os.PathLike | None = None,
    ref_file: str | os.PathLike | None = None,
    data_dir: str | None = None,
    size: int | None = None,
    kmax: int = 5,
    beam: int = 5,
    rule: Rule | str | None = None,
    length_penalty: float = 0.0,
    max_decode_len: int | None = None,
    batch_size: int = 64,
    num_samples: int | None = None,
    bleu: bool = True,
    lowercase: bool | None = None,
    seed: int | None = 0,
    progress: bool = False,
    device: str | None = None,
) -> dict[str, Any]:
    """Perplexity, K-max perplexity, prior entropy and BLEU of a checkpoint on a split or on given files.

    :param split: ``"train"``, ``"val"`` or ``"test"`` of the corpus the checkpoint was trained on, unless
        ``src_file`` / ``tgt_file`` (and optionally raw ``ref_file``) are given.
    :param size: the first ``size`` pairs (synthetic: generate ``size``); default: the config's
        ``{split}_size`` (so ``split="val"`` scores what validation scored), else all.
    :param kmax: ``K`` of the K-max perplexity (categorical pairs; 0 skips it) and of ``rule="kmax"``.
    :param rule: decoding rule, ``"soft"``, ``"marginal"`` or ``"kmax"`` (default: ``"marginal"`` for the
        categorical pairs, ``"soft"`` otherwise).
    :param num_samples: importance samples per token of an estimate (default: the config's, >= EVAL_DRAWS).
    :param lowercase: case-insensitive BLEU (default: when the corpus is lower-cased, Multi30k and IWSLT14).
    :param seed: seeds Pyro's RNGs first (``pyro.set_rng_seed``) so that the Dirichlet pair's sampled bound is
        reproducible; ``None`` leaves them alone.
    :param device: where to evaluate (default: where the loaded checkpoint's network is, the CPU for a path).
    :returns: a dict with ``ppl`` (+ ``ppl_exact``, ``ppl_method``, ``nll``, ``tokens``), ``kmax_ppl``,
        ``prior_entropy``, ``posterior_entropy``, ``guide_entropy`` and ``guide_kl`` (mean nats per target token;
        ``None`` where the pair has no such distribution), ``bleu`` and ``bleu_signature``, ``hypotheses``, ... and
        ``degenerate``: ``None``, or a warning when the model gives the same output whatever the input (every
        occurrence of a target token has the same log-probability, or every sentence decodes to the same output);
        the command line prints it.
    """
    ckpt = _loaded(checkpoint, device, seed)
    config = ckpt.config if data_dir is None else ckpt.config.replace(data_dir=data_dir)
    pair = ckpt.pair
    rule = pair.rule(rule, decoding=True)  # checked even without BLEU: a rule the pair does not allow is a mistake
    if kmax < 0 or beam < 1 or batch_size < 1:
        raise ValueError(f"need kmax >= 0, beam >= 1, batch_size >= 1; got {kmax}, {beam}, {batch_size}")
    files = dict(src_file=src_file, tgt_file=tgt_file, ref_file=ref_file)
    data, batches = _evaluation_batches(ckpt, config, split, size, batch_size, bleu, **files)
    ckpt.network.eval()
    kmax_bound = kmax if Rule.KMAX in pair.rules else 0  # only categorical alignments have a K-max bound
    spread = _TokenSpread(len(ckpt.tgt_vocab))
    scores = _score(pair, batches, num_samples or max(config.num_samples, EVAL_DRAWS), kmax_bound, spread, progress)
    result: dict[str, Any] = {
        "checkpoint": str(ckpt.path),
        "model": config.model,
        "estimator": config.estimator,
        "options": config.options,
        "split": split if src_file is None else str(src_file),
        "data": data.description,
        "sentences": len(data),
        **scores.fields(kmax, kmax_bound),
        "bleu": None,
        "bleu_signature": None,
        "rule": str(rule),
        "beam": beam,
        "length_penalty": length_penalty,
        "hypotheses": None,
        "degenerate": None,
    }
    distinct_sources = len({tuple(s) for s in data.source})
    reasons = [spread.degenerate(-scores.total / scores.tokens, distinct_sources)] if scores.exact else []
    if bleu:
        decoding = dict(beam=beam, rule=rule, kmax=kmax, length_penalty=length_penalty, max_decode_len=max_decode_len)
        _add_bleu(result, reasons, ckpt, config, data, distinct_sources, lowercase, progress, **decoding)
    result["degenerate"] = _degenerate(reasons)
    return result


def _loaded(checkpoint: Checkpoint | str | os.PathLike, device: str | None, seed: int | None) -> Checkpoint:
    """The checkpoint, on ``device`` when given, with Pyro's RNGs seeded by ``seed`` when given."""
    ckpt = _as_checkpoint(checkpoint)
    if device is not None:
        move_checkpoint(ckpt, device)
    if seed is not None:
        pyro.set_rng_seed(seed)
    return ckpt


def _evaluation_batches(
    ckpt: Checkpoint, config: TranslationConfig, split: str, size: int | None, batch_size: int, references: bool,
    **files: str | os.PathLike | None,
) -> tuple[Split, list[TranslationBatch]]:
    """The split (or ``files``) :func:`evaluate` scores, and its batches on the network's device."""
    if size is None and files["src_file"] is None and split in SPLITS:
        size = getattr(config, f"{split}_size")  # the subset training used (val), or the configured one
    data = load_split(config, split, size=size, references=references, **files)
    where = next(ckpt.network.parameters()).device
    return data, [b.to(where) for b in make_batches(data, ckpt.src_vocab, ckpt.tgt_vocab, batch_size)]


def _degenerate(reasons: list[str | None]) -> str | None:
    """:func:`evaluate`'s ``degenerate`` warning from the reasons found (``None`` entries: none found)."""
    reasons = [r for r in reasons if r]
    if not reasons:
        return None
    return ("degenerate: " + "; ".join(reasons) + ". The model ignores its input: training collapsed or diverged "
            "(check --lr and the training curve in history.csv)")


@dataclass
class _Scores:
    """The sums :func:`evaluate` collects over the batches."""

    total: float = 0.0  # log-likelihood
    tokens: int = 0
    exact: bool = True
    method: str = ""
    mc_variance: float = 0.0  # an estimate's Monte Carlo variance of ``total``
    khat_max: float = -math.inf  # the largest defined PSIS k-hat of an estimate's weights
    khat_defined: int = 0  # tokens whose k-hat is defined, and of them those above the threshold
    khat_over: int = 0
    reliable: bool = True  # every batch's value exact or a reliable estimate (LogLikelihood.reliable)
    kmax_total: float = 0.0
    kmax_exact: bool = True
    alignment: Counter = field(default_factory=Counter)  # entropy_sums' sums: prior, posterior, guide, KL

    def fields(self, kmax: int, kmax_bound: int) -> dict[str, Any]:
        """The scores' entries of :func:`evaluate`'s result, ``tokens`` to ``guide_kl`` (the alignment means:
        ``None`` where the pair has no such distribution)."""
        from pyro_attention import metrics

        ppl = metrics.perplexity(self.total, self.tokens)
        nll_se = None if self.exact else self.mc_variance**0.5 / self.tokens
        return {
            "tokens": self.tokens,
            "nll": -self.total / self.tokens,
            "ppl": ppl,
            "ppl_exact": self.exact,
            "ppl_method": self.method,
            # an estimate's Monte Carlo standard error (NLL per token; PPL by the delta method) and PSIS k-hat
            "nll_mc_se": nll_se,
            "ppl_mc_se": None if nll_se is None else ppl * nll_se,
            "khat_max": self.khat_max if self.khat_defined else None,
            "khat_over_threshold": self.khat_over / self.khat_defined if self.khat_defined else None,
            "ppl_reliable": self.reliable,
            "kmax": kmax_bound or None,
            "kmax_ppl": metrics.perplexity(self.kmax_total, self.tokens) if kmax_bound else None,
            "kmax_method": (
                f"K-max, K={kmax}, "
                + ("covers every source position: exact" if self.kmax_exact else "a lower bound on log p")
                if kmax_bound
                else None
            ),
            **{name: self.alignment[key] / self.tokens if key in self.alignment else None
               for key, name in ALIGNMENT_FIELDS.items()},
        }


def _score(
    pair: AlignmentPair,
    batches: list[TranslationBatch],
    num_samples: int,
    kmax_bound: int,
    spread: _TokenSpread,
    progress: bool,
) -> _Scores:
    """Log-likelihood (exact or the importance-weighted bound), the K-max bound (``kmax_bound`` > 0) and the
    alignment entropies (:func:`~pyro_attention.inference.entropy_sums`), summed over ``batches``; every token's
    log-probability goes to ``spread``."""
    from pyro_attention.inference import entropy_sums, kmax_log_likelihood, log_likelihood, shared_enumeration
    from pyro_attention.inference.evaluate import KHAT_THRESHOLD

    s = _Scores()
    with shared_enumeration():  # the likelihood and the exact posterior of a batch from one enumerated pass
        for batch in tqdm(batches, disable=tqdm_disabled(progress), desc="scoring", unit="batch", leave=False):
            ll = log_likelihood(pair, batch, num_samples=num_samples)
            spread.add(batch.target, batch.target_mask, ll.per_token)
            s.total += float(ll.per_example.sum())
            s.tokens += int(ll.num_tokens.sum())
            s.exact, s.method = s.exact and ll.exact, ll.method
            s.mc_variance += ll.mc_variance
            s.reliable = s.reliable and ll.reliable
            khat = ll.khat_values()
            if khat.numel():
                s.khat_max = max(s.khat_max, float(khat.max()))
                s.khat_defined += khat.numel()
                s.khat_over += int((khat > KHAT_THRESHOLD).sum())
            if kmax_bound:
                km = kmax_log_likelihood(pair, batch, kmax_bound)
                s.kmax_total += float(km.per_example.sum())
                s.kmax_exact = s.kmax_exact and km.exact
            s.alignment.update(entropy_sums(pair, batch, batch.target_mask))  # Counter.update adds
    return s


def _add_bleu(
    result: dict[str, Any],
    reasons: list[str | None],
    ckpt: Checkpoint,
    config: TranslationConfig,
    data: Split,
    distinct_sources: int,
    lowercase: bool | None,
    progress: bool,
    *,
    beam: int,
    rule: Rule,
    kmax: int,
    length_penalty: float,
    max_decode_len: int | None,
) -> None:
    """Beam-search ``data``'s sources; put sacreBLEU and the detokenised hypotheses in ``result``, and, first in
    ``reasons``, a warning when every source (at least 5 different ones) translates to the same output."""
    from pyro_attention import metrics

    hyps = decode_batches(ckpt, data.source, beam, rule, kmax or 5, length_penalty, max_decode_len, progress)
    text = [metrics.detokenize(h, config.tgt) for h in hyps]
    lc = config.lowercased if lowercase is None else lowercase
    scored = metrics.bleu(text, data.references, lowercase=lc)
    result.update(bleu=scored.score, bleu_signature=scored.signature, bleu_text=scored.text, hypotheses=text)
    longest = max(hyps, key=len)
    if distinct_sources >= 5 and longest and all(h == longest[: len(h)] for h in hyps):
        # the same output for every source (cut at each sentence's length limit when </s> never comes)
        reasons.insert(0, f"every one of the {len(text)} sentences ({distinct_sources} different sources) "
                       f"translates to the same output {metrics.detokenize(longest, config.tgt)[:60]!r}"
                       + ("" if len(set(text)) == 1 else " (or a prefix of it)"))


class _TokenSpread:
    """How much the log-probability of each target token varies across its positions (sums per token id).

    A model that predicts the same next-token distribution everywhere (one that ignores the source and the
    prefix: training collapsed, or the output layer's bias drowns its weights) gives every occurrence of a token
    the same log-probability; a working model's vary by whole nats.
    """

    #: below this pooled spread (nats) the predictions do not depend on the input
    THRESHOLD = 1e-3

    def __init__(self, vocab_size: int) -> None:
        self.n = torch.zeros(vocab_size, dtype=torch.float64)
        self.sum = torch.zeros(vocab_size, dtype=torch.float64)
        self.sq = torch.zeros(vocab_size, dtype=torch.float64)

    def add(self, target: torch.Tensor, mask: torch.Tensor, per_token: torch.Tensor) -> None:
        ids = target[mask].cpu()
        lp = per_token[mask].detach().cpu().double()
        self.n.index_add_(0, ids, torch.ones_like(lp))
        self.sum.index_add_(0, ids, lp)
        self.sq.index_add_(0, ids, lp * lp)

    def degenerate(self, nll: float, sentences: int) -> str | None:  # sentences: how many different sources
        """What is wrong when the log-probabilities barely vary (and the model is not simply sure of every token),
        else ``None``."""
        seen = self.n >= 2
        if sentences < 2 or int(seen.sum()) < 2 or nll < 0.1:
            return None
        n, mean = self.n[seen], self.sum[seen] / self.n[seen]
        var = (self.sq[seen] / n - mean * mean).clamp(min=0.0)
        pooled = float(((n * var).sum() / n.sum()).sqrt())
        if pooled >= self.THRESHOLD:
            return None
        return (
            f"the model predicts the same next-token distribution for every input (each target token's "
            f"log-probability varies by {pooled:.1e} nats across its {int(n.sum())} positions in {sentences} "
            "different sentences)"
        )


def _tokenizer(kind: str, lang: str) -> Callable[[str], list[str]]:
    if kind == "none":
        return str.split
    if kind == "moses":
        from sacremoses import MosesTokenizer

        moses = MosesTokenizer(lang=lang)
        return lambda line: moses.tokenize(line, escape=True, aggressive_dash_splits=False)
    raise ValueError(f"tokenize must be one of none, moses; got {kind!r}")


@torch.no_grad()
def translate_lines(
    checkpoint: Checkpoint | str | os.PathLike,
    lines: Iterable[str],
    *,
    beam: int = 5,
    rule: Rule | str | None = None,
    k: int = 5,
    length_penalty: float = 0.0,
    max_decode_len: int | None = None,
    tokenize: str = "none",
    lowercase: bool | None = None,
    progress: bool = False,
    device: str | None = None,
) -> list[str]:
    """Detokenised translations of ``lines`` (one sentence each; an empty line gives an empty line).

    :param tokenize: ``"none"`` (the lines are tokenised like the training data: split on whitespace) or
        ``"moses"`` (Moses-tokenise raw text with ``sacremoses``, escaping as the Multi30k / IWSLT files do).
        BPE corpora need BPE-segmented input.
    :param lowercase: lower-case the input (default: when the training corpus is lower-cased).
    :param max_decode_len: at most this many target tokens (default ``2 * source length + 10``).
    :param device: where to decode (default: where a loaded checkpoint's network is, the CPU for a path).
    """
    from pyro_attention.metrics import detokenize

    if isinstance(lines, (str, bytes)):
        raise TypeError(
            f"translate_lines: lines must be a list (or other iterable) of sentences, got one {type(lines).__name__} "
            f"{lines[:40]!r}; wrap a single sentence in a list: [{lines[:40]!r}]"
        )
    ckpt = _as_checkpoint(checkpoint)
    if device is not None:
        move_checkpoint(ckpt, device)
    rule = ckpt.pair.rule(rule, decoding=True)
    split = _tokenizer(tokenize, ckpt.config.src)
    lc = ckpt.config.lowercased if lowercase is None else lowercase
    sources = [split(line.lower() if lc else line) for line in lines]
    real = [i for i, s in enumerate(sources) if s]
    hyps = decode_batches(ckpt, [sources[i] for i in real], beam, rule, k, length_penalty, max_decode_len, progress)
    out = [""] * len(sources)
    for i, hyp in zip(real, hyps, strict=True):
        out[i] = detokenize(hyp, ckpt.config.tgt)
    return out
