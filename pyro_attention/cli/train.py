"""``pyro-attention train``: the flags of :class:`~pyro_attention.tasks.translation.TranslationConfig`, a config
file under them, and the run."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys

import torch

from pyro_attention.cli.common import add_command, add_config_options, exit_with_error, option_error


def _add_train_options(p: argparse.ArgumentParser) -> None:
    """The flags of ``train``: ``--config``, then one group per part of the config (data, model, optimisation),
    generated from the fields of :class:`~pyro_attention.tasks.translation.TranslationConfig`; a flag's default is
    ``SUPPRESS``, so only flags given on the command line override the config file (or a resumed run)."""
    from pyro_attention.tasks.translation.config import TranslationConfig
    from pyro_attention.tasks.translation.options import CorpusOptions, ModelOptions

    p.add_argument("--config", help="JSON or TOML file of options (keys as the flags, '-' or '_'); flags win")
    data, model = ([f.name for f in dataclasses.fields(part)] for part in (CorpusOptions, ModelOptions))
    optimisation = [k for k in TranslationConfig.keys() if k not in data + model]
    for group, names in (("data", data), ("model", model), ("optimisation", optimisation)):
        add_config_options(p.add_argument_group(group), TranslationConfig, names, given_only=True)
    p.add_argument("--resume", action="store_true", help="continue from last.pt in --out (restores everything)")
    p.add_argument("--overwrite", action="store_true", help="start afresh even if --out holds a checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _config_error(
    parser: argparse.ArgumentParser, error: Exception, from_file: dict | None = None, path: str | None = None
) -> None:
    """``parser.error`` naming the flag when the message starts with a config key, or the config file ``path``
    when the key's value came from the file (``from_file``) and not from a flag."""
    from pyro_attention.tasks.translation import TranslationConfig
    from pyro_attention.tasks.translation.config import message_key

    message = str(error)
    if from_file and message_key(message) in from_file:
        parser.error(f"{path}: {message}")
    option_error(parser, message, TranslationConfig.keys())


def _translation_config(args: argparse.Namespace, parser: argparse.ArgumentParser):  # noqa: ANN202
    from pyro_attention.registry import parse_options
    from pyro_attention.tasks.translation import TranslationConfig, read_config_file
    from pyro_attention.tasks.translation.checkpoints import read_checkpoint

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
            saved = TranslationConfig.from_dict(read_checkpoint(last)["config"])
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
        exit_with_error(parser, e)
    except TrainingInterrupted as stop:
        argv = list(getattr(args, "argv", None) or ["train"])
        again = shlex.join(["pyro-attention", *argv, *([] if "--resume" in argv else ["--resume"])])
        print(f"pyro-attention train: {stop.signal_name}: stopped after step {stop.step}; {stop.checkpoint} written. "
              f"Continue with:\n  {again}", file=sys.stderr)
        return 130
    return 0


def add_train(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    """``pyro-attention train``."""
    tr = add_command(sub, "train", _train, "train a translation pair (synthetic data by default)",
                     "Train a model/guide pair on translation; see docs/translation.md.")
    _add_train_options(tr)
