"""MLLM-like noise of the synthetic dense captions: hallucinated, omitted and wrong objects.

The plain dense caption of `seps.data.captions` describes every object of an image with
its true shape, size, colour and cell, plus the background: a perfect, unique
description. Dense captions written by an MLLM (LLaVA-1.5 for SEPS) are not: CHAIR
evaluations of LLaVA-1.5's detailed COCO descriptions find about 10-15% of the mentioned
objects absent from the image (CHAIR_i) and about 70% of the annotated objects mentioned
(object recall), and such descriptions also get colours, sizes and positions wrong. With
``dense_noise = p`` in ``(0, 0.5]``, :func:`perturb_scene` turns the (stated) scene of an
image into the *described* one and picks the wording; `seps.data.dense_captions.dense_caption`
then writes it. Per dense caption, in this order (rates in `noise_rates`):

1. **omissions**: each small object is left out with probability ``min(3p, 0.5)``, each
   large one with probability ``p / 2``; when that would leave nothing, one object is kept
   after all, so every caption describes at least one real object;
2. **misnamed objects**: each kept object is named with another shape with probability
   ``p / 2`` (same colour, size and cell): a mention of an object the image does not hold;
3. **attribute and position errors** of each correctly named object, independently:
   with probability ``p`` a wrong attribute (two times in three another colour that
   contrasts with the background, as a real object's would; else the other size), and
   with probability ``p`` a wrong cell (a free cell next to the true one, when there is
   one);
4. **inserted objects**: for each kept object a non-existent one (random shape, size and
   contrasting colour, in a cell no object occupies) is added with probability
   ``p / (2 (1 - p))``, so that the expected fraction of hallucinated object mentions
   (misnamed + inserted over all described objects, CHAIR_i) is exactly ``p``:
   ``(p/2 + p/(2(1-p))) / (1 + p/(2(1-p))) = p``;
5. **background**: the background colour is named wrong with probability ``p``;
6. **wording**: the described objects are listed in a random order instead of reading order
   with probability ``min(2p, 0.5)``; the opening sentence leaves the background out with
   probability ``min(2p, 0.5)`` and, independently, so does the background sentence;
   sentence templates come from a larger set (`seps.data.captions`, "Varied wording") and
   0-2 generic sentences that name no object, colour or position are added (one more when
   the background sentence is left out and one more for a single described object, which
   keeps the lengths near those of real LLaVA captions). The colour and shape vocabularies
   stay those of the sparse captions. The object count in the opening sentence is that of
   the described objects (up to 8).

At the default ``p = 0.12`` (`seps.data.synth.DEFAULT_DENSE_NOISE`) 12% of the object
mentions are hallucinated, 36% of the small and 6% of the large objects are left out
(about 32% of the small and 18% of all objects after the keep-one rule; with the misnamed
ones, about 77% of the objects are described correctly named, near the 70% recall above)
and 12% of the correctly named objects get a wrong attribute, 12% a wrong cell. The
omission and attribute rates are above the ``2p`` (small objects only) and ``p / 2`` first
tried, and misnamed objects, wrong cells and background colours were added: on the
1,000-image test split of a 10,000-image set, the word-matching text-only baseline of
`seps.data.baselines` has rSum 448 on the plain captions; the first model brought it to 378 at
``p = 0.12``, this one brings it to 317 (259 at ``p = 0.2``).

Grammar v2 (``grammar="v2"``, `seps.data.synth`) adds, after all of the above and at
every ``p`` including 0 (v2 always writes through this model), what MLLMs are known for
beyond hallucinated objects: vague and omitted positions and sizes. Each described
object's position is stated by its cell with probability 0.3, by its row only or by its
column only with 0.2 each, and not at all with 0.3 (`V2_POSITION_P`); its size is stated
with probability 0.5 (`V2_SIZE_STATED_P`); 0 or 1 relation sentence with probability 0.5
each (`V2_RELATIONS_P`; v1: two, one from 4 objects on); one more generic sentence keeps
the length (88.6 words on average at ``p = 0.12``, v1 88.2). Text-only rSum on the
1,000-image test split of 10,000-image v2 sets (seeds 0 / 1; BM25 = `seps.data.lexical`,
vocabulary = `seps.data.baselines`), against a scene oracle of 570 / 571 and chance 3.2
(`seps.data.oracle`):

===========  ===========  ===========  ==========================================
dense_noise  BM25         vocabulary   without the v2 vagueness (BM25 / vocabulary)
===========  ===========  ===========  ==========================================
0            344 / 351    431 / 435    389 / 393, 551 / 552
0.12         238 / 243    301 / 312    270 / 274, 391 / 400
0.2          185 / 176    238 / 241    212 / 208, 307 / 309
0.3          141 / 139    182 / 186    167 / 158, 247 / 240
===========  ===========  ===========  ==========================================

(v1 at 0.12: BM25 201 / 207, vocabulary 315 / 319, oracle 471 / 472.) ``dense_noise`` is
the knob that places the text-only matchers relative to a pixel model.

Every random choice comes from the generator passed in (`seps.data.synth` seeds it by
``(seed, image id, NOISE_STREAM)``, a stream of its own), so a noisy caption is a pure
function of the scene, ``p`` and the seed, and the noise changes neither the images, nor
the sparse captions, nor which images carry a whole-caption hallucination. Applied to a
hallucinated stated scene (`seps.data.dense_captions.hallucinate`), the noise takes the stated
objects as the real ones: its counts are those of the noise model alone.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from .dense_captions import DenseStyle
from .scenes import _MIN_CONTRAST, BACKGROUND_COLOURS, COLOURS, SHAPES, SIZES, Obj, Scene
from .scenes import _contrast as _colour_contrast

__all__ = [
    "MAX_NOISE",
    "NOISE_STREAM",
    "NoiseCounts",
    "NoiseRates",
    "clean_counts",
    "noise_rates",
    "perturb_scene",
    "summarize",
]

NOISE_STREAM = 2  # third seed word of the noise generator: (seed, image id, NOISE_STREAM)
MAX_NOISE = 0.5  # p / (1 - p) hallucinated objects per kept one reaches 1 here


@dataclass(frozen=True)
class NoiseRates:
    """The per-caption probabilities of the noise model at one ``p`` (module docstring)."""

    misnamed: float
    hallucinated_per_kept: float
    omission_small: float
    omission_large: float
    attribute: float
    position: float
    background_colour: float
    wording: float


def noise_rates(p: float) -> NoiseRates:
    """Probabilities of the model at noise level ``p`` in ``[0, MAX_NOISE]``."""
    if not 0.0 <= p <= MAX_NOISE:
        raise ValueError(f"dense_noise must be in [0, {MAX_NOISE}], got {p}")
    return NoiseRates(
        misnamed=p / 2.0,
        hallucinated_per_kept=p / (2.0 * (1.0 - p)),
        omission_small=min(3.0 * p, 0.5),
        omission_large=p / 2.0,
        attribute=p,
        position=p,
        background_colour=p,
        wording=min(2.0 * p, 0.5),
    )


@dataclass(frozen=True)
class NoiseCounts:
    """What the noise did to one caption (or, summed, to a split).

    ``mentions`` counts the distinct objects the caption describes (``described_real +
    inserted``), as CHAIR counts mentioned objects; ``hallucinated = misnamed + inserted``
    of them are objects the image does not hold.
    """

    real_objects: int = 0
    small_objects: int = 0
    large_objects: int = 0
    omitted: int = 0
    omitted_small: int = 0
    described_real: int = 0
    misnamed: int = 0
    inserted: int = 0
    hallucinated: int = 0
    mentions: int = 0
    attribute_errors: int = 0
    colour_errors: int = 0
    size_errors: int = 0
    position_errors: int = 0
    background_errors: int = 0

    def __add__(self, other: NoiseCounts) -> NoiseCounts:
        return NoiseCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def clean_counts(scene: Scene) -> NoiseCounts:
    """Counts of a caption without noise: every object described, nothing wrong."""
    n = len(scene.objects)
    small = sum(o.size == "small" for o in scene.objects)
    return NoiseCounts(
        real_objects=n, small_objects=small, large_objects=n - small, described_real=n, mentions=n
    )


@functools.cache
def _contrasting(bg_colour: str) -> tuple[str, ...]:
    """Object colours a sampled scene may use on this background (`seps.data.scenes`)."""
    bg = BACKGROUND_COLOURS[bg_colour]
    return tuple(c for c in COLOURS if _colour_contrast(COLOURS[c], bg) >= _MIN_CONTRAST)


def _neighbours(cell: int) -> list[int]:
    """The cells sharing a side with ``cell`` in the 3x3 grid."""
    r, c = divmod(cell, 3)
    return [3 * rr + cc for rr in range(3) for cc in range(3) if abs(rr - r) + abs(cc - c) == 1]


def _other(options: Sequence[str], current: str, rng: np.random.Generator) -> str:
    rest = [x for x in options if x != current]
    return rest[rng.integers(len(rest))]


#: Grammar v2 (`seps.data.synth`), drawn after everything above: how each described
#: object's position is stated (its cell, only its row, only its column, not at all) and
#: how often its size is, and how many relation sentences are written.
V2_POSITION_P = {"cell": 0.3, "row": 0.2, "col": 0.2, "none": 0.3}
V2_SIZE_STATED_P = 0.5
V2_RELATIONS_P = (0.5, 0.5)  # P(0), P(1) relation sentences


def perturb_scene(
    scene: Scene, p: float, rng: np.random.Generator, grammar: str = "v1"
) -> tuple[Scene, DenseStyle, NoiseCounts]:
    """The described scene, the wording and the counts of one noisy dense caption.

    Args:
        scene: the (stated) scene the caption is about; its objects in reading order.
        p: noise level in ``[0, MAX_NOISE]``.
        rng: the caption's noise generator.
        grammar: ``"v2"`` adds the vague positions and sizes of grammar v2 (module
            docstring); ``"v1"`` draws nothing more.

    Returns:
        ``(described, style, counts)``: ``described`` holds the objects to describe, in the
        order to describe them (zero jitter), for ``dense_caption(described, rng, style)``.
    """
    rates = noise_rates(p)
    objs = scene.objects
    n = len(objs)
    small = np.array([o.size == "small" for o in objs])
    # 1. omissions, never of every object
    drop = rng.random(n) < np.where(small, rates.omission_small, rates.omission_large)
    if drop.all():
        drop[rng.integers(n)] = False
    kept = [o for o, d in zip(objs, drop, strict=True) if not d]
    # 2. misnamed objects (another shape): hallucinated mentions in place of real ones
    misnamed = rng.random(len(kept)) < rates.misnamed
    for k in np.flatnonzero(misnamed):
        kept[k] = replace(kept[k], shape=_other(SHAPES, kept[k].shape, rng))
    # 3. attribute and position errors of the correctly named objects
    palette = _contrasting(scene.bg_colour)
    occupied = {o.cell for o in objs}
    colour_err = size_err = pos_err = 0
    for k, o in enumerate(kept):
        if misnamed[k]:
            continue
        if rng.random() < rates.attribute:
            if rng.random() < 2.0 / 3.0:
                o = replace(o, colour=_other(palette, o.colour, rng))
                colour_err += 1
            else:
                o = replace(o, size="small" if o.size == "large" else "large")
                size_err += 1
        if rng.random() < rates.position:
            free = [c for c in _neighbours(o.cell) if c not in occupied]
            if free:
                cell = free[rng.integers(len(free))]
                occupied = (occupied - {o.cell}) | {cell}
                o = replace(o, cell=cell)
                pos_err += 1
        kept[k] = o
    # 4. inserted objects, CHAIR-style: E[misnamed + inserted] = p * E[kept + inserted]
    n_ins = int(rng.binomial(len(kept), rates.hallucinated_per_kept))
    cells = rng.choice([c for c in range(9) if c not in occupied], size=n_ins, replace=False)
    added = [
        Obj(
            SHAPES[rng.integers(len(SHAPES))],
            palette[rng.integers(len(palette))],
            SIZES[rng.integers(len(SIZES))],
            int(cell),
        )
        for cell in cells
    ]
    # 5. background colour and wording
    bg_colour = scene.bg_colour
    bg_err = rng.random() < rates.background_colour
    if bg_err:
        bg_colour = _other(list(BACKGROUND_COLOURS), bg_colour, rng)
    described = sorted([*kept, *added], key=lambda o: o.cell)
    if rng.random() < rates.wording:
        described = [described[k] for k in rng.permutation(len(described))]
    with_bg = bool(rng.random() >= rates.wording)
    style = DenseStyle(
        intro_background=bool(rng.random() >= rates.wording),
        background_sentence=with_bg,
        fillers=int(rng.integers(3)) + (not with_bg) + (len(described) == 1),
    )
    if grammar == "v2":  # vaguer positions and sizes, fewer relations (module docstring)
        m = len(described)
        how = list(V2_POSITION_P)
        style = replace(
            style,
            positions=tuple(
                how[k] for k in rng.choice(len(how), size=m, p=list(V2_POSITION_P.values()))
            ),
            sizes=tuple(bool(x) for x in rng.random(m) < V2_SIZE_STATED_P),
            relations=int(rng.choice(len(V2_RELATIONS_P), p=V2_RELATIONS_P)),
            fillers=style.fillers + 1,  # the vaguer sentences are shorter
        )
    n_mis = int(misnamed.sum())
    counts = NoiseCounts(
        real_objects=n,
        small_objects=int(small.sum()),
        large_objects=int(n - small.sum()),
        omitted=int(drop.sum()),
        omitted_small=int((drop & small).sum()),
        described_real=len(kept),
        misnamed=n_mis,
        inserted=n_ins,
        hallucinated=n_mis + n_ins,
        mentions=len(kept) + n_ins,
        attribute_errors=colour_err + size_err,
        colour_errors=colour_err,
        size_errors=size_err,
        position_errors=pos_err,
        background_errors=int(bg_err),
    )
    jitter = tuple((0.0, 0.0) for _ in described)  # not drawn
    described_scene = replace(scene, objects=tuple(described), bg_colour=bg_colour, jitter=jitter)
    return described_scene, style, counts


def summarize(counts: Iterable[NoiseCounts]) -> dict[str, Any]:
    """Counts of a split summed, with the realised rates (for ``meta.json``).

    Rates (each 0.0 when its denominator is 0): ``hallucination_rate`` = hallucinated /
    object mentions (CHAIR_i); ``omission_rate`` = omitted / real objects and
    ``small_omission_rate`` = omitted small / small objects; ``attribute_error_rate`` and
    ``position_error_rate`` = those errors / correctly named described real objects;
    ``background_error_rate`` = background colour errors / captions.
    """
    items = list(counts)
    total = sum(items, NoiseCounts())
    named = total.described_real - total.misnamed

    def rate(num: int, den: int) -> float:
        return round(num / den, 4) if den else 0.0

    return {
        "captions": len(items),
        "real_objects": total.real_objects,
        "small_objects": total.small_objects,
        "object_mentions": total.mentions,
        "hallucinated_mentions": total.hallucinated,
        "misnamed_objects": total.misnamed,
        "inserted_objects": total.inserted,
        "omitted_objects": total.omitted,
        "omitted_small_objects": total.omitted_small,
        "described_real_objects": total.described_real,
        "attribute_errors": total.attribute_errors,
        "colour_errors": total.colour_errors,
        "size_errors": total.size_errors,
        "position_errors": total.position_errors,
        "background_errors": total.background_errors,
        "hallucination_rate": rate(total.hallucinated, total.mentions),
        "omission_rate": rate(total.omitted, total.real_objects),
        "small_omission_rate": rate(total.omitted_small, total.small_objects),
        "attribute_error_rate": rate(total.attribute_errors, named),
        "position_error_rate": rate(total.position_errors, named),
        "background_error_rate": rate(total.background_errors, len(items)),
    }
