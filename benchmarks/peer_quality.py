"""The peer toolkit trained to early stopping on Multi30k De->En and scored the way our rows are.

    python benchmarks/peer_quality.py --arch transformer --threads 1   # the Transformer anchor (about an hour a core)
    python benchmarks/peer_quality.py --arch lstm --threads 2          # VISION's LSTM configuration
    python benchmarks/peer_quality.py --arch transformer --normalization tokens   # the loss as a token mean, like ours
    python benchmarks/peer_quality.py --arch lstm --schedule constant   # one uninterrupted call, the toolkit's way

**What runs.**  OpenNMT-py 3.5.1 in its own venv (``--peer-venv``, created as ``benchmarks/toolkit.py`` says), on
Multi30k's lower-cased tokenised text with whitespace runs collapsed, a word vocabulary of minimum frequency 2 and
training pairs of at most 50 tokens a side -- the data of our ``multi30k`` rows:

* ``--arch lstm``: :data:`toolkit.PEER_CONFIG` (BiLSTM 2 x 256, LSTM 512, Luong ``general`` attention, input
  feeding, embeddings 256, dropout 0.3, Adam 1e-3).
* ``--arch transformer``: the size of ``examples/configs/transformer-multi30k.toml`` -- pre-LN encoder and decoder,
  3 layers each, width 256, 4 heads, feed-forward 1024, dropout 0.1 (attention dropout 0.1), sinusoidal positions,
  Glorot-uniform initialisation, Adam 5e-4.

Both: batches of 64 sentences, the loss summed over a batch's tokens and divided by its sentences (the toolkit's
default; ``--normalization tokens`` divides by its target tokens instead, the token mean our trainer takes, and
writes to ``<arch>-tokens/``), gradient norm clipped at 5, **no label smoothing** (it changes the likelihood being
compared), validation and a checkpoint once per epoch (``ceil(29,000 / 64) = 454`` steps), and our trainer's schedule,
which the toolkit does not have built in: the learning rate halves after every epoch whose validation perplexity is
not the lowest yet, and training stops after ``--patience`` such epochs in a row or ``--epochs`` epochs.  Each epoch is
one ``onmt_train`` call resuming from the last checkpoint (``train_from``, ``reset_optim keep_states``: Adam's moments
kept, the new rate taken; the data order reseeded per epoch), so the schedule is read off the validations alone and a
run resumes after an interruption by rerunning the command.  ``--schedule constant`` is the toolkit's own way
instead (``<arch>-constant/``): one call at the constant rate, stopped by its ``early_stopping`` after ``--patience``
validations without a new best.  The checkpoint with the lowest
validation perplexity then translates ``test_2016_flickr`` (beam 5, ``onmt_translate``'s defaults otherwise) and is
scored against the test reference (``onmt_translate -tgt``: the toolkit's gold log-likelihood, per target
token with ``</s>``).  BLEU is sacreBLEU against the lower-cased tokenised
reference: ``tokenize="none"`` (``bleu_tok_none``, the figure to set beside our rows' own) and the default ``13a``
(``bleu``; our rows' ``bleu`` is 13a on detokenised output against the raw reference, close but not the same).
Speed: ``tokens_per_s``, the median of the toolkit's own target tokens/s over its progress reports.

``--work`` (default ``~/runs/peer-quality``, refused
inside the repository) holds ``<arch>/`` with the logs, checkpoints and ``result.json``; ``--json`` copies the result.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyro_attention.files import write_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode_speed  # noqa: E402  (the test files, BLEU with tokenize="none")
import peer  # noqa: E402  (the data folder)
import toolkit  # noqa: E402  (the peer's venv, data, vocabulary and LSTM configuration)

TRAIN_SENTENCES = 29_000
BATCH = 64
EPOCH_STEPS = math.ceil(TRAIN_SENTENCES / BATCH)
TRANSFORMER: dict[str, Any] = dict(
    encoder_type="transformer", decoder_type="transformer", layers=3, hidden_size=256, word_vec_size=256, heads=4,
    transformer_ff=1024, dropout=[0.1], attention_dropout=[0.1], position_encoding=True, param_init=0.0,
    param_init_glorot=True, optim="adam", learning_rate=5e-4, decay_method="none", batch_size=BATCH,
    batch_type="sents", src_words_min_frequency=2, tgt_words_min_frequency=2, src_seq_length=50, tgt_seq_length=50,
)
ARCHS = {"lstm": toolkit.PEER_CONFIG, "transformer": TRANSFORMER}
VALID_PPL = re.compile(r"Validation perplexity: ([\d.]+)")
SAVED = re.compile(r"Saving checkpoint .*_step_(\d+)\.pt")
REPORT = re.compile(r"Step\s+\d+/\s*\d+;.*?[\d.]+/\s*([\d.]+) tok/s;")
GOLD_SCORE = re.compile(r"GOLD SCORE: (-?[\d.]+), GOLD PPL: [\d.inf]+ NB SENTENCES: (\d+)")


def train_config(arch: str, paths: dict[str, Path], out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The ``onmt_train`` configuration of ``arch`` (see the module docstring)."""
    config = {**toolkit.peer_train_config(paths, out.parent, 0, 0, args.epochs * EPOCH_STEPS), **ARCHS[arch]}
    config["data"]["valid"] = {"path_src": str(paths["val.de"]), "path_tgt": str(paths["val.en"])}
    config.update(
        num_workers=0, report_every=50, valid_steps=EPOCH_STEPS, save_checkpoint_steps=EPOCH_STEPS,
        keep_checkpoint=-1, max_grad_norm=5.0, label_smoothing=0.0, normalization=args.normalization,
        save_model=str(out / "model"), seed=args.seed, overwrite=False,
    )
    return config


