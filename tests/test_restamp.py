"""scripts/restamp-records.py: moving records from one code version to another."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from seps.io.store import atomic_write_json
from seps.versioning.version import VERSION_KEY, code_version

REPO = Path(__file__).resolve().parents[1]
OLD, NEW, OTHER = "a2365dae12e68f02", "0123456789abcdef", "9214d89c752dcaa9"


def _script():
    spec = importlib.util.spec_from_file_location("restamp", REPO / "scripts/restamp-records.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


restamp = _script()


def _committed() -> list[Path]:
    return sorted((REPO / "results").rglob("*-s[0-9]*.json"))


def _record(path: Path, version: str) -> Path:
    """A committed record stamped ``version``, written by the store at ``path``."""
    records = _committed()
    if not records:
        pytest.skip("no committed records")
    atomic_write_json(path, {**json.loads(records[0].read_text()), VERSION_KEY: version})
    return path


@pytest.fixture
def store(tmp_path):
    """A record of OLD, one of OTHER, a stale copy, a report, two work folder markers."""
    old = _record(tmp_path / "m" / "a-0123456789abcdef-s0.json", OLD)
    _record(tmp_path / "m" / "b-0123456789abcdef-s0.json", OTHER)
    shutil.copy(old, tmp_path / "m" / "a-0123456789abcdef-s0.stale.json")
    (tmp_path / "m.md").write_text(f"# m\n\nCode version: {OLD}.\n\nat {OLD} in prose\n")
    (tmp_path / "_work" / "k-s0").mkdir(parents=True)
    (tmp_path / "_work" / "k-s0" / "code_version").write_text(OLD + "\n")
    (tmp_path / "_work" / "k-s1").mkdir(parents=True)
    (tmp_path / "_work" / "k-s1" / "code_version").write_text(OTHER + "\n")
    return tmp_path, old.name


def test_every_committed_record_is_laid_out_as_the_store_writes_it():
    # What lets a re-stamp change one field and keep every other byte (the first record
    # of each folder: reading all of them takes seconds).
    firsts = {p.parent: p for p in reversed(_committed())}
    for path in firsts.values():
        text = path.read_text()
        assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n", path


def test_only_records_of_old_change_and_only_in_their_version_field(store):
    root, old_name = store
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert restamp.main([OLD, str(root), "--new", NEW]) == 0
    changed = {p for p, b in before.items() if p.read_bytes() != b}
    assert changed == {
        root / "m" / old_name,
        root / "m.md",
        root / "_work" / "k-s0" / "code_version",
    }
    new = (root / "m" / old_name).read_bytes()
    assert new == before[root / "m" / old_name].replace(
        f'"{VERSION_KEY}": "{OLD}"'.encode(), f'"{VERSION_KEY}": "{NEW}"'.encode()
    )
    assert (root / "m.md").read_text() == f"# m\n\nCode version: {NEW}.\n\nat {OLD} in prose\n"
    assert (root / "_work" / "k-s0" / "code_version").read_text() == NEW + "\n"


def test_a_restamped_record_is_what_the_store_would_write(tmp_path):
    record = json.loads(_record(tmp_path / "r.json", OLD).read_text())
    atomic_write_json(tmp_path / "a.json", record)
    atomic_write_json(tmp_path / "b.json", {**record, VERSION_KEY: NEW})
    text = (tmp_path / "a.json").read_text()
    assert restamp.restamp_record(text, OLD, NEW) == (tmp_path / "b.json").read_text()


def test_a_record_of_another_version_is_left_alone():
    assert restamp.restamp_record(json.dumps({VERSION_KEY: OTHER}, indent=2), OLD, NEW) is None


def test_a_record_not_laid_out_by_the_store_is_refused(tmp_path):
    (tmp_path / "m").mkdir()
    squeezed = tmp_path / "m" / "r-0123456789abcdef-s0.json"
    squeezed.write_text(json.dumps({VERSION_KEY: OLD, "x": 1}))
    assert restamp.main([OLD, str(tmp_path), "--new", NEW]) == 1
    assert json.loads(squeezed.read_text())[VERSION_KEY] == OLD


def test_new_defaults_to_this_code_and_dry_run_writes_nothing(store, capsys):
    root, old_name = store
    before = (root / "m" / old_name).read_bytes()
    assert restamp.main([OLD, str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would re-stamp 3 file(s) from {OLD} to {code_version()}" in out
    assert (root / "m" / old_name).read_bytes() == before
