"""Highly-relevant patch-word alignment, HRPA (SPEC.md step 8, rows 4 and 5).

For one (image, text) pair with alignment tokens ``T_i`` and normalised words
``u_j`` the patch-word matrix is ``S_pw[j, i] = act(<u_j, T_i>)`` where ``act`` is
LeakyReLU(0.1) (code) or the identity (paper). With ``row_j = max_i S_pw[j, i]``
and ``col_i = max_j S_pw[j, i]``:

- ``mean``:      ``S = mean_j row_j + mean_i col_i``
- ``mean_topk``: ``S = mean(row) + R(topk_k(row)) + mean(col) + R(topk_k(col))`` (eq. 5)
- ``topk_only``: ``S = R(topk_k(row)) + R(topk_k(col))``

``R = Linear(k, 2k) -> GELU -> Linear(2k, 1)`` is shared by both directions; top-k lists
with fewer than k real values are zero-padded, as in the reference re-implementation.

Batched evaluation (:func:`patch_word_scores`, :meth:`HRPA.reduce`) never materialises
the alignment tokens per (image, text) pair in their normalised form:

- ``<u_j, l2n(A_i)> = <u_j, A_i> / ||A_i||`` (column scale), so the normalisation is
  one scale per column of ``S_pw`` instead of a pass over ``N_c x C`` values;
- two contraction orders give ``<u_j, A_i>`` for ``A = W x`` (W: ``N_c x N``):
  *direct* ``U (W x)^T`` costs ``N_c N C + M N_c C`` multiply-adds per pair, and
  *gram* ``(U x^T) W^T`` with ``||A_i||^2 = W_i G W_i^T``, ``G = x x^T`` once per
  image, costs ``M N C + M N N_c + N_c N^2``; ``U x^T`` is then one large GEMM over
  all texts. Gram wins for short captions (sparse: M ~ 20), direct for long ones
  (dense: M ~ 120); :func:`use_gram` picks the cheaper per branch. When the
  selection keeps the same ``K`` patches in every pair with weight 1 (top-K), the
  gram order takes the weights in compact form (:class:`KeptWeights`): the norms
  then cost ``N_c K^2`` instead of ``N_c N^2`` and ``W`` is never built;
- the activation is monotone, so ``act(max(s)) = max(act(s))``: it is applied to
  the row and column maxima only;
- the extra token is one more row of ``W`` and the ``[CLS]`` column
  ``<u_j, l2n(cls)>`` is computed for a block of images in one GEMM
  (:func:`cls_word_scores`), so a pair needs one batched product per order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..runtime.precision import fp32_apply
from .config import SEPSConfig


def _masked_max(s: Tensor, mask: Tensor | None, dim: int) -> Tensor:
    """Maximum over ``dim`` of the entries where the (broadcastable) ``mask`` is True."""
    if mask is None:
        return s.amax(dim=dim)
    # An additive 0 / -inf bias of the mask's (small) shape: a broadcast add is about
    # 5x faster on the CPU than masked_fill or where with a broadcast mask.
    bias = torch.zeros(mask.shape, dtype=s.dtype, device=s.device)
    return (s + bias.masked_fill_(~mask, float("-inf"))).amax(dim=dim)


def _masked_mean(s: Tensor, mask: Tensor | None) -> Tensor:
    if mask is None:
        return s.mean(dim=-1)
    m = mask.to(s.dtype)
    return (s * m).sum(-1) / m.sum(-1).clamp(min=1.0)


def _topk_padded(s: Tensor, mask: Tensor | None, k: int) -> Tensor:
    """The k largest valid values of the last axis, zero-padded: ``(..., k)``."""
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    n = s.shape[-1]
    vals = s.topk(min(k, n), dim=-1).values
    if n < k:
        vals = F.pad(vals, (0, k - n), value=float("-inf"))
    return torch.where(torch.isfinite(vals), vals, torch.zeros_like(vals))


class HRPA(nn.Module):
    """Similarity ``S(I, T)`` of every pair from its tokens and words."""

    def __init__(self, config: SEPSConfig) -> None:
        super().__init__()
        self.config = config
        self.relevance_mlp: nn.Module | None = None
        if config.hrpa != "mean":
            k = config.top_k
            self.relevance_mlp = nn.Sequential(nn.Linear(k, 2 * k), nn.GELU(), nn.Linear(2 * k, 1))

    def patch_word(self, tokens: Tensor, words: Tensor) -> Tensor:
        """``S_pw (B_v, B_t, M, L)`` from tokens ``(B_v, B_t, L, C)`` and words ``(B_t, M, C)``.

        Both inputs must already be L2-normalised.
        """
        s = torch.einsum("vtlc,tmc->vtml", tokens, words)
        if self.config.similarity_activation == "leaky_relu":
            s = F.leaky_relu(s, negative_slope=0.1)
        return s

    def forward(
        self,
        tokens: Tensor,
        words: Tensor,
        word_mask: Tensor,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        """Similarities ``(B_v, B_t)``.

        tokens: ``(B_v, B_t, L, C)`` normalised alignment tokens;
        words: ``(B_t, M, C)`` normalised words, ``word_mask (B_t, M)`` True for real words;
        token_mask: optional ``(B_v, B_t, L)`` True for valid tokens.
        """
        s = self.patch_word(tokens, words)  # (B_v, B_t, M, L)
        wm = word_mask.unsqueeze(0).expand(s.shape[0], -1, -1)  # (B_v, B_t, M)
        row = _masked_max(s, None if token_mask is None else token_mask.unsqueeze(2), dim=3)
        col = _masked_max(s, wm.unsqueeze(3), dim=2)  # (B_v, B_t, L)
        return self.combine(row, col, wm, token_mask)

    def combine(
        self, row: Tensor, col: Tensor, word_mask: Tensor, token_mask: Tensor | None
    ) -> Tensor:
        """``S(I, T)`` from the (activated) row maxima ``(..., M)`` and column maxima
        ``(..., L)``: ``row_mean + col_mean`` and/or the relevance terms of eq. (5)."""
        out = torch.zeros(row.shape[:-1], dtype=row.dtype, device=row.device)
        if self.config.hrpa in ("mean", "mean_topk"):
            out = out + _masked_mean(row, word_mask) + _masked_mean(col, token_mask)
        if self.relevance_mlp is not None:
            k = self.config.top_k
            top = torch.stack([_topk_padded(row, word_mask, k), _topk_padded(col, token_mask, k)])
            out = out + self.relevance_mlp(top).squeeze(-1).sum(0)
        return out

    def reduce(
        self,
        s: Tensor,
        col_scale: Tensor | None,
        word_mask: Tensor,
        token_mask: Tensor | None,
        rowcol: RowColFn | None = None,
    ) -> Tensor:
        """Similarities ``(B,)`` from raw patch-word products (the HRPA hot path).

        s: ``(B, M, L)`` with ``s[b, j, i] = <u_j, T_i> / col_scale[b, i]`` before the
        activation; col_scale: ``(B, L)`` multiplier of each column (``1/||T_i||``) or
        ``None``; word_mask ``(B, M)`` and token_mask ``(B, L)`` (``None`` = all valid)
        mark the real words and tokens. ``rowcol`` computes the masked row and column
        maxima (:func:`row_col_max`, or a fused kernel).
        """
        row, col = (rowcol or row_col_max)(s, col_scale, word_mask, token_mask)
        return self.from_maxima(row, col, word_mask, token_mask)

    def from_maxima(
        self, row: Tensor, col: Tensor, word_mask: Tensor, token_mask: Tensor | None
    ) -> Tensor:
        """Similarities ``(B,)`` from the row maxima ``(B, M)`` and column maxima ``(B, L)``
        of the patch-word products before the activation (:meth:`reduce`'s second half)."""
        if self.config.similarity_activation == "leaky_relu":
            # Monotone: the activation of the maximum is the maximum of the activations.
            row = F.leaky_relu(row, negative_slope=0.1)
            col = F.leaky_relu(col, negative_slope=0.1)
        return self.combine(row, col, word_mask, token_mask)


#: ``rowcol(s, col_scale, word_mask, token_mask) -> (row (B, M), col (B, L))``
RowColFn = Callable[[Tensor, "Tensor | None", Tensor, "Tensor | None"], tuple[Tensor, Tensor]]


def row_col_max(
    s: Tensor, col_scale: Tensor | None, word_mask: Tensor, token_mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Masked maxima of ``s * col_scale``: ``row (B, M)`` over valid tokens and
    ``col (B, L)`` over real words (SPEC.md step 8). Rows of padding words and
    columns of invalid tokens hold unspecified values; callers mask them."""
    if col_scale is not None:
        s = s * col_scale.unsqueeze(1)
    row = _masked_max(s, None if token_mask is None else token_mask.unsqueeze(1), dim=2)
    col = _masked_max(s, word_mask.unsqueeze(2), dim=1)
    return row, col


def use_gram(words: int, patches: int, aggregated: int, dim: int, kept: int | None = None) -> bool:
    """Whether the gram order is cheaper than the direct one (multiply-adds per pair).

    ``kept``: the number of kept patches when the weights take the compact form
    (:class:`KeptWeights`), whose gram norms cost ``N_c K^2 + N^2`` instead of ``N_c N^2``
    and whose direct order aggregates ``K`` tokens instead of ``N`` (ViT-224, C = 512:
    the gram order is then the cheaper one up to about 19 words).
    """
    if kept is None:
        direct = aggregated * patches * dim + words * aggregated * dim + patches * dim
        norms = aggregated * patches**2
        products = words * patches * aggregated
    else:
        # The direct order aggregates the K kept tokens only (:func:`_direct_kept`).
        direct = aggregated * kept * dim + patches * dim + words * (aggregated + 1) * dim
        norms = aggregated * kept**2 + patches**2
        products = words * (kept * aggregated + patches)
    return words * patches * dim + products + norms < direct


def _inv_norm(sq: Tensor) -> Tensor:
    """``1 / max(||v||, 1e-12)`` from ``||v||^2`` (the eps of ``l2n``)."""
    return torch.sqrt(sq.clamp(min=0.0)).clamp(min=1e-12).reciprocal()


class _DirectTokens(torch.autograd.Function):
    """Direct order of the weighted tokens: ``A = W x`` ``(B, R, C)``, returns
    ``<u_j, A_i>`` ``(B, M, R)`` and ``1 / max(||A_i||, 1e-12)`` ``(B, R)``.

    Same values and gradients as the three autograd ops, with a hand-written
    backward: the gradient of ``A`` from both outputs is one batched product plus
    one in-place scaled add (autograd's norm backward takes several full passes over
    ``A``), and the batched products use contiguous layouts.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, w: Tensor, x: Tensor, words: Tensor):  # type: ignore[override]
        b, r, n = w.shape
        a = (w.reshape(b * r, n) @ x).view(b, r, -1)
        s = torch.bmm(words, a.transpose(1, 2))
        norm = torch.linalg.vector_norm(a, dim=-1)
        inv = norm.clamp(min=1e-12).reciprocal()
        ctx.save_for_backward(w, x, words, a, inv, norm)
        return s, inv

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, ds: Tensor, dinv: Tensor):  # type: ignore[override]
        w, x, words, a, inv, norm = ctx.saved_tensors  # type: ignore[attr-defined]
        need_w, need_x, need_words = ctx.needs_input_grad[:3]  # type: ignore[attr-defined]
        dw = dx = dwords = None
        if need_words:
            dwords = torch.bmm(ds, a)
        if need_w or need_x:
            # d(1/max(||a||, eps)) / da = -a / ||a||^3 where ||a|| > eps, else 0.
            coef = torch.where(norm > 1e-12, -dinv * inv**3, torch.zeros_like(inv))
            # bmm then an in-place addcmul: baddbmm with a tensor to add was about 2x
            # slower on the CPU (it copies the addend and misses the fast batched GEMM).
            da = torch.bmm(ds.transpose(1, 2), words)
            da.addcmul_(a, coef.unsqueeze(-1))
            b, r, n = w.shape
            da2 = da.view(b * r, -1)
            if need_w:
                dw = (da2 @ x.t()).view(b, r, n)
            if need_x:
                dx = w.reshape(b * r, n).t() @ da2
        return dw, dx, dwords


