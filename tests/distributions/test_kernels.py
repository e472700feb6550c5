"""The enumeration kernel (``distributions/enumeration.py``): the fused observed-token log-softmax equals autograd
through ``log_softmax(linear(h)).gather(y)``, every path of the table equals the generic one, and the networks say
nothing of alignments."""

from __future__ import annotations

import math

import pytest
import torch

from pyro_attention.distributions.enumeration import (
    follows_output_logits,
    gathered_table,
    logits_at_values,
    observed_table,
    padded_positions,
)
from pyro_attention.distributions.kernels import log_mixture_of_softmaxes, observed_log_softmax, probability_floor
from pyro_attention.networks import Seq2Seq


def _reference(h, w, b, y):
    logits = h @ w.T + (0.0 if b is None else b)
    return torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("keep", [0, 8 * 11 * 3, 10**6])
@pytest.mark.parametrize("rows", [1, 3, 7, 100])
@pytest.mark.parametrize("bias", [True, False])
def test_values_and_gradients_match_autograd(float64, rows, bias, keep):
    """``keep``: nothing kept (all recomputed), some chunks kept (3 rows of float64), everything kept."""
    g = torch.Generator().manual_seed(0)
    N, H, V = 7, 5, 11
    h = torch.randn(N, H, generator=g, requires_grad=True)
    w = torch.randn(V, H, generator=g, requires_grad=True)
    b = torch.randn(V, generator=g, requires_grad=True) if bias else None
    y = torch.randint(V, (N,), generator=g)
    upstream = torch.randn(N, generator=g)
    inputs = [h, w] + ([b] if bias else [])
    mine = observed_log_softmax(h, w, b, y, rows, keep)
    ref = _reference(h, w, b, y)
    assert torch.allclose(mine, ref, atol=1e-12)
    g_mine = torch.autograd.grad((mine * upstream).sum(), inputs)
    g_ref = torch.autograd.grad((ref * upstream).sum(), inputs)
    for a, r in zip(g_mine, g_ref, strict=True):
        assert torch.allclose(a, r, atol=1e-12)

    def fn(*x: torch.Tensor) -> torch.Tensor:
        return observed_log_softmax(x[0], x[1], x[2] if bias else None, y, rows, keep)

    assert torch.autograd.gradcheck(fn, inputs)


@pytest.mark.parametrize("keep", [0, 10**7])
def test_medium_matmul_precision_stays_within_bfloat16_rounding_of_float64(keep):
    """Training at ``torch.set_float32_matmul_precision("medium")`` (bfloat16 products where the CPU has them): the
    forward and backward products round alike, so values and gradients stay within bfloat16's rounding of the
    float64 ones (8 significant bits: ~0.4 % of each product's terms), peaked rows included."""
    from pyro_attention.inference.loop import float32_matmul_precision

    g = torch.Generator().manual_seed(0)
    N, H, V = 600, 64, 500
    h = torch.randn(N, H, generator=g, dtype=torch.float64)
    w = torch.randn(V, H, generator=g, dtype=torch.float64) * 2.0
    b = torch.randn(V, generator=g, dtype=torch.float64)
    y = torch.randint(V, (N,), generator=g)
    upstream = torch.rand(N, generator=g, dtype=torch.float64)
    ref_in = [t.clone().requires_grad_() for t in (h, w, b)]
    ref = _reference(*ref_in, y)
    ref_grads = torch.autograd.grad((ref * upstream).sum(), ref_in)
    mine_in = [t.float().requires_grad_() for t in (h, w, b)]
    with float32_matmul_precision("medium"):
        mine = observed_log_softmax(*mine_in, y, 128, keep)
        grads = torch.autograd.grad((mine * upstream.float()).sum(), mine_in)
    assert torch.get_float32_matmul_precision() == "highest"
    logits = h @ w.T + b
    assert ref.min() < probability_floor(torch.float32)  # peaked rows: some observed tokens below float32's floor
    # each product's inputs rounded to 8 significant bits: errors of a few tenths of a percent of the logits
    assert (mine.double() - ref).abs().max() < 0.01 * logits.abs().max()
    for a, r in zip(grads, ref_grads, strict=True):
        assert ((a.double() - r).norm() / r.norm()) < 0.02


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1.0, 20.0])
def test_log_mixture_of_softmaxes_equals_logsumexp_of_log_softmaxes(dtype, scale):
    """Against ``(log w + log_softmax(l)).logsumexp(s)`` in float64: absent components (``-inf`` weights) stay out,
    peaked logits (scale 20: most log-probabilities far below float32's floor) keep every token that matters
    exact, and the input logits are consumed (overwritten), not the weights."""
    g = torch.Generator().manual_seed(1)
    N, S, V = 6, 5, 40
    logits = torch.randn(N, S, V, generator=g, dtype=torch.float64) * scale
    log_w = torch.randn(N, S, generator=g, dtype=torch.float64).log_softmax(-1)
    log_w[0, 2:] = -math.inf  # padded source positions
    log_w[1, :4] = -math.inf
    ref = (log_w.unsqueeze(-1) + logits.log_softmax(-1)).logsumexp(1)
    weights = log_w.to(dtype)
    mine = log_mixture_of_softmaxes(logits.to(dtype, copy=True), weights).double()
    assert torch.equal(weights, log_w.to(dtype))
    one = log_w[1, 4] + logits[1, 4].log_softmax(-1)  # one component present: its weighted log-softmax
    assert torch.allclose(mine[1][one > one.max() - 30], one[one > one.max() - 30], atol=1e-5, rtol=0)
    floor = probability_floor(dtype)
    tol = 1e-12 if dtype == torch.float64 else 2e-5 * max(1.0, float(ref.abs().max()))
    matters = ref > ref.amax(-1, keepdim=True) + floor + 10  # tokens above the floor relative to the best
    assert matters.float().mean() > 0.1 and torch.allclose(mine[matters], ref[matters], atol=tol, rtol=0)
    assert (mine >= ref - tol).all()  # below the floor: raised towards it, never lowered
    assert torch.isfinite(mine).all()
    with pytest.raises(ValueError, match=r"need logits \(N, S, V\) and log_weights \(N, S\); got logits "
                       r"\(6, 5, 40\) and log_weights \(6, 4\)"):
        log_mixture_of_softmaxes(logits.to(dtype, copy=True), weights[:, :4])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("keep", [0, 10**7])
