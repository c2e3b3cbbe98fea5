"""Tests of the official-layout loader: good data, every bad-data case, the real F30K files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from seps.data.layout import DataError, SplitData, decode_image, load_split
from seps.data.synth import generate_synthetic

F30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "f30k"


def write_png(path: Path, colour: tuple[int, int, int] = (10, 20, 30), size: int = 4) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (size, size), colour).save(path)


def make_data(
    root: Path,
    n: int = 4,
    split: str = "test",
    name: str = "toy",
    ids_per: str = "caption",
) -> Path:
    """A tiny dataset: image k has id str(100 + k), captions 'img k cap c', dense 'dense k'."""
    root.mkdir(parents=True, exist_ok=True)
    ids = [str(100 + k) for k in range(n)]
    caps = [f"img {k} cap {c}" for k in range(n) for c in range(5)]
    (root / f"{split}_caps.txt").write_text("".join(c + "\n" for c in caps))
    id_lines = [i for i in ids for _ in range(5)] if ids_per == "caption" else ids
    (root / f"{split}_ids.txt").write_text("".join(i + "\n" for i in id_lines))
    dense = [json.dumps({"text": f"dense {k}", "model_id": "x"}) for k in range(n)]
    (root / f"{name}_{split}.jsonl").write_text("".join(d + "\n" for d in dense))
    mapping = {i: f"pic_{i}.png" for i in ids}
    mapping["999"] = "unused.png"  # the mapping may list other splits' images
    (root / "id_mapping.json").write_text(json.dumps(mapping))
    for k, i in enumerate(ids):
        write_png(root / "images" / mapping[i], (k * 40, 0, 0))
    return root


def write_truncated_jpeg(path: Path) -> None:
    """A JPEG cut so that ``verify()`` (header and markers only) passes but decoding fails.

    The cheap check of `load_split` cannot see this; only a full decode does.
    """
    rng = np.random.default_rng(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path, "JPEG")
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.65)])
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im, pytest.raises(OSError, match="truncated"):
        im.load()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def write_lines(path: Path, rows: list[str]) -> None:
    path.write_text("".join(r + "\n" for r in rows))


# --------------------------------------------------------------------------- good data


@pytest.mark.parametrize("ids_per", ["caption", "image"])
def test_loads_toy(tmp_path: Path, ids_per: str) -> None:
    root = make_data(tmp_path / "d", n=4, ids_per=ids_per)
    d = load_split(root, "test")
    assert isinstance(d, SplitData)
    assert d.name == "toy" and d.split == "test"
    assert d.n_images == 4 and d.n_captions == 20
    assert d.image_ids == ["100", "101", "102", "103"]
    assert d.image_files == [root / "images" / f"pic_{i}.png" for i in d.image_ids]
    assert d.captions[7] == "img 1 cap 2"
    assert d.dense == [f"dense {k}" for k in range(4)]
    np.testing.assert_array_equal(d.caption_to_image, np.arange(20) // 5)
    assert d.caption_to_image.dtype == np.int64
    assert d.dense_for_caption(7) == "dense 1"
    assert d.skipped == 0 and d.skipped_ids == []


def test_dense_per(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=3)
    per_cap = load_split(root, "test", dense_per="caption")
    assert len(per_cap.dense_texts) == 15
    assert per_cap.dense_texts[5:10] == ["dense 1"] * 5
    per_img = load_split(root, "test", dense_per="image")
    assert per_img.dense_texts == ["dense 0", "dense 1", "dense 2"]
    assert per_img.dense == per_cap.dense
    with pytest.raises(ValueError, match="dense_per"):
        load_split(root, "test", dense_per="word")  # type: ignore[arg-type]


def test_image_dir_override_and_no_check(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=2)
    other = tmp_path / "elsewhere"
    (root / "images").rename(other)
    with pytest.raises(DataError, match="image file missing"):
        load_split(root, "test")
    d = load_split(root, "test", image_dir=other)
    assert d.image_files[0] == other / "pic_100.png"
    d = load_split(root, "test", check_images=False)  # paths only, never opened
    assert d.image_files[1] == root / "images" / "pic_101.png" and d.n_images == 2


def test_crlf_trailing_blank_lines_and_unicode_separators(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=2)
    caps = lines(root / "test_caps.txt")
    caps[3] = "a caption with a \u2028 line separator inside"
    (root / "test_caps.txt").write_bytes(("\r\n".join(caps) + "\r\n\r\n\n").encode())
    d = load_split(root, "test")
    assert d.n_captions == 10
    assert d.captions[3] == caps[3]
    assert not any(c.endswith("\r") for c in d.captions)


def test_name_inference(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=2, name="coco")
    (root / "coco_testall.jsonl").write_text("{}\n")  # other split: ignored
    assert load_split(root, "test").name == "coco"
    (root / "f30k_test.jsonl").write_text((root / "coco_test.jsonl").read_text())
    with pytest.raises(DataError, match=r"several dense-caption files.*coco_test\.jsonl"):
        load_split(root, "test")
    assert load_split(root, "test", name="f30k").name == "f30k"


def test_synthetic_set_loads_with_same_code(tmp_path: Path) -> None:
    out = generate_synthetic(tmp_path / "s", n_images=20, seed=3, image_size=32)
    for split, n in (("train", 16), ("dev", 2), ("test", 2)):
        d = load_split(out, split)
        assert d.name == "synth" and d.n_images == n and d.n_captions == 5 * n
        assert all(p.is_file() for p in d.image_files)


# --------------------------------------------------------------------------- bad data


@pytest.mark.parametrize(
    "missing", ["test_caps.txt", "test_ids.txt", "toy_test.jsonl", "id_mapping.json"]
)
def test_missing_file(tmp_path: Path, missing: str) -> None:
    root = make_data(tmp_path / "d")
    (root / missing).unlink()
    with pytest.raises(DataError, match="file not found") as e:
        load_split(root, "test", name="toy")
    assert missing in str(e.value)


def test_missing_jsonl_when_inferring_name(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d")
    (root / "toy_test.jsonl").unlink()
    with pytest.raises(DataError, match=r"<name>_test\.jsonl: file not found"):
        load_split(root, "test")


def test_missing_data_dir(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="data folder not found"):
        load_split(tmp_path / "nope", "test")


def test_caption_count_not_multiple_of_5(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=3)
    write_lines(root / "test_caps.txt", lines(root / "test_caps.txt")[:12])
    with pytest.raises(
        DataError, match=r"test_caps\.txt: 12 captions is not a positive multiple of 5"
    ):
        load_split(root, "test")


def test_empty_caption_line(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=2)
    caps = lines(root / "test_caps.txt")
    caps[6] = "   "
    write_lines(root / "test_caps.txt", caps)
    with pytest.raises(DataError, match=r"test_caps\.txt:7: empty line"):
        load_split(root, "test")


def test_ids_not_repeated_consistently(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=3)
    ids = lines(root / "test_ids.txt")
    ids[7] = "102"  # line 8 belongs to image 1 (lines 6-10)
    write_lines(root / "test_ids.txt", ids)
    with pytest.raises(DataError) as e:
        load_split(root, "test")
    msg = str(e.value)
    assert "test_ids.txt:8:" in msg and "'102'" in msg and "line 6" in msg
    assert "5 consecutive lines" in msg


def test_ids_wrong_count(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=3)
    write_lines(root / "test_ids.txt", lines(root / "test_ids.txt")[:7])
    with pytest.raises(DataError) as e:
        load_split(root, "test")
    msg = str(e.value)
    assert "test_ids.txt: 7 lines" in msg and "expected 15" in msg and "or 3" in msg


def test_dense_count_mismatch(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=4)
    write_lines(root / "toy_test.jsonl", lines(root / "toy_test.jsonl")[:3])
    with pytest.raises(DataError) as e:
        load_split(root, "test")
    msg = str(e.value)
    assert "toy_test.jsonl: 3 dense captions; expected 4" in msg and "test_caps.txt" in msg


def test_malformed_json_line(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=4)
    rows = lines(root / "toy_test.jsonl")
    rows[2] = '{"text": "unterminated'
    write_lines(root / "toy_test.jsonl", rows)
    with pytest.raises(DataError, match=r"toy_test\.jsonl:3: malformed JSON"):
        load_split(root, "test")


@pytest.mark.parametrize("row", ['{"caption": "x"}', '["text"]', '"text"'])
def test_missing_text_key(tmp_path: Path, row: str) -> None:
    root = make_data(tmp_path / "d", n=4)
    rows = lines(root / "toy_test.jsonl")
    rows[1] = row
    write_lines(root / "toy_test.jsonl", rows)
    with pytest.raises(DataError, match=r'toy_test\.jsonl:2: missing "text" key'):
        load_split(root, "test")


def test_text_not_a_string(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=2)
    rows = lines(root / "toy_test.jsonl")
    rows[1] = '{"text": 5}'
    write_lines(root / "toy_test.jsonl", rows)
    with pytest.raises(DataError, match=r'toy_test\.jsonl:2: "text" is int'):
        load_split(root, "test")


@pytest.mark.parametrize(("ids_per", "line"), [("caption", 11), ("image", 3)])
def test_id_missing_from_mapping(tmp_path: Path, ids_per: str, line: int) -> None:
    root = make_data(tmp_path / "d", n=4, ids_per=ids_per)
    mapping = json.loads((root / "id_mapping.json").read_text())
    del mapping["102"]
    (root / "id_mapping.json").write_text(json.dumps(mapping))
    with pytest.raises(DataError) as e:
        load_split(root, "test")
    msg = str(e.value)
    assert f"test_ids.txt:{line}: image id '102' not found in" in msg
    assert "id_mapping.json" in msg


def test_malformed_id_mapping(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=2)
    (root / "id_mapping.json").write_text('{"100": "a.png",\n "101": }')
    with pytest.raises(DataError, match=r"id_mapping\.json:2: malformed JSON"):
        load_split(root, "test")


def test_image_missing(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=4)
    (root / "images" / "pic_102.png").unlink()
    with pytest.raises(DataError) as e:
        load_split(root, "test")
    msg = str(e.value)
    assert "pic_102.png: image file missing" in msg
    assert "image id '102'" in msg and "test_ids.txt line 11" in msg
    # a CLI user needs the flags, a Python user the arguments: both are named
    assert "--image-dir" in msg and "--skip-bad-images" in msg
    assert "image_dir=" in msg and "skip_bad_images=True" in msg


def test_image_unreadable(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=4)
    (root / "images" / "pic_101.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not a png")
    with pytest.raises(DataError) as e:
        load_split(root, "test")
    msg = str(e.value)
    assert "pic_101.png: unreadable image" in msg and "test_ids.txt line 6" in msg


def test_truncated_png_unreadable(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=2)
    p = root / "images" / "pic_100.png"
    write_png(p, size=64)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"pic_100\.png: unreadable image"):
        load_split(root, "test")


def test_skip_bad_images(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=5)
    (root / "images" / "pic_101.png").unlink()
    (root / "images" / "pic_103.png").write_bytes(b"garbage")
    d = load_split(root, "test", skip_bad_images=True)
    assert d.skipped == 2 and d.skipped_ids == ["101", "103"]
    assert d.n_images == 3 and d.n_captions == 15
    assert d.image_ids == ["100", "102", "104"]
    assert d.captions[5:10] == [f"img 2 cap {c}" for c in range(5)]
    assert d.captions[10] == "img 4 cap 0"
    assert d.dense == ["dense 0", "dense 2", "dense 4"]
    assert d.dense_for_caption(12) == "dense 4"
    assert d.image_files[1].name == "pic_102.png"
    np.testing.assert_array_equal(d.caption_to_image, np.arange(15) // 5)
    # skipping needs the check; without it nothing is skipped
    assert load_split(root, "test", check_images=False, skip_bad_images=True).skipped == 0


def test_truncated_jpeg_passes_cheap_check_but_is_skipped_when_asked(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=3)
    write_truncated_jpeg(root / "images" / "cut.jpg")
    mapping = json.loads((root / "id_mapping.json").read_text())
    mapping["101"] = "cut.jpg"
    (root / "id_mapping.json").write_text(json.dumps(mapping))
    # without skipping only verify() runs: the split loads and decode_image names the file
    d = load_split(root, "test")
    assert d.n_images == 3 and d.skipped == 0
    with pytest.raises(DataError, match=r"cut\.jpg: unreadable image"):
        decode_image(d.image_files[1], 8)
    # with skipping the image is fully decoded, found bad and dropped with its captions
    d = load_split(root, "test", skip_bad_images=True)
    assert d.skipped == 1 and d.skipped_ids == ["101"]
    assert d.image_ids == ["100", "102"] and d.n_captions == 10
    assert d.captions[5] == "img 2 cap 0" and d.dense == ["dense 0", "dense 2"]


def test_skip_all_images_is_an_error(tmp_path: Path) -> None:
    root = make_data(tmp_path / "d", n=2)
    with pytest.raises(DataError, match="none of the 2 images"):
        load_split(root, "test", image_dir=tmp_path / "empty", skip_bad_images=True)


def test_data_error_is_value_error() -> None:
    assert issubclass(DataError, ValueError)


# --------------------------------------------------------------------------- decode_image


def reference_decode(path: Path, size: int) -> np.ndarray:
    """What the trainer's image store has always computed: RGB, bicubic to ``size``."""
    with Image.open(path) as im:
        im = im.convert("RGB")
        if im.size != (size, size):
            im = im.resize((size, size), Image.Resampling.BICUBIC)
        return np.asarray(im, dtype=np.uint8).transpose(2, 0, 1)