class _TokenScores(torch.autograd.Function):
    """``<u_j, A_i>`` ``(B, M, R)`` and ``1 / max(||A_i||, 1e-12)`` ``(B, R)`` of given
    tokens ``A (B, R, C)`` and words ``(B, M, C)``, with the hand-written backward of
    :class:`_DirectTokens` (one batched product plus one scaled add for ``dA``)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, a: Tensor, words: Tensor):  # type: ignore[override]
        s = torch.bmm(words, a.transpose(1, 2))
        norm = torch.linalg.vector_norm(a, dim=-1)
        inv = norm.clamp(min=1e-12).reciprocal()
        ctx.save_for_backward(a, words, inv, norm)
        return s, inv

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, ds: Tensor, dinv: Tensor):  # type: ignore[override]
        a, words, inv, norm = ctx.saved_tensors  # type: ignore[attr-defined]
        need_a, need_words = ctx.needs_input_grad[:2]  # type: ignore[attr-defined]
        da = dwords = None
        if need_words:
            dwords = torch.bmm(ds, a)
        if need_a:
            coef = torch.where(norm > 1e-12, -dinv * inv**3, torch.zeros_like(inv))
            da = torch.bmm(ds.transpose(1, 2), words)
            da.addcmul_(a, coef.unsqueeze(-1))
        return da, dwords


def _direct_kept(
    words: Tensor, x: Tensor, kept: KeptWeights, extra: Tensor
) -> tuple[Tensor, Tensor]:
    """Direct order with compact weights: ``<u_j, A_i>`` ``(B, M, N_c + 1)`` and
    ``1 / ||A_i||`` ``(B, N_c + 1)``, the extra token last.

    ``A = E_k^T x_k`` over the ``K`` kept patches only (``N_c K C`` multiply-adds per
    pair, where the full weights ``(N_c, N)`` cost ``N_c N C``, half of it on zeros);
    the extra token ``extra @ x`` is one GEMM for the chunk.
    """
    body = _KeptTokens.apply(kept.e.to(x.dtype), x, kept.idx)
    a = torch.cat([body, (extra @ x).unsqueeze(1)], dim=1)
    return _TokenScores.apply(a, words)


class _KeptTokens(torch.autograd.Function):
    """Aggregated tokens of the kept patches ``A = E_k^T x_k`` ``(B, N_c, C)`` from the
    image's exp-logits ``e (N, N_c)``, its tokens ``x (N, C)`` and the kept indices
    ``idx (B, K)``.

    Same values and gradients as ``bmm(e[idx]^T, x[idx])`` under autograd. What the
    backward needs depends on the device (:func:`_keep_gathered`): on CUDA it gathers
    ``x[idx]`` and ``e[idx]`` again instead of keeping them, since keeping the gathered
    ``(B, K, C)`` tokens of every pair until the backward costs 0.8 GB for a training
    step of 64 x 64 pairs at ViT-224, C = 512 (issue 45: a step's peak 1.8 GB instead
    of 3.0), and GPU memory is what limits the batch; on the CPU it keeps them, since
    gathering again made that step about 10% slower (2.79 against 2.55 s, median of 6
    alternations in one process) and memory is rarely the limit there.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, e: Tensor, x: Tensor, idx: Tensor):  # type: ignore[override]
        xk, ekt = _kept_rows(e, x, idx)
        kept = (xk, ekt) if _keep_gathered(x) else ()
        ctx.save_for_backward(e, x, idx, *kept)
        return torch.bmm(ekt, xk)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, da: Tensor):  # type: ignore[override]
        e, x, idx, *kept = ctx.saved_tensors  # type: ignore[attr-defined]
        need_e, need_x = ctx.needs_input_grad[:2]  # type: ignore[attr-defined]
        xk, ekt = kept if kept else _kept_rows(e, x, idx)
        flat = idx.reshape(-1)
        de = dx = None
        if need_e:
            dekt = torch.bmm(da, xk.transpose(1, 2))  # (B, N_c, K)
            rows = dekt.transpose(1, 2).reshape(-1, e.shape[1])
            de = torch.zeros_like(e).index_add_(0, flat, rows)
        if need_x:
            dxk = torch.bmm(ekt.transpose(1, 2), da)  # (B, K, C)
            dx = torch.zeros_like(x).index_add_(0, flat, dxk.reshape(-1, x.shape[1]))
        return de, dx, None


