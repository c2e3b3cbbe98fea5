"""The code version stamped on run records, and the check that refuses mixed versions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import seps
import seps.version
from seps.version import (
    OPTIONAL_SOURCES,
    SOURCES,
    check_versions,
    code_version,
    source_hash,
)

PACKAGE = Path(seps.__file__).resolve().parent

#: Everything in ``seps/`` that is deliberately not hashed (see the comment on SOURCES).
NOT_HASHED = {
    "__init__.py",
    "__main__.py",
    "py.typed",
    "ablations.py",
    "faults.py",
    "interrupts.py",  # SIGTERM / Ctrl-C: where a run stops, not what it computes
    "formatting.py",
    "runner.py",
    "staleness.py",  # the runner's run / skip / stale decisions on stored records
    "twins.py",  # copies a record another matrix made for the same key, seed and version
    "machine_load.py",  # the load average while a run was timed: a fact, not a number
    "stats.py",
    "store.py",
    "version.py",
    "overrides.py",  # orchestration: --set lands in the configs, whose content is keyed
    "run_plan.py",  # the dry-run text
    "prebuild.py",  # orchestration: builds the pretraining cache before a run (seps.prebuild)
    "provenance.py",  # stamps the CPU and the pretraining's fingerprint on records
    "float_path.py",  # sets the CPU float path, which each record stamps (environment.cpu)
    "ratio_scale.py",  # prints weights; they count in run keys once copied into a matrix
    "data_fingerprint.py",  # run keys of official-layout data, not numbers
    "hub.py",  # whether the hub answers: where a tokenizer is read from, not what it does
    "lexical.py",  # BM25 text-only matcher of `seps-bench text-only`; no record stores it
    "bench/",
    "cli/",
    "report/",
}


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


BASE = {
    "config.py": b"A = 1\nB = 2\n",
    "train/loop.py": b"def train():\n    return 0\n",
    "data/lengths.json": b"[1, 2]\n",
}


def test_code_version_is_16_hex_digits_computed_once(tmp_path, monkeypatch):
    assert re.fullmatch(r"[0-9a-f]{16}", code_version())
    assert code_version() is code_version()
    # What it hashes: the package's SOURCES (shown on a fixed tree, since this checkout's
    # files may be edited while the tests run; the cached value stays as it is).
    monkeypatch.setattr(seps.version, "_PACKAGE_ROOT", _tree(tmp_path, BASE))
    assert code_version.__wrapped__() == source_hash(tmp_path, SOURCES)


def test_line_endings_do_not_change_the_version(tmp_path):
    unix = source_hash(_tree(tmp_path / "unix", BASE))
    crlf = {k: v.replace(b"\n", b"\r\n") for k, v in BASE.items()}
    assert source_hash(_tree(tmp_path / "windows", crlf)) == unix
    old_mac = {k: v.replace(b"\n", b"\r") for k, v in BASE.items()}
    assert source_hash(_tree(tmp_path / "mac", old_mac)) == unix


def test_a_change_in_a_hashed_module_or_package_file_changes_the_version(tmp_path):
    base = source_hash(_tree(tmp_path / "base", BASE))
    for rel in BASE:
        changed = {**BASE, rel: BASE[rel] + b"# edited\n"}
        assert source_hash(_tree(tmp_path / rel.replace("/", "_"), changed)) != base, rel


def test_moving_code_between_files_changes_the_version(tmp_path):
    base = source_hash(_tree(tmp_path / "base", BASE))
    moved = {**BASE, "train/loop.py": b"", "train/other.py": BASE["train/loop.py"]}
    assert source_hash(_tree(tmp_path / "moved", moved)) != base


def test_unlisted_modules_caches_and_hidden_files_do_not_change_the_version(tmp_path):
    base = source_hash(_tree(tmp_path / "base", BASE))
    noise = {
        **BASE,
        "runner.py": b"print('orchestration')\n",
        "report/render.py": b"x = 1\n",
        "train/__pycache__/loop.cpython-312.pyc": b"\0\1",
        "train/.loop.py.swp": b"editor",
        "data/notes.txt": b"not package code\n",
    }
    assert source_hash(_tree(tmp_path / "noise", noise)) == base


def test_version_does_not_depend_on_the_order_of_sources(tmp_path):
    root = _tree(tmp_path, BASE)
    assert source_hash(root, tuple(reversed(SOURCES))) == source_hash(root, SOURCES)


def test_pretrain_module_is_hashed_once_it_exists(tmp_path):
    base = source_hash(_tree(tmp_path / "base", BASE))
    top = source_hash(_tree(tmp_path / "top", {**BASE, "pretrain.py": b"def pretrain(): ...\n"}))
    inside = {**BASE, "train/pretrain.py": b"def pretrain(): ...\n"}
    assert len({base, top, source_hash(_tree(tmp_path / "inside", inside))}) == 3


def test_every_listed_source_exists_except_optional_ones():
    def exists(entry: str) -> bool:
        path = PACKAGE / entry.rstrip("/")
        return path.is_dir() if entry.endswith("/") else path.is_file()

    assert [s for s in SOURCES if s not in OPTIONAL_SOURCES and not exists(s)] == []


def test_every_seps_module_is_hashed_or_deliberately_left_out():
    entries = {
        f"{p.name}/" if p.is_dir() else p.name
        for p in PACKAGE.iterdir()
        if p.name != "__pycache__" and not p.name.startswith(".")
    }
    unclassified = entries - set(SOURCES) - NOT_HASHED
    assert unclassified == set(), "add them to seps.version.SOURCES or to NOT_HASHED here"
    assert not set(SOURCES) & NOT_HASHED


def test_one_version_passes_check_versions():
    check_versions(["abc", "abc"], allow_mixed=False, what="mini")
    check_versions([None, None], allow_mixed=False, what="mini")
    check_versions([], allow_mixed=False, what="mini")


def test_mixed_versions_are_refused_with_counts_and_the_ways_out():
    with pytest.raises(ValueError) as info:
        check_versions(["abc", None, "abc", "def"], allow_mixed=False, what="results/mini")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("results/mini: ")
    assert "3 code versions" in msg
    assert "abc (2), def (1), unversioned (1)" in msg  # most frequent first, then by name
    assert "--allow-mixed-versions" in msg and "--rerun-stale" in msg


def test_unversioned_records_beside_versioned_ones_are_mixed():
    with pytest.raises(ValueError, match=r"abc \(1\), unversioned \(1\)"):
        check_versions(["abc", None], allow_mixed=False, what="mini")


def test_allow_mixed_accepts_mixed_versions():
    check_versions(["abc", None, "def"], allow_mixed=True, what="mini")
