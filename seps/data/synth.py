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

Scenes
------
Each image has 1-4 objects (probabilities 0.2, 0.3, 0.3, 0.2), each in a
distinct cell of a 3x3 grid (``top left``, ``top``, ``top right``, ``left``,
``center``, ``right``, ``bottom left``, ``bottom``, ``bottom right``) with a
small jitter. An object has a shape (``circle square triangle star cross ring
diamond hexagon``), a colour (``red green blue yellow orange purple white
black``; re-drawn until it contrasts with the background) and a size (``small``
or ``large``). The background is one of ``striped dotted noisy grassy checkered
gradient`` (stripes are horizontal, vertical or diagonal; a gradient gets
lighter toward one side) in one of ``gray beige teal navy olive brown``.
Drawing happens at twice the resolution and is box-downsampled (anti-aliasing).

Sparse captions (grammar)
-------------------------
Each of the 5 captions picks one template uniformly among those whose
condition holds (``n`` = objects in the image), and mentions only one or two
objects; large objects are twice as likely to be mentioned as small ones.
``{a}``/``{b}`` are object phrases with an article ("a red star", "a big ring",
"a small orange cross", "a hexagon"), ``{A}`` is ``{a}`` capitalised: the shape
is always named, the colour with probability 0.75, the size (``small little
tiny`` / ``large big``) with probability 0.35. ``{pos}`` is the cell phrase of
``a`` ("in the top left corner", "on the left", "at the top", "in the center"),
``{bg}`` a background phrase with article ("a striped", "a gray dotted"; the
colour with probability 0.5), ``{bgn}`` the same without article, ``{rel}`` the
true grid relation of ``a`` to ``b`` ("above", "to the left of", "below and to
the right of"), ``{N}`` the object count as a word. Templates (Flickr-style,
with a detached final " ."):

=====  ===================================================  ==========
objs   template                                             condition
=====  ===================================================  ==========
1      ``{A} on {bg} background .``                         --
1      ``There is {a} {pos} .``                             --
1      ``A picture of {a} {pos} of the frame .``            --
1      ``Someone drew {a} on {bg} background .``            --
1      ``{A} stands out against the {bgn} background .``    --
1      ``{A} .``                                            --
1      ``Just {a} on {bg} background .``                    n = 1
1      ``An image with {a} and some other shapes .``        n >= 2
1      ``{N} shapes , one of them is {a} .``                n >= 2
2      ``{A} and {b} .``                                    n >= 2
2      ``{A} {rel} {b} .``                                  n >= 2
2      ``{A} next to {b} on {bg} background .``             n >= 2
2      ``Two shapes : {a} and {b} .``                       n = 2
2      ``{A} , {b} and more shapes on {bg} background .``   n >= 3
=====  ===================================================  ==========

Because a caption names one or two objects with few attributes, many images
share the content of a caption and hard negatives are common.

Dense captions (grammar)
------------------------
One paragraph per image, objects in reading order (row-major cells):

1. intro (3 variants): "The image shows {N} shapes on a {colour} {kind} background." ...
2. per object (3 variants): "In the {cell}, there is a {size} {colour} {shape}." ...
3. relations of consecutive objects (reading order), for the first two pairs (the first
   only, with 4 objects, to stay near 100 words): "The {colour} {shape} is {rel} the
   {colour} {shape}." (adding the size, or "One ... the other one", when the two
   objects would read the same).
4. background (one per kind, with the stripe orientation / gradient side).
5. closing (3 variants; a "the only object" sentence when n = 1).

Hallucination: with ``hallucination=p`` exactly ``round(p * n_split)`` images of
each split (chosen at random) get a dense caption of a *stated* scene that
differs from the drawn one in one way, uniformly among: ``colour`` (one object
gets another colour), ``shape`` (another shape), ``size`` (the other size) or
``extra`` (a non-existent object in a free cell; not for 4-object scenes, so no
stated scene has more objects than a real one can). Sparse captions and images do
not depend on ``p``: two runs with the same seed and different ``p`` differ only
in the dense captions of the hallucinated images. ``meta.json`` counts the
kinds per split.

Statistics (default arguments: ``n_images=5000, seed=0, image_size=64``)
-----------------------------------------------------------------------
Words are whitespace-separated tokens (so the final " ." of a sparse caption
counts, as it does in the Flickr30K figure of about 13.5):

