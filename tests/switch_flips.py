"""The head configurations the equivalence tests sweep (each preset, and each preset with
one switch flipped; combinations the config refuses are left out) and their inputs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest
import torch

from seps.core.config import CHOICES, get_config


def single_flips(fields: Iterable[str] | None = None, embed_size: int = 32) -> list:
    """``pytest.param`` of the three presets (36 patches, ``embed_size``) and of every
    single flip of ``fields`` (default: every switch of ``CHOICES``), ids like
    ``code-scoring=paper``."""
    names = tuple(CHOICES) if fields is None else tuple(fields)
    out = []
    for preset in ("laps", "code", "paper"):
        base = dataclasses.replace(get_config(preset), embed_size=embed_size, num_patches=36)
        out.append(pytest.param(base, id=preset))
        for field in names:
            for value in CHOICES[field]:
                if getattr(base, field) == value:
                    continue
                try:
                    cfg = dataclasses.replace(base, **{field: value})
                except ValueError:  # a combination the config refuses
                    continue
                out.append(pytest.param(cfg, id=f"{preset}-{field}={value}"))
    return out


def random_inputs(n_img: int, n_cap: int, embed_size: int = 32) -> dict:
    """Seeded random head inputs under :func:`seps.core.evaluate.similarity_matrix`'s names:
    37 image tokens (``[CLS]`` + 36 patches), sparse captions of 3-19 words padded to 20,
    one dense caption of 20-49 words per image padded to 50, 5 captions per image."""
    g = torch.Generator().manual_seed(0)
    c = embed_size
    return dict(
        img_embs=torch.randn(n_img, 37, c, generator=g),
        cap_embs=torch.randn(n_cap, 20, c, generator=g),
        cap_lens=torch.randint(3, 20, (n_cap,), generator=g),
        dense_embs=torch.randn(n_img, 50, c, generator=g),
        dense_lens=torch.randint(20, 50, (n_img,), generator=g),
        caption_to_image=torch.arange(n_cap) // 5 % n_img,
    )
