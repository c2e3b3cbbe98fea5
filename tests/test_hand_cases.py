"""Tiny cases worked out by hand from SPEC.md: 2 images, 4 patches, 3 words.

Embeddings are built from the standard basis e0..e7 of R^8 so that every cosine
is a simple closed form. The aggregation MLP's last layer is zeroed, so its
weights are uniform over the selected tokens (``A`` = mean of the selected
patches). N = 4, rho = 0.5 -> K = 2; aggr_ratio = 0.5 -> N_c = 1.

Image 0 patches: [2e0, e1, e2, e3]; image 1 patches: [3e4, 2e5, e6, e7].
Sparse caption words: [e0, e1, e4]; dense caption words: [e2, e6, e7].
The derivation of every expected number is written next to it.
"""

from __future__ import annotations

import math

import pytest
import torch

from seps import SEPSHead, get_config

S3, S5, S7, S13 = math.sqrt(3), math.sqrt(5), math.sqrt(7), math.sqrt(13)
LRELU = lambda v: v if v >= 0 else 0.1 * v  # noqa: E731


def e(*idx_coef: tuple[int, float]) -> torch.Tensor:
    v = torch.zeros(8)
    for i, c in idx_coef:
        v[i] = c
    return v


IMG0 = [e((0, 2)), e((1, 1)), e((2, 1)), e((3, 1))]
IMG1 = [e((4, 3)), e((5, 2)), e((6, 1)), e((7, 1))]
CLS0 = e((0, -1), (1, -1), (4, -1))
CLS1 = e((5, 1))
SPARSE = torch.stack([e((0, 1)), e((1, 1)), e((4, 1))])[None]
DENSE = torch.stack([e((2, 1)), e((6, 1)), e((7, 1))])[None]
LENS = torch.tensor([3])


def images(cls: bool = False) -> torch.Tensor:
    rows = [IMG0, IMG1]
    if cls:
        rows = [[CLS0, *IMG0], [CLS1, *IMG1]]
    return torch.stack([torch.stack(r) for r in rows])


def head(preset: str = "code", **overrides) -> SEPSHead:
    cfg = get_config(
        preset, embed_size=8, num_patches=4, sparse_ratio=0.5, aggr_ratio=0.5, **overrides
    )
    h = SEPSHead(cfg).eval()
    with torch.no_grad():
        if h.aggregation is not None:
            for net in h.aggregation.nets.values():
                net[3].weight.zero_()
                net[3].bias.zero_()
        if h.hrpa.relevance_mlp is not None:
            # R(v) = sum(v): GELU(a) - GELU(-a) = a, so W1 = [I; -I], W2 = [1..1, -1..-1].
            k = cfg.top_k
            r1, r2 = h.hrpa.relevance_mlp[0], h.hrpa.relevance_mlp[2]
            r1.weight.copy_(torch.cat([torch.eye(k), -torch.eye(k)]))
            r1.bias.zero_()
            r2.weight.copy_(torch.cat([torch.ones(k), -torch.ones(k)])[None])
            r2.bias.zero_()
    return h


def sims(h: SEPSHead, cls: bool = False) -> list[float]:
    with torch.no_grad():
        out = h(images(cls), SPARSE, LENS, DENSE, LENS)
    assert out.shape == (2, 1)
    return out[:, 0].tolist()


# Sparse branch, code scoring (s_im + s_st), top-2, no [CLS]:
# img0: s_im = [2,1,1,1]/sqrt7, s_st = [1,1,0,0]/sqrt3 -> keep {2e0, e1}; dropped e2, e3
#   tie -> extra = (e2+e3)/2. A = e0 + e1/2 -> A' = (2e0+e1)/sqrt5, e' = (e2+e3)/sqrt2.
#   rows (e0,e1,e4) = [2/sqrt5, 1/sqrt5, 0] -> mean 1/sqrt5; cols (A', e') = [2/sqrt5, 0]
#   -> mean 1/sqrt5. S = 2/sqrt5.
# img1: s_im = [3,2,1,1]/sqrt15, s_st = [1,0,0,0]/sqrt3 -> keep {3e4, 2e5}; extra (e6+e7)/2.
#   A' = (3e4+2e5)/sqrt13; rows = [0, 0, 3/sqrt13] -> 1/sqrt13; cols = [3/sqrt13, 0] ->
#   1.5/sqrt13. S = 2.5/sqrt13.
SPARSE_CODE = [2 / S5, 2.5 / S13]

# Dense branch, code scoring (s_im + s_dt), words (e2, e6, e7):
# img0: s_dt = [0,0,1,0]/sqrt3 -> scores [2/sqrt7, 1/sqrt7, 1/sqrt7+1/sqrt3, 1/sqrt7]
#   -> keep {e2, 2e0}; dropped e1, e3 tie -> extra (e1+e3)/2. A' = (2e0+e2)/sqrt5.
#   rows = [1/sqrt5, 0, 0] -> 1/(3 sqrt5); cols = [1/sqrt5, 0] -> 1/(2 sqrt5). S = sqrt5/6.
# img1: s_dt = [0,0,1,1]/sqrt3 -> keep {e6, e7}; A' = (e6+e7)/sqrt2; dropped 3e4, 2e5
#   with softmax weights over their scores [3, 2]/sqrt15 (extra is orthogonal to the words).
#   rows = [0, 1/sqrt2, 1/sqrt2] -> sqrt2/3; cols = [1/sqrt2, 0] -> 1/(2 sqrt2).
DENSE_CODE = [S5 / 6, math.sqrt(2) / 3 + 1 / (2 * math.sqrt(2))]


