r"""Both directions of an HMM aligner trained in one loop: by agreement (Liang, Taskar & Klein 2006), and with the
lexical tables by EM under a Dirichlet prior.

Trained apart, the forward model ``p_f(y, z | x)`` and the reverse model ``p_r(x, z' | y)`` each fit their own
text and meet only when their links are symmetrised.  *Alignment by agreement* trains them together: EM whose
E-step, for each sentence pair, weighs a link ``(source s, target t)`` by the *product* of the two directions'
exact posteriors,

.. math::

    q_f(t, s) = p_f(z_t = s \mid x, y)\; p_r(z'_s = t \mid x, y), \qquad
    q_r(s, t) = p_r(z'_s = t \mid x, y)\; p_f(z_t = s \mid x, y),

(Liang et al.'s approximation of the agreement E-step: products of the marginals, not renormalised), so a link
counts in the lexical tables as much as *both* models believe in it.  Each posterior is the HMM's smoothed
posterior by forward-backward (:meth:`~pyro_attention.networks.lexical.HMMNetwork.likelihood_terms`), exact.
A NULL link has no counterpart in the other direction and keeps its own posterior, as does the ``</s>`` a model
predicts after the last word.

The M-step is a gradient step (Pyro's ``ClippedAdam``, the per-prefix learning rates of
:func:`~pyro_attention.inference.fit`) on ``sum q log t(y_t | x_s)`` for the tables plus the exact log-likelihood
for the chains' parameters (jumps, tension), which the agreement does not touch.  With the agreement off
(``agreement=False``: ``q`` is each model's own posterior) the step is the exact gradient of both directions'
log-likelihoods -- independent training -- which the tests check.  The loss *reported* is always both directions'
exact negative log-likelihood per target token.

**Tables by EM** (``table_prior=alpha``, :class:`DirichletTables`): instead of a gradient step, the weights ``q``
(agreement products or each direction's own posterior) are summed over the epoch into expected counts ``c(x, y)``
and each free table is set at the epoch's end to ``t(y | x) = (c(x, y) + alpha) / (c(x) + V alpha)``, the posterior
mean of a row under a symmetric ``Dirichlet(alpha)`` prior -- EM's M-step with add-``alpha`` smoothing (Moore 2004),
the classic aligners' sparse-prior remedy for rare words that collect stray links (eflomal samples under such a
prior).  With a vanishing ``alpha`` on IBM Model 1 this is EM exactly (tested against ``tests/support/ibm1_em.py``).

Pyro runs it: ``SVI(model, guide, optim, loss=agreement_loss)`` with a custom loss (the model registers both
networks with ``pyro.module``; there is no latent site to guide), stepped by the package's
:class:`~pyro_attention.inference.loop.Trainer`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pyro
import torch
from torch import Tensor

from pyro_attention.data.text import bucket_indices
from pyro_attention.data.translation import TranslationBatch, collate
from pyro_attention.inference import FitResult, FusedClippedAdam
from pyro_attention.inference.loop import Callback, ProgressBar, ProgressLines, SVIStep, Trainer, bar_shows
from pyro_attention.inference.optim import check_lr
from pyro_attention.networks.tables import SparseTable

__all__ = ["DirichletTables", "JointBitext", "agreement_loss", "agreement_weights", "fit_agreement", "free_lexical"]


def agreement_weights(forward: Tensor, reverse: Tensor, forward_target_mask: Tensor, reverse_target_mask: Tensor,
                      forward_null: bool = False, reverse_null: bool = False) -> tuple[Tensor, Tensor]:
    """Liang et al.'s agreement E-step: each direction's posterior times the other's at the same link.

    :param forward: ``p_f(z_t = s | x, y)`` ``(B, T_f, S_f)``: target positions ``y_1 .. y_m, </s>`` (padded),
        source positions (the NULL word at column 0 with ``forward_null``, then ``x_1 .. x_n``), zero where padded.
    :param reverse: ``p_r(z'_s = t | x, y)`` ``(B, T_r, S_r)`` of the same sentence pairs, the sides swapped.
    :param forward_target_mask: ``(B, T_f)``, ``True`` at ``y_1 .. y_m, </s>``; ``reverse_target_mask`` likewise.
    :returns: ``(q_f, q_r)`` of the same shapes: on real word-to-word links the product of the two posteriors; on
        NULL links and ``</s>`` each direction's own.
    """
    of, orv = int(forward_null), int(reverse_null)
    (B, T_f, S_f), (B_r, T_r, S_r) = forward.shape, reverse.shape
    len_y, len_x = T_f - 1, S_f - of  # the batch's longest target and source sentences
    if B_r != B or T_r - 1 != len_x or S_r - orv != len_y:
        raise ValueError(f"agreement_weights: forward {tuple(forward.shape)} (NULL word: {forward_null}) and reverse "
                         f"{tuple(reverse.shape)} (NULL word: {reverse_null}) are not the same sentence pairs")
    factor_f = torch.ones_like(forward)
    factor_f[:, :len_y, of:] = reverse[:, :len_x, orv:].transpose(1, 2)
    factor_r = torch.ones_like(reverse)
    factor_r[:, :len_x, orv:] = forward[:, :len_y, of:].transpose(1, 2)
    out = []
    for post, factor, mask in ((forward, factor_f, forward_target_mask), (reverse, factor_r, reverse_target_mask)):
        eos = torch.nn.functional.one_hot(mask.sum(-1) - 1, mask.shape[1]).bool()  # each row's </s>
        out.append(post * factor.masked_fill(eos.unsqueeze(-1), 1.0))
    return out[0], out[1]


@dataclass
class JointBitext:
    """Token ids of a parallel text for joint training: each batch is the same sentence pairs both ways round,
    ``(forward batch, reverse batch)``, bucketed by length (bucket order shuffled per epoch).

    ``source`` / ``target`` are as each direction's model reads them (the NULL word already in front where the
    model has one): the forward model reads ``source[i]`` and predicts ``target[i]``; the reverse model reads
    ``reverse_source[i]`` and predicts ``reverse_target[i]``.
    """

    source: list[list[int]]
    target: list[list[int]]
    reverse_source: list[list[int]]
    reverse_target: list[list[int]]
    #: each bucket's collated batches, by its sentence indices (the buckets are the same every epoch)
    _collated: dict[tuple[int, ...], tuple[TranslationBatch, TranslationBatch]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    #: the batch size of the buckets in ``_collated``
    _collated_size: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sizes = {len(self.source), len(self.target), len(self.reverse_source), len(self.reverse_target)}
        if len(sizes) != 1:
            raise ValueError(f"JointBitext: the four sides hold {len(self.source)} / {len(self.target)} / "
                             f"{len(self.reverse_source)} / {len(self.reverse_target)} sentences; they must be the "
                             "same pairs")

    def batches(self, batch_size: int, shuffle: bool = False,
                generator: torch.Generator | None = None) -> list[tuple[TranslationBatch, TranslationBatch]]:
        """The ``(forward, reverse)`` batches of :func:`~pyro_attention.data.text.bucket_indices`' buckets, in an
        order shuffled by ``generator`` when ``shuffle``.  The buckets are the same every epoch, so each is collated
        once and kept (the batches are read, never written, by training) until batches of another size are asked
        for (IBM Model 1's stage, then the HMM's)."""
        if batch_size != self._collated_size:  # another stage: the old buckets are not drawn again
            self._collated.clear()
            self._collated_size = batch_size
        out = []
        for idx in bucket_indices(self.source, self.target, batch_size, shuffle, generator):
            key = tuple(idx)
            if key not in self._collated:
                self._collated[key] = (collate([(self.source[i], self.target[i]) for i in idx]),
                                       collate([(self.reverse_source[i], self.reverse_target[i]) for i in idx]))
            out.append(self._collated[key])
        return out


def agreement_loss(forward: Any, reverse: Any, batches: tuple[TranslationBatch, TranslationBatch],
                   agreement: bool = True, tables: DirichletTables | None = None) -> Tensor:
    """Both directions' exact negative log-likelihood (the value) whose gradient is the agreement M-step.

    :param forward: an :class:`~pyro_attention.networks.lexical.HMMNetwork` or
        :class:`~pyro_attention.networks.lexical.IBM1Network` (anything with ``likelihood_terms`` and
        ``null_prob``) for the forward batch; ``reverse`` likewise for the reverse batch.
    :param agreement: ``False``: each direction's own posterior weighs its table (the likelihood's exact gradient).
    :param tables: the tables' M-step in closed form instead: the weights are added to its expected counts and the
        tables get no gradient.
    """
    (fb, rb) = batches
    log_t_f, chain_f, post_f = forward.likelihood_terms(fb)
    log_t_r, chain_r, post_r = reverse.likelihood_terms(rb)
    if agreement:
        post_f, post_r = agreement_weights(post_f, post_r, fb.target_mask, rb.target_mask,
                                           forward.null_prob is not None, reverse.null_prob is not None)
    if tables is not None:
        tables.add(0, fb, post_f)
        tables.add(1, rb, post_r)
        return -(chain_f + chain_r)
    # the value: -(chain_f + chain_r), the exact NLL; the gradient: the chains' plus sum q d log t for the tables
    weighted = sum((q * (lt - lt.detach())).masked_fill(q == 0, 0.0).sum()
                   for q, lt in ((post_f, log_t_f), (post_r, log_t_r)))
    return -(chain_f + chain_r) - weighted


def free_lexical(network: Any) -> Any:
    """The IBM1Network with a free lexical table that is ``network`` or that ``network`` holds (``.lexical``): the
    model whose table EM sets.  A low-rank table has none (``ValueError``)."""
    lexical = getattr(network, "lexical", network)
    if not getattr(lexical, "full_rank", False):
        raise ValueError(f"{type(network).__name__}: a closed-form table update needs a free (full-rank) lexical table")
    return lexical


class DirichletTables(Callback):
    r"""The lexical tables' M-step in closed form: each epoch's expected link counts ``c(x, y)`` (the E-step's
    weights, summed), then at the epoch's end ``t(y | x) = (c(x, y) + alpha) / (c(x) + V alpha)``: the posterior
    mean of each row under a symmetric ``Dirichlet(alpha)`` prior (EM with add-``alpha`` smoothing; Moore 2004),
    which keeps a rare source word from collecting the target words nothing else explains.  A dense table and a
    sparse one (:class:`~pyro_attention.networks.tables.SparseTable`) keep their counts the same way they keep
    their table (:meth:`~pyro_attention.networks.lexical.IBM1Network.add_counts`).

    :param networks: the networks whose tables are updated (:func:`free_lexical`), in the order :meth:`add` counts.
    """

    def __init__(self, networks: list[Any], alpha: float) -> None:
        if not alpha > 0:
            raise ValueError(f"DirichletTables: alpha must be > 0, got {alpha}")
        self.lexicals = [free_lexical(n) for n in networks]
        self.alpha = alpha
        self.counts = [lexical.new_counts() for lexical in self.lexicals]

    def parameters(self) -> list[Tensor]:
        """The tables' parameters: set in closed form, so trained by no gradient."""
        return [p for lexical in self.lexicals for p in lexical.table_parameters()]

    def add(self, which: int, batch: TranslationBatch, weights: Tensor) -> None:
        """Add ``weights`` ``(B, T, S)`` (zero where padded) to the counts of ``(source[b, s], target[b, t])``."""
        self.lexicals[which].add_counts(self.counts[which], batch, weights)

    def on_epoch_end(self, trainer: Trainer) -> None:
        for lexical, counts in zip(self.lexicals, self.counts, strict=True):
            lexical.set_from_counts(counts, self.alpha)
            counts.zero_()


