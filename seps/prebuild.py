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

import json
from pathlib import Path

from .provenance import cpu_identity, cpu_label, float_path_key
from .store import atomic_write_json
from .train.pretrain import ensure_pretrained, is_complete, pretrained_dir
from .train_config import TrainConfig

__all__ = ["BUILT_ON", "build_checked", "prebuild_pretraining"]

#: The file beside a pretraining build that names the CPU float path it was built on.
BUILT_ON = "built_on.json"


def prebuild_pretraining(cfg: TrainConfig, *, progress: bool = True) -> None:
    """Build ``cfg.pretrain``'s backbones if they are not cached (no-op when the run has
    no pretraining recipe), with :func:`build_checked`."""
    if cfg.pretrain is not None:
        build_checked(cfg.pretrain_build, progress=progress)


def build_checked(name: str, root: str | Path | None = None, *, progress: bool = True) -> Path:
    """Recipe ``name``'s folder, built first if absent, checked for its float path.

    A build made here gets :data:`BUILT_ON` (the float path in force,
    :func:`seps.provenance.cpu_identity`). A cached build whose file names another float
    path is refused: its weights come from that path, so a run pinned to this one
    (``SEPS_FLOAT_PATH``) would start from weights no other machine on this path makes.
    A build without the file (made before it existed, natively as far as anyone knows)
    is used as it is by a native run and refused by a pinned one.

    Raises:
        ValueError: the cached build's float path differs from this one's.
    """
    folder = pretrained_dir(name, root)
    fresh = not is_complete(folder)
    ensure_pretrained(name, root, progress=progress)
    stamp_file = folder / BUILT_ON
    here = cpu_identity()
    if fresh:
        atomic_write_json(stamp_file, {"cpu": here})
        return folder
    if not stamp_file.is_file():
        if float_path_key(here)[0] == "pinned":  # type: ignore[index]
            # Made before builds named their path: natively, as far as anyone knows.
            raise ValueError(
                f"{folder}: built before pretraining builds named their float path (no "
                f"{BUILT_ON}), so not known to be on this pinned one; move the folder aside "
                "to build it here (SEPS_FLOAT_PATH: docs/across-machines.md)"
            )
        return folder
    try:
        there = json.loads(stamp_file.read_text()).get("cpu")
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{stamp_file}: unreadable ({exc}); expected a JSON object") from exc
    if float_path_key(there) != float_path_key(here):
        raise ValueError(
            f"{folder}: built on another float path ({cpu_label(there)}), this run is on "
            f"{cpu_label(here)}; move the folder aside to build it here (SEPS_FLOAT_PATH: "
            "docs/across-machines.md)"
        )
    return folder