@pytest.mark.parametrize("size", [8, 16])
def test_decode_image(tmp_path: Path, size: int) -> None:
    rng = np.random.default_rng(1)
    rgb = tmp_path / "rgb.png"
    Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(rgb)
    grey = tmp_path / "grey.png"
    Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8)).save(grey)
    for path in (rgb, grey):
        out = decode_image(path, size)
        assert isinstance(out, torch.Tensor) and out.dtype == torch.uint8
        assert out.shape == (3, size, size)
        np.testing.assert_array_equal(out.numpy(), reference_decode(path, size))
    from seps.data import decode_image as exported

    assert exported is decode_image


def test_decode_image_truncated_jpeg_names_file(tmp_path: Path) -> None:
    path = tmp_path / "some" / "cut.jpg"
    write_truncated_jpeg(path)
    with pytest.raises(DataError) as e:
        decode_image(path, 32)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: unreadable image (OSError: image file is truncated")
    assert "fix or remove it" in msg
    assert "--skip-bad-images (Python: skip_bad_images=True) to drop it with its captions" in msg


def test_decode_image_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "gone.png"
    with pytest.raises(DataError, match=r"gone\.png: image file missing.*--skip-bad-images"):
        decode_image(path, 8)


# --------------------------------------------------------------------------- real Flickr30K


def test_real_f30k_test_split(tmp_path: Path) -> None:
    if not (F30K / "test_caps.txt").is_file():
        pytest.skip(f"real Flickr30K caption files not found in {F30K}")
    mapping = json.loads((F30K / "id_mapping.json").read_text())
    raw_ids = (F30K / "test_ids.txt").read_text().split()
    img_dir = tmp_path / "images"
    for img_id in dict.fromkeys(raw_ids):  # placeholder images, named per id_mapping
        write_png(img_dir / mapping[img_id], size=2)

    d = load_split(F30K, "test", image_dir=img_dir)
    assert d.name == "f30k"
    assert d.n_images == 1000 and d.n_captions == 5000 and d.skipped == 0
    assert d.captions == (F30K / "test_caps.txt").read_text(encoding="utf-8").splitlines()
    assert d.image_ids == raw_ids[::5]
    assert d.image_files[0] == img_dir / mapping[raw_ids[0]]
    dense = [json.loads(x)["text"] for x in (F30K / "f30k_test.jsonl").read_text().splitlines()]
    assert d.dense == dense and len(d.dense) == 1000
    assert len(load_split(F30K, "test", image_dir=img_dir, dense_per="image").dense_texts) == 1000
    per_caption = d.dense_texts
    assert len(per_caption) == 5000
    assert per_caption[5 * 17 + 3] == dense[17] == d.dense_for_caption(5 * 17 + 3)
    words = np.mean([len(c.split()) for c in d.captions]), np.mean([len(t.split()) for t in dense])
    assert 10 < words[0] < 17 and 80 < words[1] < 120  # SPEC: about 13 and 100 words

    # without images the paths are still built; with checking, the missing folder is named
    assert load_split(F30K, "test", check_images=False).n_images == 1000
    with pytest.raises(DataError, match="image file missing"):
        load_split(F30K, "test", image_dir=tmp_path / "no_images")
