"""Model/guide pairs: one alignment family per file; the estimators (objects that give each pair's ELBO, listed
in the pair's ``estimators``) are in :mod:`pyro_attention.inference.estimators`.

=============================  ===========  ===========================  ===============================
pair                           ``"align"``  guide                        ELBO
=============================  ===========  ===========================  ===============================
:class:`SoftAttention`         (none)       empty                        ``Trace_ELBO``
:class:`MarginalLikelihood`    categorical  empty (enumerated in model)  ``TraceEnum_ELBO``
:class:`HardAttention`         categorical  the prior (enum / sample)    ``TraceEnum`` / ``ReinforceKL``
:class:`VariationalAttention`  categorical  q(z | x, y) (enum / sample)  ``TraceEnum`` / ``ReinforceKL``
:class:`RelaxedAttention`      simplex      Dirichlet q(z | x, y)        ``TraceMeanField_ELBO``
=============================  ===========  ===========================  ===============================
"""

from pyro_attention.models.bayesian import BayesianAttention
from pyro_attention.models.gaussian_context import GaussianContextAttention
from pyro_attention.models.gumbel import GumbelAttention
from pyro_attention.models.hard import HardAttention
from pyro_attention.models.marginal import MarginalLikelihood
from pyro_attention.models.relaxed import RelaxedAttention
from pyro_attention.models.rws import RWSAttention
from pyro_attention.models.soft import SoftAttention
from pyro_attention.models.structured import SegmentationAttention, SegmentationMarginal
from pyro_attention.models.structured_tree import SyntacticAttention
from pyro_attention.models.variational import VariationalAttention

PAIRS = {
    "soft": SoftAttention,
    "marginal": MarginalLikelihood,
    "hard": HardAttention,
    "variational": VariationalAttention,
    "relaxed": RelaxedAttention,
}

#: the neighbours of the paper's pairs; :mod:`pyro_attention.registry` builds any pair of either dict by name
NEIGHBOURS = {
    "segmentation": SegmentationAttention,
    "syntactic": SyntacticAttention,
    "segmentation-marginal": SegmentationMarginal,
    "gaussian": GaussianContextAttention,
    "bayesian": BayesianAttention,
    "gumbel": GumbelAttention,
    "rws": RWSAttention,
}

__all__ = [
    "NEIGHBOURS",
    "PAIRS",
    "BayesianAttention",
    "GaussianContextAttention",
    "GumbelAttention",
    "HardAttention",
    "MarginalLikelihood",
    "RWSAttention",
    "RelaxedAttention",
    "SegmentationAttention",
    "SegmentationMarginal",
    "SoftAttention",
    "SyntacticAttention",
    "VariationalAttention",
]
