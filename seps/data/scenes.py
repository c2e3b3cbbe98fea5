"""Scenes of the synthetic dataset: the scene model, its sampling and its rendering.

A :class:`Scene` is what `seps.data.synth` draws for one image; :func:`sample_scene`
draws it from a random generator and :func:`render_scene` paints it. The captions that
describe a scene are written by `seps.data.captions`.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

__all__ = [
    "BACKGROUND_COLOURS",
    "BACKGROUND_KINDS",
    "CELL_NAMES",
    "COLOURS",
    "GRADIENT_SIDES",
    "N_OBJECTS_P",
    "SHAPES",
    "SIZES",
    "STRIPE_ORIENTATIONS",
    "Obj",
    "Scene",
    "render_scene",
    "sample_scene",
]

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
CELL_NAMES = (
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
