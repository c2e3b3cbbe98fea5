"""Speed of the data side (pytest-benchmark; ``tox -e bench``): synthetic generation and
the recall computation at evaluation size. Budgets live here and in the README, not in
the test suite, whose timings a loaded machine would make fail.

README budgets: 5,000 synthetic images well under a minute (so 500 in a few seconds);
recall@K of a 2,000 x 10,000 similarity matrix (COCO 5K-sized rows) in about a second.
"""

from __future__ import annotations

import numpy as np
import pytest

from seps.core.metrics import recall_at_k
from seps.data.synth import generate_synthetic


def test_generate_500_synthetic_images(benchmark, tmp_path):
    counter = iter(range(10**6))
    out = benchmark.pedantic(
        lambda: generate_synthetic(tmp_path / f"s{next(counter)}", n_images=500, seed=2),
        rounds=3,
        iterations=1,
    )
    assert (out / "train_caps.txt").is_file()


@pytest.fixture(scope="module")
def sims_2000x10000() -> np.ndarray:
    rng = np.random.default_rng(5)
    s = rng.standard_normal((2000, 10000)).astype(np.float32)
    s[np.arange(2000)[:, None], np.arange(2000)[:, None] * 5 + np.arange(5)] += 2.0
    return s


def test_recall_at_k_2000x10000(benchmark, sims_2000x10000):
    m = benchmark(recall_at_k, sims_2000x10000)
    assert 0 < m["i2t_r1"] < 100
