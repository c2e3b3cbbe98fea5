"""A world's card: how much a profile's data give away without pixels, and how much room
its heads have, measured on the data the runs train on.

A *world* is a profile (``standard``, ``standard-noisy``: the same images and sparse
captions, other dense-caption noise). Its verdicts can depend on how much the dense
captions give away, which is why every report and the scorecard show each world's card
(:mod:`seps.report.world_card`) beside Flickr30K's. :func:`measure_world` measures, on
the test split of each seed's draw (the set a ``laps`` run of that seed trains and
evaluates on, generated as the runner would):

- the generic BM25 matcher's rSum (:func:`seps.data.lexical.text_only_recalls`) and the
  vocabulary-aware matcher's (the reports' text-only rSum);
- the share of sparse test captions whose exact text also captions another image;
- chance and the scene-reading oracle (:mod:`seps.data.oracle`);
- the object AUC of SPEC.md's image prior ``s_im`` (step 2: the cosine of each patch
  token with the image's mean token) on the frozen tokens of the seed's pretrained build,
  object patches against background ones, over the first :data:`AUC_IMAGES` test images.

and, when ``../shared/data/f30k`` (Flickr30K's real test captions and LLaVA dense
captions, no images) is there, the same text measures of Flickr30K. The card is written
to ``<results>/_worlds/<profile>.json`` with what it was computed from (data version,
build fingerprints), and :mod:`seps.report.world_card` reads it with the records.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..experiments.definitions import Profile, load_matrix, resolve
from ..io.store import atomic_write_text
from ..versioning.version import data_version

__all__ = ["AUC_IMAGES", "F30K", "WORLD_DIR", "duplicate_share", "measure_world", "world_path"]

#: Where a store keeps its world cards.
WORLD_DIR = "_worlds"
#: Test images per draw whose patches the ``s_im`` AUC ranks (as the regime's pilot did).
AUC_IMAGES = 300
#: Flickr30K's real test captions beside the checkout (no images).
F30K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "f30k"


def world_path(results: str | Path, profile: str) -> Path:
    return Path(results) / WORLD_DIR / f"{profile}.json"


def duplicate_share(captions: Sequence[str], per_image: int) -> float:
    """The share of captions whose exact text (case and spacing folded) is also a caption
    of another image."""
    owners: dict[str, set[int]] = {}
    for i, c in enumerate(captions):
        owners.setdefault(" ".join(c.lower().split()), set()).add(i // per_image)
    shared = sum(len(owners[" ".join(c.lower().split())]) > 1 for c in captions)
    return shared / len(captions) if captions else 0.0


def _text_measures(path: Path, split: str = "test") -> dict[str, float]:
    from ..data.layout import load_split
    from ..data.lexical import text_only_recalls
    from ..data.oracle import (
        chance_recalls,
        expected_recalls,
        oracle_scores,
        scenes_of,
        synthetic_seed,
    )

    data = load_split(path, split, dense_per="image", check_images=False)
    per_image = data.n_captions // data.n_images
    out = {
        "bm25_rsum": text_only_recalls(path, split, matcher="bm25")["rsum"],
        "duplicate_share": duplicate_share(data.captions, per_image),
        "chance_rsum": chance_recalls(data.n_images, per_image)["rsum"],
        "images": float(data.n_images),
    }
    seed = synthetic_seed(path)
    if seed is not None:
        out["vocabulary_rsum"] = text_only_recalls(path, split, matcher="synthetic-vocabulary")[
            "rsum"
        ]
        scores = oracle_scores(data.captions, scenes_of(seed, data.image_ids))
        out["oracle_rsum"] = expected_recalls(scores, per_image)["rsum"]
    return out


def _s_im_auc(cfg: Any, path: Path, n: int = AUC_IMAGES) -> float:
    """The object AUC of ``s_im`` on the frozen tokens of ``cfg``'s build (module
    docstring): 0.5 is chance, below it the prior prefers the background."""
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
    from scipy.stats import mannwhitneyu

    from ..data.layout import decode_image, load_split
    from ..model.encoders import build_image_encoder
    from ..train.controls import oracle_table
    from ..train.data import IMAGENET_MEAN, IMAGENET_STD
    from ..train.pretrain import ensure_pretrained

    build = ensure_pretrained(cfg.pretrain_build, progress=False)
    enc = build_image_encoder(cfg.backbone, 64, image_size=cfg.image_size)
    enc.visual_encoder.load_state_dict(load_file(str(build / "vision.safetensors")))
    enc.eval()
    split = load_split(path, "test", dense_per="image")
    files = split.image_files[:n]
    imgs = torch.stack([decode_image(f, cfg.image_size) for f in files]).float() / 255
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        tokens = enc.backbone_tokens((imgs - mean) / std)[:, 1:]  # the patches, no [CLS]
    x = F.normalize(tokens, dim=-1)
    s_im = (F.normalize(tokens.mean(1), dim=-1)[:, None] * x).sum(-1).numpy()
    per_image = len(split.captions) // len(split.image_ids)
    table = oracle_table(path, split.image_ids[:n], split.captions[: per_image * n], x.shape[1])
    obj = table.cover[:n].any(1).numpy()
    stat = mannwhitneyu(s_im[obj], s_im[~obj]).statistic
    return float(stat / (obj.sum() * (~obj).sum()))


def measure_world(
    profile: Profile, seeds: Sequence[int], results: str | Path, root: Path | None = None
) -> dict[str, Any]:
    """The card of ``profile`` over the draws of ``seeds`` (module docstring), written to
    :func:`world_path`; returns it."""
    from ..runs.prebuild import prebuild_pretraining
    from ..train.data import prepare_data_dir
    from ..train.pretrain import pretrained_dir

    matrix = load_matrix("controls", root)
    laps = next(r for r in matrix.runs if r.id == "laps")
    draws = []
    for seed in seeds:
        cfg, _ = resolve(laps, profile, seed)
        cfg.progress = False
        prebuild_pretraining(cfg, progress=False)
        path = prepare_data_dir(cfg)
        draw = {"seed": seed, "build": cfg.pretrain_build, **_text_measures(path)}
        if cfg.pretrain_build is not None:  # a profile without pretraining has no prior to rank
            draw["s_im_auc"] = _s_im_auc(cfg, path)
            draw["build_folder"] = pretrained_dir(cfg.pretrain_build).name
        draws.append(draw)
    card: dict[str, Any] = {
        "schema": "seps-bench/world/1",
        "profile": profile.name,
        "data_version": data_version(),
        "dense_noise": resolve(laps, profile, seeds[0])[0].dense_noise,
        "draws": draws,
    }
    if (F30K / "test_caps.txt").is_file():
        card["flickr30k"] = _text_measures(F30K)
    path = world_path(results, profile.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(card, indent=1, sort_keys=True) + "\n")
    return card
