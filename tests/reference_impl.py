"""A deliberately plain per-pair implementation of SPEC.md, used only by the tests.

It loops over images and texts, gathers the K selected tokens in descending
score order, and uses the head's weights through ``torch.nn.functional`` calls
only, so that it shares no code path with :mod:`seps` beyond the parameters.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def l2n(x: Tensor) -> Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)


def mlp_seq(seq, x: Tensor) -> Tensor:
    """Apply a Sequential of Linear/GELU/LayerNorm/Sigmoid with explicit functional calls."""
    for m in seq:
        name = type(m).__name__
        if name == "Linear":
            x = x @ m.weight.t() + m.bias
        elif name == "GELU":
            x = 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
        elif name == "LayerNorm":
            mu = x.mean(-1, keepdim=True)
            var = ((x - mu) ** 2).mean(-1, keepdim=True)
            x = (x - mu) / torch.sqrt(var + m.eps) * m.weight + m.bias
        elif name == "Sigmoid":
            x = 1.0 / (1.0 + torch.exp(-x))
        else:  # pragma: no cover
            raise TypeError(name)
    return x


def minmax(s: Tensor) -> Tensor:
    return (s - s.min()) / (s.max() - s.min() + 1e-8)


def select_one(head, branch, x, s_im, s_guide, s_other, noise):
    """Selection for one (image, text) pair; returns (V, extra, D)."""
    cfg = head.config
    sel = head.selectors[branch]
    n = x.shape[0]
    if cfg.scoring == "code":
        score = s_im + s_guide
    else:
        s_p = mlp_seq(sel.score_predictor, x).squeeze(-1)
        attn = minmax(s_guide) + 2 * minmax(s_im)
        if s_other is not None:
            attn = attn + minmax(s_other)
        score = (1 - 2 * cfg.beta) * s_p + cfg.beta * attn
    if cfg.decision in ("topk", "gumbel_topk"):
        k = max(1, math.ceil(round(n * cfg.sparse_ratio, 9)))
        order = torch.sort(score, descending=True).indices
        kept, dropped = order[:k], order[k:]
        hard = torch.zeros(n)
        hard[kept] = 1.0
        d = hard
        if cfg.decision == "gumbel_topk" and head.training:
            soft = torch.softmax((score + noise[0]) / cfg.gumbel_tau, 0)
            d = hard + (soft - soft.detach())
    else:
        q = torch.quantile(score, 1 - cfg.sparse_ratio)
        sd = score.std().clamp(min=1e-6)
        z = (score - q) / sd + sel.keep_bias
        logit = z + noise[0] - noise[1] if head.training else z
        hard_b = logit > 0
        if not hard_b.any():
            hard_b[score.argmax()] = True
        kept = torch.nonzero(hard_b).flatten()
        kept = kept[torch.sort(score[kept], descending=True).indices]
        dropped = torch.nonzero(~hard_b).flatten()
        hard = hard_b.float()
        d = hard
        if head.training:
            soft = torch.sigmoid(logit / cfg.gumbel_tau)
            d = hard + (soft - soft.detach())
    v = x[kept]
    if len(dropped):
        w = torch.softmax(score[dropped], 0)
        extra = (w[:, None] * x[dropped]).sum(0)
    else:
        extra = torch.zeros(x.shape[1])
    return v, extra, d


def aggregate(head, branch, v):
    agg = head.aggregation
    name = "shared" if head.config.aggregation == "shared" else branch
    logits = mlp_seq(agg.nets[name], v)  # (K, N_c)
    w = torch.softmax(logits.t() * agg.scale, dim=1)  # (N_c, K)
    return w @ v


def hrpa(head, tokens, words):
    cfg = head.config
    s = words @ tokens.t()  # (M, L)
    if cfg.similarity_activation == "leaky_relu":
        s = torch.where(s >= 0, s, 0.1 * s)
    row = s.max(dim=1).values
    col = s.max(dim=0).values
    out = torch.zeros(())
    if cfg.hrpa in ("mean", "mean_topk"):
        out = out + row.mean() + col.mean()
    if cfg.hrpa != "mean":
        k = cfg.top_k
        for vec in (row, col):
            top = torch.sort(vec, descending=True).values[:k]
            top = torch.cat([top, torch.zeros(k - len(top))])
            out = out + mlp_seq(head.hrpa.relevance_mlp, top).squeeze()
    return out


def reference_sims(head, img, cap, cap_lens, long_cap=None, long_lens=None, noise=None):
    """sims (B_v, B_t) and masks {branch: (B_v, B_t, N)} computed pair by pair.

    noise: {branch: [tensor (B_v, B_t, N), ...]} the draws the head was given.
    """
    cfg = head.config
    b_v, l_v, _ = img.shape
    has_cls = math.isqrt(l_v) ** 2 != l_v
    sims = torch.zeros(b_v, cap.shape[0])
    masks = {b: torch.zeros(b_v, cap.shape[0], l_v - int(has_cls)) for b in cfg.branches}
    for v in range(b_v):
        cls = img[v, 0] if has_cls else None
        x = img[v, 1:] if has_cls else img[v]
        xn = l2n(x)
        s_im = xn @ l2n(x.mean(0))
        for t in range(cap.shape[0]):
            words = {"sparse": cap[t, : int(cap_lens[t])]}
            if cfg.dense_fusion != "none":
                words["dense"] = long_cap[t, : int(long_lens[t])]
            guide = {b: xn @ l2n(w.mean(0)) for b, w in words.items()}
            out = {}
            for b in cfg.branches:
                other = "dense" if b == "sparse" else "sparse"
                s_other = guide[other] if cfg.dense_fusion in ("dual_branch", "fused") else None
                nz = [d[v, t] for d in noise[b]] if noise else None
                out[b] = select_one(head, b, x, s_im, guide[b], s_other, nz)
                masks[b][v, t] = out[b][2]

            def tokens(body, extra, cls=cls):
                parts = ([cls[None]] if cls is not None else []) + [body, extra[None]]
                return l2n(torch.cat(parts))

            def body(b, out=out):
                vb = out[b][0]
                return vb if cfg.aggregation == "none" else aggregate(head, b, vb)

            if cfg.dense_fusion == "fused":
                if cfg.aggregation == "none":
                    a = torch.cat([body("sparse"), body("dense")])
                else:
                    a = body("sparse") + body("dense")
                extra = 0.5 * (out["sparse"][1] + out["dense"][1])
                sims[v, t] = hrpa(head, tokens(a, extra), l2n(words["sparse"]))
            else:
                sims[v, t] = sum(
                    hrpa(head, tokens(body(b), out[b][1]), l2n(words[b])) for b in cfg.branches
                )
    return sims, masks