def fit_agreement(forward: Any, reverse: Any, data: JointBitext, *, num_epochs: int = 1, batch_size: int = 64,
                  lr: float = 5e-3, param_lr: dict[str, float] | None = None, clip_norm: float = 5.0, seed: int = 0,
                  agreement: bool = True, table_prior: float | None = None,
                  log: Callable[[str], None] | None = None, progress: bool = False) -> FitResult:
    """Train both directions together by SVI with :func:`agreement_loss` (loss per step: both directions' NLL per
    target token of the two).  ``param_lr`` and ``clip_norm`` as :func:`~pyro_attention.inference.fit` takes them
    (prefixes of each network's own parameter names, e.g. ``{"lexical.": 0.01}``).

    :param agreement: ``False``: each direction's own posterior (independent training, in one loop).
    :param table_prior: ``alpha``: the free tables are not trained by gradient but set at the end of every epoch
        to the posterior mean under a ``Dirichlet(alpha)`` prior given that epoch's expected counts
        (:class:`DirichletTables`); the chains train by gradient as before.  ``None``: the tables by gradient.
    :param log: also a line through this function at every epoch's end and, without a bar, every minute
        (:class:`~pyro_attention.inference.loop.ProgressLines`).
    :param progress: a tqdm bar on a terminal.
    """
    from pyro_attention.inference.train import RecordFit, adam_args

    if num_epochs < 0 or batch_size < 1:
        raise ValueError(f"fit_agreement: need num_epochs >= 0 and batch_size >= 1, got {num_epochs}, {batch_size}")
    lr = check_lr(lr)
    rates = {prefix: check_lr(rate, f"param_lr[{prefix!r}]") for prefix, rate in (param_lr or {}).items()}
    tables = None if table_prior is None else DirichletTables([forward, reverse], table_prior)
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    generator = torch.Generator().manual_seed(seed)

    def model(batches: tuple[TranslationBatch, TranslationBatch]) -> None:
        with warnings.catch_warnings():  # tables set in closed form are frozen: Pyro need not register them
            warnings.filterwarnings("ignore", message=".*not registered in the param store because requires_grad")
            pyro.module("forward", forward)
            pyro.module("reverse", reverse)

    def guide(batches: tuple[TranslationBatch, TranslationBatch]) -> None:
        pass

    def loss(model: Callable, guide: Callable, batches: tuple[TranslationBatch, TranslationBatch]) -> Tensor:
        model(batches)
        return agreement_loss(forward, reverse, batches, agreement, tables)

    svi = pyro.infer.SVI(model, guide, FusedClippedAdam(adam_args(lr, rates, clip_norm)), loss=loss)
    step = SVIStep(svi, tokens=lambda b: int(b[0].target_mask.sum() + b[1].target_mask.sum()),
                   diverged=lambda value, trainer: (f"fit_agreement: training diverged: non-finite loss {value} at "
                                                    f"step {trainer.step} (epoch {trainer.epoch + 1}); lower lr (it "
                                                    f"is {lr:g})"))
    result = FitResult()
    forward.train()
    reverse.train()
    frozen = [] if tables is None else [t for t in tables.parameters() if t.requires_grad]
    for table in frozen:  # set in closed form: no gradient, nothing for the optimiser
        table.requires_grad_(False)
    callbacks = [RecordFit(result, data), ProgressBar("both directions", disable=None if progress else True,
                                                      leave=False)]
    callbacks += [] if tables is None else [tables]
    callbacks += [] if log is None else [ProgressLines(log, "both directions",
                                                       every=math.inf if bar_shows(progress) else 60.0)]
    try:
        with ExitStack() as kept:
            if num_epochs > 1:  # the same batches every epoch: each sparse table searches each batch once
                for table in (m for n in (forward, reverse) for m in n.modules() if isinstance(m, SparseTable)):
                    kept.enter_context(table.kept_lookups())
            trainer = Trainer(step, lambda _: iter(data.batches(batch_size, shuffle=True, generator=generator)),
                              num_epochs, callbacks).fit()
    finally:
        for table in frozen:
            table.requires_grad_(True)
    result.seconds = trainer.elapsed
    return result
