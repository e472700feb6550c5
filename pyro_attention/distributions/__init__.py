"""Distributions torch and Pyro lack."""

from pyro_attention.distributions.aligned import AlignedCategorical
from pyro_attention.distributions.dirichlet import MaskedDirichlet

__all__ = ["AlignedCategorical", "MaskedDirichlet"]
