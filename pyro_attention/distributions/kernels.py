r"""The tensor kernels of the enumeration (:mod:`pyro_attention.distributions.enumeration`): the output layer under
every alignment at the observed ids, bounded in memory.

:func:`observed_log_softmax` is the log-softmax of a linear layer at observed ids, one memory-bounded kernel.

For rows :math:`h_n \in \mathbb{R}^H` (one per target token *and* alignment, ``N = S B T`` of them), a final
layer :math:`W \in \mathbb{R}^{V \times H}, b \in \mathbb{R}^V` and observed ids :math:`y_n`,

.. math::

    \ell_n = (W h_n + b)_{y_n} - \log \sum_v \exp\,(W h_n + b)_v,
    \qquad
    \frac{\partial L}{\partial (W h_n + b)} = g_n\,(e_{y_n} - \mathrm{softmax}(W h_n + b)),
    \quad g_n = \frac{\partial L}{\partial \ell_n}.

Autograd through ``log_softmax(linear(h)).gather(y)`` keeps the ``N x V`` logits and their softmax alive until
the backward pass (``S B T V`` floats: 3.2 GB each at ``S = T = 50, B = 32, V = 10k``).  Here the forward pass
computes the logits ``rows`` at a time (a fused row-wise ``log_softmax``) and keeps only
:math:`\log \sum \exp` per row; the backward pass recomputes each chunk's logits, turns them in place into
the softmax and multiplies it with ``W`` and with ``g h``; the ``e_y`` terms are ``index_add``\ s.  Cost: one
extra ``N x H x V`` product (4 instead of 3), no ``N x V`` tensor kept, at most two ``rows x V`` buffers alive,
reused across chunks (fresh large allocations cost page faults).  Within a budget ``keep_bytes`` the
log-probabilities of the first chunks are kept instead, and those chunks skip the recomputation.  Values and
gradients equal autograd's (tested against it in float64).

The backward pass keeps subnormal numbers out of its products: on this project's CPU (torch 2.13) a matrix product
with subnormal entries in an operand runs 20-100 times slower, and so does torch's vectorised ``exp`` on lanes
whose result is subnormal.  A trained model has both: most of the ``V`` probabilities of a row are below the
dtype's smallest normal number, and so are the upstream gradients of alignments the posterior rules out (an
exact marginal's ``g_n`` is the posterior weight of the row's alignment).  So every log-probability is raised to
:func:`probability_floor` (one nat above ``log`` of the smallest normal number: -86.34 in float32) before
``exp``, and upstream gradients ``g_n`` and products ``g_n h_n`` below the smallest normal number are set to 0.
Each probability moves by less than ``e`` times the smallest normal number (3.2e-38 in float32), each gradient
term by less than that number: far below the rounding of any gradient they enter.

:func:`product_log_normalizer` is the normaliser of a product of experts for every (target, source) pair at once.

:func:`log_mixture_of_softmaxes` is ``log sum_s w_s softmax(l_s)`` (an exact marginal's next-token distribution in
decoding) from one ``exp`` per logit and one batched product.

Under ``torch.autocast`` (bfloat16 training, :func:`~pyro_attention.precision.autocast_calls`) the kernels stay
float32: autocast is off inside them and reduced-precision inputs are cast up (:func:`full_precision`), so only
the network's own products are rounded, never a normaliser or a log-probability.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from pyro_attention.precision import full_precision

F = TypeVar("F", bound=Callable[..., Any])


def _float32(kernel: F) -> F:
    """``kernel`` with autocast off and its reduced-precision tensor arguments cast up (module docstring)."""

    @functools.wraps(kernel)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        cast = [full_precision(a) if isinstance(a, Tensor) and a.is_floating_point() else a for a in args]
        kw = {k: full_precision(a) if isinstance(a, Tensor) and a.is_floating_point() else a
              for k, a in kwargs.items()}
        devices = {a.device.type for a in (*cast, *kw.values()) if isinstance(a, Tensor)}
        with contextlib.ExitStack() as stack:
            for device in devices:
                stack.enter_context(torch.autocast(device, enabled=False))
            return kernel(*cast, **kw)

    return wrapped  # type: ignore[return-value]


class _ObservedLogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, rows: int, keep_bytes: int
    ) -> Tensor:
        N, V = hidden.shape[0], weight.shape[0]
        out = hidden.new_empty(N)
        picked = hidden.new_empty(N)
        logits, logp = hidden.new_empty(min(rows, N), V), None  # reused buffers
        kept: list[Tensor | None] = []
        budget = keep_bytes  # 0 when no backward pass will come (observed_log_softmax decides: grad mode is off here)
        for start in range(0, N, rows):
            stop = min(N, start + rows)
            y = target[start:stop].unsqueeze(-1)
            x = _logits(hidden[start:stop], weight, bias, logits[: stop - start])
            size = (stop - start) * V * x.element_size()
            if size <= budget:  # keep this chunk's log-probabilities: the backward pass needs no product here
                budget -= size
                lp = torch.log_softmax(x, -1)
                kept.append(lp)
            else:
                if logp is None:
                    logp = hidden.new_empty(min(rows, N), V)
                lp = torch.ops.aten._log_softmax.out(x, -1, False, out=logp[: stop - start])  # fused, row-wise
                kept.append(None)
            torch.gather(lp, -1, y, out=out[start:stop].unsqueeze(-1))
            torch.gather(x, -1, y, out=picked[start:stop].unsqueeze(-1))
        ctx.save_for_backward(hidden, weight, bias, target, picked - out)  # log-sum-exp of every row
        ctx.rows, ctx.kept = rows, kept
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple:
        # d l_n / d logits_n = e_{y_n} - p_n with p_n = softmax(logits_n); for L with g_n = dL/dl_n:
        #   dL/dh = g * (W[y] - p W),  dL/dW = sum_n g_n (e_{y_n} - p_n) h_n^T,  dL/db = sum_n g_n (e_{y_n} - p_n)
        # so the only (rows x V) work is recomputing the logits, their softmax and two products with p.
        hidden, weight, bias, target, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        N, V = hidden.shape[0], weight.shape[0]
        grad = _flush_subnormal(grad)  # no subnormal operand in the products (module docstring)
        gh = _flush_subnormal(hidden * grad.unsqueeze(-1))  # g_n h_n
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_b = torch.zeros_like(bias) if need_b and bias is not None else None
        buf = hidden.new_empty(min(ctx.rows, N), V)
        floor = probability_floor(hidden.dtype)  # and no subnormal softmax either
        for i, start in enumerate(range(0, N, ctx.rows)):
            stop = min(N, start + ctx.rows)
            if ctx.kept[i] is not None:  # softmax from the kept log-probabilities (left as they are: reentrant)
                p = torch.clamp(ctx.kept[i], min=floor, out=buf[: stop - start]).exp_()
            else:
                x = _logits(hidden[start:stop], weight, bias, buf[: stop - start])
                p = x.sub_(lse[start:stop].unsqueeze(-1)).clamp_(min=floor).exp_()  # softmax, from the log-sum-exp
            g = grad[start:stop]
            if grad_h is not None:
                torch.mm(p, weight, out=grad_h[start:stop])
            if grad_w is not None:
                grad_w.addmm_(p.t(), gh[start:stop], alpha=-1.0)
            if grad_b is not None:
                grad_b.addmv_(p.t(), g, alpha=-1.0)
        if grad_h is not None:  # g * (W[y] - p W)
            grad_h = (weight[target] - grad_h).mul_(grad.unsqueeze(-1))
        if grad_w is not None:
            grad_w.index_add_(0, target, gh)
        if grad_b is not None:
            grad_b.index_add_(0, target, grad)
        return grad_h, grad_w, grad_b, None, None, None


def probability_floor(dtype: torch.dtype) -> float:
    """The least log-probability the backward pass exponentiates: one nat above ``log`` of the smallest normal
    number of ``dtype`` (-86.34 for float32, -707.40 for float64), so that ``exp`` of it, rounded to ``dtype``, is a
    normal number (``log`` itself, rounded to float32, falls just below: its ``exp`` is subnormal)."""
    return math.log(torch.finfo(dtype).tiny) + 1.0


def shifted_exp(x: Tensor, shift: Tensor) -> Tensor:
    """``exp(max(x - shift, floor))`` with ``floor`` :func:`probability_floor`: ``exp(x - shift)`` where that is at
    least ``e`` times the dtype's smallest normal number, that number elsewhere (where ``exp`` would give a
    subnormal number or nearly one).  No entry is subnormal, so the products that take it stay on the CPU's fast
    path (module docstring); each entry moves by less than ``e * tiny``; differentiable (without a gradient to
    keep, as in decoding, the exponential is taken in place: one tensor the size of ``x`` instead of two)."""
    y = (x - shift).clamp_min_(probability_floor(x.dtype))
    return y.exp() if y.requires_grad else y.exp_()


@_float32
def log_mixture_of_softmaxes(logits: Tensor, log_weights: Tensor) -> Tensor:
    r"""``log sum_s exp(log_weights[n, s]) softmax(logits[n, s])`` ``(N, V)`` for ``logits`` ``(N, S, V)`` and
    ``log_weights`` ``(N, S)`` (``-inf`` where a component is absent, e.g. a padded source position).

    With :math:`m_s = \max_v l_{sv}`, :math:`E_{sv} = e^{l_{sv} - m_s}` and :math:`Z_s = \sum_v E_{sv}`,

    .. math::

        \log \sum_s w_s \frac{E_{sv}}{Z_s} = M + \log \sum_s e^{c_s - M} E_{sv},
        \qquad c_s = \log w_s - \log Z_s,\; M = \max_s c_s:

    one ``exp`` per logit (computed in place: ``logits`` is overwritten) and one ``(1 x S)(S x V)`` product per row,
    where ``log_softmax`` then ``logsumexp`` over ``s`` take about twice the passes over the ``N S V`` numbers.
    Exact to float rounding, except that a token every component gives less than ``e`` times the dtype's smallest
    normal number relative to that component's best token (terms :func:`shifted_exp` raises to that, which keeps
    subnormal numbers out of the product) gets about the floor value instead of a lower one: such a token is never
    among the best continuations.  Not differentiable (decoding).
    """
    if logits.dim() != 3 or log_weights.shape != logits.shape[:2]:
        raise ValueError(f"log_mixture_of_softmaxes: need logits (N, S, V) and log_weights (N, S); got logits "
                         f"{tuple(logits.shape)} and log_weights {tuple(log_weights.shape)}")
    m = logits.amax(-1, keepdim=True)  # (N, S, 1)
    E = logits.sub_(m).clamp_min_(probability_floor(logits.dtype)).exp_()  # in place: no subnormal entry
    c = log_weights - E.sum(-1).log()  # (N, S)
    M = c.amax(-1, keepdim=True)  # finite: some component is present
    weights = shifted_exp(c, M).masked_fill_(c == -math.inf, 0.0)  # absent components stay out exactly
    mix = torch.bmm(weights.unsqueeze(1), E).squeeze(1)  # (N, V)
    return M + mix.clamp_min_(torch.finfo(mix.dtype).tiny).log_()


def _flush_subnormal(t: Tensor) -> Tensor:
    """``t`` with its entries of magnitude below the dtype's smallest normal number set to 0 (a copy)."""
    return t.masked_fill(t.abs() < torch.finfo(t.dtype).tiny, 0.0)


