"""``pyro-attention train``: the flags of :class:`~pyro_attention.tasks.translation.TranslationConfig`, a config
file under them, and the run."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

import torch

from pyro_attention.cli.common import _fail, _float_in, _int_at_least, _learning_rate, _positive_float

#: a flag's default: only flags given on the command line override the config file (or a resumed run)
S = argparse.SUPPRESS


def _add_train_options(p: argparse.ArgumentParser) -> None:
    """The flags of ``train``: ``--config``, then one group per part of the config (data, model, optimisation)."""
    p.add_argument("--config", help="JSON or TOML file of options (keys as the flags, '-' or '_'); flags win")
    _add_data_options(p)
    _add_model_options(p)
    _add_optimisation_options(p)
    p.add_argument("--resume", action="store_true", help="continue from last.pt in --out (restores everything)")
    p.add_argument("--overwrite", action="store_true", help="start afresh even if --out holds a checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_data_options(p: argparse.ArgumentParser) -> None:
    from pyro_attention.tasks.translation import DATA_KINDS

    pos, nonneg = _int_at_least(1), _int_at_least(0)
    g = p.add_argument_group("data")
    g.add_argument("--data", choices=DATA_KINDS, default=S, help="corpus (default synthetic: no files needed)")
    g.add_argument(
        "--data-dir", default=S, help="folder holding multi30k/ and iwslt14-de-en/ (default: $PYRO_ATTENTION_DATA)"
    )
    g.add_argument("--src", default=S, help="source language (Multi30k: de en fr cs; IWSLT14: de en; default de)")
    g.add_argument("--tgt", default=S, help="target language (default en)")
    g.add_argument(
        "--train-split",
        default=S,
        help="Multi30k split to train on (default train); IWSLT14 has "
        "no train split: training on 'valid' happens only with --train-split valid",
    )
    g.add_argument("--val-split", default=S, help="Multi30k validation split (default val)")
    g.add_argument("--test-split", default=S, help="Multi30k test split (default test_2016_flickr)")
    g.add_argument("--bpe", action="store_true", default=S, help="IWSLT14: the 14k joint BPE files")
    for side in ("train", "val", "test"):
        for lang in ("src", "tgt"):
            g.add_argument(f"--{side}-{lang}", default=S, help=f"--data parallel: {side} {lang} file (plain/.gz)")
    g.add_argument(
        "--train-size", type=pos, default=S, help="first N training pairs (synthetic: generate N; default 2000 / all)"
    )
    g.add_argument(
        "--val-size",
        type=pos,
        default=S,
        help="first N validation pairs (synthetic default 200; "
        "IWSLT14: pairs held out from the end of valid, default 500)",
    )
    g.add_argument("--test-size", type=pos, default=S, help="synthetic test pairs (default 200)")
    g.add_argument("--max-len", type=pos, default=S, help="drop training pairs with a longer side (default 50)")
    g.add_argument("--min-freq", type=pos, default=S, help="vocabulary: minimum count in training (default 1)")
    g.add_argument(
        "--max-vocab", type=_int_at_least(5), default=S, help="vocabulary: at most N entries incl. 4 specials"
    )
    g.add_argument("--data-seed", type=nonneg, default=S, help="synthetic data seed (splits: +0/+1/+2)")
    g.add_argument("--synthetic-vocab", type=_int_at_least(4), default=S, help="synthetic source words (24)")
    g.add_argument("--synthetic-min-len", type=pos, default=S, help="synthetic shortest source (3)")
    g.add_argument("--synthetic-max-len", type=pos, default=S, help="synthetic longest source (8)")


def _add_model_options(p: argparse.ArgumentParser) -> None:
    from pyro_attention.networks.attention import ATTENTION_SCORES
    from pyro_attention.networks.output import OUTPUT_LAYERS
    from pyro_attention.networks.seq2seq import BRIDGES, INPUT_FEEDS
    from pyro_attention.registry import ALL_PAIRS, PAIR_ESTIMATORS

    pos, nonneg = _int_at_least(1), _int_at_least(0)
    g = p.add_argument_group("model")
    g.add_argument("--model", choices=tuple(ALL_PAIRS), default=S, help="the pair (default soft)")
    estimators = tuple(dict.fromkeys(e for v in PAIR_ESTIMATORS.values() for e in v))
    g.add_argument(
        "--estimator",
        choices=estimators,
        default=S,
        help="; ".join(f"{k}: {'/'.join(v)}" for k, v in PAIR_ESTIMATORS.items()) + " (the first is the default)",
    )
    g.add_argument(
        "--option",
        dest="options",
        action="append",
        metavar="KEY=VALUE",
        default=S,
        help="an option of the pair's constructor, e.g. --option kl_scale=0.01 (repeatable)",
    )
    g.add_argument("--embedding", type=pos, default=S, help="embedding size (64)")
    g.add_argument("--encoder", type=pos, default=S, help="BiLSTM size per direction (64)")
    g.add_argument("--decoder", type=pos, default=S, help="decoder LSTM size (128)")
    g.add_argument("--attention", type=pos, default=S, help="MLP attention size (64; --attention-type mlp only)")
    g.add_argument(
        "--attention-type",
        choices=tuple(ATTENTION_SCORES),
        default=S,
        help="the prior's score: mlp (Bahdanau, the paper's; default), general or dot (Luong; dot needs "
        "--decoder = 2 x --encoder)",
    )
    g.add_argument(
        "--output",
        choices=tuple(OUTPUT_LAYERS),
        default=S,
        help="output layer: tanh (U tanh(W[h; c]), the paper's; default) or product (product of experts "
        "exp(u_t + v_s): exact enumeration at about the cost of a soft step)",
    )
    g.add_argument(
        "--input-feed",
        choices=INPUT_FEEDS,
        default=S,
        help="what the decoder is fed with the previous word: context (the prior's soft context; default) or "
        "attentional (Luong's attentional state tanh(W[h; c]), as OpenNMT-py)",
    )
    g.add_argument(
        "--bridge",
        choices=BRIDGES,
        default=S,
        help="decoder initial state: mean (tanh(W mean_s x_s); default) or final (the encoder's final states, "
        "as OpenNMT-py; needs --decoder = 2 x --encoder)",
    )
    g.add_argument(
        "--init",
        type=_float_in(0, 1),
        default=S,
        help="0: torch's default initialisation (default); e.g. 0.1: every parameter uniform in +-0.1 (OpenNMT-py)",
    )
    g.add_argument("--layers", type=pos, default=S, help="LSTM layers (1)")
    g.add_argument("--dropout", type=_float_in(0, 1, high_open=True), default=S, help="dropout (0)")
    g.add_argument(
        "--chunk-size",
        type=nonneg,
        default=S,
        help="source positions per chunk of the enumerated output layer (8; 0: all at once)",
    )


def _add_optimisation_options(p: argparse.ArgumentParser) -> None:
    pos, nonneg = _int_at_least(1), _int_at_least(0)
    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=pos, default=S, help="epochs in all, counting resumed ones (10)")
    g.add_argument("--batch-size", type=pos, default=S, help="sentences per batch (32)")
    g.add_argument("--lr", type=_learning_rate, default=S, help="Adam learning rate, in (0, 1] (3e-3)")
    g.add_argument("--clip-norm", type=_positive_float, default=S, help="per-parameter gradient norm clip (5)")
    g.add_argument(
        "--lr-decay",
        type=_float_in(0, 1, low_open=True),
        default=S,
        help="lr factor when validation PPL does not improve (0.5)",
    )
    g.add_argument("--patience", type=nonneg, default=S, help="stop after N epochs without improvement (3; 0: never)")
    g.add_argument("--warmup-steps", type=nonneg, default=S, help="relaxed: steps with the prior as guide (0)")
    g.add_argument("--num-samples", type=pos, default=S, help="importance samples of the relaxed bound (20)")
    g.add_argument("--seed", type=nonneg, default=S, help="seed of weights, sampling and batch order (0)")
    g.add_argument("--threads", type=nonneg, default=S, help="torch threads (1; 0: torch's choice)")
    g.add_argument("--device", default=S, help="cpu (default), cuda, cuda:N or mps: where the network trains")
    g.add_argument("--out", default=S, help="output folder (default runs/<model>-<estimator>)")
    g.add_argument(
        "--checkpoint-every",
        type=nonneg,
        default=S,
        help="also write last.pt every N steps inside an epoch (0: at epoch ends only)",
    )
    g.add_argument(
        "--tensorboard",
        action=argparse.BooleanOptionalAction,
        default=S,
        help="log to <out>/tensorboard (default: when the tensorboard package is installed)",
    )


def _config_error(
    parser: argparse.ArgumentParser, error: Exception, from_file: dict | None = None, path: str | None = None
) -> None:
    """``parser.error`` naming the flag when the message starts with a config key, or the config file ``path``
    when the key's value came from the file (``from_file``) and not from a flag."""
    from pyro_attention.tasks.translation import TranslationConfig
    from pyro_attention.tasks.translation.config import _message_key

    message = str(error)
    if from_file and _message_key(message) in from_file:
        parser.error(f"{path}: {message}")
    for key in sorted(TranslationConfig.keys(), key=len, reverse=True):
        if message.startswith(key + ":"):
            message = f"argument --{key.replace('_', '-')}: {message[len(key) + 1 :].lstrip()}"
            break
        if message.startswith(key + " "):
            message = f"argument --{key.replace('_', '-')}: {message}"
            break
    parser.error(message)


