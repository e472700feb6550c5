"""bfloat16 autocast training: the network multiplies in bfloat16, the pairs and kernels see float32."""

import pytest
import torch

from pyro_attention.distributions import OutputCategorical
from pyro_attention.distributions.kernels import (
    log_mixture_of_softmaxes,
    observed_log_softmax,
    product_log_normalizer,
)
from pyro_attention.networks.base import Encoded
from pyro_attention.precision import autocast, autocast_calls, full_precision
from tests.support.autocast import bfloat16_products


def test_full_precision_casts_reduced_dtypes_only():
    x = torch.randn(3)
    assert full_precision(x) is x and full_precision(x.double()).dtype == torch.float64
    assert full_precision(x.bfloat16()).dtype == torch.float32 and full_precision(x.half()).dtype == torch.float32


def test_autocast_context():
    with autocast(torch.bfloat16):
        assert bfloat16_products()
    assert not bfloat16_products()
    with autocast(None):
        assert not bfloat16_products()


def test_autocast_calls_wraps_each_call():
    def product(x):  # noqa: ANN001, ANN202
        """a product"""
        return bfloat16_products()

    wrapped = autocast_calls(product, torch.bfloat16)
    assert wrapped(1) and not bfloat16_products() and wrapped.__doc__ == "a product"
    assert autocast_calls(product, None) is product
    with pytest.raises(ValueError, match="got torch.float64"):
        autocast_calls(product, torch.float64)


def test_encoded_and_the_output_distribution_are_float32_under_autocast():
    values, scores = torch.randn(2, 3, 4).bfloat16(), torch.randn(2, 5, 3).bfloat16()
    mask = torch.ones(2, 3, dtype=torch.bool)
    enc = Encoded(values, mask, torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.bool), scores)
    assert enc.values.dtype == torch.float32 and enc.prior_scores.dtype == torch.float32
    raw = torch.randn(4, 7).bfloat16()
    y = torch.tensor([0, 3, 6, 2])
    got = OutputCategorical(raw).log_prob(y)
    assert got.dtype == torch.float32
    assert torch.equal(got, raw.float().log_softmax(-1).gather(-1, y[:, None]).squeeze(-1))


def test_kernels_run_in_float32_under_autocast():
    """Each kernel under autocast, given bfloat16 inputs, returns exactly what it returns outside autocast for the
    same inputs cast to float32 (its products are not rounded to bfloat16)."""
    g = torch.Generator().manual_seed(0)
    h, w, b = torch.randn(6, 5, generator=g), torch.randn(9, 5, generator=g), torch.randn(9, generator=g)
    y = torch.randint(0, 9, (6,), generator=g)
    u, v = torch.randn(2, 3, 9, generator=g), torch.randn(2, 4, 9, generator=g)
    logits, lw = torch.randn(3, 4, 9, generator=g), torch.randn(3, 4, generator=g).log_softmax(-1)
    hb, ub, vb, lb = h.bfloat16(), u.bfloat16(), v.bfloat16(), logits.bfloat16()
    expected = (observed_log_softmax(hb.float(), w, b, y, rows=4), product_log_normalizer(ub.float(), vb.float()),
                log_mixture_of_softmaxes(lb.float(), lw))
    with autocast(torch.bfloat16):
        got = (observed_log_softmax(hb, w, b, y, rows=4), product_log_normalizer(ub, vb),
               log_mixture_of_softmaxes(lb.clone(), lw))
    for e, a in zip(expected, got, strict=True):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("model", ["soft", "marginal", "variational"])
def test_a_translation_step_under_autocast_is_close_to_float32(model):
    """One ELBO of a Seq2Seq pair on a synthetic batch, its model and guide under autocast and not: the loss is
    float32 (the enumerated contraction too: it runs outside autocast) and moves by < 2 %, every gradient is finite
    and float32."""
    from pyro_attention.tasks.translation import TranslationConfig
    from pyro_attention.tasks.translation.corpora import build_pair, build_vocabs, load_corpora, make_batches

    config = TranslationConfig(model=model, train_size=64, val_size=8, test_size=8, batch_size=16, output="product")
    corpora = load_corpora(config, log=None)
    src, tgt = build_vocabs(config, corpora.train)
    torch.manual_seed(0)
    _, pair = build_pair(config, src, tgt)
    batch = make_batches(corpora.train, src, tgt, 16)[0]
    elbo = pair.elbo()
    losses: dict = {}
    for dtype in (None, torch.bfloat16):
        model, guide = autocast_calls(pair.model, dtype), autocast_calls(pair.guide, dtype)
        losses[dtype] = elbo.differentiable_loss(model, guide, batch)
        assert losses[dtype].dtype == torch.float32
        grads = torch.autograd.grad(losses[dtype], [p for p in pair.network.parameters() if p.requires_grad],
                                    allow_unused=True)
        assert all(g is None or (g.dtype == torch.float32 and bool(g.isfinite().all())) for g in grads)
    full, half = losses[None].detach().item(), losses[torch.bfloat16].detach().item()
    assert half == pytest.approx(full, rel=0.02) and half != full


def test_a_sampled_alignment_computes_its_output_logits_inside_the_model():
    """Without a table (one sampled alignment per token) the output logits are computed when the distribution is
    built, under the model's autocast, not when Pyro's ELBO later asks for ``log_prob``."""
    from pyro_attention.distributions import AlignedCategorical

    calls: list = []

    class Net:
        num_classes = 7

        def output_logits(self, enc, context):  # noqa: ANN001, ANN202
            calls.append(bfloat16_products())
            return torch.zeros(context.shape[:-1] + (7,))

    values, mask = torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)
    target = torch.randint(0, 7, (2, 5))
    enc = Encoded(values, mask, target, torch.ones(2, 5, dtype=torch.bool), torch.randn(2, 5, 3))
    with autocast(torch.bfloat16):
        d = AlignedCategorical(torch.randint(0, 3, (2, 5)), Net(), enc)
    lp = d.log_prob(target)
    assert calls == [True] and lp.dtype == torch.float32
    torch.testing.assert_close(lp, torch.full((2, 5), -torch.log(torch.tensor(7.0)).item()))
    assert d.expand((4, 2, 5)).log_prob(target).shape == (4, 2, 5) and calls == [True]
