"""What a record says about the machine and the pretrained weights behind its bits."""

from __future__ import annotations

import pandas as pd
import torch

from seps.provenance import (
    UNRECORDED_CPU,
    cpu_identity,
    cpu_label,
    pretrain_fingerprint,
)
from seps.report.records import machines_line

AMD = {
    "model": "AMD EPYC",
    "torch_capability": "AVX2",
    "numpy_dispatch": ["X86_V3"],
    "overrides": {},
}


def test_cpu_identity_names_this_machines_dispatch_levels_and_overrides(monkeypatch):
    cpu_identity.cache_clear()
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    try:
        cpu = cpu_identity()
    finally:
        cpu_identity.cache_clear()
    assert cpu["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    assert cpu["model"] and isinstance(cpu["numpy_dispatch"], list)
    assert cpu["overrides"] == {"MKL_CBWR": "AVX2"}


def test_cpu_label_is_one_line_with_its_overrides():
    assert cpu_label(AMD) == "AMD EPYC (torch AVX2, numpy X86_V3)"
    pinned = {**AMD, "overrides": {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}}
    assert cpu_label(pinned) == (
        "AMD EPYC (torch AVX2, numpy X86_V3; ATEN_CPU_CAPABILITY=avx2, MKL_CBWR=AVX2)"
    )
    assert cpu_label(None) == cpu_label({}) == UNRECORDED_CPU


def test_machines_line_counts_records_per_cpu_most_first():
    df = pd.DataFrame({"environment": [{"cpu": AMD}, {}, {"cpu": AMD}, None, {"cpu": AMD}]})
    line = machines_line(df)
    assert line.startswith(
        "Machines: AMD EPYC (torch AVX2, numpy X86_V3): 3 records; "
        "2 records made before the runner stamped the CPU. **Mixed machines** within a profile"
    )
    assert "pretrain_fingerprint" in line
    # Two machines in two profiles: nothing is paired across them.
    apart = pd.DataFrame({"environment": [{"cpu": AMD}, {}], "profile": ["smoke", "standard"]})
    assert "Mixed machines" not in machines_line(apart)
    one = machines_line(pd.DataFrame({"environment": [{"cpu": AMD}]}))
    assert one.startswith("Machines: AMD EPYC (torch AVX2, numpy X86_V3): 1 record. A rerun")


def test_pretrain_fingerprint_follows_the_weight_files_not_the_meta(tmp_path):
    (tmp_path / "text").mkdir()
    for name in ("vision.safetensors", "projections.safetensors", "text/model.safetensors"):
        (tmp_path / name).write_bytes(name.encode())
    first = pretrain_fingerprint(tmp_path)
    assert len(first) == 16 and int(first, 16) >= 0
    (tmp_path / "meta.json").write_text('{"train_seconds": 1}')
    assert pretrain_fingerprint(tmp_path) == first
    (tmp_path / "text" / "model.safetensors").write_bytes(b"other weights")
    assert pretrain_fingerprint(tmp_path) != first
    assert pretrain_fingerprint(None) is None
