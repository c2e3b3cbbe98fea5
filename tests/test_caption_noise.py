"""Tests of the MLLM-like dense-caption noise (seps.data.noise) in the generator."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from seps.data.captions import sparse_captions
from seps.data.dense_captions import dense_caption, hallucinate
from seps.data.noise import NoiseCounts, noise_rates, perturb_scene, summarize
from seps.data.scenes import COLOURS, SHAPES, Obj, Scene, render_scene, sample_scene
from seps.data.synth import DEFAULT_DENSE_NOISE, generate_synthetic

SPLITS = ("train", "dev", "test")
SEED = 11
N = 500
SIZE = 16
RATE_KEYS = {
    "hallucination_rate",
    "omission_rate",
    "small_omission_rate",
    "attribute_error_rate",
    "position_error_rate",
    "background_error_rate",
}


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same 500 images (25% whole-caption hallucinations) at three noise levels."""
    base = tmp_path_factory.mktemp("noise")
    kw = {"n_images": N, "seed": SEED, "image_size": SIZE, "hallucination": 0.25}
    return {
        name: generate_synthetic(base / name, dense_noise=p, **kw)
        for name, p in (("p0", 0.0), ("p12", 0.12), ("p30", 0.3))
    }


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def dense_of(out: Path) -> list[str]:
    return [json.loads(x)["text"] for s in SPLITS for x in read_lines(out / f"synth_{s}.jsonl")]


def replay(out: Path) -> list[tuple[Scene, Scene, np.random.Generator]]:
    """(drawn scene, stated scene, image generator after the sparse captions) of every image,
    replaying the generation of version 1.0 (the plain dense caption is drawn next)."""
    meta = json.loads((out / "meta.json").read_text())
    seed, size = meta["seed"], meta["args"]["image_size"]
    rows = []
    gid = 0
    for split in SPLITS:
        hall = set(json.loads((out / f"hallucinated_{split}.json").read_text()))
        for local in range(meta["splits"][split]["images"]):
            rng = np.random.default_rng([seed, gid])
            scene = sample_scene(rng)
            render_scene(scene, size, rng)
            sparse_captions(scene, rng)
            stated = scene
            if local in hall:
                stated, _ = hallucinate(scene, np.random.default_rng([seed, gid, 1]))
            rows.append((scene, stated, rng))
            gid += 1
    return rows


def totals(out: Path) -> dict[str, float]:
    meta = json.loads((out / "meta.json").read_text())
    tot: dict[str, float] = {}
    for split in SPLITS:
        for key, value in meta["splits"][split]["dense_noise_counts"].items():
            if key not in RATE_KEYS:
                tot[key] = tot.get(key, 0) + value
    return tot


def tolerance(p: float, n: float) -> float:
    """Three binomial standard deviations of a rate ``p`` measured on ``n`` trials."""
    return 3.0 * math.sqrt(p * (1.0 - p) / n) + 0.005


# --------------------------------------------------------------------------- p = 0


def test_zero_noise_writes_the_plain_captions(sets: dict[str, Path]) -> None:
    """dense_noise=0 is the version 1.0 code path: every dense caption is
    dense_caption(stated scene, image generator), byte for byte in the jsonl."""
    out = sets["p0"]
    texts = [dense_caption(stated, rng) for _scene, stated, rng in replay(out)]
    assert dense_of(out) == texts
    lines = [line for s in SPLITS for line in read_lines(out / f"synth_{s}.jsonl")]
    assert lines == [json.dumps({"text": t}) for t in texts]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["args"]["dense_noise"] == 0.0
    for split in SPLITS:
        c = meta["splits"][split]["dense_noise_counts"]
        assert c["hallucinated_mentions"] == c["omitted_objects"] == c["attribute_errors"] == 0
        assert c["object_mentions"] == c["real_objects"] == c["described_real_objects"]
        assert (
            c["real_objects"]
            == sum(int(k) * v for k, v in meta["splits"][split]["objects_per_image"].items())
            + meta["splits"][split]["hallucination_kinds"]["extra"]
        )


