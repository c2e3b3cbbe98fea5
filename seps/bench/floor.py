"""The product floor: how fast a call would be if only its matrix products took time.

A speed goal can be out of reach for two different reasons: the head does more work
than it must, or the work it must do cannot run faster on this device. The stage
profile (:mod:`seps.bench.stages`) shows where the time goes; this module bounds what
is left. :func:`record_products` lists every matrix product a call makes (through a
``TorchDispatchMode``, so products inside library code and the backward pass count
too), and :func:`product_floor` times each distinct product bare, at its own shapes, on
fresh contiguous operands, and adds them up. Nothing else the call does (gathers,
top-K, maxima, softmax, Python) is counted, only the products and their outputs'
allocation, and bare operands are warm in cache, so the floor is optimistic for these
products at these shapes run one after another with the device's library. A goal whose
time is below the floor needs fewer FLOPs (SPEC.md's minimum:
``seps.bench.flops.spec_min_flops``), the same FLOPs in fewer and larger products, a
faster product kernel at these shapes, or (on CUDA) products run concurrently.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

#: The product ops that are recorded, by the name a :class:`Product` carries.
PRODUCT_OPS: dict[Any, str] = {
    aten.mm.default: "mm",
    aten.bmm.default: "bmm",
    aten.addmm.default: "addmm",
    aten.baddbmm.default: "baddbmm",
}


@dataclass(frozen=True, order=True)
class Product:
    """One matrix product: its op name, the shapes of its tensor operands in call order
    (``addmm`` and ``baddbmm`` start with the addend) and the operands' dtype."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    #: keyword arguments of the call (``beta``, ``alpha``), sorted
    kwargs: tuple[tuple[str, float], ...] = ()

    @property
    def flops(self) -> int:
        """``2 m k n`` (times the batch for ``bmm``/``baddbmm``): one multiply and one
        add per term, as ``torch.utils.flop_counter`` counts them."""
        a, b = self.shapes[-2:]
        batch = a[0] if len(a) == 3 else 1
        return 2 * batch * a[-2] * a[-1] * b[-1]

    def operands(self, device: str | torch.device) -> list[torch.Tensor]:
        """Fresh contiguous random operands of the recorded shapes."""
        dt = getattr(torch, self.dtype.removeprefix("torch."))
        return [torch.randn(s, dtype=dt, device=device) for s in self.shapes]


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[Product] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        name = PRODUCT_OPS.get(func)
        if name is not None:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            shapes = tuple(tuple(t.shape) for t in tensors)
            kw = tuple(sorted((k, float(v)) for k, v in (kwargs or {}).items()))
            self.calls[Product(name, shapes, str(tensors[-1].dtype), kw)] += 1
        return func(*args, **(kwargs or {}))


def record_products(fn: Callable[[], Any]) -> Counter[Product]:
    """Every matrix product that one call of ``fn`` makes, with its count (backward
    passes that ``fn`` runs included)."""
    rec = _Recorder()
    with rec:
        fn()
    return rec.calls


def bare_seconds(
    product: Product, device: str | torch.device, repeats: int = 5, min_seconds: float = 2e-3
) -> float:
    """Seconds of one bare call of ``product`` on fresh contiguous operands: the best of
    ``repeats`` timings, each of enough calls to last about ``min_seconds`` (so that
    products of a few microseconds are not timer noise), after one warm-up."""
    ops = product.operands(device)
    kw = dict(product.kwargs)
    op = getattr(torch, product.op)

    def fn(*a: torch.Tensor) -> torch.Tensor:
        return op(*a, **kw)

    dev = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    fn(*ops)
    sync()
    t0 = time.perf_counter()
    fn(*ops)
    sync()
    once = max(time.perf_counter() - t0, 1e-7)
    iters = max(1, math.ceil(min_seconds / once))
    best = math.inf
    for _ in range(max(repeats, 1)):
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn(*ops)
        sync()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best


def product_floor(
    fn: Callable[[], Any], device: str | torch.device, repeats: int = 5
) -> dict[str, Any]:
    """The product floor of one call of ``fn`` (module docstring).

    Returns ``seconds`` (the sum over the call's products of their bare time),
    ``gflop`` (their FLOPs, in units of 1e9), ``gflop_s`` (the two's ratio: the rate the
    library reaches at these shapes), ``calls`` (products made) and ``distinct``
    (distinct products timed)."""
    calls = record_products(fn)
    seconds = sum(n * bare_seconds(p, device, repeats) for p, n in calls.items())
    flops = sum(n * p.flops for p, n in calls.items())
    return {
        "seconds": seconds,
        "gflop": flops / 1e9,
        "gflop_s": flops / seconds / 1e9 if seconds > 0 else None,
        "calls": sum(calls.values()),
        "distinct": len(calls),
    }


__all__ = ["PRODUCT_OPS", "Product", "bare_seconds", "product_floor", "record_products"]
