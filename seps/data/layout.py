"""Loader of the official SEPS data layout (Flickr30K ``f30k``, COCO ``coco``, synthetic).

One code path reads every dataset (see ``SPEC.md``, "Official data layout")::

    <data_dir>/{split}_caps.txt        one sparse caption a line, 5 a image, image i owns 5i..5i+4
    <data_dir>/{split}_ids.txt         image ids: one a caption (each image's id on 5
                                       consecutive lines, as Flickr30K's test_ids.txt) or one
                                       a image
    <data_dir>/<name>_{split}.jsonl    one dense caption a line, {"text": ...}, image order
                                       (other keys, e.g. "model_id", are ignored); the
                                       official files have none for ``dev`` (see
                                       ``require_dense`` of `load_split`)
    <data_dir>/id_mapping.json         {"<image id>": "<file name>"}; ids are its keys
    <image_dir>/<file name>            default image_dir: <data_dir>/images

Every inconsistency raises `DataError` (a `ValueError`) whose message starts with the
offending file (``path:line:`` where a line is concerned) and says what was expected.
Image files are checked cheaply at load time (``verify()``) and decoded later by
`decode_image`, which raises a `DataError` naming the file when the decode fails.
Lines are numbered from 1. A final newline (or trailing blank lines) is allowed; an empty
line inside a file is an error. Lines are split on ``\\n`` only (``\\r\\n`` accepted), never
on other Unicode line separators, so a caption containing one stays one caption.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from PIL import Image

from .augment import FLIP_P, random_resized_crop_box

if TYPE_CHECKING:
    import torch

__all__ = ["CAPTIONS_PER_IMAGE", "DataError", "SplitData", "decode_image", "load_split"]

CAPTIONS_PER_IMAGE = 5


class DataError(ValueError):
    """Bad or inconsistent data files; the message names the file (and line) at fault."""


@dataclass
class SplitData:
    """One split of a dataset in the official layout, after optional skipping of bad images.

    Attributes:
        name: dataset name (the ``<name>`` of ``<name>_{split}.jsonl``).
        split: split name (``train``, ``dev``, ``test``, ``testall``...).
        data_dir: folder holding the caption, id, jsonl and mapping files.
        image_dir: folder holding the image files.
        captions: ``5 * n_images`` sparse captions; image ``i`` owns ``5i .. 5i+4``.
        image_ids: ``n_images`` image ids (keys of ``id_mapping.json``), one per image.
        image_files: ``n_images`` image paths, ``image_dir / id_mapping[id]``.
        dense: ``n_images`` dense captions, one per image, in image order (empty when
            ``has_dense`` is False).
        caption_to_image: int64 array of shape ``(5 * n_images,)``, ``j -> j // 5``.
        dense_per: ``"caption"`` or ``"image"``: the granularity of `dense_texts`.
        skipped: number of images dropped by ``skip_bad_images`` (with their captions).
        skipped_ids: the ids of those images, in file order.
        has_dense: False when the split has no dense-caption file and the loader was told
            not to require one (``require_dense=False``): ``dense`` is then empty.
    """

    name: str
    split: str
    data_dir: Path
    image_dir: Path
    captions: list[str]
    image_ids: list[str]
    image_files: list[Path]
    dense: list[str]
    caption_to_image: np.ndarray
    dense_per: Literal["caption", "image"] = "caption"
    skipped: int = 0
    skipped_ids: list[str] = field(default_factory=list)
    has_dense: bool = True

    @property
    def n_images(self) -> int:
        return len(self.image_ids)

    @property
    def n_captions(self) -> int:
        return len(self.captions)

    def dense_for_caption(self, j: int) -> str:
        """Dense caption of caption ``j``'s ground-truth image (the official pairing)."""
        return self.dense[int(self.caption_to_image[j])]

    @property
    def dense_texts(self) -> list[str]:
        """Dense captions at the ``dense_per`` granularity.

        ``"caption"``: ``n_captions`` texts, each image's dense caption repeated for its 5
        captions (what the official loader feeds with each caption); ``"image"``: `dense`.
        """
        if not self.has_dense:
            raise DataError(
                f"{self.data_dir}: the {self.split} split has no dense-caption file "
                f"(<name>_{self.split}.jsonl); expected one to read its dense captions"
            )
        if self.dense_per == "image":
            return list(self.dense)
        return [self.dense[i] for i in self.caption_to_image.tolist()]


