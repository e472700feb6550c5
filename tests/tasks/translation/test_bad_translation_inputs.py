"""Bad input to translation (its config, corpora, checkpoints, training, evaluation and decoding): this layer's entries
of the bad-input catalogue, each a mistake committed once that must get a clear error
(:func:`tests.support.mistakes.check_mistake`; docs/troubleshooting.md lists every layer's)."""

from __future__ import annotations

import errno
import json
import os

import torch

from pyro_attention.files import WriteError
from pyro_attention.models import MarginalLikelihood
from pyro_attention.pair import RuleError
from pyro_attention.tasks.translation import (
    BeamSearch,
    TranslationConfig,
    evaluate,
    load_checkpoint,
    load_corpora,
    train,
    translate_lines,
)
from pyro_attention.tasks.translation.decoding import greedy, translate
from pyro_attention.tasks.translation.runner import run_experiment
from tests.support import mistakes as m

CATALOGUE: list[m.Mistake] = [
    m.Mistake(
        "corpus-all-pairs-too-long", m.FILES, "`max_len` so small that every training pair is dropped",
        lambda: load_corpora(
            m.tiny_config(
                data="parallel", max_len=1, train_size=None, val_size=None,
                train_src=str(m.work_file("long.src", "ein hund\neine katze\n")),
                train_tgt=str(m.work_file("long.tgt", "a dog\na cat\n")),
                val_src=str(m.work_file("v.src", "hund\n")), val_tgt=str(m.work_file("v.tgt", "dog\n")),
            ),
            log=None,
        ),
        ValueError, r"train split \(.*long\.src / .*long\.tgt\) holds no sentence pairs: all 2 pairs have a side "
        r"longer than max_len 1",
        "Raise `max_len` (`--max-len`).",
    ),
    m.Mistake(
        "parallel-missing-val-files", m.FILES, "`--data parallel` without validation files",
        lambda: m.tiny_config(data="parallel", train_src="a.src", train_tgt="a.tgt"),
        ValueError, r"data 'parallel' needs the paths --val-src, --val-tgt",
        "Give `--val-src` and `--val-tgt` (a held-out part of your corpus).",
    ),
    m.Mistake(
        "references-too-short", m.FILES, "a BLEU reference file with fewer lines than the source file",
        lambda: evaluate(
            m.tiny_run(), src_file=m.work_file("e.src", "a b\nc d\n"), tgt_file=m.work_file("e.tgt", "a b\nc d\n"),
            ref_file=m.work_file("e.ref", "a b\n"),
        ),
        ValueError, r"e\.ref: 1 reference lines, fewer than the 2 source lines",
        "Give the raw references of the same sentences, one a line.",
    ),
    m.Mistake(
        "data-dir-missing", m.DIRS, "`--data-dir` pointing to a folder that does not exist",
        lambda: load_corpora(m.tiny_config(data="multi30k", data_dir=str(m.work_path("no-such-data"))), log=None),
        FileNotFoundError, r"data directory .*no-such-data \(from --data-dir .*\) does not exist",
        "Fix the path.",
    ),
    m.Mistake(
        "corpus-folder-missing", m.DIRS, "a data directory without the corpus folder (`multi30k/`)",
        lambda: load_corpora(m.tiny_config(data="multi30k", data_dir=str(m.WORK[0])), log=None),
        FileNotFoundError, r"multi30k: no such directory \(expected the multi30k corpus under ",
        "Point `--data-dir` at the folder that holds `multi30k/` (or at `multi30k/` itself).",
    ),
    m.Mistake(
        "multi30k-unknown-language", m.DIRS, "an unknown Multi30k language",
        lambda: m.tiny_config(data="multi30k", src="xx"),
        ValueError, r"src must be one of de, en, fr, cs; got 'xx'",
        "Use one of the listed languages.",
    ),
    m.Mistake(
        "unknown-decode-rule", m.NAMES, "an unknown decoding rule",
        lambda: greedy(MarginalLikelihood(m.seq2seq_10_12()), torch.tensor([[4, 5]]), torch.tensor([[True, True]]),
                       "mean"),
        RuleError, r"rule must be one of \('marginal', 'soft', 'kmax'\), got 'mean'",
        "Use one of the listed rules.",
    ),
    m.Mistake(
        "rule-needs-categorical", m.NAMES, "decoding a soft-attention checkpoint with the `marginal` rule",
        lambda: translate_lines(m.tiny_run(), ["a b"], search=BeamSearch(rule="marginal")),
        RuleError, r"rule 'marginal' needs a categorical alignment; SoftAttention allows only 'soft'",
        "Use `--rule soft` for pairs without a categorical alignment (or leave `--rule` out).",
    ),
    m.Mistake(
        "unknown-split", m.NAMES, "evaluating an unknown split",
        lambda: evaluate(m.tiny_run(), "dev"),
        ValueError, r"split must be one of train, val, test; got 'dev'",
        "Use train, val or test (or `--src-file` / `--tgt-file`).",
    ),
    m.Mistake(
        "unknown-tokenizer", m.NAMES, "an unknown input tokeniser for `translate`",
        lambda: translate_lines(m.tiny_run(), ["a b"], tokenize="spacy"),
        ValueError, r"tokenize must be one of none, moses; got 'spacy'",
        "Use `none` (already tokenised) or `moses`.",
    ),
    m.Mistake(
        "config-unknown-key", m.CONFIG, "a configuration key that does not exist",
        lambda: TranslationConfig.from_dict({"epochz": 3}),
        ValueError,
        r"unknown config key\(s\) 'epochz' \(did you mean 'epochs'\?\); allowed keys: data, data_dir, src, tgt",
        "Use the suggested key or one of the listed keys (`-` and `_` are interchangeable).",
    ),
    m.Mistake(
        "config-file-unknown-key", m.CONFIG, "a config file with a key that does not exist",
        lambda: TranslationConfig.from_file(m.work_file("run.toml", 'model = "hard"\nbatchsize = 4\n')),
        ValueError,
        r"run\.toml: unknown config key\(s\) 'batchsize' \(did you mean 'batch_size'\?\); allowed keys: .*batch_size",
        "Use one of the listed keys.",
    ),
    m.Mistake(
        "config-wrong-type", m.CONFIG, "a config value of the wrong type",
        lambda: TranslationConfig.from_file(m.work_file("typed.json", json.dumps({"epochs": "ten"}))),
        ValueError, r"config key 'epochs' must be int, got 'ten'",
        "Write numbers as numbers, not strings.",
    ),
    m.Mistake(
        "config-bad-suffix", m.CONFIG, "a config file that is neither `.json` nor `.toml`",
        lambda: TranslationConfig.from_file(m.work_file("run.yaml", "epochs: 3\n")),
        ValueError, r"run\.yaml: a config file must end in \.json or \.toml, got '\.yaml'",
        "Write the config as JSON or TOML.",
    ),
    m.Mistake(
        "config-invalid-json", m.CONFIG, "a JSON config file with a syntax error",
        lambda: TranslationConfig.from_file(m.work_file("broken.json", "{epochs: 3}")),
        ValueError, r"broken\.json: not valid JSON \(Expecting property name enclosed in double quotes: line 1",
        "Fix the JSON at the reported line and column.",
    ),
    m.Mistake(
        "config-not-a-table", m.CONFIG, "a JSON config file that is a list, not a table",
        lambda: TranslationConfig.from_file(m.work_file("list.json", "[3]")),
        ValueError, r"list\.json: a config file holds one table of key = value pairs",
        'Write one object of `"key": value` pairs.',
    ),
    m.Mistake(
        "config-missing-file", m.CONFIG, "a config file that does not exist",
        lambda: TranslationConfig.from_file(m.work_path("none.json")),
        FileNotFoundError, r"none\.json: no such config file",
        "Check the path.",
    ),
    m.Mistake(
        "config-value-out-of-range", m.CONFIG, "a value outside its range (dropout 1.5)",
        lambda: TranslationConfig(dropout=1.5),
        ValueError, r"dropout must be in \[0, 1\), got 1\.5",
        "Use a value in the stated range.",
    ),
    m.Mistake(
        "config-option-of-another-model", m.CONFIG, "a pair option that the configured model does not have",
        lambda: TranslationConfig(model="soft", options={"kl_scale": 0.1}),
        ValueError, r"options: pair 'soft' has no option 'kl_scale'; its options: none",
        "Drop the option, or choose the model it belongs to.",
    ),
    m.Mistake(
        "config-option-of-another-network", m.CONFIG, "an LSTM size (`--encoder`) with `--network transformer`",
        lambda: TranslationConfig(network="transformer", encoder=128),
        ValueError, r"encoder: only network 'lstm' reads it, this run's network is 'transformer'; drop it, or choose "
        r"network 'lstm'",
        "Size the Transformer with `--embedding` (its width), `--layers`, `--heads` and `--feedforward`.",
    ),
    m.Mistake(
        "config-transformer-width-not-heads-multiple", m.CONFIG, "a Transformer width that the heads do not divide",
        lambda: TranslationConfig(network="transformer", embedding=64, heads=3),
        ValueError, r"embedding: the transformer's width must be even and a multiple of heads, got embedding 64 and "
        r"heads 3",
        "Choose `--heads` dividing `--embedding` (e.g. 4 or 8 for 256).",
    ),
    m.Mistake(
        "config-warmup-without-guide", m.CONFIG, "`warmup_steps` for a pair that has no warm-up guide",
        lambda: TranslationConfig(model="marginal", warmup_steps=5),
        ValueError, r"warmup_steps: model 'marginal' has no warm-up guide; only relaxed",
        "Use warm-up steps only with the listed pairs.",
    ),
    m.Mistake(
        "checkpoint-missing", m.CKPT, "a checkpoint path that does not exist",
        lambda: load_checkpoint(m.work_path("runs/none/best.pt")),
        FileNotFoundError, r"runs/none/best\.pt: no such checkpoint",
        "Check the path (`--out` of the training run).",
    ),
    m.Mistake(
        "checkpoint-empty-folder", m.CKPT, "a run folder without `best.pt` or `last.pt`",
        lambda: load_checkpoint(m.work_path("runs/empty").mkdir(parents=True, exist_ok=True)
                                or m.work_path("runs/empty")),
        FileNotFoundError, r"runs/empty: holds neither best\.pt nor last\.pt",
        "Point at the folder of a run that wrote a checkpoint.",
    ),
    m.Mistake(
        "checkpoint-not-a-checkpoint", m.CKPT, "a file that is not a checkpoint at all",
        lambda: load_checkpoint(m.damaged_checkpoint("text")),
        ValueError, r"notes\.pt: cannot be read as a checkpoint \(not a torch zip archive",
        "Give the `.pt` file written by `pyro-attention train`.",
    ),
    m.Mistake(
        "checkpoint-truncated", m.CKPT, "a truncated checkpoint (an interrupted copy)",
        lambda: load_checkpoint(m.damaged_checkpoint("truncated")),
        ValueError, r"truncated\.pt: cannot be read as a checkpoint \(not a torch zip archive: a truncated",
        "Copy the file again (checkpoints are written atomically, so the original is whole).",
    ),
    m.Mistake(
        "checkpoint-foreign", m.CKPT, "a torch file written by another program",
        lambda: load_checkpoint(m.damaged_checkpoint("foreign")),
        ValueError, r"foreign\.pt: not a pyro_attention\.translation\.checkpoint file",
        "Give a checkpoint written by `pyro-attention train`.",
    ),
    m.Mistake(
        "checkpoint-missing-entry", m.CKPT, "a checkpoint with an entry removed (it was a bare `KeyError`)",
        lambda: load_checkpoint(m.damaged_checkpoint("missing-entry")),
        ValueError, r"missing-entry\.pt: a damaged checkpoint: the entries \['tgt_vocab'\] are missing",
        "Use another checkpoint of the run (`best.pt` or `last.pt`).",
    ),
    m.Mistake(
        "checkpoint-weights-do-not-fit", m.CKPT, "a checkpoint whose weights do not fit the network of its config",
        lambda: load_checkpoint(m.damaged_checkpoint("weights")),
        ValueError, r"reshaped\.pt: SoftAttention: the saved weights of 'network' do not fit its Seq2Seq: 1 of "
                    r"another size \(tgt_embed\.weight is \(3, 3\) there, \(35, 8\) here\)",
        "The file was edited or mixed up; use the checkpoint as written.",
    ),
    m.Mistake(
        "resume-other-version", m.CKPT, "resuming a checkpoint written by another version of the package",
        lambda: train(m.tiny_config(out=str(m.old_version_run())), progress=False, resume=True, log=None),
        ValueError, r"old-version/last\.pt was written by pyro-attention 0\.0\.1, this is .*: resuming across "
        r"versions is refused",
        "Finish the run with the version that started it, or start afresh (evaluate and translate still read it).",
    ),
    m.Mistake(
        "resume-without-last", m.CKPT, "`--resume` into a folder without `last.pt`",
        lambda: train(m.tiny_config(out=str(m.work_path("fresh"))), progress=False, resume=True, log=None),
        FileNotFoundError, r"cannot resume: .*fresh/last\.pt does not exist \(train without --resume first\)",
        "Train without `--resume` first, or point `--out` at the run to continue.",
    ),
    m.Mistake(
        "resume-other-model", m.CKPT, "resuming a checkpoint with another model",
        lambda: train(m.tiny_config(out=str(m.tiny_run()), model="marginal"), progress=False, resume=True, log=None),
        ValueError, r"last\.pt does not belong to this run, refusing to resume: model: checkpoint 'soft', this "
        r"run 'marginal'",
        "Resume with the checkpoint's settings, or use another `--out` (or `--overwrite`).",
    ),
    m.Mistake(
        "resume-other-vocabulary", m.CKPT, "resuming with settings that build another vocabulary",
        lambda: train(m.tiny_config(out=str(m.tiny_run()), min_freq=2), progress=False, resume=True, log=None),
        ValueError, r"refusing to resume: .*source vocabulary: checkpoint \d+ entries, this run \d+",
        "Resume with the same data and vocabulary settings.",
    ),
    m.Mistake(
        "fresh-run-over-checkpoint", m.CKPT, "a fresh run into a folder that holds a checkpoint",
        lambda: train(m.tiny_config(out=str(m.tiny_run())), progress=False, log=None),
        FileExistsError, r"run already holds a checkpoint \(.*last\.pt\); pass --resume to continue it, "
        r"--overwrite to start afresh",
        "Pass `--resume`, `--overwrite`, or another `--out`.",
    ),
    m.Mistake(
        "decode-source-out-of-vocab", m.TENSORS, "decoding source ids >= the source vocabulary size",
        lambda: translate(MarginalLikelihood(m.seq2seq_10_12()), torch.tensor([[4, 5, 40]]), torch.ones(1, 3).bool()),
        ValueError, r"source\[0, 2\] = 40 is out of range for vocabulary size 10",
        "Encode with the checkpoint's source vocabulary.",
    ),
    m.Mistake(
        "decode-mask-shape", m.TENSORS, "decoding with a source mask of another shape",
        lambda: greedy(MarginalLikelihood(m.seq2seq_10_12()), torch.tensor([[4, 5]]), torch.tensor([[True]])),
        ValueError, r"source_mask must be a \(B, S\) = \(1, 2\) bool tensor, got \(1, 1\) torch\.bool",
        "Give `source_mask = source != 0`.",
    ),
    m.Mistake(
        "beam-size-zero", m.SIZES, "beam search with beam size 0",
        lambda: translate(MarginalLikelihood(m.seq2seq_10_12()), torch.tensor([[4, 5]]), torch.ones(1, 2).bool(), 0),
        ValueError, r"need beam_size >= 1, max_len >= 1, k >= 1, batch_size >= 1; got 0, 50, 5, 64",
        "Use beam_size >= 1 (1 is greedy).",
    ),
    m.Mistake(
        "evaluate-negative-kmax", m.SIZES, "evaluation with a negative K",
        lambda: evaluate(m.tiny_run(), "val", kmax=-1, bleu=False),
        ValueError, r"evaluate: kmax must be >= 0 \(0: no K-max perplexity\), got -1",
        "Use kmax >= 0 (0 skips the K-max perplexity).",
    ),
    m.Mistake(
        "beam-search-no-beam", m.SIZES, "decoding settings with a beam of width 0",
        lambda: BeamSearch(beam=0),
        ValueError, r"BeamSearch: beam must be an int >= 1, got 0",
        "Use beam >= 1 (1 is greedy).",
    ),
    m.Mistake(
        "translate-lines-string", m.TENSORS, "`translate_lines` given one string instead of a list of sentences (it "
        "translated each character)",
        lambda: translate_lines(m.tiny_run(), "3 4 5"),
        TypeError, r"translate_lines: lines must be a list .* got one str '3 4 5'; wrap a single sentence in a list",
        "Pass a list of sentences: `translate_lines(ckpt, [\"3 4 5\"])`.",
    ),
    m.Mistake(
        "min-freq-empties-vocabulary", m.VOCAB, "a `--min-freq` so high that a vocabulary holds only the specials (it "
        "trained a model of `<unk>`s)",
        lambda: train(m.tiny_config(out=str(m.work_path("minfreq")), min_freq=1000), progress=False, log=None),
        ValueError, r"min_freq: no source word of synthetic train .* occurs 1000 times or more.*lower --min-freq "
        r"\(the most frequent source word occurs \d+ times\)",
        "Lower `--min-freq` below the count the message gives.",
    ),
    m.Mistake(
        "run-folder-busy", m.CKPT, "a second `train` into a folder another process is training into (they interleaved "
        "last.pt, best.pt and history.csv)",
        lambda: m.busy_folder_run(),
        FileExistsError, r"is being written by another training process \(PID 4242, lock .*\.lock\)",
        "Wait for the other run, stop it, or use another `--out`.",
    ),
    m.Mistake(
        "config-lr-out-of-range", m.CONFIG, "`TranslationConfig(lr=1e30)` (or `train` with it, from Python)",
        lambda: TranslationConfig(lr=1e30),
        ValueError, r"lr must be a learning rate in \(0, 1\] .*got 1e\+30",
        "Use a learning rate in (0, 1].",
    ),
    m.Mistake(
        "checkpoint-write-fails", m.WRITES, "a checkpoint write that torch's zip writer cannot finish (a full disk; it "
        "was `RuntimeError: [enforce fail at inline_container.cc]`)",
        lambda: m.failing_checkpoint_write(),
        WriteError, r"cannot write .*full/last\.pt: torch could not write it \(unexpected pos 704 vs 598\); "
        r"0\.0 MiB free on its disk \(full\)",
        "Free space on the disk (or use another `--out`); the previous checkpoint is intact.",
    ),
    m.Mistake(
        "checkpoint-read-only", m.WRITES, "a checkpoint written into a read-only folder or file system",
        lambda: m.failing_checkpoint_write(OSError(errno.EROFS, os.strerror(errno.EROFS))),
        WriteError, r"cannot write .*full/last\.pt: Read-only file system \(errno 30\)",
        "Use an `--out` on a writable file system; the previous checkpoint is intact.",
    ),
    m.Mistake(
        "checkpoint-vocab-damaged", m.VOCAB, "a checkpoint whose target vocabulary JSON is damaged (the message named "
        "neither the file nor the vocabulary)",
        lambda: load_checkpoint(m.damaged_checkpoint("vocab-json")),
        ValueError, r"checkpoint .*vocab-json\.pt: target vocabulary is damaged: not valid JSON \(",
        "Use another checkpoint of the run (`best.pt` or `last.pt`), or the original file.",
    ),
    m.Mistake(
        "translate-lines-none", m.FILES, "`translate_lines` given `None` among the lines",
        lambda: translate_lines(m.tiny_run(), ["3 4 5", None]),
        TypeError, r"translate_lines: lines\[1\] must be a string \(one sentence\), got None \(NoneType\)",
        "Give a list of strings (an empty string for an empty line).",
    ),
    m.Mistake(
        "evaluate-size-not-whole", m.SIZES, "`evaluate` given a size that is not a whole number",
        lambda: evaluate(m.tiny_run(), "val", size=2.5, bleu=False),
        TypeError, r"evaluate: size must be a whole number \(an int\), got 2\.5 \(float\)",
        "Give an int, or `None` for all.",
    ),
    # -- round two: options without their partner, resuming with another start, weights that do not fit ------------
    m.Mistake(
        "evaluate-references-without-files", m.CONFIG, "`evaluate(ref_file=...)` on a split of the corpus (the "
        "references were ignored)",
        lambda: evaluate(m.tiny_run(), "val", ref_file=m.work_file("refs.txt", "a b\n"), bleu=False),
        ValueError, r"ref_file: .*refs\.txt holds the references of --src-file / --tgt-file; a split of the corpus "
                    r"has its own",
        "Give `src_file` and `tgt_file` with it, or drop `ref_file`.",
    ),
    m.Mistake(
        "resume-with-another-init-from", m.CKPT, "`--resume` with an `--init-from` the run did not start from (it "
        "was ignored)",
        lambda: train(m.tiny_config(out=str(m.tiny_run()), epochs=2, init_from=str(m.tiny_run() / "best.pt")),
                      resume=True, progress=False, log=None),
        ValueError, r"init_from: a resumed run continues from its last\.pt; --init-from .*best\.pt only starts a fresh "
                    r"run's weights",
        "Drop `--init-from`, or start afresh with `--overwrite`.",
    ),
    m.Mistake(
        "init-from-other-sizes", m.CKPT, "`--init-from` a checkpoint of other sizes (PyTorch's raw `size mismatch` "
        "text)",
        lambda: train(m.tiny_config(out=str(m.work_path("wide")), embedding=12,
                                    init_from=str(m.tiny_run() / "last.pt")), progress=False, log=None),
        ValueError, r"last\.pt: init_from: weights \d+ of another size \(src_embed\.weight is \(\d+, 8\) there, "
                    r"\(\d+, 12\) here",
        "Give this run the checkpoint's sizes (the message lists them as flags).",
    ),
    m.Mistake(
        "experiment-max-epochs-while-evaluating", m.CONFIG, "`experiment run --evaluate-paused --max-epochs N` (it "
        "trains nothing, so N was ignored)",
        lambda: run_experiment(m.work_file("e.toml", '[shared]\n[[rows]]\nlabel = "a"\nmodel = "soft"\n'),
                               m.work_path("runs-e"), max_epochs=1, evaluate_paused=True),
        ValueError, r"max_epochs: 1 epochs of training, but --evaluate-paused trains nothing",
        "Drop one of them: evaluate what the rows have reached, or train on.",
    ),
]  # fmt: skip


test_mistake_gets_a_clear_error = m.mistake_test(CATALOGUE)
