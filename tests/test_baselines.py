"""Tests of the pixel-free text-only matcher (seps.data.baselines)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seps.core.metrics import recall_at_k
from seps.data.baselines import content_words, text_only_sims
from seps.data.layout import load_split
from seps.data.synth import generate_synthetic

RED_STAR = (
    "The image shows two shapes. In the center, there is a large red star. "
    "On the left, a small blue ring can be seen."
)
SWAPPED = (
    "The image shows two shapes. In the center, there is a large red ring. "
    "On the left, a small blue star can be seen."
)
ONLY_STAR = "The image shows a single shape. In the center, there is a large red star."


def test_shape_range_and_purity() -> None:
    caps = ["A red star .", "A tiny blue ring on a gray dotted background .", "Something ."]
    dense = [RED_STAR, SWAPPED]
    sims = text_only_sims(caps, dense)
    assert sims.shape == (2, 3) and sims.dtype == torch.float64
    assert torch.equal(sims, text_only_sims(caps, dense))
    assert bool((sims >= 0).all()) and bool((sims < 1.002).all())
    assert bool((sims[:, 2] < 1e-5).all())  # no content word: only the tie-break jitter


def test_attributes_bind_to_their_object() -> None:
    sims = text_only_sims(["A red star .", "A small blue ring ."], [RED_STAR, SWAPPED])
    assert sims[0, 0] > sims[1, 0] and sims[0, 1] > sims[1, 1]


def test_synonyms_are_normalised() -> None:
    assert content_words("A tiny crimson star in the upper part , big dots .") == [
        "small",
        "star",
        "top",
        "large",
        "dotted",
    ]
    sims = text_only_sims(["A little blue ring ."], [RED_STAR, SWAPPED])
    assert sims[0, 0] > 0.99  # "little" found as "small"


def test_less_else_in_the_image_breaks_the_tie() -> None:
    sims = text_only_sims(["A red star ."], [RED_STAR, ONLY_STAR])
    assert sims[1, 0] > sims[0, 0]  # both contain it; the single-object image is likelier
    assert sims[1, 0] - sims[0, 0] < 0.002  # ... by a tie-break, not a full score


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> dict[float, Path]:
    """About 300 test images, without and with the default dense-caption noise."""
    base = tmp_path_factory.mktemp("baseline")
    kw = {"n_images": 310, "seed": 0, "image_size": 16, "splits": (0.01, 0.01, 0.98)}
    return {
        0.0: generate_synthetic(base / "clean", dense_noise=0.0, **kw),
        0.12: generate_synthetic(base / "noisy", **kw),
    }


def rsum(out: Path) -> float:
    split = load_split(out, "test", dense_per="image", check_images=False)
    assert split.n_images == 304
    return recall_at_k(text_only_sims(split.captions, split.dense), 5)["rsum"]


def test_text_only_matcher_is_far_above_chance_and_noise_lowers_it(gen) -> None:
    """Measured on seeds 0-5: rSum 511-519 without noise (chance is about 31 for 304
    images), 396-408 with the default noise, a drop of 108-115."""
    clean, noisy = rsum(gen[0.0]), rsum(gen[0.12])
    assert clean > 450
    assert clean - noisy > 75
