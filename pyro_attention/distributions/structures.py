r"""Dynamic programmes for structured attention: a binary linear chain and projective dependency trees.

torch-struct 0.5 on PyPI does not run on current torch, so the two structures of Structured Attention Networks
(Kim, Denton, Hoang, Rush, ICLR 2017) are written here, in log space, batched over any leading dims, with
length masks.

**Linear chain.** Binary states :math:`z_1, \dots, z_L \in \{0, 1\}` over the ``L`` real positions of a
sequence padded to ``S``, with unary potentials :math:`\theta_i(z_i)` and transition potentials
:math:`A_i(z_{i}, z_{i+1})` (``pairwise[..., i, a, b]`` scores ``z_i = a -> z_{i+1} = b``):

.. math::

    p(z) = \frac{1}{Z} \exp\Big(\sum_{i=1}^{L} \theta_i(z_i) + \sum_{i=1}^{L-1} A_i(z_i, z_{i+1})\Big),
    \qquad \log Z = \log \sum_{z \in \{0,1\}^L} \exp(\cdots)

computed by the forward algorithm :math:`\alpha_{i+1}(b) = \theta_{i+1}(b) + \log\sum_a \exp(\alpha_i(a) +
A_i(a, b))`, :math:`\log Z = \log\sum_b \exp \alpha_L(b)`.  The marginals are the gradient of the
log-partition, :math:`p(z_i = 1) = \partial \log Z / \partial \theta_i(1)` (Wainwright and Jordan 2008; the
torch-struct recipe), taken with ``create_graph`` so that they stay differentiable.  Exact samples come from
forward filtering, backward sampling.  :func:`chain_conditionals` rewrites the chain as the directed Markov chain
:math:`p(z_1) \prod_i p(z_{i+1} \mid z_i)` with backward messages, and :func:`chain_first_selected` gives the
distribution of the first selected position :math:`\min\{i : z_i = 1\}` (or none).

**Projective dependency trees.** ``S`` words plus a root; ``arc[..., h, m]`` scores the arc ``h -> m`` (head
``h``, modifier ``m``) and ``root[..., m]`` the arc ``root -> m``.  A tree has exactly one word attached to the
root (single root) and no crossing arcs.  :math:`\log Z = \log \sum_{\text{trees}} \exp(\sum_{(h,m)} s_{hm})` by
Eisner's inside algorithm (Eisner 1996) in log space with the complete / incomplete span charts

.. math::

    I^\rightarrow_{ij} = s_{ij} + \log\sum_{k=i}^{j-1} e^{C^\rightarrow_{ik} + C^\leftarrow_{k+1,j}}, \quad
    I^\leftarrow_{ij} = s_{ji} + \log\sum_{k=i}^{j-1} e^{C^\rightarrow_{ik} + C^\leftarrow_{k+1,j}}, \\
    C^\rightarrow_{ij} = \log\sum_{k=i+1}^{j} e^{I^\rightarrow_{ik} + C^\rightarrow_{kj}}, \quad
    C^\leftarrow_{ij} = \log\sum_{k=i}^{j-1} e^{C^\leftarrow_{ik} + I^\leftarrow_{kj}}, \quad
    \log Z = \log\sum_{r} e^{\rho_r + C^\leftarrow_{1r} + C^\rightarrow_{rL}}.

The arc marginals :math:`p(h \to m)` are again gradients of :math:`\log Z`.

**Masks.** ``mask`` is a *length* mask: ``True`` on a prefix of each sequence and ``False`` after it (anything
else raises ``ValueError``).  Potentials at padded positions -- including ``inf`` or ``NaN`` garbage -- are
replaced by zeros before the recursion and never reach ``log Z``, so padding changes neither the log-partition
nor the marginals, and marginals are exactly 0 there (the length-masking bugs of torch-struct #46 / #110).  An
empty sequence has ``log Z = 0``.

**Cost.** The chain loops over ``S`` positions, the tree over ``S`` span widths; both are vectorised over the
batch.  The tree keeps six ``(..., S, S)`` charts (``O(B S^2)``) whose slices are read as strided views;
autograd additionally stores the ``O(B S^3)`` span sums for the backward pass (the price of marginals by
autograd, as in torch-struct).

References: [1] Kim, Denton, Hoang, Rush, "Structured Attention Networks", ICLR 2017. [2] Eisner, "Three New
Probabilistic Models for Dependency Parsing", COLING 1996. [3] Rush, "Torch-Struct: Deep Structured Prediction
Library", ACL 2020 (demo). [4] Wainwright, Jordan, "Graphical Models, Exponential Families, and Variational
Inference", 2008.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = [
    "chain_conditionals",
    "chain_first_selected",
    "chain_log_partition",
    "chain_marginals",
    "chain_sample",
    "tree_log_partition",
    "tree_marginals",
]


# -- shared plumbing -------------------------------------------------------------------------------------------
def _length_mask(mask: Tensor | None, shape: torch.Size, device: torch.device) -> Tensor:
    """``mask`` as a bool tensor broadcast to ``shape`` (``(..., S)``), checked to be a prefix mask."""
    if mask is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    mask = mask.to(torch.bool).expand(shape)
    if shape[-1] > 1 and (mask[..., 1:] & ~mask[..., :-1]).any():
        raise ValueError("mask must be a length mask: True on a prefix of each sequence, False after it")
    return mask


def _grad_of_log_partition(fn: Callable[..., Tensor], inputs: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """Gradients of ``fn(*inputs).sum()`` with respect to ``inputs``: the marginals of an exponential family.

    Differentiable (``create_graph=True``) when gradients are enabled and some input requires them; computed
    without a lasting graph otherwise (e.g. under ``torch.no_grad()``).
    """
    differentiable = torch.is_grad_enabled() and any(x.requires_grad for x in inputs)
    with torch.enable_grad():
        leaves = [x if x.requires_grad else x.detach().requires_grad_() for x in inputs]
        log_z = fn(*leaves)
        if log_z.requires_grad:
            grads = torch.autograd.grad(log_z.sum(), leaves, create_graph=differentiable, allow_unused=True)
        else:  # no position at all: log Z = 0 does not depend on the potentials
            grads = (None,) * len(leaves)
    out = tuple(torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads, strict=True))
    return out if differentiable else tuple(g.detach() for g in out)


# -- linear chain ----------------------------------------------------------------------------------------------
def _chain_inputs(unary: Tensor, pairwise: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Broadcast and mask: ``unary (..., S, 2)``, ``pairwise (..., S-1, 2, 2)``, ``mask (..., S)``."""
    if unary.dim() < 2 or unary.shape[-1] != 2:
        raise ValueError(f"unary must be (..., S, 2), got shape {tuple(unary.shape)}")
    S = unary.shape[-2]
    if pairwise.shape[-2:] != (2, 2):
        raise ValueError(f"pairwise must be (2, 2) or (..., S-1, 2, 2), got shape {tuple(pairwise.shape)}")
    if pairwise.dim() == 2:
        pairwise = pairwise.expand(max(S - 1, 0), 2, 2)
    elif pairwise.shape[-3] not in (1, max(S - 1, 0)):
        raise ValueError(f"pairwise must have S-1 = {S - 1} transitions, got shape {tuple(pairwise.shape)}")
    batch = torch.broadcast_shapes(
        unary.shape[:-2], pairwise.shape[:-3], mask.shape[:-1] if mask is not None else torch.Size()
    )
    unary = unary.expand(batch + (S, 2))
    pairwise = pairwise.expand(batch + (max(S - 1, 0), 2, 2))
    mask = _length_mask(mask, batch + (S,), unary.device)
    unary = unary.masked_fill(~mask.unsqueeze(-1), 0.0)
    pairwise = pairwise.masked_fill(~mask[..., 1:, None, None], 0.0)  # transitions into padded positions
    return unary, pairwise, mask


