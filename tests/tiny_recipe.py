"""A test-sized pretraining recipe: the same steps as ``synth-48`` at a few seconds' cost
(3 steps of 8 images at 32 px on 60 synthetic scenes)."""

from __future__ import annotations

from typing import Any

from seps.train.pretrain import PretrainRecipe


def make_tiny_recipe(**changes: Any) -> PretrainRecipe:
    """The test-sized recipe, with ``changes`` applied to its fields."""
    fields: dict[str, Any] = dict(
        description="test-sized",
        image_size=32,
        synth_images=60,
        vocab_size=300,
        max_dense_words=48,
        steps=3,
        batch_size=8,
        warmup_steps=1,
        embed_size=32,
    )
    return PretrainRecipe(**{**fields, **changes})
