"""The README's generated headline block (``seps-bench scorecard --readme``): only the
text between its two markers changes, from the committed fixture store's records."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ablation_roots import make_ablation_root

from seps.cli import main
from seps.report.headline import (
    BEGIN,
    END,
    Headline,
    render_headline,
    replace_block,
    write_headline,
)

FIXTURE = Path(__file__).resolve().parent / "data" / "fixture_store"

README = (
    "# Title\r\n\n"  # odd line endings and bytes around the block must survive
    "Intro with ünïcode and trailing spaces   \n\n"
    f"{BEGIN}\nstale numbers typed by hand\n{END}\n"
    "\n## After\n\nlast line without a newline"
)


def _root(tmp_path: Path) -> Path:
    doc = yaml.safe_load((FIXTURE / "seven-differences.yaml").read_text())
    root = make_ablation_root(tmp_path / "ablations", {"seven-differences": doc})
    claim = {
        "id": "dense_fusion",
        "claim": "fused beats dual branch",
        "source": "test",
        "matrix": "seven-differences",
        "protocol": "candidate",
        "runs": [{"baseline": "code", "variants": ["code+dense_fusion"]}],
        "direction": "+",
        "size": None,
    }
    (root / "claims.yaml").write_text(yaml.safe_dump({"claims": [claim]}, sort_keys=False))
    return root


def test_the_block_is_replaced_between_the_markers_and_the_rest_is_byte_identical(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_bytes(README.encode("utf-8"))
    write_headline(readme, FIXTURE / "records", _root(tmp_path))
    after = readme.read_bytes().decode("utf-8")
    head, tail = README.split(BEGIN)[0], README.split(END)[1]
    assert after.startswith(head + BEGIN + "\n") and after.endswith(END + tail)
    block = after[len(head + BEGIN + "\n") : -len(END + tail)]
    assert "stale numbers" not in block
    counts = "1 claims in 1 rows (1 paired tests: a grid's row tests each cell): **1 supported**"
    assert counts in block
    assert "| `dense_fusion`" in block and "`paper` " in block
    again = readme.read_bytes()
    write_headline(readme, FIXTURE / "records", _root(tmp_path / "again"))
    assert readme.read_bytes() == again  # the same records give the same bytes


@pytest.mark.parametrize(
    "text",
    [
        "no markers at all\n",
        f"{BEGIN}\nonly the first\n",
        f"{END}\n{BEGIN}\n",
        f"{BEGIN}\n{BEGIN}\n{END}\n",
    ],
)
def test_missing_or_misplaced_markers_give_one_clear_error_line(tmp_path, capsys, text):
    readme = tmp_path / "README.md"
    readme.write_text(text)
    (tmp_path / "empty").mkdir()  # a store without records: only the markers are wrong
    code = main(["scorecard", "--readme", str(readme), "--results", str(tmp_path / "empty")])
    err = capsys.readouterr().err
    assert code == 2 and readme.read_text() == text
    assert err.count("\n") == 1 and str(readme) in err and BEGIN in err and END in err


def test_replace_block_keeps_every_byte_outside_the_markers():
    text = f"a\r\n{BEGIN}\nold\nold\n{END}\r\nz"
    assert replace_block(text, "new") == f"a\r\n{BEGIN}\nnew\n{END}\r\nz"
    assert replace_block(text, "") == f"a\r\n{BEGIN}\n{END}\r\nz"


def test_mixed_code_versions_open_the_block_with_a_banner_naming_them():
    h = Headline(
        counts={"supported": 2, "not detected": 1, "contradicted": 0},
        claims=2,
        differences=[],
        presets=[],
        profile="standard",
        card_versions=[("aaaa", 5), ("bbbb", 2)],
        table_versions=[("aaaa", 3)],
    )
    text = render_headline(h)
    assert text.startswith("> **Mixed code versions.**")
    assert "aaaa (5), bbbb (2)" in text.splitlines()[0] and "aaaa (3)" in text.splitlines()[0]
    assert "**2 supported**, **1 not detected**." in text and "contradicted" not in text
    one = render_headline(Headline({"supported": 1}, 1, [], [], None, [("aaaa", 1)], []))
    assert one.startswith("Code version aaaa.")


def test_rows_of_several_profiles_are_also_counted_per_profile():
    both = {"supported": 1, "not detected": 2}
    by_profile = (
        ("standard", {"supported": 1, "not detected": 0}),
        ("synth48", {"not detected": 2}),
    )
    summaries = (("synth48", "retired: its pretraining solves the task"),)
    h = Headline(both, 2, [], [], None, [("aaaa", 3)], [], by_profile=by_profile,
                 summaries=summaries)  # fmt: skip
    text = render_headline(h)
    line = next(x for x in text.splitlines() if "By the profile" in x)
    # Each regime first, under its name (a retired one with its summary), then the total.
    assert "profile `standard`, 1 rows: **1 supported**;" in line
    assert (
        "profile `synth48` (retired: its pretraining solves the task), 2 rows: "
        "**2 not detected**. All rows together: **1 supported**, **2 not detected**."
    ) in line
    assert "without records" not in line
    more = Headline({**both, "no records yet": 1}, 3, [], [], None, [("aaaa", 3)], [],
                    by_profile=by_profile)  # fmt: skip
    assert "; 1 rows without records: **1 no records yet**." in render_headline(more)
    one = Headline(both, 2, [], [], None, [("aaaa", 3)], [], by_profile=by_profile[:1])
    assert "By the profile" not in render_headline(one)
