"""Text readers, vocabularies, bucketed batches, corpus paths, subwords and the synthetic translation task."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
import torch

from pyro_attention.data import (
    ParallelCorpus,
    Vocab,
    bucket_batches,
    bucket_indices,
    make_synthetic_translation,
    read_lines,
    read_parallel,
    translate_synthetic,
    undo_bpe,
    unescape_moses,
)
from pyro_attention.data.corpora import DATA_ENV, data_dir, iwslt14_paths, multi30k_paths
from pyro_attention.data.subword import apply_subword, train_subword
from pyro_attention.data.synthetic_translation import synthetic_lexicons, word_kind
from pyro_attention.data.translation import BOS, EOS, PAD, SPECIALS, UNK
from tests.support.paths import REPO


def write(path: Path, text: str | bytes) -> Path:
    data = text.encode("utf-8") if isinstance(text, str) else text
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


# ----------------------------------------------------------------------------------------------------------------
# read_lines / read_parallel


@pytest.mark.parametrize("name", ["a.txt", "a.txt.gz"])
def test_read_lines_plain_and_gz(tmp_path, name):
    path = write(tmp_path / name, "ein  Haus \nzwei\r\n\nüber\tall\n")
    assert read_lines(path) == ["ein  Haus ", "zwei", "", "über\tall"]


def test_read_lines_no_final_newline_bom_and_unicode_separators(tmp_path):
    path = write(tmp_path / "b.txt", "\ufeffa\u2028b\nc\x85d")
    assert read_lines(path) == ["a\u2028b", "c\x85d"]  # split on \n only; the BOM is dropped


@pytest.mark.parametrize("name", ["bad.txt", "bad.txt.gz"])
def test_read_lines_invalid_utf8_names_file_and_line(tmp_path, name):
    path = write(tmp_path / name, b"ok\nalso ok\nbro\xffken\nfine\n")
    with pytest.raises(ValueError, match=rf"{name}: line 3 is not valid UTF-8"):
        read_lines(path)


def test_read_lines_missing_and_not_gzip(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        read_lines(tmp_path / "nope.txt")
    (tmp_path / "fake.gz").write_bytes(b"plain text\n")
    with pytest.raises(ValueError, match="fake.gz"):
        read_lines(tmp_path / "fake.gz")


def test_read_parallel_tokens_and_lowercase(tmp_path):
    src = write(tmp_path / "s.de.gz", "Ein  Mann .\nzwei Hunde \n")
    tgt = write(tmp_path / "t.en", "A man .\ntwo dogs\n")
    corpus = read_parallel(src, tgt)
    assert isinstance(corpus, ParallelCorpus)
    assert corpus.source == [["Ein", "Mann", "."], ["zwei", "Hunde"]]  # no empty token from the double space
    assert corpus.target == [["A", "man", "."], ["two", "dogs"]]
    assert corpus.dropped == 0 and corpus.paths == (src, tgt) and corpus.lines == [1, 2]
    assert read_parallel(src, tgt, lowercase=True).source[0] == ["ein", "mann", "."]


def test_read_parallel_mismatched_counts(tmp_path):
    src = write(tmp_path / "s.txt", "a\nb\nc\n")
    tgt = write(tmp_path / "t.txt", "x\ny\n")
    with pytest.raises(ValueError, match=r"s\.txt has 3 lines.*t\.txt has 2 lines"):
        read_parallel(src, tgt)


@pytest.mark.parametrize("side", ["source", "target"])
def test_read_parallel_empty_line(tmp_path, side):
    good, bad = "a\nb\nc\n", "a\nb\n   \n"
    src = write(tmp_path / "s.txt", bad if side == "source" else good)
    tgt = write(tmp_path / "t.txt", bad if side == "target" else good)
    name = "s.txt" if side == "source" else "t.txt"
    with pytest.raises(ValueError, match=rf"{name}: line 3 is empty"):
        read_parallel(src, tgt)


def test_read_parallel_max_len_drops_and_counts(tmp_path):
    src = write(tmp_path / "s.txt", "a b\na b c d\na\na b c\n")
    tgt = write(tmp_path / "t.txt", "x y\nx\nx y z w\nx y z\n")
    corpus = read_parallel(src, tgt, max_len=3)
    assert corpus.source == [["a", "b"], ["a", "b", "c"]]
    assert corpus.dropped == 2 and corpus.total == 4 and corpus.lines == [1, 4]
    assert "dropped 2 of 4 pairs longer than 3" in corpus.summary()
    with pytest.raises(ValueError, match="max_len"):
        read_parallel(src, tgt, max_len=0)


def test_undo_bpe_and_unescape_moses():
    assert undo_bpe("the tal@@ ent@@ ed ones") == "the talented ones"
    assert undo_bpe("an unfinished wo@@") == "an unfinished wo"
    assert undo_bpe("no joiners here") == "no joiners here"
    text = "it &apos;s &quot;big&quot; &amp; &lt;b&gt; &#124; &#91;x&#93;"
    assert unescape_moses(text) == "it 's \"big\" & <b> | [x]"
    assert unescape_moses("&amp;apos;") == "&apos;"  # one pass: an escaped escape stays an escape


# ----------------------------------------------------------------------------------------------------------------
# Vocab


def test_vocab_order_min_freq_max_size_unk():
    sents = [["b", "a", "c", "a"], ["c", "d", "b", "a"], ["e", "<unk>"]]
    v = Vocab.build(sents)
    assert v.itos[:4] == SPECIALS
    assert v.itos[4:] == ["a", "b", "c", "d", "e"]  # a:3, then b, c (2 each, alphabetical), then d, e (1 each)
    assert len(v) == 9 and "a" in v and "z" not in v and "<pad>" in v
    assert Vocab.build(sents, min_freq=2).itos[4:] == ["a", "b", "c"]
    assert Vocab.build(sents, max_size=6).itos[4:] == ["a", "b"]
    assert v.encode(["a", "zz", "e"]) == [4, UNK, 8]
    assert v.decode([BOS, 4, UNK, 8, EOS, 5, PAD]) == ["a", "<unk>", "e"]
    assert v.decode(torch.tensor([BOS, 4, EOS, PAD]), strip_specials=False) == ["<s>", "a", "</s>", "<pad>"]
    with pytest.raises(ValueError, match="out of range"):
        v.decode([len(v)])
    with pytest.raises(ValueError, match="min_freq"):
        Vocab.build(sents, min_freq=0)
    with pytest.raises(ValueError, match="max_size"):
        Vocab.build(sents, max_size=2)
    with pytest.raises(TypeError):
        v.encode("a b")
    with pytest.raises(ValueError, match="duplicate"):
        Vocab(["a", "a"])


def test_vocab_build_is_deterministic_under_input_order():
    sents = [["x", "y", "z", "y"], ["z", "w"]]
    assert Vocab.build(sents) == Vocab.build(list(reversed(sents)))


def test_vocab_json_round_trip(tmp_path):
    v = Vocab.build([["über", "straße", "über"], ["a"]])
    assert Vocab.from_json(v.to_json()) == v
    v.save(tmp_path / "v.json")
    w = Vocab.load(tmp_path / "v.json")
    assert w == v and w.itos == v.itos and w.encode(["straße"]) == v.encode(["straße"])
    (tmp_path / "bad.json").write_text('{"itos": ["a"]}')
    with pytest.raises(ValueError, match="bad.json"):
        Vocab.load(tmp_path / "bad.json")


# ----------------------------------------------------------------------------------------------------------------
# Bucketed batches


def _toy_ids(n=23, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = [[4 + i] + torch.randint(4, 50, (int(torch.randint(0, 6, (1,), generator=g)),), generator=g).tolist()
           for i in range(n)]
    tgt = [torch.randint(4, 50, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist()
           for _ in range(n)]
    return src, tgt


@pytest.mark.parametrize("shuffle", [False, True])
def test_bucket_batches_cover_every_pair_once_sorted(shuffle):
    src, tgt = _toy_ids()
    batches = bucket_batches(src, tgt, 4, shuffle=shuffle, generator=torch.Generator().manual_seed(1))
    assert [len(b) for b in batches].count(4) == 5 and sum(len(b) for b in batches) == len(src)
    seen = []
    keys = []
    for b in batches:
        b.validate()
        for row in range(len(b)):
            i = int(b.source[row, 0]) - 4  # the first source token identifies the pair
            seen.append(i)
            s_len, t_len = int(b.source_mask[row].sum()), int(b.target_mask[row].sum())
            assert s_len == len(src[i]) and t_len == len(tgt[i]) + 1
            assert b.source[row, :s_len].tolist() == src[i]
            assert b.target[row, :t_len].tolist() == [*tgt[i], EOS]
            keys.append((s_len, t_len))
    assert sorted(seen) == list(range(len(src)))
    if not shuffle:
        assert keys == sorted(keys)  # sorted by source length, then target length
    else:
        for b in batches:  # within a batch the order is still sorted
            k = list(zip(b.source_mask.sum(1).tolist(), b.target_mask.sum(1).tolist(), strict=True))
            assert k == sorted(k)


def test_bucket_batches_shuffle_is_seeded_and_gold_travels():
    src, tgt = _toy_ids()
    gold = [[min(j, len(s) - 1) for j in range(len(t))] for s, t in zip(src, tgt, strict=True)]
    a = bucket_indices(src, tgt, 3, shuffle=True, generator=torch.Generator().manual_seed(5))
    b = bucket_indices(src, tgt, 3, shuffle=True, generator=torch.Generator().manual_seed(5))
    plain = bucket_indices(src, tgt, 3)
    assert a == b and sorted(a) == sorted(plain)
    batches = bucket_batches(src, tgt, 3, gold=gold)
    for idx, batch in zip(plain, batches, strict=True):
        for row, i in enumerate(idx):
            assert batch.gold[row, : len(gold[i])].tolist() == gold[i]
            assert batch.gold[row, len(gold[i])].item() == -1  # </s> is unaligned
    with pytest.raises(ValueError, match="batch_size"):
        bucket_batches(src, tgt, 0)
    with pytest.raises(ValueError, match="source"):
        bucket_batches(src, tgt[:-1], 2)


# ----------------------------------------------------------------------------------------------------------------
# Paths


def test_data_dir_errors(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match=rf"--data-dir.*{DATA_ENV}"):
        data_dir(None)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data_dir(tmp_path / "missing")
    assert data_dir(str(tmp_path)) == tmp_path
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert data_dir(None) == tmp_path
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "gone"))
    with pytest.raises(FileNotFoundError, match=rf"{DATA_ENV}=.*gone"):
        data_dir(None)


def test_corpus_paths_layout_and_errors(tmp_path):
    m = tmp_path / "multi30k"
    (m / "tok").mkdir(parents=True)
    (m / "raw").mkdir()
    for lang in ("de", "en"):
        write(m / "tok" / f"val.lc.norm.tok.{lang}.gz", "x\n")
        write(m / "raw" / f"val.{lang}.gz", "X\n")
    assert multi30k_paths(tmp_path, "val", "de", "en") == (
        m / "tok" / "val.lc.norm.tok.de.gz", m / "tok" / "val.lc.norm.tok.en.gz")
    assert multi30k_paths(m, "val", "en", "de", tokenized=False) == (m / "raw" / "val.en.gz", m / "raw" / "val.de.gz")
    with pytest.raises(ValueError, match="test_2016_flickr"):  # lists the allowed splits
        multi30k_paths(tmp_path, "test")
    with pytest.raises(ValueError, match="de, en, fr, cs"):
        multi30k_paths(tmp_path, "val", "de", "xx")
    with pytest.raises(FileNotFoundError, match=r"val\.lc\.norm\.tok\.fr\.gz"):
        multi30k_paths(tmp_path, "val", "de", "fr")
    i = tmp_path / "iwslt14-de-en"
    i.mkdir()
    for name in ("valid.de.gz", "valid.en.gz", "valid.de.bpe.gz", "valid.en.bpe.gz"):
        write(i / name, "x\n")
    assert iwslt14_paths(tmp_path, "valid") == (i / "valid.de.gz", i / "valid.en.gz")
    assert iwslt14_paths(i, "valid", bpe=True) == (i / "valid.de.bpe.gz", i / "valid.en.bpe.gz")
    with pytest.raises(ValueError, match="valid, test"):
        iwslt14_paths(tmp_path, "train")
    with pytest.raises(FileNotFoundError, match=r"test\.de\.gz"):
        iwslt14_paths(tmp_path, "test")


# ----------------------------------------------------------------------------------------------------------------
# Subwords


@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_subword_round_trip(model):
    pytest.importorskip("tokenizers")
    words = "the talented talent talks about a talk on talented cats that sat on the mat".split()
    sents = [words[k: k + 5] for k in range(len(words) - 4)] * 5
    tok = train_subword(sents, 40, model=model)
    sentence = ["the", "talented", "cats", "talk"]
    pieces = apply_subword(tok, sentence)
    assert len(pieces) >= len(sentence) and not pieces[-1].endswith("@@")
    assert undo_bpe(" ".join(pieces)) == " ".join(sentence)
    assert apply_subword(tok, []) == []
    with pytest.raises(ValueError, match="model"):
        train_subword(sents, 40, model="nope")


# ----------------------------------------------------------------------------------------------------------------
# Synthetic translation


def test_synthetic_is_deterministic():
    a = make_synthetic_translation(50, seed=3)
    b = make_synthetic_translation(50, seed=3)
    c = make_synthetic_translation(50, seed=4)
    assert (a.source, a.target, a.gold) == (b.source, b.target, b.gold)
    assert a.source != c.source
    # switching rules off changes targets, not the sampled sources
    assert make_synthetic_translation(50, seed=3, context=False, reorder=False).source == a.source


def test_synthetic_docstring_example():
    target, gold = translate_synthetic("s5 s6 s0 s7 s9 s2".split())
    assert target == ["t5a", "t5b", "t6e", "t0", "t2e", "t9a", "t9b", "t7"]
    assert gold == [0, 0, 1, 2, 5, 4, 4, 3]


def test_synthetic_gold_consistent_with_rules():
    data = make_synthetic_translation(300, seed=0, vocab_size=16, min_len=2, max_len=9, marker_prob=0.2)
    kinds_seen = set()
    for src, tgt, gold in zip(data.source, data.target, data.gold, strict=True):
        assert 2 <= len(src) <= 9 and len(tgt) == len(gold)
        assert all(0 <= g < len(src) for g in gold)
        idx = [int(w[1:]) for w in src]
        # every source word is translated exactly once, into one or (fan-out) two adjacent tokens
        for j, i in enumerate(idx):
            kind = word_kind(i)
            kinds_seen.add(kind)
            positions = [k for k, g in enumerate(gold) if g == j]
            toks = [tgt[k] for k in positions]
            if kind == "fanout":
                assert toks == [f"t{i}a", f"t{i}b"] and positions[1] == positions[0] + 1
            elif kind == "context":
                nxt = idx[j + 1] if j + 1 < len(idx) else 0
                assert toks == [f"t{i}{'o' if nxt % 2 else 'e'}"]
            else:
                assert toks == [f"t{i}"]
        # reordering: gold (collapsed over fan-outs) is increasing up to the first marker, and each marker is
        # followed by the rest of its segment in decreasing source order
        order = [g for k, g in enumerate(gold) if k == 0 or gold[k - 1] != g]
        assert sorted(order) == list(range(len(src)))
        markers = [j for j, i in enumerate(idx) if i == 0]
        bounds = [*markers, len(src)]
        first = markers[0] if markers else len(src)
        assert order[:first] == list(range(first))
        expected = list(range(first))
        for m, end in zip(bounds[:-1], bounds[1:], strict=True):
            expected += [m, *range(end - 1, m, -1)]
        assert order == expected
    assert kinds_seen == {"marker", "fanout", "context", "plain"}


def test_synthetic_batches_carry_gold():
    data = make_synthetic_translation(40, seed=1)
    src_vocab, tgt_vocab = data.vocabs()
    lex_src, lex_tgt = synthetic_lexicons(data.vocab_size)
    assert len(src_vocab) == len(lex_src) + 4 and len(tgt_vocab) == len(lex_tgt) + 4
    batches = data.batches(8, shuffle=True, generator=torch.Generator().manual_seed(0))
    assert sum(len(b) for b in batches) == 40
    for b in batches:
        b.validate(len(src_vocab), len(tgt_vocab))
        assert b.gold is not None
        assert ((b.gold >= 0) == (b.target_mask & (b.target != EOS))).all()
        assert (b.gold < b.source_mask.sum(1, keepdim=True)).all()
        for row in range(len(b)):
            src = src_vocab.decode(b.source[row])
            k = data.source.index(src)  # sources identify pairs well enough to look the gold up
            assert tgt_vocab.decode(b.target[row]) == data.target[k]
            assert b.gold[row, : len(data.gold[k])].tolist() == data.gold[k]
    # no <unk>: the vocabularies cover the full lexicons
    assert all(UNK not in ids for ids in data.encode()[1])


# ----------------------------------------------------------------------------------------------------------------
# The real data beside the project (skipped when absent)


def _real_data() -> Path:
    here = REPO.parent / "shared" / "data"
    if here.is_dir():
        return here
    env = os.environ.get(DATA_ENV)
    if env and Path(env).is_dir():
        return Path(env)
    pytest.skip(f"real data not found at {here} and {DATA_ENV} is not set to an existing folder")


def _real_multi30k(split: str) -> tuple[Path, Path]:
    """The tokenised de-en files of a real Multi30k split (the test is skipped without them)."""
    try:
        return multi30k_paths(_real_data(), split, "de", "en")
    except FileNotFoundError as e:
        pytest.skip(f"Multi30k not available: {e}")


def test_real_multi30k_val():
    corpus = read_parallel(*_real_multi30k("val"))
    assert len(corpus) == 1014 and corpus.dropped == 0
    raw = multi30k_paths(_real_data(), "val", "de", "en", tokenized=False)
    assert [len(read_lines(p)) for p in raw] == [1014, 1014]


def test_real_multi30k_train_double_space_and_vocab_sizes():
    _, en = _real_multi30k("train")
    line = read_lines(en)[16216]
    assert "  " in line and "" not in line.split()
    corpus = read_parallel(*_real_multi30k("train"))
    # the word vocabularies of the OpenNMT-py peer (benchmarks/peer.py: min frequency 2, 4 specials included)
    assert (len(Vocab.build(corpus.source, min_freq=2)), len(Vocab.build(corpus.target, min_freq=2))) == (7859, 5921)


def test_real_iwslt14_valid():
    root = _real_data()
    try:
        paths = iwslt14_paths(root, "valid")
        bpe_paths = iwslt14_paths(root, "valid", bpe=True)
    except FileNotFoundError as e:
        pytest.skip(f"IWSLT14 not available: {e}")
    corpus = read_parallel(*paths, max_len=50)
    assert corpus.total == 7282 and corpus.dropped == 309  # lines reach 143 (de) / 167 (en) tokens
    words, pieces = read_lines(paths[1]), read_lines(bpe_paths[1])
    assert len(pieces) == 7282
    assert all(undo_bpe(p) == w for p, w in zip(pieces, words, strict=True))
