"""Bad input to the data readers (text, corpora, vocabularies, gold alignments, scenes, batching): this layer's entries
of the bad-input catalogue, each a mistake committed once that must get a clear error
(:func:`tests.support.mistakes.check_mistake`; docs/troubleshooting.md lists every layer's)."""

from __future__ import annotations

import json

import pytest

from pyro_attention.data import make_region_qa
from pyro_attention.data.alignments import read_bitext, read_naacl, read_pharaoh
from pyro_attention.data.clevr import ClevrFormatError, read_scenes
from pyro_attention.data.corpora import data_dir, multi30k_paths
from pyro_attention.data.text import Vocab, bucket_batches, read_lines, read_parallel
from pyro_attention.data.translation import collate
from tests.support import mistakes as m

CATALOGUE: list[m.Mistake] = [
    m.Mistake(
        "corpus-old-mac-line-endings", m.FILES, "a corpus with old-Mac `\\r` line endings (it trained on 1 pair "
        "instead of 3)",
        lambda: read_parallel(*m.work_parallel("mac", "ein hund\reine katze\rein haus\r", "a dog\ra cat\ra house\r")),
        ValueError, r"mac\.src: line 1 holds a carriage return \(\\r\) inside it: the file has old-Mac line endings",
        "Convert the line endings to `\\n` (`tr '\\r' '\\n'`).",
    ),
    m.Mistake(
        "corpus-line-counts", m.FILES, "source and target files of a parallel corpus have different numbers of lines",
        lambda: read_parallel(*m.work_parallel("counts", "ein hund\neine katze\n", "a dog\n")),
        ValueError, r"counts\.src has 2 lines, .*counts\.tgt has 1 lines",
        "Line the files up (one sentence pair per line in both); check for a lost or extra line.",
    ),
    m.Mistake(
        "corpus-empty-line", m.FILES, "an empty (or whitespace-only) line in a parallel corpus",
        lambda: read_parallel(*m.work_parallel("empty", "ein hund\neine katze\n", "a dog\n   \n")),
        ValueError, r"empty\.tgt: line 2 is empty",
        "Remove the pair from both files (or fill in the missing sentence).",
    ),
    m.Mistake(
        "corpus-invalid-utf8", m.FILES, "a corpus line that is not valid UTF-8 (e.g. a Latin-1 file)",
        lambda: read_lines(m.work_file("latin1.de", b"ein hund\n" + "fährt\n".encode("latin-1"))),
        ValueError, r"latin1\.de: line 2 is not valid UTF-8",
        "Re-encode the file as UTF-8 (`iconv -f latin1 -t utf-8`).",
    ),
    m.Mistake(
        "corpus-missing-file", m.FILES, "a corpus file that does not exist",
        lambda: read_parallel(m.work_path("nope.src"), m.work_path("nope.tgt")),
        FileNotFoundError, r"nope\.src: no such file",
        "Check the path (relative paths are relative to the working directory).",
    ),
    m.Mistake(
        "corpus-not-gzip", m.FILES, "a file named `.gz` that is not gzip-compressed",
        lambda: read_lines(m.work_file("plain.de.gz", "ein hund\n")),
        ValueError, r"plain\.de\.gz: cannot be read as gzip",
        "Compress it (`gzip file`) or drop the `.gz` suffix.",
    ),
    m.Mistake(
        "corpus-max-len-not-positive", m.FILES, "`max_len=0` when reading a corpus",
        lambda: read_parallel(*m.work_parallel("ok", "ein hund\n", "a dog\n"), max_len=0),
        ValueError, r"max_len must be a positive integer or None, got 0",
        "Give a positive length, or `None` for no limit.",
    ),
    m.Mistake(
        "bitext-no-separator", m.FILES, "a `source ||| target` line without the separator",
        lambda: read_bitext(m.work_file("x.src-tgt", "ein hund ||| a dog\neine katze a cat\n")),
        ValueError, r"x\.src-tgt: line 2 has no '\|\|\|' separator",
        "Write every line as `source tokens ||| target tokens`.",
    ),
    m.Mistake(
        "data-dir-unset", m.DIRS, "a corpus on disk without `--data-dir` or `PYRO_ATTENTION_DATA`",
        lambda: m.without_data_env(lambda: data_dir(None)),
        FileNotFoundError, r"no data directory given: pass --data-dir PATH or set the PYRO_ATTENTION_DATA",
        "Pass `--data-dir PATH` or `export PYRO_ATTENTION_DATA=PATH`.",
    ),
    m.Mistake(
        "multi30k-missing-file", m.DIRS, "a language pair that the corpus folder lacks a file for",
        m.multi30k_layout,
        FileNotFoundError, r"multi30k/tok/val\.lc\.norm\.tok\.fr\.gz: no such file",
        "Choose a language (and split) that exists: Czech has no 2017 test sets.",
    ),
    m.Mistake(
        "multi30k-unknown-split", m.DIRS, "an unknown Multi30k split",
        lambda: multi30k_paths(m.WORK[0], "dev"),
        ValueError, r"unknown Multi30k split 'dev'; allowed: train, val, test_2016_flickr",
        "Use one of the listed splits.",
    ),
    m.Mistake(
        "clevr-scenes-missing", m.DIRS, "a CLEVR scene file that does not exist",
        lambda: read_scenes(m.work_path("CLEVR_val_scenes.json.gz")),
        FileNotFoundError, r"CLEVR_val_scenes\.json\.gz.*does not exist",
        "Point `--data-dir` at the folder holding `clevr/`.",
    ),
    m.Mistake(
        "clevr-scenes-not-json", m.DIRS, "a CLEVR scene file that is not JSON",
        lambda: read_scenes(m.work_gz("broken_scenes.json.gz", "{not json")),
        ClevrFormatError, r"broken_scenes\.json\.gz.*not valid JSON",
        "Download the scene file again; it is damaged.",
    ),
    m.Mistake(
        "vocab-file-not-vocab", m.VOCAB, "loading a vocabulary from a JSON file that is not one",
        lambda: Vocab.load(m.work_file("vocab.json", json.dumps({"hund": 4}))),
        ValueError, r"vocab\.json: not a pyro_attention\.Vocab JSON document",
        "Load a file written by `Vocab.save`.",
    ),
    m.Mistake(
        "vocab-id-out-of-range", m.VOCAB, "decoding an id that the vocabulary does not have",
        lambda: Vocab(["hund", "katze"]).decode([4, 99]),
        ValueError, r"Vocab\.decode: id 99 is out of range for vocabulary size 6",
        "Decode with the vocabulary the ids were made with.",
    ),
    m.Mistake(
        "vocab-encode-string", m.VOCAB, "encoding a sentence string instead of a token list",
        lambda: Vocab(["hund"]).encode("ein hund"),
        TypeError, r"Vocab\.encode expects a list of tokens, not a string",
        "Split first: `vocab.encode(sentence.split())`.",
    ),
    m.Mistake(
        "vocab-duplicate-token", m.VOCAB, "a vocabulary with a token twice (or a special token)",
        lambda: Vocab(["hund", "katze", "hund"]),
        ValueError, r"Vocab: 'hund' is a duplicate",
        "Deduplicate the token list (`Vocab.build` does).",
    ),
    m.Mistake(
        "vocab-max-size-too-small", m.VOCAB, "a vocabulary size limit below the four special tokens",
        lambda: Vocab.build([["a", "b"]], max_size=2),
        ValueError, r"Vocab\.build: max_size must be >= 4 \(the specials\), got 2",
        "Allow at least 4 entries (`<pad> <s> </s> <unk>`) plus the words.",
    ),
    m.Mistake(
        "gold-pharaoh-malformed", m.GOLD, "a Pharaoh gold line with a token that is not a link",
        lambda: read_pharaoh(m.work_file("bad.gold", "0-0 1-1\n0-0 2_2\n"), one_indexed=False),
        ValueError, r"bad\.gold: line 2: '2_2' is not a link",
        "Write links as `i-j` (sure) or `ipj` (possible).",
    ),
    m.Mistake(
        "gold-pharaoh-line-count", m.GOLD, "a gold file with another number of lines than sentence pairs",
        lambda: read_pharaoh(m.work_file("short.gold", "0-0\n1-1\n"), one_indexed=False, source_lengths=[2, 2, 2]),
        ValueError, r"short\.gold: 2 lines but 3 source lengths",
        "Give one gold line per sentence pair (an empty line for a pair without links).",
    ),
    m.Mistake(
        "gold-naacl-malformed", m.GOLD, "a NAACL gold line without `SNUM i j`",
        lambda: read_naacl(m.work_file("bad.wa", "1 1\n")),
        ValueError, r"bad\.wa: line 1: expected 'SNUM i j \[S\|P\] \[confidence\]', got '1 1'",
        "One link a line: sentence number, source position, target position, optional S/P.",
    ),
    m.Mistake(
        "gold-link-outside-source", m.GOLD, "a gold link to a source position past the end of the sentence",
        lambda: collate([([4, 5], [6, 7])], gold=[[0, 5]]),
        ValueError, r"collate: gold alignment 0 links target token 1 to source position 5, outside the 2 source "
        r"tokens",
        "Use 0-based source positions below the source length, or -1 for an unaligned token.",
    ),
    m.Mistake(
        "gold-link-count", m.GOLD, "a gold alignment with another number of links than target tokens",
        lambda: collate([([4, 5], [6])], gold=[[0, 1]]),
        ValueError, r"collate: gold alignment 0 has 2 links for 1 target tokens",
        "Give one source position (or -1) per target token.",
    ),
    m.Mistake(
        "empty-source-sentence", m.TENSORS, "a zero-length source sentence",
        lambda: collate([([4, 5], [6]), ([], [6, 7])]),
        ValueError, r"collate: sentence pair 1 has an empty source sentence",
        "Drop the sentence pair.",
    ),
    m.Mistake(
        "empty-target-sentence", m.TENSORS, "a zero-length target sentence",
        lambda: collate([([4, 5], [6]), ([7], [])]),
        ValueError, r"collate: sentence pair 1 has an empty target sentence",
        "Drop the sentence pair.",
    ),
    m.Mistake(
        "region-qa-no-examples", m.SIZES, "generating a synthetic region-QA split of no (or negative) size",
        lambda: make_region_qa(-1),
        ValueError, r"num_examples must be >= 1, got -1",
        "Ask for at least one example.",
    ),
    m.Mistake(
        "region-qa-bad-probability", m.SIZES, "an ambiguity that is not a probability",
        lambda: make_region_qa(3, ambiguity=2.0),
        ValueError, r"ambiguity must be a probability in \[0, 1\], got 2\.0",
        "Use a value in [0, 1].",
    ),
    m.Mistake(
        "bucket-batch-size-zero", m.SIZES, "length-bucketed batches of size 0",
        lambda: bucket_batches([[4]], [[5]], 0),
        ValueError, r"bucket_batches: batch_size must be >= 1, got 0",
        "Use batch_size >= 1.",
    ),
    m.Mistake(
        "vocab-file-not-json", m.VOCAB, "a vocabulary file that is not valid JSON (cut short)",
        lambda: Vocab.load(m.work_file("cut.json", Vocab(["hund"]).to_json()[:30])),
        ValueError, r"cut\.json: not valid JSON \(Unterminated string",
        "Write the vocabulary again with `Vocab.save`.",
    ),
    m.Mistake(
        "vocab-file-missing", m.VOCAB, "a vocabulary file that does not exist (a bare `FileNotFoundError`)",
        lambda: Vocab.load(m.work_path("no-vocab.json")),
        FileNotFoundError, r"no-vocab\.json: no such vocabulary file",
        "Check the path.",
    ),
    m.Mistake(
        "vocab-file-bad-token", m.VOCAB, "a vocabulary file with a token that is not a string",
        lambda: Vocab.load(m.work_file("num.json", Vocab(["hund"]).to_json().replace('"hund"', "7"))),
        ValueError, r"num\.json: Vocab: tokens must be non-empty strings, got 7",
        "Write the vocabulary with `Vocab.save` (tokens are strings).",
    ),
    # -- round two: marks inside files, values of the wrong kind -----------------------------------------------------
    m.Mistake(
        "corpus-bom-inside-file", m.FILES, "a byte-order mark inside a file (two files joined with `cat`; it was read "
        "as part of the first word)",
        lambda: read_lines(m.work_file("joined.en", "a dog\n\ufefftwo cats\n")),
        ValueError, r"joined\.en: line 2 holds a byte-order mark \(U\+FEFF\) at character 1: files joined with cat",
        "Remove the marks (`sed 's/\\xEF\\xBB\\xBF//g'`), or save each file without one before joining them.",
    ),
    m.Mistake(
        "collate-text-not-ids", m.TENSORS, "`collate` given sentences as text instead of token ids (a raw "
        "`too many dimensions 'str'`)",
        lambda: collate([("ein hund", "a dog")]),
        TypeError, r"collate: sentences\[0\] source must be token ids \(a list of ints\), got the text 'ein hund'",
        "Encode each side with its vocabulary first: `vocab.encode(text.split())`.",
    ),
    m.Mistake(
        "collate-not-a-pair", m.TENSORS, "`collate` given `None` (or anything else that is not a (source, target) "
        "pair) among the sentences",
        lambda: collate([([4, 5], [6]), None]),
        TypeError, r"collate: sentences\[1\] must be a \(source ids, target ids\) pair, got None",
        "Give a list of `(source ids, target ids)` pairs.",
    ),
    m.Mistake(
        "vocab-encode-none", m.VOCAB, "`Vocab.encode` given `None` among the tokens (it was encoded as `<unk>`)",
        lambda: Vocab(["a", "b"]).encode(["a", None]),
        TypeError, r"Vocab\.encode: tokens\[1\] must be a string \(one token\), got None \(NoneType\)",
        "Give a list of token strings (`line.split()`).",
    ),
    m.Mistake(
        "vocab-decode-text", m.VOCAB, "`Vocab.decode` given text instead of ids (a raw `invalid literal for int()`)",
        lambda: Vocab(["a", "b"]).decode("4 5"),
        TypeError, r"Vocab\.decode: ids must be token ids \(a list of ints\), got the text '4 5'",
        "Give a list (or tensor) of ids.",
    ),
    m.Mistake(
        "region-qa-count-not-whole", m.SIZES, "`make_region_qa` given a count that is not a whole number (NaN: a raw "
        "`zeros() takes 1 positional argument`)",
        lambda: make_region_qa(float("nan")),
        TypeError, r"make_region_qa: num_examples must be a whole number \(an int\), got nan \(float\)",
        "Give an int.",
    ),
    m.Mistake(
        "parallel-same-file", m.FILES, "the same file as the source and the target side (a copy-paste slip: the model "
        "learnt to copy)",
        lambda: read_parallel(m.work_file("both.de", "ein hund\n"), m.work_path("both.de")),
        ValueError, r"both\.de is given as both the source and the target side",
        "Give the target language's file for the target.",
    ),
    m.Mistake(
        "corpus-utf16", m.FILES, "a UTF-16 text file without a byte-order mark (its NUL bytes were read as part of "
        "every word)",
        lambda: read_lines(m.work_file("wide.en", "a dog\n".encode("utf-16-le"))),
        ValueError, r"wide\.en: line 1 holds a NUL byte at character 2: a binary file, or UTF-16 text",
        "Save the file as UTF-8 (`iconv -f UTF-16 -t UTF-8`).",
    ),
]  # fmt: skip


test_mistake_gets_a_clear_error = m.mistake_test(CATALOGUE)


def test_region_qa_region_counts_in_order():
    with pytest.raises(ValueError, match="num_regions must be"):
        make_region_qa(3, num_regions=(4, 2))