def test_peaked_rows_far_below_the_smallest_normal_number_keep_exact_values_and_gradients(dtype, keep):
    """A trained layer puts most of a row's probabilities below the smallest normal number (log p < -87 in float32),
    and some upstream gradients too; the backward pass raises the first to a floor before ``exp`` and sets the
    second to 0: the values (an observed id far down included) are untouched and the gradients still equal
    autograd's to the dtype's precision."""

    g = torch.Generator().manual_seed(1)
    N, H, V = 6, 4, 50
    scale = 30.0 if dtype == torch.float32 else 300.0
    h = (scale * torch.randn(N, H, generator=g)).to(dtype).requires_grad_()
    w = torch.randn(V, H, generator=g).to(dtype).requires_grad_()
    b = torch.randn(V, generator=g).to(dtype).requires_grad_()
    y = torch.randint(V, (N,), generator=g)
    ref = _reference(h, w, b, y)
    logp = torch.log_softmax(h @ w.T + b, -1)
    floor = probability_floor(dtype)
    assert (logp < floor).float().mean() > 0.3 and ref.min() < floor  # the case at hand
    assert torch.exp(torch.tensor(floor, dtype=dtype)) >= torch.finfo(dtype).tiny  # exp of the floor is normal
    mine = observed_log_softmax(h, w, b, y, 4, keep)
    assert torch.equal(mine, observed_log_softmax(h, w, b, y, 4, 0)) and torch.allclose(mine, ref, rtol=1e-6)
    upstream = torch.randn(N, generator=g).to(dtype)
    upstream[::2] = torch.finfo(dtype).tiny / 16  # subnormal: rows whose alignment the posterior rules out
    g_mine = torch.autograd.grad((mine * upstream).sum(), [h, w, b])
    g_ref = torch.autograd.grad((ref * upstream).sum(), [h, w, b])
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for a, r in zip(g_mine, g_ref, strict=True):
        assert torch.allclose(a, r, rtol=tol, atol=tol * r.abs().max().item())


