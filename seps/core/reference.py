"""The reference implementation: the literal per-text loop of SPEC.md.

This is the oracle that the tests hold every faster implementation to and the
baseline of the benchmarks (``SEPSHead(config, impl="loop")`` runs it). It does what
the official code does, in the order SPEC.md states it, one text at a time and
vectorised over the images only:

- step 4: sort all N patch scores of every image and take the first K (a full
  sort, where the batched head uses a partial ``topk``);
- step 5: softmax over the dropped patches' scores, weighted sum of those patches;
- step 6: run the aggregation MLP on the K gathered tokens of every image-text
  pair (the batched head runs it once per image), softmax over the K tokens,
  ``A = W V``;
- steps 7-8: ``T = l2n([cls, A, e])``, the patch-word matrix, its row and column
  maxima and the HRPA terms (top-k by a full sort).

It is a complete implementation (every switch, train mode, gradients), not a
timing mock-up: it gives the same similarities, masks and gradients as the batched
head within float rounding (tested). It shares the head's parameters but none of
its batched code: the functions take the head's parts (:class:`HeadParts`, which
:class:`seps.core.head.SEPSHead` satisfies) and import only the modules below the head.
Shapes below: ``B_v`` images, ``N`` patches, ``K`` kept, ``C`` channels,
``M`` words of the current text, ``L`` alignment tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .aggregation import TokenAggregation
from .alignment import HRPA
from .config import SEPSConfig, keep_count
from .selection import (
    guide_scores,
    image_self_attention,
    l2n,
    minmax,
    split_cls_token,
    weighted_softmax,
)


class HeadParts(Protocol):
    """What the reference loop reads of a head: its switches, its parameters (the
    selectors per branch, the aggregation networks, the HRPA relevance MLP) and
    whether it is in train mode."""

    @property
    def config(self) -> SEPSConfig: ...

    @property
    def selectors(self) -> nn.ModuleDict: ...

    @property
    def aggregation(self) -> TokenAggregation | None: ...

    @property
    def hrpa(self) -> HRPA: ...

    @property
    def training(self) -> bool: ...


def _score(
    head: HeadParts,
    branch: str,
    x: Tensor,
    s_im: Tensor,
    guide: dict[str, Tensor],
) -> Tensor:
    """Patch scores ``(B_v, N)`` of one text (SPEC.md row 1); the score predictor is
    re-run for every text, as in the official per-text selection call."""
    cfg = head.config
    if cfg.scoring == "code":
        return s_im + guide[branch]
    predictor = head.selectors[branch].score_predictor
    assert predictor is not None
    s_p = predictor(x).squeeze(-1)
    attn = minmax(guide[branch]) + 2.0 * minmax(s_im)
    other = "dense" if branch == "sparse" else "sparse"
    if cfg.dense_fusion in ("dual_branch", "fused") and other in guide:
        attn = attn + minmax(guide[other])
    return (1.0 - 2.0 * cfg.beta) * s_p + cfg.beta * attn


def select_for_text(
    head: HeadParts,
    branch: str,
    x: Tensor,
    score: Tensor,
    noise: tuple[Tensor, ...],
) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
    """Steps 4-5 for one text: ``(V, V_weight, extra, D)``.

    V: ``(B_v, K, C)`` kept tokens in descending score order (``topk`` decisions), or
    all N tokens in that order with ``V_weight (B_v, N)`` marking the kept ones
    (``gumbel_per_patch``, whose keep count varies); extra ``(B_v, C)``; D ``(B_v, N)``
    in patch order.
    """
    cfg = head.config
    selector = head.selectors[branch]
    n = x.shape[1]
    # Full sort (official); stable, so that exact ties keep the lower patch index first
    # (the tie-break of every implementation, see seps.core.selection.topk_mask).
    order = torch.sort(score, dim=-1, descending=True, stable=True).indices
    sorted_x = torch.gather(x, 1, order.unsqueeze(-1).expand_as(x))
    sorted_score = torch.gather(score, 1, order)
    if cfg.decision in ("topk", "gumbel_topk"):
        k = keep_count(n, cfg.sparse_ratio)
        hard = torch.zeros_like(score).scatter_(1, order[:, :k], 1.0)
        d = hard
        if cfg.decision == "gumbel_topk" and head.training:
            soft = F.softmax((score + noise[0]) / cfg.gumbel_tau, dim=-1)
            d = hard + (soft - soft.detach())
        if k < n:
            w = F.softmax(sorted_score[:, k:], dim=-1)
            extra = torch.einsum("vn,vnc->vc", w, sorted_x[:, k:])
        else:  # nothing dropped: the empty sum
            extra = torch.zeros_like(x[:, 0])
        return sorted_x[:, :k], None, extra, d
    # gumbel_per_patch: the decision of PatchSelector.decide, pair by pair in the batch.
    assert selector.keep_bias is not None
    with torch.no_grad():
        q = torch.quantile(score, 1.0 - cfg.sparse_ratio, dim=-1, keepdim=True)
        sd = score.std(dim=-1, keepdim=True).clamp(min=1e-6) if n > 1 else torch.ones_like(q)
    z = (score - q) / sd + selector.keep_bias
    logit = z + noise[0] - noise[1] if head.training else z
    hard_b = logit > 0
    empty = ~hard_b.any(dim=-1, keepdim=True)
    hard_b = hard_b | (empty & F.one_hot(score.argmax(dim=-1), n).bool())
    hard = hard_b.to(score.dtype)
    d = hard
    if head.training:
        soft = torch.sigmoid(logit / cfg.gumbel_tau)
        d = hard + (soft - soft.detach())
    d_sorted = torch.gather(d, 1, order)
    w = weighted_softmax(sorted_score, 1.0 - d_sorted)
    extra = torch.einsum("vn,vnc->vc", w, sorted_x)
    return sorted_x, d_sorted, extra, d


def _aggregate(head: HeadParts, branch: str, v: Tensor, v_weight: Tensor | None) -> Tensor:
    """Step 6 for one text: the MLP on the gathered tokens, ``A (B_v, N_c, C)``."""
    agg = head.aggregation
    assert agg is not None
    logits = agg.nets[agg.net_for(branch)](v)  # (B_v, K, N_c): re-run for every pair
    scaled = logits.transpose(1, 2) * agg.scale  # (B_v, N_c, K)
    if v_weight is None:
        w = F.softmax(scaled, dim=-1)
    else:
        w = weighted_softmax(scaled, v_weight.unsqueeze(1))
    return torch.bmm(w, v)


def hrpa_for_text(
    head: HeadParts, tokens: Tensor, token_mask: Tensor | None, words: Tensor
) -> Tensor:
    """Step 8 for one text: ``S(I, T)`` ``(B_v,)`` from normalised tokens
    ``(B_v, L, C)`` and the text's normalised real words ``(M, C)``."""
    cfg = head.config
    s = torch.einsum("vlc,mc->vml", tokens, words)  # (B_v, M, L)
    if cfg.similarity_activation == "leaky_relu":
        s = F.leaky_relu(s, negative_slope=0.1)
    if token_mask is not None:
        s_row = s.masked_fill(~token_mask.unsqueeze(1), float("-inf"))
        row = s_row.amax(dim=2)
        col = s.amax(dim=1)
        col_mean = (col * token_mask).sum(-1) / token_mask.sum(-1)
    else:
        row = s.amax(dim=2)
        col = s.amax(dim=1)
        col_mean = col.mean(-1)
    out = torch.zeros(s.shape[0], dtype=s.dtype, device=s.device)
    if cfg.hrpa in ("mean", "mean_topk"):
        out = out + row.mean(-1) + col_mean
    if cfg.hrpa != "mean":
        mlp = head.hrpa.relevance_mlp
        assert mlp is not None
        k = cfg.top_k
        for vec, mask in ((row, None), (col, token_mask)):
            if mask is not None:
                vec = vec.masked_fill(~mask, float("-inf"))
            top = torch.sort(vec, dim=-1, descending=True).values[:, :k]
            top = F.pad(top, (0, k - top.shape[1]))
            top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
            out = out + mlp(top).squeeze(-1)
    return out


