"""Pilot (docs/regime.md): can the scenes or the vision objective make ``s_im`` favour objects?

SPEC.md step 2 scores each patch by its cosine with the image's mean patch. On the
committed scenes this ranks object patches below background (AUC 0.02,
``scripts/pilot_selection_saliency.py``). This script trains a fresh ``tiny-vit-128`` for
a few hundred steps on a variant of the scenes and of the per-patch targets, and prints
that AUC on 300 held-out scenes of the same variant every 100 steps, so that a variant
can be judged in minutes instead of a 35-minute build.

Variants (all monkeypatched here; the committed generator is untouched):

- ``--scene base``: the committed scenes (1-4 objects in a 3x3 grid);
  ``--scene main --main-radius R``: one object of radius ``R`` (fraction of the image
  side) in the centre cell, the photo's subject, plus 0-3 small objects in the corners.
- ``--clutter none|coarse|fine``: paste 4-8 (coarse, 15-45% of the side) or 14-21 (fine,
  10-30%) rectangles of other background textures over the background, as real
  backgrounds are not one texture.
- ``--targets cell|objects-only|cover``: every patch names its cell's object or "none"
  (the committed objective); only patches of occupied cells are labelled; only patches
  the object covers are labelled.

Usage: ``python scripts/pilot_scene_saliency.py --scene main --main-radius 0.28 --clutter
fine --targets cover``. One thread, about 2 minutes for 400 steps. A diagnostic for the
regime's design, not a test and not a benchmark.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw
from scipy.stats import mannwhitneyu
from torch import nn

import seps.data.scenes as sc
from seps.encoders import build_image_encoder
from seps.train.data import IMAGENET_MEAN, IMAGENET_STD
from seps.train.unimodal import N_CLASSES, patch_cells

RADIUS = {"small": 0.09, "large": 0.16}  # as seps.data.scenes.render_scene draws them
GRID, SIZE = 6, 48


def sample(rng: np.random.Generator, args: argparse.Namespace) -> sc.Scene:
    s0 = sc.sample_scene(rng)
    if args.scene == "base":
        return s0
    n_small = int(rng.choice(4, p=(0.25, 0.35, 0.25, 0.15)))
    corners = sorted(rng.choice([0, 2, 6, 8], size=n_small, replace=False).tolist())
    # the small objects reuse the drawn scene's shapes and colours (twice over if short)
    pool = (s0.objects + s0.objects)[:n_small]
    corners = corners[: len(pool)]
    objs = [sc.Obj(o.shape, o.colour, "small", int(c)) for o, c in zip(pool, corners, strict=True)]
    main = s0.objects[0]
    objs.insert(sum(c < 4 for c in corners), sc.Obj(main.shape, main.colour, "main", 4))
    jit = tuple((float(a), float(b)) for a, b in rng.uniform(-0.04, 0.04, size=(len(objs), 2)))
    return sc.Scene(tuple(objs), s0.bg_kind, s0.bg_colour, s0.bg_detail, jit)


def background(scene: sc.Scene, m: int, rng: np.random.Generator, clutter: str) -> np.ndarray:
    img = sc._background(scene, m, rng).copy()
    if clutter == "none":
        return img
    fine = clutter == "fine"
    for _ in range(int(rng.integers(14, 22)) if fine else int(rng.integers(4, 9))):
        kind = sc.BACKGROUND_KINDS[rng.integers(6)]
        colour = list(sc.BACKGROUND_COLOURS)[rng.integers(6)]
        detail = {"striped": "diagonal", "gradient": "left"}.get(kind, "")
        other = sc._background(sc.Scene((), kind, colour, detail, ()), m, rng)
        h, w = (rng.uniform(*((0.1, 0.3) if fine else (0.15, 0.45)), 2) * m).astype(int)
        y, x = rng.integers(0, m - h), rng.integers(0, m - w)
        img[y : y + h, x : x + w] = other[y : y + h, x : x + w]
    return img


def centre(obj: sc.Obj, jitter: tuple[float, float], r: float, m: int) -> tuple[float, float]:
    cx = min(max((obj.col + 0.5) / 3 * m + jitter[0] * m, r + 1), m - r - 1)
    cy = min(max((obj.row + 0.5) / 3 * m + jitter[1] * m, r + 1), m - r - 1)
    return cx, cy


def render(scene: sc.Scene, rng: np.random.Generator, args: argparse.Namespace):
    """The image ``(3, SIZE, SIZE)`` uint8 and each object's patch cover ``(O, GRID**2)``."""
    m = 2 * SIZE
    canvas = Image.fromarray(background(scene, m, rng, args.clutter), mode="RGB")
    draw = ImageDraw.Draw(canvas)
    band = (np.arange(m) * GRID) // m
    cover = np.zeros((len(scene.objects), GRID * GRID), dtype=bool)
    for k, (obj, jit) in enumerate(zip(scene.objects, scene.jitter, strict=True)):
        r = (RADIUS | {"main": args.main_radius})[obj.size] * m
        cx, cy = centre(obj, jit, r, m)
        sc._draw_shape(draw, obj.shape, cx, cy, r, sc.COLOURS[obj.colour])
        alone = Image.new("L", (m, m), 0)
        sc._draw_shape(ImageDraw.Draw(alone), obj.shape, cx, cy, r, (255,))
        ys, xs = np.nonzero(np.asarray(alone))
        cover[k, band[ys] * GRID + band[xs]] = True
    img = torch.from_numpy(np.array(canvas.reduce(2))).permute(2, 0, 1)
    return img, cover


