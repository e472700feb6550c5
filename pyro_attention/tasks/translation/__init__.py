"""Translation experiments end to end: configuration, corpora, training with checkpoints, evaluation, translation.

This package is the glue behind ``pyro-attention train | evaluate | translate`` and is usable from Python:

* :class:`TranslationConfig` -- every option, CPU-small defaults, loadable from a JSON or TOML file
  (:meth:`TranslationConfig.from_file`; an unknown key is a ``ValueError`` listing the allowed ones);
* :func:`load_corpora` -- train / val (/ test) token lists for the synthetic task (the default, no files needed),
  Multi30k, IWSLT14 (which has only ``valid`` and ``test``: training on ``valid`` happens only when asked with
  ``train_split="valid"``, and then the *tail* of ``valid`` is held out for validation) or any parallel files;
* :func:`build_vocabs`, :func:`build_pair` -- vocabularies from the training side, a
  :class:`~pyro_attention.networks.Seq2Seq` and the model/guide pair;
* :func:`train` -- SVI on ``pair.elbo()`` with Pyro's :class:`~pyro.optim.ClippedAdam` update, taken in one fused
  pass by :class:`~pyro_attention.inference.optim.FusedClippedAdam` (per-parameter gradient
  clipping), length-bucketed batches, validation perplexity every epoch, learning-rate halving when it does
  not improve, early stopping, atomic checkpoints (``last.pt`` every epoch, ``best.pt`` at the best validation)
  and exact resumption (``resume=True``) -- the package's one training loop,
  :class:`~pyro_attention.inference.loop.Trainer`, with this package's callbacks (``callbacks.py``: validation, history,
  checkpoints, TensorBoard, the epoch line, Ctrl-C / SIGTERM) and the generic ones (``SVIStep``, ``PlateauDecay``,
  ``EarlyStopping``, ``CsvLogger``, ``ProgressBar``);
* :func:`evaluate` -- an :class:`Evaluation`: exact perplexity (an importance-weighted estimate, with its Monte
  Carlo error and PSIS k-hat, for the continuous pairs), K-max perplexity, alignment entropies per token and
  sacreBLEU of the output of a :class:`BeamSearch`;
* :func:`translate_lines` -- detokenised translations of raw lines.

**Learning-rate schedule.**  Pyro's optimiser keeps one torch optimiser per parameter; when the validation
perplexity of an epoch is not lower than the best so far, the ``lr`` of every one of their parameter groups is
multiplied by ``lr_decay`` (0.5: halved), and so is the ``lr`` the wrapper gives optimisers it creates later.
The current ``lr`` is part of the optimiser state, so a resumed run continues with it.

**Exact resumption.**  Checkpoints are written at the end of an epoch, after validation.  They hold the network,
the optimiser state (``optim.get_state()``), the torch / Python / NumPy RNG states at that moment, and the
counters; the order of the batches in epoch ``e`` is drawn from a generator seeded with ``(seed, e)`` alone.
A run resumed from ``last.pt`` therefore replays exactly what the uninterrupted run would have done (same
thread count assumed: floating-point reductions may differ across thread counts).

**Modules.**  ``config`` (:class:`TranslationConfig`, its checks, the constants), ``corpora`` (splits, vocabularies,
batches, :func:`build_pair`), ``checkpoints`` (atomic writes, reading, compatibility), ``callbacks`` (validation and
the translation callbacks of the loop), ``training`` (:func:`train`), ``evaluation`` (:func:`evaluate`),
``translating`` (:class:`BeamSearch`, :func:`translate_lines`), ``decoding`` (beam search and greedy decoding over
the network's :class:`~pyro_attention.tasks.translation.decoding.IncrementalDecoder` interface).
"""

from __future__ import annotations

from pyro_attention.tasks.translation.callbacks import (
    TrainingInterrupted,
    TrainResult,
    Validation,
    validate,
)
from pyro_attention.tasks.translation.checkpoints import (
    Checkpoint,
    check_compatible,
    load_checkpoint,
    save_checkpoint,
    warm_start,
)
from pyro_attention.tasks.translation.config import (
    CHECKPOINT_FORMAT,
    STRUCTURAL_KEYS,
    Log,
    TranslationConfig,
    read_config_file,
    resolve_device,
)
from pyro_attention.tasks.translation.corpora import (
    Corpora,
    Split,
    build_pair,
    build_vocabs,
    load_corpora,
    load_split,
    make_batches,
)
from pyro_attention.tasks.translation.evaluation import (
    Evaluation,
    evaluate,
)
from pyro_attention.tasks.translation.options import DATA_KINDS
from pyro_attention.tasks.translation.training import (
    train,
)
from pyro_attention.tasks.translation.translating import (
    BeamSearch,
    translate_lines,
)

__all__ = [
    "BeamSearch",
    "CHECKPOINT_FORMAT",
    "DATA_KINDS",
    "STRUCTURAL_KEYS",
    "Checkpoint",
    "Corpora",
    "Evaluation",
    "Log",
    "Split",
    "TrainResult",
    "TrainingInterrupted",
    "TranslationConfig",
    "Validation",
    "build_pair",
    "build_vocabs",
    "check_compatible",
    "evaluate",
    "load_checkpoint",
    "load_corpora",
    "load_split",
    "make_batches",
    "read_config_file",
    "resolve_device",
    "save_checkpoint",
    "train",
    "translate_lines",
    "validate",
    "warm_start",
]