def _keep_gathered(x: Tensor) -> bool:
    """Whether :class:`_KeptTokens` keeps the gathered tokens for its backward (CPU)
    rather than gathering them again (CUDA): time against memory, the same values."""
    return not x.is_cuda


def _rows(t: Tensor, idx: Tensor) -> Tensor:
    """``t[idx]`` for a ``(B, K)`` index into the first axis: ``(B, K, *t.shape[1:])``,
    by one ``index_select`` (faster on the CPU than advanced indexing)."""
    return t.index_select(0, idx.reshape(-1)).view(*idx.shape, *t.shape[1:])


def _kept_rows(e: Tensor, x: Tensor, idx: Tensor) -> tuple[Tensor, Tensor]:
    """The kept tokens ``x[idx] (B, K, C)`` and their weights ``e[idx]^T (B, N_c, K)``."""
    return _rows(x, idx), _rows(e, idx).transpose(1, 2)


def cls_word_scores(words: Tensor, cls_n: Tensor) -> tuple[Tensor, ...]:
    """``<u_j, l2n(cls_v)>`` for images ``v`` and every word of every text, one
    ``(B_t, M)`` tensor per image.

    words: ``(B_t, M, C)`` normalised words; cls_n: ``(G, C)`` normalised ``[CLS]``
    of a block of images. One GEMM for the block: a matrix-vector product per image
    would re-read all the words for every image (memory-bound, about 20x slower).
    """
    return cls_word_block(words, cls_n).unbind(0)


