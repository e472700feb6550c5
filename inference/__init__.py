"""Inference utilities that work for every pair: estimators and their ELBOs, training, exact evaluation,
posteriors and prediction."""

from pyro_attention.inference.arviz import diagnostics, format_diagnostics, to_inference_data
from pyro_attention.inference.arviz_generation import load_netcdf, save_netcdf
from pyro_attention.inference.comparison import compare, format_comparison
from pyro_attention.inference.elbo import AlignmentRWS, AnnealedMeanField_ELBO, CategoricalKL_ELBO, ReinforceKL_ELBO
from pyro_attention.inference.estimators import (
    CategoricalKL,
    Enumerate,
    Estimator,
    KLSchedule,
    MaximumLikelihood,
    MeanField,
    Reparameterized,
    ReweightedWakeSleep,
    ScoreFunction,
)
from pyro_attention.inference.evaluate import (
    EstimateError,
    LogLikelihood,
    enumerated_log_joint,
    estimate_text,
    kmax_log_likelihood,
    log_likelihood,
    predict,
    shared_enumeration,
)
from pyro_attention.inference.mcmc import compare_to_guide, nuts_alignment
from pyro_attention.inference.optim import FusedClippedAdam, SubsetOptim
from pyro_attention.inference.posterior import alignment_posterior, entropy, entropy_sums, map_alignment
from pyro_attention.inference.train import FitResult, evaluate_nll, fit

__all__ = [  # by module
    "diagnostics", "format_diagnostics", "to_inference_data",
    "load_netcdf", "save_netcdf",
    "compare", "format_comparison",
    "AlignmentRWS", "AnnealedMeanField_ELBO", "CategoricalKL_ELBO", "ReinforceKL_ELBO",
    "CategoricalKL", "Enumerate", "Estimator", "KLSchedule", "MaximumLikelihood", "MeanField", "Reparameterized",
    "ReweightedWakeSleep", "ScoreFunction",
    "EstimateError", "LogLikelihood", "enumerated_log_joint", "estimate_text", "kmax_log_likelihood", "log_likelihood",
    "predict",
    "shared_enumeration",
    "compare_to_guide", "nuts_alignment",
    "FusedClippedAdam", "SubsetOptim",
    "alignment_posterior", "entropy", "entropy_sums", "map_alignment",
    "FitResult", "evaluate_nll", "fit",
]
