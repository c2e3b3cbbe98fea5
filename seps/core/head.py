"""The SEPS cross-modal head: every switch of SPEC.md in one batched module.

``SEPSHead(config)(img_embs, cap_embs, cap_lens, long_cap_embs, long_cap_lens)``
returns ``sims (B_v, B_t)`` in eval mode and ``(sims, masks)`` in train mode,
where ``masks`` maps each selection branch (``"sparse"``, ``"dense"``) to its
decision matrix D of shape ``(B_v, B_t, N)``.

The head is batched over texts: the selections (steps 3-5) are computed for a
block of images and all texts at once, the alignment (steps 6-8) for each image
and a chunk of texts at a time, or for a block of images and a chunk of texts
(:func:`seps.core.head_steps.block_mode`: small images, a CPU training step's direct-order
units, every unit on a GPU);
``text_chunk_size`` and ``memory_budget_mb`` only
bound the memory (the result does not depend on them). Within a chunk the word
padding beyond the chunk's longest caption is cut before any GEMM, and at
evaluation the texts are taken in order of length so that little padding is left
(the similarities come back in the callers' order); the text-side bookkeeping of
this (chunk size, ordering, repeated dense captions) is :mod:`seps.core.chunking`, and the
steps themselves (3-5 of a block of images, 6-8 of one alignment unit) are
:mod:`seps.core.head_steps`. ``impl`` selects one of the interchangeable kernel
implementations of :mod:`seps.core.kernels` (``batched`` by default): an op set for the
batched pass, or ``loop``, the reference per-text loop of :mod:`seps.core.reference`.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from .aggregation import TokenAggregation
from .alignment import HRPA, use_gram
from .chunking import (
    ClsColumns,
    TextBatch,
    TextReuse,
    auto_chunk_size,
    dense_runs,
    order_by_length,
    texts_per_image,
)
from .config import SEPSConfig, get_config, keep_count
from .head_inputs import check_inputs, check_prior
from .head_steps import (
    ImageRows,
    ImageState,
    Selection,
    Unit,
    align_block,
    align_images,
    align_per_image,
    align_unit,
    block_mode,
    blocked_units,
    global64,
    select_block,
)
from .kernels import Kernel, KernelOps, get_kernel
from .reference import loop_forward, per_image_calls
from .selection import (
    PatchSelector,
    has_cls_token,
    image_self_attention,
    l2n,
    split_cls_token,
)


class SEPSHead(nn.Module):
    """Cross-modal head (SPEC.md "Shared steps" + the seven differences + findings).

    Args:
        config: the switches; see :class:`seps.core.config.SEPSConfig`.
        text_chunk_size: texts processed per step; ``None`` picks a size that keeps
            the per-step working set near ``memory_budget_mb``.
        memory_budget_mb: upper bound on the size of the per-chunk intermediates
            when ``text_chunk_size`` is ``None``.
        impl: the implementation of the selection and HRPA kernels, a name of
            :data:`seps.core.kernels.IMPLEMENTATIONS`: ``batched`` (default), ``loop``
            (the literal per-text loop of SPEC.md, :mod:`seps.core.reference`: the test
            oracle and benchmark baseline),
            ``compiled`` (``batched`` under ``torch.compile``) or ``triton`` (fused
            CUDA kernels; needs CUDA and Triton). All give the same similarities
            within 1e-5 and share the parameters, so ``state_dict`` is the same.
        alignment_order: ``auto`` (default), ``direct`` or ``gram``: the contraction
            order of the patch-word products (see :mod:`seps.core.alignment`); only the
            speed and float rounding differ.
    """

    #: Target per-chunk working set (MB) of the automatic text chunk on a CPU:
    #: cache-sized. On a GPU the chunk is sized by ``memory_budget_mb`` alone: there a
    #: cache-sized chunk (about 64 texts) makes every step a few tiny kernels, and the
    #: evaluation is bound by kernel launches (1,000 x 5,000 pairs took 90 s on an H200,
    #: reports/gpu/README.md).
    cache_budget_mb: float = 24.0
    #: On a CPU, images of at most this many patches align a block of images per call
    #: (:func:`seps.core.head_steps.align_block`) when every unit takes the direct order. At
    #: N = 36 one call per image is bound by its dispatch: a ``laps`` training step took
    #: 78 ms blocked against 202 ms (docs/kernels.md). A CPU evaluation at ViT-224 sizes
    #: is not, and one call per image keeps the compact top-K weights, half the products
    #: of the block's full weights (tests/test_flops.py), and the fused maxima of the
    #: ``triton`` kernels. Other cases (a CPU training step, a GPU with
    #: ``device_blocks``): :func:`block_mode`.
    block_patches: int = 64
    device_blocks: bool = True

    def __init__(
        self,
        config: SEPSConfig | None = None,
        *,
        text_chunk_size: int | None = None,
        memory_budget_mb: float = 512.0,
        impl: str = "batched",
        alignment_order: str = "auto",
    ) -> None:
        super().__init__()
        self.config = config or get_config("code")
        if text_chunk_size is not None and text_chunk_size < 1:
            raise ValueError(f"text_chunk_size: invalid value {text_chunk_size!r}; allowed: >= 1")
        if alignment_order not in ("auto", "direct", "gram"):
            raise ValueError(
                f"alignment_order: invalid value {alignment_order!r}; allowed: auto, direct, gram"
            )
        self.text_chunk_size = text_chunk_size
        self.memory_budget_mb = memory_budget_mb
        self.alignment_order = alignment_order
        self.impl = impl
        self.selectors = nn.ModuleDict(
            {b: PatchSelector(self.config) for b in self.config.branches}
        )
        self.aggregation: TokenAggregation | None = (
            None if self.config.aggregation == "none" else TokenAggregation(self.config)
        )
        self.hrpa = HRPA(self.config)
        self._reuse: TextReuse | None = None  # set by reusing_texts()

    @contextlib.contextmanager
    def reusing_texts(self) -> Iterator[None]:
        """Within the block, evaluation calls (eval mode, no gradient) on the same text
        tensors do their text-only work once (:class:`seps.core.chunking.TextReuse`): the
        similarities are the same to the bit. The caller must not change the tensors
        in place meanwhile (their version counters are checked as well)."""
        outer, self._reuse = self._reuse, TextReuse()
        try:
            yield
        finally:
            self._reuse = outer

    def _reusing(self) -> TextReuse | None:
        """The active memo when this call may use it (evaluation only)."""
        if self._reuse is None or self.training or torch.is_grad_enabled():
            return None
        return self._reuse

    @property
    def impl(self) -> str:
        """Name of the kernel implementation in use (see ``impl`` above)."""
        return self._impl

    @impl.setter
    def impl(self, name: str) -> None:
        self._kernel = get_kernel(name)  # raises ValueError naming the allowed values
        self._impl = name

    @property
    def kernel(self) -> Kernel:
        """The :class:`seps.core.kernels.Kernel` behind :attr:`impl`."""
        return self._kernel

    # ----------------------------------------------------------------- forward
    def forward(
        self,
        img_embs: Tensor,
        cap_embs: Tensor,
        cap_lens: Tensor,
        long_cap_embs: Tensor | None = None,
        long_cap_lens: Tensor | None = None,
        *,
        dense_per_image: bool = False,
        selection_prior: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Similarities of every image with every text.

        img_embs: ``(B_v, L_v, C)``, ``[CLS]`` first when ``L_v`` is not a square;
        cap_embs ``(B_t, L_s, C)`` with ``cap_lens (B_t,)``;
        long_cap_embs ``(B_t, L_d, C)`` with ``long_cap_lens (B_t,)``: the dense
        caption paired with each text (needed unless ``dense_fusion='none'``).

        ``dense_per_image=True``: ``long_cap_embs (B_v, L_d, C)`` and ``long_cap_lens
        (B_v,)`` hold one dense caption per *image*, and pair ``(v, t)`` uses image
        ``v``'s (the ``candidate`` protocol, SPEC.md "Inputs" applied per image). The
        result equals one call per image with its caption expanded over the texts
        (:func:`per_image_calls`, which the ``loop`` implementation runs), with the
        per-image work (its caption's guidance, selection and, where the dense branch
        reads nothing else, its alignment) done once per image instead of per text.

        ``selection_prior (B_v, B_t, N)``: required by, and only by, the selection
        controls (``config.selection`` ``random`` or ``oracle``, :mod:`seps.train.controls`):
        every branch keeps, of each pair, as many patches as its decision keeps, those of
        the highest :func:`seps.core.selection.control_score` (the prior; under ``oracle`` with
        the learned score as tie-break). The learned score still weights the extra token
        and the straight-through part of D. ``learned`` (the default) runs exactly the
        head of SPEC.md.
        """
        check_inputs(
            self.config, img_embs, cap_embs, cap_lens, long_cap_embs, long_cap_lens, dense_per_image
        )
        check_prior(self.config, selection_prior, img_embs, cap_embs, self.kernel.reference)
        if not self.config.uses_dense:
            long_cap_embs = long_cap_lens = None
        inputs = (img_embs, cap_embs, cap_lens, long_cap_embs, long_cap_lens)
        if self.kernel.reference:
            if dense_per_image and long_cap_embs is not None:
                return per_image_calls(functools.partial(loop_forward, self), *inputs)
            return loop_forward(self, *inputs)
        return self.batched_forward(
            *inputs, dense_per_image=dense_per_image, selection_prior=selection_prior
        )

    def batched_forward(
        self,
        img_embs: Tensor,
        cap_embs: Tensor,
        cap_lens: Tensor,
        long_cap_embs: Tensor | None,
        long_cap_lens: Tensor | None,
        dense_per_image: bool = False,
        selection_prior: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """The batched implementation (every ``impl`` but ``loop``, with its op set).

        Per-image work is done once per image: ``xn``, ``s_im``, the score predictor,
        the aggregation logits and ``E = exp(scale * logits - shift)``, the Gram
        matrix ``x x^T`` and ``[CLS]``. The selections are computed for blocks of
        images against all texts; the alignment loop then runs over images and, for
        each, over chunks of texts, so that every per-pair step is a GEMM or a batched
        matrix product over the texts of the chunk with the image's tensors shared
        (``(B_t * M, C) @ (C, N)``, ``(B_t * N_c, N) @ (N, C)``); or a block of images
        per call (:func:`seps.core.head_steps.block_mode`).

        Repeated dense captions: the official loader repeats each image's dense
        caption for its 5 captions (SPEC.md "Inputs"). Where the dense branch depends
        on the text only through its dense caption (``scoring='code'`` or
        ``dense_fusion='dense_only'``, an alignment against the dense words only),
        evaluation without gradient computes that branch once per run of identical
        consecutive dense captions and repeats the result. Training never does this
        (each pair has its own Gumbel draws, and the dense embeddings' gradients must
        stay per row). Dense captions given per image (``dense_per_image``) are one run
        per image: that branch is computed once per image.
        """
        cfg = self.config
        st = self._image_state(img_embs)
        b_v, n = st.x.shape[:2]
        b_t = cap_embs.shape[0]
        texts = {"sparse": self._text(cap_embs, cap_lens)}
        if long_cap_embs is not None and long_cap_lens is not None:
            texts["dense"] = (
                TextBatch(long_cap_embs, long_cap_lens, per_image=True)
                if dense_per_image
                else self._text(long_cap_embs, long_cap_lens)
            )
        noise = self._draw_noise(st.x, b_v, b_t, n, dense_per_image)
        mode = self._block_mode(n, st.x.device)
        units = self._units(texts, n, direct=mode == "all")
        runs = None
        # A selection prior is per text: no dense-caption deduplication.
        if (
            not self.training
            and not torch.is_grad_enabled()
            and "dense" in texts
            and selection_prior is None
        ):
            runs = (
                (torch.zeros(b_t, dtype=torch.long, device=st.x.device), None)
                if dense_per_image
                else dense_runs(texts["dense"])
            )
        if self.training:
            return self._run(st, texts, units, cfg.branches, noise, selection_prior)
        # Evaluation: each alignment unit on its own (the units of dual_branch read
        # disjoint selections), so that each orders the texts by its own caption
        # lengths (order_by_length) and its chunks carry little padding. Under paper
        # scoring both selections read both captions' guidance: one run computes it once.
        groups = [units] if cfg.scoring == "paper" else [[u] for u in units]
        sims: Tensor | None = None
        for group in groups:
            unit = group[0]
            if len(group) > 1:
                part = self._run(st, texts, group, cfg.branches, noise, selection_prior)
            elif runs is not None and self._dense_only_unit(unit):
                rep, first = runs
                dense = texts["dense"]
                uniq = {
                    "dense": dense
                    if first is None
                    else TextBatch(dense.raw[first], dense.lens[first])
                }
                part = self._run(st, uniq, [unit], unit.branches, noise)[:, rep]  # type: ignore[index]
            else:  # (a selection prior is per text: runs is None with one)
                part = self._run(st, texts, [unit], unit.branches, noise, selection_prior)
            sims = part if sims is None else sims + part  # type: ignore[operator]
        assert sims is not None
        return sims

    def _draw_noise(
        self, like: Tensor, b_v: int, b_t: int, n: int, per_image: bool
    ) -> dict[str, tuple[Tensor, ...]]:
        """The Gumbel draws of a training pass, for the whole batch so that chunking
        does not change them (none at evaluation). Per-image dense captions draw image
        by image, in the order that one call per image (:func:`per_image_calls`) draws."""
        if not self.training:
            return {b: () for b in self.selectors}
        if not per_image:
            return {b: sel.draw_noise((b_v, b_t, n), like) for b, sel in self.selectors.items()}
        draws = [
            {b: sel.draw_noise((1, b_t, n), like) for b, sel in self.selectors.items()}
            for _ in range(b_v)
        ]
        return {
            b: tuple(torch.cat(g) for g in zip(*(d[b] for d in draws), strict=True))
            for b in self.selectors
        }

    def _dense_only_unit(self, unit: Unit) -> bool:
        """Whether ``unit`` depends on a text only through its dense caption."""
        if unit.branches != ("dense",):
            return False
        return self.config.scoring == "code" or self.config.dense_fusion == "dense_only"

    def _image_state(self, img_embs: Tensor) -> ImageState:
        """The text-independent work, once per image (see :meth:`batched_forward`)."""
        cfg = self.config
        cls, x = split_cls_token(img_embs)  # x: (B_v, N, C)
        with torch.no_grad():
            xn = l2n(x)
            s_im = image_self_attention(x)
            # float64 guidance: identical top-K sets in every implementation (guide_scores).
            xn64 = xn.double()
        # SEPS code finding: the selection (and with it the patch path) has no gradient.
        x_sel = x.detach() if cfg.detach_selection else x
        with torch.set_grad_enabled(torch.is_grad_enabled() and not cfg.detach_selection):
            s_p = {b: sel.predict(x_sel) for b, sel in self.selectors.items()}
        exp_logits: dict[str, Tensor] = {}
        if self.aggregation is not None:
            agg = self.aggregation
            per_net: dict[str, Tensor] = {}
            for b in cfg.branches:
                # A shared network (row 3, code) gives both branches the same logits.
                net = agg.net_for(b)
                if net not in per_net:
                    per_net[net] = agg.exp_logits(agg.logits(x_sel, b))
                exp_logits[b] = per_net[net]
        cls_n = None if cls is None else l2n(cls)
        return ImageState(x, x_sel, xn, xn64, s_im, s_p, exp_logits, cls_n)

    def _run(
        self,
        st: ImageState,
        texts: dict[str, TextBatch],
        units: list[Unit],
        branches: tuple[str, ...],
        noise: dict[str, tuple[Tensor, ...]],
        prior: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Selections of ``branches`` and the similarities of ``units`` for every
        image and every text of ``texts``.

        The selections (steps 3-5) are computed for a block of images and all texts
        at once, ``(V, B_t, N)`` tensors, since they are small and elementwise; the
        alignment (steps 6-8) then runs per image and text chunk on views of them, or,
        for the units :func:`block_mode` blocks, per block of images and text chunk
        (:func:`align_images`).
        Views come from ``unbind``/``split``, whose backward is one stack per block,
        where indexing would zero-fill a block-sized gradient for every piece. At
        evaluation over several chunks the texts are taken in order of length
        (:func:`seps.core.chunking.order_by_length`) and the similarities returned in the
        callers' order.
        """
        ops = self.kernel.ops
        b_v, n = st.x.shape[:2]
        b_t = texts_per_image(texts)
        chunk = self.text_chunk_size or self._auto_chunk(n, texts, {u.words for u in units})
        chunk = math.ceil(b_t / math.ceil(b_t / chunk))  # equal chunks: no tiny last one
        inv = None
        # Training keeps the given order: its Gumbel draws and masks are indexed by text,
        # and so is a selection prior.
        if not self.training and chunk < b_t and prior is None:
            reuse = self._reusing()
            order = order_by_length if reuse is None else reuse.order
            ordered = order(texts, {u.words for u in units})
            if ordered is not None:
                texts, inv = ordered
        with torch.no_grad():
            glob = {k: self._global64(t) for k, t in texts.items() if k in self._guides(branches)}
        # A block of images per call for the units that allow it (align_block;
        # block_mode says where), the other units one image per call.
        aggregate = self.aggregation is not None
        in_blocks = blocked_units(self._block_mode(n, st.x.device), units, aggregate)
        per_image = [u for u in units if u not in in_blocks]
        gram_rows: tuple[Tensor, ...] = ()
        if any(u.gram is not False for u in per_image):
            gram_rows = self._gram_rows(st)
        cls_cols = {}
        if st.cls_n is not None:
            floats = int(self.memory_budget_mb * 2**20 / 4 / 8)
            for u in per_image:
                words = texts[u.words]
                cls_cols[u.words] = ClsColumns(words.norm, st.cls_n, floats, words.per_image)
        # About a dozen (V, B_t, N) tensors per branch live during a block.
        image_bytes = 48 * b_t * n * len(branches)
        block = max(1, min(b_v, int(self.memory_budget_mb * 2**20 / image_bytes)))
        img = ImageRows(st) if per_image else None
        out: list[Tensor] = []  # (V, B_t) similarities per block of images
        mask_blocks: dict[str, list[Tensor]] = {b: [] for b in branches}
        for v0 in range(0, b_v, block):
            vs = slice(v0, min(v0 + block, b_v))
            pv = None if prior is None else prior[vs]
            sel = self._select_block(vs, st, branches, glob, noise, ops, texts, b_t, pv)
            for b in branches:
                mask_blocks[b].append(sel[b][1])
            part = None
            if in_blocks:
                budget_mb = self.memory_budget_mb
                part = align_images(
                    self._align_block, vs, st, sel, texts, in_blocks, chunk, budget_mb
                )
            if per_image:
                assert img is not None
                align = self._align_unit
                rows = align_per_image(
                    align, per_image, vs, sel, chunk, img, texts, cls_cols, gram_rows, ops
                )
                part = rows if part is None else part + rows
            assert part is not None
            out.append(part)
        sims = torch.cat(out)
        if not self.training:
            return sims if inv is None else sims[:, inv]
        return sims, {b: torch.cat(m) for b, m in mask_blocks.items()}

    def _gram_rows(self, st: ImageState) -> tuple[Tensor, ...]:
        """The Gram matrix ``x x^T`` ``(N, N)`` of each image (per-image work)."""
        return torch.bmm(st.x_sel, st.x_sel.transpose(1, 2)).unbind(0)

    def _block_mode(self, n: int, device: torch.device) -> str:
        """:func:`seps.core.head_steps.block_mode` for this head (a method: tests force it)."""
        bp, on = self.block_patches, self.device_blocks
        return block_mode(n, device, self.impl, bp, on, self.training)

    def _units(self, texts: dict[str, TextBatch], n: int, direct: bool) -> list[Unit]:
        """The alignment units: one per branch, or one for ``fused`` (row 2); under
        ``auto`` all in the direct order where ``direct`` (images aligned in blocks)."""
        cfg = self.config
        n_c = cfg.num_aggregated
        c = cfg.embed_size
        if cfg.dense_fusion == "fused":
            groups = [("sparse", ("sparse", "dense"))]
        else:
            groups = [(b, (b,)) for b in cfg.branches]
        units = []
        for words, branches in groups:
            kept = self._kept(branches, n)
            gram: bool | None
            if self.aggregation is None or self.alignment_order != "auto":
                gram = self.aggregation is not None and self.alignment_order == "gram"
            elif direct:  # a GPU's blocks (block_mode)
                gram = False
            else:
                # The cheaper order for the shortest and for the longest caption: when
                # they differ, each chunk picks its own (chunks are cut to their longest).
                lens = texts[words].lens
                ends = (int(lens.min()), int(lens.max())) if lens.numel() else (1, 1)
                short, long = (use_gram(e, n, n_c, c, kept) for e in ends)
                gram = short if short == long else None
            units.append(Unit(words, branches, gram, kept))
        return units

    def _kept(self, branches: tuple[str, ...], n: int) -> int | None:
        """``K`` when the aggregation weights of the unit of ``branches`` take the
        compact form (:class:`seps.core.alignment.KeptWeights`), else ``None``: one branch
        whose hard top-K decision keeps the same ``K`` patches per pair with weight
        exactly 1 (``topk``, and ``gumbel_topk``, whose straight-through part reaches
        only the ratio loss)."""
        if len(branches) == 1 and self.config.decision in ("topk", "gumbel_topk"):
            return keep_count(n, self.config.sparse_ratio)
        return None

    def _auto_chunk(self, n: int, texts: dict[str, TextBatch], kinds: set[str]) -> int:
        """Texts per chunk (of one image) so that the per-chunk tensors stay small: on a
        CPU near :attr:`cache_budget_mb` (cache-sized), on a GPU up to
        ``memory_budget_mb`` (:func:`seps.core.chunking.auto_chunk_size`)."""
        cfg = self.config
        device = next(iter(texts.values())).raw.device
        budget = self.memory_budget_mb
        if device.type == "cpu":
            budget = min(budget, self.cache_budget_mb)
        return auto_chunk_size(n, texts, kinds, cfg.num_aggregated, cfg.embed_size, budget)

    def _text(self, embs: Tensor, lens: Tensor) -> TextBatch:
        reuse = self._reusing()
        return TextBatch(embs, lens) if reuse is None else reuse.text(embs, lens)

    def _global64(self, t: TextBatch) -> Tensor:
        reuse = self._reusing()
        if reuse is None or not reuse.owns(t):
            return global64(t)
        return reuse.get("global64", (t,), lambda: global64(t))

    def _guides(self, branches: tuple[str, ...]) -> set[str]:
        """Caption kinds whose global embedding the selections of ``branches`` read: each
        branch's own, and under paper scoring with both captions in the head the other
        one too (SPEC.md row 1's symmetric term)."""
        cfg = self.config
        kinds = set(branches)
        if cfg.scoring == "paper" and cfg.dense_fusion in ("dual_branch", "fused"):
            kinds |= {"sparse", "dense"}
        return kinds

    def _select_block(
        self,
        vs: slice,
        st: ImageState,
        branches: tuple[str, ...],
        glob: dict[str, Tensor],
        noise: dict[str, tuple[Tensor, ...]],
        ops: KernelOps,
        texts: dict[str, TextBatch],
        b_t: int,
        prior: Tensor | None = None,
    ) -> dict[str, Selection]:
        """Steps 3-5 for images ``vs`` and every text (:func:`seps.core.head_steps.select_block`).

        A method, so that instrumentation can wrap it per head (:mod:`seps.bench.flops`)."""
        return select_block(
            self.config, self.selectors, ops, vs, st, branches, glob, noise, texts, b_t, prior
        )

    def _align_unit(
        self,
        unit: Unit,
        v: int,
        sl: slice,
        img: ImageRows,
        sel: dict[str, Selection],
        texts: dict[str, TextBatch],
        cls_col: Tensor | None,
        gram: Tensor | None,
        ops: KernelOps,
    ) -> Tensor:
        """Steps 6-8 of one alignment unit for image ``v`` and texts ``sl``: ``(B_t,)``
        (:func:`seps.core.head_steps.align_unit`). A method for the same reason (tests spy on
        the units that :meth:`_run` aligns)."""
        aggregate = self.aggregation is not None
        return align_unit(
            self.config, aggregate, self.hrpa, ops, unit, v, sl, img, sel, texts, cls_col, gram
        )

    def _align_block(
        self,
        unit: Unit,
        vs: slice,
        sl: slice,
        st: ImageState,
        sel: dict[str, Selection],
        texts: dict[str, TextBatch],
    ) -> Tensor:
        """Steps 6-8 of one alignment unit for the images ``vs`` and texts ``sl`` at once:
        ``(V, B)`` (:func:`seps.core.head_steps.align_block`; a method as :meth:`_align_unit`)."""
        return align_block(self.hrpa, unit, vs, sl, st, sel, texts)


__all__ = ["SEPSHead", "has_cls_token"]
