"""The per-block steps of :class:`seps.core.head.SEPSHead`'s batched pass: SPEC.md steps 3-5
(the selections of a block of images against every text, :func:`select_block`) and
steps 6-8 (one alignment unit of one image against a chunk of texts,
:func:`align_unit`, or of a block of images, :func:`align_images` and
:func:`align_block`, as :func:`block_mode` decides), with the state they share.

They are separate from :mod:`seps.core.head` because they are the per-pair arithmetic,
where the head is the orchestration around it (the inputs, the text chunks and their
order, the memory budget, the repeated dense captions, the training noise): each step
here is a function of what it is given (the config, the selectors, the kernel ops, the
views of the images and texts), so it can be read, and changed, against SPEC.md alone.
This module must not import :mod:`seps.core.head` (the head calls into it, not back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .aggregation import pair_weights
from .alignment import (
    HRPA,
    KeptWeights,
    block_row_col_max,
    cls_word_block,
    patch_word_scores,
    use_gram,
)
from .chunking import ClsColumns, TextBatch, is_expanded
from .config import SEPSConfig
from .kernels import KernelOps
from .selection import control_score, guide_scores, text_global

__all__ = [
    "ImageRows",
    "ImageState",
    "Selection",
    "Unit",
    "align_block",
    "align_images",
    "align_per_image",
    "align_unit",
    "block_mode",
    "blockable",
    "blocked_units",
    "global64",
    "select_block",
]

#: One branch's selection for a block (or a view of it): ``(keep, D, weight,
#: extra_weights)``, each ``(V, B_t, N)``; see :func:`select_block`.
Selection = tuple[Tensor, Tensor, Tensor, Tensor]


@dataclass(frozen=True)
class Unit:
    """One alignment against one caption kind: ``words`` (the caption the tokens are
    aligned against), ``branches`` (the selections whose tokens it uses: one, or two
    under ``fused``), whether it uses the gram contraction order (``None``: decided
    per text chunk from the chunk's longest caption, :func:`seps.core.alignment.use_gram`)
    and ``kept``, the ``K`` of compact aggregation weights
    (:meth:`seps.core.head.SEPSHead._kept`)."""

    words: str
    branches: tuple[str, ...]
    gram: bool | None
    kept: int | None


@dataclass
class ImageState:
    """Text-independent tensors of the images, computed once per forward pass."""

    x: Tensor  # (B_v, N, C) spatial tokens
    x_sel: Tensor  # x, detached under detach_selection
    xn: Tensor  # (B_v, N, C) l2n(x), no gradient
    xn64: Tensor  # xn in float64 (step 3, see guide_scores)
    s_im: Tensor  # (B_v, N) image self-attention
    s_p: dict[str, Tensor | None]  # score predictor per branch (paper scoring)
    exp_logits: dict[str, Tensor]  # (B_v, N, N_c) aggregation exp-logits per branch
    cls_n: Tensor | None  # (B_v, C) l2n([CLS])


class ImageRows:
    """Per-image views of an :class:`ImageState` (``unbind``: one backward stack)."""

    def __init__(self, st: ImageState) -> None:
        self.x = st.x_sel.unbind(0)
        self.xn = st.xn.unbind(0)
        self.exp_logits = {b: e.unbind(0) for b, e in st.exp_logits.items()}


def global64(t: TextBatch) -> Tensor:
    """``text_global`` in float64 of every caption of ``t`` (``(B_t, C)``, or ``(B_v, C)``
    for a per-image kind).

    One caption expanded over every text (stride 0) is computed once and expanded:
    converting ``B_t`` copies to float64 cost 80% of a ``paper``-preset call.
    """
    if is_expanded(t):
        return text_global(t.raw[:1].double(), t.lens[:1]).expand(t.raw.shape[0], -1)
    return text_global(t.raw.double(), t.lens)


def _control_mask(
    selection: str, prior: Tensor, topk: Callable[[Tensor, int], Tensor]
) -> Callable[[Tensor, int], Tensor]:
    """``mask_fn(score, k)`` of a selection control: the top-``k`` of
    :func:`seps.core.selection.control_score` of ``prior`` and the learned ``score``."""

    def mask_fn(score: Tensor, k: int) -> Tensor:
        return topk(control_score(selection, prior, score.detach()), k).to(score.dtype)

    return mask_fn


def select_block(
    cfg: SEPSConfig,
    selectors: nn.ModuleDict,
    ops: KernelOps,
    vs: slice,
    st: ImageState,
    branches: tuple[str, ...],
    glob: dict[str, Tensor],
    noise: dict[str, tuple[Tensor, ...]],
    texts: dict[str, TextBatch],
    b_t: int,
    prior: Tensor | None = None,
) -> dict[str, Selection]:
    """Steps 3-5 for images ``vs`` and every text: per branch ``(keep, D, weight,
    extra_weights)``, each ``(V, B_t, N)``. A per-image caption guides with one
    ``(V, 1, N)`` row per image; a branch that reads nothing per text then decides
    once per image, expanded over the texts (noise-free decisions of equal scores
    are equal). ``prior (V, B_t, N)``: the selection control's prior (see
    :meth:`seps.core.head.SEPSHead.forward`): the hard mask keeps the top of its control
    score instead.

    ``selectors``: the head's :class:`seps.core.selection.PatchSelector` per branch;
    ``glob``: :func:`global64` of each guiding caption kind, all images' texts;
    ``noise``: the Gumbel draws per branch, ``(B_v, B_t, N)`` each (none at evaluation).
    """
    s_im = st.s_im[vs]
    with torch.no_grad():
        guide = {
            k: guide_scores(
                g[vs].unsqueeze(1) if texts[k].per_image else g, st.xn64[vs], s_im.dtype
            )
            for k, g in glob.items()
        }
    out = {}
    with torch.set_grad_enabled(torch.is_grad_enabled() and not cfg.detach_selection):
        for b in branches:
            selector = selectors[b]
            other = "dense" if b == "sparse" else "sparse"
            s_other = None
            # The other caption enters the paper score only when both enter the head.
            if cfg.dense_fusion in ("dual_branch", "fused") and other in guide:
                s_other = guide[other]
            sp = st.s_p[b]
            score = selector.score(s_im, guide[b], s_other, None if sp is None else sp[vs])
            nz = tuple(g[vs] for g in noise[b])
            if (nz or prior is not None) and score.shape[1] != b_t:
                score = score.expand(-1, b_t, -1)  # each pair draws its own noise / prior
            mask_fn = ops.topk_mask
            if prior is not None:
                mask_fn = _control_mask(cfg.selection, prior, ops.topk_mask)
            keep, decision, weight = selector.decide(score, nz, mask_fn)
            parts = (keep, decision, weight, ops.extra_weights(score, 1.0 - weight))
            out[b] = tuple(p.expand(-1, b_t, -1) for p in parts)  # type: ignore[assignment]
    return out


def align_unit(
    cfg: SEPSConfig,
    aggregate: bool,
    hrpa: HRPA,
    ops: KernelOps,
    unit: Unit,
    v: int,
    sl: slice,
    img: ImageRows,
    sel: dict[str, Selection],
    texts: dict[str, TextBatch],
    cls_col: Tensor | None,
    gram: Tensor | None,
) -> Tensor:
    """Steps 6-8 of one alignment unit for image ``v`` and texts ``sl``: ``(B_t,)``.

    ``aggregate``: whether the head has a token aggregation (step 6; without one the
    kept patches themselves are aligned); ``sel``: each branch's :func:`select_block`
    parts for image ``v`` and the ``B`` texts ``sl``, ``(B, N)`` each; ``cls_col``:
    the ``[CLS]`` column of those texts' words, ``(B, L)``; ``gram``: image
    ``v``'s ``x x^T`` ``(N, N)`` when the unit may use the gram order.
    """
    fused = len(unit.branches) > 1
    # Fused (row 2): joint aggregation W_s V_s + W_d V_d and the mean extra token;
    # both are linear in x, so the weights are combined before the one product.
    extra = sel[unit.branches[0]][3]
    if fused:
        extra = sum(sel[b][3] for b in unit.branches) / len(unit.branches)
    agg: Tensor | KeptWeights | None = None
    body_masks: tuple[Tensor, ...] = ()
    words = texts[unit.words]
    m = words.words_of(v, sl)  # padding words cost GEMM work and are masked anyway
    if unit.gram is None and gram is not None:
        n, n_c, c = gram.shape[0], cfg.num_aggregated, cfg.embed_size
        if not use_gram(m, n, n_c, c, unit.kept):
            gram = None  # this chunk's captions are long enough for the direct order
    # The compact form needs exactly K kept patches in every pair; a top-K of
    # non-finite scores (a diverging run) keeps none, and takes the general path.
    keep0 = sel[unit.branches[0]][0]
    if aggregate and unit.kept is not None and bool((keep0.sum(-1) == unit.kept).all()):
        agg = KeptWeights.from_keep(img.exp_logits[unit.branches[0]][v], keep0)
    elif aggregate:
        for b in unit.branches:
            w = pair_weights(img.exp_logits[b][v], sel[b][2], normalise=fused)
            agg = w if agg is None else agg + w
    else:
        body_masks = tuple(sel[b][0] for b in unit.branches)
    norm, mask = words.rows(v, sl, m)
    s, col_scale, token_mask = patch_word_scores(
        norm,
        img.x[v],
        None if cls_col is None else cls_col[:, :m],
        agg,
        extra,  # type: ignore[arg-type]
        gram=gram,
        body_masks=body_masks,
        xn=img.xn[v],
    )
    return hrpa.reduce(s, col_scale, mask, token_mask, ops.row_col_max)


def block_mode(
    n: int, device: torch.device, impl: str, block_patches: int, on_device: bool, training: bool
) -> str:
    """How the alignment units of images of ``n`` patches are aligned: a block of images
    per call (:func:`align_images`) or one image per call (:func:`align_per_image`).

    - ``all``: on a device other than the CPU under the ``batched`` kernels (and
      ``on_device``, ``SEPSHead.device_blocks``), at any size. Under ``auto`` the head
      then takes the direct order for every unit, so every :func:`blockable` unit (all
      of them, unless ``alignment_order='gram'`` or there is no aggregation) is blocked.
      There one call per image is bound by kernel launches: on an H200 a paper-size
      training step of ``code`` took 214 ms blocked against 483 ms image by image
      (reports/gpu/README.md).
    - ``every``: images of at most ``block_patches`` patches (``SEPSHead.block_patches``
      says why): blocked when every unit is :func:`blockable`, else every unit per image.
    - ``direct``: a CPU training step under ``batched`` at larger sizes: the blockable
      units (those already in the direct order) blocked, the others per image. A
      ``code`` step at ViT-224, C = 512, B = 64 with real caption lengths took 2.7-3.2 s
      with its dense unit blocked against 3.4-3.8 s image by image (docs/kernels.md). A
      CPU evaluation was slower blocked, so it keeps one image per call.
    - ``none``: every unit per image (the ``compiled`` and ``triton`` kernels keep their
      per-image calls, which they speed up).
    """
    batched = impl == "batched"
    if device.type != "cpu" and on_device and batched:
        return "all"
    if n <= block_patches:
        return "every"
    if device.type == "cpu" and training and batched:
        return "direct"
    return "none"


def blocked_units(mode: str, units: list[Unit], aggregate: bool) -> list[Unit]:
    """The units of ``units`` that :func:`block_mode`'s ``mode`` aligns in blocks."""
    if mode == "none":
        return []
    ok = [u for u in units if blockable(u, aggregate)]
    return [] if mode == "every" and len(ok) < len(units) else ok


