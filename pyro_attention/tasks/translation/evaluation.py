"""Translation evaluation: perplexities (exact, or estimated with their Monte Carlo error), K-max perplexity,
alignment entropies and sacreBLEU of beam-search output, as an :class:`Evaluation` (:func:`evaluate`)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

import pyro
import torch
from tqdm.auto import tqdm

from pyro_attention.checks import count
from pyro_attention.data.translation import TranslationBatch
from pyro_attention.inference.evaluate import EstimateError
from pyro_attention.pair import AlignmentPair, Rule
from pyro_attention.tasks.translation.checkpoints import Checkpoint, move_checkpoint
from pyro_attention.tasks.translation.config import (
    ALIGNMENT_FIELDS,
    SPLITS,
    TranslationConfig,
    tqdm_disabled,
)
from pyro_attention.tasks.translation.corpora import Split, load_split, make_batches
from pyro_attention.tasks.translation.translating import BeamSearch, as_checkpoint, decode_batches

#: the fewest importance samples per token an evaluation draws for an estimated likelihood (the training config's
#: ``num_samples``, often 20 for the validation bound, is raised to it): PSIS k-hat needs at least 25
EVAL_DRAWS = 100


@dataclass
class Evaluation:
    """What :func:`evaluate` measured of a checkpoint on a split or on files.

    Likelihoods are mean nats per target token (``</s>`` counted); alignment entropies are ``None`` where the pair
    has no such distribution; the BLEU fields are ``None`` when nothing was decoded.  :meth:`to_dict` is the JSON
    ``pyro-attention evaluate --json`` writes.
    """

    checkpoint: str
    model: str
    estimator: str | None
    options: dict[str, Any]
    #: ``"train"``, ``"val"``, ``"test"`` or the source file scored; ``data``: the corpus in words
    split: str
    data: str
    sentences: int
    tokens: int
    nll: float
    ppl: float
    #: exact, or an importance-weighted estimate whose Monte Carlo error and diagnostics are :attr:`error`
    ppl_exact: bool
    ppl_method: str
    error: EstimateError
    #: K of the K-max perplexity (``None``: not computed, or the pair's alignment is not categorical)
    kmax: int | None
    kmax_ppl: float | None
    kmax_method: str | None
    prior_entropy: float | None
    posterior_entropy: float | None
    guide_entropy: float | None
    guide_kl: float | None
    #: the decoding settings, the rule resolved for the pair
    search: BeamSearch
    bleu: float | None = None
    bleu_signature: str | None = None
    bleu_text: str | None = None
    #: the detokenised translations, one per sentence
    hypotheses: list[str] | None = None
    #: a warning when the model gives the same output whatever the input (every occurrence of a target token has
    #: the same log-probability, or every sentence decodes to the same output); the command line prints it
    degenerate: str | None = None

    @property
    def nll_mc_se(self) -> float | None:
        """An estimate's Monte Carlo standard error of :attr:`nll` (``None`` when nothing was estimated)."""
        return self.error.se / self.tokens if self.error.estimated else None

    @property
    def ppl_mc_se(self) -> float | None:
        """An estimate's Monte Carlo standard error of :attr:`ppl` (delta method)."""
        se = self.nll_mc_se
        return None if se is None else self.ppl * se

    @property
    def khat_max(self) -> float | None:
        """The largest PSIS k-hat of an estimate's weights (``None``: exact, or undefined everywhere)."""
        return self.error.khat_max if self.error.khat_defined else None

    @property
    def ppl_reliable(self) -> bool:
        """Exact, or an estimate that can be trusted (:attr:`EstimateError.reliable`)."""
        return self.error.reliable

    def to_dict(self, hypotheses: bool = True) -> dict[str, Any]:
        """The result as plain JSON values (``hypotheses=False``: without the translations)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("error", "search")}
        out.update(
            nll_mc_se=self.nll_mc_se, ppl_mc_se=self.ppl_mc_se, khat_max=self.khat_max,
            khat_over_threshold=self.error.khat_over_fraction, ppl_reliable=self.ppl_reliable,
            rule=str(self.search.rule), beam=self.search.beam, length_penalty=self.search.length_penalty,
        )
        if not hypotheses:
            del out["hypotheses"]
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
    search: BeamSearch | None = None,
    batch_size: int = 64,
    num_samples: int | None = None,
    bleu: bool = True,
    lowercase: bool | None = None,
    seed: int | None = 0,
    progress: bool = False,
    device: str | None = None,
) -> Evaluation:
    """Perplexity, K-max perplexity, alignment entropies and BLEU of a checkpoint on a split or on given files.

    :param split: ``"train"``, ``"val"`` or ``"test"`` of the corpus the checkpoint was trained on, unless
        ``src_file`` / ``tgt_file`` (and optionally raw ``ref_file``) are given.
    :param size: the first ``size`` pairs (synthetic: generate ``size``); default: the config's
        ``{split}_size`` (so ``split="val"`` scores what validation scored), else all.
    :param kmax: ``K`` of the K-max perplexity (categorical pairs; 0 skips it).
    :param search: how to decode for BLEU (default :class:`BeamSearch`: beam 5, the pair's default rule); its
        rule is checked even without BLEU (a rule the pair does not allow is a mistake).
    :param num_samples: importance samples per token of an estimate (default: the config's, >= EVAL_DRAWS).
    :param lowercase: case-insensitive BLEU (default: when the corpus is lower-cased, Multi30k and IWSLT14).
    :param seed: seeds Pyro's RNGs first (``pyro.set_rng_seed``) so that an estimated likelihood is reproducible;
        ``None`` leaves them alone.
    :param device: where to evaluate (default: where the loaded checkpoint's network is, the CPU for a path).
    """
    ckpt = _loaded(checkpoint, device, seed)
    config = ckpt.config if data_dir is None else ckpt.config.replace(data_dir=data_dir)
    pair = ckpt.pair
    search = (search or BeamSearch()).for_pair(pair)
    if count(kmax, "evaluate: kmax") < 0:
        raise ValueError(f"evaluate: kmax must be >= 0 (0: no K-max perplexity), got {kmax}")
    count(batch_size, "evaluate: batch_size", 1)
    for name, value in (("size", size), ("num_samples", num_samples)):
        if value is not None:
            count(value, f"evaluate: {name}", 1)
    files = dict(src_file=src_file, tgt_file=tgt_file, ref_file=ref_file)
    data, batches = _evaluation_batches(ckpt, config, split, size, batch_size, bleu, **files)
    ckpt.network.eval()
    kmax_bound = kmax if Rule.KMAX in pair.rules else 0  # only categorical alignments have a K-max bound
    spread = _TokenSpread(len(ckpt.tgt_vocab))
    scores = _score(pair, batches, num_samples or max(config.num_samples, EVAL_DRAWS), kmax_bound, spread, progress)
    result = Evaluation(
        checkpoint=str(ckpt.path),
        model=config.model,
        estimator=config.estimator,
        options=config.options,
        split=split if src_file is None else str(src_file),
        data=data.description,
        sentences=len(data),
        **scores.result_fields(kmax_bound),
        search=search,
    )
    distinct_sources = len({tuple(s) for s in data.source})
    reasons = [spread.degenerate(result.nll, distinct_sources)] if scores.error.exact else []
    if bleu:
        _add_bleu(result, reasons, ckpt, config, data, distinct_sources, lowercase, progress)
    result.degenerate = _degenerate(reasons)
    return result


def _loaded(checkpoint: Checkpoint | str | os.PathLike, device: str | None, seed: int | None) -> Checkpoint:
    """The checkpoint, on ``device`` when given, with Pyro's RNGs seeded by ``seed`` when given."""
    ckpt = as_checkpoint(checkpoint)
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
    method: str = ""
    error: EstimateError = field(default_factory=EstimateError)
    kmax_total: float = 0.0
    kmax_exact: bool = True
    alignment: Counter = field(default_factory=Counter)  # entropy_sums' sums: prior, posterior, guide, KL

    def result_fields(self, kmax_bound: int) -> dict[str, Any]:
        """The scores' fields of :class:`Evaluation`, ``tokens`` to ``guide_kl``."""
        from pyro_attention import metrics

        return {
            "tokens": self.tokens,
            "nll": -self.total / self.tokens,
            "ppl": metrics.perplexity(self.total, self.tokens),
            "ppl_exact": self.error.exact,
            "ppl_method": self.method,
            "error": self.error,
            "kmax": kmax_bound or None,
            "kmax_ppl": metrics.perplexity(self.kmax_total, self.tokens) if kmax_bound else None,
            "kmax_method": (
                f"K-max, K={kmax_bound}, "
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

    s = _Scores()
    with shared_enumeration():  # the likelihood and the exact posterior of a batch from one enumerated pass
        for batch in tqdm(batches, disable=tqdm_disabled(progress), desc="scoring", unit="batch", leave=False):
            ll = log_likelihood(pair, batch, num_samples=num_samples)
            spread.add(batch.target, batch.target_mask, ll.per_token)
            s.total += float(ll.per_example.sum())
            s.tokens += int(ll.num_tokens.sum())
            s.method = ll.method
            s.error += ll.error
            if kmax_bound:
                km = kmax_log_likelihood(pair, batch, kmax_bound)
                s.kmax_total += float(km.per_example.sum())
                s.kmax_exact = s.kmax_exact and km.exact
            s.alignment.update(entropy_sums(pair, batch, batch.target_mask))  # Counter.update adds
    return s


def _add_bleu(
    result: Evaluation,
    reasons: list[str | None],
    ckpt: Checkpoint,
    config: TranslationConfig,
    data: Split,
    distinct_sources: int,
    lowercase: bool | None,
    progress: bool,
) -> None:
    """Decode ``data``'s sources under ``result.search``; put sacreBLEU and the detokenised hypotheses in
    ``result``, and, first in ``reasons``, a warning when every source (at least 5 different ones) translates to the
    same output."""
    from pyro_attention import metrics

    hyps = decode_batches(ckpt, data.source, result.search, progress)
    text = [metrics.detokenize(h, config.tgt) for h in hyps]
    lc = config.lowercased if lowercase is None else lowercase
    scored = metrics.bleu(text, data.references, lowercase=lc)
    result.bleu, result.bleu_signature, result.bleu_text, result.hypotheses = (
        scored.score, scored.signature, scored.text, text)
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