def _forward(unary: Tensor, pairwise: Tensor, mask: Tensor) -> list[Tensor]:
    """Forward log-messages ``alpha_i (..., 2)`` for every position; padded positions carry the last real one."""
    start = unary.new_tensor([0.0, float("-inf")])  # an empty prefix: log Z = 0
    alpha = torch.where(mask[..., :1], unary[..., 0, :], start)
    alphas = [alpha]
    for i in range(1, unary.shape[-2]):
        step = torch.logsumexp(alpha.unsqueeze(-1) + pairwise[..., i - 1, :, :], dim=-2) + unary[..., i, :]
        alpha = torch.where(mask[..., i : i + 1], step, alpha)
        alphas.append(alpha)
    return alphas


def _backward(unary: Tensor, pairwise: Tensor, mask: Tensor) -> Tensor:
    """Backward log-messages ``beta (..., S, 2)``: ``beta_i(a) = log sum_{z_{>i}} exp(score | z_i = a)``."""
    S = unary.shape[-2]
    beta = unary.new_zeros(unary.shape[:-2] + (2,))
    betas = [beta]
    for i in range(S - 2, -1, -1):
        step = torch.logsumexp(pairwise[..., i, :, :] + (unary[..., i + 1, :] + beta).unsqueeze(-2), dim=-1)
        beta = torch.where(mask[..., i + 1 : i + 2], step, torch.zeros_like(step))
        betas.append(beta)
    return torch.stack(betas[::-1], dim=-2)


