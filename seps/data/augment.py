"""The official training image augmentation, drawn from an explicit random generator.

The official training transform (``lib/image_caption.py``, ``build_transforms``) is
``RandomResizedCrop(size, scale=(0.6, 1.0), interpolation=BICUBIC)`` on the original
image, then ``RandomHorizontalFlip()`` (p = 0.5), ``ToTensor`` and the ImageNet
normalisation; its evaluation transform resizes the whole image to ``size x size``
(bicubic), which is what :func:`seps.data.layout.decode_image` does without a generator.

Here the crop follows torchvision's sampling rule (:func:`random_resized_crop_box`), but
the draws come from a ``numpy.random.Generator`` seeded per image by the caller, so a batch
is the same whichever process decodes it (DataLoader workers or the main process).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["CROP_RATIO", "CROP_SCALE", "FLIP_P", "random_resized_crop_box"]

#: Range of the crop's area as a fraction of the image's (the official ``scale``).
CROP_SCALE = (0.6, 1.0)
#: Range of the crop's aspect ratio width / height (torchvision's default ``ratio``).
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
#: Probability of the horizontal flip.
FLIP_P = 0.5
#: Draws of (area, ratio) before the central fallback crop (torchvision's rule).
_ATTEMPTS = 10


def random_resized_crop_box(
    width: int,
    height: int,
    rng: np.random.Generator,
    scale: tuple[float, float] = CROP_SCALE,
    ratio: tuple[float, float] = CROP_RATIO,
) -> tuple[int, int, int, int]:
    """``(left, top, w, h)`` of a random crop of a ``width x height`` image.

    Up to 10 draws of an area fraction uniform in ``scale`` and an aspect ratio
    log-uniform in ``ratio``; the first box that fits is placed uniformly at random.
    If none fits, the largest central box whose aspect ratio is clamped to ``ratio``.
    """
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(_ATTEMPTS):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return left, top, w, h
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        w, h = round(height * ratio[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h
