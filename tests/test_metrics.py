"""Metrics: sacreBLEU on a tiny known case, detokenisation, perplexity, prior entropy."""

from __future__ import annotations

import math

import pytest
import torch

from pyro_attention.metrics import bleu, detokenize, perplexity, prior_entropy


def test_bleu_known_cases():
    perfect = bleu(["The cat sat on the mat."], ["The cat sat on the mat."])
    assert perfect.score == pytest.approx(100.0)
    assert "tok:13a" in perfect.signature and "case:mixed" in perfect.signature
    # 4-gram precisions 4/4... : a hypothesis with half the bigrams right scores strictly between 0 and 100
    partial = bleu(["the cat sat on a mat ."], ["The cat sat on the mat."], lowercase=True)
    assert 0 < partial.score < 100 and "case:lc" in partial.signature
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bleu(["a", "b"], ["a"])


def test_detokenize_undoes_bpe_and_escapes():
    assert detokenize("a man &apos;s do@@ g , run@@ ning .".split()) == "a man's dog, running."


def test_perplexity_and_entropy():
    assert perplexity(-2 * math.log(4.0), 2) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="positive token count"):
        perplexity(0.0, 0)
    prior = torch.tensor([[[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]])
    total, count = prior_entropy(prior, torch.tensor([[True, True]]))
    assert total == pytest.approx(math.log(2)) and count == 2
