"""Gold alignment readers and the Alignment Error Rate, on hand-made files and on the real gold data."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from pyro_attention.aer import AERResult, alignment_error_rate, intersect, links_from_probs, symmetrize, union
from pyro_attention.data import (
    DroppedLink,
    GoldAlignment,
    invert,
    read_bitext,
    read_naacl,
    read_parallel,
    read_pharaoh,
)
from tests.support.paths import REPO

# ----------------------------------------------------------------------------------------------------------------
# The worked example
#
# Two sentence pairs, 0-indexed (source_pos, target_pos):
#   pair 1: S = {(0,0), (1,1)}, possible-only {(1,2)}    -> P = {(0,0), (1,1), (1,2)}
#           A = {(0,0), (1,2), (2,2)}
#           A∩S = {(0,0)} (1)      A∩P = {(0,0), (1,2)} (2)
#   pair 2: S = {(0,1)}, no possible links              -> P = S = {(0,1)}
#           A = {(0,1), (1,0)}
#           A∩S = {(0,1)} (1)      A∩P = {(0,1)} (1)
# Corpus: |A| = 5, |S| = 3, |P| = 4, |A∩S| = 2, |A∩P| = 3
#   precision = |A∩P| / |A| = 3/5 = 0.6
#   recall    = |A∩S| / |S| = 2/3
#   AER       = 1 - (|A∩S| + |A∩P|) / (|A| + |S|) = 1 - (2 + 3) / (5 + 3) = 3/8 = 0.375

WORKED_GOLD = [
    GoldAlignment({(0, 0), (1, 1)}, {(1, 2)}),
    GoldAlignment({(0, 1)}),
]
WORKED_PRED = [{(0, 0), (1, 2), (2, 2)}, {(0, 1), (1, 0)}]


def write(path: Path, text: str, bom: bool = False) -> Path:
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


def test_worked_example():
    r = alignment_error_rate(WORKED_PRED, WORKED_GOLD)
    assert isinstance(r, AERResult)
    assert (r.num_predicted, r.num_sure, r.num_possible) == (5, 3, 4)
    assert r.precision == pytest.approx(0.6)
    assert r.recall == pytest.approx(2 / 3)
    assert r.aer == pytest.approx(0.375)
    assert "AER 37.50" in str(r)


def test_aer_edge_cases():
    gold = [GoldAlignment({(0, 0), (1, 1)}, {(1, 0)})]
    perfect = alignment_error_rate([{(0, 0), (1, 1)}], gold)
    assert (perfect.aer, perfect.precision, perfect.recall) == (0.0, 1.0, 1.0)
    # Possible links are not penalised and not required: A = S ∪ P still has AER 0.
    assert alignment_error_rate([{(0, 0), (1, 1), (1, 0)}], gold).aer == 0.0
    # A plain set of links is sure only (P = S).
    r = alignment_error_rate([{(0, 0), (5, 5)}], [{(0, 0)}])
    assert (r.precision, r.recall, r.aer, r.num_possible) == (0.5, 1.0, pytest.approx(1 - 2 / 3), 1)
    empty = alignment_error_rate([set()], [GoldAlignment()])
    assert math.isnan(empty.aer) and math.isnan(empty.precision) and math.isnan(empty.recall)
    nothing = alignment_error_rate([set()], gold)
    assert math.isnan(nothing.precision) and nothing.recall == 0.0 and nothing.aer == 1.0
    with pytest.raises(ValueError, match="2 predicted alignments for 1 gold"):
        alignment_error_rate([set(), set()], gold)


def test_gold_alignment_possible_contains_sure_and_invert():
    g = GoldAlignment({(0, 1)}, {(2, 3)})
    assert g.possible == {(0, 1), (2, 3)} and g.possible_only == {(2, 3)}
    assert GoldAlignment({(0, 1)}).possible == {(0, 1)}
    inv = invert(g)
    assert inv.sure == {(1, 0)} and inv.possible == {(1, 0), (3, 2)}
    assert invert(inv) == g
    assert invert({(0, 1), (2, 3)}) == {(1, 0), (3, 2)}


# ----------------------------------------------------------------------------------------------------------------
# Pharaoh


def test_pharaoh_one_and_zero_indexed(tmp_path):
    one = read_pharaoh(write(tmp_path / "one.gold", "1-1 2-2 2p3\n1-2\n"), one_indexed=True)
    zero = read_pharaoh(write(tmp_path / "zero.wa", "0-0 1-1 1p2\n0-1\n"), one_indexed=False)
    for gold in (one, zero):
        assert len(gold) == 2 and gold.report == []
        assert list(gold) == WORKED_GOLD
        assert gold.num_sure == 3 and gold.num_possible == 4
        assert alignment_error_rate(WORKED_PRED, gold).aer == pytest.approx(0.375)
    # sure links only (no p marker anywhere), -S / -P suffixes, an empty line = a pair without links, a BOM
    other = read_pharaoh(write(tmp_path / "x.wa", "0-0 1-1\n\n0-1-S 1-0-P 2p2\n", bom=True), one_indexed=False)
    assert [g.sure for g in other] == [{(0, 0), (1, 1)}, set(), {(0, 1)}]
    assert other[0].possible == other[0].sure
    assert other[2].possible_only == {(1, 0), (2, 2)}
    assert "3 pairs, 3 sure + 2 possible-only links" in other.summary()


def test_pharaoh_out_of_range_links_are_dropped_and_reported(tmp_path):
    path = write(tmp_path / "g.gold", "1-1 3-1 2p2\n1-1 1-4\n0-1 2-2\n")
    gold = read_pharaoh(path, one_indexed=True, source_lengths=[2, 2, 2], target_lengths=[["a", "b"], 3, 2])
    assert [g.sure for g in gold] == [{(0, 0)}, {(0, 0)}, {(1, 1)}]
    assert gold[0].possible == {(0, 0), (1, 1)}
    assert [(d.pair, d.link, d.written) for d in gold.report] == [(1, (2, 0), "3-1"), (2, (0, 3), "1-4"),
                                                                 (3, (-1, 0), "0-1")]
    assert all(isinstance(d, DroppedLink) for d in gold.report)
    assert gold.report[0].reason == "source position 3 out of range for 2 source tokens (1-indexed)"
    assert gold.report[1].reason == "target position 4 out of range for 3 target tokens (1-indexed)"
    assert "below 1" in gold.report[2].reason
    pair, link, reason, *_ = gold.report[0]
    assert pair == 1 and link == (2, 0) and "out of range" in reason
    assert "dropped 3 links (pairs 1, 2, 3)" in gold.summary()
    # Without lengths only the impossible position 0 can be detected.
    assert len(read_pharaoh(path, one_indexed=True).report) == 1


def test_pharaoh_malformed_line_names_file_and_line(tmp_path):
    path = write(tmp_path / "bad.gold", "1-1\n1-1 2_2\n")
    with pytest.raises(ValueError, match=r"bad\.gold: line 2: '2_2' is not a link"):
        read_pharaoh(path, one_indexed=True)
    with pytest.raises(ValueError, match=r"bad2\.gold: line 1"):
        read_pharaoh(write(tmp_path / "bad2.gold", "1p2-S\n"), one_indexed=True)
    with pytest.raises(ValueError, match="2 lines but 3 source lengths"):
        read_pharaoh(write(tmp_path / "ok.gold", "1-1\n1-1\n"), one_indexed=True, source_lengths=[1, 1, 1])


# ----------------------------------------------------------------------------------------------------------------
# NAACL


def test_naacl_sure_possible_confidence(tmp_path):
    text = "0001 1 1 S\n0001 2 2\n0001 2 3 P 0.5\n\n0002 1 2 S 1.0\n"
    gold = read_naacl(write(tmp_path / "g.wa", text))
    assert list(gold) == WORKED_GOLD and gold.report == []
    assert alignment_error_rate(WORKED_PRED, gold).aer == pytest.approx(0.375)
    # num_sentences adds pairs without links; a 4th numeric field is a confidence.
    more = read_naacl(write(tmp_path / "h.wa", "2 1 1 0.9\n"), num_sentences=3)
    assert [g.sure for g in more] == [set(), {(0, 0)}, set()]


def test_naacl_swapped_columns(tmp_path):
    # The file lists (target, source) like cs-en-ldmt's "SNUM EN_POS CZ_POS": source = Czech, 2nd column.
    path = write(tmp_path / "czen.wal", "1 1 1 S\n1 3 2 S\n1 2 2 P\n")
    gold = read_naacl(path, swap=True, source_lengths=[2], target_lengths=[3])
    assert gold.report == []
    assert gold[0].sure == {(0, 0), (1, 2)} and gold[0].possible_only == {(1, 1)}
    # Read the wrong way round, the lengths catch it.
    wrong = read_naacl(path, source_lengths=[2], target_lengths=[3])
    assert [d.written for d in wrong.report] == ["1 3 2 S"]
    assert wrong.report[0].reason == "source position 3 out of range for 2 source tokens (1-indexed)"


def test_naacl_out_of_range_null_and_bad_pair_number(tmp_path):
    path = write(tmp_path / "g.wa", "1 1 1 S\n1 0 1 S\n1 4 1 S\n3 1 1 S\n0 1 1 S\n2 1 1 P\n")
    gold = read_naacl(path, source_lengths=[3, 1], target_lengths=[1, 1])
    assert len(gold) == 2
    assert [g.sure for g in gold] == [{(0, 0)}, set()] and gold[1].possible == {(0, 0)}
    assert [(d.pair, d.line) for d in gold.report] == [(1, 2), (1, 3), (3, 4), (0, 5)]
    assert gold.report[0].reason == "NULL link (position 0)"
    assert gold.report[1].reason == "source position 4 out of range for 3 source tokens (1-indexed)"
    assert gold.report[2].reason == "pair number 3 is outside 1..2"
    zero = read_naacl(write(tmp_path / "z.wa", "1 0 0 S\n"), one_indexed=False)
    assert zero[0].sure == {(0, 0)}


def test_naacl_malformed_line_names_file_and_line(tmp_path):
    for k, bad in enumerate(["1 1\n", "1 a 1 S\n", "1 1 1 X\n", "1 1 1 S 0.5 7\n", "1 1 1 S S\n"]):
        with pytest.raises(ValueError, match=rf"m{k}\.wa: line 2"):
            read_naacl(write(tmp_path / f"m{k}.wa", "1 1 1 S\n" + bad))


# ----------------------------------------------------------------------------------------------------------------
# Bitexts


def test_read_bitext(tmp_path):
    path = write(tmp_path / "x.src-tgt", "a  b ||| c\nd |||  e f \n", bom=True)
    sources, targets = read_bitext(path)
    assert sources == [["a", "b"], ["d"]] and targets == [["c"], ["e", "f"]]
    with pytest.raises(ValueError, match=r"y\.src-tgt: line 2 has no '\|\|\|' separator"):
        read_bitext(write(tmp_path / "y.src-tgt", "a ||| b\na b\n"))
    with pytest.raises(ValueError, match=r"z\.src-tgt: line 1 has 2 '\|\|\|' separators"):
        read_bitext(write(tmp_path / "z.src-tgt", "a ||| b ||| c\n"))
    with pytest.raises(ValueError, match=r"w\.src-tgt: line 1 has an empty target side"):
        read_bitext(write(tmp_path / "w.src-tgt", "a |||  \n"))


def test_bom_does_not_become_a_token(tmp_path):
    de = write(tmp_path / "test.de", "herr präsident\n", bom=True)
    en = write(tmp_path / "test.en", "mr president\n")
    corpus = read_parallel(de, en)
    assert corpus.source == [["herr", "präsident"]]
    gold = read_pharaoh(write(tmp_path / "de-en.wa", "0-0 1-1\n", bom=True), one_indexed=False,
                        source_lengths=corpus.source, target_lengths=corpus.target)
    assert gold[0].sure == {(0, 0), (1, 1)} and gold.report == []


# ----------------------------------------------------------------------------------------------------------------
# From probabilities to links, symmetrisation


def test_links_from_probs_argmax_and_threshold():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.5, 0.4], [0.3, 0.3, 0.4]])  # (T=3, S=3)
    assert links_from_probs(probs) == {(0, 0), (1, 1), (2, 2)}
    assert links_from_probs(probs, threshold=0.4) == {(0, 0), (1, 1), (2, 1), (2, 2)}
    # Masked cells get no links; positions count unmasked tokens only (source token 0 is "<s>").
    src_mask = torch.tensor([False, True, True])
    tgt_mask = torch.tensor([True, True, False])
    assert links_from_probs(probs, source_mask=src_mask, target_mask=tgt_mask) == {(0, 0), (0, 1)}
    assert links_from_probs(probs, 0.15, src_mask, tgt_mask) == {(0, 0), (0, 1), (1, 1)}
    # ties go to the first source position
    assert links_from_probs(torch.full((1, 2), 0.5)) == {(0, 0)}
    with pytest.raises(ValueError, match="source_mask must have shape"):
        links_from_probs(probs, source_mask=torch.ones(2, dtype=torch.bool))


def test_links_from_probs_batched_with_padding():
    probs = torch.zeros(2, 3, 4)
    probs[0, 0, 1] = probs[0, 1, 0] = probs[0, 2, 3] = 1.0
    probs[1, 0, 2] = probs[1, 1, 1] = 1.0
    probs[1, 2, 3] = 1.0  # padding in pair 2: target 2 and sources 2..3 do not exist
    src_mask = torch.tensor([[True, True, True, True], [True, True, False, False]])
    tgt_mask = torch.tensor([[True, True, True], [True, True, False]])
    links = links_from_probs(probs, source_mask=src_mask, target_mask=tgt_mask)
    assert links == [{(1, 0), (0, 1), (3, 2)}, {(0, 0), (1, 1)}]  # pair 2, target 0: best real source is 0 (tie)
    assert links_from_probs(probs, 0.5, src_mask, tgt_mask) == [{(1, 0), (0, 1), (3, 2)}, {(1, 1)}]
    no_source = torch.zeros(1, 4, dtype=torch.bool)
    assert links_from_probs(probs[:1], source_mask=no_source) == [set()]
    with pytest.raises(ValueError, match=r"\(T, S\) or \(B, T, S\)"):
        links_from_probs(torch.zeros(3))


def test_symmetrize_intersect_union():
    forward = {(0, 0), (1, 1), (2, 1)}
    backward = {(0, 0), (1, 2), (2, 3)}  # (target_pos, source_pos) from the reverse model
    assert symmetrize(forward, backward) == {(0, 0), (2, 1)}
    assert symmetrize(forward, backward, method="union") == {(0, 0), (1, 1), (2, 1), (3, 2)}
    assert intersect({(0, 0), (1, 1)}, {(1, 1)}) == {(1, 1)}
    assert union({(0, 0)}, frozenset({(1, 1)})) == {(0, 0), (1, 1)}
    assert symmetrize([forward, {(0, 0)}], [backward, {(1, 0)}]) == [{(0, 0), (2, 1)}, set()]
    assert intersect([{(0, 0)}], [{(0, 0), (1, 1)}]) == [{(0, 0)}]
    assert union([{(0, 0)}], [{(1, 1)}]) == [{(0, 0), (1, 1)}]
    with pytest.raises(ValueError, match="1 and 2 alignments"):
        intersect([set()], [set(), set()])
    with pytest.raises(ValueError, match="unknown method"):
        symmetrize(forward, backward, method="grow")


# ----------------------------------------------------------------------------------------------------------------
# The real gold data (shared/data/gold-alignments; skipped when absent)


def _gold_dir() -> Path:
    candidates = [REPO.parent / "shared" / "data"]
    if os.environ.get("PYRO_ATTENTION_DATA"):
        candidates.append(Path(os.environ["PYRO_ATTENTION_DATA"]).expanduser())
    for root in candidates:
        if (root / "gold-alignments").is_dir():
            return root / "gold-alignments"
    pytest.skip(
        "real gold alignments not found: expected shared/data/gold-alignments beside the project or under "
        "$PYRO_ATTENTION_DATA"
    )


@pytest.fixture(scope="module")
def gold_dir() -> Path:
    return _gold_dir()


def _awesome(gold_dir: Path, name: str):
    sources, targets = read_bitext(gold_dir / "awesome-align-examples" / f"{name}.src-tgt")
    gold = read_pharaoh(gold_dir / "awesome-align-examples" / f"{name}.gold", one_indexed=True,
                        source_lengths=sources, target_lengths=targets)
    return sources, targets, gold


def test_real_enfr_counts(gold_dir):
    sources, targets, gold = _awesome(gold_dir, "enfr")
    assert len(sources) == len(targets) == len(gold) == 447
    assert gold.report == []
    assert gold.num_sure == 4038
    assert sum(len(g.possible_only) for g in gold) == 13400
    assert gold.num_possible == 4038 + 13400
    r = alignment_error_rate([g.sure for g in gold], gold)
    assert (r.aer, r.precision, r.recall) == (0.0, 1.0, 1.0)


def test_real_jaen_defects_reported(gold_dir):
    _, _, gold = _awesome(gold_dir, "jaen")
    assert len(gold) == 582
    assert len(gold.report) == 6
    assert sorted({d.pair for d in gold.report}) == [351, 354, 355, 356]
    assert [d.written for d in gold.report] == ["18-25", "18-26", "22-25", "22-26", "14-15", "13-14"]
    assert all(d.reason.startswith("source position") for d in gold.report)


@pytest.mark.parametrize("name, pairs", [("roen", 248), ("zhen", 450)])
def test_real_other_awesome_sets_are_clean(gold_dir, name, pairs):
    _, _, gold = _awesome(gold_dir, name)
    assert len(gold) == pairs and gold.report == []


def test_real_europarl_defect_reported(gold_dir):
    folder = gold_dir / "de-en-europarl-bicici"
    corpus = read_parallel(folder / "test.de", folder / "test.en")
    assert len(corpus) == 100
    assert not corpus.source[0][0].startswith("\ufeff") and corpus.source[0][0] == "herr"
    gold = read_pharaoh(folder / "de-en.wa", one_indexed=False, source_lengths=corpus.source,
                        target_lengths=corpus.target)
    assert len(gold) == 100
    assert [(d.pair, d.written) for d in gold.report] == [(63, "12-16")]
    assert gold.report[0].reason == "target position 16 out of range for 13 target tokens (0-indexed)"
    assert gold.num_sure == 1233 - 1 and gold.num_possible == gold.num_sure


def test_real_cs_en_swapped_naacl(gold_dir):
    folder = gold_dir / "cs-en-ldmt"
    czech, english = read_bitext(folder / "corpus.cz-en")
    assert len(czech) == 515
    gold = read_naacl(folder / "czen.wal", swap=True, source_lengths=czech, target_lengths=english)
    assert len(gold) == 515 and gold.report == []
    assert gold.num_sure == 10934
    assert sum(len(g.possible_only) for g in gold) == 4510
    # The first column is English: read unswapped, links fall outside the (Czech) source sentences.
    assert read_naacl(folder / "czen.wal", source_lengths=czech, target_lengths=english).report


def _inv(links):
    return {(t, s) for s, t in links}


def test_grow_diag_adds_union_neighbours_of_unaligned_words_only():
    # one grid (source rows 0..3, target columns 0..3); forward F and the reverse model's links, inverted
    #        t: 0 1 2 3            F = {(0,0), (1,1), (2,1), (0,1), (3,3)}
    #   s 0:   F B F .             B = {(0,0), (1,1), (1,2)}
    #   s 1:   . F B B             F ∩ B = {(0,0), (1,1)}
    #   s 2:   . F . .
    #   s 3:   . . . F
    forward = {(0, 0), (1, 1), (2, 1), (0, 1), (3, 3)}
    backward = {(0, 0), (1, 1), (1, 2)}
    # grow-diag: (2,1) and (1,2) neighbour (1,1) and bring a new source / target word; (0,1) neighbours too but
    # both its words are aligned; (3,3) neighbours nothing aligned
    assert symmetrize(forward, _inv(backward), "grow-diag") == {(0, 0), (1, 1), (2, 1), (1, 2)}
    # final: (3,3) aligns two unaligned words, so both final variants add it; (0,1) joins two aligned words
    want = {(0, 0), (1, 1), (2, 1), (1, 2), (3, 3)}
    assert symmetrize(forward, _inv(backward), "grow-diag-final") == want
    assert symmetrize(forward, _inv(backward), "grow-diag-final-and") == want


def test_final_or_against_final_and():
    # (3,0): source word 3 unaligned, target word 0 aligned: grow-diag-final adds it, grow-diag-final-and does not
    forward, backward = {(0, 0), (2, 2), (3, 0)}, {(0, 0), (2, 2)}
    assert symmetrize(forward, _inv(backward), "grow-diag") == {(0, 0), (2, 2)}
    assert symmetrize(forward, _inv(backward), "grow-diag-final") == {(0, 0), (2, 2), (3, 0)}
    assert symmetrize(forward, _inv(backward), "grow-diag-final-and") == {(0, 0), (2, 2)}
    # a chain grows link by link from the intersection along the union's diagonal
    chain_f, chain_b = {(0, 0), (1, 1), (2, 2), (3, 3)}, {(0, 0)}
    assert symmetrize(chain_f, _inv(chain_b), "grow-diag") == chain_f
    # sequences of sentence pairs, and the heuristics between intersection and union
    pairs = symmetrize([forward, chain_f], [_inv(backward), _inv(chain_b)], "grow-diag-final")
    assert pairs == [{(0, 0), (2, 2), (3, 0)}, chain_f]
    for f, b in ((forward, backward), (chain_f, chain_b)):
        inter, uni = symmetrize(f, _inv(b)), symmetrize(f, _inv(b), "union")
        for method in ("grow-diag", "grow-diag-final", "grow-diag-final-and"):
            assert inter <= symmetrize(f, _inv(b), method) <= uni
    with pytest.raises(ValueError, match="final must be None, 'or' or 'and'"):
        from pyro_attention.aer import grow_diag

        grow_diag(set(), set(), "maybe")


def test_posteriors_of_both_directions_combined_cell_by_cell():
    from pyro_attention.aer import combine_posteriors

    forward = torch.tensor([[0.8, 0.2], [0.1, 0.9], [0.5, 0.5]])  # (T=3, S=2): target word t over source words
    backward = torch.tensor([[0.6, 0.3, 0.1], [0.4, 0.5, 0.1]])  # (S=2, T=3): source word s over target words
    mean = combine_posteriors(forward, backward, "posterior-mean")
    product = combine_posteriors(forward, backward, "posterior-product")
    assert torch.allclose(mean, torch.tensor([[0.7, 0.3], [0.2, 0.7], [0.3, 0.3]]))
    assert torch.allclose(product, torch.tensor([[0.48, 0.08], [0.03, 0.45], [0.05, 0.05]]))
    # thresholded: the mean keeps what either direction believes strongly, the product what both do
    assert links_from_probs(mean, threshold=0.5) == {(0, 0), (1, 1)}
    assert links_from_probs(product, threshold=0.04) == {(0, 0), (1, 0), (1, 1), (0, 2), (1, 2)}
    assert links_from_probs(product, threshold=0.4) == {(0, 0), (1, 1)}
    with pytest.raises(ValueError, match=r"forward \(3, 2\) \(T, S\) needs backward \(S, T\) = \(2, 3\), got \(3, 2\)"):
        combine_posteriors(forward, forward)
    with pytest.raises(ValueError, match="unknown method 'grow-diag'; allowed: 'posterior-mean', 'posterior-product'"):
        combine_posteriors(forward, backward, "grow-diag")


def test_combined_links_drop_null_columns_and_tune_each_half_on_the_other():
    from pyro_attention.data import GoldAlignment
    from pyro_attention.tasks.align.scoring import combined_links

    # two copies of one sentence pair (T = S = 2); the NULL word is column 0 of both directions' matrices
    fwd = torch.tensor([[0.1, 0.6, 0.3], [0.1, 0.2, 0.7]])  # (T, 1 + S)
    bwd = torch.tensor([[0.0, 0.9, 0.1], [0.0, 0.45, 0.55]])  # (S, 1 + T)
    gold = [GoldAlignment(sure={(0, 0), (1, 1)}, possible={(0, 0), (1, 1)})] * 2
    out = dict((m, (links, note)) for m, links, note in combined_links([fwd, fwd], [bwd, bwd], gold,
                                                                       (0.3, 0.5), True, True))
    # the mean ((0.75, 0.375), (0.15, 0.625)): 0.5 gives exactly the gold, 0.3 a wrong link too
    assert out["posterior-mean"][0] == [{(0, 0), (1, 1)}] * 2
    assert out["posterior-mean"][1].startswith("thresholds 0.5 / 0.5")
    # the product ((0.54, 0.135), (0.02, 0.385)): 0.3 finds both links, 0.5 only one
    assert out["posterior-product"][0] == [{(0, 0), (1, 1)}] * 2
    assert out["posterior-product"][1].startswith("thresholds 0.3 / 0.3")
    with pytest.raises(ValueError, match="2 forward and 1 reverse"):
        combined_links([fwd, fwd], [bwd], gold)


def test_merge_json_replaces_a_row_only_at_the_same_training_size(tmp_path):
    """A rerun replaces its own rows; a pilot on fewer training pairs sits beside the full run, never over it."""
    from pyro_attention.aer import merge_json

    path = tmp_path / "aer.json"
    full = {"corpus": "enfr", "model": "hmm-marginal", "output": "lexical", "source": "smoothed",
            "symmetrisation": "forward", "aer": 26.5, "train_sentences": 29447}
    pilot = dict(full, aer=27.7, train_sentences=5447)
    rerun = dict(full, aer=26.4)
    merge_json(path, [full])
    assert merge_json(path, [pilot]) == [full, pilot]
    assert merge_json(path, [rerun]) == [pilot, rerun]