def schedule(ppls: list[float], lr: float, decay: float = 0.5) -> tuple[float, int]:
    """Our trainer's plateau schedule over the validation perplexities so far: the learning rate of the next epoch
    (``lr`` halved once per epoch that did not set a new lowest) and how many epochs in a row have not."""
    best, bad, halvings = math.inf, 0, 0
    for ppl in ppls:
        if ppl < best:
            best, bad = ppl, 0
        else:
            bad, halvings = bad + 1, halvings + 1
    return lr * decay**halvings, bad


def validations(log: str) -> list[tuple[int, float]]:
    """``(step, validation perplexity)`` in the order of the log: each validation belongs to the checkpoint saved
    next (the toolkit validates, then saves, at the same step); one without a checkpoint (early stopping) is kept
    with step ``-1``."""
    found, pending = [], None
    for line in log.splitlines():
        if (m := VALID_PPL.search(line)) is not None:
            if pending is not None:
                found.append((-1, pending))
            pending = float(m.group(1))
        elif (m := SAVED.search(line)) is not None and pending is not None:
            found.append((int(m.group(1)), pending))
            pending = None
    if pending is not None:
        found.append((-1, pending))
    return found


def target_tokens_per_s(log: str) -> float | None:
    """The median of the toolkit's own target tokens/s over its progress reports (each over the steps since the
    previous one), leaving out each call's first report (start-up)."""
    rates, first = [], True
    for line in log.splitlines():
        if "Starting training" in line:
            first = True
        elif (m := REPORT.search(line)) is not None:
            if not first:
                rates.append(float(m.group(1)))
            first = False
    return statistics.median(rates) if rates else None


def checkpoints(out: Path) -> dict[int, Path]:
    return {int(p.stem.rsplit("_", 1)[1]): p for p in out.glob("model_step_*.pt")}


def plateau_call(config: dict[str, Any], saved: dict[int, Path], history: list[float], epochs: int,
                 patience: int) -> dict[str, Any]:
    """The next ``onmt_train`` call under our trainer's schedule: one epoch at :func:`schedule`'s rate, resuming from
    the newest checkpoint with Adam's moments kept."""
    step = max(saved, default=0)
    call = {**config, "train_steps": step + EPOCH_STEPS, "learning_rate": schedule(history, config["learning_rate"])[0],
            "seed": config["seed"] + step}
    if saved:
        call.update(train_from=str(saved[step]), reset_optim="keep_states")
    return call


def constant_call(config: dict[str, Any], saved: dict[int, Path], history: list[float], epochs: int,
                  patience: int) -> dict[str, Any]:
    """The toolkit's own way: one call at the constant rate to ``epochs`` epochs, stopped by its ``early_stopping``
    after ``patience`` validations without a new lowest perplexity; after an interruption, the same call resumed
    from the newest checkpoint with everything in it."""
    step = max(saved, default=0)
    call = {**config, "train_steps": epochs * EPOCH_STEPS, "early_stopping": patience,
            "early_stopping_criteria": "ppl", "seed": config["seed"] + step}
    if saved:
        call.update(train_from=str(saved[step]), reset_optim="none")
    return call


