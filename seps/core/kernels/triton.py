"""``impl="triton"``: fused Triton kernels for the selection and HRPA hot paths.

Three kernels, one program per (image, text) pair (a row of the batch):

- :func:`topk_mask` (SPEC.md step 4): the 0/1 mask of the K best of N scores by
  rank counting, ``rank[i] = #{j: s_j > s_i or (s_j = s_i and j < i)}``, tiled as
  ``TILE x N`` comparisons in registers: no sort, no index tensor, no scatter;
- :func:`dropped_softmax` (step 5): the softmax over the dropped patches (max
  shift, exp, mask, sum, divide in one pass) giving the extra token's weights;
- :func:`row_col_max` (step 8, the HRPA hot path): column scaling (``1/||T_i||``),
  the word and token masks and the row and column maxima of the patch-word
  matrix in one pass over ``(M, L)``.

The GEMMs around them stay in cuBLAS. Gradients: ``topk_mask`` has none (hard
decision); ``dropped_softmax`` falls back to the torch code when its inputs need a
gradient; ``row_col_max`` has a custom backward that recomputes the torch version
(the maxima's gradient goes to the arg-max entries).

The kernels run on CUDA tensors, or on CPU tensors in Triton's interpreter when
``TRITON_INTERPRET=1`` is set before ``triton`` is imported (used by the tests to
run the kernels on machines without a GPU).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from ...runtime.precision import fp32_apply
from ..alignment import row_col_max as torch_row_col_max
from ..selection import weighted_softmax
from .base import KernelOps, triton_interpret


@triton.jit
def _topk_mask_kernel(score_ptr, out_ptr, n, k, BLOCK: tl.constexpr, TILE: tl.constexpr):
    row = tl.program_id(0)
    base = score_ptr + row * n
    offs_j = tl.arange(0, BLOCK)
    valid_j = offs_j < n
    s_j = tl.load(base + offs_j, mask=valid_j, other=float("-inf"))
    for i0 in range(0, n, TILE):
        offs_i = i0 + tl.arange(0, TILE)
        valid_i = offs_i < n
        s_i = tl.load(base + offs_i, mask=valid_i, other=float("-inf"))
        # j outranks i: a higher score, or the same score at a lower index (a total order,
        # so exactly k entries have rank < k).
        better = (s_j[None, :] > s_i[:, None]) | (
            (s_j[None, :] == s_i[:, None]) & (offs_j[None, :] < offs_i[:, None])
        )
        better = better & valid_j[None, :]
        rank = tl.sum(better.to(tl.int32), axis=1)
        tl.store(out_ptr + row * n + offs_i, (rank < k).to(tl.float32), mask=valid_i)


@triton.jit
def _dropped_softmax_kernel(score_ptr, drop_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    valid = offs < n
    s = tl.load(score_ptr + row * n + offs, mask=valid, other=float("-inf"))
    d = tl.load(drop_ptr + row * n + offs, mask=valid, other=0.0)
    # The shift is the max over every entry, as in seps.core.selection.weighted_softmax.
    shift = tl.max(s, axis=0)
    e = tl.where(valid, tl.exp(s - shift) * d, 0.0)
    z = tl.sum(e, axis=0)
    z = tl.where(z > 0, z, 1.0)
    tl.store(out_ptr + row * n + offs, e / z, mask=valid)


@triton.jit
def _row_col_max_kernel(
    s_ptr,
    scale_ptr,
    wmask_ptr,
    tmask_ptr,
    row_ptr,
    col_ptr,
    m,
    l,
    HAS_SCALE: tl.constexpr,
    HAS_TMASK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    b = tl.program_id(0)
    om = tl.arange(0, BLOCK_M)
    ol = tl.arange(0, BLOCK_L)
    in_m = om < m
    in_l = ol < l
    inside = in_m[:, None] & in_l[None, :]
    s = tl.load(s_ptr + b * m * l + om[:, None] * l + ol[None, :], mask=inside, other=0.0)
    if HAS_SCALE:
        scale = tl.load(scale_ptr + b * l + ol, mask=in_l, other=0.0)
        s = s * scale[None, :]
    words = (tl.load(wmask_ptr + b * m + om, mask=in_m, other=0) != 0) & in_m
    if HAS_TMASK:
        tokens = (tl.load(tmask_ptr + b * l + ol, mask=in_l, other=0) != 0) & in_l
    else:
        tokens = in_l
    row = tl.max(tl.where(tokens[None, :] & inside, s, float("-inf")), axis=1)
    col = tl.max(tl.where(words[:, None] & inside, s, float("-inf")), axis=0)
    tl.store(row_ptr + b * m + om, row, mask=in_m)
    tl.store(col_ptr + b * l + ol, col, mask=in_l)


def _check(t: Tensor) -> None:
    if t.device.type != "cuda" and not triton_interpret():
        raise RuntimeError(
            f"the Triton kernels need CUDA tensors (got {t.device}); "
            "set TRITON_INTERPRET=1 to run them in the CPU interpreter"
        )


def topk_mask(score: Tensor, k: int) -> Tensor:
    """0/1 float mask ``(..., N)`` of the ``k`` highest scores (no gradient)."""
    _check(score)
    n = score.shape[-1]
    flat = score.detach().reshape(-1, n).contiguous().float()
    out = torch.empty_like(flat)
    if flat.shape[0]:
        block = triton.next_power_of_2(n)
        _topk_mask_kernel[(flat.shape[0],)](flat, out, n, k, BLOCK=block, TILE=16)
    return out.view(score.shape).to(score.dtype)


def dropped_softmax(score: Tensor, drop_weight: Tensor) -> Tensor:
    """Softmax over the entries with ``drop_weight`` 1 (:func:`weighted_softmax`), fused."""
    if torch.is_grad_enabled() and (score.requires_grad or drop_weight.requires_grad):
        return weighted_softmax(score, drop_weight)  # differentiable path
    _check(score)
    n = score.shape[-1]
    s = score.reshape(-1, n).contiguous().float()
    d = drop_weight.expand_as(score).reshape(-1, n).contiguous().float()
    out = torch.empty_like(s)
    if s.shape[0]:
        _dropped_softmax_kernel[(s.shape[0],)](s, d, out, n, BLOCK=triton.next_power_of_2(n))
    return out.view(score.shape).to(score.dtype)


def _row_col_forward(
    s: Tensor, col_scale: Tensor | None, word_mask: Tensor, token_mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    _check(s)
    b, m, l = s.shape
    s_c = s.detach().contiguous().float()
    row = torch.empty(b, m, dtype=s_c.dtype, device=s.device)
    col = torch.empty(b, l, dtype=s_c.dtype, device=s.device)
    scale = col_scale.detach().contiguous().float() if col_scale is not None else s_c
    wmask = word_mask.to(torch.int8).contiguous()
    tmask = token_mask.to(torch.int8).contiguous() if token_mask is not None else wmask
    if b:
        _row_col_max_kernel[(b,)](
            s_c,
            scale,
            wmask,
            tmask,
            row,
            col,
            m,
            l,
            HAS_SCALE=col_scale is not None,
            HAS_TMASK=token_mask is not None,
            BLOCK_M=max(16, triton.next_power_of_2(m)),
            BLOCK_L=max(16, triton.next_power_of_2(l)),
        )
    return row.to(s.dtype), col.to(s.dtype)


class _RowColMax(torch.autograd.Function):
    """Fused forward; the backward recomputes the torch maxima and differentiates them."""

    @staticmethod
    def forward(ctx: Any, s: Tensor, col_scale: Tensor | None, word_mask: Tensor, token_mask: Any):
        ctx.save_for_backward(s, col_scale, word_mask, token_mask)
        return _row_col_forward(s, col_scale, word_mask, token_mask)

    @staticmethod
    def backward(ctx: Any, g_row: Tensor, g_col: Tensor):  # type: ignore[override]
        s, col_scale, word_mask, token_mask = ctx.saved_tensors
        inputs = [s.detach().requires_grad_(ctx.needs_input_grad[0])]
        if col_scale is not None:
            inputs.append(col_scale.detach().requires_grad_(ctx.needs_input_grad[1]))
        with torch.enable_grad():
            scale = inputs[1] if col_scale is not None else None
            row, col = torch_row_col_max(inputs[0], scale, word_mask, token_mask)
            wanted = [t for t in inputs if t.requires_grad]
            grads = iter(torch.autograd.grad((row, col), wanted, (g_row, g_col), allow_unused=True))
        g_s = next(grads) if inputs[0].requires_grad else None
        g_scale = next(grads) if col_scale is not None and inputs[1].requires_grad else None
        return g_s, g_scale, None, None


def row_col_max(
    s: Tensor, col_scale: Tensor | None, word_mask: Tensor, token_mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Fused :func:`seps.core.alignment.row_col_max` (same values, same gradients)."""
    needs_grad = torch.is_grad_enabled() and (
        s.requires_grad or (col_scale is not None and col_scale.requires_grad)
    )
    if needs_grad:
        return fp32_apply(_RowColMax.apply, s, col_scale, word_mask, token_mask)
    return _row_col_forward(s, col_scale, word_mask, token_mask)


def triton_ops() -> KernelOps:
    """The hot-path functions of ``impl="triton"``."""
    return KernelOps(topk_mask=topk_mask, extra_weights=dropped_softmax, row_col_max=row_col_max)


__all__ = ["dropped_softmax", "row_col_max", "topk_mask", "triton_ops"]