def test_sparse_only_code_scoring_topk():
    assert sims(head(dense_fusion="none")) == pytest.approx(SPARSE_CODE, abs=1e-6)


def test_dense_fusion_dual_branch_adds_both_branches():
    want = [s + d for s, d in zip(SPARSE_CODE, DENSE_CODE, strict=True)]
    assert sims(head(dense_fusion="dual_branch")) == pytest.approx(want, abs=1e-6)


def test_dense_fusion_dense_only():
    assert sims(head(dense_fusion="dense_only")) == pytest.approx(DENSE_CODE, abs=1e-6)


def test_dense_fusion_fused_shared_aggregation():
    # img0: A = mean(2e0, e1) + mean(e2, 2e0) = 2e0 + e1/2 + e2/2 -> A' = (4e0+e1+e2)/(3 sqrt2);
    #   extra = mean of (e2+e3)/2 and (e1+e3)/2 = (e1 + e2 + 2e3)/4 -> e' = (e1+e2+2e3)/sqrt6.
    #   rows (e0, e1, e4) = [4/(3 sqrt2), max(1/(3 sqrt2), 1/sqrt6) = 1/sqrt6, 0];
    #   cols = [4/(3 sqrt2), 1/sqrt6]. S = (4/(3 sqrt2) + 1/sqrt6) (1/3 + 1/2).
    a = 4 / (3 * math.sqrt(2)) + 1 / math.sqrt(6)
    img0 = a * 5 / 6
    # img1: A = (1.5e4 + e5) + (e6 + e7)/2, |A|^2 = 3.75; extras: (e6+e7)/2 from the sparse
    #   selection and w0*3e4 + w1*2e5 from the dense one (softmax over [3, 2]/sqrt15), so
    #   extra = e6/4 + e7/4 + 1.5 w0 e4 + w1 e5. Only e4 among the words touches them:
    #   A'.e4 = 1.5/sqrt3.75, e'.e4 = 1.5 w0/|extra|.
    w0 = 1 / (1 + math.exp(-1 / math.sqrt(15)))
    w1 = 1 - w0
    ea = 1.5 * w0 / math.sqrt(0.125 + 2.25 * w0**2 + w1**2)
    aa = 1.5 / math.sqrt(3.75)
    img1 = max(aa, ea) / 3 + (aa + ea) / 2
    assert sims(head(dense_fusion="fused")) == pytest.approx([img0, img1], abs=1e-6)


def test_aggregation_dual_with_equal_networks_equals_shared():
    # With both weight networks uniform, W_s V_s + W_d V_d is the same sum as above.
    assert sims(head(dense_fusion="fused", aggregation="dual")) == pytest.approx(
        sims(head(dense_fusion="fused")), abs=1e-6
    )


def test_aggregation_none_uses_selected_tokens():
    # img0: tokens l2n([2e0, e1, (e2+e3)/2]) = [e0, e1, e']; rows = [1, 1, 0] -> 2/3;
    #   cols = [1, 1, 0] -> 2/3. S = 4/3.
    # img1: tokens [e4, e5, (e6+e7)/sqrt2]; rows = [0, 0, 1] -> 1/3; cols = [1, 0, 0] -> 1/3.
    assert sims(head(dense_fusion="none", aggregation="none")) == pytest.approx(
        [4 / 3, 2 / 3], abs=1e-6
    )


def test_fused_without_aggregation_concatenates_both_selections():
    # img0: tokens [e0, e1 | e2, e0 | e'] with e' = (e1+e2+2e3)/sqrt6; rows = [1, 1, 0] -> 2/3;
    #   cols = [1, 1, 0, 1, 1/sqrt6] -> (3 + 1/sqrt6)/5.
    got = sims(head(dense_fusion="fused", aggregation="none"))
    assert got[0] == pytest.approx(2 / 3 + (3 + 1 / math.sqrt(6)) / 5, abs=1e-6)