# --------------------------------------------------------------------------- file reading


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found; expected {what}") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory; expected {what}") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None


def _read_lines(path: Path, what: str) -> list[str]:
    """Lines of a text file without line ends; trailing blank lines dropped, inner ones fatal."""
    lines = [line.removesuffix("\r") for line in _read_text(path, what).split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    for k, line in enumerate(lines):
        if not line.strip():
            raise DataError(f"{path}:{k + 1}: empty line; expected {what}")
    return lines


def _infer_name(data_dir: Path, split: str) -> str:
    suffix = f"_{split}.jsonl"
    found = sorted(p.name for p in data_dir.glob(f"*{suffix}") if p.is_file())
    if not found:
        raise DataError(
            f"{data_dir / ('<name>' + suffix)}: file not found; expected one dense-caption "
            f"file <name>{suffix} in {data_dir} (or pass name=)"
        )
    if len(found) > 1:
        raise DataError(
            f"{data_dir}: several dense-caption files match *{suffix} ({', '.join(found)}); "
            "pass name= to choose one"
        )
    return found[0][: -len(suffix)]


def _dense_file_present(data_dir: Path, split: str, name: str | None) -> bool:
    """Whether the dense-caption file of ``split`` exists (``name``: any ``*_{split}.jsonl``)."""
    if name is not None:
        return (data_dir / f"{name}_{split}.jsonl").is_file()
    return any(p.is_file() for p in data_dir.glob(f"*_{split}.jsonl"))


def _image_ids(ids_path: Path, n_caps: int, caps_path: Path) -> tuple[list[str], list[int]]:
    """Per-image ids and the 1-based ids-file line each came from."""
    ids = [x.strip() for x in _read_lines(ids_path, "one image id a line")]
    n_img = n_caps // CAPTIONS_PER_IMAGE
    if len(ids) == n_caps:  # one id a caption, repeated 5 times per image
        for start in range(0, n_caps, CAPTIONS_PER_IMAGE):
            for k in range(start + 1, start + CAPTIONS_PER_IMAGE):
                if ids[k] != ids[start]:
                    raise DataError(
                        f"{ids_path}:{k + 1}: id {ids[k]!r} differs from {ids[start]!r} on "
                        f"line {start + 1}; expected each image id on {CAPTIONS_PER_IMAGE} "
                        f"consecutive lines (one per caption of {caps_path.name})"
                    )
        idx = list(range(0, n_caps, CAPTIONS_PER_IMAGE))
        return [ids[k] for k in idx], [k + 1 for k in idx]
    if len(ids) == n_img:  # one id an image
        return ids, list(range(1, n_img + 1))
    raise DataError(
        f"{ids_path}: {len(ids)} lines; expected {n_caps} (one id per caption line of "
        f"{caps_path.name}, each image's id repeated {CAPTIONS_PER_IMAGE} times) or {n_img} "
        "(one id per image)"
    )


def _dense(path: Path, n_img: int, caps_path: Path) -> list[str]:
    what = 'one JSON object a line with a "text" key'
    texts = []
    for k, line in enumerate(_read_lines(path, what)):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{k + 1}: malformed JSON ({e.msg}); expected {what}") from None
        if not isinstance(obj, dict) or "text" not in obj:
            raise DataError(f'{path}:{k + 1}: missing "text" key; expected {what}')
        if not isinstance(obj["text"], str):
            raise DataError(
                f'{path}:{k + 1}: "text" is {type(obj["text"]).__name__}; expected a string'
            )
        texts.append(obj["text"])
    if len(texts) != n_img:
        raise DataError(
            f"{path}: {len(texts)} dense captions; expected {n_img}, one per image "
            f"({caps_path.name} has {n_img * CAPTIONS_PER_IMAGE} captions = {n_img} images x "
            f"{CAPTIONS_PER_IMAGE})"
        )
    return texts


def _id_mapping(path: Path) -> dict[str, str]:
    try:
        mapping = json.loads(_read_text(path, 'a JSON object {"<image id>": "<file name>"}'))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None
    if not isinstance(mapping, dict):
        raise DataError(f'{path}: expected a JSON object {{"<image id>": "<file name>"}}')
    return mapping


def _unreadable(e: Exception) -> str:
    """The reason part of an unreadable-image message, on one line whatever PIL says."""
    return f"unreadable image ({type(e).__name__}: {' '.join(str(e).split())})"


def _image_problem(path: Path, decode: bool = False) -> str | None:
    """None if ``path`` is a readable image, else a short reason.

    ``verify()`` only reads headers and markers (and PNG checksums), so a JPEG cut short
    passes it; ``decode=True`` also decodes the pixels to catch that, at the cost of a full
    decode per image.
    """
    if not path.is_file():
        return "image file missing"
    try:
        with Image.open(path) as im:
            im.verify()
        if decode:  # verify() leaves the image unusable: open again to decode
            with Image.open(path) as im:
                im.load()
    except Exception as e:  # PIL raises many types (OSError, SyntaxError, ValueError...)
        return _unreadable(e)
    return None


def decode_image(path: Path, size: int, rng: np.random.Generator | None = None) -> torch.Tensor:
    """Decode one image as a uint8 RGB tensor ``(3, size, size)``, bicubic-resized if needed.

    With ``rng``, the official training augmentation instead (`seps.data.augment`): a
    random resized crop of the original image (bicubic, to ``size x size``), then a
    horizontal flip with probability 0.5, drawn in that order from ``rng``.

    `load_split` only runs PIL's cheap ``verify()``, which reads headers and markers but
    not the pixel data, so a file cut short can pass it and fail only here. In a split of
    thousands of images a bare ``OSError: image file is truncated`` cannot be traced back
    to its file, so every failure is re-raised as a one-line `DataError` that names the
    file and the way out.

    Raises:
        DataError: ``path`` is missing or cannot be decoded.
    """
    import torch  # here, not at module level: the loader alone does not need torch

    path = Path(path)
    skip = "--skip-bad-images (Python: skip_bad_images=True) to drop it with its captions"
    if not path.is_file():
        raise DataError(
            f"{path}: image file missing; check --image-dir (Python: image_dir=), or pass {skip}"
        )
    try:
        with Image.open(path) as im:
            rgb = im.convert("RGB")
            if rng is not None:
                left, top, w, h = random_resized_crop_box(*rgb.size, rng)
                rgb = rgb.crop((left, top, left + w, top + h))
                rgb = rgb.resize((size, size), Image.Resampling.BICUBIC)
                if rng.random() < FLIP_P:
                    rgb = rgb.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            elif rgb.size != (size, size):
                rgb = rgb.resize((size, size), Image.Resampling.BICUBIC)
            arr = np.asarray(rgb, dtype=np.uint8)
    except Exception as e:  # PIL raises many types (OSError, SyntaxError, ValueError...)
        raise DataError(f"{path}: {_unreadable(e)}; fix or remove it, or pass {skip}") from e
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)


