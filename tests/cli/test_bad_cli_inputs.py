"""Bad input to the command line (``pyro-attention ...``: flags, files, exits): this layer's entries of the bad-input
catalogue, each a mistake committed once that must get a clear error (:func:`tests.support.mistakes.check_mistake`;
docs/troubleshooting.md lists every layer's)."""

from __future__ import annotations

import json

import pytest

from tests.support.mistakes import (
    CKPT,
    CONFIG,
    FILES,
    NAMES,
    VOCAB,
    WORK,
    WRITES,
    Mistake,
    check_mistake,
    damaged_checkpoint,
    diverging_run,
    run_cli,
    run_experiment,
    status_with,
    tiny_flags,
    tiny_run,
    work_file,
    work_path,
)

pytestmark = pytest.mark.usefixtures("mistake_work_dir")

CATALOGUE: list[Mistake] = [
    Mistake(
        "directory-for-a-file", FILES, "a directory given where a file belongs (it was called 'no such file')",
        lambda: run_cli("train", "--config", str(WORK[0])),
        SystemExit, r"exit status [12]: .*: is a directory, not a config file",
        "Give the file inside the directory.",
    ),
    Mistake(
        "parallel-cli-line-counts", FILES, "`pyro-attention train --data parallel` on files of different lengths",
        lambda: run_cli(
            "train", "--data", "parallel", "--quiet", "--out", work_path("parallel-run"),
            "--train-src", work_file("p.src", "ein hund\neine katze\n"), "--train-tgt", work_file("p.tgt", "a dog\n"),
            "--val-src", work_file("pv.src", "hund\n"), "--val-tgt", work_file("pv.tgt", "dog\n"),
        ),
        SystemExit, r"exit status 1: pyro-attention train: error: parallel files differ in length: .*p\.src has 2 "
        r"lines, .*p\.tgt has 1 lines",
        "Line the files up.",
    ),
    Mistake(
        "translate-input-invalid-utf8", FILES, "`pyro-attention translate` on an input file that is not UTF-8",
        lambda: run_cli("translate", tiny_run(), work_file("input.txt", b"a b\n" + "\xe9t\xe9\n".encode("latin-1"))),
        SystemExit, r"exit status 1: pyro-attention translate: error: .*input\.txt: line 2 is not valid UTF-8",
        "Re-encode the input as UTF-8.",
    ),
    Mistake(
        "cli-unknown-model", NAMES, "`pyro-attention train --model` with a misspelt pair",
        lambda: run_cli("train", "--model", "sof"),
        SystemExit,
        r"exit status 2: pyro-attention train: error: argument --model: invalid choice: 'sof' \(choose from "
        r"'?soft'?, '?marginal'?",
        "Use one of the listed models.",
    ),
    Mistake(
        "cli-unknown-task", NAMES, "`pyro-attention demo --task` with an unknown task",
        lambda: run_cli("demo", "--task", "vqa"),
        SystemExit, r"exit status 2: pyro-attention demo: error: argument --task: invalid choice: 'vqa' \(choose from "
        r"'?synthetic'?, '?clevr'?\)",
        "Use `synthetic` or `clevr`.",
    ),
    Mistake(
        "cli-unknown-command", NAMES, "an unknown `pyro-attention` command",
        lambda: run_cli("fit"),
        SystemExit, r"exit status 2: pyro-attention: error: argument command: invalid choice: 'fit' \(choose from "
        r"'?demo'?, '?train'?, '?evaluate'?, '?translate'?, '?align'?, '?inspect'?",
        "Use one of the listed commands (`pyro-attention --help`).",
    ),
    Mistake(
        "evaluate-rule-without-bleu", NAMES, "`evaluate --no-bleu` with a rule the pair does not allow",
        lambda: run_cli("evaluate", tiny_run(), "--rule", "kmax", "--no-bleu", "--quiet"),
        SystemExit,
        r"exit status 2: pyro-attention evaluate: error: argument --rule: rule 'kmax' needs a categorical "
        r"alignment; SoftAttention allows only 'soft'",
        "Use a rule the pair allows.",
    ),
    Mistake(
        "cli-config-unknown-key", CONFIG, "`pyro-attention train --config` with an unknown key",
        lambda: run_cli("train", "--config", work_file("cli.json", json.dumps({"epochz": 1}))),
        SystemExit,
        r"exit status 2: pyro-attention train: error: .*cli\.json: unknown config key\(s\) 'epochz' "
        r"\(did you mean 'epochs'\?\); allowed keys",
        "Use one of the listed keys.",
    ),
    Mistake(
        "experiment-shared-unknown-key", CONFIG, "an experiment file whose `[shared]` table has a misspelt key",
        lambda: run_experiment('[shared]\nembeding = 8\n[[rows]]\nlabel = "a"\nmodel = "soft"\n'),
        SystemExit,
        r"exp\.toml: \[shared\]: unknown config key\(s\) 'embeding' \(did you mean 'embedding'\?\)",
        "Use the suggested key; every key of `[shared]` and of a row is a `pyro-attention train` option.",
    ),
    Mistake(
        "experiment-row-bad-model", CONFIG, "an experiment row naming a pair that does not exist",
        lambda: run_experiment('[shared]\nepochs = 1\n[[rows]]\nlabel = "a"\nmodel = "sofft"\n'),
        SystemExit, r"exp\.toml: row 1 \('a'\): model must be one of soft, marginal, hard, .*; got 'sofft'",
        "Use one of the listed pairs.",
    ),
    Mistake(
        "experiment-unknown-row", CONFIG, "`pyro-attention experiment run --rows` naming a row the file lacks",
        lambda: run_experiment('[shared]\nepochs = 1\n[[rows]]\nlabel = "soft"\nmodel = "soft"\n', "--rows", "sfot"),
        SystemExit, r"exp\.toml: no row labelled \['sfot'\] \(did you mean \['soft'\]\?\); the rows are \['soft'\]",
        "Use the labels of the file's `[[rows]]`.",
    ),
    Mistake(
        "experiment-status-no-runs", CONFIG,
        "`pyro-attention experiment status` naming a runs folder that is not there",
        lambda: run_cli("experiment", "status", "--config",
                        work_file("exp.toml", '[shared]\n[[rows]]\nlabel = "a"\nmodel = "soft"\n'), "--out",
                        work_path("no-runs")),
        SystemExit, r"exit status 1: .*no-runs: no such runs folder \(no row of .*exp\.toml has started there\)",
        "Check `--out`: it is the folder the rows were trained in.",
    ),
    Mistake(
        "experiment-damaged-json", CONFIG,
        "a row's `result.json`, `trained.json` or `sittings.json` edited or cut short by hand",
        lambda: status_with("cut-runs", "sittings.json", '[{"wall_s": 12.5, "until'),
        SystemExit, r"exit status 1: .*cut-runs/a/sittings\.json: not readable as JSON \(Unterminated string",
        "Mend the file or remove it (the runner writes its own atomically; a removed `sittings.json` loses the wall "
        "time of earlier sittings, a removed `result.json` is evaluated again).",
    ),
    Mistake(
        "experiment-sittings-shape", CONFIG,
        "a row's `sittings.json` edited into JSON of another shape (an object, an entry without its numbers)",
        lambda: status_with("shape-runs", "sittings.json", '[{"wall_s": 12.5, "until_step": 40}, {"wall_s": "1 h"}]'),
        SystemExit, r'exit status 1: .*shape-runs/a/sittings\.json: not a list of sittings \(\{"wall_s": seconds, '
                    r'"until_step": step, \.\.\.\} each\): entry 1 is \{"wall_s": "1 h"\}',
        "Mend the entry (`wall_s` in seconds and `until_step` as numbers) or remove the file (losing the wall time "
        "of earlier sittings).",
    ),
    Mistake(
        "experiment-record-shape", CONFIG,
        "a row's `result.json` or `trained.json` edited into JSON of another shape (a list, an object lacking keys)",
        lambda: status_with("keys-runs", "trained.json", '{"epochs": 3, "best_epoch": 2}'),
        SystemExit, r"exit status 1: .*keys-runs/a/trained\.json: lacks 'best_val_ppl', 'stopped_early', 'steps', "
                    r"'target_tokens' and 1 more of the keys the runner writes there",
        "Mend the file or remove it: a removed `result.json` is evaluated again, a removed `trained.json` is written "
        "again from `last.pt` when the row resumes.",
    ),
    Mistake(
        "experiment-merge-unevaluated", CONFIG,
        "`pyro-attention experiment merge TABLE.json --out RUNS --rows ROW` for a row not yet evaluated",
        lambda: (work_file("merge-runs/a/history.csv", "kind,epoch,step\n"),
                 run_cli("experiment", "merge", work_path("table.json"), "--out", work_path("merge-runs"), "--rows",
                         "a")),
        SystemExit, r"exit status 1: .*merge-runs/a: no result\.json \(nor result-paused\.json\): the row has not "
                    r"been evaluated; 'pyro-attention experiment status' says where it stands",
        "Let the row finish (or `--evaluate-paused` it), then merge it; `experiment status` says where it stands.",
    ),
    Mistake(
        "checkpoint-nan-weights", CKPT, "a checkpoint whose weights hold NaN (it translated to garbage with exit 0)",
        lambda: run_cli("translate", str(damaged_checkpoint("nan")), str(work_file("in.txt", "3 4 5\n"))),
        SystemExit, r"exit status 1: .*nan\.pt: the weights \['tgt_embed\.weight'\] hold NaN or infinite values",
        "Training diverged: use an earlier checkpoint, a lower `--lr`.",
    ),
    Mistake(
        "cli-evaluate-not-a-checkpoint", CKPT, "`pyro-attention evaluate` on a file that is not a checkpoint",
        lambda: run_cli("evaluate", damaged_checkpoint("text"), "--quiet"),
        SystemExit, r"exit status 1: pyro-attention evaluate: error: .*notes\.pt: cannot be read as a checkpoint",
        "Give the `.pt` file (or run folder) written by `pyro-attention train`.",
    ),
    Mistake(
        "option-wrong-type", CONFIG, "a pair option of the wrong type (`--option kl_scale=abc`; it reached the pair "
        "untyped and failed inside it)",
        lambda: run_cli("train", "--model", "gaussian", "--option", "kl_scale=abc", "--quiet"),
        SystemExit, r"exit status 2: .*option kl_scale='abc' must be float, got str \(default 1.0\)",
        "Give a value of the type named (`--option kl_scale=0.01`).",
    ),
    Mistake(
        "cli-lr-out-of-range", CONFIG, "`pyro-attention train --lr 1e30` (it ended in an `OverflowError` traceback "
        "after an epoch)",
        lambda: run_cli("train", "--lr", "1e30", "--quiet", "--out", work_path("lr-run")),
        SystemExit, r"exit status 2: pyro-attention train: error: argument --lr: must be a number in \(0, 1\], "
        r"got '1e30'",
        "Use a learning rate in (0, 1]; 1e-3 to 3e-3 is typical for Adam.",
    ),
    Mistake(
        "config-file-lr-out-of-range", CONFIG, "a config file with `lr = 1e30`",
        lambda: run_cli("train", "--config", work_file("lr.json", json.dumps({"lr": 1e30})), "--quiet"),
        SystemExit, r"exit status 2: pyro-attention train: error: .*lr\.json: lr must be a learning rate in "
        r"\(0, 1\] .*got 1e\+30",
        "Fix the value in the file (the message names it).",
    ),
    Mistake(
        "training-diverged", CONFIG, "a run whose loss becomes NaN or infinite (too high a learning rate; it was a "
        "`FloatingPointError` traceback)",
        lambda: diverging_run(),
        SystemExit, r"exit status 1: pyro-attention train: error: training diverged: non-finite loss nan at step 1 "
        r"\(epoch 1\) with lr 0\.003; lower --lr",
        "Lower `--lr` (or `--clip-norm`) and start again with `--overwrite`, or `--resume` with the lower `--lr`.",
    ),
    Mistake(
        "out-folder-not-writable", WRITES, "`pyro-attention train --out` where no folder can be made (under a file; "
        "a read-only folder is the same: it was a raw `OSError` traceback)",
        lambda: run_cli("train", "--quiet", "--out", work_file("a-file", "x\n") / "run", *tiny_flags()),
        SystemExit, r"exit status 1: pyro-attention train: error: cannot write .*a-file/run/\.lock: Not a directory "
        r"\(errno 20\)",
        "Choose an `--out` you can write to.",
    ),
    Mistake(
        "evaluate-json-disk-full", WRITES, "`pyro-attention evaluate --json` onto a full disk (here `/dev/full`)",
        lambda: run_cli("evaluate", tiny_run(), "--no-bleu", "--quiet", "--json", "/dev/full"),
        SystemExit, r"exit status 1: pyro-attention evaluate: error: cannot write /dev/full: No space left on device "
        r"\(errno 28\)",
        "Free space on the disk, or write elsewhere.",
    ),
    Mistake(
        "demo-out-not-writable", WRITES, "`pyro-attention demo --out` that cannot be written (it failed only after "
        "a minute of training, when the figure was saved)",
        lambda: run_cli("demo", "--out", work_file("d-file", "x\n") / "demo"),
        SystemExit, r"exit status 1: pyro-attention demo: error: cannot write .*d-file/demo: Not a directory "
        r"\(errno 20\): .*d-file is a file, not a folder",
        "Give an `--out` folder you can write to.",
    ),
    Mistake(
        "checkpoint-vocab-not-text", VOCAB, "a checkpoint whose source vocabulary is not JSON text at all",
        lambda: run_cli("translate", damaged_checkpoint("vocab-type"), work_file("in2.txt", "3 4\n")),
        SystemExit, r"exit status 1: pyro-attention translate: error: checkpoint .*vocab-type\.pt: source vocabulary "
        r"is damaged: not a pyro_attention\.Vocab JSON document \(got int, not JSON text\)",
        "Use another checkpoint of the run.",
    ),
    Mistake(
        "demo-size-not-positive", NAMES, "`pyro-attention demo --train-size 0` (an untyped int: it failed inside "
        "the data generator)",
        lambda: run_cli("demo", "--train-size", "0"),
        SystemExit, r"exit status 2: pyro-attention demo: error: argument --train-size: must be an integer >= 1, "
        r"got '0'",
        "Give a positive size (`pyro-attention demo --help` lists every option with its default).",
    ),
    Mistake(
        "align-seed-negative", NAMES, "`pyro-attention align --seed -1`",
        lambda: run_cli("align", "--seed", "-1"),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --seed: must be an integer >= 0, got '-1'",
        "Give a seed >= 0.",
    ),
    Mistake(
        "align-agreement-one-direction", CONFIG, "`pyro-attention align --network hmm --models marginal --agreement` "
        "without `--both-directions`",
        lambda: run_cli("align", "--network", "hmm", "--models", "marginal", "--agreement"),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --agreement: --agreement trains both "
        r"directions together; add --both-directions",
        "Add `--both-directions` (agreement needs both), or drop `--agreement`.",
    ),
    Mistake(
        "evaluate-hypotheses-without-bleu", CONFIG, "`pyro-attention evaluate --no-bleu --hypotheses FILE` (no file "
        "was written, without a word)",
        lambda: run_cli("evaluate", tiny_run(), "--no-bleu", "--hypotheses", work_path("hyps.txt")),
        SystemExit, r"exit status 2: .*argument --hypotheses: it goes with decoding, which --no-bleu skips",
        "Drop `--no-bleu` to decode, or `--hypotheses`.",
    ),
    Mistake(
        "translate-kmax-without-rule", CONFIG, "`pyro-attention translate --kmax K` without `--rule kmax` (K was "
        "ignored)",
        lambda: run_cli("translate", tiny_run(), work_file("in.txt", "3 4 5\n"), "--kmax", "3"),
        SystemExit, r"exit status 2: .*argument --kmax: K of the K-max rule; add --rule kmax",
        "Add `--rule kmax`, or drop `--kmax`.",
    ),
]  # fmt: skip


@pytest.mark.parametrize("mistake", CATALOGUE, ids=[m.id for m in CATALOGUE])
def test_mistake_gets_a_clear_error(mistake: Mistake):
    check_mistake(mistake)