#: ``--schedule``: how the learning rate moves and what a call of ``onmt_train`` covers
SCHEDULES = {"plateau": plateau_call, "constant": constant_call}


def train(venv: Path, config: dict[str, Any], out: Path, threads: int, patience: int, epochs: int,
          next_call: Callable[..., dict[str, Any]] = plateau_call) -> None:
    """``onmt_train`` in the calls ``next_call`` makes (see the module docstring) until ``epochs`` epochs or
    ``patience`` epochs in a row without a new lowest validation perplexity, resuming from the newest checkpoint;
    each call's wall seconds are added to ``sittings.json`` as it ends."""
    while True:
        saved = checkpoints(out)
        step = max(saved, default=0)
        history = [p for _, p in validations(_log(out))]
        if step >= epochs * EPOCH_STEPS or schedule(history, config["learning_rate"])[1] >= patience:
            return
        path = out / "train.yaml"
        path.write_text(toolkit.to_yaml(next_call(config, saved, history, epochs, patience)), encoding="utf-8")
        started = time.perf_counter()
        with open(out / "train.log", "a", encoding="utf-8") as log:
            done = subprocess.run([str(venv / "bin" / "onmt_train"), "-config", str(path)], stdout=log,
                                  stderr=subprocess.STDOUT, env=toolkit.peer_env(threads))
        write_text(out / "sittings.json", json.dumps(_sittings(out) + [round(time.perf_counter() - started, 1)]))
        stalled = max(checkpoints(out), default=0) <= step and len(validations(_log(out))) <= len(history)
        if done.returncode != 0 or stalled:  # (an early stop validates without saving)
            raise RuntimeError(f"onmt_train failed (exit {done.returncode}); see {out / 'train.log'}")


def _sittings(out: Path) -> list[float]:
    path = out / "sittings.json"
    return json.loads(path.read_text()) if path.is_file() else []


def _log(out: Path) -> str:
    path = out / "train.log"
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def test_ppl(gold_score: float, sentences: int, refs: list[str]) -> float:
    """Perplexity per target token (``</s>`` included, as our rows count) from ``onmt_translate -tgt``'s ``GOLD
    SCORE``, the log-likelihood *per sentence* (its ``GOLD PPL`` is per sentence too, not comparable)."""
    if sentences != len(refs):
        raise RuntimeError(f"onmt_translate scored {sentences} sentences, the reference has {len(refs)}")
    return math.exp(-gold_score * sentences / sum(len(r.split()) + 1 for r in refs))


