r"""Estimators as objects: how training treats the random alignment, apart from what the model means.

A pair = alignment family x task network x **estimator**.  The model and the guide say what is random and what
the prior and the posterior see; the estimator says how the ELBO's expectation over the guide is computed:
which Pyro ELBO (:meth:`Estimator.elbo`) and which ``infer`` options the guide's ``"align"`` site carries
(:meth:`Estimator.guide_infer`).  It never changes the model, so every evaluation (exact log-likelihood,
posterior, prediction) is the same whichever estimator trained the pair.  Like Pyro's ELBO classes, an
estimator is an object; unlike them, it knows the pair conventions (site ``"align"``, two plates) and builds the
ELBO for a pair::

    HardAttention(net, Enumerate())              # == HardAttention(net, "enum")
    VariationalAttention(net, ScoreFunction())   # == VariationalAttention(net, "sample")
    pair.elbo()                                  # == pair.estimator.elbo(pair)

* :class:`MaximumLikelihood` (``"mle"``): ``Trace_ELBO``, empty guide; exact (the NLL); soft, segmentation,
  syntactic;
* :class:`Enumerate` (``"enum"``): ``TraceEnum_ELBO``, guide ``infer={"enumerate": "parallel"}`` (marginal pairs
  enumerate the model's site); exact; marginal, segmentation-marginal, hard, variational;
* :class:`ScoreFunction` (``"sample"``): :class:`ReinforceKL_ELBO`, guide ``infer`` with the soft-attention
  log-likelihood as ``baseline_value``; not exact; hard, variational;
* :class:`MeanField` (``"meanfield"``): ``TraceMeanField_ELBO``, or :class:`AnnealedMeanField_ELBO` with a
  :class:`KLSchedule`; not exact; relaxed, gaussian and bayesian (with their own schedule);
* :class:`Reparameterized` (``"sampled"``): ``Trace_ELBO`` (the KL sampled); not exact; gumbel (the default);
* :class:`CategoricalKL` (``"categorical"``): :class:`CategoricalKL_ELBO`; not exact; gumbel;
* :class:`ReweightedWakeSleep` (``"rws"``): :class:`AlignmentRWS`; not exact; rws.

*Exact* means the loss is the exact negative log-likelihood (deterministic pairs), or the expectation over the
guide is computed exactly (enumeration; for a guide equal to the true posterior that is ``-log p(y | x)``).

Names are for the edges: the command line (``--estimator sample``), configs and checkpoints store an estimator's
:attr:`~Estimator.name`, and :func:`resolve` turns a name or an object into the pair's estimator when the pair is
built (``make_pair(name, net, "sample")``), refusing the others with the allowed ones listed.  Inside, an estimator
is an object: it equals another of its class with the same parameters, never a string (``str(estimator)`` is
its name, for printing).

The ELBO classes themselves are in :mod:`pyro_attention.inference.elbo`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import pyro
import torch
from pyro import poutine
from pyro.poutine.runtime import get_plates

from pyro_attention.inference.elbo import (
    AlignmentRWS,
    AnnealedMeanField_ELBO,
    CategoricalKL_ELBO,
    ReinforceKL_ELBO,
)
from pyro_attention.pair import MAX_PLATE_NESTING

if TYPE_CHECKING:
    from pyro_attention.networks.base import Encoded
    from pyro_attention.pair import AlignmentPair

#: steepness of the tanh schedule (its weight goes from exactly 0 to exactly 1 over ``anneal_steps``)
TANH_STEEPNESS = 3.0


def linear_ramp(u: float) -> float:
    """The ``"linear"`` schedule's share of the final KL weight at fraction ``u`` of the annealing steps."""
    return u


def tanh_ramp(u: float) -> float:
    """The ``"tanh"`` schedule's share: an S-curve of steepness :data:`TANH_STEEPNESS`, exactly 0 at ``u = 0`` and
    exactly 1 at ``u = 1``."""
    a = TANH_STEEPNESS
    return (math.tanh(a * (2.0 * u - 1.0)) + math.tanh(a)) / (2.0 * math.tanh(a))


