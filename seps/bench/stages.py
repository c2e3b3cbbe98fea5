"""The stages of the batched head and their wall time.

Which function of the head belongs to which stage is written down once, in
:func:`stage_functions`; :func:`instrument` wraps each of them for the duration of a
``with`` block. Both the FLOP profile (:func:`seps.bench.flops.stage_flops`) and the
time profile (:func:`stage_seconds`) use it, so they attribute work the same way:

- ``image``: ``SEPSHead._image_state`` and ``SEPSHead._gram_rows`` (per-image work);
- ``selection``: ``SEPSHead._select_block`` (steps 3-5);
- ``[CLS] column``: :func:`seps.core.chunking.cls_word_scores`;
- ``alignment``: ``SEPSHead._align_unit`` (steps 6-8 of one alignment unit: the
  aggregation weights, the words of the chunk, the aggregated tokens and the patch-word
  products of :func:`seps.core.head_steps.patch_word_scores`), less the HRPA inside it, and
  ``SEPSHead._align_block``, the same for a block of images at once (its
  ``[CLS]`` column and its row and column maxima included);
- ``HRPA``: ``head.hrpa.reduce`` and ``head.hrpa.from_maxima`` (eq. (5) on the row and
  column maxima);
- ``other``: whatever the call runs outside these functions (in time: the loops over
  images and text chunks, the text batches, concatenations, Python overhead).
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
from torch import Tensor

from ..core import chunking, head_steps
from ..core.head import SEPSHead

#: Stages whose work is done once per image (not per pair).
PER_IMAGE_STAGES: tuple[str, ...] = ("image",)
#: Every stage, in report order.
STAGES: tuple[str, ...] = ("image", "selection", "[CLS] column", "alignment", "HRPA", "other")

#: ``wrap(stage, fn)``: a function that runs ``fn`` as part of ``stage``.
Wrap = Callable[[str, Callable[..., Any]], Callable[..., Any]]


def stage_functions(head: SEPSHead) -> list[tuple[Any, str, str]]:
    """``(owner, attribute, stage)`` of every function :func:`instrument` wraps: the
    head's own methods, its HRPA's ``reduce`` and two module-level functions that the
    head looks up at call time."""
    return [
        (head, "_image_state", "image"),
        (head, "_gram_rows", "image"),
        (head, "_select_block", "selection"),
        (head, "_align_unit", "alignment"),
        (head, "_align_block", "alignment"),
        (head.hrpa, "reduce", "HRPA"),
        (head.hrpa, "from_maxima", "HRPA"),
        (head_steps, "patch_word_scores", "alignment"),
        (chunking, "cls_word_scores", "[CLS] column"),
    ]


@contextlib.contextmanager
def instrument(head: SEPSHead, wrap: Wrap) -> Iterator[None]:
    """Within the block, each function of :func:`stage_functions` is replaced by
    ``wrap(stage, fn)``; every one is restored on leaving it, also on an exception.
    Methods are patched on ``head`` (and ``head.hrpa``) only, not on their classes."""
    with contextlib.ExitStack() as stack:
        for owner, attr, stage in stage_functions(head):
            fn = getattr(owner, attr)
            stack.enter_context(mock.patch.object(owner, attr, wrap(stage, fn)))
        yield


class _StageTimer:
    """Exclusive wall time per stage: a stack of the open stages, each with the time its
    nested stages took, so that a stage's time leaves out theirs."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self.sync = sync
        self.open: list[list[float]] = []  # [start, nested seconds] per open stage
        self.seconds: Counter[str] = Counter()

    def wrap(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.sync()
            self.open.append([time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                start, nested = self.open.pop()
                spent = time.perf_counter() - start
                self.seconds[stage] += spent - nested
                if self.open:
                    self.open[-1][1] += spent

        return wrapped


def _on_cuda(inputs: list[Any]) -> bool:
    return any(isinstance(t, Tensor) and t.is_cuda for t in inputs)


def stage_seconds(
    head: SEPSHead, inputs: list[Tensor], *, repeats: int = 3, **kwargs: Any
) -> dict[str, float]:
    """Wall time (s) of one evaluation forward pass of ``head`` on ``inputs`` by stage.

    ``inputs``: the head's positional arguments, ``[img (B_v, N(+1), C), cap (B_t, L,
    C), cap_lens (B_t,), long_cap (B_t, L_d, C), long_lens (B_t,)]``, as
    :func:`seps.bench.workloads.make_inputs` builds them; ``kwargs`` go to the head's
    call. The head is put in eval mode and called without gradient: one untimed
    warm-up call, then ``repeats`` timed ones under :func:`instrument`.

    Returns every stage of :data:`STAGES` and ``total``, in seconds per call:

    - each stage's *exclusive* time, the median over the repeats: the time inside its
      functions less that of stages nested inside them (a stack of open stages), so
      no time is counted twice;
    - ``total``: the median over the repeats of the whole call;
    - ``other``: ``total`` less the stages, so that the stages and ``other`` add up to
      ``total`` (under heavy noise it may come out slightly negative).

    Timed with :func:`time.perf_counter`. When any input is on CUDA, every stage
    boundary (and the whole call) is bracketed by ``torch.cuda.synchronize()``, so
    the kernels a stage launches are counted in that stage; the synchronisations
    themselves keep the GPU from running ahead of the host, so the sum is somewhat
    slower than an unsynchronised call.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    sync = torch.cuda.synchronize if _on_cuda(inputs) else (lambda: None)
    head.eval()
    with torch.no_grad():
        head(*inputs, **kwargs)  # warm-up
        totals: list[float] = []
        per_stage: dict[str, list[float]] = {s: [] for s in STAGES if s != "other"}
        for _ in range(repeats):
            timer = _StageTimer(sync)
            with instrument(head, timer.wrap):
                sync()
                t0 = time.perf_counter()
                head(*inputs, **kwargs)
                sync()
                totals.append(time.perf_counter() - t0)
            for s, times in per_stage.items():
                times.append(timer.seconds.get(s, 0.0))
    out = {s: statistics.median(times) for s, times in per_stage.items()}
    total = statistics.median(totals)
    out["other"] = total - sum(out.values())
    return {**{s: out[s] for s in STAGES}, "total": total}


__all__ = [
    "PER_IMAGE_STAGES",
    "STAGES",
    "Wrap",
    "instrument",
    "stage_functions",
    "stage_seconds",
]
