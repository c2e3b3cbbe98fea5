"""Captions of the synthetic dataset: the sparse and dense grammars and hallucination.

:func:`sparse_captions` writes the short human-like captions of a
`seps.data.scenes.Scene`, :func:`dense_caption` the long MLLM-like paragraph and
:func:`hallucinate` the *stated* scene of a dense caption that says something false.
Every random choice comes from the generator passed in, so a caption is a pure function
of the scene and the generator state.

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

Sparse captions, grammar v2 (opt-in: ``grammar="v2"``)
-----------------------------------------------------
v1 captions repeat: 28% of a 1,000-image test split's 5,000 captions share their exact
text with another (53% of the 8,000-image train split's). v2 (`_SPARSE_TEMPLATES_V2`)
always names the colour, the size with probability 0.45, the background colour with
probability 0.6; it picks a two-object template with probability 0.6 when the image
has two or more objects; most templates state a position ({pos}, {pb}: two wordings per
cell, "in the upper left corner", "along the top edge", "on the left side", "in the
centre") or the background, or both; and a caption equal to an earlier one of the same
image is re-drawn (up to 10 times). Measured on 10,000-image sets (seeds 0 / 1): 2.1% /
2.4% of the test split's captions and 13.8% / 13.2% of the train split's share their
text with another caption of the split; mean 13.7 words (min 7, max 23, 5th-95th
percentile 9-18; Flickr30K: 13.5). The vocabulary stays that of `seps.data.scenes`.

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

from .scenes import COLOURS, SHAPES, SIZES, Obj, Scene

__all__ = [
    "CAPTIONS_PER_IMAGE",
    "GRAMMARS",
    "DenseStyle",
    "dense_caption",
    "hallucinate",
    "sparse_captions",
]

CAPTIONS_PER_IMAGE = 5

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
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight")


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
    scene: Scene, rng: np.random.Generator, k: int = CAPTIONS_PER_IMAGE, grammar: str = "v1"
) -> list[str]:
    """``k`` short captions of ``scene``, each mentioning one or two of its objects
    (``grammar``: ``"v1"`` or ``"v2"``, see the module docstring)."""
    if grammar == "v2":
        return _sparse_v2(scene, rng, k)
    if grammar != "v1":
        raise ValueError(f"grammar: expected one of {', '.join(GRAMMARS)}, got {grammar!r}")
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


GRAMMARS = ("v1", "v2")

# v2: more than one wording per cell (sparse captions only); "upper"/"lower"/"centre"
# are the baselines' synonyms of top/bottom/center.
_CELL_PHRASES_V2 = (
    ("in the top left corner", "in the upper left corner"),
    ("at the top", "along the top edge"),
    ("in the top right corner", "in the upper right corner"),
    ("on the left", "on the left side"),
    ("in the center", "in the centre"),
    ("on the right", "on the right side"),
    ("in the bottom left corner", "in the lower left corner"),
    ("at the bottom", "along the bottom edge"),
    ("in the bottom right corner", "in the lower right corner"),
)
_V2_SIZE_P = 0.45  # v2: the size is named with this probability (v1: 0.35)
_V2_BG_COLOUR_P = 0.6  # v2: the background colour is named with this probability (v1: 0.5)
_V2_TWO_OBJECTS_P = 0.6  # v2, n >= 2: a two-object template with this probability
_V2_RETRIES = 10  # v2: re-draws of a caption equal to an earlier one of the same image

# v2 templates: (objects mentioned, condition on n, template). Slots as in v1, plus
# {pb} (the cell phrase of b) and {Pos} ({pos} capitalised).
_SPARSE_TEMPLATES_V2: tuple[tuple[int, str, str], ...] = (
    (1, "any", "{A} {pos} ."),
    (1, "any", "{A} on {bg} background ."),
    (1, "any", "There is {a} {pos} ."),
    (1, "any", "A picture of {a} {pos} of the frame ."),
    (1, "any", "Someone drew {a} on {bg} background ."),
    (1, "any", "{A} stands out against the {bgn} background ."),
    (1, "any", "{Pos} , {a} on {bg} background ."),
    (1, "any", "{A} {pos} on {bg} background ."),
    (1, "any", "A simple drawing of {a} placed {pos} ."),
    (1, "one", "Just {a} {pos} on {bg} background ."),
    (1, "one", "Only one shape , {a} , sits {pos} ."),
    (1, "many", "An image with {a} {pos} and some other shapes ."),
    (1, "many", "{N} shapes , one of them is {a} {pos} ."),
    (2, "many", "{A} {pos} and {b} {pb} ."),
    (2, "many", "{A} and {b} on {bg} background ."),
    (2, "many", "{A} is {rel} {b} ."),
    (2, "many", "{A} {rel} {b} on {bg} background ."),
    (2, "many", "{A} next to {b} on {bg} background ."),
    (2, "many", "{N} shapes , including {a} and {b} ."),
    (2, "two", "Two shapes : {a} {pos} and {b} {pb} ."),
    (2, "two", "Only two shapes , {a} {rel} {b} ."),
    (2, "three+", "{A} , {b} and more shapes on {bg} background ."),
    (2, "three+", "{A} {rel} {b} among other shapes ."),
)


def _bg_phrase_v2(scene: Scene, rng: np.random.Generator) -> str:
    if rng.random() < _V2_BG_COLOUR_P:
        return f"{scene.bg_colour} {scene.bg_kind}"
    return scene.bg_kind


def _obj_phrase_v2(obj: Obj, rng: np.random.Generator) -> str:
    """v2 object phrase with article: shape and colour always, size p = 0.45."""
    words = []
    if rng.random() < _V2_SIZE_P:
        opts = _SIZE_WORDS[obj.size]
        words.append(opts[rng.integers(len(opts))])
    words += [obj.colour, obj.shape]
    return _article(" ".join(words))


def _cell_phrase_v2(obj: Obj, rng: np.random.Generator) -> str:
    opts = _CELL_PHRASES_V2[obj.cell]
    return opts[rng.integers(len(opts))]


def _one_sparse_v2(scene: Scene, rng: np.random.Generator, weights: np.ndarray) -> str:
    n = len(scene.objects)
    two = n >= 2 and rng.random() < _V2_TWO_OBJECTS_P
    usable = [
        t for t in _SPARSE_TEMPLATES_V2 if t[0] == (2 if two else 1) and _template_ok(t[1], n)
    ]
    n_obj, _cond, template = usable[rng.integers(len(usable))]
    idx = rng.choice(n, size=n_obj, replace=False, p=weights)
    a = scene.objects[idx[0]]
    fields = {"a": _obj_phrase_v2(a, rng), "pos": _cell_phrase_v2(a, rng)}
    if n_obj == 2:
        b = scene.objects[idx[1]]
        fields.update(b=_obj_phrase_v2(b, rng), pb=_cell_phrase_v2(b, rng), rel=_relation(a, b))
    bg = _bg_phrase_v2(scene, rng)
    fields.update(bg=_article(bg), bgn=bg, N=_NUMBER_WORDS[n].capitalize())
    fields.update(A=_cap(fields["a"]), Pos=_cap(fields["pos"]))
    return template.format(**fields)


def _sparse_v2(scene: Scene, rng: np.random.Generator, k: int) -> list[str]:
    weights = np.array([2.0 if o.size == "large" else 1.0 for o in scene.objects])
    weights /= weights.sum()
    out: list[str] = []
    for _ in range(k):
        cap = _one_sparse_v2(scene, rng, weights)
        for _retry in range(_V2_RETRIES):
            if cap not in out:
                break
            cap = _one_sparse_v2(scene, rng, weights)
        out.append(cap)
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
        opts = _SIZE_WORDS[obj.size]
        size = opts[rng.integers(len(opts))]
    return f"{size} {obj.colour} {obj.shape}"


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


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
    a = _article(_varied_full(obj, rng) if with_size else f"{obj.colour} {obj.shape}")
    if how == "none":
        templates = [f"There is {a}.", f"The image contains {a}.", f"{_cap(a)} is visible."]
        if not first:
            templates += [f"There is also {a}.", f"{_cap(a)} is also present."]
        return templates[rng.integers(len(templates))]
    opts = _ROW_PHRASES[obj.row] if how == "row" else _COL_PHRASES[obj.col]
    phrase = opts[rng.integers(len(opts))]
    templates = [f"{_cap(a)} appears {phrase}.", f"{_cap(phrase)}, you can see {a}."]
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
    a = _article(_varied_full(obj, rng) if with_size else f"{obj.colour} {obj.shape}")
    phrase, noun = _CELL_PHRASES[obj.cell], _CELL_NOUNS[obj.cell]
    templates = [
        f"In the {noun}, there is {a}.",
        f"{_cap(a)} is located {phrase} of the image.",
        f"{_cap(phrase)}, {a} can be seen.",
        f"{_cap(a)} appears {phrase}.",
        f"{_cap(phrase)}, you can see {a}.",
        f"The {noun} holds {a}.",
    ]
    if not first:
        templates += [f"There is also {a} {phrase}.", f"Additionally, {a} is placed {phrase}."]
    return templates[rng.integers(len(templates))]


def _styled_dense(scene: Scene, rng: np.random.Generator, style: DenseStyle) -> str:
    objs = scene.objects
    n = len(objs)
    what = "a single shape" if n == 1 else f"{_NUMBER_WORDS[n]} shapes"
    bg = _article(f"{scene.bg_colour} {scene.bg_kind}")
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
