"""Tests of seps.core.metrics against a straightforward per-query reference implementation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seps.core import metrics
from seps.core.metrics import METRIC_KEYS, coco_1k_folds, recall_at_k, retrieval_ranks


def reference(sims: np.ndarray, cpi: int = 5) -> dict[str, float]:
    """Per-query loop in the style of the official evaluation code (stable sort)."""
    n_img, n_cap = sims.shape
    i2t = np.zeros(n_img)
    for i in range(n_img):
        order = np.argsort(-sims[i], kind="stable")
        i2t[i] = min(np.where(order == j)[0][0] for j in range(cpi * i, cpi * i + cpi))
    t2i = np.zeros(n_cap)
    for j in range(n_cap):
        order = np.argsort(-sims[:, j], kind="stable")
        t2i[j] = np.where(order == j // cpi)[0][0]
    out = {}
    for d, r in (("i2t", i2t), ("t2i", t2i)):
        for k in (1, 5, 10):
            out[f"{d}_r{k}"] = 100.0 * len(np.where(r < k)[0]) / len(r)
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    for d, r in (("i2t", i2t), ("t2i", t2i)):
        out[f"{d}_medr"] = np.floor(np.median(r)) + 1
        out[f"{d}_meanr"] = r.mean() + 1
    return out


def assert_same(got: dict[str, float], want: dict[str, float]) -> None:
    assert list(got) == list(METRIC_KEYS)
    for k in METRIC_KEYS:
        assert isinstance(got[k], float), k
        assert got[k] == pytest.approx(want[k], abs=1e-9), k


def positives_boosted(rng: np.random.Generator, n: int, cpi: int, boost: float) -> np.ndarray:
    """Random scores with the ground-truth block raised by ``boost`` (non-trivial recalls)."""
    s = rng.standard_normal((n, n * cpi))
    s[np.arange(n)[:, None], np.arange(n)[:, None] * cpi + np.arange(cpi)] += boost
    return s


@pytest.mark.parametrize(
    ("n", "cpi", "boost"),
    [(1, 5, 0.0), (3, 5, 0.5), (17, 5, 1.0), (50, 5, 1.5), (40, 1, 1.0), (25, 2, 0.8)],
)
def test_matches_reference_on_random(n: int, cpi: int, boost: float) -> None:
    rng = np.random.default_rng(n * 100 + cpi)
    s = positives_boosted(rng, n, cpi, boost)
    got = recall_at_k(s, captions_per_image=cpi)
    want = reference(s, cpi)
    assert_same(got, want)


def test_matches_reference_medium_and_is_not_trivial() -> None:
    rng = np.random.default_rng(0)
    s = positives_boosted(rng, 300, 5, 2.0).astype(np.float32)
    got = recall_at_k(s)
    assert_same(got, reference(s))
    # the case is informative: neither perfect nor zero
    assert 0 < got["i2t_r1"] < 100 and 0 < got["t2i_r1"] < 100
    assert got["t2i_r1"] < got["t2i_r5"] < got["t2i_r10"]


def test_block_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row blocks that do not divide n_images give the same ranks as one block."""
    rng = np.random.default_rng(1)
    s = positives_boosted(rng, 23, 5, 1.0)
    whole = retrieval_ranks(s)
    monkeypatch.setattr(metrics, "_BLOCK_ELEMENTS", 3 * s.shape[1] + 7)  # 3 rows a block
    blocked = retrieval_ranks(s)
    np.testing.assert_array_equal(whole[0], blocked[0])
    np.testing.assert_array_equal(whole[1], blocked[1])
    assert_same(recall_at_k(s), reference(s))


