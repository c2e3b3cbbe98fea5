"""Semantic patch scoring and selection (SPEC.md shared steps 2-5, rows 1 and 6).

Shapes: ``B_v`` images, ``B_t`` texts, ``N`` spatial patches, ``C`` channels.

The selection is represented by masks over all ``N`` patches instead of gathered
token lists. Every downstream operation (the aggregation MLP, the softmax over the
selected tokens, the patch-word maxima) is permutation-invariant over the
selected set, so "the K selected tokens in descending score order" of SPEC.md
and "all N tokens with the non-selected ones masked out" give the same numbers;
the mask form also covers decisions whose keep count varies per pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import SEPSConfig, keep_count

#: ``noise(shape, like) -> Tensor``: draws the decision noise; tests replace it.
NoiseFn = Callable[[tuple[int, ...], Tensor], Tensor]


def l2n(x: Tensor) -> Tensor:
    """L2 normalisation over the last axis with eps 1e-12 (SPEC.md ``l2n``)."""
    return F.normalize(x, dim=-1, eps=1e-12)


def has_cls_token(num_tokens: int) -> bool:
    """SPEC.md: ``L_v`` not a perfect square means the first token is ``[CLS]``."""
    root = math.isqrt(num_tokens)
    return root * root != num_tokens


def split_cls_token(img_embs: Tensor) -> tuple[Tensor | None, Tensor]:
    """``(cls (B_v, C) or None, x (B_v, N, C))``: the ``[CLS]`` token of image tokens
    ``(B_v, L_v, C)`` when there is one (:func:`has_cls_token`) and the spatial tokens."""
    if has_cls_token(img_embs.shape[1]):
        return img_embs[:, 0], img_embs[:, 1:]
    return None, img_embs


def gumbel_noise(shape: tuple[int, ...], like: Tensor) -> Tensor:
    """Standard Gumbel noise ``-log(-log(U + 1e-9) + 1e-9)``, as the reference code draws it."""
    u = torch.rand(shape, device=like.device, dtype=like.dtype)
    return -torch.log(-torch.log(u + 1e-9) + 1e-9)


def image_self_attention(x: Tensor) -> Tensor:
    """``s_im[v, n] = < l2n(mean_n x[v]), l2n(x[v, n]) >`` (SPEC.md step 2).

    x: ``(B_v, N, C)`` unnormalised spatial tokens -> ``(B_v, N)``.
    """
    return torch.einsum("vc,vnc->vn", l2n(x.mean(dim=1)), l2n(x))


def text_global(words: Tensor, lens: Tensor) -> Tensor:
    """``g_t = l2n(mean of the real words of text t)`` (SPEC.md step 3).

    words: ``(B_t, L, C)`` unnormalised, lens: ``(B_t,)`` -> ``(B_t, C)``.
    """
    mask = length_mask(lens, words.shape[1]).to(words.dtype)
    mean = (words * mask.unsqueeze(-1)).sum(1) / lens.clamp(min=1).to(words.dtype).unsqueeze(-1)
    return l2n(mean)


def text_guided_attention(xn: Tensor, words: Tensor, lens: Tensor) -> Tensor:
    """``s[v, t, n] = < g_t, xn[v, n] >`` (SPEC.md step 3).

    xn: ``(B_v, N, C)`` normalised patches; words ``(B_t, L, C)`` -> ``(B_v, B_t, N)``.
    """
    return torch.einsum("tc,vnc->vtn", text_global(words, lens), xn)


def guide_scores(glob64: Tensor, xn64: Tensor, dtype: torch.dtype) -> Tensor:
    """``s[..., t, n] = < g_t, xn[n] >`` (step 3) computed in float64, then rounded.

    glob64: ``(B_t, C)`` float64 text globals (:func:`text_global` of float64 words),
    xn64: ``(N, C)`` float64 normalised patches -> ``(B_t, N)`` in ``dtype``.

    Why float64: the top-K decision is discontinuous, so two implementations whose
    float32 scores differ in the last bit (different GEMM shapes sum in different
    orders) pick different patches at near-ties, which at evaluation scale
    (100 x 500 pairs) happens a few times per run. Rounding a float64 product to
    float32 gives the same float32 value whatever the summation order, so every
    implementation (``loop``, ``batched``, ...) selects exactly the same patches.
    """
    return (glob64 @ xn64.transpose(-1, -2)).to(dtype)


def length_mask(lens: Tensor, max_len: int) -> Tensor:
    """Boolean ``(B, max_len)`` mask, True for the first ``lens[b]`` positions."""
    return torch.arange(max_len, device=lens.device).unsqueeze(0) < lens.to(torch.long).unsqueeze(1)


def weighted_softmax(logits: Tensor, weight: Tensor) -> Tensor:
    """Softmax over the last axis restricted to the entries with ``weight`` 1.

    ``w[n] = weight[n] exp(logits[n]) / sum_m weight[m] exp(logits[m])``. With a
    0/1 ``weight`` this is the softmax over the selected entries; with a
    straight-through weight it has the same value and passes the gradient to
    the decision (DynamicViT's attention masking). Rows whose weights are all
    zero give zeros, like a sum over an empty set.
    """
    # The shift is the max over every entry: selected entries cannot overflow and
    # non-selected ones (weight 0) never turn into inf * 0.
    shift = logits.detach().amax(dim=-1, keepdim=True)
    e = torch.exp(logits - shift) * weight
    denom = e.sum(dim=-1, keepdim=True)
    return e / torch.where(denom > 0, denom, torch.ones_like(denom))


def topk_mask(score: Tensor, k: int) -> Tensor:
    """0/1 float mask ``(..., N)`` of the ``k`` highest scores of the last axis (step 4).

    ``torch.topk`` is a partial selection, O(N) per row, instead of the full sort
    of the official code. Ties at the K-th value are broken towards the lower patch
    index (a stable descending sort's order), because ``torch.topk`` leaves their
    order unspecified: exact float32 ties are rare but real at evaluation scale
    (a few in 50,000 pairs), and every implementation must keep the same patches.
    """
    with torch.no_grad():
        # The K-th largest value: the minimum of an unsorted top-K (sorting the K kept
        # values as well took 1.7x as long on a (100, 500, 196) block).
        kth = score.topk(k, dim=-1, sorted=False).values.amin(dim=-1, keepdim=True)
        keep = score >= kth
        # Almost always no tie straddles the K-th value and ``>=`` keeps exactly K; the
        # tie-break (a cumsum) runs only on the rows where one does.
        n = score.shape[-1]
        rows = (keep.sum(dim=-1) != k).reshape(-1).nonzero().squeeze(1)
        if rows.numel():
            flat = keep.reshape(-1, n)
            flat[rows] = _break_ties(score.reshape(-1, n)[rows], kth.reshape(-1, 1)[rows], k)
            keep = flat.view(score.shape)
        return keep.to(score.dtype)


def _break_ties(score: Tensor, kth: Tensor, k: int) -> Tensor:
    """Top-K mask of rows ``(R, N)`` whose K-th value ``kth (R, 1)`` is tied: every value
    above it, then the tied ones in index order until K are kept."""
    greater = score > kth
    tied = score == kth
    room = k - greater.sum(dim=-1, keepdim=True)  # tied entries still to keep
    return greater | (tied & (torch.cumsum(tied.to(torch.int32), dim=-1) <= room))


def minmax(s: Tensor) -> Tensor:
    """Min-max normalisation over the last axis: ``(s - min) / (max - min + 1e-8)`` (row 1)."""
    lo = s.amin(dim=-1, keepdim=True)
    hi = s.amax(dim=-1, keepdim=True)
    return (s - lo) / (hi - lo + 1e-8)


@dataclass
class Selection:
    """The outcome of one selection branch for every (image, text) pair.

    Attributes:
        keep: ``(B_v, B_t, N)`` bool, the hard decision (True = kept).
        decision: ``(B_v, B_t, N)`` float, the decision matrix D returned for the
            ratio loss (equal to ``keep`` in value; carries the straight-through
            gradient under the Gumbel decisions).
        weight: ``(B_v, B_t, N)`` float multiplier of the kept tokens inside the
            aggregation softmax (``keep`` as float, or D under ``gumbel_per_patch``).
        extra: ``(B_v, B_t, C)`` the fusion token of the dropped patches (step 5).
    """

    keep: Tensor
    decision: Tensor
    weight: Tensor
    extra: Tensor


class PatchSelector(nn.Module):
    """Scores the patches of every image for every text and selects them.

    One selector exists per branch (``sparse``: guided by the sparse caption;
    ``dense``: guided by the dense caption). Under ``scoring="paper"`` it owns the
    score-aware prediction network of eq. (1), ``s_p = sigmoid(MLP(x))`` with
    ``MLP = Linear(C, C/4) -> GELU -> Linear(C/4, 1)`` on unnormalised tokens.
    Under ``decision="gumbel_per_patch"`` it owns one learnable keep bias.
    """

    def __init__(self, config: SEPSConfig) -> None:
        super().__init__()
        self.config = config
        c = config.embed_size
        self.score_predictor: nn.Module | None = None
        if config.scoring == "paper":
            self.score_predictor = nn.Sequential(
                nn.Linear(c, c // 4), nn.GELU(), nn.Linear(c // 4, 1), nn.Sigmoid()
            )
        self.keep_bias: nn.Parameter | None = None
        if config.decision == "gumbel_per_patch":
            self.keep_bias = nn.Parameter(torch.zeros(()))
        self.noise: NoiseFn = gumbel_noise

    def predict(self, x: Tensor) -> Tensor | None:
        """``s_p (B_v, N)`` of eq. (1), text-independent, so computed once per image."""
        if self.score_predictor is None:
            return None
        return self.score_predictor(x).squeeze(-1)

    def score(
        self,
        s_im: Tensor,
        s_guide: Tensor,
        s_other: Tensor | None,
        s_p: Tensor | None,
    ) -> Tensor:
        """Patch scores ``(B_v, B_t, N)`` (SPEC.md row 1).

        code:  ``s_im + s_guide`` (raw cosines).
        paper: ``(1-2b) s_p + b (s_guide' + s_other' + 2 s_im')`` where ``'`` is the
        min-max normalisation over the N patches of the pair. ``s_other`` is the
        other caption's guidance (the dense one for the sparse branch and vice
        versa, so both branches see the same symmetric attention term); it is
        absent, and counts as 0 as in the reference code, when that caption does
        not enter the head (``dense_fusion`` = ``none`` or ``dense_only``).
        """
        if self.config.scoring == "code":
            return s_im.unsqueeze(1) + s_guide
        assert s_p is not None
        b = self.config.beta
        attn = minmax(s_guide) + 2.0 * minmax(s_im).unsqueeze(1)
        if s_other is not None:
            attn = attn + minmax(s_other)
        return (1.0 - 2.0 * b) * s_p.unsqueeze(1) + b * attn

    def draw_noise(self, shape: tuple[int, ...], like: Tensor) -> tuple[Tensor, ...]:
        """The Gumbel draws one training forward pass needs for ``shape = (B_v, B_t, N)``.

        ``gumbel_topk`` needs one draw, ``gumbel_per_patch`` two (``g1`` then ``g2``,
        in that order); ``topk`` and evaluation need none. The head draws them once
        for the whole batch so that the result does not depend on how it is chunked.
        """
        if not self.training or self.config.decision == "topk":
            return ()
        count = 1 if self.config.decision == "gumbel_topk" else 2
        return tuple(self.noise(shape, like) for _ in range(count))

    def decide(
        self,
        score: Tensor,
        noise: tuple[Tensor, ...] | None = None,
        mask_fn: Callable[[Tensor, int], Tensor] = topk_mask,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Hard keep mask, decision matrix D and aggregation weight (SPEC.md step 4, row 6).

        topk:  keep the ``K = ceil(N rho)`` highest scores; D = hard mask, no gradient.
        gumbel_topk: the same hard top-K of the noise-free score; in training
            ``soft = softmax((score + g)/tau)`` and ``D = hard + soft - stopgrad(soft)``.
            As in the reference re-implementation D is consumed only by the
            ratio loss: tokens are taken by the hard indices.
        gumbel_per_patch: DynamicViT-style keep/drop per patch. Keep logit
            ``z = (score - q) / sd + keep_bias`` against a drop logit of 0, where
            ``q`` is the (1 - rho) quantile and ``sd`` the standard deviation of the
            pair's N scores (both without gradient, so that the decision is
            scale-free and starts near rho); training samples the two-class
            Gumbel-softmax (hard = ``z + g1 - g2 > 0``, soft =
            ``sigmoid((z + g1 - g2)/tau)``, ``D = hard + soft - stopgrad(soft)``);
            evaluation keeps ``z > 0``. A pair that would keep nothing keeps its
            best patch. D also weights the tokens in the aggregation and the
            extra token, so the alignment loss reaches the decision too.

        ``noise``: the draws of :meth:`draw_noise` for this ``score`` (same shape);
        ``None`` draws them here. ``mask_fn(score, k)`` computes the hard top-K mask
        (a kernel implementation may replace :func:`topk_mask`).
        """
        if noise is None:
            noise = self.draw_noise(tuple(score.shape), score)
        cfg = self.config
        n = score.shape[-1]
        if cfg.decision in ("topk", "gumbel_topk"):
            k = keep_count(n, cfg.sparse_ratio)
            hard = mask_fn(score, k)
            decision = hard
            if cfg.decision == "gumbel_topk" and self.training:
                soft = F.softmax((score + noise[0]) / cfg.gumbel_tau, -1)
                decision = hard + (soft - soft.detach())
            return hard.bool(), decision, hard
        # gumbel_per_patch
        assert self.keep_bias is not None
        with torch.no_grad():
            q = torch.quantile(score, 1.0 - cfg.sparse_ratio, dim=-1, keepdim=True)
            sd = score.std(dim=-1, keepdim=True).clamp(min=1e-6) if n > 1 else torch.ones_like(q)
        z = (score - q) / sd + self.keep_bias
        if self.training:
            logit = z + noise[0] - noise[1]
            soft = torch.sigmoid(logit / cfg.gumbel_tau)
        else:
            logit = z
            soft = None
        hard = logit > 0
        # Never let a pair keep nothing: force its best-scoring patch.
        empty = ~hard.any(dim=-1, keepdim=True)
        best = F.one_hot(score.argmax(dim=-1), n).bool()
        hard = hard | (empty & best)
        hard_f = hard.to(score.dtype)
        decision = hard_f if soft is None else hard_f + (soft - soft.detach())
        return hard, decision, decision

    def forward(
        self,
        x: Tensor,
        s_im: Tensor,
        s_guide: Tensor,
        s_other: Tensor | None,
        s_p: Tensor | None,
    ) -> Selection:
        """Select patches of ``x (B_v, N, C)`` for every text (steps 4-5).

        The extra token is ``sum over dropped n of softmax(score_dropped)[n] x[n]``
        (softmax over the dropped patches only; a zero vector when nothing is
        dropped, as the official code's sum over an empty set).
        """
        score = self.score(s_im, s_guide, s_other, s_p)
        keep, decision, weight = self.decide(score)
        w = weighted_softmax(score, 1.0 - weight)
        extra = torch.einsum("vtn,vnc->vtc", w, x)
        return Selection(keep=keep, decision=decision, weight=weight, extra=extra)


__all__ = [
    "PatchSelector",
    "Selection",
    "guide_scores",
    "gumbel_noise",
    "has_cls_token",
    "image_self_attention",
    "l2n",
    "length_mask",
    "minmax",
    "split_cls_token",
    "text_global",
    "text_guided_attention",
    "topk_mask",
    "weighted_softmax",
]

#: Weight of the learned score in the oracle's tie-break.
ORACLE_TIE_WEIGHT = 1e-3


def control_score(selection: str, prior: Tensor, learned: Tensor) -> Tensor:
    """The score whose top-K the head keeps under a selection control.

    prior ``(B_v, B_t, N)``; learned ``(B_v, B_t, N)`` (the head's own score) -> ``(B_v,
    B_t, N)``. ``random``: the prior alone (uniform noise); ``oracle``: ``prior + 1e-3 *
    sigmoid(learned)``: the named objects' patches first, ties toward the learned score.
    """
    if selection == "random":
        return prior.to(learned.dtype)
    if selection == "oracle":
        return prior.to(learned.dtype) + ORACLE_TIE_WEIGHT * torch.sigmoid(learned)
    raise ValueError(f"config field 'selection': no control score for {selection!r}")
