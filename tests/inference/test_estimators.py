"""Estimators as objects (pyro_attention.inference.estimators).

Each estimator object gives the same loss and gradients as its name and as the Pyro ELBO the pair returned before
estimators were objects; a name builds the same pair as the object where a pair is built, and an estimator never
equals a string; a wrong estimator is refused with the allowed ones listed.
"""

from __future__ import annotations

import pyro
import pytest
import torch
from pyro.infer import Trace_ELBO, TraceEnum_ELBO, TraceMeanField_ELBO

from pyro_attention.inference import (
    AlignmentRWS,
    AnnealedMeanField_ELBO,
    CategoricalKL,
    CategoricalKL_ELBO,
    Enumerate,
    Estimator,
    KLSchedule,
    MaximumLikelihood,
    MeanField,
    ReinforceKL_ELBO,
    Reparameterized,
    ReweightedWakeSleep,
    ScoreFunction,
)
from pyro_attention.models import (
    GaussianContextAttention,
    GumbelAttention,
    HardAttention,
    SoftAttention,
    VariationalAttention,
)
from pyro_attention.pair import AlignmentPair
from pyro_attention.registry import ALL_PAIRS, PAIR_ESTIMATORS, PairSpec, make_pair, pair_options
from tests.support.toy_network import ToyNetwork, make_toy_batch

MPN = 2
#: (pair, estimator name) -> (the estimator object, the Pyro ELBO the pair returned before, exact?)
CASES = {
    ("soft", None): (MaximumLikelihood(), lambda pair: Trace_ELBO(max_plate_nesting=MPN), True),
    ("marginal", None): (Enumerate(), lambda pair: TraceEnum_ELBO(max_plate_nesting=MPN), True),
    ("hard", "enum"): (Enumerate(), lambda pair: TraceEnum_ELBO(max_plate_nesting=MPN), True),
    ("hard", "sample"): (ScoreFunction(), lambda pair: ReinforceKL_ELBO(max_plate_nesting=MPN), False),
    ("variational", "enum"): (Enumerate(), lambda pair: TraceEnum_ELBO(max_plate_nesting=MPN), True),
    ("variational", "sample"): (ScoreFunction(), lambda pair: ReinforceKL_ELBO(max_plate_nesting=MPN), False),
    ("relaxed", None): (MeanField(), lambda pair: TraceMeanField_ELBO(max_plate_nesting=MPN), False),
    ("segmentation", None): (MaximumLikelihood(), lambda pair: Trace_ELBO(max_plate_nesting=MPN), True),
    ("syntactic", None): (MaximumLikelihood(), lambda pair: Trace_ELBO(max_plate_nesting=MPN), True),
    ("segmentation-marginal", None): (Enumerate(), lambda pair: TraceEnum_ELBO(max_plate_nesting=MPN), True),
    # the old AnnealedMeanField_ELBO took the pair itself (its annealed() and step)
    ("gaussian", None): (MeanField(KLSchedule()), lambda pair: AnnealedMeanField_ELBO(pair), False),
    ("bayesian", None): (MeanField(KLSchedule()), lambda pair: AnnealedMeanField_ELBO(pair), False),
    ("gumbel", "sampled"): (Reparameterized(), lambda pair: Trace_ELBO(max_plate_nesting=MPN), False),
    ("gumbel", "categorical"): (CategoricalKL(), lambda pair: CategoricalKL_ELBO(max_plate_nesting=MPN), False),
    ("rws", None): (ReweightedWakeSleep(), lambda pair: AlignmentRWS(pair.num_particles, pair.per_token), False),
}
IDS = [f"{n}-{e}" if e else n for n, e in CASES]


def _loss_and_grads(name, estimator, elbo_of=None, **options):
    """One ``loss_and_grads`` on the toy problem from a fixed initialisation and random seed."""
    pyro.clear_param_store()
    torch.manual_seed(0)
    net = ToyNetwork()
    batch = make_toy_batch(seed=0)
    pair = make_pair(name, net, estimator, **options)
    elbo = pair.elbo() if elbo_of is None else elbo_of(pair)
    pyro.set_rng_seed(1)
    loss = elbo.loss_and_grads(pair.model, pair.guide, batch)
    grads = [None if p.grad is None else p.grad.clone() for p in pair.parameters()]
    return pair, elbo, float(loss), grads


def _same(a, b):
    _, _, loss_a, grads_a = a
    _, _, loss_b, grads_b = b
    assert loss_a == loss_b
    assert len(grads_a) == len(grads_b)
    assert any(g is not None for g in grads_a)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        assert (ga is None) == (gb is None)
        if ga is not None:
            assert torch.equal(ga, gb)


