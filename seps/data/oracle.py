"""The headroom of the synthetic benchmark: a scene-reading oracle and chance.

The text-only matchers (`seps.data.baselines`, `seps.data.lexical`) show what the dense captions
give away; these two numbers bracket them and any pixel model:

- **Oracle**: a matcher that reads each gallery image's *true scene* (`seps.data.synth`
  draws it as ``sample_scene(np.random.default_rng([seed, image id]))``, the first draws
  of a fresh generator per global image id, so :func:`split_scenes` rebuilds it from the
  set's ``meta.json`` and ``{split}_ids.txt`` without the images). A scene is
  *consistent* with a caption when it holds everything the caption states: each named
  object (shape; colour, size and cell when named) is a distinct object of the scene, a
  stated relation ("above and to the left of") holds between the two named objects, the
  background kind (and colour when named) is the scene's, and a stated count holds ("Two
  shapes", "Just a ..." = 1, "... and some other shapes" >= 2, "... and more shapes" /
  "among other shapes" >= 3). "next to" states
  nothing. The captions are parsed with the phrases of both sparse grammars
  (`seps.data.captions`, v1 and v2). Score of image ``i`` for caption ``j``
  (:func:`oracle_scores`): 1 / (number of gallery images consistent with caption ``j``)
  when image ``i`` is one of them, else 0 -- the posterior that ``i`` is the image the
  caption was written for when every consistent image is equally likely.
- **Ties**: every consistent image scores the same, and `seps.core.metrics` resolves exact ties
  in favour of the positive, which would credit the oracle with ranks it cannot tell
  apart. :func:`oracle_sims` adds 1e-6 times a fixed pseudo-random number (seed 0), as
  `seps.data.baselines` does, and :func:`expected_recalls` gives the exact expectation of the
  recalls over a uniformly random order within ties (the number reported: the oracle's
  rSum is then that of a perfect reader who guesses among the images a caption cannot
  tell apart).
- **Chance**: :func:`chance_recalls`, the expected recalls of a uniformly random ranking
  (R@K = K / n images for text-to-image; 1 - C(5n - 5, K) / C(5n, K) for image-to-text
  with 5 captions per image), in percent like `seps.core.metrics.recall_at_k`.

Why 1 / (number of consistent images) and not 1/0: with 1/0 scores an image's own captions
tie with every caption its scene is consistent with (about 95 on v1), so image-to-text
R@1 falls to 7 and the "oracle" (rSum 274 on v1) sits below the vocabulary-aware text
matcher (315). Scoring by the posterior ranks a caption that only few scenes fit above a
vague one; it leaves text-to-image unchanged. Measured (1,000-image test splits of
10,000-image sets, seeds 0 / 1): v1 471 / 472, v2 570 / 571; chance 3.2.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .scenes import (
    BACKGROUND_COLOURS,
    BACKGROUND_KINDS,
    COLOURS,
    SHAPES,
    Scene,
    sample_scene,
)

__all__ = [
    "Claim",
    "chance_recalls",
    "expected_recalls",
    "headroom",
    "oracle_consistency",
    "oracle_scores",
    "oracle_sims",
    "parse_caption",
    "scenes_of",
    "split_scenes",
    "synthetic_seed",
]

_KS = (1, 5, 10)
_JITTER = 1e-6
_SIZE = {"small": "small", "little": "small", "tiny": "small", "large": "large", "big": "large"}
_OBJ = re.compile(rf"\b(?:({'|'.join(_SIZE)}) )?(?:({'|'.join(COLOURS)}) )?({'|'.join(SHAPES)})\b")
_BG = re.compile(
    rf"\b(?:({'|'.join(BACKGROUND_COLOURS)}) )?({'|'.join(BACKGROUND_KINDS)}) "
    r"(?:background|picture)\b"
)
_REL = re.compile(r"\b(above|below)(?: and to the (left|right) of)?\b|\bto the (left|right) of\b")
_POS = [
    (re.compile(r"\bin the (?:top|upper) left corner\b"), 0),
    (re.compile(r"\b(?:at the top|along the top edge)\b"), 1),
    (re.compile(r"\bin the (?:top|upper) right corner\b"), 2),
    (re.compile(r"\bon the left(?: side)?\b"), 3),
    (re.compile(r"\bin the (?:center|centre)\b"), 4),
    (re.compile(r"\bon the right(?: side)?\b"), 5),
    (re.compile(r"\bin the (?:bottom|lower) left corner\b"), 6),
    (re.compile(r"\b(?:at the bottom|along the bottom edge)\b"), 7),
    (re.compile(r"\bin the (?:bottom|lower) right corner\b"), 8),
]
_NUMBERS = {"two": 2, "three": 3, "four": 4}
_COUNT = re.compile(r"\b(two|three|four) shapes\b")


@dataclass(frozen=True)
class Claim:
    """What a sparse caption states: objects as ``(shape, colour, size, cell)`` (None:
    not stated), the relation code of the first to the second object (None: none), the
    background kind and colour, and the object count's bounds."""

    objects: tuple[tuple[str, str | None, str | None, int | None], ...]
    relation: int | None
    bg_kind: str | None
    bg_colour: str | None
    count_min: int
    count_max: int


