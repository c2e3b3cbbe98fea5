"""A matrix's data checked before any of its runs trains.

A run reads its dataset inside the training (:mod:`seps.train.data`): a fault found
there fails that run, and every other run of the matrix the same way, one failed record
each, after whatever ran before it. :func:`check_data_dirs` finds those faults first,
once per dataset and split, so that ``seps-bench run`` stops in one line naming the file
and writes no record: the data folder (a synthetic target, or a folder in the official
layout with every file a run reads, :func:`seps.train.data.check_training_files`), then,
for the official layout, each split a run reads loaded as the training will load it
(:func:`seps.data.layout.load_split`: caption counts, ids, dense captions, the id
mapping, UTF-8) and its image files looked up (present; their pixels are checked when the
training reads them). With ``--skip-bad-images`` missing images are the run's to drop,
unless none of a split's is there.

It is no part of the training path (:mod:`seps.versioning.version` does not hash it): it only
refuses data earlier than the training would.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["check_data_dirs", "check_splits"]


def check_data_dirs(cfgs: Iterable[Any]) -> None:
    """Refuse, before any training, data that no run of ``cfgs`` (train configs) could
    use: one ``ValueError`` naming the file, instead of one failed record per run."""
    from .. import train as trainer

    seen: set[tuple[Any, ...]] = set()
    for cfg in cfgs:
        where = (cfg.dataset, cfg.data_path, cfg.synth_images)
        if where not in seen:
            seen.add(where)
            trainer.check_data_dir(cfg)  # a synthetic target, or the folder
            trainer.check_training_files(cfg)  # official layout: each file
        check_splits(cfg, seen)


def check_splits(cfg: Any, seen: set[tuple[Any, ...]] | None = None) -> None:
    """Load each split ``cfg`` reads from an official-layout folder as the training does
    (text files only) and look up its image files (see the module docstring); ``seen``
    holds what was checked already and is extended."""
    if cfg.dataset == "synthetic":
        return
    from ..data.layout import load_split

    seen = set() if seen is None else seen
    splits = {cfg.train_split: True, cfg.eval_split: True}  # split -> needs dense captions
    if cfg.val_images > 0:
        splits.setdefault(cfg.val_split, False)
    for split, dense in splits.items():
        key = ("split", cfg.data_path, cfg.image_dir, split, dense, cfg.skip_bad_images)
        if key in seen:
            continue
        seen.add(key)
        data = load_split(
            cfg.data_path,
            split,
            image_dir=cfg.image_dir,
            dense_per="image",
            check_images=False,
            require_dense=dense,
        )
        _check_images(data.image_files, data.image_dir, split, cfg.skip_bad_images)


def _check_images(files: list[Path], image_dir: Path, split: str, skip: bool) -> None:
    missing = [f for f in files if not f.is_file()]
    if not missing:
        return
    if len(missing) == len(files):
        raise ValueError(
            f"{image_dir}: none of the {len(files)} images of the {split} split is there; "
            "expected the image folder of the dataset (--image-dir)"
        )
    if not skip:
        more = f" (and {len(missing) - 1} more of its {len(files)})" if len(missing) > 1 else ""
        raise ValueError(
            f"{missing[0]}: image file missing{more}, an image of the {split} split; pass "
            "--image-dir to point elsewhere or --skip-bad-images to drop them"
        )