def cls_word_block(words: Tensor, cls_n: Tensor) -> Tensor:
    """:func:`cls_word_scores` as one ``(G, B_t, M)`` tensor (the block alignment's form)."""
    b_t, m, c = words.shape
    return (cls_n @ words.reshape(b_t * m, c).t()).view(-1, b_t, m)


@dataclass(frozen=True)
class KeptWeights:
    """Aggregation weights of a selection that keeps the same number ``K`` of patches
    in every pair, in compact form: ``W[b, j, n] = e[n, j]`` for the kept patches
    ``n in idx[b]`` and 0 elsewhere (:func:`seps.core.aggregation.pair_weights` with a 0/1
    weight and ``normalise=False``).

    e: ``(N, N_c)`` the image's exp-logits; idx: ``(B, K)`` kept patch indices.

    Why: in the gram order the squared token norms ``W_j G W_j^T`` only involve the
    kept rows and columns of ``G``, so the compact form does ``N_c K^2`` multiply-adds
    per pair instead of ``N_c N^2`` (4x fewer at rho = 0.5) and never builds ``W``.
    """

    e: Tensor
    idx: Tensor

    @classmethod
    def from_keep(cls, e: Tensor, keep: Tensor) -> KeptWeights:
        """From a ``(B, N)`` bool mask with the same number of True in every row."""
        b = keep.shape[0]
        return cls(e, keep.nonzero()[:, 1].view(b, -1))

    def dense(self, n: int) -> Tensor:
        """The full weights ``W (B, N_c, N)`` over ``n`` patches."""
        b = self.idx.shape[0]
        ek = _rows(self.e, self.idx)
        w = self.e.new_zeros(b, n, self.e.shape[1]).scatter(
            1, self.idx.unsqueeze(-1).expand_as(ek), ek
        )
        return w.transpose(1, 2)