def test_cases_cover_every_pair_and_estimator():
    names = {(n, e) for n in ALL_PAIRS for e in PAIR_ESTIMATORS.get(n, (None,))}
    assert names == set(CASES)


@pytest.mark.parametrize("name,estimator", list(CASES), ids=IDS)
def test_estimator_object_gives_the_old_loss_and_gradients(float64, name, estimator):
    obj, old_elbo, exact = CASES[(name, estimator)]
    by_string = _loss_and_grads(name, estimator)
    pair, elbo, _, _ = by_string
    # the pair's estimator is the object, it builds the ELBO class the pair used to build itself
    assert pair.estimator == obj and type(pair.estimator) is type(obj)
    assert pair.estimator.exact is exact
    assert type(elbo) is type(old_elbo(pair))
    # ... with the same loss and gradients as that ELBO built by hand
    _same(by_string, _loss_and_grads(name, estimator, old_elbo))
    if estimator is not None:  # and passing the object is passing the string
        _same(by_string, _loss_and_grads(name, obj))
        _same(by_string, _loss_and_grads(name, estimator, lambda p: obj.elbo(p)))


def test_annealed_estimator_matches_the_old_annealed_elbo(float64):
    """With a schedule the estimator's ELBO anneals exactly as the old ``AnnealedMeanField_ELBO(pair)`` did."""
    options = {"anneal_steps": 4, "kl_scale": 0.5, "schedule": "tanh"}
    for name in ("gaussian", "bayesian"):
        new = _loss_and_grads(name, None, **options)
        old = _loss_and_grads(name, None, lambda pair: AnnealedMeanField_ELBO(pair), **options)
        _same(new, old)
        pair = new[0]
        assert pair.step == 1 and pair.kl_schedule.step == 1  # the step counter is the estimator's schedule's
        assert pair.estimator == MeanField(KLSchedule(4, "tanh", 0.5))
        assert pair.estimator.kl_schedule is pair.kl_schedule
        assert pair.kl_weight(2) == pytest.approx(0.25)


def test_guide_infer():
    net = ToyNetwork()
    batch = make_toy_batch()
    pair = HardAttention(net, ScoreFunction())
    enc = pair.network.encode(batch)
    assert Enumerate().guide_infer(pair, enc) == {"enumerate": "parallel"}
    assert ScoreFunction(baseline=None).guide_infer(pair, enc) == {}
    assert MeanField().guide_infer(pair, enc) == {} and CategoricalKL().guide_infer(pair, enc) == {}
    with pyro.plate("batch", enc.shape[0], dim=-2), pyro.plate("target", enc.shape[1], dim=-1):
        infer = ScoreFunction().guide_infer(pair, enc)
    baseline = infer["baseline"]["baseline_value"]
    assert torch.equal(baseline, pair.soft_log_likelihood(enc)) and not baseline.requires_grad
    # the guide's site carries it
    trace = pyro.poutine.trace(pair.guide).get_trace(batch)
    assert torch.equal(trace.nodes["align"]["infer"]["baseline"]["baseline_value"], baseline)
    enum_trace = pyro.poutine.trace(HardAttention(net, Enumerate()).guide).get_trace(batch)
    assert enum_trace.nodes["align"]["infer"] == {"enumerate": "parallel"}


def test_score_function_without_baseline_has_the_same_loss(float64):
    """The baseline changes the gradient's variance, not the loss."""
    with_baseline = _loss_and_grads("variational", ScoreFunction())
    without = _loss_and_grads("variational", ScoreFunction(baseline=None))
    assert with_baseline[2] == without[2]
    assert ScoreFunction(baseline=None).name == "sample" and ScoreFunction(baseline=None) != ScoreFunction()


def test_names_build_the_same_pair_as_objects_and_objects_never_equal_strings():
    """A name selects an estimator at the edges (a constructor, ``make_pair``, ``PairSpec``, the command line); inside,
    an estimator is an object: equal to another of its class and parameters, never to a string."""
    net = ToyNetwork()
    for cls in (HardAttention, VariationalAttention):
        for name, obj in (("enum", Enumerate()), ("sample", ScoreFunction())):
            by_name, by_object = cls(net, name), cls(net, obj)
            assert by_name.estimator == by_object.estimator == obj and by_object.estimator is obj  # kept as given
            assert by_object.estimator != name and name != by_object.estimator and name not in {obj}
            assert str(by_object.estimator) == name == by_object.estimator.name
            assert hash(by_name.estimator) == hash(obj) and {obj: 1}[by_name.estimator] == 1
            assert repr(by_object) == repr(by_name) == f"{cls.__name__}(estimator={name!r})"
        assert cls(net).estimator == Enumerate()  # the default
    assert ScoreFunction() != ScoreFunction(baseline=None) and Enumerate() != ScoreFunction()
    # make_pair, PairSpec
    for name, choices in PAIR_ESTIMATORS.items():
        for choice in choices:
            obj = make_pair(name, net, choice).estimator
            assert isinstance(obj, Estimator) and obj.name == choice
            assert make_pair(name, net, obj).estimator == obj
            assert PairSpec(name, obj).label == PairSpec(name, choice).label == f"{name} ({choice})"
    # Gumbel: the name or the object
    assert GumbelAttention(net).estimator == Reparameterized()
    for pair in (GumbelAttention(net, estimator="categorical"), GumbelAttention(net, estimator=CategoricalKL())):
        assert pair.estimator == CategoricalKL() and pair.estimator.name == "categorical"
        assert repr(pair) == "GumbelAttention(temperature=0.1, straight_through=False, estimator='categorical')"
    # the registry's name table is what the classes accept
    assert PAIR_ESTIMATORS == {
        "hard": ("enum", "sample"),
        "variational": ("enum", "sample"),
        "gumbel": ("sampled", "categorical"),
    }
    assert "estimator" not in pair_options("gumbel")