def _rel_code(drow: int, dcol: int) -> int:
    """Code of the relation of an object ``drow`` rows and ``dcol`` columns from another."""
    return 3 * (int(np.sign(drow)) + 1) + int(np.sign(dcol)) + 1


def parse_caption(text: str) -> Claim:
    """The :class:`Claim` of a sparse caption of either grammar (module docstring)."""
    t = text.lower()
    events: list[tuple[int, str, object]] = []
    for m in _OBJ.finditer(t):
        size = _SIZE[m.group(1)] if m.group(1) else None
        events.append((m.start(), "obj", (m.group(3), m.group(2), size)))
    for rx, cell in _POS:
        events += [(m.start(), "pos", cell) for m in rx.finditer(t)]
    for m in _REL.finditer(t):
        vert, hor = m.group(1), m.group(2) or m.group(3)
        drow = -1 if vert == "above" else 1 if vert == "below" else 0
        dcol = -1 if hor == "left" else 1 if hor == "right" else 0
        events.append((m.start(), "rel", _rel_code(drow, dcol)))
    events.sort(key=lambda e: e[0])
    objs: list[list] = []
    pending: int | None = None  # a position stated before its object ("On the left , a ...")
    relation = None
    for _, kind, val in events:
        if kind == "obj":
            objs.append([*val, pending])  # type: ignore[misc]
            pending = None
        elif kind == "pos":
            if objs and objs[-1][3] is None:
                objs[-1][3] = val
            else:
                pending = val  # type: ignore[assignment]
        else:
            relation = val
    bg = _BG.search(t)
    lo, hi = 1, 4
    if m := _COUNT.search(t):
        lo = hi = _NUMBERS[m.group(1)]
    if t.startswith("just ") or "only one shape" in t:
        lo = hi = 1
    if "some other shapes" in t:
        lo = max(lo, 2)
    if "more shapes" in t or "among other shapes" in t:
        lo = max(lo, 3)
    return Claim(
        objects=tuple((o[0], o[1], o[2], o[3]) for o in objs),
        relation=relation if len(objs) >= 2 else None,
        bg_kind=bg.group(2) if bg else None,
        bg_colour=bg.group(1) if bg else None,
        count_min=lo,
        count_max=hi,
    )


