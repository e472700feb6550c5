"""The ``pyro-attention`` command.

``pyro-attention demo`` trains every pair of the paper on synthetic region-QA scenes (a few minutes on two
CPU cores), prints the comparison table and writes a heatmap of prior / exact posterior / q alignments;
``demo --task clevr`` does the same on real CLEVR scene graphs (``--data-dir``).
``pyro-attention train | evaluate | translate`` train a translation pair (synthetic data by default; Multi30k,
IWSLT14 or any parallel files), score a checkpoint (perplexity, K-max perplexity, prior entropy, BLEU) and
translate a file or stdin (see ``docs/translation.md``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch


def _demo(args: argparse.Namespace) -> int:
    from pyro_attention.outputs import writing

    with writing(args.out):  # the figure's folder, before minutes of training: a read-only --out fails now
        Path(args.out).mkdir(parents=True, exist_ok=True)
        if not os.access(args.out, os.W_OK):
            raise PermissionError(13, "Permission denied")
    if args.task == "clevr":
        return _demo_clevr(args)
    from pyro_attention.experiment import RegionQAConfig, format_table, run_region_qa
    from pyro_attention.inference import alignment_posterior
    from pyro_attention.plots import alignment_heatmaps

    if args.threads:
        torch.set_num_threads(args.threads)
    config = RegionQAConfig(
        train_size=args.train_size,
        val_size=args.val_size,
        num_epochs=args.epochs,
        hidden_size=args.hidden,
        seed=args.seed,
    )
    if args.neighbours:
        config.rows = _all_rows()
    print(
        f"pyro-attention demo: {config.train_size} training / {config.val_size} held-out synthetic scenes, "
        f"{config.num_epochs} epochs, hidden {config.hidden_size}, seed {config.seed}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    start = time.perf_counter()
    rows, val = run_region_qa(config, progress=not args.quiet)
    print()
    print("Held-out results (NLL per answer in nats; '~' = importance-weighted estimate, not exact):")
    print(format_table(rows))
    variational = next((r for r in rows if r.name.startswith("variational")), rows[-1])
    post = alignment_posterior(variational.pair, val.data)
    ambiguous = [i for i in range(len(val)) if len(set(val.region_names[i])) and _ambiguous(val, i)]
    examples = (ambiguous[:2] + [i for i in range(len(val)) if i not in ambiguous[:2]])[: args.num_plots]
    titles = [f"#{i}: {val.question_text(i)} -> {val.answers[int(val.data.answer[i])]}" for i in examples]
    path = alignment_heatmaps(
        post,
        examples,
        val.region_names,
        titles,
        Path(args.out) / "alignments.png",
        gold=val.data.gold,
        suptitle=f"{variational.name}, {type(variational.pair.network).__name__} network, synthetic region QA, "
        "held-out split",
        soft=variational.pair.deterministic,
    )
    print(
        f"\nWrote the prior / posterior / q heatmaps of {variational.name} for {len(examples)} held-out "
        f"examples to {path.resolve()}"
    )
    print(f"Total time {time.perf_counter() - start:.1f} s")
    return 0


def _demo_clevr(args: argparse.Namespace) -> int:
    """``demo --task clevr``: every pair on real CLEVR scenes (original and generated questions)."""
    from pyro_attention.clevr import ClevrConfig, format_clevr, run_clevr
    from pyro_attention.inference import alignment_posterior
    from pyro_attention.plots import alignment_heatmaps

    if args.threads:
        torch.set_num_threads(args.threads)
    config = ClevrConfig(
        data_dir=args.data_dir,
        generated_train=args.train_size,
        generated_val=args.val_size,
        num_epochs=args.epochs,
        hidden_size=args.hidden,
        seed=args.seed,
    )
    if args.neighbours:
        config.rows = _all_rows()
    print(
        f"pyro-attention demo --task clevr: original CLEVR questions + {config.generated_train} generated training / "
        f"{config.generated_val} generated validation questions, {config.num_epochs} epochs, hidden "
        f"{config.hidden_size}, seed {config.seed}, {torch.get_num_threads()} thread(s)"
    )
    start = time.perf_counter()
    try:
        result = run_clevr(config, progress=not args.quiet)
    except (FileNotFoundError, ValueError) as error:
        print(f"pyro-attention demo --task clevr: {error}", file=sys.stderr)
        return 2
    print()
    print(format_clevr(result))
    val = result.splits.val_original
    variational = next((r for r in result.original if r.name.startswith("variational")), result.original[-1])
    examples = [i for i in range(len(val)) if int(val.data.gold[i]) >= 0][: args.num_plots]
    if examples:
        post = alignment_posterior(variational.pair, val.data)
        titles = [f"#{i}: {val.questions[i].text} -> {val.answers[int(val.data.answer[i])]}" for i in examples]
        path = alignment_heatmaps(
            post,
            examples,
            val.region_names,
            titles,
            Path(args.out) / "clevr_alignments.png",
            gold=val.data.gold,
            suptitle=f"{variational.name}, {type(variational.pair.network).__name__} network, CLEVR, original "
            "validation split",
            soft=variational.pair.deterministic,
        )
        print(f"\nWrote the prior / posterior / q heatmaps of {variational.name} to {path.resolve()}")
    print(f"Total time {time.perf_counter() - start:.1f} s")
    return 0


def _all_rows() -> list:
    """``demo --neighbours``: the paper's rows and the neighbours'."""
    from pyro_attention.experiment import ALL_ROWS

    return list(ALL_ROWS)


def _ambiguous(val, i: int) -> bool:  # noqa: ANN001
    """Two regions of the asked kind: only the answer can tell which one the question means."""
    kind = val.vocab[int(val.data.question[i, 1])]
    return sum(name.endswith(" " + kind) for name in val.region_names[i]) > 1


# ----------------------------------------------------------------------------------------------------------------
# Translation: train, evaluate, translate


def _int_at_least(low: int):  # noqa: ANN202 - an argparse type
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value

    return parse


def _float_in(low: float, high: float, low_open: bool = False, high_open: bool = False):  # noqa: ANN202
    lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
    where = f"in {lo}{low:g}, {high:g}{hi}" if high != float("inf") else f"{'>' if low_open else '>='} {low:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number {where}, got {text!r}") from None
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
        if not ok:
            raise argparse.ArgumentTypeError(f"must be a number {where}, got {text!r}")
        return value

    return parse


def _positive_float(text: str) -> float:
    return _float_in(0.0, float("inf"), low_open=True)(text)


def _learning_rate(text: str) -> float:
    """``--lr``: a number in ``(0, MAX_LR]`` (as ``TranslationConfig`` and ``fit`` check it)."""
    from pyro_attention.inference.optim import MAX_LR

    return _float_in(0.0, MAX_LR, low_open=True)(text)


def _add_train_options(p: argparse.ArgumentParser) -> None:
    from pyro_attention.networks.attention import ATTENTION_SCORES
    from pyro_attention.networks.output import OUTPUT_LAYERS
    from pyro_attention.networks.seq2seq import BRIDGES, INPUT_FEEDS
    from pyro_attention.registry import ALL_PAIRS, PAIR_ESTIMATORS
    from pyro_attention.tasks.translation import DATA_KINDS

    S = argparse.SUPPRESS  # only flags given on the command line override the config file (or a resumed run)
    pos, nonneg = _int_at_least(1), _int_at_least(0)
    p.add_argument("--config", help="JSON or TOML file of options (keys as the flags, '-' or '_'); flags win")
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
    p.add_argument("--resume", action="store_true", help="continue from last.pt in --out (restores everything)")
    p.add_argument("--overwrite", action="store_true", help="start afresh even if --out holds a checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


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


def _fail(parser: argparse.ArgumentParser, error: Exception) -> None:
    """A run-time error (data, checkpoint): one line on stderr and exit status 1, without the usage text.

    A decoding rule that the checkpoint's pair does not allow is an option error (``parser.error``, status 2).
    """
    if str(error).startswith("rule "):
        parser.error(f"argument --rule: {error}")
    print(f"{parser.prog}: error: {_os_error_text(error)}", file=sys.stderr)
    raise SystemExit(1)


def _os_error_text(error: BaseException, path: str | os.PathLike | None = None) -> str:
    """An ``OSError`` straight from the system (``[Errno 13] Permission denied: 'x'``) as ``x: Permission denied
    (errno 13)``, or ``cannot write PATH: ...`` when ``path`` is the file being written; any other error as it is
    (this package's messages name their file already)."""
    from pyro_attention.outputs import WriteError, write_error

    if not isinstance(error, OSError) or isinstance(error, WriteError) or error.errno is None:
        return str(error)
    if path is not None:
        return str(write_error(path, error))
    if error.filename:
        return f"{error.filename}: {error.strerror} (errno {error.errno})"
    return str(error)


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


def _print_scores(res: dict) -> None:
    print(
        f"evaluate {res['checkpoint']} ({res['model']}{', ' + res['estimator'] if res['estimator'] else ''}) on "
        f"{res['data']}: {res['sentences']} sentences, {res['tokens']} target tokens (with </s>)"
    )
    if res["ppl_exact"]:
        print(f"perplexity           {res['ppl']:.4f}  (exact: {res['ppl_method']}; NLL/token {res['nll']:.4f})")
    else:
        print(f"perplexity bound     {res['ppl']:.4f}  ({res['ppl_method']}; importance-weighted bound, not exact)")
    if res["kmax_ppl"] is not None:
        print(f"K-max perplexity     {res['kmax_ppl']:.4f}  ({res['kmax_method']})")
    else:
        print("K-max perplexity     -  (needs a categorical alignment)")
    print(f"prior entropy        {res['prior_entropy']:.4f}  nats per target token")
    if res["bleu"] is not None:
        print(
            f"BLEU                 {res['bleu']:.2f}  (beam {res['beam']}, rule {res['rule']}, length penalty "
            f"{res['length_penalty']:g})"
        )
        print(f"sacreBLEU signature  {res['bleu_signature']}")
        print(f"sacreBLEU            {res['bleu_text']}")
    if res.get("degenerate"):
        print(f"pyro-attention evaluate: warning: {res['degenerate']}", file=sys.stderr)


def _evaluate(args: argparse.Namespace) -> int:
    import json

    from pyro_attention.outputs import write_text
    from pyro_attention.tasks.translation import evaluate

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        res = evaluate(
            args.checkpoint,
            args.split,
            src_file=args.src_file,
            tgt_file=args.tgt_file,
            ref_file=args.ref_file,
            data_dir=args.data_dir,
            size=args.size,
            kmax=args.kmax,
            beam=args.beam,
            rule=args.rule,
            length_penalty=args.length_penalty,
            max_decode_len=args.max_decode_len,
            batch_size=args.batch_size,
            num_samples=args.num_samples,
            bleu=not args.no_bleu,
            lowercase=args.lowercase_bleu,
            progress=not args.quiet,
            device=args.device,
        )
    except (ValueError, OSError) as e:
        _fail(args.parser, e)
    _print_scores(res)
    try:
        if args.hypotheses and res["hypotheses"] is not None:
            write_text(args.hypotheses, "".join(h + "\n" for h in res["hypotheses"]))
            print(f"wrote {len(res['hypotheses'])} translations to {args.hypotheses}")
        if args.json:
            scores = {k: v for k, v in res.items() if k != "hypotheses"}
            write_text(args.json, json.dumps(scores, indent=2) + "\n")
    except OSError as e:
        _fail(args.parser, e)
    return 0


def _translate(args: argparse.Namespace) -> int:
    from pyro_attention.data.text import read_lines
    from pyro_attention.tasks.translation import translate_lines

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        lines = sys.stdin.read().splitlines() if args.input == "-" else read_lines(args.input)
        out = translate_lines(
            args.checkpoint,
            lines,
            beam=args.beam,
            rule=args.rule,
            k=args.kmax,
            length_penalty=args.length_penalty,
            max_decode_len=args.max_decode_len,
            tokenize=args.tokenize,
            lowercase=args.lowercase,
            progress=args.progress,
            device=args.device,
        )
    except (ValueError, OSError) as e:
        _fail(args.parser, e)
    for line in out:
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return 0


def _add_decoding_options(p: argparse.ArgumentParser) -> None:
    from pyro_attention.inference.decode import DECODE_RULES

    p.add_argument("--beam", type=_int_at_least(1), default=5, help="beam size (1: greedy; default 5)")
    p.add_argument(
        "--rule",
        choices=DECODE_RULES,
        default=None,
        help="prediction rule (default marginal for categorical pairs, soft otherwise)",
    )
    p.add_argument(
        "--length-penalty", type=_float_in(0, float("inf")), default=0.0, help="GNMT length penalty alpha (0: none)"
    )
    p.add_argument(
        "--max-decode-len",
        type=_int_at_least(1),
        default=None,
        help="longest translation (default 2 x source length + 10)",
    )
    p.add_argument("--threads", type=_int_at_least(0), default=1, help="torch threads (1; 0: torch's choice)")
    p.add_argument("--device", default=None, help="cpu (default), cuda, cuda:N or mps: where the model runs")


def _add_translation_commands(sub) -> None:  # noqa: ANN001
    tr = sub.add_parser(
        "train",
        help="train a translation pair (synthetic data by default)",
        description="Train a model/guide pair on translation; see docs/translation.md.",
    )
    _add_train_options(tr)
    tr.set_defaults(func=_train, parser=tr)

    ev = sub.add_parser(
        "evaluate",
        help="perplexity, K-max perplexity, prior entropy and BLEU of a checkpoint",
        description="Score a checkpoint on a split of its corpus or on given files.",
    )
    ev.add_argument("checkpoint", help="a .pt checkpoint or a run folder (its best.pt, else last.pt)")
    ev.add_argument("--split", choices=("train", "val", "test"), default="test", help="split (default test)")
    ev.add_argument("--src-file", help="score these source sentences instead of a split (with --tgt-file)")
    ev.add_argument("--tgt-file", help="their tokenised targets")
    ev.add_argument("--ref-file", help="raw references for BLEU, line-aligned (default: detokenised targets)")
    ev.add_argument("--data-dir", help="where the corpus lives now (default: as in training)")
    ev.add_argument("--size", type=_int_at_least(1), help="first N pairs only (synthetic: generate N)")
    ev.add_argument(
        "--kmax",
        type=_int_at_least(0),
        default=5,
        help="K of the K-max perplexity and of --rule kmax (default 5; 0: skip K-max)",
    )
    ev.add_argument("--batch-size", type=_int_at_least(1), default=64, help="sentences per scoring batch")
    ev.add_argument(
        "--num-samples", type=_int_at_least(1), help="importance samples (relaxed; default: the training config's)"
    )
    ev.add_argument("--no-bleu", action="store_true", help="skip decoding and BLEU")
    ev.add_argument(
        "--lowercase-bleu",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="case-insensitive BLEU (default: when the corpus is lower-cased)",
    )
    ev.add_argument("--hypotheses", help="write the detokenised translations to this file")
    ev.add_argument("--json", help="write the scores to this JSON file")
    ev.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_decoding_options(ev)
    ev.set_defaults(func=_evaluate, parser=ev)

    tl = sub.add_parser(
        "translate",
        help="translate a file or stdin to stdout",
        description="Translate one sentence per line; detokenised output on stdout.",
    )
    tl.add_argument("checkpoint", help="a .pt checkpoint or a run folder (its best.pt, else last.pt)")
    tl.add_argument("input", nargs="?", default="-", help="input file (plain or .gz); '-' or none: stdin")
    tl.add_argument("--kmax", type=_int_at_least(1), default=5, help="K of --rule kmax (5)")
    tl.add_argument(
        "--tokenize",
        choices=("none", "moses"),
        default="none",
        help="none: input is tokenised like the training data; moses: tokenise raw text (sacremoses)",
    )
    tl.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="lower-case the input (default: when the training corpus is lower-cased)",
    )
    tl.add_argument("--progress", action="store_true", help="a progress bar on stderr")
    _add_decoding_options(tl)
    tl.set_defaults(func=_translate, parser=tl)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyro-attention", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train every pair on synthetic region QA and print the comparison")
    demo.add_argument(
        "--task",
        choices=["synthetic", "clevr"],
        default="synthetic",
        help="synthetic scenes, or real CLEVR scene graphs (needs --data-dir or $PYRO_ATTENTION_DATA)",
    )
    demo.add_argument("--data-dir", default=None, help="clevr: folder holding clevr-scenes/ (default: see README)")
    demo.add_argument(
        "--train-size", type=_int_at_least(1), default=2000, help="training scenes (clevr: generated questions)"
    )
    demo.add_argument(
        "--val-size", type=_int_at_least(1), default=500, help="held-out scenes (clevr: generated questions)"
    )
    demo.add_argument("--epochs", type=_int_at_least(1), default=12, help="training epochs of every pair")
    demo.add_argument("--hidden", type=_int_at_least(1), default=64, help="hidden size of the region-QA network")
    demo.add_argument("--seed", type=_int_at_least(0), default=0, help="seed of data, weights and sampling")
    demo.add_argument(
        "--threads", type=_int_at_least(0), default=1, help="torch threads (1 avoids oversubscription; 0: torch's)"
    )
    demo.add_argument("--num-plots", type=_int_at_least(0), default=4, help="held-out examples in the heatmap")
    demo.add_argument("--out", default="pyro-attention-demo", help="folder for the figure")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.add_argument(
        "--neighbours", action="store_true", help="also the neighbours (structured, Gaussian, BAM, Gumbel, RWS)"
    )
    demo.set_defaults(func=_demo)
    _add_translation_commands(sub)
    al = sub.add_parser("align", help="AER of prior / exact posterior / q / soft attention against gold alignments")
    al.add_argument("--corpus", default="enfr", choices=["enfr", "csen"],
                    help="gold set: enfr (English-French Hansards, NAACL 2003) or csen (Czech-English)")
    al.add_argument("--data-dir", default=None, help="data folder (default: $PYRO_ATTENTION_DATA)")
    al.add_argument("--extra-size", type=_int_at_least(0), default=5000, help="extra Multi30k training pairs")
    from pyro_attention.align import ALIGN_NETWORKS, LINK_FORMATS, LINK_ORDERS
    from pyro_attention.registry import ALL_PAIRS

    al.add_argument("--models", nargs="+", default=["soft", "variational"], choices=tuple(ALL_PAIRS),
                    help="the pairs to train and score")
    al.add_argument("--network", default="seq2seq", choices=tuple(ALIGN_NETWORKS),
                    help="; ".join(f"{k}: {v.description}" for k, v in ALIGN_NETWORKS.items())
                    + " (ibm1, ibm1-rank, distortion: --models marginal; ibm1-rank and distortion: --embedding = "
                    "the lexical table's rank)")
    al.add_argument("--epochs", type=_int_at_least(1), default=5, help="training epochs")
    al.add_argument("--batch-size", type=_int_at_least(1), default=32, help="sentences per batch")
    al.add_argument("--lr", type=_learning_rate, default=3e-3, help="Adam learning rate, in (0, 1]")
    al.add_argument("--max-len", type=_int_at_least(1), default=60, help="drop training pairs with a longer side")
    for name, default, what in (("embedding", 64, "embedding size"), ("encoder", 64, "BiLSTM size per direction"),
                                ("decoder", 128, "decoder LSTM size"), ("attention", 64, "MLP attention size")):
        al.add_argument(f"--{name}", type=_int_at_least(1), default=default, help=what)
    al.add_argument("--both-directions", action="store_true",
                    help="also train target->source; report every symmetrisation (intersection, union, grow-diag, "
                    "grow-diag-final, grow-diag-final-and)")
    g = al.add_argument_group("a gold set of your own (instead of --corpus)")
    g.add_argument("--gold-text", default=None, help="'source ||| target' sentence pairs, one per line")
    g.add_argument("--gold-src", default=None, help="the source sentences, one per line (with --gold-tgt)")
    g.add_argument("--gold-tgt", default=None, help="the target sentences, line-aligned with --gold-src")
    g.add_argument("--gold-links", default=None, help="the gold links, in --links-format")
    g.add_argument("--links-format", default="pharaoh1", choices=LINK_FORMATS,
                   help="pharaoh0 / pharaoh1: 'i-j' sure and 'ipj' possible links per line, 0- or 1-indexed; naacl: "
                   "'SNUM i j [S|P]' per link, 1-indexed (default pharaoh1)")
    g.add_argument("--links-order", default="source-target", choices=LINK_ORDERS,
                   help="which sentence a link's first number counts in (default source-target)")
    g.add_argument("--extra-src", default=None, help="more unlabelled training text, source side (with --extra-tgt)")
    g.add_argument("--extra-tgt", default=None, help="its target side, line-aligned")
    g.add_argument("--no-lowercase", dest="lowercase", action="store_false",
                   help="keep the case of a gold set of your own (default: lower-case it)")
    al.add_argument("--seed", type=_int_at_least(0), default=0, help="seed of weights, sampling and batch order")
    al.add_argument("--threads", type=_int_at_least(1), default=1, help="torch threads")
    al.add_argument("--out", default="runs/align", help="folder for the runs")
    al.add_argument("--markdown", default="", help="also write the table to this file")
    al.add_argument("--json", default="", help="also merge the rows into this JSON list (e.g. docs/results/aer.json)")
    al.set_defaults(func=_align, parser=al)
    ins = sub.add_parser("inspect", help="a checkpoint's alignments: ArviZ NetCDF, heatmaps, diagnostics table")
    ins.add_argument("checkpoint", help="a checkpoint file or run folder written by `pyro-attention train`")
    ins.add_argument("--out", default="posterior.nc", help="NetCDF file for the InferenceData")
    ins.add_argument("--plots", default=None, help="folder for the figures (none if not given)")
    ins.add_argument(
        "--split", default="val", choices=["train", "val", "test"], help="split of the checkpoint's corpus"
    )
    ins.add_argument("--size", type=_int_at_least(1), default=20, help="sentence pairs to inspect")
    ins.add_argument("--num-samples", type=_int_at_least(2), default=100, help="draws per group")
    ins.add_argument("--num-plots", type=_int_at_least(0), default=4, help="sentence pairs drawn (with --plots)")
    ins.add_argument("--data-dir", default=None, help="where the corpus lives now (default: as in training)")
    ins.set_defaults(func=_inspect, parser=ins)
    ex = sub.add_parser(
        "experiment",
        help="a table of translation rows (an experiment file): train each to convergence, evaluate, tabulate; "
        "resumable row by row",
    )
    ex.add_argument("--config", required=True, help="experiment file (TOML or JSON): [shared] settings, [[rows]]")
    ex.add_argument("--out", required=True, help="runs folder: one sub-folder per row, table.json, table.md")
    ex.add_argument("--rows", nargs="+", default=None, metavar="LABEL", help="work on these rows only (default all)")
    ex.add_argument("--max-epochs", type=_int_at_least(1), default=None,
                    help="train at most N epochs per row in this call, then move on (default: to the end)")
    ex.add_argument("--no-bleu", action="store_true", help="skip decoding (perplexities and entropies only)")
    ex.add_argument("--device", default=None,
                    help="train and evaluate every row here: cpu, cuda, cuda:N or mps (default: the file's, else cpu)")
    ex.add_argument("--threads", type=_int_at_least(0), default=None,
                    help="torch threads for every row (default: the file's; 0: torch's choice)")
    ex.add_argument("--quiet", action="store_true", help="no progress bars")
    ex.set_defaults(func=_experiment, parser=ex)
    for command in sub.choices.values():  # every option's help says its default
        command.formatter_class = _DefaultsHelpFormatter
    return parser


