"""A world's card (seps.runs.world, seps.report.world_card): measured on the data a
profile's runs train on, shown on every page beside Flickr30K's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from seps.report.world_card import flickr30k_laps_rsum, load_card, world_lines
from seps.runs.world import duplicate_share, measure_world, world_path


def test_duplicate_share_counts_captions_that_caption_another_image_too():
    caps = ["A red star .", "a  red star .", "A cat .", "A dog .", "A dog .", "A cow ."]
    # images of 2 captions: (red star, red star), (cat, dog), (dog, cow): only the two
    # dogs are shared across images; image 0's two stars are its own.
    assert duplicate_share(caps, 2) == pytest.approx(2 / 6)


def _card(results: Path, profile: str, bm25: float, noise: float) -> None:
    path = world_path(results, profile)
    path.parent.mkdir(parents=True, exist_ok=True)
    draws = [
        {"seed": s, "bm25_rsum": bm25 + s, "vocabulary_rsum": 300.0, "s_im_auc": 0.1,
         "oracle_rsum": 500.0, "chance_rsum": 3.2, "duplicate_share": 0.02}
        for s in (0, 1)
    ]  # fmt: skip
    f30k = {"bm25_rsum": 373.9, "duplicate_share": 0.005, "chance_rsum": 3.2}
    card = {"profile": profile, "dense_noise": noise, "draws": draws, "flickr30k": f30k}
    path.write_text(json.dumps(card))


def _laps(
    results: Path,
    profile: str,
    rsums: list[float],
    cpu: str | None = None,
    matrix: str = "seven-differences",
) -> None:
    """``laps`` records of ``profile`` at seeds 0, 1, ...; with ``cpu``, stamped with that
    CPU model on the portable float path (a record's key depends only on profile and
    seed, as a real key depends only on the configs)."""
    from seps.io.store import SCHEMA

    folder = results / matrix
    folder.mkdir(parents=True, exist_ok=True)
    for s, r in enumerate(rsums):
        key = f"{len(profile):02d}{s:014x}"
        rec = {"schema": SCHEMA, "matrix": matrix, "profile": profile, "key": key,
               "run_id": "laps", "seed": s, "status": "done", "started": 1.0,
               "metrics": {"rsum": r}, "head_config": {}, "train_config": {}}  # fmt: skip
        if cpu:
            overrides = {"SEPS_FLOAT_PATH": "portable", "ATEN_CPU_CAPABILITY": "avx2",
                         "MKL_CBWR": "COMPATIBLE,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2",
                         "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}  # fmt: skip
            levels = {"torch_capability": "AVX2", "numpy_dispatch": ["X86_V3"]}
            rec["environment"] = {"cpu": {"model": cpu, **levels, "overrides": overrides}}
        (folder / f"laps-{key}-s{s}.json").write_text(json.dumps(rec))


def _two_worlds(results: Path) -> str:
    """The card of two worlds whose laps score 190 at seeds 0 and 1 in both."""
    _card(results, "standard", 240.0, 0.12)
    _card(results, "standard-noisy", 140.0, 0.3)
    _laps(results, "standard", [190.0, 190.0])
    _laps(results, "standard-noisy", [190.0, 190.0])
    return "\n".join(world_lines(results, ["standard", "standard-noisy"]))


def test_two_worlds_side_by_side_with_their_ratios_to_laps_and_flickr30k(tmp_path):
    text = _two_worlds(tmp_path)
    row = next(x for x in text.splitlines() if x.startswith("| BM25 / trained"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    laps = flickr30k_laps_rsum()
    assert cells[1:] == [f"{240.5 / 190:.2f}", f"{140.5 / 190:.2f}", f"{373.9 / laps:.2f}"]
    assert "dense noise 0.30" in text and "Flickr30K" in text
    assert not math.isnan(laps)


def test_a_world_without_a_card_says_how_to_measure_it(tmp_path):
    text = "\n".join(world_lines(tmp_path, ["standard"]))
    assert "seps-bench world --profile standard" in text
    (tmp_path / "_worlds").mkdir()
    (tmp_path / "_worlds" / "standard.json").write_text("{not json")
    assert load_card(tmp_path, "standard") is None


@pytest.mark.slow
def test_measure_world_on_the_smoke_profile_writes_a_card_the_pages_read(tmp_path, monkeypatch):
    from seps.experiments.definitions import load_profile

    monkeypatch.chdir(tmp_path)
    card = measure_world(load_profile("smoke"), [0], tmp_path / "results")
    (draw,) = card["draws"]
    assert draw["bm25_rsum"] > draw["chance_rsum"] > 0
    assert 0.0 <= draw["duplicate_share"] <= 1.0
    assert "s_im_auc" not in draw  # smoke has no pretrained build
    assert load_card(tmp_path / "results", "smoke") == card


def test_laps_with_the_same_bits_in_both_worlds_is_reported_as_the_control_holding(tmp_path):
    from seps.report.world_control import control_lines

    _laps(tmp_path, "standard", [190.0, 185.5, 188.0])
    _laps(tmp_path, "standard-noisy", [190.0, 185.5])  # seed 2 not run there yet
    text = "\n".join(control_lines(tmp_path, ["standard", "standard-noisy"]))
    assert "**same bits** at seeds 0, 1 (2 of 2)" in text


def test_laps_that_changes_between_worlds_voids_their_comparison(tmp_path):
    from seps.report.world_control import control_lines

    _laps(tmp_path, "standard", [190.0, 185.5])
    _laps(tmp_path, "standard-noisy", [190.0, 185.25])
    text = "\n".join(control_lines(tmp_path, ["standard", "standard-noisy"]))
    assert "**differ** at seeds 1 of 0, 1" in text and "metrics.rsum: 185.5 vs 185.25" in text
    assert "comparison is void" in text


def test_the_world_control_compares_laps_on_one_cpu_type_using_any_matrix_of_the_same_key(
    tmp_path,
):
    from seps.report.world_control import control_lines

    # The first world: seeds 0-1 on an Intel CPU; seed 0 also on an AMD CPU in controls
    # (same key: the same training), with other bits, as two CPU types give.
    _laps(tmp_path, "standard", [190.0, 185.5], cpu="Intel Xeon")
    _laps(tmp_path, "standard", [201.25], cpu="AMD EPYC", matrix="controls")
    # The second world on the AMD CPU: seed 0 matches the controls record; seed 1 has no
    # first-world record on AMD and is not compared, not called a difference.
    _laps(tmp_path, "standard-noisy", [201.25, 170.0], cpu="AMD EPYC")
    text = "\n".join(control_lines(tmp_path, ["standard", "standard-noisy"]))
    assert "**same bits** at seeds 0 (1 of 1)" in text
    assert "not compared at seeds 1" in text and "(Intel Xeon)" in text
    assert "void" not in text


def test_laps_that_changes_on_the_same_cpu_type_voids_the_comparison(tmp_path):
    from seps.report.world_control import control_lines

    _laps(tmp_path, "standard", [190.0], cpu="Intel Xeon")
    _laps(tmp_path, "standard", [201.25], cpu="AMD EPYC", matrix="controls")
    _laps(tmp_path, "standard-noisy", [201.5], cpu="AMD EPYC")
    text = "\n".join(control_lines(tmp_path, ["standard", "standard-noisy"]))
    assert "**differ** at seeds 0 of 0" in text and "201.25 vs 201.5" in text
    assert "comparison is void" in text


def test_the_world_control_waits_for_a_seed_both_worlds_hold(tmp_path):
    from seps.report.world_control import control_lines

    _laps(tmp_path, "standard", [190.0])
    assert control_lines(tmp_path, ["standard"]) == []
    text = "\n".join(control_lines(tmp_path, ["standard", "standard-noisy"]))
    assert "not compared yet" in text


def test_the_world_card_carries_the_laps_control_below_it(tmp_path):
    text = _two_worlds(tmp_path)
    assert text.index("| BM25 / trained") < text.index("**Control:** `laps`")
    assert "**same bits** at seeds 0, 1 (2 of 2)" in text