class _SceneTable:
    """The scenes as arrays (up to 4 objects each; ``valid`` marks real ones)."""

    def __init__(self, scenes: Sequence[Scene]) -> None:
        n = len(scenes)
        self.shape = np.full((n, 4), "", dtype=object)
        self.colour = np.full((n, 4), "", dtype=object)
        self.size = np.full((n, 4), "", dtype=object)
        self.cell = np.full((n, 4), -1)
        for i, s in enumerate(scenes):
            for k, o in enumerate(s.objects):
                self.shape[i, k], self.colour[i, k], self.size[i, k] = o.shape, o.colour, o.size
                self.cell[i, k] = o.cell
        self.valid = self.cell >= 0
        self.count = self.valid.sum(1)
        self.bg_kind = np.array([s.bg_kind for s in scenes], dtype=object)
        self.bg_colour = np.array([s.bg_colour for s in scenes], dtype=object)
        row, col = self.cell // 3, self.cell % 3
        drow = np.sign(row[:, :, None] - row[:, None, :])
        dcol = np.sign(col[:, :, None] - col[:, None, :])
        self.rel = 3 * (drow + 1) + dcol + 1
        distinct = ~np.eye(4, dtype=bool)[None]
        self.pair_ok = distinct & self.valid[:, :, None] & self.valid[:, None, :]

    def matches(self, obj: tuple[str, str | None, str | None, int | None]) -> np.ndarray:
        shape, colour, size, cell = obj
        m = self.valid & (self.shape == shape)
        if colour is not None:
            m &= self.colour == colour
        if size is not None:
            m &= self.size == size
        if cell is not None:
            m &= self.cell == cell
        return m

    def consistent(self, claim: Claim) -> np.ndarray:
        ok = (self.count >= claim.count_min) & (self.count <= claim.count_max)
        if claim.bg_kind is not None:
            ok &= self.bg_kind == claim.bg_kind
        if claim.bg_colour is not None:
            ok &= self.bg_colour == claim.bg_colour
        objs = claim.objects
        if len(objs) == 1:
            ok &= self.matches(objs[0]).any(1)
        elif len(objs) >= 2:
            # The grammars name at most two objects: a stated relation binds the first two.
            a, b = self.matches(objs[0]), self.matches(objs[1])
            pair = self.pair_ok & a[:, :, None] & b[:, None, :]
            if claim.relation is not None:
                pair &= self.rel == claim.relation
            ok &= pair.any((1, 2))
            for extra in objs[2:]:
                ok &= self.matches(extra).any(1)
        return ok


def oracle_consistency(captions: Sequence[str], scenes: Sequence[Scene]) -> np.ndarray:
    """``(n_images, n_captions)`` bool: is scene ``i`` consistent with caption ``j``."""
    table = _SceneTable(scenes)
    out = np.zeros((len(scenes), len(captions)), dtype=bool)
    cache: dict[str, np.ndarray] = {}
    for j, cap in enumerate(captions):
        if cap not in cache:
            cache[cap] = table.consistent(parse_caption(cap))
        out[:, j] = cache[cap]
    return out


def oracle_scores(captions: Sequence[str], scenes: Sequence[Scene]) -> np.ndarray:
    """``(n_images, n_captions)`` float64: consistency / number of consistent images of the
    caption (0 where inconsistent), the posterior that image ``i`` is the one caption ``j``
    was written for when any consistent image is equally likely (module docstring)."""
    cons = oracle_consistency(captions, scenes).astype(np.float64)
    return cons / np.maximum(cons.sum(0, keepdims=True), 1.0)


def oracle_sims(captions: Sequence[str], scenes: Sequence[Scene]) -> np.ndarray:
    """:func:`oracle_scores` plus 1e-6 times a fixed pseudo-random number (seed 0) that
    breaks ties at random, in the layout of `seps.core.metrics.recall_at_k` (its recalls
    scatter around :func:`expected_recalls` of the scores)."""
    scores = oracle_scores(captions, scenes)
    return scores + _JITTER * np.random.default_rng(0).random(scores.shape)


