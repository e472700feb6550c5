"""Bad input to the command line (``pyro-attention ...``: flags, files, exits): this layer's entries of the bad-input
catalogue, each a mistake committed once that must get a clear error (:func:`tests.support.mistakes.check_mistake`;
docs/troubleshooting.md lists every layer's)."""

from __future__ import annotations

import json

from tests.support import mistakes as m

CATALOGUE: list[m.Mistake] = [
    m.Mistake(
        "directory-for-a-file", m.FILES, "a directory given where a file belongs (it was called 'no such file')",
        lambda: m.run_cli("train", "--config", str(m.WORK[0])),
        SystemExit, r"exit status [12]: .*: is a directory, not a config file",
        "Give the file inside the directory.",
    ),
    m.Mistake(
        "parallel-cli-line-counts", m.FILES, "`pyro-attention train --data parallel` on files of different lengths",
        lambda: m.run_cli(
            "train", "--data", "parallel", "--quiet", "--out", m.work_path("parallel-run"),
            "--train-src", m.work_file("p.src", "ein hund\neine katze\n"),
            "--train-tgt", m.work_file("p.tgt", "a dog\n"),
            "--val-src", m.work_file("pv.src", "hund\n"), "--val-tgt", m.work_file("pv.tgt", "dog\n"),
        ),
        SystemExit, r"exit status 1: pyro-attention train: error: parallel files differ in length: .*p\.src has 2 "
        r"lines, .*p\.tgt has 1 lines",
        "Line the files up.",
    ),
    m.Mistake(
        "translate-input-invalid-utf8", m.FILES, "`pyro-attention translate` on an input file that is not UTF-8",
        lambda: m.run_cli("translate", m.tiny_run(),
                          m.work_file("input.txt", b"a b\n" + "\xe9t\xe9\n".encode("latin-1"))),
        SystemExit, r"exit status 1: pyro-attention translate: error: .*input\.txt: line 2 is not valid UTF-8",
        "Re-encode the input as UTF-8.",
    ),
    m.Mistake(
        "cli-unknown-model", m.NAMES, "`pyro-attention train --model` with a misspelt pair",
        lambda: m.run_cli("train", "--model", "sof"),
        SystemExit,
        r"exit status 2: pyro-attention train: error: argument --model: invalid choice: 'sof' \(choose from "
        r"'?soft'?, '?marginal'?",
        "Use one of the listed models.",
    ),
    m.Mistake(
        "cli-unknown-task", m.NAMES, "`pyro-attention demo --task` with an unknown task",
        lambda: m.run_cli("demo", "--task", "vqa"),
        SystemExit, r"exit status 2: pyro-attention demo: error: argument --task: invalid choice: 'vqa' \(choose from "
        r"'?synthetic'?, '?clevr'?\)",
        "Use `synthetic` or `clevr`.",
    ),
    m.Mistake(
        "cli-unknown-command", m.NAMES, "an unknown `pyro-attention` command",
        lambda: m.run_cli("fit"),
        SystemExit, r"exit status 2: pyro-attention: error: argument command: invalid choice: 'fit' \(choose from "
        r"'?demo'?, '?train'?, '?evaluate'?, '?translate'?, '?align'?, '?inspect'?",
        "Use one of the listed commands (`pyro-attention --help`).",
    ),
    m.Mistake(
        "evaluate-rule-without-bleu", m.NAMES, "`evaluate --no-bleu` with a rule the pair does not allow",
        lambda: m.run_cli("evaluate", m.tiny_run(), "--rule", "kmax", "--no-bleu", "--quiet"),
        SystemExit,
        r"exit status 2: pyro-attention evaluate: error: argument --rule: rule 'kmax' needs a categorical "
        r"alignment; SoftAttention allows only 'soft'",
        "Use a rule the pair allows.",
    ),
    m.Mistake(
        "cli-config-unknown-key", m.CONFIG, "`pyro-attention train --config` with an unknown key",
        lambda: m.run_cli("train", "--config", m.work_file("cli.json", json.dumps({"epochz": 1}))),
        SystemExit,
        r"exit status 2: pyro-attention train: error: .*cli\.json: unknown config key\(s\) 'epochz' "
        r"\(did you mean 'epochs'\?\); allowed keys",
        "Use one of the listed keys.",
    ),
    m.Mistake(
        "experiment-shared-unknown-key", m.CONFIG, "an experiment file whose `[shared]` table has a misspelt key",
        lambda: m.run_experiment('[shared]\nembeding = 8\n[[rows]]\nlabel = "a"\nmodel = "soft"\n'),
        SystemExit,
        r"exp\.toml: \[shared\]: unknown config key\(s\) 'embeding' \(did you mean 'embedding'\?\)",
        "Use the suggested key; every key of `[shared]` and of a row is a `pyro-attention train` option.",
    ),
    m.Mistake(
        "experiment-row-bad-model", m.CONFIG, "an experiment row naming a pair that does not exist",
        lambda: m.run_experiment('[shared]\nepochs = 1\n[[rows]]\nlabel = "a"\nmodel = "sofft"\n'),
        SystemExit, r"exp\.toml: row 1 \('a'\): model must be one of soft, marginal, hard, .*; got 'sofft'",
        "Use one of the listed pairs.",
    ),
    m.Mistake(
        "experiment-unknown-row", m.CONFIG, "`pyro-attention experiment run --rows` naming a row the file lacks",
        lambda: m.run_experiment('[shared]\nepochs = 1\n[[rows]]\nlabel = "soft"\nmodel = "soft"\n', "--rows", "sfot"),
        SystemExit, r"exp\.toml: no row labelled \['sfot'\] \(did you mean \['soft'\]\?\); the rows are \['soft'\]",
        "Use the labels of the file's `[[rows]]`.",
    ),
    m.Mistake(
        "experiment-status-no-runs", m.CONFIG,
        "`pyro-attention experiment status` naming a runs folder that is not there",
        lambda: m.run_cli("experiment", "status", "--config",
                        m.work_file("exp.toml", '[shared]\n[[rows]]\nlabel = "a"\nmodel = "soft"\n'), "--out",
                        m.work_path("no-runs")),
        SystemExit, r"exit status 1: .*no-runs: no such runs folder \(no row of .*exp\.toml has started there\)",
        "Check `--out`: it is the folder the rows were trained in.",
    ),
    m.Mistake(
        "experiment-damaged-json", m.CONFIG,
        "a row's `result.json`, `trained.json` or `sittings.json` edited or cut short by hand",
        lambda: m.status_with("cut-runs", "sittings.json", '[{"wall_s": 12.5, "until'),
        SystemExit, r"exit status 1: .*cut-runs/a/sittings\.json: not readable as JSON \(Unterminated string",
        "Mend the file or remove it (the runner writes its own atomically; a removed `sittings.json` loses the wall "
        "time of earlier sittings, a removed `result.json` is evaluated again).",
    ),
    m.Mistake(
        "experiment-sittings-shape", m.CONFIG,
        "a row's `sittings.json` edited into JSON of another shape (an object, an entry without its numbers)",
        lambda: m.status_with("shape-runs", "sittings.json", '[{"wall_s": 12.5, "until_step": 40}, {"wall_s": "1 h"}]'),
        SystemExit, r'exit status 1: .*shape-runs/a/sittings\.json: not a list of sittings \(\{"wall_s": seconds, '
                    r'"until_step": step, \.\.\.\} each\): entry 1 is \{"wall_s": "1 h"\}',
        "Mend the entry (`wall_s` in seconds and `until_step` as numbers) or remove the file (losing the wall time "
        "of earlier sittings).",
    ),
    m.Mistake(
        "experiment-record-shape", m.CONFIG,
        "a row's `result.json` or `trained.json` edited into JSON of another shape (a list, an object lacking keys)",
        lambda: m.status_with("keys-runs", "trained.json", '{"epochs": 3, "best_epoch": 2}'),
        SystemExit, r"exit status 1: .*keys-runs/a/trained\.json: lacks 'best_val_ppl', 'stopped_early', 'steps', "
                    r"'target_tokens' and 1 more of the keys the runner writes there",
        "Mend the file or remove it: a removed `result.json` is evaluated again, a removed `trained.json` is written "
        "again from `last.pt` when the row resumes.",
    ),
    m.Mistake(
        "experiment-merge-unevaluated", m.CONFIG,
        "`pyro-attention experiment merge TABLE.json --out RUNS --rows ROW` for a row not yet evaluated",
        lambda: (m.work_file("merge-runs/a/history.csv", "kind,epoch,step\n"),
                 m.run_cli("experiment", "merge", m.work_path("table.json"), "--out", m.work_path("merge-runs"),
                           "--rows", "a")),
        SystemExit, r"exit status 1: .*merge-runs/a: no result\.json \(nor result-paused\.json\): the row has not "
                    r"been evaluated; 'pyro-attention experiment status' says where it stands",
        "Let the row finish (or `--evaluate-paused` it), then merge it; `experiment status` says where it stands.",
    ),
    m.Mistake(
        "checkpoint-nan-weights", m.CKPT, "a checkpoint whose weights hold NaN (it translated to garbage with exit 0)",
        lambda: m.run_cli("translate", str(m.damaged_checkpoint("nan")), str(m.work_file("in.txt", "3 4 5\n"))),
        SystemExit, r"exit status 1: .*nan\.pt: the weights \['tgt_embed\.weight'\] hold NaN or infinite values",
        "Training diverged: use an earlier checkpoint, a lower `--lr`.",
    ),
    m.Mistake(
        "cli-evaluate-not-a-checkpoint", m.CKPT, "`pyro-attention evaluate` on a file that is not a checkpoint",
        lambda: m.run_cli("evaluate", m.damaged_checkpoint("text"), "--quiet"),
        SystemExit, r"exit status 1: pyro-attention evaluate: error: .*notes\.pt: cannot be read as a checkpoint",
        "Give the `.pt` file (or run folder) written by `pyro-attention train`.",
    ),
    m.Mistake(
        "option-wrong-type", m.CONFIG, "a pair option of the wrong type (`--option kl_scale=abc`; it reached the pair "
        "untyped and failed inside it)",
        lambda: m.run_cli("train", "--model", "gaussian", "--option", "kl_scale=abc", "--quiet"),
        SystemExit, r"exit status 2: .*option kl_scale='abc' must be float, got str \(default 1.0\)",
        "Give a value of the type named (`--option kl_scale=0.01`).",
    ),
    m.Mistake(
        "cli-lr-out-of-range", m.CONFIG, "`pyro-attention train --lr 1e30` (it ended in an `OverflowError` traceback "
        "after an epoch)",
        lambda: m.run_cli("train", "--lr", "1e30", "--quiet", "--out", m.work_path("lr-run")),
        SystemExit, r"exit status 2: pyro-attention train: error: argument --lr: must be a number in \(0, 1\], "
        r"got '1e30'",
        "Use a learning rate in (0, 1]; 1e-3 to 3e-3 is typical for Adam.",
    ),
    m.Mistake(
        "config-file-lr-out-of-range", m.CONFIG, "a config file with `lr = 1e30`",
        lambda: m.run_cli("train", "--config", m.work_file("lr.json", json.dumps({"lr": 1e30})), "--quiet"),
        SystemExit, r"exit status 2: pyro-attention train: error: .*lr\.json: lr must be a learning rate in "
        r"\(0, 1\] .*got 1e\+30",
        "Fix the value in the file (the message names it).",
    ),
    m.Mistake(
        "training-diverged", m.CONFIG, "a run whose loss becomes NaN or infinite (too high a learning rate; it was a "
        "`FloatingPointError` traceback)",
        lambda: m.diverging_run(),
        SystemExit, r"exit status 1: pyro-attention train: error: training diverged: non-finite loss nan at step 1 "
        r"\(epoch 1\) with lr 0\.003; lower --lr",
        "Lower `--lr` (or `--clip-norm`) and start again with `--overwrite`, or `--resume` with the lower `--lr`.",
    ),
    m.Mistake(
        "out-folder-not-writable", m.WRITES, "`pyro-attention train --out` where no folder can be made (under a file; "
        "a read-only folder is the same: it was a raw `OSError` traceback)",
        lambda: m.run_cli("train", "--quiet", "--out", m.work_file("a-file", "x\n") / "run", *m.tiny_flags()),
        SystemExit, r"exit status 1: pyro-attention train: error: cannot write .*a-file/run/\.lock: Not a directory "
        r"\(errno 20\)",
        "Choose an `--out` you can write to.",
    ),
    m.Mistake(
        "evaluate-json-disk-full", m.WRITES, "`pyro-attention evaluate --json` onto a full disk (here `/dev/full`)",
        lambda: m.run_cli("evaluate", m.tiny_run(), "--no-bleu", "--quiet", "--json", "/dev/full"),
        SystemExit, r"exit status 1: pyro-attention evaluate: error: cannot write /dev/full: No space left on device "
        r"\(errno 28\)",
        "Free space on the disk, or write elsewhere.",
    ),
    m.Mistake(
        "demo-out-not-writable", m.WRITES, "`pyro-attention demo --out` that cannot be written (it failed only after "
        "a minute of training, when the figure was saved)",
        lambda: m.run_cli("demo", "--out", m.work_file("d-file", "x\n") / "demo"),
        SystemExit, r"exit status 1: pyro-attention demo: error: cannot write .*d-file/demo: Not a directory "
        r"\(errno 20\): .*d-file is a file, not a folder",
        "Give an `--out` folder you can write to.",
    ),
    m.Mistake(
        "checkpoint-vocab-not-text", m.VOCAB, "a checkpoint whose source vocabulary is not JSON text at all",
        lambda: m.run_cli("translate", m.damaged_checkpoint("vocab-type"), m.work_file("in2.txt", "3 4\n")),
        SystemExit, r"exit status 1: pyro-attention translate: error: checkpoint .*vocab-type\.pt: source vocabulary "
        r"is damaged: not a pyro_attention\.Vocab JSON document \(got int, not JSON text\)",
        "Use another checkpoint of the run.",
    ),
    m.Mistake(
        "demo-size-not-positive", m.NAMES, "`pyro-attention demo --train-size 0` (an untyped int: it failed inside "
        "the data generator)",
        lambda: m.run_cli("demo", "--train-size", "0"),
        SystemExit, r"exit status 2: pyro-attention demo: error: argument --train-size: must be an integer >= 1, "
        r"got '0'",
        "Give a positive size (`pyro-attention demo --help` lists every option with its default).",
    ),
    m.Mistake(
        "align-seed-negative", m.NAMES, "`pyro-attention align --seed -1`",
        lambda: m.run_cli("align", "--seed", "-1"),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --seed: must be an integer >= 0, got '-1'",
        "Give a seed >= 0.",
    ),
    m.Mistake(
        "align-agreement-one-direction", m.CONFIG, "`pyro-attention align --network hmm --models marginal --agreement` "
        "without `--both-directions`",
        lambda: m.run_cli("align", "--network", "hmm", "--models", "marginal", "--agreement"),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --agreement: --agreement trains both "
        r"directions together; add --both-directions",
        "Add `--both-directions` (agreement needs both), or drop `--agreement`.",
    ),
    m.Mistake(
        "align-text-without-out", m.CONFIG, "`pyro-attention align --src FILE --tgt FILE` without the links file",
        lambda: m.run_cli("align", "--src", m.work_file("t.src", "a b\n"), "--tgt", m.work_file("t.tgt", "x y\n")),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --out: linking a text of your own needs "
        r"--src, --tgt and --out \(the links file\)",
        "Add `--out links.txt`.",
    ),
    m.Mistake(
        "align-text-with-gold", m.CONFIG, "`pyro-attention align --src ... --gold-links FILE` (a gold set's option "
        "while linking a text)",
        lambda: m.run_cli("align", "--src", m.work_file("t.src", "a b\n"), "--tgt", m.work_file("t.tgt", "x y\n"),
                          "--out", m.work_path("links.txt"), "--gold-links", m.work_file("g.txt", "0-0\n")),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --gold-links: scores against a gold set; "
        r"linking a text of your own \(--src, --tgt\) takes no gold set",
        "Score against gold with the gold-set form (`--gold-src`, `--gold-tgt`, `--gold-links`), or drop it.",
    ),
    m.Mistake(
        "align-text-network", m.CONFIG, "`pyro-attention align --src ... --network seq2seq` (no exact posterior to "
        "link with)",
        lambda: m.run_cli("align", "--src", m.work_file("t.src", "a b\n"), "--tgt", m.work_file("t.tgt", "x y\n"),
                          "--out", m.work_path("links.txt"), "--network", "seq2seq"),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --network: linking a text needs an exact "
        r"posterior; choose from ibm1, hmm, got 'seq2seq'",
        "Leave `--network` out (the HMM recipe), or use `--network ibm1`.",
    ),
    m.Mistake(
        "align-threshold-without-text", m.CONFIG, "`pyro-attention align --threshold` with a gold set",
        lambda: m.run_cli("align", "--threshold", "0.4"),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --threshold: links a text of your own; "
        r"give --src and --tgt",
        "Drop `--threshold` (a gold-set run tunes its thresholds on held-out gold), or link a text with `--src`.",
    ),
    m.Mistake(
        "align-gibbs-without-text", m.CONFIG, "`pyro-attention align --gibbs-sweeps` with a gold set",
        lambda: m.run_cli("align", "--network", "hmm", "--gibbs-sweeps", "10"),
        SystemExit, r"exit status 2: pyro-attention align: error: argument --gibbs-sweeps: samples the links of a "
        r"text of your own; give --src and --tgt",
        "Drop `--gibbs-sweeps` for a gold-set run, or link a text with `--src` and `--tgt`.",
    ),
    m.Mistake(
        "align-text-empty-line", m.FILES, "`pyro-attention align --src FILE` with an empty line",
        lambda: m.run_cli("align", "--src", m.work_file("e.src", "a b\n\n"), "--tgt",
                          m.work_file("e.tgt", "x y\nz\n"), "--out", m.work_path("links.txt")),
        SystemExit, r"exit status 1: pyro-attention align: error: .*e\.src: line 2 is empty",
        "Remove the pair, or put a token on the line (an aligner has nothing to link in an empty sentence).",
    ),
    m.Mistake(
        "evaluate-hypotheses-without-bleu", m.CONFIG, "`pyro-attention evaluate --no-bleu --hypotheses FILE` (no file "
        "was written, without a word)",
        lambda: m.run_cli("evaluate", m.tiny_run(), "--no-bleu", "--hypotheses", m.work_path("hyps.txt")),
        SystemExit, r"exit status 2: .*argument --hypotheses: it goes with decoding, which --no-bleu skips",
        "Drop `--no-bleu` to decode, or `--hypotheses`.",
    ),
    m.Mistake(
        "translate-kmax-without-rule", m.CONFIG, "`pyro-attention translate --kmax K` without `--rule kmax` (K was "
        "ignored)",
        lambda: m.run_cli("translate", m.tiny_run(), m.work_file("in.txt", "3 4 5\n"), "--kmax", "3"),
        SystemExit, r"exit status 2: .*argument --kmax: K of the K-max rule; add --rule kmax",
        "Add `--rule kmax`, or drop `--kmax`.",
    ),
    m.Mistake(
        "evaluate-output-over-input", m.WRITES, "`pyro-attention evaluate --hypotheses` (or `--json`) naming one of "
        "the files it reads (it overwrote the source sentences)",
        lambda: m.run_cli("evaluate", m.tiny_run(), "--src-file", m.work_file("in.de", "3 4\n"), "--tgt-file",
                          m.work_file("in.en", "5 6\n"), "--hypotheses", m.work_path("in.de")),
        SystemExit, r"exit status 2: .*argument --hypotheses: .*in\.de is one of the files read",
        "Write the translations to a new file.",
    ),
]  # fmt: skip


test_mistake_gets_a_clear_error = m.mistake_test(CATALOGUE)