@pytest.mark.parametrize("keep", [0, 10**7])
def test_the_backward_products_and_exps_never_see_a_subnormal_number(keep):
    """Subnormal operands slow a product 20-100 times on the CPU (docs/performance.md): on peaked rows with subnormal
    upstream gradients, no product of the backward pass takes one and no ``exp`` makes one."""
    from torch.utils._python_dispatch import TorchDispatchMode

    tiny = torch.finfo(torch.float32).tiny
    seen: list[str] = []

    def subnormal(t: object) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point() and bool(((t != 0) & (t.abs() < tiny)).any())

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in ("mm", "addmm", "addmm_", "addmv", "addmv_", "bmm") and any(map(subnormal, args)):
                seen.append(f"{name} operand")
            if name in ("exp", "exp_") and subnormal(out):
                seen.append(f"{name} result")
            return out

    g = torch.Generator().manual_seed(2)
    N, H, V = 12, 4, 60
    h = (30.0 * torch.randn(N, H, generator=g)).requires_grad_()
    w = torch.randn(V, H, generator=g).requires_grad_()
    b = torch.randn(V, generator=g).requires_grad_()
    y = torch.randint(V, (N,), generator=g)
    upstream = torch.randn(N, generator=g)
    upstream[::3] = tiny / 16
    out = observed_log_softmax(h, w, b, y, 5, keep)
    logp = torch.log_softmax(h.detach() @ w.detach().T + b.detach(), -1)
    assert bool(((logp.exp() != 0) & (logp.exp() < tiny)).any())  # plain exp would make subnormal probabilities
    with Watch():
        torch.autograd.grad((out * upstream).sum(), [h, w, b])
    assert seen == []


@pytest.mark.parametrize("keep, recomputed", [(0, 3), (8 * 11 * 3, 2), (10**6, 0)])
def test_kept_chunks_are_not_recomputed_in_the_backward_pass(float64, monkeypatch, keep, recomputed):
    """Chunks of 3, 3 and 1 rows: ``keep`` bytes hold none, the first (3 rows of 11 float64) or all; the backward
    pass recomputes the logits of the others only.  (Until 2026-12-05 the budget was read inside
    ``Function.forward``, where grad mode is always off, so every chunk was recomputed whatever ``keep`` was.)"""
    from pyro_attention.distributions import kernels

    calls = []
    real = kernels._logits
    monkeypatch.setattr(kernels, "_logits", lambda *args: calls.append(1) or real(*args))
    g = torch.Generator().manual_seed(0)
    h = torch.randn(7, 5, generator=g, requires_grad=True)
    w = torch.randn(11, 5, generator=g, requires_grad=True)
    out = observed_log_softmax(h, w, None, torch.randint(11, (7,), generator=g), 3, keep)
    assert len(calls) == 3  # the forward pass: one product per chunk
    out.sum().backward()
    assert len(calls) == 3 + recomputed


def test_needs_no_grad_and_rejects_bad_rows():
    h, w, y = torch.randn(4, 3), torch.randn(6, 3), torch.randint(6, (4,))
    with torch.no_grad():
        assert torch.allclose(observed_log_softmax(h, w, None, y, 2), _reference(h, w, None, y), atol=1e-6)
    with pytest.raises(ValueError, match="rows"):
        observed_log_softmax(h, w, None, y, 0)


@pytest.mark.parametrize("keep", [0, 2**30])
@pytest.mark.parametrize("chunk_size", [None, 1, 2, 5])
def test_seq2seq_table_uses_the_kernel_and_equals_the_generic_path(float64, chunk_size, keep):
    """``observed_table`` through the fused kernel (and the tanh layer's ``hidden_at_values``) equals the generic
    (gathered, checkpointed) path, in values and gradients."""
    from tests.support.toy_network import tiny_seq2seq

    net, batch = tiny_seq2seq(chunk_size=chunk_size)
    net = net.double()
    enc = net.encode(batch)
    assert net.output_hidden_at_values(enc) is not None  # the fast hidden layer is what runs
    fused = observed_table(net, enc, chunk_size, keep)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Seq2Seq, "output_layer", None)
        plain = observed_table(net, net.encode(batch), chunk_size, keep)
    padding = padded_positions(enc)  # (B, T, S)
    assert padding.any() and (fused[padding] == 0).all()  # padded pairs are 0 (the fused path skips them)
    assert torch.allclose(fused, plain, atol=1e-10)
    assert torch.allclose(gathered_table(net, net.encode(batch), chunk_size).masked_fill(padding, 0), plain,
                          atol=1e-12)
    weights = torch.randn(fused.shape, dtype=fused.dtype)
    g1 = torch.autograd.grad((fused * weights).sum(), list(net.parameters()), allow_unused=True)
    plain = gathered_table(net, net.encode(batch), chunk_size).masked_fill(padding, 0)
    g2 = torch.autograd.grad((plain * weights).sum(), list(net.parameters()), allow_unused=True)
    for a, b in zip(g1, g2, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-10)