def _p_first_k(k: int, above: np.ndarray, tied: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """P(a positive in the first ``k``) when ``above`` items outrank the best positives'
    score and ``tied`` items (``pos`` of them positives) share it, in random order."""
    draws = np.clip(k - above, 0, tied)
    miss = np.ones(above.shape)
    for m in range(k):
        frac = (tied - pos - m) / np.maximum(tied - m, 1)
        miss = np.where(m < draws, miss * np.clip(frac, 0.0, 1.0), miss)
    return np.where(above >= k, 0.0, 1.0 - miss)


def expected_recalls(scores: np.ndarray, captions_per_image: int = 5) -> dict[str, float]:
    """Expected recalls (percent) of ``scores`` (``(n_images, n_captions)``, the layout of
    `seps.core.metrics.recall_at_k`) over a uniformly random order among equal scores, both
    directions, and ``"rsum"``: the recalls of a matcher that cannot tell ties apart."""
    s = np.asarray(scores, dtype=np.float64)
    n_img, n_cap = s.shape
    cols = np.arange(n_cap)
    owner = cols // captions_per_image
    out: dict[str, float] = {}
    # image to text: the best of the image's captions_per_image captions
    own = s.reshape(n_img, n_img, captions_per_image)[np.arange(n_img), np.arange(n_img)]
    best = own.max(1, keepdims=True)
    i2t = ((s > best).sum(1), (s == best).sum(1), (own == best).sum(1))
    # text to image: one positive image per caption
    pos = s[owner, cols][None, :]
    t2i = ((s > pos).sum(0), (s == pos).sum(0), np.ones(n_cap, dtype=np.int64))
    for name, (above, tied, q) in (("i2t", i2t), ("t2i", t2i)):
        for k in _KS:
            out[f"{name}_r{k}"] = 100.0 * float(_p_first_k(k, above, tied, q).mean())
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in _KS)
    return out


def chance_recalls(n_images: int, captions_per_image: int = 5) -> dict[str, float]:
    """Expected recalls (percent) of a uniformly random ranking, both directions; ``rsum``."""
    n_cap = n_images * captions_per_image
    out: dict[str, float] = {}
    for k in _KS:
        out[f"t2i_r{k}"] = 100.0 * min(k, n_images) / n_images
        miss = 1.0
        for m in range(min(k, n_cap)):
            miss *= max(n_cap - captions_per_image - m, 0) / (n_cap - m)
        out[f"i2t_r{k}"] = 100.0 * (1.0 - miss)
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in _KS)
    return out


def synthetic_seed(data_dir: str | Path) -> int | None:
    """The draw seed of a synthetic set (its ``meta.json``), or None for another dataset."""
    try:
        meta = json.loads((Path(data_dir) / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("generator") != "seps.data.synth":
        return None
    return int(meta["seed"])


def scenes_of(seed: int, image_ids: Sequence[str]) -> list[Scene]:
    """The true scenes of a synthetic set's images (global ids), as `seps.data.synth`
    drew them: the first draws of ``np.random.default_rng([seed, id])``."""
    return [sample_scene(np.random.default_rng([seed, int(g)])) for g in image_ids]


def split_scenes(data_dir: str | Path, split: str = "test") -> tuple[list[str], list[Scene]]:
    """The sparse captions and the true scenes (image order) of a synthetic set's split,
    rebuilt from ``meta.json``'s seed and ``{split}_ids.txt`` (no image is read)."""
    root = Path(data_dir)
    seed = synthetic_seed(root)
    if seed is None:
        raise ValueError(f"{root}: not a synthetic set (no meta.json of seps.data.synth)")
    captions = (root / f"{split}_caps.txt").read_text(encoding="utf-8").splitlines()
    ids = (root / f"{split}_ids.txt").read_text(encoding="utf-8").splitlines()
    return captions, scenes_of(seed, list(dict.fromkeys(ids)))


def headroom(
    data_dir: str | Path, captions: Sequence[str], image_ids: Sequence[str]
) -> dict[str, float | None]:
    """``{"chance_rsum", "oracle_rsum"}`` of a gallery (``captions``: 5 per image, image
    order; ``image_ids``: its images): chance for any dataset, the oracle's expected rSum
    for a synthetic set (None for another dataset)."""
    n_img = len(image_ids)
    cpi = len(captions) // max(n_img, 1)
    seed = synthetic_seed(data_dir)
    oracle = None
    if seed is not None:
        oracle = expected_recalls(oracle_scores(captions, scenes_of(seed, image_ids)), cpi)["rsum"]
    return {"chance_rsum": chance_recalls(n_img, cpi)["rsum"], "oracle_rsum": oracle}
