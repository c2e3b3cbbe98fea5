"""Tests of the synthetic dataset generator (seps.data.synth)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from seps.data.layout import load_split
from seps.data.synth import (
    BACKGROUND_COLOURS,
    BACKGROUND_KINDS,
    COLOURS,
    SHAPES,
    Obj,
    Scene,
    dense_caption,
    generate_synthetic,
    render_scene,
    sample_scene,
    sparse_captions,
)

SPLITS = ("train", "dev", "test")
TEXT_FILES = [f"{s}_{kind}" for s in SPLITS for kind in ("caps.txt", "ids.txt")] + [
    *(f"synth_{s}.jsonl" for s in SPLITS),
    *(f"hallucinated_{s}.json" for s in SPLITS),
    "id_mapping.json",
    "meta.json",
]


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small data sets: seed 0 twice, seed 1, and seed 0 with hallucination (default dense
    noise), and seed 0 without and with hallucination without dense noise."""
    base = tmp_path_factory.mktemp("synth")
    kw = {"n_images": 60, "image_size": 48}
    return {
        "a": generate_synthetic(base / "a", seed=0, **kw),
        "a2": generate_synthetic(base / "a2", seed=0, **kw),
        "b": generate_synthetic(base / "b", seed=1, **kw),
        "h": generate_synthetic(base / "h", seed=0, hallucination=0.5, **kw),
        "a0": generate_synthetic(base / "a0", seed=0, dense_noise=0.0, **kw),
        "h0": generate_synthetic(base / "h0", seed=0, hallucination=0.5, dense_noise=0.0, **kw),
    }


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A larger set with default arguments except size, for statistics."""
    out = tmp_path_factory.mktemp("synth_big") / "s"
    return generate_synthetic(out, n_images=1000, seed=0, hallucination=0.2)


def pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# --------------------------------------------------------------------------- determinism


def test_same_seed_same_bytes_and_pixels(gen: dict[str, Path]) -> None:
    a, a2 = gen["a"], gen["a2"]
    for name in TEXT_FILES:
        assert (a / name).read_bytes() == (a2 / name).read_bytes(), name
    files = sorted(p.name for p in (a / "images").iterdir())
    assert files == sorted(p.name for p in (a2 / "images").iterdir())
    assert len(files) == 60
    for f in files:
        np.testing.assert_array_equal(pixels(a / "images" / f), pixels(a2 / "images" / f))


def test_different_seed_differs(gen: dict[str, Path]) -> None:
    a, b = gen["a"], gen["b"]
    for name in ("train_caps.txt", "synth_train.jsonl", "test_caps.txt"):
        assert (a / name).read_bytes() != (b / name).read_bytes(), name
    mapping = json.loads((a / "id_mapping.json").read_text())
    differing = sum(
        not np.array_equal(pixels(a / "images" / f), pixels(b / "images" / f))
        for f in mapping.values()
    )
    assert differing >= 55


def test_images_are_not_trivial(gen: dict[str, Path]) -> None:
    mapping = json.loads((gen["a"] / "id_mapping.json").read_text())
    for f in list(mapping.values())[:10]:
        with Image.open(gen["a"] / "images" / f) as im:
            assert im.mode == "RGB" and im.size == (48, 48) and im.format == "PNG"
        px = pixels(gen["a"] / "images" / f)
        assert len(np.unique(px.reshape(-1, 3), axis=0)) > 5


# --------------------------------------------------------------------------- layout


def test_layout_files_and_counts(gen: dict[str, Path]) -> None:
    out = gen["a"]
    meta = json.loads((out / "meta.json").read_text())
    mapping = json.loads((out / "id_mapping.json").read_text())
    assert len(mapping) == 60
    assert meta["args"]["n_images"] == 60 and meta["seed"] == 0 and meta["version"]
    sizes = {"train": 48, "dev": 6, "test": 6}
    next_id = 0
    for split in SPLITS:
        caps = read_lines(out / f"{split}_caps.txt")
        ids = read_lines(out / f"{split}_ids.txt")
        dense = [json.loads(x) for x in read_lines(out / f"synth_{split}.jsonl")]
        n = sizes[split]
        assert len(caps) == 5 * n and len(ids) == 5 * n and len(dense) == n
        assert all(set(d) == {"text"} and d["text"] for d in dense)
        assert all(c.strip() == c and c for c in caps)
        for i in range(n):  # ids: image i owns lines 5i..5i+4, global running ids
            assert ids[5 * i : 5 * i + 5] == [str(next_id)] * 5
            assert (out / "images" / mapping[str(next_id)]).is_file()
            next_id += 1
        st = meta["splits"][split]
        assert st["images"] == n and st["captions"] == 5 * n
        assert sum(st["objects_per_image"].values()) == n
        lens = [len(c.split()) for c in caps]
        assert st["sparse_words"] == {
            "mean": round(float(np.mean(lens)), 3),
            "min": min(lens),
            "max": max(lens),
        }
        assert json.loads((out / f"hallucinated_{split}.json").read_text()) == []
    assert next_id == 60


def test_loader_reads_generated(gen: dict[str, Path]) -> None:
    out = gen["a"]
    for split in SPLITS:
        d = load_split(out, split)
        assert d.name == "synth"
        assert d.captions == read_lines(out / f"{split}_caps.txt")
        assert d.dense == [json.loads(x)["text"] for x in read_lines(out / f"synth_{split}.jsonl")]
        assert d.skipped == 0


def test_custom_name_and_splits(tmp_path: Path) -> None:
    out = generate_synthetic(tmp_path / "x", n_images=10, splits=(0.5, 0.2, 0.3), name="toy")
    assert (out / "toy_dev.jsonl").is_file() and not (out / "synth_dev.jsonl").exists()
    assert len(read_lines(out / "test_caps.txt")) == 15
    assert load_split(out, "dev").name == "toy"
    assert all(
        f.startswith("toy_") for f in json.loads((out / "id_mapping.json").read_text()).values()
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_images": 2}, "n_images"),
        ({"n_images": 10, "splits": (0.98, 0.01, 0.01)}, "at least one image"),
        ({"splits": (0.5, 0.5)}, "3 fractions"),
        ({"splits": (0.5, 0.4, 0.4)}, "sum to 1"),
        ({"hallucination": 1.5}, "hallucination"),
        ({"dense_noise": 0.7}, "dense_noise"),
        ({"image_size": 8}, "image_size"),
        ({"name": "a/b"}, "name"),
    ],
)
def test_invalid_arguments(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        generate_synthetic(tmp_path / "x", **kwargs)


# --------------------------------------------------------------------------- hallucination


def test_hallucination_sidecar_and_effect(gen: dict[str, Path]) -> None:
    clean, hall = gen["a0"], gen["h0"]  # without dense noise
    meta = json.loads((hall / "meta.json").read_text())
    for split, n in (("train", 48), ("dev", 6), ("test", 6)):
        idx = json.loads((hall / f"hallucinated_{split}.json").read_text())
        assert idx == sorted(set(idx)) and all(0 <= i < n for i in idx)
        assert len(idx) == round(0.5 * n) == meta["splits"][split]["hallucinated"]
        kinds = meta["splits"][split]["hallucination_kinds"]
        assert sum(kinds.values()) == len(idx)
        d_clean = read_lines(clean / f"synth_{split}.jsonl")
        d_hall = read_lines(hall / f"synth_{split}.jsonl")
        for i in range(n):
            assert (d_clean[i] != d_hall[i]) == (i in idx), (split, i)
        # with the default dense noise: the same images are hallucinated, the others keep
        # their caption (the noise has a stream of its own)
        assert json.loads((gen["h"] / f"hallucinated_{split}.json").read_text()) == idx
        n_clean = read_lines(gen["a"] / f"synth_{split}.jsonl")
        n_hall = read_lines(gen["h"] / f"synth_{split}.jsonl")
        assert all(n_clean[i] == n_hall[i] for i in range(n) if i not in idx), split
        # images, sparse captions and ids do not depend on p
        for name in (f"{split}_caps.txt", f"{split}_ids.txt"):
            assert (clean / name).read_bytes() == (hall / name).read_bytes()
    mapping = json.loads((clean / "id_mapping.json").read_text())
    for f in list(mapping.values())[:20]:
        np.testing.assert_array_equal(pixels(clean / "images" / f), pixels(hall / "images" / f))


def test_hallucination_fraction_close_to_p(big: Path) -> None:
    total = sum(len(json.loads((big / f"hallucinated_{s}.json").read_text())) for s in SPLITS)
    assert total == round(0.2 * 800) + round(0.2 * 100) + round(0.2 * 100)
    assert abs(total / 1000 - 0.2) < 0.01
    kinds = {"colour": 0, "shape": 0, "size": 0, "extra": 0}
    for s in SPLITS:
        for k, v in json.loads((big / "meta.json").read_text())["splits"][s][
            "hallucination_kinds"
        ].items():
            kinds[k] += v
    assert all(v > 20 for v in kinds.values()), kinds  # all four kinds occur


# --------------------------------------------------------------------------- statistics


def test_caption_statistics_as_documented(big: Path) -> None:
    caps = [c for s in SPLITS for c in read_lines(big / f"{s}_caps.txt")]
    dense = [json.loads(x)["text"] for s in SPLITS for x in read_lines(big / f"synth_{s}.jsonl")]
    sparse_len = np.array([len(c.split()) for c in caps])
    dense_len = np.array([len(t.split()) for t in dense])
    # documented: sparse mean ~10 (3-19), dense mean ~88 (about 40-145, default noise)
    assert 8.5 < sparse_len.mean() < 12.5 and sparse_len.min() >= 3 and sparse_len.max() <= 22
    assert 80 < dense_len.mean() < 97 and dense_len.min() >= 38 and dense_len.max() <= 150
    # the same sparse caption string often belongs to several images (hard negatives)
    owners: dict[str, set[int]] = {}
    for j, c in enumerate(caps):
        owners.setdefault(c, set()).add(j // 5)
    shared = np.mean([len(owners[c]) > 1 for c in caps])
    assert shared > 0.15
    meta = json.loads((big / "meta.json").read_text())
    hist = np.zeros(4)
    for s in SPLITS:
        hist += [meta["splits"][s]["objects_per_image"][str(k)] for k in range(1, 5)]
    frac = hist / hist.sum()
    np.testing.assert_allclose(frac, [0.2, 0.3, 0.3, 0.2], atol=0.05)


def test_captions_describe_the_scene() -> None:
    """Sparse captions name 1-2 true objects; dense captions name every object and the
    background; colours are drawn where the objects are."""
    shape_re = re.compile(r"\b(" + "|".join(SHAPES) + r")\b")
    colour_re = re.compile(r"\b(" + "|".join(COLOURS) + r")\b")
    for k in range(200):
        rng = np.random.default_rng([123, k])
        scene = sample_scene(rng)
        assert isinstance(scene, Scene) and 1 <= len(scene.objects) <= 4
        assert len({o.cell for o in scene.objects}) == len(scene.objects)
        assert scene.bg_kind in BACKGROUND_KINDS and scene.bg_colour in BACKGROUND_COLOURS
        img = np.asarray(render_scene(scene, 64, rng)).astype(int)
        assert img.shape == (64, 64, 3)
        for o in scene.objects:
            # some pixel of the object's cell has (nearly) the object's colour
            r, c = o.row, o.col
            cell = img[max(0, 21 * r - 6) : 21 * r + 27, max(0, 21 * c - 6) : 21 * c + 27]
            dist = np.abs(cell - np.array(COLOURS[o.colour])).sum(-1)
            assert dist.min() < 30, (k, o)
        shapes = {o.shape for o in scene.objects}
        colours = {o.colour for o in scene.objects}
        caps = sparse_captions(scene, rng)
        assert len(caps) == 5
        for cap in caps:
            named = shape_re.findall(cap)
            assert 1 <= len(named) <= 2 and set(named) <= shapes, cap
            assert set(colour_re.findall(cap)) <= colours, cap
        dense = dense_caption(scene, rng)
        for o in scene.objects:
            assert f"{o.size} {o.colour} {o.shape}" in dense
        assert f"{scene.bg_colour} {scene.bg_kind}" in dense
        n_full = len(re.findall(r"\b(small|large) (" + "|".join(COLOURS) + ")", dense))
        assert len(scene.objects) <= n_full <= len(scene.objects) + 2


def test_hallucination_count_is_rounded(tmp_path: Path) -> None:
    out = generate_synthetic(tmp_path / "s", n_images=30, seed=4, hallucination=0.3)
    counts = [len(json.loads((out / f"hallucinated_{s}.json").read_text())) for s in SPLITS]
    assert counts == [round(0.3 * 24), 1, 1]  # 0.9 rounds to 1, not down to 0


def test_relations_in_dense_caption() -> None:
    """Hand-made scene: relations follow the grid (rows top to bottom, columns left to right)."""
    objs = (
        Obj("star", "red", "large", 0),  # top left
        Obj("ring", "blue", "small", 5),  # right
        Obj("square", "green", "small", 8),  # bottom right
    )
    scene = Scene(objs, "dotted", "gray", "", ((0.0, 0.0),) * 3)
    text = dense_caption(scene, np.random.default_rng(0))
    assert "The blue ring is below and to the right of the red star." in text
    assert "The green square is below the blue ring." in text
    assert "In the top left corner" in text or "in the top left corner" in text
    assert "gray dotted background" in text
    caps = sparse_captions(scene, np.random.default_rng(0), k=200)
    rel_re = re.compile(
        r"^An? (?:\w+ )*?(star|ring|square) "
        r"(above|below|to the left of|to the right of|above and to the left of|"
        r"above and to the right of|below and to the left of|below and to the right of) "
        r"an? (?:\w+ )*?(star|ring|square) \.$"
    )
    truth = {
        ("star", "ring"): "above and to the left of",
        ("ring", "star"): "below and to the right of",
        ("star", "square"): "above and to the left of",
        ("square", "star"): "below and to the right of",
        ("ring", "square"): "above",
        ("square", "ring"): "below",
    }
    seen = 0
    for cap in caps:
        m = rel_re.match(cap)
        if m:
            seen += 1
            assert truth[(m.group(1), m.group(3))] == m.group(2), cap
    assert seen >= 5


def test_identical_objects_relation() -> None:
    objs = (Obj("ring", "green", "small", 1), Obj("ring", "green", "small", 4))
    scene = Scene(objs, "noisy", "navy", "", ((0.0, 0.0),) * 2)
    assert "One green ring is below the other one." in dense_caption(
        scene, np.random.default_rng(0)
    )
    objs = (Obj("ring", "green", "large", 1), Obj("ring", "green", "small", 4))
    scene = Scene(objs, "noisy", "navy", "", ((0.0, 0.0),) * 2)
    text = dense_caption(scene, np.random.default_rng(0))
    assert "The small green ring is below the large green ring." in text


def test_generation_removes_the_folder_a_killed_generation_left(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    left = tmp_path / f".s.{int(dead.stdout)}.tmp"
    (left / "images").mkdir(parents=True)
    generate_synthetic(tmp_path / "s", n_images=10, image_size=16)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