@pytest.mark.parametrize("act", ["leaky_relu", "none"])
def test_similarity_activation_on_negative_cls(act):
    # CLS0 = -(e0+e1+e4): every word has cosine -1/sqrt3 with it, so its column max is
    #   act(-1/sqrt3): -0.1/sqrt3 with LeakyReLU, -1/sqrt3 without. Rows keep their max.
    # img0: rows = [2/sqrt5, 1/sqrt5, 0]; cols = [act(-1/sqrt3), 2/sqrt5, 0].
    # img1: CLS1 = e5 is orthogonal to every word: rows = [0,0,3/sqrt13], cols = [0, 3/sqrt13, 0].
    a = LRELU(-1 / S3) if act == "leaky_relu" else -1 / S3
    want = [1 / S5 + (a + 2 / S5) / 3, 2 / S13]
    got = sims(head(dense_fusion="none", similarity_activation=act), cls=True)
    assert got == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize(
    ("hrpa", "top_k"), [("mean", 2), ("mean_topk", 2), ("topk_only", 2), ("topk_only", 5)]
)
def test_hrpa_variants(hrpa, top_k):
    # R(v) = sum(v) (see head()). With [CLS] and LeakyReLU:
    # img0 rows = [2/sqrt5, 1/sqrt5, 0], cols = [a, 2/sqrt5, 0], a = -0.1/sqrt3.
    # img1 rows = [0, 0, 3/sqrt13], cols = [0, 3/sqrt13, 0].
    # top-2 sums: img0 rows 3/sqrt5, cols 2/sqrt5; img1 3/sqrt13 each.
    # top-5 sums are over all values, zero-padded: img0 rows 3/sqrt5, cols 2/sqrt5 + a.
    a = -0.1 / S3
    mean = [1 / S5 + (a + 2 / S5) / 3, 2 / S13]
    top = {2: [5 / S5, 6 / S13], 5: [5 / S5 + a, 6 / S13]}[top_k]
    want = {
        "mean": mean,
        "mean_topk": [m + t for m, t in zip(mean, top, strict=True)],
        "topk_only": top,
    }[hrpa]
    got = sims(head(dense_fusion="none", hrpa=hrpa, top_k=top_k), cls=True)
    assert got == pytest.approx(want, abs=1e-6)


def test_paper_scoring_with_score_predictor():
    # beta = 0.1; s_p = sigmoid(GELU(3 x[2])) is 0.5 except for e2, where it is
    # sigmoid(GELU(3)). Sparse only, so s_dt' = 0 (as the reference code).
    # img0 scores: p0 = 0.4 + 0.1 (r + 2q) ~ 0.7, p1 = 0.4 + 0.1 r ~ 0.5,
    #   p2 = 0.8 sigmoid(GELU(3)) ~ 0.762, p3 = 0.4, where r, q ~ 1 are the min-max values
    #   x/(x + 1e-8). Keep {e2, 2e0}: A' = (2e0+e2)/sqrt5. Dropped e1 (p1), e3 (p3):
    #   extra = w1 e1 + w3 e3, w1 = 1/(1 + exp(p3 - p1)).
    #   rows (e0, e1, e4) = [2/sqrt5, w1/n, 0], cols = [2/sqrt5, w1/n], n = |(w1, w3)|.
    h = head(dense_fusion="none", scoring="paper", beta=0.1)
    with torch.no_grad():
        pred = h.selectors["sparse"].score_predictor
        for m in (pred[0], pred[2]):
            m.weight.zero_()
            m.bias.zero_()
        pred[0].weight[0, 2] = 3.0
        pred[2].weight[0, 0] = 1.0
    r = (1 / S3) / (1 / S3 + 1e-8)
    p1, p3 = 0.4 + 0.1 * r, 0.4
    w1 = 1 / (1 + math.exp(p3 - p1))
    w3 = 1 - w1
    c = w1 / math.hypot(w1, w3)
    img0 = (2 / S5 + c) * 5 / 6
    assert sims(h)[0] == pytest.approx(img0, abs=1e-6)


def test_gumbel_topk_at_eval_is_topk():
    assert sims(head(dense_fusion="none", decision="gumbel_topk")) == pytest.approx(
        SPARSE_CODE, abs=1e-6
    )


def test_gumbel_per_patch_keep_all_and_keep_forced():
    h = head(dense_fusion="none", decision="gumbel_per_patch")
    with torch.no_grad():
        h.selectors["sparse"].keep_bias.fill_(100.0)
    # Every patch kept, nothing dropped: A = (2e0+e1+e2+e3)/4 -> A' = (2,1,1,1)/sqrt7; the
    # extra token is the empty sum 0. rows = [2/sqrt7, 1/sqrt7, 0] -> 1/sqrt7;
    # cols = [2/sqrt7, 0] -> 1/sqrt7. S = 2/sqrt7.
    assert sims(h)[0] == pytest.approx(2 / S7, abs=1e-6)
    with torch.no_grad():
        h.selectors["sparse"].keep_bias.fill_(-100.0)
    # Nothing passes: the best patch (2e0) is kept alone; the dropped e1, e2, e3 have scores
    # [1/sqrt7 + 1/sqrt3, 1/sqrt7, 1/sqrt7] -> weights p1 = E/(E+2), p2 = p3 = 1/(E+2),
    # E = exp(1/sqrt3). rows = [1, p1/n, 0], cols = [1, p1/n], n = |(p1, p2, p3)|.
    big = math.exp(1 / S3)
    p1, p2 = big / (big + 2), 1 / (big + 2)
    c = p1 / math.sqrt(p1**2 + 2 * p2**2)
    assert sims(h)[0] == pytest.approx((1 + c) * 5 / 6, abs=1e-6)
