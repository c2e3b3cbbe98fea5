"""Micro-benchmarks (pytest-benchmark) of the TopK and HRPA kernels and the whole head,
per implementation (``seps.core.kernels.IMPLEMENTATIONS``) and geometry: ``tox -e bench`` or
``seps-bench bench``.

Workloads come from :mod:`seps.bench` (real Flickr30K caption lengths when
``../shared/data/f30k/`` is present, else the stored histogram; dense captions shared
by 5 texts as in the official test loader). Sizes: evaluation shards of
``SEPS_BENCH_SHARD`` (default 128x1024 on CUDA, 16x128 on CPU, where the loop baseline
would take minutes per call at full size) and training batches of 32/64/128 pairs
(forward + backward). Unavailable implementations (triton without CUDA) are skipped
with their reason. On CUDA every call is synchronised; ``seps-bench bench --report``
times with CUDA events.
"""

from __future__ import annotations

import os

import pytest
import torch

from seps.bench import (
    GEOMETRIES,
    bench_config,
    eval_fn,
    hrpa_fn,
    make_head,
    make_inputs,
    topk_fn,
    train_fits,
    train_fn,
)
from seps.core.kernels import IMPLEMENTATIONS, unavailable_reason

DEVICE = os.environ.get("SEPS_BENCH_DEVICE", "cuda" if torch.cuda.is_available() else "cpu")
_DEFAULT_SHARD = "128x1024" if DEVICE.startswith("cuda") else "16x128"
B_V, B_T = (int(v) for v in os.environ.get("SEPS_BENCH_SHARD", _DEFAULT_SHARD).split("x"))
TRAIN_BATCHES = (32, 64, 128)


def _sync(fn):
    def run():
        out = fn()
        if DEVICE.startswith("cuda"):
            torch.cuda.synchronize()
        return out

    return run


def _setup(impl: str, geometry: str, b_v: int = B_V, b_t: int = B_T):
    reason = unavailable_reason(impl, DEVICE)
    if reason is not None:
        pytest.skip(reason)
    head = make_head(bench_config("code", geometry), impl, DEVICE)
    return head, make_inputs(geometry, b_v, b_t, device=DEVICE, dense_repeat=5)


def _rounds(impl: str) -> dict:
    # The loop baseline is slow: one timed round after the warm-up is enough.
    return {"rounds": 1 if impl == "loop" else 3, "iterations": 1, "warmup_rounds": 1}


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_topk(benchmark, impl: str, geometry: str) -> None:
    head, inputs = _setup(impl, geometry)
    benchmark.extra_info.update(pairs=B_V * B_T, device=DEVICE, kernel="topk")
    benchmark.pedantic(_sync(topk_fn(head, inputs, impl)), **_rounds(impl))


@pytest.mark.parametrize("words", ["sparse", "dense"])
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_hrpa(benchmark, impl: str, geometry: str, words: str) -> None:
    head, inputs = _setup(impl, geometry)
    benchmark.extra_info.update(pairs=B_V * B_T, device=DEVICE, kernel=f"hrpa-{words}")
    benchmark.pedantic(_sync(hrpa_fn(head, inputs, impl, words)), **_rounds(impl))


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_head_eval_shard(benchmark, impl: str, geometry: str) -> None:
    head, inputs = _setup(impl, geometry)
    benchmark.extra_info.update(pairs=B_V * B_T, device=DEVICE, kernel="head-eval")
    out = benchmark.pedantic(_sync(eval_fn(head, inputs)), **_rounds(impl))
    assert out.shape == (B_V, B_T)


@pytest.mark.parametrize("batch", TRAIN_BATCHES)
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_head_train_step(benchmark, impl: str, geometry: str, batch: int) -> None:
    if not train_fits(impl, geometry, batch, 512, DEVICE):
        pytest.skip(f"{impl} train B={batch} {geometry}: estimated memory > 50% of RAM")
    head, inputs = _setup(impl, geometry, batch, batch)
    benchmark.extra_info.update(pairs=batch * batch, device=DEVICE, kernel="head-train")
    benchmark.pedantic(_sync(train_fn(head, inputs)), **_rounds(impl))
