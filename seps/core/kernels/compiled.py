"""``impl="compiled"``: the batched head with its hot paths under ``torch.compile``.

The GEMMs of the batched head already run in the BLAS library; what
``torch.compile`` can add is the fusion of the elementwise and reduction passes
around them, which the eager head runs as separate kernels over the same data:

- selection: the softmax over the dropped patches (``exp``, mask, sum, divide);
- HRPA: column scaling of the patch-word matrix, the word mask and the row and
  column maxima (:func:`seps.core.alignment.row_col_max`).

The functions are compiled with ``dynamic=True`` (the text chunk and caption
lengths vary) on first use; ``torch.compile`` failures (for instance no C++
compiler on a CPU-only machine) surface as the skip reason of
:func:`seps.core.kernels.unavailable_reason`.

On the CPU their C++ is generated without SIMD (Inductor's ``cpp.simdlen = 1``): with
torch 2.14.1, the vectorised code Inductor writes for ``weighted_softmax`` at symbolic
sizes on 2 threads is wrong in both ways tried. On the native float path (AVX-512)
it writes out of bounds: a ``laps`` or ``code`` training step at the ``standard`` sizes
(64 x 64 pairs, 36 patches) aborted the process within its first steps, and so did a
loop of calls at (4, 4, 36) (glibc's ``malloc_consolidate(): invalid chunk size``,
``double free or corruption`` or ``corrupted size vs. prev_size``, by run). With
``cpp.dynamic_threads`` that loop ran clean natively but returned wrong
weights in 39 to 40 of 40 calls per shape on the portable path (AVX2). Scalar C++ ran
clean and equal to the eager function on both paths. The fusion stays; only the SIMD
is lost on the CPU, and on CUDA Inductor writes Triton, which the option does not touch.
``tests/test_kernels.py::test_compiled_weighted_softmax_is_right_on_both_float_paths``
runs that loop in a child process per float path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ..alignment import row_col_max
from ..selection import topk_mask, weighted_softmax
from .base import KernelOps

#: Inductor options of every compiled hot path (why: the module docstring). The option
#: only changes the C++ of CPU kernels; CUDA kernels are generated as before.
OPTIONS: dict[str, Any] = {"cpp.simdlen": 1}


def _lazy_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compile ``fn`` on its first call (importing this module stays cheap)."""
    compiled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        if not compiled:
            compiled.append(torch.compile(fn, dynamic=True, fullgraph=True, options=OPTIONS))
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
