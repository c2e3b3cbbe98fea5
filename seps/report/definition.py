"""Whether a record was made by its matrix's definition as it stands now.

A record's code version says whether the code that made it is this code
(:mod:`seps.versioning.version`); it does not say whether the matrix and profile files still ask
for the run it holds. When a profile changes (the second-epoch schedule of the profile
now named `standard`, 2026-11-28) every run of it gets a new key at the same code
version, and until a run is made again its latest record is one of the old definition. A
report that took it as current would pair it with a new record of the baseline: two
schedules in one difference. So a record counts only where every field the definition
sets (the profile's and the run's train fields, and the head its preset, profile and
switches give) has the value the record stored; the others are superseded, listed and
not used.

Fields the definition does not set (the dataset's folder, ``--set`` of a field nobody
defines) are not compared: a record made with them is the definition's run on other
data or with an addition, as the record's own config says. Where/how fields
(:data:`seps.experiments.definitions.NON_SEMANTIC_TRAIN_FIELDS`, ``workers``,
``keep_optimizer``) are
never compared. A record whose profile this checkout does not define, or whose key is
not the key of the configs it stores (written by hand), is kept as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ..core.config import SEPSConfig
from ..experiments.definitions import (
    NON_SEMANTIC_TRAIN_FIELDS,
    RESULT_NEUTRAL_TRAIN_FIELDS,
    AblationError,
    Matrix,
    Profile,
    config_key,
    load_profile,
    resolve,
)
from ..train.config import TrainConfig

_NEVER_COMPARED = {*NON_SEMANTIC_TRAIN_FIELDS, *RESULT_NEUTRAL_TRAIN_FIELDS}


@functools.cache
def defined_profile(name: str) -> Profile | None:
    """The profile ``name`` as this checkout defines it; ``None`` when it does not."""
    try:
        return load_profile(name)
    except AblationError:
        return None


def _same(stored: Any, expected: Any) -> bool:
    if isinstance(stored, (list, tuple)) or isinstance(expected, (list, tuple)):
        return isinstance(stored, (list, tuple)) and list(stored) == list(expected or ())
    return bool(stored == expected)


def _expected(matrix: Matrix, run_id: str, profile: str, seed: int) -> tuple | None:
    """((train field, value), ...) and ((head field, value), ...) the definition gives
    ``run_id`` under ``profile`` at ``seed``; ``None`` when it cannot say."""
    prof = defined_profile(profile)
    try:
        run = matrix.run(run_id)
    except (KeyError, ValueError, AblationError):
        return None
    if prof is None:
        return None
    try:
        train_cfg, head = resolve(run, prof, seed)
    except (TypeError, ValueError):
        return None
    fields = (set(prof.train) | set(run.train)) - _NEVER_COMPARED
    train = tuple(sorted((k, getattr(train_cfg, k)) for k in fields))
    head_fields = set(prof.head) | set(run.set)
    return train, tuple(sorted((k, v) for k, v in head.to_dict().items() if k in head_fields))


def _keyed_by_its_config(rec: Mapping[str, Any]) -> bool:
    """The record's ``key`` is the key of the configs it stores: a record the runner
    wrote, whose stored fields are the ones its run used (a record written by hand, as
    in the tests' stores, may store a few fields only, and is taken as it is)."""
    train, head = rec.get("train_config"), rec.get("head_config")
    if not isinstance(train, Mapping) or not isinstance(head, Mapping):
        return False
    try:
        t = dict(train)
        if "lr_milestones" in t:
            t["lr_milestones"] = tuple(t["lr_milestones"])
        return config_key(TrainConfig(**t), SEPSConfig(**head)) == rec.get("key")
    except (TypeError, ValueError, KeyError):
        return False


def _made_by_definition(rec: Mapping[str, Any], matrix: Matrix, cache: dict) -> bool:
    try:
        seed = int(rec["seed"])
    except (TypeError, ValueError):
        return True
    if not _keyed_by_its_config(rec):
        return True
    where = (str(rec["run_id"]), str(rec["profile"]), seed)
    if where not in cache:
        cache[where] = _expected(matrix, *where)
    expected = cache[where]
    if expected is None:
        return True
    train, head = expected
    stored_train = rec.get("train_config")
    stored_head = rec.get("head_config")
    if isinstance(stored_train, Mapping):
        for k, v in train:
            if k in stored_train and not _same(stored_train[k], v):
                return False
    if isinstance(stored_head, Mapping):
        for k, v in head:
            if k in stored_head and not _same(stored_head[k], v):
                return False
    return True


def off_definition(df: pd.DataFrame, matrix: Matrix) -> pd.Series:
    """True for each row of ``df`` (records of ``matrix``'s runs) that stores another
    value than the definition now gives for a field the definition sets."""
    if df.empty:
        return pd.Series([], dtype=bool, index=df.index)
    cache: dict = {}
    flags = [not _made_by_definition(r, matrix, cache) for r in df.to_dict("records")]
    return pd.Series(flags, dtype=bool, index=df.index)


__all__ = ["defined_profile", "off_definition"]
