"""Decoding's oneDNN twins of nn.Linear and nn.LSTMCell: the same maps to float32 rounding, swapped in and out."""

import contextlib

import pytest
import torch
from torch import nn

from pyro_attention.data.translation import collate
from pyro_attention.models import MarginalLikelihood, SoftAttention
from pyro_attention.networks import Seq2Seq
from pyro_attention.networks.onednn import OneDNNLinear, OneDNNLSTMCell, onednn_inference, usable
from pyro_attention.tasks.translation import decoding

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")


@pytest.mark.parametrize("bias", [True, False])
def test_linear_twin_is_the_linear_map(bias):
    torch.manual_seed(0)
    linear = nn.Linear(24, 40, bias=bias)
    twin = OneDNNLinear(linear)
    assert twin.weight is linear.weight and twin.bias is linear.bias
    with torch.no_grad():
        for x in (torch.randn(7, 24), torch.randn(3, 5, 24), torch.randn(6, 24)[:, :24].t().contiguous().t()):
            torch.testing.assert_close(twin(x), linear(x), rtol=1e-5, atol=1e-5)
            assert twin(x).shape == linear(x).shape


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell_twin_is_the_cell(bias):
    torch.manual_seed(0)
    cell = nn.LSTMCell(10, 16, bias=bias)
    twin = OneDNNLSTMCell(cell)
    x, h, c = torch.randn(5, 10), torch.randn(5, 16), torch.randn(5, 16)
    with torch.no_grad():
        for state in ((h, c), None):
            for got, want in zip(twin(x, state), cell(x, state), strict=True):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_swapped_in_for_the_block_and_back_also_on_error():
    torch.manual_seed(0)
    net = Seq2Seq(12, 12, embedding_size=8, encoder_size=6, decoder_size=8, attention_size=6)
    before = [(name, type(m)) for name, m in net.named_modules()]
    params = dict(net.named_parameters())
    with torch.no_grad():
        with onednn_inference(net):
            kinds = {type(m) for m in net.modules()}
            assert OneDNNLinear in kinds and OneDNNLSTMCell in kinds and nn.Linear not in kinds
            assert nn.LSTMCell not in kinds and nn.LSTM in kinds  # the encoder's LSTM runs once a sentence
            assert dict(net.named_parameters()).keys() >= {"decoder.0.weight_ih", "head.out.weight"}
        assert [(name, type(m)) for name, m in net.named_modules()] == before
        with pytest.raises(RuntimeError, match="boom"), onednn_inference(net):
            raise RuntimeError("boom")
        assert [(name, type(m)) for name, m in net.named_modules()] == before
    assert dict(net.named_parameters()) == params


def test_a_no_op_where_it_cannot_apply():
    net = nn.Sequential(nn.Linear(3, 4))
    assert not usable(net)  # gradients wanted
    with torch.no_grad():
        assert usable(net) and not usable(nn.Sequential(nn.Linear(3, 4).double())) and not usable(nn.ReLU())
        with onednn_inference(net.double()):
            assert type(net[0]) is nn.Linear


@pytest.mark.parametrize("pair_type, rule", [(SoftAttention, "soft"), (MarginalLikelihood, "marginal"),
                                             (MarginalLikelihood, "kmax")])
def test_beam_search_translates_the_same_with_and_without(monkeypatch, pair_type, rule):
    torch.manual_seed(1)
    net = Seq2Seq(30, 30, embedding_size=16, encoder_size=16, decoder_size=32, attention_size=16)
    pair = pair_type(net)
    g = torch.Generator().manual_seed(0)
    batch = collate([(torch.randint(4, 30, (n,), generator=g).tolist(), [4]) for n in (3, 7, 5, 9, 4, 6)])
    got = decoding.translate(pair, batch.source, batch.source_mask, beam_size=4, rule=rule, k=2, max_len=12)
    monkeypatch.setattr(decoding, "onednn_inference", lambda net: contextlib.nullcontext())
    assert got == decoding.translate(pair, batch.source, batch.source_mask, beam_size=4, rule=rule, k=2, max_len=12)