def blockable(unit: Unit, aggregate: bool) -> bool:
    """Whether :func:`align_block` covers ``unit``: aggregation in the direct order,
    decided for every caption length (``gram is False``; at the ``standard`` regime's
    sizes every unit). Other units align image by image (:func:`align_unit`)."""
    return aggregate and unit.gram is False


def align_block(
    hrpa: HRPA,
    unit: Unit,
    vs: slice,
    sl: slice,
    st: ImageState,
    sel: dict[str, Selection],
    texts: dict[str, TextBatch],
) -> Tensor:
    """Steps 6-8 of one alignment unit for the images ``vs`` and the texts ``sl`` in one
    call: ``(V, B)``, each row what :func:`align_unit` gives for its image (the same
    products, so the same values within float rounding; the tests hold both to the
    reference loop).

    Why: the training pass of the ``standard`` regime (64 x 64 pairs, N = 36, C = 64)
    called :func:`align_unit` once per image, a few dozen small operations each, and a
    step was bound by their dispatch (a step of ``laps`` ran about 900 copies and 390
    batched products; issue 42's cost). Here each operation covers every pair of the
    block (:func:`seps.core.alignment.block_row_col_max`). Only for :func:`blockable` units,
    where :func:`block_mode` says so; the caller bounds ``V * B`` by memory. The row and
    column maxima are taken in the layout of the products, not by the kernel op set's
    ``row_col_max``: a ``triton`` head's fused maxima serve its per-image calls, which
    is what :func:`block_mode` gives it.

    ``sel``: each branch's :func:`select_block` parts for these images and texts,
    ``(V, B, N)`` each. The words are cut to the block's longest caption (padding is
    masked, as in :func:`align_unit`).
    """
    fused = len(unit.branches) > 1
    extra = sel[unit.branches[0]][3]
    if fused:
        extra = sum(sel[b][3] for b in unit.branches) / len(unit.branches)
    x = st.x_sel[vs]
    v = x.shape[0]
    b = sl.stop - sl.start
    words = texts[unit.words]
    per_image = words.per_image
    own = vs if per_image else sl  # the captions this block aligns against
    m = max(words.lens_list[own])
    norm, mask = words.norm[own, :m], words.mask[own, :m]
    cls_col = None
    if st.cls_n is not None:
        cls_n = st.cls_n[vs]
        if per_image:  # <u_j of image v's caption, l2n(cls_v)>
            cls_col = torch.bmm(norm, cls_n.unsqueeze(2)).view(v, 1, m).expand(v, b, m)
        else:
            cls_col = cls_word_block(norm, cls_n)
    # The full weights, also under top-K (block_row_col_max says why).
    agg: Tensor | None = None
    for br in unit.branches:
        w = pair_weights(st.exp_logits[br][vs], sel[br][2], normalise=fused)
        agg = w if agg is None else agg + w
    assert agg is not None
    row, col = block_row_col_max(norm, mask, x, cls_col, agg, extra, per_image)
    # Pairs come back grouped by their words: image-major per image, else text-major.
    groups, pairs = (v, b) if per_image else (b, v)
    mask = mask.unsqueeze(1).expand(groups, pairs, m).reshape(groups * pairs, m)
    sims = hrpa.from_maxima(row, col, mask, None).view(groups, pairs)
    return sims if per_image else sims.t()


