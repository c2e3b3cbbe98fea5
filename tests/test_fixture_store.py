"""A committed fixture store regenerates its committed report byte for byte.

``tests/data/fixture_store/records/`` holds 18 real run records of `seven-differences` at
the `synth48` profile (named `standard` when they were made; 6 runs x seeds 0-2, their
per-step logs thinned to every tenth step to keep the files small) and the matrix file
they were run from;
``expected/seven-differences.md`` is the report they gave. The test regenerates the
report into a temporary folder and compares bytes, so any change to what a report prints
for the same records shows up here. After an intended change to the report's text,
rewrite the expected file and review its diff::

    python tests/test_fixture_store.py --update
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml
from ablation_roots import make_ablation_root

from seps.report import write_report

FIXTURE = Path(__file__).resolve().parent / "data" / "fixture_store"
MATRIX = "seven-differences"
PLOTS = ("delta", "curves", "differences")


def regenerate(out: Path) -> Path:
    """Write the fixture's report (and plots) into ``out``; return the markdown path."""
    doc = yaml.safe_load((FIXTURE / f"{MATRIX}.yaml").read_text())
    root = make_ablation_root(out / "ablations", {MATRIX: doc})
    return write_report(MATRIX, FIXTURE / "records", out / "reports", root)


def test_committed_fixture_store_regenerates_its_committed_report_byte_for_byte(tmp_path):
    path = regenerate(tmp_path)
    assert path.read_bytes() == (FIXTURE / "expected" / f"{MATRIX}.md").read_bytes()


def test_regenerating_twice_gives_the_same_plots(tmp_path):
    first, second = regenerate(tmp_path / "a"), regenerate(tmp_path / "b")
    for kind in PLOTS:
        name = f"{MATRIX}-{kind}.png"
        assert (first.parent / name).read_bytes() == (second.parent / name).read_bytes(), name


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    with tempfile.TemporaryDirectory() as tmp:
        (FIXTURE / "expected").mkdir(exist_ok=True)
        target = FIXTURE / "expected" / f"{MATRIX}.md"
        target.write_bytes(regenerate(Path(tmp)).read_bytes())
        print(f"wrote {target}")
