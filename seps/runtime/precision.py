"""Numeric precision of training: ``fp32``, ``bf16`` or ``fp16`` autocast, and the
float32 islands that hand-written autograd functions need under it.

``TrainConfig.precision`` takes ``auto`` (bf16 autocast on CUDA, as the official code's
``torch.cuda.amp`` training; float32 on the CPU), ``fp32``, ``bf16`` or ``fp16``. fp16
scales the loss (:func:`grad_scaler`) because its gradients underflow; bf16 has fp32's
exponent range and needs no scaler.

Why the islands: a ``torch.autograd.Function`` whose forward runs under autocast saves
low-precision tensors next to the float32 ones it was given, and its hand-written
backward (which runs outside autocast) then multiplies a bf16 gradient by a float32
saved tensor: "expected scalar type Float but found BFloat16". :func:`fp32_apply` runs
such a function in float32 with autocast off, as ``torch.amp.custom_fwd(cast_inputs=
torch.float32)`` does, but for whichever device type the inputs live on (``custom_fwd``
is bound to one device type at decoration time, and the suite's stand-in for CUDA mixed
precision is CPU autocast). Outside autocast it is a plain call: float32 results are the
same bits as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = ["PRECISIONS", "autocast", "fp32_apply", "grad_scaler", "resolve_precision"]

#: Values of ``TrainConfig.precision`` (and ``--precision``).
PRECISIONS = ("auto", "fp32", "bf16", "fp16")

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_precision(name: str, device: torch.device) -> str:
    """``fp32``, ``bf16`` or ``fp16``: ``auto`` is bf16 on CUDA and fp32 elsewhere."""
    if name not in PRECISIONS:
        raise ValueError(f"precision: invalid value {name!r}; expected {', '.join(PRECISIONS)}")
    if name == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return name


def autocast(name: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The autocast context of precision ``name`` on ``device`` (disabled for fp32)."""
    resolved = resolve_precision(name, device)
    if resolved == "fp32":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=_DTYPES[resolved])


def grad_scaler(name: str, device: torch.device) -> torch.amp.GradScaler:
    """A loss scaler, enabled for fp16 only (a disabled scaler is a pass-through)."""
    enabled = resolve_precision(name, device) == "fp16"
    return torch.amp.GradScaler(device.type, enabled=enabled)


def fp32_apply(apply: Callable[..., Any], *args: Any) -> Any:
    """``apply(*args)``, in float32 with autocast off when autocast is on for the device
    of the first tensor argument (floating tensors are cast to float32; the casts are
    differentiable, so gradients reach the inputs in their own dtype)."""
    device = next((a.device.type for a in args if isinstance(a, Tensor)), None)
    if device is None or not torch.is_autocast_enabled(device):
        return apply(*args)
    cast = [a.float() if isinstance(a, Tensor) and a.is_floating_point() else a for a in args]
    with torch.autocast(device, enabled=False):
        return apply(*cast)