def test_hand_made_known_recalls() -> None:
    # 2 images x 10 captions. Image 0 owns 0-4, image 1 owns 5-9.
    s = np.array(
        [
            # own: best 0.5; negatives above 0.5: 0.9 0.8 0.7 0.6 -> i2t rank 4
            [0.1, 0.2, 0.3, 0.4, 0.5, 0.9, 0.8, 0.7, 0.6, 0.05],
            # own (5-9): best 0.95 -> nothing above -> rank 0
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.95, 0.1, 0.1, 0.1, 0.1],
        ]
    )
    i2t, t2i = retrieval_ranks(s)
    np.testing.assert_array_equal(i2t, [4, 0])
    # caption j: rank of its image in column j
    # cols 0-4 (image 0): 0.1>0, 0.2>0, 0.3>0, 0.4>0, 0.5>0 -> rank 0 each
    # cols 5-9 (image 1): 0.95>0.9 -> 0; 0.1<0.8 -> 1; 0.1<0.7 -> 1; 0.1<0.6 -> 1; 0.1>0.05 -> 0
    np.testing.assert_array_equal(t2i, [0, 0, 0, 0, 0, 0, 1, 1, 1, 0])
    m = recall_at_k(s)
    assert m["i2t_r1"] == 50.0 and m["i2t_r5"] == 100.0 and m["i2t_r10"] == 100.0
    assert m["t2i_r1"] == 70.0 and m["t2i_r5"] == 100.0 and m["t2i_r10"] == 100.0
    assert m["rsum"] == 520.0
    assert m["i2t_medr"] == 3.0  # floor(median([4, 0]) = 2) + 1
    assert m["i2t_meanr"] == 3.0
    assert m["t2i_medr"] == 1.0
    assert m["t2i_meanr"] == pytest.approx(1.3)
    assert_same(m, reference(s))


def test_perfect_and_worst() -> None:
    n = 12
    perfect = np.zeros((n, 5 * n))
    perfect[np.arange(n)[:, None], np.arange(n)[:, None] * 5 + np.arange(5)] = 1.0
    m = recall_at_k(perfect)
    assert m["rsum"] == 600.0 and m["i2t_medr"] == 1.0 and m["t2i_meanr"] == 1.0
    worst = -perfect
    m = recall_at_k(worst)
    assert m["rsum"] == 0.0
    assert m["i2t_r10"] == 0.0
    # i2t: all 5*(n-1) negatives score 0 > -1; t2i: n-1 images score above
    assert m["i2t_meanr"] == 5 * (n - 1) + 1
    assert m["t2i_meanr"] == n


def test_ties_count_in_favour_of_the_positive() -> None:
    """Documented convention: rank = number of strictly greater scores."""
    s = np.zeros((4, 20))
    m = recall_at_k(s)
    assert m["rsum"] == 600.0
    # one negative strictly above, several tied: rank 1
    s = np.zeros((2, 10))
    s[0, 7] = 1.0
    i2t, t2i = retrieval_ranks(s)
    assert i2t.tolist() == [1, 0]
    assert t2i[7] == 1 and t2i[[0, 1, 2, 3, 4, 5, 6, 8, 9]].tolist() == [0] * 9


def test_best_of_five_positives() -> None:
    """The i2t rank uses the best of the image's own captions, not the first."""
    s = np.full((2, 10), 0.5)
    s[0, :5] = [0.0, 0.0, 0.0, 0.0, 0.9]  # only the last own caption is on top
    i2t, _ = retrieval_ranks(s)
    assert i2t[0] == 0


def test_torch_input_equals_numpy() -> None:
    rng = np.random.default_rng(3)
    s = positives_boosted(rng, 30, 5, 1.0).astype(np.float32)
    want = recall_at_k(s)
    assert recall_at_k(torch.from_numpy(s)) == want
    assert recall_at_k(torch.from_numpy(s).requires_grad_()) == want
    # half precision is upcast; rounding can change ties only, so compare to its own numpy copy
    h = torch.from_numpy(s).half()
    assert recall_at_k(h) == recall_at_k(h.float().numpy())