#: ``align(unit, vs, sl, st, sel, texts) -> (V, B)``: :func:`align_block` as the head
#: calls it (a method, so that instrumentation can wrap it).
AlignBlock = Callable[
    [Unit, slice, slice, ImageState, dict[str, Selection], dict[str, TextBatch]], Tensor
]


def align_images(
    align: AlignBlock,
    vs: slice,
    st: ImageState,
    sel: dict[str, Selection],
    texts: dict[str, TextBatch],
    units: list[Unit],
    chunk: int,
    budget_mb: float,
) -> Tensor:
    """Steps 6-8 of the images ``vs`` against every text: ``(V, B_t)``, summed over
    ``units``, with as many images per ``align`` call as keep its per-pair tensors within
    ``budget_mb`` for a chunk of ``chunk`` texts. ``sel``: the block's selections,
    ``(V, B_t, N)`` parts (:func:`select_block`)."""
    n_v = vs.stop - vs.start
    n, c = st.x.shape[1:]
    b_t = next(iter(sel.values()))[0].shape[1]
    m = max(texts[u.words].raw.shape[1] for u in units)
    # Per pair: the weights, the tokens and their products, forward and backward.
    per_pair = 4 * c * 3 * (n + m)
    sub = max(1, min(n_v, int(budget_mb * 2**20 / (per_pair * min(chunk, b_t)))))
    # split, not indexing: one backward stack per block (see SEPSHead._run).
    pieces = {
        b: [[row.split(chunk, 1) for row in part.split(sub, 0)] for part in parts]
        for b, parts in sel.items()
    }
    out: list[Tensor] = []
    for i, i0 in enumerate(range(0, n_v, sub)):
        vi = slice(vs.start + i0, vs.start + min(i0 + sub, n_v))
        sims_c: list[Tensor] = []
        for k, start in enumerate(range(0, b_t, chunk)):
            sl = slice(start, min(start + chunk, b_t))
            sel_ik = {b: tuple(p[i][k] for p in parts) for b, parts in pieces.items()}
            sim = align(units[0], vi, sl, st, sel_ik, texts)
            for u in units[1:]:
                sim = sim + align(u, vi, sl, st, sel_ik, texts)
            sims_c.append(sim)
        out.append(torch.cat(sims_c, 1))
    return torch.cat(out)