def loop_forward(
    head: HeadParts,
    img_embs: Tensor,
    cap_embs: Tensor,
    cap_lens: Tensor,
    long_cap_embs: Tensor | None,
    long_cap_lens: Tensor | None,
) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
    """:meth:`seps.core.head.SEPSHead.forward` as a per-text loop (inputs already checked):
    ``sims (B_v, B_t)`` in eval mode, ``(sims, masks)`` in train mode."""
    cfg = head.config
    cls, x = split_cls_token(img_embs)
    b_v, n, _ = x.shape
    b_t = cap_embs.shape[0]
    x_sel = x.detach() if cfg.detach_selection else x
    sel_grad = torch.is_grad_enabled() and not cfg.detach_selection
    with torch.no_grad():
        xn64 = l2n(x).double()
        s_im = image_self_attention(x)
    noise = {
        b: sel.draw_noise((b_v, b_t, n), x) if head.training else ()
        for b, sel in head.selectors.items()
    }
    sims: list[Tensor] = []
    masks: dict[str, list[Tensor]] = {b: [] for b in cfg.branches}
    for t in range(b_t):
        words = {"sparse": cap_embs[t, : int(cap_lens[t])]}
        if long_cap_embs is not None and long_cap_lens is not None:
            words["dense"] = long_cap_embs[t, : int(long_cap_lens[t])]
        with torch.no_grad():
            # Step 3 in float64 like the batched head, so both select the same patches.
            guide = {
                b: guide_scores(l2n(w.double().mean(0))[None], xn64, x.dtype)[..., 0, :]
                for b, w in words.items()
            }  # (B_v, N)
        picked = {}
        with torch.set_grad_enabled(sel_grad):
            for b in cfg.branches:
                score = _score(head, b, x_sel, s_im, guide)
                picked[b] = select_for_text(head, b, x_sel, score, tuple(g[:, t] for g in noise[b]))
                masks[b].append(picked[b][3])

        def body(b: str, picked: dict = picked) -> tuple[Tensor, Tensor | None]:
            v, v_weight = picked[b][0], picked[b][1]
            if head.aggregation is None:
                keep = None if v_weight is None else v_weight > 0.5
                return v, keep
            return _aggregate(head, b, v, v_weight), None

        def tokens(parts: list[Tensor], extra: Tensor, body_mask: Tensor | None) -> tuple:
            cat = ([cls.unsqueeze(1)] if cls is not None else []) + [*parts, extra.unsqueeze(1)]
            t_mask = None
            if body_mask is not None:
                one = body_mask.new_ones(b_v, 1)
                t_mask = torch.cat(([one] if cls is not None else []) + [body_mask, one], dim=1)
            return l2n(torch.cat(cat, dim=1)), t_mask

        if cfg.dense_fusion == "fused":
            (bs, ms), (bd, md) = body("sparse"), body("dense")
            extra = 0.5 * (picked["sparse"][2] + picked["dense"][2])
            if head.aggregation is None:
                parts, bmask = [bs, bd], None
                if ms is not None or md is not None:
                    full = [
                        m if m is not None else torch.ones_like(b[..., 0], dtype=torch.bool)
                        for m, b in ((ms, bs), (md, bd))
                    ]
                    bmask = torch.cat(full, dim=1)
            else:
                parts, bmask = [bs + bd], None
            tok, tmask = tokens(parts, extra, bmask)
            sim = hrpa_for_text(head, tok, tmask, l2n(words["sparse"]))
        else:
            sim = torch.zeros(b_v, dtype=x.dtype, device=x.device)
            for b in cfg.branches:
                bb, bm = body(b)
                tok, tmask = tokens([bb], picked[b][2], bm)
                sim = sim + hrpa_for_text(head, tok, tmask, l2n(words[b]))
        sims.append(sim)
    out = torch.stack(sims, dim=1)
    if not head.training:
        return out
    return out, {b: torch.stack(m, dim=1) for b, m in masks.items()}