- sparse captions: mean 10.4 words, min 3, max 18 (Flickr30K test: 13.5);
  47% of the 25,000 sparse captions are strings that also caption another image
  (25% in a 1,000-image set), so exact-duplicate hard negatives are common;
- dense captions: mean 84.7 words, min 52, max 115, 5th-95th percentile 56-106
  (Flickr30K LLaVA test captions: 100.4, 56-145); hallucination changes this by < 1 word;
- objects per image: 20.4% / 29.2% / 29.7% / 20.7% with 1 / 2 / 3 / 4 objects (mean 2.51).

Generation of the 5,000 images takes 6-9 s in one process on this 2-core machine (about
31 MB on disk).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

__all__ = [
    "BACKGROUND_COLOURS",
    "BACKGROUND_KINDS",
    "COLOURS",
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

GENERATOR_VERSION = "1.0"
SPLITS = ("train", "dev", "test")
CAPTIONS_PER_IMAGE = 5

SHAPES = ("circle", "square", "triangle", "star", "cross", "ring", "diamond", "hexagon")
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 35, 35),
    "green": (40, 185, 60),
    "blue": (35, 75, 225),
    "yellow": (245, 220, 35),
    "orange": (250, 140, 25),
    "purple": (145, 55, 195),
    "white": (245, 245, 245),
    "black": (15, 15, 15),
}
BACKGROUND_KINDS = ("striped", "dotted", "noisy", "grassy", "checkered", "gradient")
BACKGROUND_COLOURS: dict[str, tuple[int, int, int]] = {
    "gray": (125, 125, 125),
    "beige": (205, 190, 150),
    "teal": (40, 120, 120),
    "navy": (35, 45, 100),
    "olive": (110, 115, 45),
    "brown": (115, 75, 45),
}
SIZES = ("small", "large")
N_OBJECTS_P = (0.2, 0.3, 0.3, 0.2)  # P(1), P(2), P(3), P(4) objects
STRIPE_ORIENTATIONS = ("horizontal", "vertical", "diagonal")
GRADIENT_SIDES = ("top", "bottom", "left", "right")

# 3x3 grid cells, row-major: cell = 3 * row + col.
_CELL_NAMES = (
    "top left",
    "top",
    "top right",
    "left",
    "center",
    "right",
    "bottom left",
    "bottom",
    "bottom right",
)
# "in the top left corner", "at the top", ...
_CELL_PHRASES = (
    "in the top left corner",
    "at the top",
    "in the top right corner",
    "on the left",
    "in the center",
    "on the right",
    "in the bottom left corner",
    "at the bottom",
    "in the bottom right corner",
)
# Noun phrases usable after "In the ...": "top left corner", "upper middle part" ...
_CELL_NOUNS = (
    "top left corner",
    "upper middle part",
    "top right corner",
    "middle of the left side",
    "center",
    "middle of the right side",
    "bottom left corner",
    "lower middle part",
    "bottom right corner",
)
_SIZE_WORDS = {"small": ("small", "little", "tiny"), "large": ("large", "big")}
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six")
_MIN_CONTRAST = 95.0  # min RGB distance of an object colour to every background shade


@dataclass(frozen=True)
class Obj:
    """One drawn (or stated) object: shape, colour and size names and its grid cell."""

    shape: str
    colour: str
    size: str
    cell: int

    @property
    def row(self) -> int:
        return self.cell // 3

    @property
    def col(self) -> int:
        return self.cell % 3


@dataclass(frozen=True)
class Scene:
    """A scene: objects sorted by cell (reading order) and the background description.

    ``bg_detail`` is the stripe orientation for ``striped``, the lighter side for
    ``gradient`` and ``""`` otherwise; ``jitter`` holds one (dx, dy) offset per object in
    units of the image size.
    """

    objects: tuple[Obj, ...]
    bg_kind: str
    bg_colour: str
    bg_detail: str
    jitter: tuple[tuple[float, float], ...]


# --------------------------------------------------------------------------- sampling


