"""The code version stamped on run records, and the check that refuses mixed versions."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import seps
import seps.versioning.version
from seps.versioning.code_closure import data_files, module_closure, modules
from seps.versioning.version import (
    ENTRY_MODULES,
    EXCLUDED_MODULES,
    behaviour_hash,
    check_versions,
    code_version,
    hashed_files,
    source_hash,
)

PACKAGE = Path(seps.__file__).resolve().parent

ENTRY = ("seps.train.loop",)

#: A small package: the training loop imports the model (relatively) and, lazily, the
#: store (excluded); the model names a data file; ``report`` is outside the closure.
BASE = {
    "__init__.py": b'"""The package."""\n',
    "train/__init__.py": b"",
    "train/loop.py": (
        b'"""The loop."""\n'
        b"from ..model import forward\n"
        b"\n"
        b"\n"
        b"def train(x):\n"
        b'    """Train once."""\n'
        b"    # twice the input, plus one\n"
        b"    from .. import store\n"
        b"\n"
        b"    store.write(x)\n"
        b"    return forward(x) + 1\n"
    ),
    "model.py": b'LENGTHS = "lengths.json"\n\n\ndef forward(x):\n    return x * 2\n',
    "store.py": b"def write(x):\n    return None\n",
    "report.py": b"from .model import forward\n\nX = forward(3)\n",
    "data/lengths.json": b"[1, 2]\n",
    "data/notes.txt": b"read by no module\n",
}


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    """Write ``files`` as a package folder named ``seps`` under ``root``; return it."""
    pkg = root / "seps"
    for rel, data in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_bytes(data)
    return pkg


def _version(root: Path, files: dict[str, bytes]) -> str:
    return behaviour_hash(_tree(root, files), ENTRY, ("seps.store",))


def _edited(rel: str, old: bytes, new: bytes) -> dict[str, bytes]:
    assert old in BASE[rel], (rel, old)
    return {**BASE, rel: BASE[rel].replace(old, new)}


@pytest.fixture
def base(tmp_path):
    return _version(tmp_path / "base", BASE)


def test_code_version_is_16_hex_digits_computed_once(tmp_path, monkeypatch):
    assert re.fullmatch(r"[0-9a-f]{16}", code_version())
    assert code_version() is code_version()
    # What it hashes: the behaviour of the package's training path (shown on a fixed
    # tree, since this checkout may be edited while the tests run).
    root = _tree(
        tmp_path,
        {
            **BASE,
            "data/__init__.py": b"",
            "data/baselines.py": b"",
            "train/evaluation.py": b"",
            "train/pretrain.py": b"",
        },
    )
    monkeypatch.setattr(seps.versioning.version, "_PACKAGE_ROOT", root)
    assert code_version.__wrapped__() == behaviour_hash(root)


@pytest.mark.parametrize(
    ("rel", "old", "new"),
    [
        ("train/loop.py", b"# twice the input, plus one", b"# an edited comment"),
        ("train/loop.py", b'"""Train once."""', b'"""Train once, documented anew."""'),
        ("train/loop.py", b'"""The loop."""\n', b""),
        ("model.py", b"    return x * 2\n", b"    return x * 2  # why: doubled\n"),
        ("__init__.py", b'"""The package."""', b'"""The package, told otherwise."""'),
    ],
    ids=["comment", "docstring", "module-docstring", "trailing-comment", "package-docstring"],
)
def test_editing_a_comment_or_a_docstring_keeps_the_version(tmp_path, base, rel, old, new):
    assert _version(tmp_path, _edited(rel, old, new)) == base


def test_moving_code_to_other_lines_keeps_the_version(tmp_path, base):
    moved = _edited("train/loop.py", b'"""The loop."""\n', b"\n\n\n# a header\n\n")
    assert _version(tmp_path, moved) == base


@pytest.mark.parametrize(
    ("rel", "old", "new"),
    [
        ("model.py", b"x * 2", b"x * 3"),
        ("train/loop.py", b"forward(x) + 1", b"forward(x) - 1"),
        ("train/loop.py", b"    store.write(x)\n", b"    store.write(x)\n    x = -x\n"),
        ("__init__.py", b'"""The package."""\n', b"import os\n"),
    ],
    ids=["module", "entry", "new-statement", "package-init"],
)
def test_changing_an_expression_changes_the_version(tmp_path, base, rel, old, new):
    assert _version(tmp_path, _edited(rel, old, new)) != base


def test_adding_a_module_imported_from_the_training_path_changes_the_version(tmp_path, base):
    new_module = {**BASE, "noise.py": b"def noise(x):\n    return x + 0.5\n"}
    assert _version(tmp_path / "unused", new_module) == base  # nothing imports it yet
    imported = {
        **new_module,
        "model.py": BASE["model.py"] + b"\n\nfrom .noise import noise  # noqa\n",
    }
    assert _version(tmp_path / "imported", imported) != base


@pytest.mark.parametrize(
    "files",
    [
        {"report.py": b"from .model import forward\n\nX = forward(4)\n"},  # outside
        {"store.py": b"def write(x):\n    return x\n"},  # excluded
        {"train/__pycache__/loop.cpython-311.pyc": b"\0\1"},
        {"train/.loop.py.swp": b"editor"},
        {"data/notes.txt": b"edited, still read by no module\n"},
    ],
    ids=["outside-the-closure", "excluded", "cache", "hidden", "unnamed-data"],
)
def test_a_module_or_file_outside_the_closure_does_not_change_the_version(tmp_path, base, files):
    assert _version(tmp_path, {**BASE, **files}) == base


def test_named_package_data_counts_by_its_bytes(tmp_path, base):
    assert _version(tmp_path, {**BASE, "data/lengths.json": b"[1, 3]\n"}) != base
    _, data = hashed_files(_tree(tmp_path / "t", BASE), ENTRY, ("seps.store",))
    assert list(data) == ["data/lengths.json"]


def test_lazy_relative_and_table_imports_are_followed(tmp_path):
    files = {
        "__init__.py": b"",
        "a.py": b"def f():\n    from . import b\n\n    return b\n",
        "b.py": b"from .sub import c\n",
        "sub/__init__.py": b"",
        "sub/c.py": b"from ..d import X\n",
        "d.py": b'WHERE = {"E": "seps.e"}\n',
        "e.py": b"import seps.f\n",
        "f.py": b"",
        "g.py": b"import seps.a\n",
    }
    found = module_closure(_tree(tmp_path, files), ["seps.a"])
    assert list(found) == [
        "seps",
        "seps.a",
        "seps.b",
        "seps.d",
        "seps.e",
        "seps.f",
        "seps.sub",
        "seps.sub.c",
    ]


def test_an_excluded_module_is_neither_hashed_nor_followed(tmp_path):
    files = {
        "__init__.py": b"",
        "a.py": b"from . import b, c\n",
        "b.py": b"from . import d\n",
        "c.py": b"",
        "d.py": b"",
    }
    found = module_closure(_tree(tmp_path, files), ["seps.a"], ["seps.b", "seps.gone"])
    assert list(found) == ["seps", "seps.a", "seps.c"]


def test_an_entry_that_is_not_a_module_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"seps\.gone"):
        module_closure(_tree(tmp_path, BASE), ["seps.gone"])


def test_the_version_is_the_same_wherever_the_package_lies(tmp_path, base):
    # A wheel install: another folder, compiled caches beside the sources.
    other = _tree(tmp_path / "site-packages" / "lib", BASE)
    (other / "__pycache__").mkdir()
    (other / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    assert behaviour_hash(other, ENTRY, ("seps.store",)) == base


def test_line_endings_do_not_change_the_version(tmp_path, base):
    crlf = {k: v.replace(b"\n", b"\r\n") for k, v in BASE.items()}
    assert _version(tmp_path, crlf) == base


def test_the_training_path_covers_the_model_and_leaves_out_orchestration():
    sources, _ = hashed_files(PACKAGE)
    for name in [
        "seps.core.head",
        "seps.core.losses",
        "seps.model.seps_model",
        "seps.core.selection",
        "seps.core.kernels",
        "seps.train.loop",
        "seps.train.evaluation",
        "seps.train.pretrain",
        "seps.data.baselines",
        "seps.data.synth",
        "seps.train.config",
        "seps.core.metrics",
    ]:
        assert name in sources, name
    orchestration = [
        n
        for n in sources
        if n.split(".")[1:2]
        and n.split(".")[1] in ("cli", "report", "bench", "runs", "experiments", "stats")
    ]
    assert orchestration == []
    assert not set(sources) & set(EXCLUDED_MODULES)


def test_every_entry_and_exclusion_is_a_module_of_the_package():
    known = modules(PACKAGE)
    assert [m for m in (*ENTRY_MODULES, *EXCLUDED_MODULES) if m not in known] == []


def test_every_package_data_file_is_named_by_some_module():
    # Data found only through a name built at run time would escape the version.
    everything = data_files(PACKAGE, modules(PACKAGE).values())
    on_disk = {
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file()
        and p.suffix not in (".py", ".pyc")
        and p.name != "py.typed"
        and "__pycache__" not in p.parts
        and not p.name.startswith(".")
    }
    assert set(everything) == on_disk


def test_source_hash_covers_listed_modules_by_behaviour_and_data_by_bytes(tmp_path):
    root = _tree(tmp_path, BASE)
    listed = ("model.py", "train/loop.py", "absent.py", "data/lengths.json")
    base = source_hash(_tree(tmp_path / "b", BASE), listed)
    assert source_hash(root, listed) == source_hash(root, tuple(reversed(listed)))
    (root / "model.py").write_bytes(BASE["model.py"] + b"# edited\n")  # prose: same
    assert source_hash(root, listed) == base
    (root / "model.py").write_bytes(BASE["model.py"].replace(b"\n", b"\r\n"))
    assert source_hash(root, listed) == base
    (root / "model.py").write_bytes(BASE["model.py"].replace(b"x * 2", b"x * 3"))  # code
    assert source_hash(root, listed) != base
    (root / "model.py").write_bytes(BASE["model.py"])
    (root / "data/lengths.json").write_bytes(b"[1, 3]\n")  # data: by bytes
    assert source_hash(root, listed) != base


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


def test_every_hashed_data_file_ships_in_the_wheel():
    # A data file the version hashes but a wheel lacks would give installs another version.
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    shipped = pyproject["tool"]["setuptools"].get("package-data", {}).get("seps", [])
    _, data = hashed_files(PACKAGE)
    assert [f for f in data if not any(Path(f).match(g) for g in shipped)] == []


#: What the runner runs that the version leaves out, and why that cannot change a number.
RUNNER_ONLY = {
    "seps.runs.runner": "plans, orders and stores runs",
    "seps.runs.ray_backend": "hands the runner's group function to Ray workers; computes nothing",
    "seps.experiments.definitions": "resolves matrices into configs, whose content is in each key",
    "seps.experiments.ablation_index": "where ablations/ is; matrix and profile names for --help",
    "seps.versioning.data_fingerprint": "run keys of official-layout data",
    "seps.runs.prebuild": "builds the pretraining (hashed) before a run",
    "seps.experiments.provenance": "stamps the CPU and pretrained weights on a record: facts",
    "seps.runtime.machine_load": "the load average while a run was timed: a fact",
    "seps.experiments.staleness": "run / skip / stale decisions on stored records",
    "seps.runs.twins": "copies a record of the same key, seed and version",
    "seps.io.formatting": "number formats for messages",
    "seps.io.store": "excluded: atomic writes and locks",
    "seps.runtime.faults": "excluded: kill points that only tests arm",
    "seps.runtime.float_path": "excluded: a machine setting each record stamps",
    "seps.versioning.version": "excluded: this hash",
    "seps.versioning.code_closure": "what this hash reads",
    "seps.train.hooks_log": "excluded: the progress bar and a line per epoch",
    "seps.runs": "a package docstring",
    "seps.experiments": "a package docstring",
    "seps.versioning": "a package docstring",
    "seps.runs.data_checks": "refuses unusable data before training; stores nothing",
    "seps.experiments.definition_checks": "checks definition files before anything trains",
    "seps.train.hooks_tensorboard": "excluded: event files of values the loop computed",
}


def test_what_the_runner_runs_outside_the_version_is_known_not_to_change_numbers():
    # A module the runner calls to make a stored number, but that the training path does
    # not import, would escape the version: import it from the training path instead,
    # or, if it provably cannot change a stored number, add it here saying why.
    sources, _ = hashed_files(PACKAGE)
    outside = set(module_closure(PACKAGE, ["seps.runs.runner"])) - set(sources)
    assert outside - set(RUNNER_ONLY) == set()


def test_on_a_copy_of_this_package_prose_edits_keep_the_version_and_code_edits_do_not(
    tmp_path,
):
    copy = tmp_path / "seps"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    base = behaviour_hash(copy)
    losses = copy / "core" / "losses.py"
    text = losses.read_text()
    losses.write_text(
        text.replace("#: Distance clamp", "#: The distance clamp", 1).replace(
            '"""One direction of', '"""One (edited) direction of', 1
        )
    )
    assert losses.read_text() != text
    assert behaviour_hash(copy) == base
    losses.write_text(text.replace("def _dw_direction(", "def _dw_direction_renamed(", 1))
    assert behaviour_hash(copy) != base