def test_a_subclass_overriding_only_output_logits_does_not_get_the_parents_fused_layers():
    from pyro_attention.data import make_region_qa
    from pyro_attention.networks import RegionQA

    class Scaled(RegionQA):
        def output_logits(self, enc, context):  # noqa: ANN001, ANN202
            return 2.0 * super().output_logits(enc, context)

    data = make_region_qa(4, seed=0)
    torch.manual_seed(0)
    net = Scaled(data.feature_size, len(data.answers), vocab_size=len(data.vocab), hidden_size=8)
    enc = net.encode(data.data)
    assert not follows_output_logits(net, "output_hidden")
    expected = logits_at_values(net, enc).log_softmax(-1)  # (S, B, T, V)
    expected = expected.gather(-1, enc.target.expand(expected.shape[:-1]).unsqueeze(-1)).squeeze(-1).permute(1, 2, 0)
    got = observed_table(net, enc)
    real = enc.source_mask.unsqueeze(1).expand_as(got)
    assert torch.allclose(got[real], expected[real], atol=1e-5)


def test_output_categorical_equals_categorical(float64):
    import pyro.distributions as dist

    from pyro_attention.distributions import OutputCategorical

    raw = 50.0 * torch.randn(3, 4, 7)
    value = torch.randint(7, (3, 4))
    fast, ref = OutputCategorical(raw), dist.Categorical(logits=raw)
    assert torch.allclose(fast.log_prob(value), ref.log_prob(value), atol=1e-10)
    assert torch.allclose(fast.logits, ref.logits) and torch.allclose(fast.probs, ref.probs)
    wide = fast.expand(torch.Size([2, 3, 4]))
    assert wide.batch_shape == (2, 3, 4) and wide.log_prob(value).shape == (2, 3, 4)
    assert fast.sample((5,)).shape == (5, 3, 4)
    leaf = raw.clone().requires_grad_()
    (g_fast,) = torch.autograd.grad(OutputCategorical(leaf).log_prob(value).sum(), leaf)
    (g_ref,) = torch.autograd.grad(dist.Categorical(logits=leaf).log_prob(value).sum(), leaf)
    assert torch.allclose(g_fast, g_ref, atol=1e-10)


def test_networks_say_nothing_of_alignments():
    """#16 item 5: the networks expose hidden states and output layers; the enumeration is the distributions'."""
    import inspect

    import pyro_attention.networks as networks
    from pyro_attention.networks import attention, base, lexical, output, region_qa, seq2seq

    named = []
    for module in (networks, attention, base, lexical, output, region_qa, seq2seq):
        for name, obj in vars(module).items():
            named.append(f"{module.__name__}.{name}")
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                named += [f"{module.__name__}.{name}.{attr}" for attr in vars(obj)]
    assert not [n for n in named if "align" in n.rsplit(".", 1)[-1].lower()]
    for attr in ("keep_logits_bytes", "aligned_log_likelihood", "aligned_logits", "aligned_hidden"):
        assert not hasattr(Seq2Seq, attr), attr


@pytest.mark.parametrize("name", ["marginal", "hard", "variational", "segmentation-marginal"])
def test_no_pair_reads_the_table_at_padded_positions(float64, monkeypatch, name):
    """``observed_table`` is 0 at a padded source or target position and the fused path skips those rows, which is
    exact only if no pair reads them: the ELBO's value and gradients are the same with any number there."""
    import pyro

    import pyro_attention.models._categorical as categorical
    import pyro_attention.models.structured as structured
    from pyro_attention.registry import make_pair
    from tests.support.toy_network import tiny_seq2seq

    net, batch = tiny_seq2seq()
    net = net.double()
    pair = make_pair(name, net)
    calls = []

    def run(fill: float) -> list[torch.Tensor]:
        def table(network, enc, *args):  # noqa: ANN001, ANN202
            calls.append(fill)
            return observed_table(network, enc, *args).masked_fill(padded_positions(enc), fill)

        for module in (categorical, structured):
            monkeypatch.setattr(module, "observed_table", table)
        pyro.set_rng_seed(0)
        params = list(net.parameters())
        loss = pair.elbo().differentiable_loss(pair.model, pair.guide, batch)
        return [loss, *torch.autograd.grad(loss, params, allow_unused=True)]

    zero, garbage = run(0.0), run(7.0)
    assert 0.0 in calls and 7.0 in calls  # the pair reads the table
    for a, b in zip(zero, garbage, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-12)
