"""Distributions torch and Pyro lack."""

from pyro_attention.distributions import weibull_gamma  # noqa: F401  (registers KL(Weibull || Gamma), KL(LogNormal || Gamma))
from pyro_attention.distributions.aligned import AlignedCategorical, OutputCategorical
from pyro_attention.distributions.dirichlet import MaskedDirichlet
from pyro_attention.distributions.kl import kl_categorical_categorical

__all__ = ["AlignedCategorical", "MaskedDirichlet", "OutputCategorical", "kl_categorical_categorical"]