#: KL annealing schedules by the names the pairs accept: fraction of the annealing steps done -> share of the weight
SCHEDULES: dict[str, Callable[[float], float]] = {"linear": linear_ramp, "tanh": tanh_ramp}
#: baselines of :class:`ScoreFunction`: the soft-attention log-likelihood of each token (the paper's), or none
BASELINES = ("soft", None)


class Estimator:
    """How training treats the alignment: a Pyro ELBO and the guide site's ``infer`` options.

    Subclasses set :attr:`name` (what the command line and configs call it), :attr:`exact` and implement
    :meth:`elbo`.  An estimator equals another of the same class with the same :meth:`params`.
    """

    #: the string that selects this estimator (``"enum"``, ``"sample"``, ...); ``str(estimator)`` is it
    name: ClassVar[str] = ""
    #: whether the loss is exact: the exact NLL, or the guide's expectation computed exactly (enumerated)
    exact: ClassVar[bool] = False

    def elbo(self, pair: AlignmentPair) -> pyro.infer.ELBO:  # pragma: no cover - interface
        """The Pyro ELBO that trains ``pair`` (``SVI(pair.model, pair.guide, optim, estimator.elbo(pair))``)."""
        raise NotImplementedError

    def guide_infer(self, pair: AlignmentPair, enc: Encoded) -> dict[str, Any]:
        """The ``infer`` dict of the guide's ``"align"`` site (called inside the guide's plates)."""
        return {}

    def params(self) -> tuple[tuple[str, Any], ...]:
        """The constructor arguments, as ``(name, value)`` pairs (for ``==`` and ``repr``)."""
        return ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Estimator):
            return type(other) is type(self) and other.params() == self.params()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(type(self))  # equal estimators are of one class (their parameters may be unhashable)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.params())})"


class MaximumLikelihood(Estimator):
    """Deterministic pairs: ``Trace_ELBO`` with the empty guide is exactly the negative log-likelihood."""

    name: ClassVar[str] = "mle"
    exact: ClassVar[bool] = True

    def elbo(self, pair: AlignmentPair) -> pyro.infer.ELBO:
        return pyro.infer.Trace_ELBO(max_plate_nesting=MAX_PLATE_NESTING)


class Enumerate(Estimator):
    """Exact expectation: ``TraceEnum_ELBO`` sums every discrete site marked ``enumerate="parallel"``.

    With an empty guide (marginal pairs) the model's site is enumerated: the loss is ``-log p(y | x)``.  With a
    categorical guide the guide's site is enumerated, so the expectation and the KL are exact (the enumerated
    sum :math:`\\sum_z q(z)[\\log p(z) - \\log q(z)]` *is* the analytic KL).
    """

    name: ClassVar[str] = "enum"
    exact: ClassVar[bool] = True

    def elbo(self, pair: AlignmentPair) -> pyro.infer.ELBO:
        return pyro.infer.TraceEnum_ELBO(max_plate_nesting=MAX_PLATE_NESTING)

    def guide_infer(self, pair: AlignmentPair, enc: Encoded) -> dict[str, Any]:
        return {"enumerate": "parallel"}


