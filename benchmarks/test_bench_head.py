"""Micro-benchmarks of the batched head (pytest-benchmark): ``tox -e bench``.

Evaluation shard of 32 images x 64 texts, ViT-224 geometry (196 patches + [CLS]),
C = 512, sparse captions of 14 words and dense captions of 100 words, on the
default device. The HRPA/TopK kernel suites and the latency report extend this.
"""

from __future__ import annotations

import pytest
import torch

from seps import SEPSHead, get_config

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(b_v: int = 32, b_t: int = 64, c: int = 512):
    g = torch.Generator().manual_seed(0)
    img = torch.randn(b_v, 197, c, generator=g)
    cap = torch.randn(b_t, 14, c, generator=g)
    long_cap = torch.randn(b_t, 100, c, generator=g)
    lens = torch.full((b_t,), 14)
    long_lens = torch.full((b_t,), 100)
    return [t.to(DEVICE) for t in (img, cap, lens, long_cap, long_lens)]


@pytest.mark.parametrize("preset", ["code", "paper", "laps"])
def test_head_eval_shard(benchmark, preset):
    head = SEPSHead(get_config(preset)).to(DEVICE).eval()
    inputs = _inputs()

    def run():
        with torch.no_grad():
            out = head(*inputs)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return out

    out = benchmark(run)
    assert out.shape == (32, 64)
    benchmark.extra_info["pairs"] = 32 * 64
    benchmark.extra_info["device"] = DEVICE