def _gram_kept(
    words: Tensor, x: Tensor, gram: Tensor, kept: KeptWeights, extra: Tensor
) -> tuple[Tensor, Tensor]:
    """Gram order with compact weights: ``<u_j, A_i>`` ``(B, M, N_c + 1)`` and the
    squared norms ``||A_i||^2`` ``(B, N_c + 1)``, the extra token last.

    ``<u_j, A_i> = sum_{n in idx} P[j, n] e[n, i]`` with ``P = U x^T``, and
    ``||A_i||^2 = e_i^T G[idx, idx] e_i`` restricted to the kept patches.
    """
    b, m, _ = words.shape
    k = kept.idx.shape[1]
    n = x.shape[0]
    p = (words.reshape(b * m, -1) @ x.t()).view(b, m, n)  # (B, M, N), one GEMM
    # A zero column for the extra token: its products and norm are written into it
    # (no concatenation), and N_c + 1 = 40 columns made the batched products about
    # 30% faster than N_c = 39 on the CPU.
    ek = _rows(F.pad(kept.e, (0, 1)), kept.idx)  # (B, K, N_c + 1)
    pk = torch.gather(p, 2, kept.idx.unsqueeze(1).expand(b, m, k))  # (B, M, K)
    weighted = torch.bmm(pk, ek)
    # vecdot, not a batched matrix-vector bmm: about 3x faster on the CPU.
    weighted[:, :, -1] = torch.linalg.vecdot(p, extra.unsqueeze(1))  # (B, M)
    gk = _rows(gram, kept.idx)  # (B, K, N)
    gkk = torch.gather(gk, 2, kept.idx.unsqueeze(1).expand(b, k, k))  # (B, K, K)
    ekt = ek.transpose(1, 2)  # (B, N_c + 1, K): this order is ~1.5x faster than gkk @ ek
    sq = torch.linalg.vecdot(torch.bmm(ekt, gkk), ekt)  # (B, N_c + 1)
    sq[:, -1] = torch.linalg.vecdot(extra @ gram, extra)
    return weighted, sq


