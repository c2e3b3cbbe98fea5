"""Fixtures shared by the test modules.

``synth``: one small synthetic dataset (60 images at 32 px, seed 0) in the official
layout, generated once per session; tests that damage data copy it first.
``env``: the hand-written records of tests/report_records.py (matrix ``mini``) in a
results folder, with their ablation root and a reports folder.
``no_network``: the hub offline and every connection attempt refused and recorded (the
list it returns), for tests that must prove nothing is downloaded.
Every test: ``HF_HUB_DISABLE_PROGRESS_BARS`` restored afterwards (``--no-progress`` sets
it for worker processes; a test calling ``main`` must not change the next test's setting).

Before anything imports torch: the session pins the CPU float path as the command line
does (``seps.runtime.float_path.apply_requested``), so that in-process runs compute what
``seps-bench`` computes and the tests' bit-for-bit comparisons hold; ``import seps``
itself no longer does it. The kernels are then chosen at once, so that no test's change
to the environment can choose them.

Markers: ``slow`` marks the end-to-end tests (subprocess matrices, kill-and-resume,
DDP, Ray, the smoke matrix); ``pytest -m "not slow"`` deselects them.
"""

from __future__ import annotations

import os
import socket

from seps.runtime.float_path import apply_requested

apply_requested()  # before the imports below load torch

import pytest  # noqa: E402
import torch  # noqa: E402

# ATen picks its kernels (AVX2 or AVX512) at the first dispatch, not at import, reading
# ATEN_CPU_CAPABILITY then. A test that removes the variable for a moment (to read the
# machine's own levels) would otherwise fix the whole session on AVX512 when it happens to
# dispatch first, and later in-process runs would fail the float-path check.
torch.backends.cpu.get_cpu_capability()

from ablation_roots import make_ablation_root  # noqa: E402
from report_records import MATRIX_YAML, _store  # noqa: E402

from seps.data.synth import generate_synthetic  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_hub_progress_variable(monkeypatch):
    name = "HF_HUB_DISABLE_PROGRESS_BARS"
    if name in os.environ:
        monkeypatch.setenv(name, os.environ[name])
    else:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def synth(tmp_path_factory):
    path = tmp_path_factory.mktemp("synth")
    generate_synthetic(path, n_images=60, seed=0, image_size=32)
    return path


@pytest.fixture()
def env(tmp_path):
    """``{"root", "results", "reports"}``: an ablation root holding ``mini``, a results
    folder with its hand-written records (tests/report_records.py) and an empty reports
    folder."""
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX_YAML})
    results = tmp_path / "results"
    _store(results)
    return {"root": root, "results": results, "reports": tmp_path / "reports"}


@pytest.fixture()
def no_network(monkeypatch):
    import huggingface_hub.constants

    import seps.io.hub

    tries = []

    def refuse(*args, **kwargs):
        tries.append(args)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import; the suite's own hub check caches.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(seps.io.hub, "_hub_reachable_cache", [])
    return tries


@pytest.fixture()
def float_path(monkeypatch):
    """Set the float path the records of this test claim: ``float_path("native")`` or
    ``float_path("portable")``. The process keeps the kernels it loaded (they are read
    once, at import); what changes is what the runner checks and stamps."""
    from seps.experiments.provenance import CPU_ENV_OVERRIDES, cpu_identity
    from seps.runtime.float_path import ENV_VAR, FLOAT_PATHS

    def use(name: str) -> None:
        for var in CPU_ENV_OVERRIDES:
            monkeypatch.delenv(var, raising=False)
        for var, value in {ENV_VAR: name, **FLOAT_PATHS[name]}.items():
            monkeypatch.setenv(var, value)
        cpu_identity.cache_clear()

    yield use
    cpu_identity.cache_clear()
