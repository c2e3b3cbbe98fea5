"""What a record says about the machine and the pretrained weights behind its bits."""

from __future__ import annotations

import pandas as pd
import torch

from seps.experiments.provenance import (
    CPU_ENV_OVERRIDES,
    UNRECORDED_CPU,
    bits_key,
    cpu_identity,
    cpu_label,
    float_path_key,
    pretrain_fingerprint,
    record_bits_key,
    resume_warning,
)
from seps.report.records import machines_line
from seps.runtime.float_path import FLOAT_PATHS

AMD = {
    "model": "AMD EPYC",
    "torch_capability": "AVX2",
    "numpy_dispatch": ["X86_V3"],
    "overrides": {},
}


def test_cpu_identity_names_this_machines_dispatch_levels_and_overrides(monkeypatch):
    cpu_identity.cache_clear()
    for name in CPU_ENV_OVERRIDES:  # the test process has the default pin's variables
        monkeypatch.delenv(name, raising=False)
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


PINNED_OVERRIDES = {**FLOAT_PATHS["portable"], "SEPS_FLOAT_PATH": "portable"}


def test_a_pinned_float_path_is_one_word_in_the_label_and_ignores_the_cpu_model():
    amd = {**AMD, "overrides": PINNED_OVERRIDES}
    intel = {**amd, "model": "Intel Xeon"}
    assert cpu_label(amd) == "AMD EPYC (torch AVX2, numpy X86_V3; float path pinned to portable)"
    # Pinned: the same kernels on both vendors, so the same float path.
    assert float_path_key(amd) == float_path_key(intel)
    # Native: MKL picks its code by vendor and model, so the model counts.
    assert float_path_key(AMD) != float_path_key({**AMD, "model": "Intel Xeon"})
    assert float_path_key(AMD) != float_path_key(amd)
    assert float_path_key(None) is None
    # Asking for the native path is the same as not asking.
    native = {**AMD, "overrides": {"SEPS_FLOAT_PATH": "native"}}
    assert float_path_key(native) == float_path_key(AMD) and cpu_label(native) == cpu_label(AMD)


def test_a_bitwise_rerun_needs_the_same_cpu_model_even_on_a_pinned_float_path():
    """Pinned Intel and AMD runs share the kernels (one float path, so a pretraining build
    made on one is used on the other) but not the bits (docs/across-machines.md)."""
    amd = {**AMD, "overrides": PINNED_OVERRIDES}
    intel = {**amd, "model": "Intel Xeon"}
    assert float_path_key(amd) == float_path_key(intel)
    assert bits_key(amd) != bits_key(intel)
    assert bits_key(amd) == bits_key(dict(amd))
    assert bits_key(AMD) != bits_key(amd)  # native against pinned, one CPU
    assert bits_key(None) is None
    assert record_bits_key({"environment": {"cpu": intel}}) == bits_key(intel)
    assert record_bits_key({"environment": {}}) is None and record_bits_key({}) is None
    assert record_bits_key({"environment": None}) is None


def _record(cpu, fingerprint=None, recipe=None):
    return {
        "environment": {"cpu": cpu} if cpu else {},
        "pretrain_fingerprint": fingerprint,
        "train_config": {"pretrain": recipe},
    }


def test_resuming_beside_records_of_another_machine_says_so_in_one_line(monkeypatch):
    import seps.experiments.provenance as prov

    monkeypatch.setattr(prov, "cpu_identity", lambda: AMD)
    here = _record(AMD)
    assert resume_warning("results/m", [here, here], 3, None) is None
    assert resume_warning("results/m", [_record(None)], 0, None) is None  # nothing to run
    assert resume_warning("results/m", [], 3, None) is None
    line = resume_warning("results/m", [here, _record({**AMD, "model": "Intel"}), _record(None)],
                          2, None)  # fmt: skip
    assert line is not None and "\n" not in line
    assert line.startswith(
        "results/m: 2 runs to make here beside 3 records that may differ in machine: "
        "1 other, 1 not recorded. Paired differences"
    )
    # Pinned to one float path, another CPU model is still another machine.
    pinned = {**AMD, "overrides": PINNED_OVERRIDES}
    monkeypatch.setattr(prov, "cpu_identity", lambda: pinned)
    assert resume_warning("results/m", [_record(pinned)], 1, None) is None
    line = resume_warning("results/m", [_record({**pinned, "model": "Intel Xeon"})], 1, None)
    assert line is not None and "machine: 1 other, 0 not recorded" in line


def test_resuming_from_other_pretrained_weights_compares_records_of_the_same_recipe(
    monkeypatch, tmp_path
):
    import seps.experiments.provenance as prov

    monkeypatch.setattr(prov, "cpu_identity", lambda: AMD)
    monkeypatch.setattr(prov, "pretrained_dir", lambda name: tmp_path)
    monkeypatch.setattr(prov, "is_complete", lambda folder: True)
    monkeypatch.setattr(prov, "pretrain_fingerprint", lambda folder: "aaaa")
    same = _record(AMD, "aaaa", "synth-48")
    other = _record(AMD, "bbbb", "synth-48")
    unpretrained = _record(AMD, None, None)  # another recipe (none): not compared
    assert resume_warning("r", [same, unpretrained], 1, "synth-48") is None
    line = resume_warning("r", [same, other, _record(AMD, None, "synth-48")], 1, "synth-48")
    assert line is not None
    assert "pretrained weights: 1 other, 1 not recorded" in line and "machine:" not in line
