"""The head configurations the equivalence tests sweep: each preset, and each preset with
one switch flipped (combinations the config refuses are left out)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest

from seps.config import CHOICES, get_config


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
