"""pyro-attention: attention as a latent variable, written in Pyro.

Model/guide pairs live in :mod:`pyro_attention.models`, inference utilities in :mod:`pyro_attention.inference`.
"""

__version__ = "0.1.0"
