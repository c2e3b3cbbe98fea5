"""Controls of the ``controls`` ablation matrix: known damage, no-op permutations and
selection controls (see docs/controls.md).

Evaluation (``TrainConfig`` fields, test-split evaluation only, never the per-epoch
validation, so that runs differing only in them share one training):

- ``eval_sim_noise`` (planted effect): :func:`add_sim_noise` adds i.i.d. Gaussian noise of
  a known std to the final similarity matrix before ranking, from a private generator
  seeded by the run seed (:func:`derived_seed`), a deliberately damaged variant of known
  size. A pipeline that cannot detect it cannot detect an effect of that size.
- ``eval_permute`` (negative control): :func:`presentation_order` gives the seeded order
  in which images and captions are presented to the scorer; the matrix is mapped back
  before ranking (``seps.core.evaluate.similarity_matrix(present_order=...)``). Metrics must
  not move.

Selection (``SEPSConfig.selection``): the head keeps the same count of patches per pair
as the learned decision, only *which* changes. The caller passes a ``selection_prior``
``(B_v, B_t, N)`` (in training: the loop's hook :class:`seps.train.hooks_controls.
SelectionControl`) and the head keeps the top of :func:`seps.core.selection.control_score`:

- ``random``: the prior is uniform noise, drawn per training step from a private
  generator (:func:`step_generator`) and at evaluation by a counter-based hash of
  (seed, image index, caption index, patch) (:func:`pair_uniform`), so it depends neither
  on the shards nor on the order of presentation and never touches the global RNG.
- ``oracle``: the prior is 1 on the patches covering an object of the image that the
  caption names (:func:`oracle_prior` of an :class:`OracleTable`), 0 elsewhere; ties are
  broken toward the learned score (``prior + 1e-3 * sigmoid(learned)``). The objects come
  from the synthetic scene, reproduced from the dataset's seed and the image's global id
  exactly as `seps.data.synth` draws it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import Tensor

from ..core.config import SELECTIONS
from ..data.scenes import COLOURS, SHAPES, Scene, _draw_shape, sample_scene

__all__ = [
    "N_CATEGORIES",
    "SELECTIONS",
    "OracleTable",
    "add_sim_noise",
    "caption_names",
    "category",
    "derived_seed",
    "object_cover",
    "oracle_prior",
    "oracle_table",
    "pair_uniform",
    "presentation_order",
    "selection_prior_fn",
    "step_generator",
]

#: Object categories (shape, colour) of the synthetic vocabulary; index ``N_CATEGORIES``
#: pads images with fewer than the maximum number of objects and is never named.
N_CATEGORIES = len(SHAPES) * len(COLOURS)
_COLOUR_INDEX = {c: i for i, c in enumerate(COLOURS)}
_SHAPE_INDEX = {s: i for i, s in enumerate(SHAPES)}
_TOKEN = re.compile(r"[a-z]+")
_MASK32 = 0xFFFFFFFF


def derived_seed(seed: int, *keys: int | str) -> int:
    """A 63-bit seed derived from ``seed`` and ``keys`` (strings hashed stably), for a
    private generator whose draws change nothing else's stream."""
    words = [int(seed) % 2**32]
    for k in keys:
        if isinstance(k, str):
            words.extend(k.encode("utf-8"))
        else:
            words.append(int(k) % 2**32)
    return int(np.random.SeedSequence(words).generate_state(2, dtype=np.uint64)[0] >> 1)


def step_generator(seed: int, epoch: int, step: int) -> torch.Generator:
    """The private generator of the ``random`` selection at one training step (fresh each
    step, so a resumed epoch draws the same)."""
    return torch.Generator().manual_seed(derived_seed(seed, "selection", epoch, step))


# ----------------------------------------------------------------------- evaluation


def add_sim_noise(sims: Tensor, std: float, seed: int) -> Tensor:
    """``sims (n_img, n_cap) + std * N(0, 1)`` i.i.d., from a private generator seeded by
    ``seed`` (a new tensor; ``std == 0`` returns ``sims`` itself)."""
    if std == 0:
        return sims
    g = torch.Generator().manual_seed(derived_seed(seed, "eval_sim_noise"))
    noise = torch.randn(sims.shape, generator=g, dtype=torch.float64)
    return (sims.double() + std * noise).to(sims.dtype)


