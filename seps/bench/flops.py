"""FLOPs of the batched head per stage and per pair, and the SPEC.md minimum.

Counts come from ``torch.utils.flop_counter`` (matrix products only: elementwise
work, maxima and top-K cost no FLOPs there), so they are deterministic and can be
measured on a loaded machine. :func:`stage_flops` attributes each product to the
stage of the head that ran it (:mod:`seps.bench.stages` says which function belongs
to which stage; :func:`seps.bench.stages.stage_seconds` times the same stages):

- ``image``: per-image work (``l2n``, ``s_im``, score predictor and aggregation MLP
  logits, the Gram matrix ``x x^T``); amortised over the texts, so not per pair;
- ``selection``: steps 3-5, the text-guided scores ``<g_t, xn>`` of every pair;
- ``[CLS] column``: ``<u_j, l2n(cls)>`` of every word and image;
- ``alignment``: steps 6-8, the aggregated tokens and the patch-word products;
- ``HRPA``: the relevance MLP of eq. (5) on the row and column top-k;
- ``other``: anything else the call ran (nothing, in the current head).

:func:`pair_flops` divides the per-pair stages by the pairs of the call, and
:func:`spec_min_flops` gives the products SPEC.md itself requires per pair, from the
shapes alone, for comparison.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from ..core.config import SEPSConfig, keep_count
from ..core.head import SEPSHead
from .stages import PER_IMAGE_STAGES, STAGES, instrument


class _StageCounter(FlopCounterMode):
    """``FlopCounterMode`` that also adds every counted product to the current stage."""

    def __init__(self) -> None:
        super().__init__(display=False)
        self.stages: list[str] = ["other"]
        self.by_stage: Counter[str] = Counter()

    def _count_flops(self, func_packet: Any, out: Any, args: Any, kwargs: Any) -> Any:
        before = self.get_total_flops()
        result = super()._count_flops(func_packet, out, args, kwargs)
        self.by_stage[self.stages[-1]] += self.get_total_flops() - before
        return result

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.stages.append(name)
        try:
            yield
        finally:
            self.stages.pop()

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self.stage(name):
                return fn(*args, **kwargs)

        return wrapped


def stage_flops(head: SEPSHead, inputs: list[Tensor], **kwargs: Any) -> dict[str, int]:
    """FLOPs of one evaluation forward pass of ``head`` on ``inputs``, by stage
    (:data:`STAGES`; see the module docstring). ``kwargs`` go to the head's call."""
    head.eval()
    counter = _StageCounter()
    with instrument(head, counter.wrap), torch.no_grad(), counter:
        head(*inputs, **kwargs)
    return {s: int(counter.by_stage.get(s, 0)) for s in STAGES}


def pair_flops(head: SEPSHead, inputs: list[Tensor], **kwargs: Any) -> dict[str, float]:
    """FLOPs per pair of one evaluation call, by stage, plus ``per_pair`` (the sum of
    the per-pair stages: what grows with ``B_v x B_t``), ``per_image`` (the image
    stage per image) and ``total`` (every FLOP of the call per pair)."""
    b_v, b_t = inputs[0].shape[0], inputs[1].shape[0]
    pairs = b_v * b_t
    counts = stage_flops(head, inputs, **kwargs)
    out: dict[str, float] = {s: counts[s] / pairs for s in STAGES if s not in PER_IMAGE_STAGES}
    out["per_pair"] = sum(out.values())
    out["per_image"] = sum(counts[s] for s in PER_IMAGE_STAGES) / b_v
    out["total"] = sum(counts.values()) / pairs
    return out


def spec_min_flops(
    cfg: SEPSConfig,
    *,
    has_cls: bool,
    sparse_words: float,
    dense_words: float,
    dense_share: int = 1,
) -> float:
    """FLOPs per pair of the products SPEC.md requires, from the shapes alone.

    Two FLOPs per multiply-add, ``N = cfg.num_patches``, ``K = ceil(N rho)``,
    ``N_c``, ``C``; ``sparse_words`` / ``dense_words``: the mean real words per
    caption (padding is not required work). Per pair:

    - step 3, each caption that guides a selection: ``<g_t, xn_n>``, ``N C``;
    - step 5, each selection: the extra token over the dropped patches, ``(N - K) C``;
    - step 6, each aggregation network's ``W V``: ``N_c K C`` (``fused`` aggregates
      both selections, row 3);
    - step 8, each alignment: ``S_pw = U T^T``, ``M L C`` with ``L`` the alignment
      tokens (``[CLS]``, ``N_c`` aggregated or the ``K`` selected ones per selection
      without aggregation, one extra token) and ``M`` the words it aligns against.

    ``dense_share``: texts that share one dense caption (5 in the official layout);
    work that depends on a text only through its dense caption (the dense branch
    under code scoring or ``dense_only``, as :meth:`SEPSHead.batched_forward` detects)
    is needed once per dense caption. Per-image and per-text work (MLP logits,
    ``s_im``, normalisation), the relevance MLP of eq. (5) (about 100 FLOPs) and the
    min-max/softmax/max passes are left out: they are not products per pair.

    The gram order of :mod:`seps.core.alignment` reorders these products and needs fewer
    than this for short captions, so the head may count below the minimum.
    """
    n, c, n_c = cfg.num_patches, cfg.embed_size, cfg.num_aggregated
    k = keep_count(n, cfg.sparse_ratio)
    words = {"sparse": sparse_words, "dense": dense_words}
    aggregate = cfg.aggregation != "none"

    def shared(branches: tuple[str, ...]) -> int:
        """Texts sharing the work of a unit or selection on ``branches``."""
        only_dense = branches == ("dense",)
        if only_dense and (cfg.scoring == "code" or cfg.dense_fusion == "dense_only"):
            return dense_share
        return 1

    macs = 0.0
    guides = set(cfg.branches)
    if cfg.scoring == "paper" and cfg.dense_fusion in ("dual_branch", "fused"):
        guides = {"sparse", "dense"}  # row 1's symmetric term reads both captions
    for g in guides:
        macs += n * c / shared((g,))
    for b in cfg.branches:
        macs += (n - k) * c / shared((b,))
    units = (
        [("sparse", cfg.branches)]
        if cfg.dense_fusion == "fused"
        else [(b, (b,)) for b in cfg.branches]
    )
    for unit_words, branches in units:
        body = n_c if aggregate else k * len(branches)
        tokens = body + 1 + int(has_cls)
        agg = n_c * k * c * len(branches) if aggregate else 0.0
        macs += (agg + words[unit_words] * tokens * c) / shared(branches)
    return 2.0 * macs


__all__ = [
    "PER_IMAGE_STAGES",
    "STAGES",
    "pair_flops",
    "spec_min_flops",
    "stage_flops",
]
