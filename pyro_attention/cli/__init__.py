"""The ``pyro-attention`` command.

``pyro-attention demo`` trains every pair of the paper on synthetic region-QA scenes (a few minutes on two
CPU cores), prints the comparison table and writes a heatmap of prior / exact posterior / q alignments;
``demo --task clevr`` does the same on real CLEVR scene graphs (``--data-dir``).
``pyro-attention train | evaluate | translate`` train a translation pair (synthetic data by default; Multi30k,
IWSLT14 or any parallel files), score a checkpoint (perplexity, K-max perplexity, prior entropy, BLEU) and
translate a file or stdin (see ``docs/translation.md``).

One module per command (``demo``, ``train``, ``evaluate``, ``translate``, ``align``, ``inspect``, ``experiment``),
each with its ``add_<command>(sub)`` (the sub-parser and its flags) and its handler; ``common`` holds the argparse
types and error handling they share and ``add_config_options`` (a config's flags generated from its fields: name,
type, bounds, help, default), ``main`` the parser and :func:`main`.
"""

from __future__ import annotations

from pyro_attention.cli.main import main, make_parser

__all__ = ["main", "make_parser"]