def presentation_order(n_images: int, n_captions: int, seed: int) -> tuple[Tensor, Tensor]:
    """Seeded random orders ``(image_perm (n_images,), caption_perm (n_captions,))`` in
    which ``eval_permute`` presents the gallery and the captions to the scorer."""
    g = torch.Generator().manual_seed(derived_seed(seed, "eval_permute"))
    return torch.randperm(n_images, generator=g), torch.randperm(n_captions, generator=g)


# ------------------------------------------------------------------------ selection


def _fmix32(x: Tensor) -> Tensor:
    """MurmurHash3's 32-bit finaliser on int64 tensors holding 32-bit values (products
    wrap modulo 2^64, whose low 32 bits are the 32-bit product)."""
    x = x ^ (x >> 16)
    x = (x * 0x85EBCA6B) & _MASK32
    x = x ^ (x >> 13)
    x = (x * 0xC2B2AE35) & _MASK32
    return x ^ (x >> 16)


def pair_uniform(seed: int, img_idx: Tensor, cap_idx: Tensor, n: int) -> Tensor:
    """Uniform ``[0, 1)`` numbers ``(V, T, n)``, a fixed function of (``seed``, image index,
    caption index, patch): the evaluation prior of the ``random`` selection.

    img_idx ``(V,)``, cap_idx ``(T,)`` int (dataset indices).
    """
    s = derived_seed(seed, "pair_uniform") & _MASK32
    v = img_idx.long().cpu().view(-1, 1, 1) & _MASK32
    t = cap_idx.long().cpu().view(1, -1, 1) & _MASK32
    p = torch.arange(n, dtype=torch.long).view(1, 1, -1)
    h = _fmix32(p ^ s)
    h = _fmix32(h ^ _fmix32(t + 0x9E3779B9 & _MASK32))
    h = _fmix32(h ^ _fmix32(v + 0x7F4A7C15 & _MASK32))
    return (h >> 8).float() / float(1 << 24)


def category(shape: str, colour: str) -> int:
    """Index of the object category (shape, colour) in ``[0, N_CATEGORIES)``."""
    return _SHAPE_INDEX[shape] * len(COLOURS) + _COLOUR_INDEX[colour]


def caption_names(text: str) -> np.ndarray:
    """``(N_CATEGORIES + 1,)`` bool: the object categories a sparse caption names.

    Every shape word names its shape; when the word just before it is an object colour
    ("a big red star"), only that colour, else every colour. The last entry (padding) is
    always False.
    """
    out = np.zeros(N_CATEGORIES + 1, dtype=bool)
    words = _TOKEN.findall(text.lower())
    for i, w in enumerate(words):
        if w not in _SHAPE_INDEX:
            continue
        prev = words[i - 1] if i else ""
        colours = [prev] if prev in _COLOUR_INDEX else list(COLOURS)
        for c in colours:
            out[category(w, c)] = True
    return out


def _object_radius(obj_size: str, m: int) -> float:
    return (0.16 if obj_size == "large" else 0.09) * m


def object_cover(scene: Scene, image_size: int, grid: int) -> np.ndarray:
    """``(n_objects, grid * grid)`` bool: the patches each object of ``scene`` covers.

    The object is drawn alone exactly as `seps.data.scenes.render_scene` draws it (same
    centre, jitter, clamping and radius on the ``2 * image_size`` canvas, same
    ``_draw_shape``); it covers patch ``(r, c)`` (row-major, ``grid`` x ``grid`` over the
    whole image) when a drawn canvas pixel's centre lies in it. Occlusion by later objects
    is ignored.
    """
    m = 2 * image_size
    band = (np.arange(m) * grid) // m  # canvas pixel -> patch row/column
    out = np.zeros((len(scene.objects), grid * grid), dtype=bool)
    for k, (obj, (jx, jy)) in enumerate(zip(scene.objects, scene.jitter, strict=True)):
        r = _object_radius(obj.size, m)
        cx = min(max((obj.col + 0.5) / 3 * m + jx * m, r + 1), m - r - 1)
        cy = min(max((obj.row + 0.5) / 3 * m + jy * m, r + 1), m - r - 1)
        canvas = Image.new("L", (m, m), 0)
        _draw_shape(ImageDraw.Draw(canvas), obj.shape, cx, cy, r, (255,))
        ys, xs = np.nonzero(np.asarray(canvas))
        out[k, band[ys] * grid + band[xs]] = True
    return out