def _translation_config(args: argparse.Namespace, parser: argparse.ArgumentParser):  # noqa: ANN202
    from pyro_attention.registry import parse_options
    from pyro_attention.tasks.translation import TranslationConfig, read_config_file
    from pyro_attention.tasks.translation.checkpoints import _read_checkpoint

    keys = set(TranslationConfig.keys())
    from_file: dict = {}
    try:
        from_file = read_config_file(args.config) if args.config else {}
        flags = {k: v for k, v in vars(args).items() if k in keys}
        from_file = {k: v for k, v in from_file.items() if k not in flags}  # a flag wins over the file
        given = {**from_file, **flags}
        if isinstance(given.get("options"), list):  # --option KEY=VALUE flags
            try:
                given["options"] = parse_options(given["options"])
            except ValueError as e:
                raise ValueError(f"options: {e}") from None
        config = TranslationConfig.from_dict(given)
        last = config.out_dir / "last.pt"
        if args.resume and last.is_file():  # the resumed run's options, with what was given on top
            saved = TranslationConfig.from_dict(_read_checkpoint(last)["config"])
            config = TranslationConfig.from_dict(given, base=saved)
        return config
    except (ValueError, FileNotFoundError) as e:
        _config_error(parser, e, from_file, args.config)


def _train(args: argparse.Namespace) -> int:
    from pyro_attention.tasks.translation import TrainingInterrupted, train

    parser = args.parser
    config = _translation_config(args, parser)
    if config.threads:
        torch.set_num_threads(config.threads)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only process 0 speaks
        print(
            f"pyro-attention train: {config.model}{' (' + config.estimator + ')' if config.estimator else ''} on "
            f"{config.data} data, epochs {config.epochs}, batch {config.batch_size}, lr {config.lr:g}, seed "
            f"{config.seed}, {torch.get_num_threads()} thread(s); output {config.out_dir}"
        )
    try:
        train(config, progress=not args.quiet, resume=args.resume, overwrite=args.overwrite)
    except (ValueError, OSError, FloatingPointError) as e:
        _fail(parser, e)
    except TrainingInterrupted as stop:
        argv = list(getattr(args, "argv", None) or ["train"])
        again = shlex.join(["pyro-attention", *argv, *([] if "--resume" in argv else ["--resume"])])
        print(f"pyro-attention train: {stop.signal_name}: stopped after step {stop.step}; {stop.checkpoint} written. "
              f"Continue with:\n  {again}", file=sys.stderr)
        return 130
    return 0


def add_train(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    """``pyro-attention train``."""
    tr = sub.add_parser(
        "train",
        help="train a translation pair (synthetic data by default)",
        description="Train a model/guide pair on translation; see docs/translation.md.",
    )
    _add_train_options(tr)
    tr.set_defaults(func=_train, parser=tr)
