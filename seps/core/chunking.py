"""Text-side bookkeeping of the batched head: how the texts are held, cut and ordered.

:class:`seps.core.head.SEPSHead` aligns each image with one chunk of texts at a time (see
:meth:`seps.core.head.SEPSHead.batched_forward`). This module holds what that needs on the
text side, none of which changes a similarity:

- :class:`TextBatch`: one caption kind of the texts (raw words and lengths, with the
  normalised words and the mask computed on first use); each chunk is cut to its
  longest caption (:meth:`TextBatch.words_of`);
- :func:`auto_chunk_size`: the texts per chunk when ``text_chunk_size`` is ``None``;
- :func:`order_by_length`: the evaluation order of the texts (less padding per chunk)
  and the inverse permutation back to the callers' order;
- :func:`dense_runs`: the runs of identical consecutive dense captions, whose dense
  branch evaluation computes once per run;
- :class:`ClsColumns`: the ``[CLS]`` column of the patch-word scores, held for one
  block of images at a time;
- :class:`TextReuse`: the text-only work of one call kept for the next calls on the
  same texts (evaluation calls the head once per image shard and text shard).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import Tensor

from .alignment import cls_word_scores
from .selection import l2n, length_mask

__all__ = [
    "ClsColumns",
    "TextBatch",
    "TextReuse",
    "auto_chunk_size",
    "dense_runs",
    "is_fixed",
    "order_by_length",
    "texts_per_image",
]


class TextBatch:
    """One caption kind of a chunk of texts: ``raw (B_t, L, C)`` unnormalised words,
    ``lens (B_t,)``; ``norm`` (l2-normalised words) and ``mask (B_t, L)`` are computed
    on first use, so a caption kind that a call never aligns against costs nothing.

    ``per_image=True``: one caption per *image* instead, ``raw (B_v, L, C)``, which
    every text of the call pairs with (the ``candidate`` protocol's dense caption:
    pair ``(v, t)`` uses image ``v``'s). :meth:`rows` gives the words one image and
    a chunk of texts align against in either case.
    """

    def __init__(self, raw: Tensor, lens: Tensor, per_image: bool = False) -> None:
        self.raw = raw
        self.lens = lens
        self.per_image = per_image

    @functools.cached_property
    def norm(self) -> Tensor:
        return l2n(self.raw)

    @functools.cached_property
    def mask(self) -> Tensor:
        return length_mask(self.lens, self.raw.shape[1])

    @functools.cached_property
    def lens_list(self) -> list[int]:
        return self.lens.tolist()

    def words_of(self, v: int, sl: slice) -> int:
        """The longest length among the captions image ``v`` and the texts ``sl`` align
        against: the padding beyond it is cut."""
        return self.lens_list[v] if self.per_image else max(self.lens_list[sl])

    def rows(self, v: int, sl: slice, m: int) -> tuple[Tensor, Tensor]:
        """``(norm, mask)`` of the captions image ``v`` and the texts ``sl`` align
        against, cut to ``m`` words: ``(B, m, C)`` and ``(B, m)``; a per-image caption
        is expanded over the texts (a view: the same values as ``B`` copies)."""
        if not self.per_image:
            return self.norm[sl, :m], self.mask[sl, :m]
        b = sl.stop - sl.start
        return (
            self.norm[v : v + 1, :m].expand(b, -1, -1),
            self.mask[v : v + 1, :m].expand(b, -1),
        )


def texts_per_image(texts: dict[str, TextBatch]) -> int:
    """``B_t``, the texts each image is scored against: the rows of a per-text caption
    kind, or 1 when every kind is per image (a dense branch computed once per image)."""
    return next((t.raw.shape[0] for t in texts.values() if not t.per_image), 1)


def is_fixed(t: TextBatch) -> bool:
    """Whether ``t`` is the same for every text of the call (per image, or one caption
    expanded over the texts): it has no text order of its own."""
    return t.per_image or is_expanded(t)


def auto_chunk_size(
    n: int,
    texts: dict[str, TextBatch],
    kinds: set[str],
    num_aggregated: int,
    embed_size: int,
    budget_mb: float,
) -> int:
    """Texts per chunk (of one image) so that the per-chunk tensors stay within
    ``budget_mb``.

    The largest per-text tensors of one image are the aggregation weights
    ``(N_c, N)``, the aggregated tokens ``(N_c, C)`` and the patch-word products
    ``(M, N)`` / ``(M, L)``. A few MB per chunk keeps them in the CPU's caches
    (measured best near 64 texts for ViT-224 and C = 512, about 24 MB). Only the
    caption kinds ``kinds`` that the alignment units read count (the other kind's
    words never enter a GEMM).
    """
    n_c = max(num_aggregated, 1)
    c = embed_size
    words = sum(texts[k].raw.shape[1] for k in kinds)
    per_text = 2 * (n_c * n + n_c * c + n) + words * (n + n_c + 2)
    b_t = texts_per_image(texts)
    budget = budget_mb * 2**20 / 4
    return max(1, min(b_t, int(budget // max(per_text, 1))))


def order_by_length(
    texts: dict[str, TextBatch], kinds: set[str]
) -> tuple[dict[str, TextBatch], Tensor] | None:
    """The texts ordered by length for evaluation, and the inverse permutation that
    puts results back in the callers' order; ``None`` when already in order.

    Each chunk of texts is cut to its longest caption (:meth:`TextBatch.words_of`), so
    chunks of similar lengths carry less padding. With the real Flickr30K caption
    lengths (2 to 75 words, mean 13.6) the word GEMMs of a chunk in text order are
    padded to about 2.5 times the mean; ordered, the code preset evaluates 100
    images x 500 texts 17% faster on a 2-core CPU (5.6 vs 6.5 s). Every pair's value
    is computed by the same operations, only its chunk neighbours change. The key is
    the summed length of the caption kinds ``kinds`` that the alignment reads; a kind
    that is the same for every text (:func:`is_fixed`) adds a constant and is left out.
    """
    by = [k for k in sorted(kinds) if not is_fixed(texts[k])]
    if not by:  # ordered by constants only: already in order
        return None
    key = sum(texts[k].lens for k in by)
    perm = torch.sort(key, stable=True).indices  # type: ignore[union-attr]
    order = torch.arange(perm.shape[0], device=perm.device)
    if bool((perm == order).all()):
        return None
    inv = torch.empty_like(perm)
    inv[perm] = order
    # A caption that is the same for every text is the same in any order.
    permuted = {
        k: t if is_fixed(t) else TextBatch(t.raw[perm], t.lens[perm]) for k, t in texts.items()
    }
    return permuted, inv


def dense_runs(dense: TextBatch | None) -> tuple[Tensor, Tensor] | None:
    """Runs of identical consecutive dense captions: ``(rep, first)`` with ``first`` the
    index of each run's first text and ``rep[t]`` the run of text ``t``; ``None`` when
    no two consecutive dense captions are equal (nothing to save)."""
    if dense is None or dense.raw.shape[0] < 2:
        return None
    raw, lens = dense.raw, dense.lens
    if is_expanded(dense):
        # One caption expanded over every text: a single run, without comparing B_t copies.
        return torch.zeros(raw.shape[0], dtype=torch.long, device=raw.device), lens.new_zeros(
            1, dtype=torch.long
        )
    same = (raw[1:] == raw[:-1]).flatten(1).all(dim=1) & (lens[1:] == lens[:-1])
    if not bool(same.any()):
        return None
    new_run = torch.cat([same.new_ones(1), ~same])
    rep = torch.cumsum(new_run.long(), 0) - 1
    first = torch.nonzero(new_run).flatten()
    return rep, first


class ClsColumns:
    """The ``[CLS]`` column of ``S_pw`` (``<u_j, l2n(cls_v)>``) of one caption kind for
    every image, computed for a block of images and one text chunk at a time
    (:func:`seps.core.alignment.cls_word_scores`) as the image loop reaches it, so that at
    most ``block`` images' columns are held. Each chunk's words are cut to its longest
    caption first: the padding beyond it would cost products and is masked anyway."""

    def __init__(
        self, words: Tensor, cls_n: Tensor, budget_floats: int, per_image: bool = False
    ) -> None:
        self.words = words
        self.cls_n = cls_n
        self.per_image = per_image  # words (B_v, M, C): image v's own caption only
        b_t, m = words.shape[:2]
        self.block = max(1, min(cls_n.shape[0], budget_floats // max(b_t * m, 1)))
        self._start = -1
        self._cols: dict[tuple[int, int, int], tuple[Tensor, ...]] = {}

    def get(self, v: int, sl: slice, m: int | None = None) -> Tensor:
        """``(B, m)`` for image ``v`` and the texts ``sl``, words cut to ``m`` (all of
        them by default)."""
        m = self.words.shape[1] if m is None else m
        if self.per_image:
            # The one caption image v pairs with, as a one-text block of one image.
            col = cls_word_scores(self.words[v : v + 1, :m], self.cls_n[v : v + 1])[0]
            return col.expand(sl.stop - sl.start, -1)
        start = v - v % self.block
        if start != self._start:
            self._cols = {}
            self._start = start
        key = (sl.start, sl.stop, m)
        cols = self._cols.get(key)
        if cols is None:
            cols = cls_word_scores(self.words[sl, :m], self.cls_n[start : start + self.block])
            self._cols[key] = cols
        return cols[v - start]


def is_expanded(t: TextBatch) -> bool:
    """One caption expanded over every text (stride 0): the ``candidate`` protocol's
    dense caption of one image, cheap to handle whole and new in every call."""
    return t.raw.stride(0) == 0 and t.lens.stride(0) == 0


class TextReuse:
    """Text-only results of one head call, reused by later calls on the same texts.

    Why: evaluation calls the head once per image shard with the same sparse captions
    (under ``candidate`` only the per-image dense captions change), and each call
    repeated the text-only work: the ``TextBatch`` with its normalised words and mask,
    the order by length and its gathers, and ``text_global`` in float64. When the head
    was called once per image under ``candidate`` that was about 40% of a ``code``-preset
    call. Results are keyed by the identity and version counter of the
    tensors they were computed from, and those tensors are held here so that an
    identity is not reused while the memo lives: a hit returns the very object the
    first call computed, so every similarity is the same to the bit. Expanded and
    per-image captions are never keys: they change every call and cost little.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[Hashable, ...], tuple[tuple[Any, ...], Any]] = {}
        self._owned: set[int] = set()  # ids of the TextBatches made here (held by _memo)

    def owns(self, t: TextBatch) -> bool:
        """Whether ``t`` was made here, so that results keyed by it can be reused (a
        batch made elsewhere is likely new in every call: keying by it would only
        hold it)."""
        return id(t) in self._owned

    def get(self, tag: str, sources: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """``compute()``'s value for ``sources``, computed on the first call only."""
        key = (tag, *((id(o), getattr(o, "_version", None)) for o in sources))
        hit = self._memo.get(key)
        if hit is None:
            hit = (sources, compute())
            self._memo[key] = hit
        return hit[1]

    def text(self, embs: Tensor, lens: Tensor) -> TextBatch:
        """One ``TextBatch`` per pair of tensors (its cached ``norm`` and ``mask`` too)."""
        if embs.stride(0) == 0 and lens.stride(0) == 0:
            return TextBatch(embs, lens)
        t = self.get("text", (embs, lens), lambda: TextBatch(embs, lens))
        self._owned.add(id(t))
        return t

    def order(
        self, texts: dict[str, TextBatch], kinds: set[str]
    ) -> tuple[dict[str, TextBatch], Tensor] | None:
        """:func:`order_by_length`, reusing the permuted batches of the kept texts.

        A kind that is the same for every text (:func:`is_fixed`) adds the same length
        to every text, which leaves the stable order of the others unchanged; it is
        passed through as :func:`order_by_length` does.
        """
        kept = tuple(sorted(k for k, t in texts.items() if not is_fixed(t)))
        if not all(self.owns(texts[k]) for k in kept):
            return order_by_length(texts, kinds)
        by = kinds & set(kept)
        if not by:  # ordered by constants only: already in order
            return None
        tag = f"order:{','.join(sorted(by))}:{','.join(kept)}"
        done = self.get(
            tag,
            tuple(texts[k] for k in kept),
            lambda: order_by_length({k: texts[k] for k in kept}, by),
        )
        if done is None:
            return None
        permuted, inv = done
        self._owned.update(id(t) for t in permuted.values())
        return {k: permuted.get(k, t) for k, t in texts.items()}, inv