def test_non_contiguous_input() -> None:
    rng = np.random.default_rng(4)
    s = positives_boosted(rng, 20, 5, 1.0)
    t = np.asfortranarray(s)
    assert recall_at_k(t) == recall_at_k(s)
    big = np.zeros((20, 200))
    big[:, ::2] = s
    assert recall_at_k(big[:, ::2]) == recall_at_k(s)


@pytest.mark.parametrize(
    ("arr", "cpi", "match"),
    [
        (np.zeros(10), 5, "2-D"),
        (np.zeros((2, 3, 5)), 5, "2-D"),
        (np.zeros((2, 9)), 5, r"expected \(n_images, n_images \* 5\) = \(2, 10\)"),
        (np.zeros((3, 10)), 5, r"\(3, 15\)"),
        (np.zeros((0, 0)), 5, "no rows"),
        (np.zeros((2, 10)), 0, "captions_per_image must be >= 1"),
        (np.array([["a"] * 10] * 2), 5, "numeric"),
    ],
)
def test_shape_errors(arr: np.ndarray, cpi: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        recall_at_k(arr, captions_per_image=cpi)


def test_nan_rejected() -> None:
    s = np.zeros((2, 10))
    s[1, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        recall_at_k(s)


def test_large_matrix_gives_valid_recalls() -> None:
    """2000 x 10000 (COCO 5K-sized rows): its speed is benchmarked in
    benchmarks/test_bench_data.py; here only that the counting path gives sane values."""
    rng = np.random.default_rng(5)
    s = positives_boosted(rng, 2000, 5, 2.0).astype(np.float32)
    m = recall_at_k(s)
    assert 0 < m["i2t_r1"] <= m["i2t_r5"] <= m["i2t_r10"] <= 100


# --------------------------------------------------------------------------- 1K folds


def test_coco_folds_match_per_block_reference() -> None:
    rng = np.random.default_rng(6)
    n_folds, fold = 5, 20
    s = positives_boosted(rng, n_folds * fold, 5, 1.0)
    got = coco_1k_folds(s, n_folds, fold_size=fold)
    blocks = [
        reference(s[f * fold : (f + 1) * fold, 5 * f * fold : 5 * (f + 1) * fold])
        for f in range(n_folds)
    ]
    want = {k: float(np.mean([b[k] for b in blocks])) for k in METRIC_KEYS}
    assert_same(got, want)
    assert got != recall_at_k(s)  # folds are easier than the full set


def test_coco_folds_ignore_off_diagonal_blocks() -> None:
    rng = np.random.default_rng(7)
    s = positives_boosted(rng, 40, 5, 1.0)
    base = coco_1k_folds(s, 2, fold_size=20)
    s2 = s.copy()
    s2[:20, 100:] = 1e6  # image fold 0 vs caption fold 1
    s2[20:, :100] = 1e6
    assert coco_1k_folds(s2, 2, fold_size=20) == base
    assert recall_at_k(s2)["rsum"] < recall_at_k(s)["rsum"]


def test_coco_folds_default_fold_size() -> None:
    rng = np.random.default_rng(8)
    s = positives_boosted(rng, 2000, 5, 2.5).astype(np.float32)
    got = coco_1k_folds(s, n_folds=2)
    want = [recall_at_k(s[:1000, :5000]), recall_at_k(s[1000:, 5000:])]
    for k in METRIC_KEYS:
        assert got[k] == pytest.approx((want[0][k] + want[1][k]) / 2)


def test_coco_folds_shape_errors() -> None:
    with pytest.raises(ValueError, match=r"expected \(100, 500\) for 5 folds of 20 images"):
        coco_1k_folds(np.zeros((80, 400)), 5, fold_size=20)
    with pytest.raises(ValueError, match="expected"):
        coco_1k_folds(np.zeros((100, 499)), 5, fold_size=20)
    with pytest.raises(ValueError, match="n_folds and fold_size must be >= 1"):
        coco_1k_folds(np.zeros((100, 500)), 0)
