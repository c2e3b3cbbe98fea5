"""Build a run's pretrained backbones before the run starts, never inside it.

Why this exists: the training loop seeds every random generator with the run's seed
and only then asks for its backbones (:func:`seps.train.pretrain.pretrained_parts`).
When the recipe's cache is absent, that call builds it in-process, and the build
re-seeds and consumes the same global generators, so the model the run then
initialises differs from the one it gets when the cache exists: the run's numbers would
depend on whether it happened to be the first run on a machine. (Found on a fresh
checkout: `loss-study` `ratio/topk/mse/unified` seed 1 gave rSum 174.6 where the cached
path gives 177.7, the value of every bit-identical top-K cell.) Every entry point that
trains (the runner, ``seps-bench train``, ``seps-bench ratio-scale``) calls
:func:`prebuild_pretraining` first, outside the run's clock.

The training modules are hashed into every record's code version, so the cure inside
the loop (isolating the build's generators) waits for the next change that has to touch
them; this module is orchestration and is not hashed.
"""

from __future__ import annotations

from .train.pretrain import ensure_pretrained
from .train_config import TrainConfig

__all__ = ["prebuild_pretraining"]


def prebuild_pretraining(cfg: TrainConfig, *, progress: bool = True) -> None:
    """Build ``cfg.pretrain``'s backbones if they are not cached (no-op when the run has
    no pretraining recipe or the cache is complete)."""
    if cfg.pretrain is not None:
        ensure_pretrained(cfg.pretrain, progress=progress)
