"""Image-text retrieval metrics (Flickr30K / COCO convention, ``SPEC.md`` "Retrieval metrics").

A similarity matrix ``sims`` has shape ``(n_images, n_images * captions_per_image)``;
image ``i`` owns captions ``5i .. 5i+4`` (for the default 5 captions per image).

- Image-to-text rank of image ``i``: the best (lowest) 0-based rank among its own
  captions in the descending order of ``sims[i]``.
- Text-to-image rank of caption ``j``: the 0-based rank of image ``j // 5`` in the
  descending order of ``sims[:, j]``.
- ``R@K`` = percentage of queries with rank < K (K = 1, 5, 10), ``rsum`` = the sum of
  the six recalls; ``medr = floor(median(rank)) + 1`` and ``meanr = mean(rank) + 1``
  (1-based, as the official evaluation code prints them).

Ties: the rank of a positive is the number of candidates with a *strictly greater*
score, i.e. ties are resolved in favour of the positive (optimistic). For the
image-to-text direction this equals the number of *negative* captions scoring above the
best positive. The official code sorts with ``np.argsort`` (unstable quicksort), whose
order among equal scores is arbitrary; on tie-free matrices (any real-valued model output
in practice) both give identical numbers. Ranks are computed by counting, without sorting:
``O(n_images * n_captions)`` comparisons done in row blocks of bounded memory, so a
5,000 x 25,000 matrix takes about a second.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["METRIC_KEYS", "coco_1k_folds", "recall_at_k", "retrieval_ranks"]

METRIC_KEYS = (
    "i2t_r1",
    "i2t_r5",
    "i2t_r10",
    "t2i_r1",
    "t2i_r5",
    "t2i_r10",
    "rsum",
    "i2t_medr",
    "i2t_meanr",
    "t2i_medr",
    "t2i_meanr",
)
_BLOCK_ELEMENTS = 1 << 24  # comparisons per block (~16 MB of booleans)


def _as_matrix(sims: Any, captions_per_image: int) -> np.ndarray:
    """``sims`` (numpy array or torch tensor) as a 2-D float numpy array, shape-checked."""
    if isinstance(captions_per_image, bool) or not isinstance(captions_per_image, int | np.integer):
        raise ValueError(f"captions_per_image must be an int, got {captions_per_image!r}")
    if captions_per_image < 1:
        raise ValueError(f"captions_per_image must be >= 1, got {captions_per_image}")
    if hasattr(sims, "detach") and hasattr(sims, "cpu"):  # torch.Tensor, without importing torch
        t = sims.detach().cpu()
        if t.is_floating_point() and t.element_size() < 4:  # float16 / bfloat16
            t = t.float()
        sims = t.numpy()
    arr = np.asarray(sims)
    if arr.ndim != 2:
        raise ValueError(
            f"sims must be 2-D (n_images, n_images * {captions_per_image}), got shape {arr.shape}"
        )
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"sims must be a real numeric array, got dtype {arr.dtype}")
    n_img, n_cap = arr.shape
    if n_img == 0:
        raise ValueError("sims has no rows (n_images = 0)")
    if n_cap != n_img * captions_per_image:
        raise ValueError(
            f"sims has shape {arr.shape}: expected (n_images, n_images * {captions_per_image})"
            f" = ({n_img}, {n_img * captions_per_image}); image i must own captions "
            f"{captions_per_image}i..{captions_per_image}i+{captions_per_image - 1}"
        )
    if np.issubdtype(arr.dtype, np.floating) and np.isnan(arr).any():
        raise ValueError("sims contains NaN")
    return arr


def retrieval_ranks(sims: Any, captions_per_image: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """0-based ranks of the ground truth in both directions (strictly-greater counting).

    Args:
        sims: ``(n_images, n_images * captions_per_image)`` numpy array or torch tensor.
        captions_per_image: captions owned by each image (consecutive columns).

    Returns:
        ``(i2t, t2i)``: int64 arrays of shapes ``(n_images,)`` and ``(n_captions,)``;
        ``i2t[i]`` = number of captions scoring strictly above image ``i``'s best own
        caption, ``t2i[j]`` = number of images scoring strictly above image ``j // cpi``
        for caption ``j``.
    """
    s = _as_matrix(sims, captions_per_image)
    n_img, n_cap = s.shape
    rows = np.arange(n_img)[:, None]
    own = s[rows, rows * captions_per_image + np.arange(captions_per_image)]  # (n_img, cpi)
    best = own.max(axis=1)  # (n_img,)
    t2i_pos = own.reshape(-1)  # (n_cap,) == s[j // cpi, j]
    i2t = np.empty(n_img, dtype=np.int64)
    t2i = np.zeros(n_cap, dtype=np.int64)
    step = max(1, _BLOCK_ELEMENTS // n_cap)
    for r0 in range(0, n_img, step):
        block = s[r0 : r0 + step]
        i2t[r0 : r0 + step] = np.count_nonzero(block > best[r0 : r0 + step, None], axis=1)
        t2i += np.count_nonzero(block > t2i_pos[None, :], axis=0)
    return i2t, t2i


def _summary(i2t: np.ndarray, t2i: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    for prefix, ranks in (("i2t", i2t), ("t2i", t2i)):
        for k in (1, 5, 10):
            out[f"{prefix}_r{k}"] = float(100.0 * np.mean(ranks < k))
    out["rsum"] = float(sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)))
    for prefix, ranks in (("i2t", i2t), ("t2i", t2i)):
        out[f"{prefix}_medr"] = float(np.floor(np.median(ranks)) + 1)
        out[f"{prefix}_meanr"] = float(np.mean(ranks) + 1)
    return {k: out[k] for k in METRIC_KEYS}


def recall_at_k(sims: Any, captions_per_image: int = 5) -> dict[str, float]:
    """Retrieval recalls of a similarity matrix, both directions.

    Args:
        sims: ``(n_images, n_images * captions_per_image)`` numpy array or torch tensor;
            ``sims[i, j]`` scores image ``i`` against caption ``j``; image ``i`` owns
            captions ``cpi*i .. cpi*i + cpi - 1``.
        captions_per_image: ``cpi``, 5 for Flickr30K and COCO.

    Returns:
        ``{"i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"}``: percentages in
        [0, 100]; ``"rsum"``: their sum; ``"i2t_medr", "i2t_meanr", "t2i_medr",
        "t2i_meanr"``: 1-based median (floored) and mean ranks. All values are floats.
        Ties count in favour of the positive (see the module docstring).
    """
    return _summary(*retrieval_ranks(sims, captions_per_image))


def coco_1k_folds(
    sims: Any, n_folds: int = 5, *, fold_size: int = 1000, captions_per_image: int = 5
) -> dict[str, float]:
    """COCO 1K protocol: `recall_at_k` averaged over ``n_folds`` folds of ``fold_size`` images.

    Fold ``f`` scores images ``[fold_size*f, fold_size*(f+1))`` against captions
    ``[cpi*fold_size*f, cpi*fold_size*(f+1))`` only (the diagonal blocks of ``sims``).

    Args:
        sims: ``(n_folds * fold_size, n_folds * fold_size * cpi)`` array or tensor
            (``(5000, 25000)`` for COCO 5K).
        n_folds: number of folds (5).
        fold_size: images per fold (1000).
        captions_per_image: ``cpi`` (5).

    Returns:
        The keys of `recall_at_k`, each the mean of the per-fold values (``rsum`` is the
        mean of the per-fold sums, equal to the sum of the mean recalls).
    """
    if n_folds < 1 or fold_size < 1:
        raise ValueError(f"n_folds and fold_size must be >= 1, got {n_folds}, {fold_size}")
    s = _as_matrix(sims, captions_per_image)
    want = (n_folds * fold_size, n_folds * fold_size * captions_per_image)
    if s.shape != want:
        raise ValueError(
            f"coco_1k_folds: sims has shape {s.shape}; expected {want} for {n_folds} folds "
            f"of {fold_size} images with {captions_per_image} captions each"
        )
    per_fold = []
    c = fold_size * captions_per_image
    for f in range(n_folds):
        block = s[f * fold_size : (f + 1) * fold_size, f * c : (f + 1) * c]
        per_fold.append(recall_at_k(block, captions_per_image))
    return {k: float(np.mean([m[k] for m in per_fold])) for k in METRIC_KEYS}