def test_noise_changes_only_the_dense_captions(sets: dict[str, Path]) -> None:
    clean, noisy = sets["p0"], sets["p12"]
    for split in SPLITS:
        for name in (f"{split}_caps.txt", f"{split}_ids.txt", f"hallucinated_{split}.json"):
            assert (clean / name).read_bytes() == (noisy / name).read_bytes(), name
    assert (clean / "id_mapping.json").read_bytes() == (noisy / "id_mapping.json").read_bytes()
    for f in sorted((clean / "images").iterdir())[:25]:
        with Image.open(f) as a, Image.open(noisy / "images" / f.name) as b:
            assert np.array_equal(np.asarray(a), np.asarray(b))
    changed = np.mean([a != b for a, b in zip(dense_of(clean), dense_of(noisy), strict=True)])
    assert changed > 0.95  # the varied wording alone changes almost every caption


def test_same_arguments_same_bytes(tmp_path: Path) -> None:
    kw = {"n_images": 40, "seed": 3, "image_size": SIZE, "hallucination": 0.3}
    a = generate_synthetic(tmp_path / "a", **kw)
    b = generate_synthetic(tmp_path / "b", **kw)
    c = generate_synthetic(tmp_path / "c", dense_noise=0.2, **kw)
    for split in SPLITS:
        assert (a / f"synth_{split}.jsonl").read_bytes() == (
            b / f"synth_{split}.jsonl"
        ).read_bytes()
    assert (a / "meta.json").read_bytes() == (b / "meta.json").read_bytes()
    assert json.loads((a / "meta.json").read_text())["args"]["dense_noise"] == DEFAULT_DENSE_NOISE
    assert dense_of(a) != dense_of(c)


@pytest.mark.parametrize("bad", [-0.1, 0.6, 1.0])
def test_invalid_noise(tmp_path: Path, bad: float) -> None:
    with pytest.raises(ValueError, match="dense_noise"):
        generate_synthetic(tmp_path / "x", n_images=10, dense_noise=bad)
    assert not (tmp_path / "x").exists()


# --------------------------------------------------------------------------- realised rates


@pytest.mark.parametrize(("name", "p"), [("p12", 0.12), ("p30", 0.3)])
def test_realised_rates_near_the_knob(sets: dict[str, Path], name: str, p: float) -> None:
    out = sets[name]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["args"]["dense_noise"] == p
    tot = totals(out)
    assert tot["captions"] == N
    # CHAIR_i: hallucinated (misnamed + inserted) / all described objects
    assert tot["hallucinated_mentions"] == tot["misnamed_objects"] + tot["inserted_objects"]
    assert tot["object_mentions"] == tot["described_real_objects"] + tot["inserted_objects"]
    assert abs(tot["hallucinated_mentions"] / tot["object_mentions"] - p) < 0.03
    # omissions: the model's expectation on these very (stated) scenes
    rates = noise_rates(p)
    exp_small = exp_all = 0.0
    for _scene, stated, _rng in replay(out):
        sizes = [o.size for o in stated.objects]
        s, n = sizes.count("small"), len(sizes)
        q = [rates.omission_small if z == "small" else rates.omission_large for z in sizes]
        all_dropped = math.prod(q)  # then one object, drawn uniformly, is kept after all
        exp_small += s * rates.omission_small - all_dropped * s / n
        exp_all += sum(q) - all_dropped
    assert abs(tot["omitted_small_objects"] - exp_small) < 3.5 * math.sqrt(exp_small) + 2
    assert abs(tot["omitted_objects"] - exp_all) < 3.5 * math.sqrt(exp_all) + 2
    assert tot["omitted_small_objects"] / tot["small_objects"] > 0.7 * rates.omission_small
    # wrong attribute / cell of the correctly named objects, wrong background colour
    named = tot["described_real_objects"] - tot["misnamed_objects"]
    assert abs(tot["attribute_errors"] / named - p) < tolerance(p, named)
    assert tot["attribute_errors"] == tot["colour_errors"] + tot["size_errors"]
    assert tot["colour_errors"] > tot["size_errors"] > 0
    assert abs(tot["position_errors"] / named - p) < tolerance(p, named)
    assert abs(tot["background_errors"] / N - p) < tolerance(p, N)