def _bg_shades(base: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Dark and light shade (float RGB) between which a background texture varies."""
    b = np.asarray(base, dtype=np.float32)
    return b * 0.7, np.minimum(b * 1.25 + 10.0, 255.0)


def _contrast(colour: tuple[int, int, int], bg: tuple[int, int, int]) -> float:
    """Smallest RGB distance of ``colour`` to the base, dark and light background shades."""
    dark, light = _bg_shades(bg)
    return min(math.dist(colour, bg), math.dist(colour, dark), math.dist(colour, light))


def sample_scene(rng: np.random.Generator) -> Scene:
    """Draw a random scene (objects, background) from ``rng``."""
    bg_kind = BACKGROUND_KINDS[rng.integers(len(BACKGROUND_KINDS))]
    bg_colour = list(BACKGROUND_COLOURS)[rng.integers(len(BACKGROUND_COLOURS))]
    if bg_kind == "striped":
        bg_detail = STRIPE_ORIENTATIONS[rng.integers(len(STRIPE_ORIENTATIONS))]
    elif bg_kind == "gradient":
        bg_detail = GRADIENT_SIDES[rng.integers(len(GRADIENT_SIDES))]
    else:
        bg_detail = ""
    n = int(rng.choice(4, p=N_OBJECTS_P)) + 1
    cells = np.sort(rng.choice(9, size=n, replace=False))
    colour_names = list(COLOURS)
    bg_rgb = BACKGROUND_COLOURS[bg_colour]
    allowed = [c for c in colour_names if _contrast(COLOURS[c], bg_rgb) >= _MIN_CONTRAST]
    objects = []
    jitter = []
    for cell in cells:
        shape = SHAPES[rng.integers(len(SHAPES))]
        colour = allowed[rng.integers(len(allowed))]
        size = SIZES[rng.integers(2)]
        objects.append(Obj(shape, colour, size, int(cell)))
        dx, dy = rng.uniform(-0.05, 0.05, size=2)
        jitter.append((float(dx), float(dy)))
    return Scene(tuple(objects), bg_kind, bg_colour, bg_detail, tuple(jitter))


# --------------------------------------------------------------------------- rendering

_GRID_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _grid(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates in [0, 1): ``(yy, xx)``, each of shape ``(m, m)``."""
    if m not in _GRID_CACHE:
        ax = (np.arange(m, dtype=np.float32) + 0.5) / m
        _GRID_CACHE[m] = (np.repeat(ax[:, None], m, axis=1), np.repeat(ax[None, :], m, axis=0))
    return _GRID_CACHE[m]


def _background(scene: Scene, m: int, rng: np.random.Generator) -> np.ndarray:
    """Background texture as a ``(m, m, 3)`` uint8 array (vectorised numpy)."""
    yy, xx = _grid(m)
    kind = scene.bg_kind
    if kind == "gradient":
        coord = {"right": xx, "left": 1 - xx, "bottom": yy, "top": 1 - yy}[scene.bg_detail]
        f = coord
    elif kind == "striped":
        coord = {"horizontal": yy, "vertical": xx, "diagonal": (xx + yy) * 0.7071}[scene.bg_detail]
        freq = rng.uniform(4.0, 7.0)
        phase = rng.uniform(0, 2 * np.pi)
        f = (np.sin(2 * np.pi * freq * coord + phase) > 0).astype(np.float32)
    elif kind == "dotted":
        g = 1.0 / rng.integers(5, 8)
        oy, ox = rng.uniform(0, g, size=2)
        dy = np.mod(yy + oy, g) - g / 2
        dx = np.mod(xx + ox, g) - g / 2
        f = ((dx * dx + dy * dy) < (0.25 * g) ** 2).astype(np.float32)
    elif kind == "noisy":
        h = max(m // 2, 1)
        f = rng.random((h, h), dtype=np.float32).repeat(2, axis=0).repeat(2, axis=1)[:m, :m]
        if f.shape != (m, m):  # odd m: pad by edge repetition
            f = np.pad(f, ((0, m - f.shape[0]), (0, m - f.shape[1])), mode="edge")
    elif kind == "grassy":
        blades = rng.random(m, dtype=np.float32)[None, :]
        seg = max(m // 6, 1)
        rows = -(-m // seg)
        patches = rng.random((rows, m), dtype=np.float32).repeat(seg, axis=0)[:m]
        f = 0.65 * blades + 0.35 * patches
        f = f * (0.7 + 0.3 * yy)  # blades get darker toward the top
    elif kind == "checkered":
        k = int(rng.integers(4, 7))
        f = ((np.floor(yy * k) + np.floor(xx * k)) % 2).astype(np.float32)
    else:  # pragma: no cover - guarded by BACKGROUND_KINDS
        raise ValueError(f"unknown background kind {kind!r}")
    dark, light = _bg_shades(BACKGROUND_COLOURS[scene.bg_colour])
    img = dark + (light - dark) * f[..., None]
    return np.clip(img, 0, 255).astype(np.uint8)


def _regular(cx: float, cy: float, r: float, n: int, start: float) -> list[tuple[float, float]]:
    return [
        (
            cx + r * math.cos(start + 2 * math.pi * k / n),
            cy + r * math.sin(start + 2 * math.pi * k / n),
        )
        for k in range(n)
    ]


def _draw_shape(
    draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, fill: tuple[int, ...]
) -> None:
    if shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    elif shape == "square":
        h = 0.85 * r
        draw.rectangle((cx - h, cy - h, cx + h, cy + h), fill=fill)
    elif shape == "triangle":
        draw.polygon(_regular(cx, cy + 0.15 * r, 1.1 * r, 3, -math.pi / 2), fill=fill)
    elif shape == "star":
        outer = _regular(cx, cy, r * 1.05, 5, -math.pi / 2)
        inner = _regular(cx, cy, r * 0.45, 5, -math.pi / 2 + math.pi / 5)
        pts = [p for pair in zip(outer, inner, strict=True) for p in pair]
        draw.polygon(pts, fill=fill)
    elif shape == "cross":
        a, w = r, 0.34 * r
        draw.rectangle((cx - a, cy - w, cx + a, cy + w), fill=fill)
        draw.rectangle((cx - w, cy - a, cx + w, cy + a), fill=fill)
    elif shape == "ring":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), outline=fill, width=max(2, round(0.38 * r)))
    elif shape == "diamond":
        draw.polygon(_regular(cx, cy, 1.1 * r, 4, -math.pi / 2), fill=fill)
    elif shape == "hexagon":
        draw.polygon(_regular(cx, cy, r, 6, 0.0), fill=fill)
    else:
        raise ValueError(f"unknown shape {shape!r}")


def render_scene(scene: Scene, image_size: int, rng: np.random.Generator) -> Image.Image:
    """Render ``scene`` as an RGB ``image_size`` x ``image_size`` PIL image.

    The background texture draws its random parameters from ``rng``. Drawing is done at
    twice the size and box-reduced.
    """
    m = 2 * image_size
    canvas = Image.fromarray(_background(scene, m, rng), mode="RGB")
    draw = ImageDraw.Draw(canvas)
    for obj, (jx, jy) in zip(scene.objects, scene.jitter, strict=True):
        r = (0.16 if obj.size == "large" else 0.09) * m
        cx = (obj.col + 0.5) / 3 * m + jx * m
        cy = (obj.row + 0.5) / 3 * m + jy * m
        cx = min(max(cx, r + 1), m - r - 1)
        cy = min(max(cy, r + 1), m - r - 1)
        _draw_shape(draw, obj.shape, cx, cy, r, COLOURS[obj.colour])
    return canvas.reduce(2)


# --------------------------------------------------------------------------- captions


def _article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _relation(a: Obj, b: Obj) -> str:
    """Grid relation of ``a`` to ``b`` ("above", "to the left of", "below and to the right of")."""
    vert = "above" if a.row < b.row else "below" if a.row > b.row else ""
    hor = "to the left of" if a.col < b.col else "to the right of" if a.col > b.col else ""
    if vert and hor:
        return f"{vert} and {hor}"
    return vert or hor


def _bg_phrase(scene: Scene, rng: np.random.Generator) -> str:
    return f"{scene.bg_colour} {scene.bg_kind}" if rng.random() < 0.5 else scene.bg_kind


def _obj_phrase(obj: Obj, rng: np.random.Generator) -> str:
    """Sparse object phrase with article: shape always, colour p=0.75, size p=0.35."""
    words = []
    if rng.random() < 0.35:
        opts = _SIZE_WORDS[obj.size]
        words.append(opts[rng.integers(len(opts))])
    if rng.random() < 0.75:
        words.append(obj.colour)
    words.append(obj.shape)
    return _article(" ".join(words))


# (number of objects mentioned, condition on n, template)
_SPARSE_TEMPLATES: tuple[tuple[int, str, str], ...] = (
    (1, "any", "{A} on {bg} background ."),
    (1, "any", "There is {a} {pos} ."),
    (1, "any", "A picture of {a} {pos} of the frame ."),
    (1, "any", "Someone drew {a} on {bg} background ."),
    (1, "any", "{A} stands out against the {bgn} background ."),
    (1, "any", "{A} ."),
    (1, "one", "Just {a} on {bg} background ."),
    (1, "many", "An image with {a} and some other shapes ."),
    (1, "many", "{N} shapes , one of them is {a} ."),
    (2, "many", "{A} and {b} ."),
    (2, "many", "{A} {rel} {b} ."),
    (2, "many", "{A} next to {b} on {bg} background ."),
    (2, "two", "Two shapes : {a} and {b} ."),
    (2, "three+", "{A} , {b} and more shapes on {bg} background ."),
)


def _template_ok(cond: str, n: int) -> bool:
    return {
        "any": True,
        "one": n == 1,
        "many": n >= 2,
        "two": n == 2,
        "three+": n >= 3,
    }[cond]


def sparse_captions(
    scene: Scene, rng: np.random.Generator, k: int = CAPTIONS_PER_IMAGE
) -> list[str]:
    """``k`` short captions of ``scene``, each mentioning one or two of its objects."""
    n = len(scene.objects)
    usable = [t for t in _SPARSE_TEMPLATES if _template_ok(t[1], n)]
    weights = np.array([2.0 if o.size == "large" else 1.0 for o in scene.objects])
    weights /= weights.sum()
    out = []
    for _ in range(k):
        n_obj, _cond, template = usable[rng.integers(len(usable))]
        idx = rng.choice(n, size=n_obj, replace=False, p=weights)
        a = scene.objects[idx[0]]
        fields: dict[str, str] = {"a": _obj_phrase(a, rng), "pos": _CELL_PHRASES[a.cell]}
        fields["A"] = fields["a"][0].upper() + fields["a"][1:]
        if n_obj == 2:
            b = scene.objects[idx[1]]
            fields["b"] = _obj_phrase(b, rng)
            fields["rel"] = _relation(a, b)
        bg = _bg_phrase(scene, rng)
        fields["bg"] = _article(bg)
        fields["bgn"] = bg
        fields["N"] = _NUMBER_WORDS[n].capitalize()
        out.append(template.format(**fields))
    return out


def _full(obj: Obj) -> str:
    return f"{obj.size} {obj.colour} {obj.shape}"


def _bg_sentence(scene: Scene) -> str:
    c = scene.bg_colour
    return {
        "striped": f"The background is covered with {scene.bg_detail} {c} stripes of "
        "alternating light and dark shades.",
        "dotted": f"The background is {c} with a regular pattern of small light dots "
        "spread evenly across it.",
        "noisy": f"The background has a grainy, noisy {c} texture, similar to static on "
        "an old television screen.",
        "grassy": f"The background is a {c} texture with thin vertical streaks that "
        "resembles a patch of grass.",
        "checkered": f"The background shows a {c} checkerboard pattern made of light and "
        "dark squares.",
        "gradient": f"The background is a smooth {c} gradient that becomes lighter toward "
        f"the {scene.bg_detail}.",
    }[scene.bg_kind]


def _relation_sentence(a: Obj, b: Obj) -> str:
    """'The red star is above the blue ring.', adding the size or 'the other' when needed."""
    rel = _relation(a, b)
    if (a.colour, a.shape) != (b.colour, b.shape):
        return f"The {a.colour} {a.shape} is {rel} the {b.colour} {b.shape}."
    if a.size != b.size:
        return f"The {_full(a)} is {rel} the {_full(b)}."
    return f"One {a.colour} {a.shape} is {rel} the other one."


def dense_caption(scene: Scene, rng: np.random.Generator) -> str:
    """An MLLM-style paragraph describing every object of ``scene`` and its background."""
    objs = scene.objects
    n = len(objs)
    what = "a single shape" if n == 1 else f"{_NUMBER_WORDS[n]} shapes"
    bg = _article(f"{scene.bg_colour} {scene.bg_kind}")
    intro = (
        f"The image shows {what} on {bg} background.",
        f"The image features {what} arranged on {bg} background.",
        f"In this picture, there {'is' if n == 1 else 'are'} {what} drawn on top of {bg} "
        "background.",
    )
    sentences = [intro[rng.integers(3)]]
    for obj in objs:
        v = rng.integers(3)
        if v == 0:
            sentences.append(f"In the {_CELL_NOUNS[obj.cell]}, there is {_article(_full(obj))}.")
        elif v == 1:
            s = _article(_full(obj))
            sentences.append(
                f"{s[0].upper()}{s[1:]} is located {_CELL_PHRASES[obj.cell]} of the image."
            )
        else:
            p = _CELL_PHRASES[obj.cell]
            sentences.append(f"{p[0].upper()}{p[1:]}, {_article(_full(obj))} can be seen.")
    n_rel = 1 if n == 4 else 2  # keeps 4-object captions near 100 words
    for a, b in list(zip(objs[1:], objs[:-1], strict=True))[:n_rel]:
        sentences.append(_relation_sentence(a, b))
    sentences.append(_bg_sentence(scene))
    if n == 1:
        sentences.append(
            f"The {objs[0].shape} is the only object in the image, which makes it the clear "
            "focal point of the scene."
        )
    else:
        closing = (
            "Overall, the scene is simple and clean, and the shapes stand out clearly "
            "against the background.",
            f"The composition is minimal, with bright colors that contrast with the "
            f"{scene.bg_colour} background, making each shape easy to identify.",
            "The arrangement of the shapes creates a balanced and visually simple composition.",
        )
        sentences.append(closing[rng.integers(3)])
    return " ".join(sentences)


def _hallucinate(scene: Scene, rng: np.random.Generator) -> tuple[Scene, dict[str, Any]]:
    """A *stated* scene that differs from ``scene`` in one object or attribute."""
    objs = list(scene.objects)
    # no "extra" object on a 4-object scene: a stated 5th object would be a giveaway
    kinds = ("colour", "shape", "size", "extra") if len(objs) < 4 else ("colour", "shape", "size")
    kind = kinds[rng.integers(len(kinds))]
    k = int(rng.integers(len(objs)))
    o = objs[k]
    info: dict[str, Any] = {"kind": kind}
    if kind == "colour":
        other = [c for c in COLOURS if c != o.colour]
        new = other[rng.integers(len(other))]
        objs[k] = replace(o, colour=new)
        info.update(cell=o.cell, true=o.colour, stated=new)
    elif kind == "shape":
        other = [s for s in SHAPES if s != o.shape]
        new = other[rng.integers(len(other))]
        objs[k] = replace(o, shape=new)
        info.update(cell=o.cell, true=o.shape, stated=new)
    elif kind == "size":
        new = "small" if o.size == "large" else "large"
        objs[k] = replace(o, size=new)
        info.update(cell=o.cell, true=o.size, stated=new)
    else:
        free = [c for c in range(9) if c not in {x.cell for x in objs}]
        cell = int(free[rng.integers(len(free))])
        extra = Obj(
            SHAPES[rng.integers(len(SHAPES))],
            list(COLOURS)[rng.integers(len(COLOURS))],
            SIZES[rng.integers(2)],
            cell,
        )
        objs = sorted([*objs, extra], key=lambda x: x.cell)
        info.update(cell=cell, true=None, stated=_full(extra))
    jitter = tuple((0.0, 0.0) for _ in objs)  # not drawn
    return replace(scene, objects=tuple(objs), jitter=jitter), info


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

    Image ``i`` of the whole set (train first, then dev, then test) has id ``str(i)``.
    See the module docstring for the grammar and the statistics.
    """
    if n_images < 3:
        raise ValueError(f"n_images must be >= 3 (one per split), got {n_images}")
    if image_size < 16:
        raise ValueError(f"image_size must be >= 16, got {image_size}")
    if not 0.0 <= hallucination <= 1.0:
        raise ValueError(f"hallucination must be in [0, 1], got {hallucination}")
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
    out = target.parent / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(out, ignore_errors=True)
    try:
        _render_into(out, sizes, seed, image_size, hallucination, splits, name)
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
        for local in range(n_split):
            gid = start + local
            rng = np.random.default_rng([seed, gid])
            scene = sample_scene(rng)
            image = render_scene(scene, image_size, rng)
            file_name = f"{name}_{gid:06d}.png"
            image.save(img_dir / file_name, format="PNG")
            id_mapping[str(gid)] = file_name
            caps.extend(sparse_captions(scene, rng))
            ids.extend([str(gid)] * CAPTIONS_PER_IMAGE)
            stated = scene
            if local in hall_set:
                stated, info = _hallucinate(scene, np.random.default_rng([seed, gid, 1]))
                kinds[info["kind"]] += 1
            dense.append(dense_caption(stated, rng))
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
        },
        "vocabulary": {
            "shapes": list(SHAPES),
            "colours": list(COLOURS),
            "sizes": list(SIZES),
            "cells": list(_CELL_NAMES),
            "background_kinds": list(BACKGROUND_KINDS),
            "background_colours": list(BACKGROUND_COLOURS),
        },
        "word_count": "whitespace-separated tokens",
        "splits": split_stats,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