@dataclass(frozen=True)
class OracleTable:
    """What the ``oracle`` selection knows of a split.

    cover: ``(n_images, O, N)`` bool, patch coverage of each image's objects (``O`` the
        most objects of an image; padding rows False);
    cats: ``(n_images, O)`` int64 object categories (:func:`category`; padding
        ``N_CATEGORIES``);
    names: ``(n_captions, N_CATEGORIES + 1)`` bool (:func:`caption_names`).
    """

    cover: Tensor
    cats: Tensor
    names: Tensor


def oracle_table(
    data_dir: Path,
    image_ids: Sequence[str],
    captions: Sequence[str],
    n_patches: int,
) -> OracleTable:
    """The :class:`OracleTable` of a split of the synthetic set in ``data_dir``.

    Each image's scene is drawn again as `seps.data.synth` draws it: ``sample_scene(
    np.random.default_rng([seed, gid]))``, first on a fresh generator per global image id
    ``gid`` (the image id), with ``seed`` and the image size from the set's ``meta.json``.
    ``n_patches`` must be a square (the patch grid).
    """
    grid = math.isqrt(n_patches)
    if grid * grid != n_patches:
        raise ValueError(
            f"config field 'selection': oracle needs a square patch grid, got N={n_patches}"
        )
    try:
        meta = json.loads((Path(data_dir) / "meta.json").read_text(encoding="utf-8"))
        seed, size = int(meta["args"]["seed"]), int(meta["args"]["image_size"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(
            f"config field 'selection': oracle needs the synthetic dataset (its meta.json); "
            f"{data_dir} has none"
        ) from None
    covers = []
    cats = []
    for gid in image_ids:
        scene = sample_scene(np.random.default_rng([seed, int(gid)]))
        covers.append(object_cover(scene, size, grid))
        cats.append([category(o.shape, o.colour) for o in scene.objects])
    most = max((len(c) for c in cats), default=1)
    cover = np.zeros((len(cats), most, n_patches), dtype=bool)
    cat = np.full((len(cats), most), N_CATEGORIES, dtype=np.int64)
    for i, (cv, ct) in enumerate(zip(covers, cats, strict=True)):
        cover[i, : len(ct)] = cv
        cat[i, : len(ct)] = ct
    names = (
        np.stack([caption_names(t) for t in captions])
        if len(captions)
        else np.zeros((0, N_CATEGORIES + 1), dtype=bool)
    )
    return OracleTable(torch.from_numpy(cover), torch.from_numpy(cat), torch.from_numpy(names))


def oracle_prior(table: OracleTable, img_idx: Tensor, cap_idx: Tensor) -> Tensor:
    """``(V, T, N)`` float: 1 where patch ``n`` of image ``img_idx[v]`` covers an object
    whose category caption ``cap_idx[t]`` names, else 0."""
    cover = table.cover[img_idx.cpu()].float()  # (V, O, N)
    cats = table.cats[img_idx.cpu()]  # (V, O)
    names = table.names[cap_idx.cpu()]  # (T, K+1)
    named = names[:, cats].permute(1, 0, 2).float()  # (V, T, O)
    return (torch.einsum("vto,von->vtn", named, cover) > 0).float()


#: ``prior(img_idx (V,), cap_idx (T,)) -> (V, T, N)``: a split's selection prior.
PriorFn = Callable[[Tensor, Tensor], Tensor]


def selection_prior_fn(
    selection: str,
    n_patches: int,
    seed: int,
    *,
    dataset: str = "synthetic",
    data_dir: Path | None = None,
    image_ids: Sequence[str] = (),
    captions: Sequence[str] = (),
) -> PriorFn | None:
    """The evaluation prior of ``selection`` over a split (None for ``learned``).

    ``random``: :func:`pair_uniform` with ``seed``; ``oracle``: :func:`oracle_prior` of the
    split's :func:`oracle_table` (a ``ValueError`` naming the field for a dataset that is
    not synthetic).
    """
    if selection == "learned":
        return None
    if selection == "random":
        return lambda v, t: pair_uniform(seed, v, t, n_patches)
    if dataset != "synthetic" or data_dir is None:
        raise ValueError(
            f"config field 'selection': oracle needs the synthetic dataset (scene layouts), "
            f"got dataset {dataset!r}"
        )
    table = oracle_table(data_dir, image_ids, captions, n_patches)
    return lambda v, t: oracle_prior(table, v, t)