def test_meta_counts_per_split_are_consistent(sets: dict[str, Path]) -> None:
    meta = json.loads((sets["p12"] / "meta.json").read_text())
    for split in SPLITS:
        st = meta["splits"][split]
        c = st["dense_noise_counts"]
        assert {"hallucinated", "hallucination_kinds", "dense_words"} <= set(st)  # kept keys
        assert c["captions"] == st["images"]
        assert c["hallucination_rate"] == round(
            c["hallucinated_mentions"] / c["object_mentions"], 4
        )
        assert c["small_omission_rate"] == round(c["omitted_small_objects"] / c["small_objects"], 4)
        named = c["described_real_objects"] - c["misnamed_objects"]
        assert c["attribute_error_rate"] == round(c["attribute_errors"] / named, 4)
        assert c["real_objects"] == c["described_real_objects"] + c["omitted_objects"]


def test_rates_on_many_scenes() -> None:
    """perturb_scene alone, on 6,000 sampled scenes: all rates at their targets."""
    for p in (0.05, 0.12, 0.3):
        counts = []
        for k in range(6000 if p == 0.12 else 2000):
            scene = sample_scene(np.random.default_rng([99, k]))
            counts.append(perturb_scene(scene, p, np.random.default_rng([99, k, 2]))[2])
        m = summarize(counts)
        total = sum(counts, NoiseCounts())
        assert abs(m["hallucination_rate"] - p) < tolerance(p, total.mentions), (p, m)
        named = total.described_real - total.misnamed
        assert abs(m["attribute_error_rate"] - p) < tolerance(p, named), (p, m)
        assert abs(total.misnamed / total.described_real - p / 2) < tolerance(p / 2, named)


# --------------------------------------------------------------------------- the captions


def test_noisy_captions_describe_the_described_scene() -> None:
    """Every object the noisy caption names is one of the described scene, with the closed
    colour vocabulary; at least one real object is always described."""
    phrase = re.compile(r"\b(?:small|little|tiny|large|big) (\w+) (" + "|".join(SHAPES) + r")\b")
    for k in range(300):
        scene = sample_scene(np.random.default_rng([5, k]))
        rng = np.random.default_rng([5, k, 2])
        described, style, counts = perturb_scene(scene, 0.3, rng)
        text = dense_caption(described, rng, style)
        assert counts.described_real >= 1 and counts.mentions == len(described.objects)
        assert len({o.cell for o in described.objects}) == len(described.objects)
        named = phrase.findall(text)
        assert len(named) >= len(described.objects)
        assert all(colour in COLOURS for colour, _shape in named), text
        assert {(c, s) for c, s in named} >= {(o.colour, o.shape) for o in described.objects}
        has_bg = re.search(r"The background (is|has|shows) ", text) is not None
        assert style.background_sentence == has_bg, text


def test_never_describes_nothing() -> None:
    """A scene of one small object keeps it even when omissions are at their cap."""
    scene = Scene((Obj("star", "red", "small", 4),), "dotted", "gray", "", ((0.0, 0.0),))
    for k in range(200):
        described, _style, counts = perturb_scene(scene, 0.5, np.random.default_rng(k))
        assert counts.described_real == 1 and counts.omitted == 0
        assert len(described.objects) >= 1


def test_the_plain_grammar_of_a_fixed_scene_and_seed_is_pinned() -> None:
    """``style=None`` (the default) is the plain grammar; its text for one scene and seed
    is pinned, since a change to it changes every generated dataset."""
    scene = sample_scene(np.random.default_rng(0))
    pinned = (
        "The image features a single shape arranged on a navy gradient background. A small "
        "red circle is located in the top right corner of the image. The background is a "
        "smooth navy gradient that becomes lighter toward the left. The circle is the only "
        "object in the image, which makes it the clear focal point of the scene."
    )
    assert dense_caption(scene, np.random.default_rng(1)) == pinned
    assert dense_caption(scene, np.random.default_rng(1), None) == pinned
