"""Interchangeable implementations of the head's hot paths (issue 5).

Every implementation computes exactly the forward pass of SPEC.md (the same
similarities within 1e-5 in float32, the same masks and gradients) with the
same parameters; they differ only in speed:

- ``loop``: a per-text Python loop that follows SPEC.md literally (sort all
  patches, gather the K kept tokens, run the aggregation MLP on them for every
  image-text pair); the baseline that the official code represents.
- ``batched``: the head's default, vectorised over texts with per-image work
  done once per image (:meth:`seps.head.SEPSHead.batched_forward`).
- ``compiled``: ``batched`` with its elementwise/reduction hot paths (top-K mask
  and extra-token softmax, HRPA maxima) under ``torch.compile``.
- ``triton``: ``batched`` with fused Triton kernels for the top-K selection and
  the HRPA maxima; needs CUDA (or ``TRITON_INTERPRET=1`` for testing on CPU).

Select one with ``SEPSHead(config, impl=name)`` or ``head.impl = name``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..alignment import RowColFn, row_col_max
from ..selection import topk_mask, weighted_softmax

if TYPE_CHECKING:
    from ..head import SEPSHead

#: ``forward(head, img_embs, cap_embs, cap_lens, long_cap_embs, long_cap_lens)``
ForwardFn = Callable[..., Any]


@dataclass(frozen=True)
class KernelOps:
    """The hot-path functions the batched forward pass calls.

    topk_mask(score (..., N), k) -> 0/1 float mask of the k best (no gradient);
    extra_weights(score (..., N), drop_weight (..., N)) -> softmax over the dropped
        patches (SPEC.md step 5), differentiable in ``score`` and ``drop_weight``;
    row_col_max(s, col_scale, word_mask, token_mask) -> masked row and column maxima
        of the patch-word matrix (SPEC.md step 8), see :func:`seps.alignment.row_col_max`.
    """

    topk_mask: Callable[[Tensor, int], Tensor]
    extra_weights: Callable[[Tensor, Tensor], Tensor]
    row_col_max: RowColFn


TORCH_OPS = KernelOps(topk_mask, weighted_softmax, row_col_max)


@dataclass(frozen=True)
class Kernel:
    """One implementation: its name, a one-line description, the forward pass and
    the hot-path functions it plugs into the batched forward pass."""

    name: str
    description: str
    forward: ForwardFn
    ops: KernelOps = TORCH_OPS


def _batched_forward(head: SEPSHead, *inputs: Any) -> Any:
    return head.batched_forward(*inputs)


def _loop_kernel() -> Kernel:
    from .loop import loop_forward

    return Kernel("loop", "per-text loop following SPEC.md literally (baseline)", loop_forward)


def _batched_kernel() -> Kernel:
    return Kernel(
        "batched", "vectorised over texts, per-image work once (default)", _batched_forward
    )


def _compiled_kernel() -> Kernel:
    from .compiled import compiled_ops

    return Kernel(
        "compiled",
        "batched with its hot paths under torch.compile",
        _batched_forward,
        compiled_ops(),
    )


def _triton_kernel() -> Kernel:
    from .triton import triton_ops

    return Kernel(
        "triton", "batched with fused Triton kernels (top-K, HRPA)", _batched_forward, triton_ops()
    )


_FACTORIES: dict[str, Callable[[], Kernel]] = {
    "loop": _loop_kernel,
    "batched": _batched_kernel,
    "compiled": _compiled_kernel,
    "triton": _triton_kernel,
}

#: The implementation names, in benchmark order (``loop`` is the baseline).
IMPLEMENTATIONS: tuple[str, ...] = tuple(_FACTORIES)

_CACHE: dict[str, Kernel] = {}


def get_kernel(name: str) -> Kernel:
    """The :class:`Kernel` called ``name``; ``ValueError`` names the allowed values."""
    if name not in _FACTORIES:
        raise ValueError(f"impl: invalid value {name!r}; allowed: {', '.join(IMPLEMENTATIONS)}")
    if name not in _CACHE:
        _CACHE[name] = _FACTORIES[name]()
    return _CACHE[name]


def triton_interpret() -> bool:
    """Whether Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def unavailable_reason(name: str, device: str = "cpu") -> str | None:
    """Why implementation ``name`` cannot run on ``device`` (``None`` if it can).

    ``triton`` needs the ``triton`` package and a CUDA device (or the Triton CPU
    interpreter, ``TRITON_INTERPRET=1``, which is for testing only: it is slow).
    ``compiled`` needs ``torch.compile`` to work (a C++ compiler on CPU).
    """
    if name not in _FACTORIES:
        raise ValueError(f"impl: invalid value {name!r}; allowed: {', '.join(IMPLEMENTATIONS)}")
    if name == "triton":
        if importlib.util.find_spec("triton") is None:
            return "the triton package is not installed"
        if triton_interpret():
            return None
        if not str(device).startswith("cuda"):
            return (
                f"Triton kernels need a CUDA device (got {device!r}); "
                "set TRITON_INTERPRET=1 to run them in the (slow) CPU interpreter"
            )
        import torch

        if not torch.cuda.is_available():
            return "Triton kernels need CUDA, and torch.cuda.is_available() is False"
    return None


__all__ = [
    "IMPLEMENTATIONS",
    "TORCH_OPS",
    "Kernel",
    "KernelOps",
    "get_kernel",
    "triton_interpret",
    "unavailable_reason",
]
