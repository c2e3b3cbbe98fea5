"""The automatic text chunk of the batched head (SEPSHead._auto_chunk): cache-sized on
a CPU, sized by the memory budget elsewhere (a GPU: cache-sized chunks made the
1,000 x 5,000 evaluation launch-bound, 90 s against 10 s on an H200, reports/gpu)."""

from __future__ import annotations

import torch

from seps.core.chunking import TextBatch
from seps.core.config import get_config
from seps.core.head import SEPSHead

N_PATCHES, WORDS, C, TEXTS = 197, 20, 512, 5000


def _chunk(device: str, memory_budget_mb: float = 512.0) -> int:
    head = SEPSHead(get_config("code"), memory_budget_mb=memory_budget_mb)
    raw = torch.empty(TEXTS, WORDS, C, device=device)
    texts = {"sparse": TextBatch(raw, torch.full((TEXTS,), WORDS, device=device))}
    return head._auto_chunk(N_PATCHES, texts, {"sparse"})


def test_cpu_chunk_stays_cache_sized():
    assert 16 <= _chunk("cpu") <= 128  # about 64 texts at ViT-224, C = 512


def test_cpu_chunk_does_not_grow_with_the_memory_budget():
    assert _chunk("cpu", 4096.0) == _chunk("cpu")


def test_non_cpu_chunk_uses_the_memory_budget():
    # the meta device stands in for a GPU: no CUDA needed, the sizing is the same
    assert _chunk("meta") >= 10 * _chunk("cpu")
    assert _chunk("meta", 64.0) < _chunk("meta")


def test_cpu_chunk_never_exceeds_a_smaller_memory_budget():
    assert _chunk("cpu", 1.0) < _chunk("cpu")
