"""Fixtures shared by the test modules.

``synth``: one small synthetic dataset (60 images at 32 px, seed 0) in the official
layout, generated once per session; tests that damage data copy it first.

Markers: ``slow`` marks the end-to-end tests (subprocess matrices, kill-and-resume,
DDP, Ray, the smoke matrix); ``pytest -m "not slow"`` deselects them.
"""

from __future__ import annotations

import pytest

from seps.data.synth import generate_synthetic


@pytest.fixture(scope="session")
def synth(tmp_path_factory):
    path = tmp_path_factory.mktemp("synth")
    generate_synthetic(path, n_images=60, seed=0, image_size=32)
    return path