def draw_set(seed: int, n: int, args: argparse.Namespace):
    cells = patch_cells(GRID).numpy()
    index = {
        "shape": {s: i + 1 for i, s in enumerate(sc.SHAPES)},
        "colour": {c: i + 1 for i, c in enumerate(sc.COLOURS)},
        "size": {"small": 1, "large": 2, "main": 2},
    }
    per_patch = {k: np.zeros((n, GRID * GRID), np.int64) for k in index}
    per_image = {k: np.zeros(n, np.int64) for k in ("bg_kind", "bg_colour", "count")}
    imgs, covered = [], []
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        scene = sample(rng, args)
        img, cover = render(scene, rng, args)
        imgs.append(img)
        covered.append(cover.any(0))
        for k, obj in enumerate(scene.objects):
            where = np.nonzero(cover[k] if args.targets == "cover" else cells == obj.cell)[0]
            for key, table in index.items():
                per_patch[key][i, where] = table[getattr(obj, key)]
        per_image["bg_kind"][i] = sc.BACKGROUND_KINDS.index(scene.bg_kind)
        per_image["bg_colour"][i] = list(sc.BACKGROUND_COLOURS).index(scene.bg_colour)
        per_image["count"][i] = len(scene.objects) - 1
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    x = (torch.stack(imgs).float() / 255 - mean) / std
    targets = {k: torch.from_numpy(v) for k, v in {**per_patch, **per_image}.items()}
    return x, targets, np.stack(covered)


