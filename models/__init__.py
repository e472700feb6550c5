"""Model/guide pairs: one alignment family and its estimator per file.

==========================  =============  ==============================  =============================
pair                        ``"align"``    guide                           ELBO
==========================  =============  ==============================  =============================
:class:`SoftAttention`      (none)         empty                           ``Trace_ELBO``
:class:`MarginalLikelihood` categorical    empty (enumerated in model)     ``TraceEnum_ELBO``
:class:`HardAttention`      categorical    the prior (enum / sample)       ``TraceEnum`` / ``ReinforceKL``
:class:`VariationalAttention` categorical  q(z | x, y) (enum / sample)     ``TraceEnum`` / ``ReinforceKL``
:class:`RelaxedAttention`   simplex        Dirichlet q(z | x, y)           ``TraceMeanField_ELBO``
==========================  =============  ==============================  =============================
"""

from pyro_attention.models.hard import HardAttention
from pyro_attention.models.marginal import MarginalLikelihood
from pyro_attention.models.relaxed import RelaxedAttention
from pyro_attention.models.soft import SoftAttention
from pyro_attention.models.variational import VariationalAttention

PAIRS = {
    "soft": SoftAttention,
    "marginal": MarginalLikelihood,
    "hard": HardAttention,
    "variational": VariationalAttention,
    "relaxed": RelaxedAttention,
}

__all__ = ["PAIRS", "HardAttention", "MarginalLikelihood", "RelaxedAttention", "SoftAttention", "VariationalAttention"]