def chain_log_partition(unary: Tensor, pairwise: Tensor, mask: Tensor | None = None) -> Tensor:
    """``log Z`` of the binary linear chain, by the forward algorithm in log space.

    :param unary: ``(..., S, 2)`` potentials :math:`\\theta_i(z_i)`.
    :param pairwise: ``(..., S-1, 2, 2)`` transition potentials (``[..., i, a, b]``: ``z_i = a -> z_{i+1} = b``),
        or one shared ``(2, 2)`` matrix.
    :param mask: ``(..., S)`` bool length mask (``None``: all positions real).
    :returns: ``(...)``.
    """
    unary, pairwise, mask = _chain_inputs(unary, pairwise, mask)
    if unary.shape[-2] == 0:
        return unary.new_zeros(unary.shape[:-2])
    return torch.logsumexp(_forward(unary, pairwise, mask)[-1], dim=-1)


def chain_marginals(unary: Tensor, pairwise: Tensor, mask: Tensor | None = None) -> Tensor:
    """``p(z_i = 1)`` ``(..., S)`` (0 at padding), the gradient of ``log Z`` with respect to ``unary[..., 1]``.

    Differentiable: the gradient is taken with ``create_graph=True`` whenever the inputs require gradients.
    """
    unary_b, pairwise_b, mask_b = _chain_inputs(unary, pairwise, mask)
    (grad,) = _grad_of_log_partition(lambda u: chain_log_partition(u, pairwise_b, mask_b), [unary_b])
    return grad[..., 1]


def chain_sample(
    unary: Tensor,
    pairwise: Tensor,
    mask: Tensor | None = None,
    sample_shape: torch.Size | tuple[int, ...] = (),
    generator: torch.Generator | None = None,
) -> Tensor:
    """Exact samples ``(*sample_shape, ..., S)`` (long, 0 at padding) by forward filtering, backward sampling."""
    with torch.no_grad():
        unary, pairwise, mask = _chain_inputs(unary, pairwise, mask)
        sample_shape = torch.Size(sample_shape)
        S = unary.shape[-2]
        shape = sample_shape + unary.shape[:-2]
        if S == 0:
            return torch.zeros(shape + (0,), dtype=torch.long, device=unary.device)
        alphas = _forward(unary, pairwise, mask)
        mask = mask.expand(shape + (S,))
        out = [None] * S
        nxt = torch.zeros(shape, dtype=torch.long, device=unary.device)
        for i in range(S - 1, -1, -1):
            logits = alphas[i].expand(shape + (2,))
            if i + 1 < S:
                # p(z_i | z_{i+1}) ∝ alpha_i(z_i) exp(A_i(z_i, z_{i+1})), when position i + 1 is real
                trans = pairwise[..., i, :, :].expand(shape + (2, 2))
                column = trans.gather(-1, nxt[..., None, None].expand(shape + (2, 1))).squeeze(-1)
                logits = logits + torch.where(mask[..., i + 1 : i + 2], column, torch.zeros_like(column))
            u = torch.rand(shape, dtype=logits.dtype, device=logits.device, generator=generator)
            draw = (u < torch.softmax(logits, dim=-1)[..., 1]).long()
            nxt = torch.where(mask[..., i], draw, torch.zeros_like(draw))
            out[i] = nxt
        return torch.stack(out, dim=-1)