class _DefaultsHelpFormatter(argparse.HelpFormatter):
    """Adds ``(default: X)`` to an option's help unless the help already names its default; options without one
    (``None``, flags that are off, options that only override a config file) are left as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default in (None, "")
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or "default" in text
            or "%(default)" in text
        ):
            return text
        if isinstance(default, (list, tuple)):
            shown = " ".join(map(str, default))
        else:
            shown = f"{default:g}" if isinstance(default, float) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


def _experiment(args: argparse.Namespace) -> int:
    from pyro_attention.runner import markdown_table, run_experiment
    from pyro_attention.tasks.translation import TrainingInterrupted

    try:
        overrides = {k: v for k, v in (("device", args.device), ("threads", args.threads)) if v is not None}
        table = run_experiment(args.config, args.out, only=args.rows, max_epochs=args.max_epochs,
                               progress=not args.quiet, bleu=not args.no_bleu, overrides=overrides)
    except (OSError, ValueError) as error:
        _fail(args.parser, error)
        return 1
    except TrainingInterrupted as stop:
        print(f"pyro-attention experiment: {stop.signal_name}: {stop.checkpoint} written; run the same command "
              "again to continue", file=sys.stderr)
        return 130
    print(markdown_table(table))
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from pyro_attention.inspect import inspect_checkpoint

    try:
        result = inspect_checkpoint(
            args.checkpoint,
            args.out,
            args.plots,
            split=args.split,
            size=args.size,
            num_samples=args.num_samples,
            num_plots=args.num_plots,
            data_dir=args.data_dir,
        )
    except OSError as error:  # the NetCDF file or a figure
        _fail(args.parser, ValueError(_os_error_text(error, args.out)) if error.errno is not None else error)
        return 1
    except ValueError as error:
        _fail(args.parser, error)
        return 1
    print(result["table"])
    print(f"wrote {Path(args.out).resolve()}")
    for figure in result["figures"]:
        print(f"wrote {Path(figure).resolve()}")
    return 0


def _align(args: argparse.Namespace) -> int:
    from pyro_attention.align import AlignConfig, format_rows, run_align

    keys = [f for f in AlignConfig.__dataclass_fields__ if f in vars(args)]
    try:
        config = AlignConfig(**{k: getattr(args, k.replace("-", "_")) for k in keys})
        rows = run_align(config)
    except (FileNotFoundError, ValueError) as error:
        _fail(args.parser, error)
        return 1
    table = format_rows(rows)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        from pyro_attention.align import json_rows, merge_json

        merge_json(args.json, json_rows(rows, "user" if config.gold_links else config.corpus))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = make_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except OSError as error:  # a file that cannot be written (or read): one line naming it, not a traceback
        if error.errno is None and not error.filename:
            raise
        prog = args.parser.prog if hasattr(args, "parser") else f"pyro-attention {args.command}"
        print(f"{prog}: error: {_os_error_text(error)}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    sys.exit(main())