class ScoreFunction(Estimator):
    """One draw per token, the KL in closed form, REINFORCE for ``E_q[log p(y | x, z)]`` (the paper's estimator).

    :class:`~pyro_attention.inference.elbo.ReinforceKL_ELBO`, Rao-Blackwellised over the plates, with the
    baseline in the guide site's ``infer={"baseline": {"baseline_value": b}}`` (Pyro's own key, so
    ``TraceGraph_ELBO``, whose KL is sampled, runs on the same guide).

    :param baseline: ``"soft"`` -- the soft-attention log-likelihood ``log p(y_t | x, E_p[z_t])`` of the same
        network, per token, computed without gradient (Deng et al. 2018); ``None`` -- no baseline.
    """

    name: ClassVar[str] = "sample"

    def __init__(self, baseline: str | None = "soft") -> None:
        if baseline not in BASELINES:
            raise ValueError(f"ScoreFunction: baseline must be one of {BASELINES}, got {baseline!r}")
        self.baseline = baseline

    def params(self) -> tuple[tuple[str, Any], ...]:
        return (("baseline", self.baseline),)

    def elbo(self, pair: AlignmentPair) -> pyro.infer.ELBO:
        return ReinforceKL_ELBO(max_plate_nesting=MAX_PLATE_NESTING)

    def guide_infer(self, pair: AlignmentPair, enc: Encoded) -> dict[str, Any]:
        if self.baseline is None:
            return {}
        # TraceGraph_ELBO wants the baseline shaped like the site, plates (e.g. particles) included
        with torch.no_grad():  # a constant of the estimator: no graph kept for it
            baseline = pair.soft_log_likelihood(enc)
        return {"baseline": {"baseline_value": baseline.expand(plate_shape(baseline.shape))}}