def test_every_pair_has_its_estimator_and_says_whether_it_had_a_choice():
    """``pair.estimator`` is the one accessor, on every pair; :meth:`has_estimator_choice` says whether the pair is
    built with one of several (labels and exports name the chosen one)."""
    net = ToyNetwork()
    soft = SoftAttention(net)
    assert soft.estimator == MaximumLikelihood() and not soft.has_estimator_choice() and repr(soft) == "SoftAttention()"
    gaussian = GaussianContextAttention(net, anneal_steps=3)
    assert gaussian.estimator == MeanField(KLSchedule(3)) and not gaussian.has_estimator_choice()
    for name, cls in ALL_PAIRS.items():
        assert isinstance(cls.estimators[0], Estimator), name
        assert cls.has_estimator_choice() == (len(cls.estimators) > 1) == (name in PAIR_ESTIMATORS)
    with pytest.raises(AttributeError):
        soft.estimator = ScoreFunction()  # chosen at construction only


def test_a_wrong_estimator_is_refused_with_the_allowed_ones():
    net = ToyNetwork()
    listed = r"\('enum', 'sample'\), got CategoricalKL\(\) \('categorical'\); as objects: Enumerate\(\), ScoreFunction"
    with pytest.raises(ValueError, match=r"HardAttention: estimator must be one of " + listed):
        HardAttention(net, CategoricalKL())
    with pytest.raises(ValueError, match=r"^VariationalAttention: estimator must be one of \('enum', 'sample'\), "
                       r"got 'x'"):
        VariationalAttention(net, "x")
    with pytest.raises(ValueError, match=r"GumbelAttention: estimator must be one of \('sampled', 'categorical'\), "
                       r"got Enumerate\(\) \('enum'\); as objects: Reparameterized\(\), CategoricalKL\(\)"):
        GumbelAttention(net, estimator=Enumerate())
    with pytest.raises(ValueError, match=r"pair 'hard': estimator must be one of \('enum', 'sample'\), got MeanField"):
        make_pair("hard", net, MeanField())
    with pytest.raises(ValueError, match=r"pair 'soft' has no choice of estimator, got Enumerate\(\)"):
        make_pair("soft", net, Enumerate())
    with pytest.raises(ValueError, match=r"estimator 'categorical' of pair 'hard': choose from enum, sample"):
        make_pair("hard", net, "categorical")
    with pytest.raises(ValueError, match=r"ScoreFunction: baseline must be one of \('soft', None\), got 'mean'"):
        ScoreFunction(baseline="mean")
    with pytest.raises(ValueError, match=r"ReweightedWakeSleep: num_particles must be >= 2, got 1"):
        ReweightedWakeSleep(1)
    with pytest.raises(ValueError, match=r"GaussianContextAttention: anneal_steps must be >= 0, got -1"):
        GaussianContextAttention(net, anneal_steps=-1)


def test_a_new_pair_needs_only_its_estimators(float64):
    """A pair that lists estimators gets ``elbo()`` from the base class; one that lists none is told so."""

    class Prior(SoftAttention):
        estimators = (Enumerate(), MaximumLikelihood())

        def __init__(self, network, estimator=None):
            super().__init__(network)
            self._choose_estimator(estimator)

    net = ToyNetwork()
    assert type(Prior(net).elbo()) is TraceEnum_ELBO and Prior(net).estimator == Enumerate()
    assert type(Prior(net, "mle").elbo()) is Trace_ELBO

    class Bare(AlignmentPair):
        pass

    with pytest.raises(NotImplementedError, match=r"Bare: no estimator; list them in `estimators` or define elbo\(\)"):
        Bare(net).elbo()
