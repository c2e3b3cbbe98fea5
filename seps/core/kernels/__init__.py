"""Interchangeable implementations of the head's hot paths (issue 5).

Every implementation computes exactly the forward pass of SPEC.md (the same
similarities within 1e-5 in float32, the same masks and gradients) with the
same parameters; they differ only in speed:

- ``loop``: the reference implementation, :func:`seps.core.reference.loop_forward`, a
  per-text Python loop that follows SPEC.md literally (sort all patches, gather
  the K kept tokens, run the aggregation MLP on them for every image-text pair);
  the baseline that the official code represents. It uses no op set.
- ``batched``: the head's default, vectorised over texts with per-image work
  done once per image (:meth:`seps.core.head.SEPSHead.batched_forward`), with the
  eager torch ops (:data:`TORCH_OPS`).
- ``compiled``: ``batched`` with its elementwise/reduction hot paths (top-K mask
  and extra-token softmax, HRPA maxima) under ``torch.compile``.
- ``triton``: ``batched`` with fused Triton kernels for the top-K selection and
  the HRPA maxima; needs CUDA (or ``TRITON_INTERPRET=1`` for testing on CPU).

This package holds the op sets (:class:`KernelOps`) and their registry only; the
forward passes live in :mod:`seps.core.head` (batched) and :mod:`seps.core.reference` (loop),
which pick theirs from the :class:`Kernel` of their ``impl``. Select one with
``SEPSHead(config, impl=name)`` or ``head.impl = name``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .base import TORCH_OPS, KernelOps, triton_interpret
from .compiled import compiled_ops


@dataclass(frozen=True)
class Kernel:
    """One implementation: its name, a one-line description and the op set it plugs
    into the batched forward pass; ``reference`` runs the reference per-text loop
    (:func:`seps.core.reference.loop_forward`) instead, which calls no op set."""

    name: str
    description: str
    ops: KernelOps = TORCH_OPS
    reference: bool = False


def _loop_kernel() -> Kernel:
    return Kernel("loop", "per-text loop following SPEC.md literally (baseline)", reference=True)


def _batched_kernel() -> Kernel:
    return Kernel("batched", "vectorised over texts, per-image work once (default)")


def _compiled_kernel() -> Kernel:
    return Kernel("compiled", "batched with its hot paths under torch.compile", compiled_ops())


def _triton_kernel() -> Kernel:
    # Lazy import of an optional heavy dependency (not a cycle): the triton package may
    # be missing, and TRITON_INTERPRET must be set before it is first imported.
    from .triton import triton_ops

    return Kernel("triton", "batched with fused Triton kernels (top-K, HRPA)", triton_ops())


_FACTORIES: dict[str, Callable[[], Kernel]] = {
    "loop": _loop_kernel,
    "batched": _batched_kernel,
    "compiled": _compiled_kernel,
    "triton": _triton_kernel,
}

#: The implementation names, in benchmark order (``loop`` is the baseline).
IMPLEMENTATIONS: tuple[str, ...] = tuple(_FACTORIES)

_CACHE: dict[str, Kernel] = {}


def _check_name(name: str) -> None:
    if name not in _FACTORIES:
        raise ValueError(f"impl: invalid value {name!r}; allowed: {', '.join(IMPLEMENTATIONS)}")


def get_kernel(name: str) -> Kernel:
    """The :class:`Kernel` called ``name``; ``ValueError`` names the allowed values."""
    _check_name(name)
    if name not in _CACHE:
        _CACHE[name] = _FACTORIES[name]()
    return _CACHE[name]


def unavailable_reason(name: str, device: str = "cpu") -> str | None:
    """Why implementation ``name`` cannot run on ``device`` (``None`` if it can).

    ``triton`` needs the ``triton`` package and a CUDA device (or the Triton CPU
    interpreter, ``TRITON_INTERPRET=1``, which is for testing only: it is slow).
    ``compiled`` needs ``torch.compile`` to work (a C++ compiler on CPU).
    """
    _check_name(name)
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