def tokens_for_s_im(enc, x: torch.Tensor, which: str) -> torch.Tensor:
    """The spatial tokens ``(B, N, D)`` that ``s_im`` is measured on (``--tokens``)."""
    if which == "final":
        return enc.backbone_tokens(x)[:, 1:]
    model = enc.visual_encoder
    seen = {}
    handle = model.norm.register_forward_hook(lambda m, i, o: seen.update(x=i[0]))
    try:
        model.forward_features(x)
    finally:
        handle.remove()
    return seen["x"][:, model.num_prefix_tokens :]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scene", choices=("base", "main"), default="base")
    p.add_argument("--main-radius", type=float, default=0.28)
    p.add_argument("--clutter", choices=("none", "coarse", "fine"), default="none")
    p.add_argument("--targets", choices=("cell", "objects-only", "cover"), default="cell")
    p.add_argument(
        "--gap",
        type=float,
        default=0.0,
        help="weight of an image-level multi-label loss (the shapes and colours present) on "
        "the mean of the patch tokens, as a classifier with global average pooling",
    )
    p.add_argument(
        "--objective",
        choices=("patch", "image"),
        default="patch",
        help="patch: the per-patch targets of --targets plus [CLS]'s background and count "
        "(the recipe's); image: only image-level labels on [CLS] (the shapes and colours "
        "present, background, count), no per-patch loss, as an ImageNet classifier is trained",
    )
    p.add_argument(
        "--tokens",
        choices=("final", "prenorm"),
        default="final",
        help="measure s_im on the backbone's output (after its final LayerNorm) or on the "
        "residual stream before it (token norms then differ between patches)",
    )
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--images", type=int, default=4000)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    t0 = time.time()
    x_train, t_train, _ = draw_set(777, args.images, args)
    x_dev, _, obj = draw_set(12345, 300, args)
    enc = build_image_encoder("tiny-vit-128", 64, image_size=SIZE)
    backbone = enc.visual_encoder
    heads = nn.ModuleDict({k: nn.Linear(backbone.embed_dim, N_CLASSES[k]) for k in N_CLASSES})
    n_labels = len(sc.SHAPES) + len(sc.COLOURS)
    heads["present"] = nn.Linear(backbone.embed_dim, n_labels)
    present = torch.zeros(args.images, n_labels)  # multi-hot: shapes, then colours
    for i in range(args.images):
        cells = t_train["shape"][i] > 0
        present[i, t_train["shape"][i][cells] - 1] = 1
        present[i, len(sc.SHAPES) + t_train["colour"][i][cells] - 1] = 1
    params = [*backbone.parameters(), *heads.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1, (s + 1) / 100) * 0.5 * (1 + np.cos(np.pi * s / args.steps))
    )
    rng = random.Random(0)
    print(f"{vars(args)}  object share of patches {obj.mean():.3f}", flush=True)
    for step in range(args.steps):
        b = rng.sample(range(args.images), 128)
        tokens = enc.backbone_tokens(x_train[b])
        cls, patches = tokens[:, 0], tokens[:, 1:]
        loss = tokens.new_zeros(())
        for k in ("shape", "colour", "size") if args.objective == "patch" else ():
            y = t_train[k][b].clone()
            if args.targets != "cell":
                y[y == 0] = -100  # unlabelled: no "none" class pulling background together
            loss = loss + F.cross_entropy(
                heads[k](patches).flatten(0, 1), y.flatten(), ignore_index=-100
            )
        for k in ("bg_kind", "bg_colour", "count"):
            loss = loss + F.cross_entropy(heads[k](cls), t_train[k][b])
        if args.objective == "image":
            logits = heads["present"](cls)
            loss = loss + F.binary_cross_entropy_with_logits(logits, present[b])
        if args.gap:
            logits = heads["present"](patches.mean(1))
            loss = loss + args.gap * F.binary_cross_entropy_with_logits(logits, present[b])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 2.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == args.steps - 1:
            backbone.eval()
            with torch.no_grad():
                tok = tokens_for_s_im(enc, x_dev, args.tokens)
            backbone.train()
            s_im = (
                (F.normalize(tok.mean(1), dim=-1)[:, None] * F.normalize(tok, dim=-1))
                .sum(-1)
                .numpy()
            )
            auc = mannwhitneyu(s_im[obj], s_im[~obj]).statistic / (obj.sum() * (~obj).sum())
            top = np.argsort(-s_im, 1)[:, : GRID * GRID // 2]
            share = np.take_along_axis(obj, top, 1).mean()
            print(
                f"step {step:4d}  loss {float(loss.detach()):.3f}  AUC of s_im {auc:.3f}  "
                f"object share of its top half {share:.3f}  ({time.time() - t0:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