def patch_word_scores(
    words: Tensor,
    x: Tensor,
    cls_col: Tensor | None,
    agg_weights: Tensor | KeptWeights | None,
    extra_weights: Tensor,
    gram: Tensor | None = None,
    body_masks: tuple[Tensor, ...] = (),
    xn: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Raw ``S_pw`` of one image against a chunk of texts (SPEC.md steps 7-8).

    The alignment tokens are ``T = l2n([cls, body..., e])`` where the body is
    ``A = agg_weights @ x`` (aggregation) or the patches marked by each of
    ``body_masks`` (``aggregation='none'``; two masks under ``fused``), and the
    extra token is ``e = extra_weights @ x``. The extra token is one more row of the
    aggregation weights, so ``[A; e]`` is one GEMM and its patch-word products one
    batched product. The token order (``cls``, selected patches, aggregated tokens,
    extra token) does not matter: HRPA reduces over tokens with max, mean and top-k.

    Args:
        words: ``(B, M, C)`` normalised words of the texts.
        x: ``(N, C)`` unnormalised patches of the image.
        cls_col: ``(B, M)`` ``<u_j, l2n(cls)>`` (:func:`cls_word_scores`) or ``None``.
        agg_weights: ``(B, N_c, N)`` aggregation weights, the same in compact form
            (:class:`KeptWeights`, used as such in the gram order), or ``None``
            without aggregation.
        extra_weights: ``(B, N)`` weights of the extra token.
        gram: ``(N, N)`` ``x x^T``: use the gram order (see the module docstring).
        body_masks: ``(B, N)`` bool masks of the selected patches (no aggregation).
        xn: ``(N, C)`` normalised patches (no aggregation).

    Returns:
        ``s (B, M, L)``, ``col_scale (B, L)`` and ``token_mask (B, L)`` (``None`` when
        every token is valid), for :meth:`HRPA.reduce`.
    """
    b, m, _ = words.shape
    if isinstance(agg_weights, KeptWeights) and gram is not None:
        weighted, sq = _gram_kept(words, x, gram, agg_weights, extra_weights)
        return _assemble(words, cls_col, weighted, _inv_norm(sq), body_masks, xn)
    if isinstance(agg_weights, KeptWeights):
        # float32 under autocast: the hand-written backward mixes saved tensors.
        weighted, scale = fp32_apply(_direct_kept, words, x, agg_weights, extra_weights)
        return _assemble(words, cls_col, weighted, scale, body_masks, xn)
    w = extra_weights.unsqueeze(1)
    if agg_weights is not None:
        w = torch.cat([agg_weights, w], dim=1)
    if gram is not None:
        # Gram order: P[b, j, n] = <u_j, x_n>, one GEMM for the whole chunk.
        p = (words.reshape(b * m, -1) @ x.t()).view(b, m, -1)  # (B, M, N)
        weighted = torch.bmm(p, w.transpose(1, 2))  # (B, M, R)
        r = w.shape[1]  # N_c + 1 (or 1) weighted tokens: aggregated, then extra
        wg = (w.reshape(b * r, -1) @ gram).view(b, r, -1)
        weighted_scale = _inv_norm((wg * w).sum(-1))
    else:
        # float32 under autocast: the hand-written backward mixes saved tensors.
        weighted, weighted_scale = fp32_apply(_DirectTokens.apply, w, x, words)
    return _assemble(words, cls_col, weighted, weighted_scale, body_masks, xn)


def block_row_col_max(
    words: Tensor,
    word_mask: Tensor,
    x: Tensor,
    cls_col: Tensor | None,
    agg_weights: Tensor,
    extra_weights: Tensor,
    per_image: bool,
) -> tuple[Tensor, Tensor]:
    """The masked row and column maxima of ``S_pw`` (:func:`row_col_max` of
    :func:`patch_word_scores`) of a block of ``V`` images against ``B`` texts in one
    call, in the direct order with aggregation: ``row (V * B, M)`` and ``col (V * B, L)``
    (``[CLS]`` first, then the aggregated tokens, the extra token last), pairs in group
    order (below), for :meth:`HRPA.from_maxima`.

    The tokens ``A = W x`` are one product per image over all its texts, ``(B * R, N) @
    (N, C)``, with the full weights: the compact form (:class:`KeptWeights`) halves the
    multiply-adds but gathers per pair, and its ``V * B`` tiny batched products made a
    training step of the ``standard`` regime 1.5x slower. The pairs are grouped by the
    words they share, so that the words meet the tokens of all their pairs in one
    product, ``(M, C) @ (C, P * R)``, and the maxima are taken in that product's layout
    ``(G, M, P, R)``: ``S_pw`` is never rearranged per pair. Groups are texts (``P = V``
    images each; pairs text-major) or, with ``per_image``, images (each image's own
    caption, ``P = B``; pairs image-major). Why at all: :func:`seps.core.head_steps.align_block`.

    Args:
        words: ``(G, M, C)`` normalised words: of the ``B`` texts, or of the ``V``
            images' own captions with ``per_image``; ``word_mask (G, M)`` their real words.
        x: ``(V, N, C)`` unnormalised patches of the images.
        cls_col: ``(V, B, M)`` ``<u_j, l2n(cls)>`` or ``None``.
        agg_weights: ``(V, B, N_c, N)`` aggregation weights.
        extra_weights: ``(V, B, N)`` weights of the extra token.
        per_image: group by image (see above).
    """
    # float32 under autocast: the hand-written backward mixes saved tensors.
    s, inv = fp32_apply(_block_products, words, x, agg_weights, extra_weights, per_image)
    g, m, p, _ = s.shape
    s = s * inv.unsqueeze(1)  # <u_j, l2n(A_i)>, (G, M, P, R)
    row = s.amax(-1)  # (G, M, P), over the tokens (all valid)
    col = _masked_max(s, word_mask.view(g, m, 1, 1), dim=1)  # (G, P, R), real words only
    if cls_col is not None:
        cls_g = _group(cls_col, per_image)  # (G, P, M)
        row = torch.maximum(row, cls_g.transpose(1, 2))
        cls_max = _masked_max(cls_g, word_mask.unsqueeze(1), dim=-1)  # (G, P)
        col = torch.cat([cls_max.unsqueeze(-1), col], dim=-1)
    return row.transpose(1, 2).reshape(g * p, m), col.reshape(g * p, -1)


def _group(t: Tensor, per_image: bool) -> Tensor:
    """A ``(V, B, ...)`` per-pair tensor in group order: ``(B, V, ...)`` by text."""
    return t if per_image else t.transpose(0, 1)


def _block_products(
    words: Tensor, x: Tensor, w: Tensor, extra: Tensor, per_image: bool
) -> tuple[Tensor, Tensor]:
    """``<u_j, A_i>`` ``(G, M, P, R)`` and ``1 / ||A_i||`` ``(G, P, R)`` of every pair of the
    block, the extra token last (:func:`block_row_col_max`)."""
    v, b, r, n = w.shape
    w = torch.cat([w, extra.unsqueeze(2)], dim=2)  # the extra token: one more row
    a = torch.bmm(w.view(v, b * (r + 1), n), x).view(v, b, r + 1, -1)  # A = W x, per image
    g, m, c = words.shape
    a = _group(a, per_image).reshape(g, -1, c)  # (G, P * R, C)
    s, inv = _TokenScores.apply(a, words)  # (G, M, P * R), (G, P * R)
    return s.view(g, m, -1, r + 1), inv.view(g, -1, r + 1)


def _assemble(
    words: Tensor,
    cls_col: Tensor | None,
    weighted: Tensor,
    weighted_scale: Tensor,
    body_masks: tuple[Tensor, ...],
    xn: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``S_pw`` blocks in token order (``[CLS]``, selected patches, weighted tokens)
    with their column scales and token mask (see :func:`patch_word_scores`)."""
    b, m, _ = words.shape
    r = weighted.shape[2]
    blocks: list[Tensor] = []
    scales: list[Tensor] = []
    if cls_col is not None:
        blocks.append(cls_col.unsqueeze(-1))  # (B, M, 1)
        scales.append(torch.ones(b, 1, dtype=words.dtype, device=words.device))
    token_mask = None
    if body_masks:
        assert xn is not None
        # Without aggregation the body is the selected patches themselves: their
        # cosines with every word, repeated once per selection, masked per pair.
        sx = (words.reshape(b * m, -1) @ xn.t()).view(b, m, -1)  # (B, M, N)
        for mask in body_masks:
            blocks.append(sx)
            scales.append(torch.ones_like(mask, dtype=words.dtype))
        # Only the selected patches can be invalid: [CLS] and the weighted tokens are not.
        valid = partial(torch.ones, dtype=torch.bool, device=words.device)
        cls_valid = [valid(b, 1)] if cls_col is not None else []
        token_mask = torch.cat([*cls_valid, *body_masks, valid(b, r)], dim=1)
    blocks.append(weighted)
    scales.append(weighted_scale)
    s = torch.cat(blocks, dim=2)
    col_scale = torch.cat(scales, dim=1)
    return s, col_scale, token_mask


__all__ = [
    "HRPA",
    "KeptWeights",
    "RowColFn",
    "block_row_col_max",
    "cls_word_block",
    "cls_word_scores",
    "patch_word_scores",
    "row_col_max",
    "use_gram",
]
