"""The tasks layer: what a user runs (translation, region QA, CLEVR, word alignment, inspection), built on
``inference/`` (estimators, the training loop, evaluation), the pairs and the networks.  See
``docs/architecture.md``, "Layers"."""