def _logits(h: Tensor, weight: Tensor, bias: Tensor | None, out: Tensor) -> Tensor:
    if bias is None:
        return torch.mm(h, weight.t(), out=out)
    return torch.addmm(bias, h, weight.t(), out=out)


@_float32
def observed_log_softmax(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, rows: int, keep_bytes: int = 0
) -> Tensor:
    """``log_softmax(hidden @ weight.T + bias)[n, target[n]]`` for every row ``n``, ``(N,)``.

    :param hidden: ``(N, H)``.
    :param weight: ``(V, H)`` (an ``nn.Linear``'s weight).
    :param bias: ``(V,)`` or ``None``.
    :param target: ``(N,)`` long ids in ``[0, V)``.
    :param rows: rows of logits computed at once (memory: two ``rows x V`` buffers).
    :param keep_bytes: bytes of log-probabilities that may be kept for the backward pass (whole chunks, in
        order); kept chunks are not recomputed (3 products instead of 4), the others are.  Nothing is kept when no
        backward pass will come (grad mode off, or no input that requires a gradient).
    """
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    # decided here: inside Function.forward grad mode is always off (keeping there never happened before 2026-12-05)
    backward = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (hidden, weight, bias))
    return _ObservedLogSoftmax.apply(hidden, weight, bias, target.contiguous(), rows, keep_bytes if backward else 0)