def score(venv: Path, model: Path, test: dict[str, Path], out: Path, threads: int, beam: int) -> dict[str, Any]:
    """Translate and score the test set with ``model``."""
    import sacrebleu

    hyp = out / "test.hyp.en"
    command = [str(venv / "bin" / "onmt_translate"), "-model", str(model), "-src", str(test["de"]), "-tgt",
               str(test["en"]), "-output", str(hyp), "-beam_size", str(beam), "-batch_size", "64", "-batch_type",
               "sents", "-gpu", "-1"]
    done = subprocess.run(command, capture_output=True, text=True,
                          env=toolkit.peer_env(threads))
    (out / "translate.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        raise RuntimeError(f"onmt_translate failed (exit {done.returncode}); see {out / 'translate.log'}")
    hyps = hyp.read_text(encoding="utf-8").splitlines()
    refs = test["en"].read_text(encoding="utf-8").splitlines()
    gold = GOLD_SCORE.findall(done.stdout + done.stderr)
    if not gold:
        raise RuntimeError(f"onmt_translate printed no GOLD SCORE line; see {out / 'translate.log'}")
    metric = sacrebleu.metrics.BLEU(lowercase=True)
    bleu = metric.corpus_score(hyps, [refs])
    return {"test_ppl": test_ppl(float(gold[-1][0]), int(gold[-1][1]), refs), "bleu": round(bleu.score, 2),
            "bleu_signature": str(metric.get_signature()),
            "bleu_tok_none": decode_speed.bleu_tok_none(hyps, refs), "test_sentences": len(hyps)}


def main(args: argparse.Namespace) -> dict[str, Any]:
    work, venv = args.work, args.peer_venv
    variant = [v for v, default in ((args.normalization, "sents"), (args.schedule, "plateau")) if v != default]
    out = work / "-".join([args.arch, *variant])
    out.mkdir(parents=True, exist_ok=True)
    versions = toolkit.ensure_peer_venv(venv)
    paths = toolkit.prepare_data(args.data_dir, work)
    if not (work / "peer" / "vocab.src").is_file():
        toolkit.build_peer_vocab(venv, paths, work, args.threads)
    config, next_call = train_config(args.arch, paths, out, args), SCHEDULES[args.schedule]
    if not (out / "trained.json").is_file():
        train(venv, config, out, args.threads, args.patience, args.epochs, next_call)
        (out / "trained.json").write_text("{}")
    sittings = _sittings(out)
    history = validations(_log(out))
    saved = [(step, ppl) for step, ppl in history if step in checkpoints(out)]
    if not saved:
        raise RuntimeError(f"no validated checkpoint in {out}; see {out / 'train.log'}")
    best_step, best_ppl = min(saved, key=lambda s: s[1])
    test = decode_speed.test_files(args.data_dir, work, None)
    result = {
        "arch": args.arch, "normalization": args.normalization, "schedule": args.schedule, "toolkit": versions,
        "config": {k: v for k, v in config.items() if k != "data"},
        "threads": args.threads, "val_ppl": best_ppl, "best_epoch": best_step // EPOCH_STEPS,
        "epochs": max(s for s, _ in history) // EPOCH_STEPS, "val_ppl_by_epoch": [p for _, p in history],
        "lr_by_epoch": [next_call(config, {}, [p for _, p in history[:i]], args.epochs, args.patience)["learning_rate"]
                        for i in range(len(history))],
        "wall_s": round(sum(sittings), 1), "sittings": len(sittings), "beam": args.beam,
        "tokens_per_s": target_tokens_per_s(_log(out)),
        **score(venv, checkpoints(out)[best_step], test, out, args.threads, args.beam),
        "command": "python benchmarks/peer_quality.py " + " ".join(sys.argv[1:]),
    }
    write_text(out / "result.json", json.dumps(result, indent=1) + "\n")
    if args.json is not None:
        shutil.copyfile(out / "result.json", args.json)
    print(json.dumps({k: result[k] for k in ("arch", "val_ppl", "test_ppl", "bleu", "bleu_tok_none", "epochs",
                                               "best_epoch", "wall_s")}))
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", choices=tuple(ARCHS), default="transformer", help="the toolkit's model (default "
                   "transformer)")
    p.add_argument("--normalization", choices=("sents", "tokens"), default="sents", help="divide a batch's summed "
                   "loss by its sentences (the toolkit's default) or its target tokens (our trainer's mean)")
    p.add_argument("--schedule", choices=tuple(SCHEDULES), default="plateau", help="plateau: our trainer's (the "
                   "rate halved after an epoch without a new best), one call an epoch; constant: one call at a "
                   "constant rate with the toolkit's early stopping")
    p.add_argument("--threads", type=int, default=1, help="OMP / MKL threads of the toolkit (default 1)")
    p.add_argument("--epochs", type=int, default=40, help="at most this many epochs (default 40)")
    p.add_argument("--patience", type=int, default=3, help="validations without improvement before stopping "
                   "(default 3)")
    p.add_argument("--beam", type=int, default=5, help="beam size for the test translation (default 5)")
    p.add_argument("--seed", type=int, default=1, help="the toolkit's seed (default 1)")
    p.add_argument("--data-dir", type=Path, default=peer.DEFAULT_DATA, help="folder holding multi30k/ (default "
                   "$PYRO_ATTENTION_DATA or ../shared/data)")
    p.add_argument("--peer-venv", type=Path, default=Path("~/peer/onmt"), help="the toolkit's venv (created if "
                   "missing)")
    p.add_argument("--work", type=Path, default=Path("~/runs/peer-quality"), help="scratch folder outside the "
                   "repository")
    p.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = p.parse_args(argv)
    args.work, args.peer_venv = args.work.expanduser().resolve(), args.peer_venv.expanduser()
    if decode_speed.ROOT in (args.work, *args.work.parents):
        p.error(f"--work {args.work} is inside the repository; choose a folder outside it")
    for name in ("threads", "epochs", "patience", "beam"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


if __name__ == "__main__":
    main(parse_args())
