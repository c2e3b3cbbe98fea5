"""Test-time evaluation of a head: full similarity matrices under a ``dense_source`` protocol.

SPEC.md "(finding) Test-time dense-caption leakage": the official test loader repeats
each image's dense (MLLM-generated) caption for that image's captions, so when
``sims[v, t]`` is computed the text query ``t`` carries a description generated from its
own ground-truth image. :func:`similarity_matrix` makes the choice of dense caption an
explicit protocol switch, ``dense_source``:

``query`` (official, leaks the answer)
    ``sims[v, t]`` uses the dense caption of caption ``t``'s ground-truth image,
    ``caption_to_image[t]`` (image ``t // captions_per_image`` in the Flickr30K / COCO
    layout), whatever image ``v`` is being scored. Every column of the matrix is
    scored with the answer's description, in both retrieval directions.
``candidate`` (fair)
    ``sims[v, t]`` uses the dense caption of the image ``v`` being scored, as if the
    description had been generated from every gallery image at indexing time. No
    information about the ground truth enters the score. Each image shard is one head
    call with one dense caption per image (``SEPSHead(..., dense_per_image=True)``).
``none`` (no dense caption at test time)
    The dense input is replaced by the sparse caption itself, so a head that needs a
    dense input gets no extra description. *Decision* (SPEC.md only says "sparse text
    only"): feeding the sparse words keeps every preset runnable unchanged, whereas
    zero or empty dense inputs would give undefined cosines. For the ``code`` preset
    (``dense_fusion="dual_branch"``, raw cosine scoring without learned weights, one
    shared aggregation network) the dense branch then repeats the sparse branch
    exactly, so ``sims`` is exactly 2x the sparse-branch similarity: the same ranking
    as the sparse branch alone. For ``fused`` (paper) the dense-guided selection is
    guided by the sparse caption as well.
``shuffled`` (control)
    ``sims[v, t]`` uses the dense caption of image ``perm[caption_to_image[t]]``, with
    ``perm = shuffle_permutation(n_images, seed)`` a fixed random derangement: a real
    description of some *other* image, never the text's own.

For a head with ``config.dense_fusion == "none"`` (e.g. the ``laps`` preset) the dense
captions are never used; all four protocols give the same matrix and the dense inputs
may be ``None``.

:func:`evaluate_retrieval` turns a matrix into the recalls of :mod:`seps.core.metrics`.
Reports must state which ``dense_source`` produced each number.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from .metrics import coco_1k_folds, recall_at_k

__all__ = [
    "COCO_FOLD_SIZE",
    "COCO_N_FOLDS",
    "DENSE_SOURCES",
    "evaluate_retrieval",
    "shuffle_permutation",
    "similarity_matrix",
]

DENSE_SOURCES = ("query", "candidate", "none", "shuffled")
"""``dense_source`` protocols; see the module docstring."""

COCO_N_FOLDS = 5
"""Folds of the COCO 1K protocol."""
COCO_FOLD_SIZE = 1000
"""Images per fold of the COCO 1K protocol (the 5K test set has ``5 * 1000`` images)."""


def shuffle_permutation(n: int, seed: int = 0) -> Tensor:
    """A random derangement of ``range(n)``: ``perm[i] != i`` for every ``i``.

    Uniform over derangements (rejection sampling of ``torch.randperm``, about
    ``e`` draws on average) and deterministic for a given ``(n, seed)``.

    Args:
        n: number of items (images); ``n == 0`` gives an empty tensor; ``n == 1`` has
            no derangement and raises ``ValueError``.
        seed: seed of the private ``torch.Generator`` (the global RNG is untouched).

    Returns:
        ``(n,)`` int64 tensor.
    """
    if n < 0 or n == 1:
        raise ValueError(f"shuffle_permutation: n must be 0 or >= 2 (a derangement), got {n}")
    g = torch.Generator().manual_seed(int(seed))
    idx = torch.arange(n)
    while True:
        perm = torch.randperm(n, generator=g)
        if not bool((perm == idx).any()):
            return perm


def _head_device(head: nn.Module) -> torch.device:
    param = next(head.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def _check(
    img_embs: Tensor,
    cap_embs: Tensor,
    cap_lens: Tensor,
    dense_embs: Tensor | None,
    dense_lens: Tensor | None,
    caption_to_image: Tensor,
    dense_source: str,
    needs_dense: bool,
    image_shard: int,
    text_shard: int,
) -> None:
    if dense_source not in DENSE_SOURCES:
        raise ValueError(f"dense_source: invalid value {dense_source!r}; allowed: {DENSE_SOURCES}")
    if image_shard < 1 or text_shard < 1:
        raise ValueError(
            f"image_shard and text_shard must be >= 1, got {image_shard}, {text_shard}"
        )
    n_img, n_cap = img_embs.shape[0], cap_embs.shape[0]
    if cap_lens.shape != (n_cap,):
        raise ValueError(f"cap_lens: expected shape ({n_cap},), got {tuple(cap_lens.shape)}")
    if caption_to_image.shape != (n_cap,):
        raise ValueError(
            f"caption_to_image: expected shape ({n_cap},), got {tuple(caption_to_image.shape)}"
        )
    if n_cap and (int(caption_to_image.min()) < 0 or int(caption_to_image.max()) >= n_img):
        raise ValueError(f"caption_to_image: every entry must be in [0, {n_img - 1}]")
    if needs_dense:
        if dense_embs is None or dense_lens is None:
            raise ValueError(
                f"dense_source={dense_source!r} with dense_fusion != 'none' needs dense_embs "
                "and dense_lens (one dense caption per image)"
            )
        if dense_embs.dim() != 3 or dense_embs.shape[0] != n_img:
            raise ValueError(
                f"dense_embs: expected shape ({n_img}, L_d, C) (one per image), "
                f"got {tuple(dense_embs.shape)}"
            )
        if dense_lens.shape != (n_img,):
            raise ValueError(
                f"dense_lens: expected shape ({n_img},), got {tuple(dense_lens.shape)}"
            )


def similarity_matrix(
    head: nn.Module,
    img_embs: Tensor,
    cap_embs: Tensor,
    cap_lens: Tensor,
    dense_embs: Tensor | None,
    dense_lens: Tensor | None,
    *,
    caption_to_image: Tensor,
    dense_source: str = "query",
    image_shard: int = 128,
    text_shard: int = 1024,
    seed: int = 0,
    device: torch.device | str | None = None,
    progress: bool = False,
    present_order: tuple[Tensor, Tensor] | None = None,
    selection_prior: Callable[[Tensor, Tensor], Tensor] | None = None,
) -> Tensor:
    """Similarities of every test image with every test caption under ``dense_source``.

    Args:
        head: a :class:`seps.core.head.SEPSHead` (anything with ``config.dense_fusion`` and the
            head's forward signature). It is run in eval mode under ``torch.no_grad()``;
            the training flags of all its modules are restored afterwards.
        img_embs: ``(n_images, L_v, C)`` image tokens (``[CLS]`` first when ``L_v`` is not
            a square).
        cap_embs: ``(n_caps, L_s, C)`` sparse captions, padded; ``cap_lens (n_caps,)``.
        dense_embs: ``(n_images, L_d, C)`` one dense caption *per image*, padded;
            ``dense_lens (n_images,)``. May be ``None`` when ``dense_source="none"`` or
            the head has ``dense_fusion="none"``.
        caption_to_image: ``(n_caps,)`` int64, the ground-truth image of each caption
            (``t // 5`` in the Flickr30K / COCO layout).
        dense_source: one of :data:`DENSE_SOURCES` (module docstring).
        image_shard: images per head call (``candidate``: each with its own dense
            caption, the head's ``dense_per_image``).
        text_shard: texts per head call.
        seed: seed of the ``shuffled`` derangement (:func:`shuffle_permutation`).
        device: where the shards are computed; default the device of the head's first
            parameter, or CPU for a head without parameters.
        progress: show a tqdm bar over the (text shard, image shard) blocks.
        present_order: ``(image_perm (n_images,), caption_perm (n_caps,))``: the order in
            which images (with their dense captions) and captions are presented to the
            head (``eval_permute``, the negative control of :mod:`seps.train.controls`). Which
            dense caption a pair uses is decided in the original order first, so every
            protocol scores every pair with the same inputs; the matrix is returned in the
            original order. Each pair is scored independently, so the result is the same
            (the head's chunks and padding differ; every pair's value is computed by the
            same operations).
        selection_prior: ``prior(image_idx (V,), caption_idx (T,)) -> (V, T, N)`` in the
            original indices of the block: passed to the head as ``selection_prior``
            (a selection control, :mod:`seps.train.controls`); None for ``learned``.

    Returns:
        ``(n_images, n_caps)`` float32 tensor on the CPU; ``sims[v, t]`` scores image
        ``v`` against caption ``t``. The result does not depend on the shard sizes
        (beyond float rounding of batched kernels).
    """
    uses_dense = head.config.dense_fusion != "none"  # type: ignore[union-attr]
    needs_dense = uses_dense and dense_source != "none"
    _check(
        img_embs,
        cap_embs,
        cap_lens,
        dense_embs,
        dense_lens,
        caption_to_image,
        dense_source,
        needs_dense,
        image_shard,
        text_shard,
    )
    dev = torch.device(device) if device is not None else _head_device(head)
    n_img, n_cap = img_embs.shape[0], cap_embs.shape[0]
    c2i = caption_to_image.long().cpu()
    dense_index = None  # per-text index into dense_embs (query / shuffled)
    if needs_dense and dense_source == "query":
        dense_index = c2i
    elif needs_dense and dense_source == "shuffled":
        dense_index = shuffle_permutation(n_img, seed)[c2i]
    per_image = needs_dense and dense_source == "candidate"
    img_order = torch.arange(n_img)
    cap_order = torch.arange(n_cap)
    if present_order is not None:
        img_order, cap_order = (o.long().cpu() for o in present_order)
        for order, n in ((img_order, n_img), (cap_order, n_cap)):
            if not torch.equal(torch.sort(order).values, torch.arange(n)):
                raise ValueError(
                    "present_order: expected a permutation of the images and one of the captions"
                )
        img_embs, cap_embs, cap_lens = img_embs[img_order], cap_embs[cap_order], cap_lens[cap_order]
        if dense_index is not None:
            dense_index = dense_index[cap_order]
        if per_image:
            assert dense_embs is not None and dense_lens is not None
            dense_embs, dense_lens = dense_embs[img_order], dense_lens[img_order]

    out = torch.empty(n_img, n_cap, dtype=torch.float32)
    n_blocks = -(-n_img // image_shard) * -(-n_cap // text_shard)
    bar = tqdm(total=n_blocks, desc=f"sims[{dense_source}]", disable=not progress)
    flags = {m: m.training for m in head.modules()}
    head.eval()
    # Text-only work once per text shard, not once per head call (SEPSHead.reusing_texts).
    reuse = getattr(head, "reusing_texts", contextlib.nullcontext)
    try:
        with torch.no_grad():
            for t0 in range(0, n_cap, text_shard):
                t1 = min(t0 + text_shard, n_cap)
                cap = cap_embs[t0:t1].to(dev)
                lens = cap_lens[t0:t1].to(dev)
                long_cap: Tensor | None = None
                long_lens: Tensor | None = None
                if dense_index is not None:
                    assert dense_embs is not None and dense_lens is not None
                    idx = dense_index[t0:t1]
                    long_cap, long_lens = dense_embs[idx].to(dev), dense_lens[idx].to(dev)
                elif uses_dense and not per_image:  # dense_source == "none"
                    long_cap, long_lens = cap, lens
                with reuse():
                    for v0 in range(0, n_img, image_shard):
                        v1 = min(v0 + image_shard, n_img)
                        img = img_embs[v0:v1].to(dev)
                        kw: dict[str, Any] = {}
                        if selection_prior is not None:
                            prior = selection_prior(img_order[v0:v1], cap_order[t0:t1])
                            kw["selection_prior"] = prior.to(dev)
                        if per_image:
                            assert dense_embs is not None and dense_lens is not None
                            d, d_lens = dense_embs[v0:v1].to(dev), dense_lens[v0:v1].to(dev)
                            s = head(img, cap, lens, d, d_lens, dense_per_image=True, **kw)
                        else:
                            s = head(img, cap, lens, long_cap, long_lens, **kw)
                        out[v0:v1, t0:t1] = s.float().cpu()
                        bar.update(1)
    finally:
        for m, flag in flags.items():
            m.training = flag
        bar.close()
    if present_order is not None:  # back to the original order
        back = torch.empty_like(out)
        back[img_order[:, None], cap_order[None, :]] = out
        out = back
    return out


def evaluate_retrieval(
    sims: Any, *, coco_folds: bool = False, captions_per_image: int = 5
) -> dict[str, float]:
    """Retrieval metrics of an ``(n_images, n_images * captions_per_image)`` matrix.

    Args:
        sims: numpy array or torch tensor; image ``i`` owns captions
            ``cpi*i .. cpi*i + cpi - 1``.
        coco_folds: also report the COCO 1K protocol (mean over 5 folds of 1000
            images) when the matrix has exactly ``5 * 1000`` images (COCO 5K).
        captions_per_image: ``cpi`` (5 for Flickr30K and COCO).

    Returns:
        The keys of :func:`seps.core.metrics.recall_at_k` (``i2t_r1`` ... ``rsum``,
        ``*_medr``, ``*_meanr``) for the whole matrix; with ``coco_folds`` on a COCO 5K
        matrix, also the same keys prefixed ``1k_`` (e.g. ``1k_rsum``).
    """
    out = recall_at_k(sims, captions_per_image)
    n_images = sims.shape[0] if hasattr(sims, "shape") else len(sims)
    if coco_folds and n_images == COCO_N_FOLDS * COCO_FOLD_SIZE:
        folds = coco_1k_folds(
            sims, COCO_N_FOLDS, fold_size=COCO_FOLD_SIZE, captions_per_image=captions_per_image
        )
        out.update({f"1k_{k}": v for k, v in folds.items()})
    return out