@_float32
def product_log_normalizer(u: Tensor, v: Tensor, shifted_v: tuple[Tensor, Tensor] | None = None) -> Tensor:
    r"""``log sum_y exp(u[b, t, y] + v[b, s, y])`` for every ``(b, t, s)``, ``(B, T, S)``: the normalisers of a
    product of experts ``p(y | t, s) \propto exp(u_t[y] + v_s[y])``.

    With row maxima :math:`m_t = \max_y u_t[y]` and :math:`n_s = \max_y v_s[y]`,

    .. math::

        \log \sum_y e^{u_t[y] + v_s[y]} = m_t + n_s + \log \big[(e^{u - m})(e^{v - n})^\top\big]_{ts},

    one ``(T x V) (V x S)`` product per example (``S T V`` multiply-adds).  Every factor is at most 1, so nothing
    overflows.  The factors are :func:`shifted_exp`'s: those below ``e`` times the smallest normal number are raised
    to it (a confident expert has many; as subnormal numbers they would slow the product and its gradient 20-100
    times, see the module docstring), so each term moves by less than ``e * tiny``, and an entry whose product is
    at least ``e * V * tiny / eps`` is exact to the dtype's precision.  The others (typically none, a few where
    experts are confident and disagree: their peaks ~100 nats apart) are recomputed exactly as a ``logsumexp`` over
    ``V`` (memory: ``V`` floats each).
    The maxima are constants of the gradient (as in ``torch.logsumexp``); gradients flow through whichever
    branch produced an entry and are finite everywhere.

    :param u: ``(B, T, V)``.
    :param v: ``(B, S, V)``.
    :param shifted_v: ``(n, shifted_exp(v, n))`` with ``n = v.amax(-1, keepdim=True)``, when the caller keeps them for
        many ``u`` (decoding: one ``v`` per sentence, a new ``u`` every step); computed here otherwise.
    """
    if u.dim() != 3 or v.dim() != 3 or u.shape[0] != v.shape[0] or u.shape[-1] != v.shape[-1]:
        raise ValueError(f"product_log_normalizer: expected u (B, T, V) and v (B, S, V), got {tuple(u.shape)} "
                         f"and {tuple(v.shape)}")
    m = u.detach().amax(-1, keepdim=True)  # (B, T, 1)
    if shifted_v is None:
        n = v.detach().amax(-1, keepdim=True)  # (B, S, 1)
        shifted_v = n, shifted_exp(v, n)
    n, exp_v = shifted_v
    prod = torch.bmm(shifted_exp(u, m), exp_v.transpose(1, 2))  # (B, T, S), each entry in (0, V]
    info = torch.finfo(prod.dtype)
    floor = math.e * u.shape[-1] * info.tiny / info.eps
    ok = prod >= floor
    out = torch.where(ok, prod.clamp_min(floor).log(), 0.0) + m + n.transpose(1, 2)
    if not bool(ok.all()):
        b, t, s = (~ok).nonzero(as_tuple=True)
        out = out.index_put((b, t, s), torch.logsumexp(u[b, t] + v[b, s], -1))
    return out