class KLSchedule:
    r"""KL annealing: a step counter and the weight :math:`w(\text{step})` of the latent site's log-densities.

    With :math:`u = \min(1, \text{step} / \text{anneal\_steps})` the weight is :math:`w = \kappa u`
    (``"linear"``) or :math:`w = \kappa (\tanh(a(2u - 1)) + \tanh a) / (2 \tanh a)`, :math:`a = 3` (``"tanh"``:
    slow, fast, slow); both are exactly 0 at step 0 and exactly :math:`\kappa` from step ``anneal_steps`` on;
    ``anneal_steps=0`` means no annealing.  :math:`\kappa` is ``kl_scale``, 1 by default (the ELBO); another
    value trains a KL-weighted objective (a beta-VAE-style trade-off) -- an estimator choice that leaves the
    model, and every evaluation of it, unchanged.

    The pair wraps its latent sample statement -- in the model and in the guide, so the KL term (or the sampled
    ``log p(z) - log q(z)``) -- in :meth:`latent_scale`, which applies :math:`w` with ``pyro.poutine.scale``
    (``poutine.mask`` at :math:`w = 0`, where Pyro refuses a zero scale), but only while :meth:`annealed` is
    active.  :class:`~pyro_attention.inference.elbo.AnnealedMeanField_ELBO` activates it for each
    ``loss_and_grads`` (one SVI step) and then advances the counter by one; ``loss`` (evaluation), ``Predictive``
    and every other trace see the model at weight 1.

    :param anneal_steps: steps from weight 0 to ``kl_scale`` (0: none).
    :param schedule: ``"linear"`` or ``"tanh"``.
    :param kl_scale: the final KL weight (> 0).
    :param owner: the name used in error messages.
    """

    def __init__(
        self, anneal_steps: int = 0, schedule: str = "linear", kl_scale: float = 1.0, owner: str = "KLSchedule"
    ) -> None:
        if anneal_steps < 0:
            raise ValueError(f"{owner}: anneal_steps must be >= 0, got {anneal_steps}")
        if schedule not in SCHEDULES:
            raise ValueError(f"{owner}: schedule must be one of {tuple(SCHEDULES)}, got {schedule!r}")
        if not kl_scale > 0:
            raise ValueError(f"{owner}: kl_scale must be > 0, got {kl_scale}")
        self.anneal_steps = int(anneal_steps)
        self.schedule = schedule
        self.kl_scale = float(kl_scale)
        self.step = 0
        self._annealing = False

    def __repr__(self) -> str:
        return f"KLSchedule(anneal_steps={self.anneal_steps}, schedule={self.schedule!r}, kl_scale={self.kl_scale})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KLSchedule):
            return NotImplemented
        return (self.anneal_steps, self.schedule, self.kl_scale) == (other.anneal_steps, other.schedule, other.kl_scale)

    __hash__ = None  # mutable (the step counter)

    def kl_weight(self, step: int | None = None) -> float:
        """The KL weight at ``step`` (default: the current counter)."""
        step = self.step if step is None else step
        if self.anneal_steps == 0:
            return self.kl_scale
        return self.kl_scale * SCHEDULES[self.schedule](min(1.0, max(0.0, step / self.anneal_steps)))

    def set_step(self, step: int) -> None:
        """Set the step counter (e.g. when resuming)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        self.step = int(step)

    @contextmanager
    def annealed(self) -> Iterator[None]:
        """Apply the current KL weight to the latent site inside this block (the ELBO's training step)."""
        previous, self._annealing = self._annealing, True
        try:
            yield
        finally:
            self._annealing = previous

    @contextmanager
    def latent_scale(self) -> Iterator[None]:
        """Wrap the latent sample statement: scale it by the KL weight while :meth:`annealed` is active."""
        weight = self.kl_weight() if self._annealing else 1.0
        if weight == 1.0:
            yield
        elif weight == 0.0:
            with poutine.mask(mask=False):
                yield
        else:
            with poutine.scale(scale=weight):
                yield


class KLAnnealing:
    """Mixin of the pairs trained with ``MeanField(kl_schedule)``: the schedule's members on the pair.

    ``pair.kl_weight(step)``, ``pair.step``, ``pair.set_step(step)``, ``pair.annealed()`` and
    ``pair.latent_scale()`` are those of ``pair.kl_schedule`` (a :class:`KLSchedule`), which the pair's
    estimator (:class:`MeanField`) holds.
    """

    def _init_annealing(self, anneal_steps: int, schedule: str, kl_scale: float = 1.0) -> None:
        """Build the pair's :class:`KLSchedule` and make ``MeanField(kl_schedule)`` its estimator."""
        self.kl_schedule = KLSchedule(anneal_steps, schedule, kl_scale, owner=type(self).__name__)
        self._choose_estimator(MeanField(self.kl_schedule))  # type: ignore[attr-defined] - an AlignmentPair

    def _schedule(self) -> KLSchedule:
        if "kl_schedule" not in self.__dict__:  # a subclass that did not call _init_annealing
            self.kl_schedule = KLSchedule(owner=type(self).__name__)
        return self.kl_schedule

    @property
    def anneal_steps(self) -> int:
        return self._schedule().anneal_steps

    @property
    def schedule(self) -> str:
        return self._schedule().schedule

    @property
    def kl_scale(self) -> float:
        return self._schedule().kl_scale

    @property
    def step(self) -> int:
        """The annealing step counter (advanced by each training step of the pair's ELBO)."""
        return self._schedule().step

    @step.setter
    def step(self, value: int) -> None:
        self._schedule().step = value

    def kl_weight(self, step: int | None = None) -> float:
        """The KL weight at ``step`` (default: the current counter)."""
        return self._schedule().kl_weight(step)

    def set_step(self, step: int) -> None:
        """Set the annealing step counter."""
        self._schedule().set_step(step)

    def annealed(self) -> Any:  # a context manager
        """Apply the current KL weight to the latent site inside this block (the ELBO's training step)."""
        return self._schedule().annealed()

    def latent_scale(self) -> Any:  # a context manager
        """Wrap the latent sample statement: scale it by the KL weight while :meth:`annealed` is active."""
        return self._schedule().latent_scale()


class MeanField(Estimator):
    """Reparameterised draws and the analytic KL: ``TraceMeanField_ELBO``, optionally with KL annealing.

    :param kl_schedule: a :class:`KLSchedule` (the pair's latent site must be wrapped in its
        ``latent_scale()``); ``None``: the plain ELBO.  The schedule holds the step counter, so one estimator
        object serves one pair.
    """

    name: ClassVar[str] = "meanfield"

    def __init__(self, kl_schedule: KLSchedule | None = None) -> None:
        self.kl_schedule = kl_schedule

    def params(self) -> tuple[tuple[str, Any], ...]:
        return (("kl_schedule", self.kl_schedule),)

    def elbo(self, pair: AlignmentPair) -> pyro.infer.ELBO:
        if self.kl_schedule is None:
            return pyro.infer.TraceMeanField_ELBO(max_plate_nesting=MAX_PLATE_NESTING)
        return AnnealedMeanField_ELBO(self.kl_schedule)


class Reparameterized(Estimator):
    """One reparameterised draw, the KL sampled (``log p(z) - log q(z)`` at the draw): ``Trace_ELBO``.

    For relaxed (Concrete) alignments, whose KL has no closed form: the ELBO of the relaxed model.
    """

    name: ClassVar[str] = "sampled"

    def elbo(self, pair: AlignmentPair) -> pyro.infer.ELBO:
        return pyro.infer.Trace_ELBO(max_plate_nesting=MAX_PLATE_NESTING)


class CategoricalKL(Estimator):
    """Relaxed draws for the likelihood, the KL of the categoricals they relax in closed form
    (:class:`~pyro_attention.inference.elbo.CategoricalKL_ELBO`; Jang et al. 2017).  A surrogate of the
    categorical ELBO, not a bound at temperature > 0."""

    name: ClassVar[str] = "categorical"

    def elbo(self, pair: AlignmentPair) -> pyro.infer.ELBO:
        return CategoricalKL_ELBO(max_plate_nesting=MAX_PLATE_NESTING)


class ReweightedWakeSleep(Estimator):
    """Reweighted wake-sleep (wake-theta and wake-phi) with ``K`` draws per token:
    :class:`~pyro_attention.inference.elbo.AlignmentRWS`.

    :param num_particles: ``K`` (>= 2).
    :param per_token: one set of importance weights per token (``False``: Pyro's whole-trace weights).
    """

    name: ClassVar[str] = "rws"

    def __init__(self, num_particles: int = 5, per_token: bool = True) -> None:
        if num_particles < 2:
            raise ValueError(f"ReweightedWakeSleep: num_particles must be >= 2, got {num_particles}")
        self.num_particles = int(num_particles)
        self.per_token = per_token

    def params(self) -> tuple[tuple[str, Any], ...]:
        return (("num_particles", self.num_particles), ("per_token", self.per_token))

    def elbo(self, pair: AlignmentPair) -> AlignmentRWS:
        return AlignmentRWS(num_particles=self.num_particles, per_token=self.per_token)


def resolve(estimator: Estimator | str | None, allowed: Sequence[Estimator], owner: str) -> Estimator:
    """The estimator ``estimator`` names or is, if ``allowed`` has one of its kind; ``None``: ``allowed[0]``.

    A string selects the allowed estimator of that :attr:`~Estimator.name`; an object is accepted as given
    when an allowed one has its class.  Otherwise ``ValueError``: ``"{owner}: estimator must be one of
    ('enum', 'sample'), got ..."``, listing the allowed names and objects.
    """
    if not allowed:
        raise ValueError(f"{owner}: has no estimator")
    if estimator is None:
        return allowed[0]
    for candidate in allowed:
        if isinstance(estimator, str) and estimator == candidate.name:
            return candidate
        if isinstance(estimator, Estimator) and type(estimator) is type(candidate):
            return estimator
    names = tuple(e.name for e in allowed)
    got = f"{estimator!r} ({estimator.name!r})" if isinstance(estimator, Estimator) else repr(estimator)
    objects = ", ".join(repr(e) for e in allowed)
    raise ValueError(f"{owner}: estimator must be one of {names}, got {got}; as objects: {objects}")


def plate_shape(shape: torch.Size) -> torch.Size:
    """``shape`` broadcast with the sizes of the plates active now."""
    dims = list(shape)
    for frame in get_plates():
        if frame.dim is not None:
            while len(dims) < -frame.dim:
                dims.insert(0, 1)
            dims[frame.dim] = max(dims[frame.dim], frame.size)
    return torch.Size(dims)


__all__ = [
    "CategoricalKL",
    "Enumerate",
    "Estimator",
    "KLAnnealing",
    "KLSchedule",
    "MaximumLikelihood",
    "MeanField",
    "Reparameterized",
    "ReweightedWakeSleep",
    "ScoreFunction",
    "plate_shape",
    "resolve",
]