__all__ = ["HeadParts", "hrpa_for_text", "loop_forward", "per_image_calls", "select_for_text"]


def per_image_calls(
    call: Callable[..., Any],
    img: Tensor,
    cap: Tensor,
    cap_lens: Tensor,
    dense: Tensor,
    dense_lens: Tensor,
) -> Any:
    """``call``'s ``sims`` (and training ``masks``) when pair ``(v, t)`` uses image
    ``v``'s dense caption, by one call per image with its caption expanded over the
    texts: ``img (B_v, L_v, C)``, ``dense (B_v, L_d, C)``, ``dense_lens (B_v,)``, texts
    ``(B_t, L, C)``. Rows are stacked, so ``sims`` is ``(B_v, B_t)`` and every mask
    ``(B_v, B_t, N)`` as from one batched call. The definition that
    ``SEPSHead(..., dense_per_image=True)`` implements in one call, and how the
    ``loop`` implementation computes it."""
    b_t = cap.shape[0]
    rows = [
        call(
            img[v : v + 1],
            cap,
            cap_lens,
            dense[v : v + 1].expand(b_t, -1, -1),
            dense_lens[v : v + 1].expand(b_t),
        )
        for v in range(img.shape[0])
    ]
    if not isinstance(rows[0], tuple):
        return torch.cat(rows, dim=0)
    sims = torch.cat([r[0] for r in rows], dim=0)
    masks = {k: torch.cat([r[1][k] for r in rows], dim=0) for k in rows[0][1]}
    return sims, masks
