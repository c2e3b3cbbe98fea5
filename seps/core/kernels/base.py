"""The op-set protocol shared by the kernel modules: :class:`KernelOps`, the torch op
set :data:`TORCH_OPS` and the Triton interpreter switch.

It sits below :mod:`seps.core.kernels` (the registry) and its op-set modules
(:mod:`seps.core.kernels.compiled`, :mod:`seps.core.kernels.triton`), so that these import it
without importing the registry that imports them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from ..alignment import RowColFn, row_col_max
from ..selection import topk_mask, weighted_softmax


@dataclass(frozen=True)
class KernelOps:
    """The hot-path functions the batched forward pass calls.

    topk_mask(score (..., N), k) -> 0/1 float mask of the k best (no gradient);
    extra_weights(score (..., N), drop_weight (..., N)) -> softmax over the dropped
        patches (SPEC.md step 5), differentiable in ``score`` and ``drop_weight``;
    row_col_max(s, col_scale, word_mask, token_mask) -> masked row and column maxima
        of the patch-word matrix (SPEC.md step 8), see :func:`seps.core.alignment.row_col_max`.
    """

    topk_mask: Callable[[Tensor, int], Tensor]
    extra_weights: Callable[[Tensor, Tensor], Tensor]
    row_col_max: RowColFn


#: The eager torch functions (``impl="batched"``).
TORCH_OPS = KernelOps(topk_mask, weighted_softmax, row_col_max)


def triton_interpret() -> bool:
    """Whether Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


__all__ = ["TORCH_OPS", "KernelOps", "triton_interpret"]
