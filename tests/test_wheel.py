"""The built wheel carries everything a user needs: installed into a fresh virtual
environment, ``seps-bench`` runs a packaged matrix, reports, scores and exports in an
empty folder, with no checkout anywhere on its path.

Offline and fast: the wheel is built without build isolation from a copy of the sources,
and the fresh environment sees this interpreter's packages through a ``.pth`` path line
(a path line only extends ``sys.path``; the ``.pth`` files in that folder, among them an
editable install's finder, are not run, so ``import seps`` finds the wheel).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _sh(*argv: str | Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("seps", "ablations", "benchmarks"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SEPS_ABLATIONS")}
    pip = [sys.executable, "-m", "pip"]
    r = _sh(*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", ".", "-w",
            tmp / "dist", "-q", cwd=src, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (wheel,) = (tmp / "dist").glob("seps_bench-*.whl")
    venv = tmp / "venv"
    assert (
        _sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp, env=env).returncode == 0
    )
    python = venv / "bin" / "python"
    site = _sh(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
               cwd=tmp, env=env).stdout.strip()  # fmt: skip
    (Path(site) / "_outer_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = _sh(*pip, "--python", python, "install", "--no-deps", "--no-index", "-q", wheel,
            cwd=tmp, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    work = tmp / "empty"
    work.mkdir()
    return {
        "wheel": wheel, "venv": venv, "python": python, "work": work, "env": env, "site": site
    }  # fmt: skip


@pytest.mark.slow
def test_wheel_holds_the_definitions_data_and_benchmark_suites(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    expected = (
        "seps/_ablations/differences.yaml",
        "seps/_ablations/profiles.yaml",
        "seps/_ablations/claims.yaml",
        "seps/_ablations/paper_figures.yaml",
        "seps/_ablations/sequential.yaml",
        "seps/_ablations/matrices/seven-differences.yaml",
        "seps/_ablations/campaigns/standard.yaml",
        "seps/data/f30k_lengths.json",
        "seps/_benchmarks/test_bench_head.py",
    )
    for name in expected:
        assert name in names, name
    # One source of truth: the checkout's top-level folders, no second copy in seps/.
    assert not (REPO / "seps" / "_ablations").exists()
    assert not (REPO / "seps" / "definitions").exists()


def test_a_checkout_finds_the_top_level_definitions_and_suites():
    from seps.experiments.ablation_index import packaged_root, shipped

    assert packaged_root() == REPO / "ablations"
    assert shipped("benchmarks") == REPO / "benchmarks"
    assert (shipped("benchmarks") / "test_bench_head.py").is_file()


#: Extras a plain `pip install seps-bench` does not bring, made unimportable in the
#: installed environment (the outer interpreter that lends it its packages has them).
_EXTRAS = ("tensorboard", "ray", "pytest_benchmark")
#: A .pth line (run at start-up) that makes :data:`_EXTRAS` unimportable.
_BLOCKER = (
    "import sys, importlib.abc; "
    "B = type('B', (importlib.abc.MetaPathFinder,), {'find_spec': lambda self, name, *a: "
    "(_ for _ in ()).throw(ModuleNotFoundError(name=name.split('.')[0])) "
    f"if name.split('.')[0] in {_EXTRAS!r} else None}}); sys.meta_path.insert(0, B())\n"
)


@pytest.mark.slow
def test_a_plain_install_without_extras_answers_help_and_plans_a_matrix(installed):
    pth = Path(installed["site"]) / "zz_no_extras.pth"
    pth.write_text(_BLOCKER)
    try:
        bench = installed["venv"] / "bin" / "seps-bench"
        work, env = installed["work"], installed["env"]
        probe = _sh(installed["python"], "-c", "import tensorboard", cwd=work, env=env)
        assert probe.returncode != 0, "the extras are still importable"
        r = _sh(bench, "--help", cwd=work, env=env)
        assert r.returncode == 0 and "run" in r.stdout, r.stderr
        r = _sh(bench, "run", "seven-differences", "--profile", "smoke", "--dry-run",
                cwd=work, env=env)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "to do" in r.stdout
        # A command that needs an extra says which, in one line.
        r = _sh(bench, "run", "seven-differences", "--profile", "smoke", "--backend", "ray",
                "--only", "code", "--no-progress", "--results", "r", cwd=work, env=env)  # fmt: skip
        assert r.returncode == 2, r.stdout + r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "ray" in r.stderr.lower() and "pip install 'seps-bench[ray]'" in r.stderr
    finally:
        pth.unlink()


@pytest.mark.slow
def test_installed_wheel_imports_itself_with_the_checkouts_code_version(installed):
    from seps.versioning.version import code_version

    probe = (
        "import seps; from seps.versioning.version import code_version; "
        "print(seps.__file__); print(code_version())"
    )
    r = _sh(installed["python"], "-c", probe, cwd=installed["work"], env=installed["env"])
    assert r.returncode == 0, r.stderr
    where, version = r.stdout.split()
    assert Path(where).is_relative_to(installed["venv"]), where
    assert version == code_version()


@pytest.mark.slow
def test_installed_wheel_runs_a_packaged_matrix_reports_scores_and_exports(installed):
    bench = installed["venv"] / "bin" / "seps-bench"
    work, env = installed["work"], installed["env"]
    fast = ["--set", "train.max_steps_per_epoch=2", "--set", "train.synth_images=120"]
    r = _sh(bench, "run", "seven-differences", "--profile", "smoke", "--only", "code,paper",
            "--no-progress", *fast, cwd=work, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert (work / "reports" / "seven-differences.md").is_file()
    assert len(list((work / "results" / "seven-differences").glob("*.json"))) == 2

    r = _sh(bench, "report", "seven-differences", cwd=work, env=env)
    assert r.returncode == 0, r.stderr

    # One seed of two runs tests nothing, but the page is written and says what it read.
    r = _sh(bench, "scorecard", cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    card = (work / "reports" / "README.md").read_text()
    assert "seeds 0; 2 records of 2 runs in 1 matrix" in card
    assert "no records yet" in card

    r = _sh(bench, "export", "--output", "runs.csv", cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    lines = (work / "runs.csv").read_text().splitlines()
    assert len(lines) == 1 + 2 and "head.sparse_ratio" in lines[0]