# --------------------------------------------------------------------------- public loader


def load_split(
    data_dir: str | Path,
    split: str,
    name: str | None = None,
    image_dir: str | Path | None = None,
    dense_per: Literal["caption", "image"] = "caption",
    check_images: bool = True,
    skip_bad_images: bool = False,
    require_dense: bool = True,
) -> SplitData:
    """Read one split of a dataset in the official layout and check it for consistency.

    Args:
        data_dir: folder with ``{split}_caps.txt``, ``{split}_ids.txt``,
            ``<name>_{split}.jsonl`` and ``id_mapping.json``.
        split: ``train``, ``dev``, ``test``, ``testall``...
        name: dataset name of the jsonl file; inferred from the single ``*_{split}.jsonl``
            file in ``data_dir`` when None.
        image_dir: image folder; default ``<data_dir>/images``.
        dense_per: granularity of `SplitData.dense_texts` (``"caption"``: repeated for each
            caption, as the official loader does; ``"image"``: one per image).
        check_images: open and ``verify()`` every image file (PIL); when False the image
            paths are only built, not touched. ``verify()`` is cheap but does not decode
            the pixels, so an image cut short can pass it; `decode_image` then raises a
            `DataError` naming the file when the image is used.
        skip_bad_images: with ``check_images``, drop a missing or unreadable image together
            with its 5 captions and its dense caption instead of raising; the number dropped
            is `SplitData.skipped`. So that an image cut short is dropped here rather than
            failing in the middle of training, every image is then also fully decoded,
            which costs a full decode of the split at load time (only when skipping).
        require_dense: when False, a split without its dense-caption file loads with
            `SplitData.has_dense` False and no dense captions (the official files have
            none for ``dev``; its ``name`` is then the folder's name unless given). A
            malformed dense-caption file, or several candidates, is still an error.

    Raises:
        DataError: missing file; caption count not a multiple of 5; ids file neither one id
            per caption (5 equal consecutive ids per image) nor one per image; dense-caption
            count different from the image count; malformed jsonl line or missing ``"text"``;
            id absent from ``id_mapping.json``; missing or unreadable image (unless
            skipped); no image left after skipping.
        ValueError: invalid ``dense_per``.
    """
    if dense_per not in ("caption", "image"):
        raise ValueError(f"dense_per must be 'caption' or 'image', got {dense_per!r}")
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"{data_dir}: data folder not found")
    img_dir = Path(image_dir) if image_dir is not None else data_dir / "images"

    caps_path = data_dir / f"{split}_caps.txt"
    captions = _read_lines(caps_path, "one caption a line")
    n_caps = len(captions)
    if n_caps == 0 or n_caps % CAPTIONS_PER_IMAGE:
        raise DataError(
            f"{caps_path}: {n_caps} captions is not a positive multiple of "
            f"{CAPTIONS_PER_IMAGE}; expected {CAPTIONS_PER_IMAGE} captions per image"
        )
    ids_path = data_dir / f"{split}_ids.txt"
    image_ids, id_lines = _image_ids(ids_path, n_caps, caps_path)

    has_dense = require_dense or _dense_file_present(data_dir, split, name)
    if name is None:
        name = _infer_name(data_dir, split) if has_dense else data_dir.name
    dense = (
        _dense(data_dir / f"{name}_{split}.jsonl", len(image_ids), caps_path) if has_dense else []
    )

    map_path = data_dir / "id_mapping.json"
    mapping = _id_mapping(map_path)
    files = []
    for img_id, line in zip(image_ids, id_lines, strict=True):
        if img_id not in mapping:
            raise DataError(f"{ids_path}:{line}: image id {img_id!r} not found in {map_path}")
        files.append(img_dir / str(mapping[img_id]))

    keep = list(range(len(image_ids)))
    skipped_ids: list[str] = []
    if check_images:
        keep = []
        for i, (path, line) in enumerate(zip(files, id_lines, strict=True)):
            problem = _image_problem(path, decode=skip_bad_images)
            if problem is None:
                keep.append(i)
            elif skip_bad_images:
                skipped_ids.append(image_ids[i])
            else:
                raise DataError(
                    f"{path}: {problem} (image id {image_ids[i]!r}, {ids_path.name} line "
                    f"{line}); pass --image-dir to point elsewhere or --skip-bad-images "
                    "(Python: image_dir=, skip_bad_images=True)"
                )
        if not keep:
            raise DataError(f"{img_dir}: none of the {len(files)} images of {split} is readable")

    cpi = CAPTIONS_PER_IMAGE
    return SplitData(
        name=name,
        split=split,
        data_dir=data_dir,
        image_dir=img_dir,
        captions=[captions[cpi * i + k] for i in keep for k in range(cpi)],
        image_ids=[image_ids[i] for i in keep],
        image_files=[files[i] for i in keep],
        dense=[dense[i] for i in keep] if has_dense else [],
        caption_to_image=np.arange(cpi * len(keep), dtype=np.int64) // cpi,
        dense_per=dense_per,
        skipped=len(skipped_ids),
        skipped_ids=skipped_ids,
        has_dense=has_dense,
    )