#: ``align(unit, v, sl, img, sel, texts, cls_col, gram, ops) -> (B,)``: :func:`align_unit`
#: as the head calls it (a method, as :data:`AlignBlock`).
AlignUnit = Callable[
    [
        Unit,
        int,
        slice,
        ImageRows,
        dict[str, Selection],
        dict[str, TextBatch],
        "Tensor | None",
        "Tensor | None",
        KernelOps,
    ],
    Tensor,
]


def align_per_image(
    align: AlignUnit,
    units: list[Unit],
    vs: slice,
    sel: dict[str, Selection],
    chunk: int,
    img: ImageRows,
    texts: dict[str, TextBatch],
    cls_cols: dict[str, ClsColumns],
    gram_rows: tuple[Tensor, ...],
    ops: KernelOps,
) -> Tensor:
    """Steps 6-8 of ``units`` for the images ``vs``, one image and text chunk per
    ``align`` call: ``(V, B_t)`` summed over ``units``. ``sel``: the block's selections,
    ``(V, B_t, N)`` parts; ``cls_cols``: the ``[CLS]`` columns by caption kind (empty
    without ``[CLS]``); ``gram_rows``: each image's ``x x^T`` where a unit may use it."""
    b_t = next(iter(sel.values()))[0].shape[1]
    rows: list[Tensor] = []
    # pieces[b][k][i][c]: part k of branch b for image vs.start + i and text chunk c;
    # split, not indexing: one backward stack per block (see SEPSHead._run).
    pieces = {
        b: [[list(row.split(chunk)) for row in p.unbind(0)] for p in parts]
        for b, parts in sel.items()
    }
    for i, v in enumerate(range(vs.start, vs.stop)):
        sims_v: list[Tensor] = []
        for c, start in enumerate(range(0, b_t, chunk)):
            sl = slice(start, min(start + chunk, b_t))
            sel_vc = {b: tuple(p[i][c] for p in parts) for b, parts in pieces.items()}
            sim = None
            for unit in units:
                cls_col = None
                if cls_cols:
                    m = texts[unit.words].words_of(v, sl)
                    cls_col = cls_cols[unit.words].get(v, sl, m)
                gram = gram_rows[v] if unit.gram is not False else None
                res = align(unit, v, sl, img, sel_vc, texts, cls_col, gram, ops)
                sim = res if sim is None else sim + res
            assert sim is not None
            sims_v.append(sim)
        rows.append(torch.cat(sims_v))
    return torch.stack(rows)