def chain_conditionals(unary: Tensor, pairwise: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The chain as a directed Markov chain: ``log p(z_1)`` ``(..., 2)`` and ``log p(z_{i+1} | z_i)``
    ``(..., S-1, 2, 2)`` (``[..., i, a, b] = log p(z_{i+1} = b | z_i = a)``), both normalised.

    .. math:: p(z_{i+1} = b \\mid z_i = a) = \\exp(A_i(a, b) + \\theta_{i+1}(b) + \\beta_{i+1}(b) - \\beta_i(a))

    with backward messages :math:`\\beta`.  Padded positions are ``0`` with probability one.
    """
    unary, pairwise, mask = _chain_inputs(unary, pairwise, mask)
    beta = _backward(unary, pairwise, mask)
    off = unary.new_tensor([0.0, float("-inf")])
    init = torch.where(mask[..., :1], torch.log_softmax(unary[..., 0, :] + beta[..., 0, :], -1), off)
    trans = torch.log_softmax(pairwise + (unary[..., 1:, :] + beta[..., 1:, :]).unsqueeze(-2), dim=-1)
    trans = torch.where(mask[..., 1:, None, None], trans, off)
    return init, trans


def chain_first_selected(unary: Tensor, pairwise: Tensor, mask: Tensor | None = None) -> Tensor:
    """``log P(first = i)`` ``(..., S + 1)``: the first selected position :math:`\\min\\{i : z_i = 1\\}` of a
    chain draw, with the last entry the probability that nothing is selected (``-inf`` at padding).

    .. math::

        P(\\text{first} = i) = \\frac{1}{Z}\\exp\\Big(\\sum_{j<i} \\theta_j(0) + \\sum_{j<i-1} A_j(0, 0)
        + A_{i-1}(0, 1) + \\theta_i(1) + \\beta_i(1)\\Big), \\qquad
        P(\\text{none}) = \\frac{1}{Z}\\exp\\Big(\\sum_j \\theta_j(0) + \\sum_j A_j(0, 0)\\Big).
    """
    unary, pairwise, mask = _chain_inputs(unary, pairwise, mask)
    S = unary.shape[-2]
    beta = _backward(unary, pairwise, mask)
    log_z = torch.logsumexp(unary[..., 0, :] + beta[..., 0, :], -1) if S else unary.new_zeros(unary.shape[:-2])
    log_z = torch.where(mask[..., 0], log_z, torch.zeros_like(log_z)) if S else log_z
    # score of the all-zero prefix z_{<i} = 0, for i = 0..S (padded potentials are zero)
    zero_step = torch.cat([unary[..., :1, 0], unary[..., 1:, 0] + pairwise[..., :, 0, 0]], dim=-1)
    prefix = torch.cat([unary.new_zeros(unary.shape[:-2] + (1,)), zero_step.cumsum(-1)], dim=-1)
    enter = torch.cat([unary.new_zeros(unary.shape[:-2] + (1,)), pairwise[..., :, 0, 1]], dim=-1)
    first = prefix[..., :S] + enter + unary[..., 1] + beta[..., 1] - log_z.unsqueeze(-1)
    first = first.masked_fill(~mask, float("-inf"))
    none = prefix[..., S:] - log_z.unsqueeze(-1)
    return torch.cat([first, none], dim=-1)


# -- projective dependency trees -------------------------------------------------------------------------------
def _tree_inputs(arc: Tensor, root: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    if arc.dim() < 2 or arc.shape[-1] != arc.shape[-2]:
        raise ValueError(f"arc must be (..., S, S), got shape {tuple(arc.shape)}")
    S = arc.shape[-1]
    if root.shape[-1:] != (S,):
        raise ValueError(f"root must be (..., S) with S = {S}, got shape {tuple(root.shape)}")
    batch = torch.broadcast_shapes(
        arc.shape[:-2], root.shape[:-1], mask.shape[:-1] if mask is not None else torch.Size()
    )
    arc, root = arc.expand(batch + (S, S)), root.expand(batch + (S,))
    mask = _length_mask(mask, batch + (S,), arc.device)
    arc = arc.masked_fill(~(mask.unsqueeze(-1) & mask.unsqueeze(-2)), 0.0)
    root = root.masked_fill(~mask, 0.0)
    return arc, root, mask


def tree_log_partition(arc: Tensor, root: Tensor, mask: Tensor | None = None) -> Tensor:
    """``log Z`` over single-root projective dependency trees, by Eisner's inside algorithm in log space.

    :param arc: ``(..., S, S)``; ``arc[..., h, m]`` scores the arc head ``h`` -> modifier ``m`` (the diagonal is
        ignored).
    :param root: ``(..., S)``; ``root[..., m]`` scores ``root -> m``.
    :param mask: ``(..., S)`` bool length mask (``None``: all words real).
    :returns: ``(...)``.
    """
    arc, root, mask = _tree_inputs(arc, root, mask)
    S = arc.shape[-1]
    batch = arc.shape[:-2]
    if S == 0:
        return arc.new_zeros(batch)
    # Charts indexed by span start i and width w ("_s": [i, w]) or by span end j and reversed width ("_e":
    # [j, S-1-w]), so that every read below is a strided view.  Width-0 complete spans are log 1 = 0.
    new = arc.new_zeros
    c_right_s, c_right_e, c_left_s, c_left_e = (new(batch + (S, S)) for _ in range(4))
    i_right_s, i_left_e = new(batch + (S, S)), new(batch + (S, S))
    for w in range(1, S):
        n = S - w
        # sum_k C->[i, k] + C<-[k+1, j], j = i + w, k = i + u, u = 0..w-1
        split = torch.logsumexp(c_right_s[..., :n, :w] + c_left_e[..., w:, S - w :], dim=-1)
        i_right_s[..., :n, w] = split + torch.diagonal(arc, offset=w, dim1=-2, dim2=-1)  # arc i -> j
        i_left_e[..., w:, S - 1 - w] = split + torch.diagonal(arc, offset=-w, dim1=-2, dim2=-1)  # arc j -> i
        # C->[i, j] = sum_{k=i+1..j} I->[i, k] + C->[k, j]
        right = torch.logsumexp(i_right_s[..., :n, 1 : w + 1] + c_right_e[..., w:, S - w :], dim=-1)
        # C<-[i, j] = sum_{k=i..j-1} C<-[i, k] + I<-[k, j]
        left = torch.logsumexp(c_left_s[..., :n, :w] + i_left_e[..., w:, S - 1 - w : S - 1], dim=-1)
        c_right_s[..., :n, w] = right
        c_right_e[..., w:, S - 1 - w] = right
        c_left_s[..., :n, w] = left
        c_left_e[..., w:, S - 1 - w] = left
    # single root r: root -> r, r heads C<-[0, r] and C->[r, L-1]
    length = mask.sum(-1, keepdim=True)  # (..., 1)
    r = torch.arange(S, device=arc.device)
    width = (length - 1 - r).clamp(min=0)  # width of C->[r, L-1]
    right = c_right_s.gather(-1, width.unsqueeze(-1)).squeeze(-1)  # (..., S)
    total = root + c_left_s[..., 0, :] + right
    valid = mask | ((length == 0) & (r == 0))  # an empty sentence keeps one finite term (log Z set to 0 below)
    log_z = torch.logsumexp(total.masked_fill(~valid, float("-inf")), dim=-1)
    return torch.where(length.squeeze(-1) > 0, log_z, torch.zeros_like(log_z))


def tree_marginals(arc: Tensor, root: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Arc marginals ``p(h -> m)`` ``(..., S, S)`` and root marginals ``p(root -> m)`` ``(..., S)``.

    Gradients of :func:`tree_log_partition`; zero on the diagonal and at padding; differentiable.  For every
    real word ``m``, ``sum_h p(h -> m) + p(root -> m) = 1``; the root marginals sum to one.
    """
    arc_b, root_b, mask_b = _tree_inputs(arc, root, mask)
    arc_m, root_m = _grad_of_log_partition(lambda a, r: tree_log_partition(a, r, mask_b), [arc_b, root_b])
    return arc_m, root_m
