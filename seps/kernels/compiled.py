"""``impl="compiled"``: the batched head with its hot paths under ``torch.compile``.

The GEMMs of the batched head already run in the BLAS library; what
``torch.compile`` can add is the fusion of the elementwise and reduction passes
around them, which the eager head runs as separate kernels over the same data:

- selection: the softmax over the dropped patches (``exp``, mask, sum, divide);
- HRPA: column scaling of the patch-word matrix, the word mask and the row and
  column maxima (:func:`seps.alignment.row_col_max`).

The functions are compiled with ``dynamic=True`` (the text chunk and caption
lengths vary) on first use; ``torch.compile`` failures (for instance no C++
compiler on a CPU-only machine) surface as the skip reason of
:func:`seps.kernels.unavailable_reason`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ..alignment import row_col_max
from ..selection import topk_mask, weighted_softmax
from .base import KernelOps


def _lazy_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compile ``fn`` on its first call (importing this module stays cheap)."""
    compiled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        if not compiled:
            compiled.append(torch.compile(fn, dynamic=True, fullgraph=True))
        return compiled[0](*args)

    return wrapper


def compiled_ops() -> KernelOps:
    """The hot-path functions of ``impl="compiled"``."""
    return KernelOps(
        topk_mask=topk_mask,  # a library partial sort plus a scatter: nothing to fuse
        extra_weights=_lazy_compile(weighted_softmax),
        row_col_max=_lazy_compile(row_col_max),
    )


__all__ = ["compiled_ops"]
