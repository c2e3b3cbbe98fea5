"""SEPS_FLOAT_PATH: pinning the CPU kernels before torch loads, and refusing a pin that
did not take effect (seps.runtime.float_path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from seps.runtime.float_path import (
    ENV_VAR,
    FLOAT_PATHS,
    apply_requested,
    check_in_force,
    default_path,
    requested,
)

PIN = FLOAT_PATHS["portable"]


def test_unset_or_native_requests_nothing_and_an_unknown_name_is_refused():
    assert requested({}) == requested({ENV_VAR: ""}) == requested({ENV_VAR: "native"}) == "native"
    assert requested({ENV_VAR: " Portable "}) == "portable"
    with pytest.raises(ValueError, match=r"^environment variable SEPS_FLOAT_PATH: invalid value "
                       r"'avx9'; allowed: native, portable$"):  # fmt: skip
        requested({ENV_VAR: "avx9"})


def test_apply_sets_the_pins_variables_but_keeps_what_the_user_set():
    env = {ENV_VAR: "portable", "MKL_CBWR": "AVX2"}
    apply_requested(env)
    assert env["MKL_CBWR"] == "AVX2"  # the user's own value stays
    assert {k: env[k] for k in PIN if k != "MKL_CBWR"} == {
        k: v for k, v in PIN.items() if k != "MKL_CBWR"
    }
    native = {ENV_VAR: "native", "MKL_CBWR": "AUTO"}
    apply_requested(native)
    assert native == {ENV_VAR: "native", "MKL_CBWR": "AUTO"}
    bad = {ENV_VAR: "nope"}
    apply_requested(bad)  # reported later by check_in_force, where one line can be shown
    assert bad == {ENV_VAR: "nope"}


def test_unset_the_path_is_portable_on_x86_64_before_torch_loads_and_native_otherwise():
    assert default_path("x86_64", torch_imported=False) == "portable"
    assert default_path("AMD64", torch_imported=False) == "portable"
    assert default_path("aarch64", torch_imported=False) == "native"
    assert default_path("x86_64", torch_imported=True) == "native"
    # The decision is written into the environment, so worker processes inherit it.
    env: dict[str, str] = {ENV_VAR: " "}
    apply_requested(env)
    assert env[ENV_VAR] == default_path() == "native"  # this process imported torch
    assert env == {ENV_VAR: "native"}


def test_a_variable_that_contradicts_the_pin_is_named_with_the_value_expected():
    env = {ENV_VAR: "portable", **PIN, "MKL_CBWR": "AVX2"}
    with pytest.raises(ValueError, match=r"^SEPS_FLOAT_PATH=portable needs environment variable "
                       r"MKL_CBWR='COMPATIBLE,STRICT', found 'AVX2'; unset MKL_CBWR or "
                       r"SEPS_FLOAT_PATH$"):  # fmt: skip
        check_in_force(env)
    assert check_in_force({}) == "native"


def test_a_pin_that_torch_did_not_take_is_refused(monkeypatch):
    """torch imported before seps applied the pin (or a CPU without AVX2): the record
    would claim a float path it did not have."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    with pytest.raises(ValueError, match=r"torch runs its AVX512 kernels, expected AVX2"):
        check_in_force({ENV_VAR: "portable", **PIN})
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert check_in_force({ENV_VAR: "portable", **PIN}) == "portable"


@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
    reason="needs an x86-64 CPU with AVX2",
)
def test_pin_before_torch_pins_torch_mkl_onednn_and_numpy():
    """In a fresh process, as the command line does first thing (seps.cli.main): pin()
    sets the variables before torch reads them, so torch runs its AVX2 kernels even on
    an AVX-512 CPU."""
    code = (
        "import json, os, sys, seps.runtime.float_path\n"
        "assert seps.runtime.float_path.pin() == 'portable'\n"
        "import torch\n"
        "from seps.runtime.float_path import check_in_force\n"
        "names = sys.argv[1:]\n"
        "print(json.dumps({'cap': torch.backends.cpu.get_cpu_capability(),"
        " 'path': check_in_force(), 'env': {k: os.environ.get(k) for k in names}}))"
    )
    clean = {k: v for k, v in os.environ.items() if k not in PIN and k != ENV_VAR}
    # Asked for, and by default (unset): the command line's case.
    for env in (clean | {ENV_VAR: "portable"}, clean):
        out = subprocess.run(
            [sys.executable, "-c", code, *sorted(PIN)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        got = json.loads(out.stdout)
        assert got == {"cap": "AVX2", "path": "portable", "env": dict(sorted(PIN.items()))}
