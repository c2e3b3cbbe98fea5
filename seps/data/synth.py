"""Built-in synthetic image-text dataset in the official SEPS data layout.

`generate_synthetic` renders small RGB scenes of coloured geometric shapes on
textured backgrounds and writes, for each image, five short *sparse* captions
(like Flickr30K/COCO human captions) and one long *dense* caption (like the
LLaVA descriptions SEPS uses), in exactly the files the real loaders read (see
``SPEC.md``, "Official data layout")::

    <out>/{train,dev,test}_caps.txt     5 sparse captions per image, image i owns lines 5i..5i+4
    <out>/{split}_ids.txt               one image id per caption line (each id repeated 5 times)
    <out>/<name>_{split}.jsonl          one dense caption per image: {"text": ...}, image order
    <out>/id_mapping.json               {"<image id>": "<file name>"} for all splits
    <out>/images/<file name>            RGB PNG, image_size x image_size
    <out>/hallucinated_{split}.json     sorted list of in-split image indices whose dense
                                        caption states something false (empty when p = 0)
    <out>/meta.json                     generator version, seed, arguments, vocabulary and
                                        per-split statistics

Image ids are global running integers ``"0" .. "n_images-1"`` (train first, then
dev, then test), file names ``<name>_<id:06d>.png``.

The scenes (objects on a textured background) are sampled and drawn by
`seps.data.scenes`; the sparse and dense caption grammars and the kinds of
hallucination are documented and implemented in `seps.data.captions`, the MLLM-like
noise of the dense captions in `seps.data.noise`.

Dense-caption noise (default on): with ``dense_noise=p`` (default
`DEFAULT_DENSE_NOISE` = 0.12) every dense caption describes the image as an MLLM
would, imperfectly: about ``p`` of its object mentions are hallucinated (CHAIR_i), small
objects are often left out, some attributes, cells and background colours are wrong and
the wording varies (`seps.data.noise`). Each caption's noise comes from its own stream
``(seed, image id, 2)``, so images and sparse captions do not depend on ``p``.
``dense_noise=0`` writes the plain, perfect captions, byte for byte those of generator
version 1.0. ``meta.json`` records ``p`` (``args.dense_noise``) and, per split
(``dense_noise_counts``), the realised counts and rates: object mentions, hallucinated
(misnamed + inserted) mentions, omitted objects, attribute, position and background
errors.

Hallucination: with ``hallucination=p`` exactly ``round(p * n_split)`` images of
each split (chosen at random) get a dense caption of a *stated* scene that
differs from the drawn one in one way (see `seps.data.captions`). Sparse captions
and images do not depend on ``p``: two runs with the same seed and different ``p``
differ only in the dense captions of the hallucinated images. ``meta.json`` counts
the kinds per split. This whole-caption hallucination is independent of the dense-caption
noise above (which, on a hallucinated image, perturbs the stated scene).

Grammar v2 (opt-in, ``grammar="v2"``; default ``"v1"`` writes exactly what it wrote
before, ``meta.json`` included): distinct, Flickr-length sparse captions
(`seps.data.captions`, "Sparse captions, grammar v2") and dense captions that state
positions and sizes vaguely or not at all (`seps.data.noise`); the dense captions always
go through the noise model (``dense_noise=0`` then only adds the vagueness). Images do not
depend on the grammar. ``meta.json`` records ``args.grammar`` when it is not ``"v1"``.

Statistics (default arguments: ``n_images=5000, seed=0, image_size=64``)
-----------------------------------------------------------------------
Words are whitespace-separated tokens (so the final " ." of a sparse caption
counts, as it does in the Flickr30K figure of about 13.5):

- sparse captions: mean 10.4 words, min 3, max 18 (Flickr30K test: 13.5);
  47% of the 25,000 sparse captions are strings that also caption another image
  (25% in a 1,000-image set), so exact-duplicate hard negatives are common;
- dense captions (default noise 0.12): mean 88.2 words, min 41, max 145, 5th-95th
  percentile 60-119 (Flickr30K LLaVA test captions: 100.4, 56-145); with
  ``dense_noise=0``: mean 84.7, min 52, max 115, 56-106; hallucination changes these by
  < 1 word;
- dense-caption noise at 0.12, over the 5,000 captions: 12.1% of the 10,960 object
  mentions hallucinated (601 misnamed, 730 inserted), 18.4% of the objects omitted (32.1%
  of the small ones), 12.3% / 12.2% of the correctly named objects with a wrong attribute /
  cell, 12.0% of the backgrounds with a wrong colour;
- objects per image: 20.4% / 29.2% / 29.7% / 20.7% with 1 / 2 / 3 / 4 objects (mean 2.51).

Generation of the 5,000 images takes 6-9 s in one process on this 2-core machine, 1-2 s
more with the dense-caption noise (about 31 MB on disk).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..io.store import clean_stale_temps
from .captions import CAPTIONS_PER_IMAGE, GRAMMARS, sparse_captions
from .dense_captions import dense_caption, hallucinate
from .noise import MAX_NOISE, NOISE_STREAM, NoiseCounts, clean_counts, perturb_scene, summarize
from .scenes import (
    BACKGROUND_COLOURS,
    BACKGROUND_KINDS,
    CELL_NAMES,
    COLOURS,
    SHAPES,
    SIZES,
    Obj,
    Scene,
    render_scene,
    sample_scene,
)

# The scene and caption names are re-exported: they were defined here before the split.
__all__ = [
    "BACKGROUND_COLOURS",
    "BACKGROUND_KINDS",
    "COLOURS",
    "DEFAULT_DENSE_NOISE",
    "GENERATOR_VERSION",
    "SHAPES",
    "SPLITS",
    "Obj",
    "Scene",
    "dense_caption",
    "generate_synthetic",
    "is_synthetic_dir",
    "render_scene",
    "sample_scene",
    "sparse_captions",
]

GENERATOR_VERSION = "1.1"  # 1.1: dense_noise (1.0 wrote the dense_noise=0 captions)
DEFAULT_DENSE_NOISE = 0.12  # CHAIR_i of LLaVA-1.5 is about 0.10-0.15 (seps.data.noise)
SPLITS = ("train", "dev", "test")


# --------------------------------------------------------------------------- writing


def _split_sizes(n_images: int, splits: Sequence[float]) -> list[int]:
    if len(splits) != 3:
        raise ValueError(f"splits must be 3 fractions (train, dev, test), got {splits!r}")
    if any(f < 0 for f in splits) or not math.isclose(sum(splits), 1.0, abs_tol=1e-6):
        raise ValueError(f"splits must be non-negative and sum to 1, got {splits!r}")
    n_train = round(splits[0] * n_images)
    n_dev = round(splits[1] * n_images)
    sizes = [n_train, n_dev, n_images - n_train - n_dev]
    if min(sizes) < 1:
        raise ValueError(
            f"n_images={n_images} with splits={tuple(splits)} gives split sizes {sizes}; "
            "every split needs at least one image"
        )
    return sizes


def _word_stats(texts: Sequence[str]) -> dict[str, float]:
    lens = np.array([len(t.split()) for t in texts])
    return {"mean": round(float(lens.mean()), 3), "min": int(lens.min()), "max": int(lens.max())}


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def generate_synthetic(
    out_dir: str | Path,
    n_images: int = 5000,
    seed: int = 0,
    image_size: int = 64,
    hallucination: float = 0.0,
    splits: Sequence[float] = (0.8, 0.1, 0.1),
    name: str = "synth",
    dense_noise: float = DEFAULT_DENSE_NOISE,
    grammar: str = "v1",
) -> Path:
    """Render a synthetic dataset into ``out_dir`` in the official layout; return its path.

    The generator never writes into a folder that holds anything: ``out_dir`` must be new
    or empty (else a ``ValueError`` names it), so no file of the user's is overwritten.
    The set is rendered into a private folder beside it (``.<name>.<pid>.tmp``) and renamed
    into place when complete, so a killed generation leaves no half-written dataset
    (and :func:`is_synthetic_dir` is true exactly for complete ones).

    Args:
        out_dir: target folder, new or empty.
        n_images: total number of images over the three splits.
        seed: seed of every random choice; the output is a pure function of the arguments.
        image_size: side of the square PNG images in pixels (>= 16).
        hallucination: fraction ``p`` in [0, 1] of dense captions per split that state a
            false object or attribute (exactly ``round(p * n_split)`` of them).
        splits: fractions of (train, dev, test); each split must get at least one image.
        name: dataset name used for ``<name>_{split}.jsonl`` and the image file names.
        dense_noise: MLLM-like noise level ``p`` in ``[0, 0.5]`` of every dense caption
            (`seps.data.noise`: about ``p`` of the object mentions hallucinated, small
            objects omitted with probability ``min(2p, 0.5)``, wrong attributes with
            probability ``p / 2``, varied wording); 0 writes the plain captions.
        grammar: ``"v1"`` (default: the captions of generator version 1.1, byte for byte)
            or ``"v2"``: distinct, Flickr-length sparse captions and dense captions with
            vague positions and sizes (module docstring, "Grammar v2").

    Image ``i`` of the whole set (train first, then dev, then test) has id ``str(i)``.
    See `seps.data.captions` for the grammars and the module docstring for the statistics.
    """
    if n_images < 3:
        raise ValueError(f"n_images must be >= 3 (one per split), got {n_images}")
    if image_size < 16:
        raise ValueError(f"image_size must be >= 16, got {image_size}")
    if not 0.0 <= hallucination <= 1.0:
        raise ValueError(f"hallucination must be in [0, 1], got {hallucination}")
    if not 0.0 <= dense_noise <= MAX_NOISE:
        raise ValueError(f"dense_noise must be in [0, {MAX_NOISE}], got {dense_noise}")
    if grammar not in GRAMMARS:
        raise ValueError(f"grammar: expected one of {', '.join(GRAMMARS)}, got {grammar!r}")
    if not name or any(ch in name for ch in "/\\") or name != name.strip():
        raise ValueError(f"invalid dataset name {name!r}")
    sizes = _split_sizes(n_images, splits)
    target = Path(out_dir)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        found = ", ".join(sorted(p.name for p in target.iterdir())[:4]) if target.is_dir() else ""
        raise ValueError(
            f"{target}: the synthetic generator writes only into a new or empty folder, and "
            f"this one {'holds ' + found + ', ...' if found else 'is a file'}; choose another "
            "folder (nothing was written)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(target.parent, recursive=False)  # a generation killed earlier
    out = target.parent / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(out, ignore_errors=True)
    try:
        _render_into(
            out, sizes, seed, image_size, hallucination, splits, name, dense_noise, grammar
        )
        try:
            os.rename(out, target)  # onto a missing or empty folder: atomic
        except OSError:
            if not is_synthetic_dir(target):  # not a concurrent twin's complete set
                raise
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return target


def is_synthetic_dir(path: str | Path) -> bool:
    """True when ``path`` holds a complete set written by :func:`generate_synthetic`
    (its ``meta.json`` names this generator; the file is written last)."""
    try:
        meta = json.loads((Path(path) / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("generator") == "seps.data.synth"


def _render_into(
    out: Path,
    sizes: list[int],
    seed: int,
    image_size: int,
    hallucination: float,
    splits: Sequence[float],
    name: str,
    dense_noise: float,
    grammar: str = "v1",
) -> None:
    """Write every file of the set into ``out`` (``meta.json`` last)."""
    n_images = sum(sizes)
    img_dir = out / "images"
    img_dir.mkdir(parents=True, exist_ok=True)

    id_mapping: dict[str, str] = {}
    split_stats: dict[str, Any] = {}
    start = 0
    for s_idx, (split, n_split) in enumerate(zip(SPLITS, sizes, strict=True)):
        n_hall = round(hallucination * n_split)
        hall_rng = np.random.default_rng([seed, 1_000_003, s_idx])
        hall_set = set(hall_rng.choice(n_split, size=n_hall, replace=False).tolist())
        caps: list[str] = []
        ids: list[str] = []
        dense: list[str] = []
        n_objects: list[int] = []
        kinds: dict[str, int] = {"colour": 0, "shape": 0, "size": 0, "extra": 0}
        noise: list[NoiseCounts] = []
        for local in range(n_split):
            gid = start + local
            rng = np.random.default_rng([seed, gid])
            scene = sample_scene(rng)
            image = render_scene(scene, image_size, rng)
            file_name = f"{name}_{gid:06d}.png"
            image.save(img_dir / file_name, format="PNG")
            id_mapping[str(gid)] = file_name
            caps.extend(sparse_captions(scene, rng, grammar=grammar))
            ids.extend([str(gid)] * CAPTIONS_PER_IMAGE)
            stated = scene
            if local in hall_set:
                stated, info = hallucinate(scene, np.random.default_rng([seed, gid, 1]))
                kinds[info["kind"]] += 1
            if dense_noise > 0 or grammar != "v1":
                noise_rng = np.random.default_rng([seed, gid, NOISE_STREAM])
                described, style, counts = perturb_scene(
                    stated, dense_noise, noise_rng, grammar=grammar
                )
                dense.append(dense_caption(described, noise_rng, style))
            else:  # the plain caption, drawn from the image's generator as in version 1.0
                dense.append(dense_caption(stated, rng))
                counts = clean_counts(stated)
            noise.append(counts)
            n_objects.append(len(scene.objects))
        start += n_split

        _write_lines(out / f"{split}_caps.txt", caps)
        _write_lines(out / f"{split}_ids.txt", ids)
        _write_lines(out / f"{name}_{split}.jsonl", [json.dumps({"text": t}) for t in dense])
        (out / f"hallucinated_{split}.json").write_text(
            json.dumps(sorted(hall_set)) + "\n", encoding="utf-8"
        )
        hist = np.bincount(np.array(n_objects), minlength=5)[1:]
        split_stats[split] = {
            "images": n_split,
            "captions": len(caps),
            "sparse_words": _word_stats(caps),
            "dense_words": _word_stats(dense),
            "objects_per_image": {str(k + 1): int(c) for k, c in enumerate(hist)},
            "hallucinated": n_hall,
            "hallucination_kinds": kinds,
            "dense_noise_counts": summarize(noise),
        }

    (out / "id_mapping.json").write_text(json.dumps(id_mapping) + "\n", encoding="utf-8")
    meta = {
        "generator": "seps.data.synth",
        "version": GENERATOR_VERSION,
        "seed": seed,
        "args": {
            "n_images": n_images,
            "seed": seed,
            "image_size": image_size,
            "hallucination": hallucination,
            "splits": list(splits),
            "name": name,
            "dense_noise": float(dense_noise),
            # written only when not v1, so that v1 sets stay byte-identical
            **({"grammar": grammar} if grammar != "v1" else {}),
        },
        "vocabulary": {
            "shapes": list(SHAPES),
            "colours": list(COLOURS),
            "sizes": list(SIZES),
            "cells": list(CELL_NAMES),
            "background_kinds": list(BACKGROUND_KINDS),
            "background_colours": list(BACKGROUND_COLOURS),
        },
        "word_count": "whitespace-separated tokens",
        "splits": split_stats,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
