"""Dense captions of the synthetic dataset: the MLLM-like paragraph and hallucination.

:func:`dense_caption` writes the long paragraph of a `seps.data.scenes.Scene` (plain, or
in a varied :class:`DenseStyle`) and :func:`hallucinate` the *stated* scene of a dense
caption that says something false; the short sparse captions are :mod:`.captions`'.
Every random choice comes from the generator passed in.

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

This plain grammar describes a scene perfectly. `seps.data.synth` writes it with
``dense_noise=0``; by default it writes the noisy captions of `seps.data.noise`, which
describe a perturbed scene (objects left out, misnamed, with wrong attributes or cells,
or inserted; background colour wrong) with the varied wording below.

Varied wording (``dense_caption(..., style=DenseStyle(...))``)
--------------------------------------------------------------
Objects are described in the order given (not necessarily reading order), with:

1. intro: the 3 plain variants and "This is a simple illustration of {N} shapes set
   against a ... background."; without the background (`DenseStyle.intro_background`
   false): "The image shows {N} shapes.", "In this image, {N} shapes are visible.", "The
   picture is a simple drawing of {N} shapes.";
2. per object: the 3 plain variants and "{A} appears {pos}.", "{Pos}, you can see {a}.",
   "The {cell} holds {a}." (and, after the first object, "There is also {a} {pos}.",
   "Additionally, {a} is placed {pos}."); the size word is a synonym ("little", "tiny",
   "big") with probability 0.3;
3. relations as in the plain grammar (one pair from 4 objects on);
4. background sentence as in the plain grammar, or none (`DenseStyle.background_sentence`);
5. `DenseStyle.fillers` generic sentences that name no object, colour or position ("The
   shapes have crisp outlines and flat, uniform colors." ...);
6. closing (3 variants without the background colour; 2 for a single object).

Grammar v2 (`DenseStyle.positions`, `DenseStyle.sizes`, `DenseStyle.relations`): an
object's position is stated by its cell as above, by its row only ("near the top", "in the
lower part of the image", "around the middle") or column only ("on the left side",
"toward the right"), or not at all ("There is also a red star."); its size may be left
out; the relation sentences are capped (rates in `seps.data.noise`).

Hallucination
-------------
:func:`hallucinate` returns a *stated* scene that differs from the drawn one in one way,
uniformly among: ``colour`` (one object gets another colour), ``shape`` (another shape),
``size`` (the other size) or ``extra`` (a non-existent object in a free cell; not for
4-object scenes, so no stated scene has more objects than a real one can). Which images
get one is decided by `seps.data.synth`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .captions import (
    CELL_NOUNS,
    CELL_PHRASES,
    NUMBER_WORDS,
    SIZE_WORDS,
    article,
    capitalised,
    relation,
)
from .scenes import COLOURS, SHAPES, SIZES, Obj, Scene


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
    rel = relation(a, b)
    if (a.colour, a.shape) != (b.colour, b.shape):
        return f"The {a.colour} {a.shape} is {rel} the {b.colour} {b.shape}."
    if a.size != b.size:
        return f"The {_full(a)} is {rel} the {_full(b)}."
    return f"One {a.colour} {a.shape} is {rel} the other one."


def dense_caption(scene: Scene, rng: np.random.Generator, style: DenseStyle | None = None) -> str:
    """An MLLM-style paragraph describing every object of ``scene`` and its background.

    Objects are described in the order of ``scene.objects`` (reading order for a sampled
    scene). With ``style=None`` the paragraph follows the plain grammar above; a
    `DenseStyle` selects the varied wording of the noisy captions (`seps.data.noise`).
    """
    if style is not None:
        return _styled_dense(scene, rng, style)
    objs = scene.objects
    n = len(objs)
    what = "a single shape" if n == 1 else f"{NUMBER_WORDS[n]} shapes"
    bg = article(f"{scene.bg_colour} {scene.bg_kind}")
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
            sentences.append(f"In the {CELL_NOUNS[obj.cell]}, there is {article(_full(obj))}.")
        elif v == 1:
            s = article(_full(obj))
            sentences.append(
                f"{s[0].upper()}{s[1:]} is located {CELL_PHRASES[obj.cell]} of the image."
            )
        else:
            p = CELL_PHRASES[obj.cell]
            sentences.append(f"{p[0].upper()}{p[1:]}, {article(_full(obj))} can be seen.")
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


@dataclass(frozen=True)
class DenseStyle:
    """Wording choices of a noisy dense caption (see "Varied wording" above).

    Attributes:
        intro_background: the opening sentence names the background colour and kind.
        background_sentence: the background sentence is written.
        fillers: number of generic sentences (no object, colour or position words) added
            before the closing, 0-2.
        positions: grammar v2 only, one per described object: how its position is stated,
            ``"cell"`` (the grid cell, as in v1), ``"row"`` or ``"col"`` (only the row or
            the column: "near the top", "on the left side"), ``"none"`` (no position);
            None: every position by its cell.
        sizes: grammar v2 only, one per described object: whether its size is stated;
            None: every size.
        relations: grammar v2 only: how many relation sentences (of consecutive described
            objects) at most; None: two, one from 4 objects on.
    """

    intro_background: bool = True
    background_sentence: bool = True
    fillers: int = 0
    positions: tuple[str, ...] | None = None
    sizes: tuple[bool, ...] | None = None
    relations: int | None = None


_SIZE_SYNONYM_P = 0.3  # varied wording: "little", "tiny", "big" instead of the size name
_FILLERS = (
    "The shapes have crisp outlines and flat, uniform colors.",
    "There is no text, person or animal in the image.",
    "The drawing style is simple, like a basic computer graphic or a clip art illustration.",
    "The lighting is even, and there are no shadows or reflections.",
    "Each shape is clearly separated from the others, with some empty space around it.",
)


def _varied_full(obj: Obj, rng: np.random.Generator) -> str:
    size = obj.size
    if rng.random() < _SIZE_SYNONYM_P:
        opts = SIZE_WORDS[obj.size]
        size = opts[rng.integers(len(opts))]
    return f"{size} {obj.colour} {obj.shape}"


# grammar v2, vague positions: the row's or the column's phrases (top/middle/bottom,
# left/middle/right)
_ROW_PHRASES = (
    ("near the top", "in the upper part of the image"),
    ("around the middle", "halfway down the image"),
    ("near the bottom", "in the lower part of the image"),
)
_COL_PHRASES = (
    ("on the left side", "toward the left"),
    ("in the middle", "around the middle"),
    ("on the right side", "toward the right"),
)


def _vague_object(
    obj: Obj, how: str, with_size: bool, first: bool, rng: np.random.Generator
) -> str:
    """v2 object sentence with the position stated by row, column or not at all."""
    a = article(_varied_full(obj, rng) if with_size else f"{obj.colour} {obj.shape}")
    if how == "none":
        templates = [f"There is {a}.", f"The image contains {a}.", f"{capitalised(a)} is visible."]
        if not first:
            templates += [f"There is also {a}.", f"{capitalised(a)} is also present."]
        return templates[rng.integers(len(templates))]
    opts = _ROW_PHRASES[obj.row] if how == "row" else _COL_PHRASES[obj.col]
    phrase = opts[rng.integers(len(opts))]
    templates = [f"{capitalised(a)} appears {phrase}.", f"{capitalised(phrase)}, you can see {a}."]
    templates += [f"There is {a} {phrase}."]
    if not first:
        templates += [f"There is also {a} {phrase}.", f"Additionally, {a} is placed {phrase}."]
    return templates[rng.integers(len(templates))]


def _styled_object(
    obj: Obj,
    first: bool,
    rng: np.random.Generator,
    how: str = "cell",
    with_size: bool = True,
) -> str:
    if how != "cell":
        return _vague_object(obj, how, with_size, first, rng)
    a = article(_varied_full(obj, rng) if with_size else f"{obj.colour} {obj.shape}")
    phrase, noun = CELL_PHRASES[obj.cell], CELL_NOUNS[obj.cell]
    templates = [
        f"In the {noun}, there is {a}.",
        f"{capitalised(a)} is located {phrase} of the image.",
        f"{capitalised(phrase)}, {a} can be seen.",
        f"{capitalised(a)} appears {phrase}.",
        f"{capitalised(phrase)}, you can see {a}.",
        f"The {noun} holds {a}.",
    ]
    if not first:
        templates += [f"There is also {a} {phrase}.", f"Additionally, {a} is placed {phrase}."]
    return templates[rng.integers(len(templates))]


def _styled_dense(scene: Scene, rng: np.random.Generator, style: DenseStyle) -> str:
    objs = scene.objects
    n = len(objs)
    what = "a single shape" if n == 1 else f"{NUMBER_WORDS[n]} shapes"
    bg = article(f"{scene.bg_colour} {scene.bg_kind}")
    if style.intro_background:
        intro = (
            f"The image shows {what} on {bg} background.",
            f"The image features {what} arranged on {bg} background.",
            f"In this picture, there {'is' if n == 1 else 'are'} {what} drawn on top of {bg} "
            "background.",
            f"This is a simple illustration of {what} set against {bg} background.",
        )
    else:
        intro = (
            f"The image shows {what}.",
            f"In this image, {what} {'is' if n == 1 else 'are'} visible.",
            f"The picture is a simple drawing of {what}.",
        )
    sentences = [intro[rng.integers(len(intro))]]
    if style.positions is None:
        sentences += [_styled_object(o, k == 0, rng) for k, o in enumerate(objs)]
    else:
        sizes = style.sizes if style.sizes is not None else (True,) * n
        sentences += [
            _styled_object(o, k == 0, rng, how, with_size)
            for k, (o, how, with_size) in enumerate(zip(objs, style.positions, sizes, strict=True))
        ]
    n_rel = (1 if n >= 4 else 2) if style.relations is None else style.relations
    for a, b in list(zip(objs[1:], objs[:-1], strict=False))[:n_rel]:
        sentences.append(_relation_sentence(a, b))
    if style.background_sentence:
        sentences.append(_bg_sentence(scene))
    picks = rng.choice(len(_FILLERS), size=style.fillers, replace=False)
    sentences += [_FILLERS[k] for k in picks]
    if n == 1:
        closing = (
            f"The {objs[0].shape} is the only object in the image, which makes it the clear "
            "focal point of the scene.",
            f"Nothing else is drawn apart from this {objs[0].shape}.",
        )
    else:
        closing = (
            "Overall, the scene is simple and clean, and the shapes stand out clearly "
            "against the background.",
            "The arrangement of the shapes creates a balanced and visually simple composition.",
            "The shapes are spread over the frame, and none of them overlap.",
        )
    sentences.append(closing[rng.integers(len(closing))])
    return " ".join(sentences)


def hallucinate(scene: Scene, rng: np.random.Generator) -> tuple[Scene, dict[str, Any]]:
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


__all__ = ["DenseStyle", "dense_caption", "hallucinate"]
