"""``seps-bench run --set train.FIELD=VALUE --set head.FIELD=VALUE``: a profile, changed.

Each ``--set`` changes one field of the profile (:attr:`Profile.train` or
:attr:`Profile.head`), so it applies *before* each run's own fields: a run (or the
matrix's ``train:`` mapping) that sets the field itself keeps its value, and the matrix
compares what it compared. A value is read as YAML and checked by the rules of a profile
value (:func:`seps.train.config.coerce_field` for train fields, :func:`seps.core.config.get_config`
for head switches), so ``--set train.lr=1e-3`` and ``lr: 1e-3`` in ``profiles.yaml`` mean
the same thing; every error is one line naming ``--set`` and the field.

The changed profile is named after its changes (``quick+train.epochs=3``), so that its
records are reported beside the profile's, not in place of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..core.config import SEPSConfig, get_config
from ..train.config import TrainConfig, coerce_field
from .definition_checks import load_yaml_text, train_value_problem
from .definitions import NON_SEMANTIC_TRAIN_FIELDS, Matrix, Profile

__all__ = ["SetError", "apply_sets", "parse_set", "shadowed_sets"]


class SetError(ValueError):
    """A bad ``--set``; the message names the option, the field and what was expected."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One parsed ``--set``: ``part`` (``train`` or ``head``), field name, typed value and
    the text as given (for messages and the profile name)."""

    part: str
    field: str
    value: Any
    text: str


def _yaml_value(raw: str, where: str) -> Any:
    """``raw`` read as a YAML scalar or list, as a profile value would be."""
    if not raw.strip():
        return None
    return load_yaml_text(raw, where, SetError, invalid="not a valid YAML value")


def parse_set(text: str) -> Setting:
    """Parse and check one ``train.FIELD=VALUE`` or ``head.FIELD=VALUE``.

    A train field is checked alone on top of the :class:`TrainConfig` defaults (type,
    choices and range); a head switch on top of the ``code`` preset. Checks that involve
    several fields (e.g. ``aggr_ratio`` with ``sparse_ratio``) run when each run is
    resolved.
    """
    where = f"--set {text}"
    name, eq, raw = text.partition("=")
    part, dot, field = name.strip().partition(".")
    if not eq or not dot or not field:
        raise SetError(f"{where}: expected train.FIELD=VALUE or head.FIELD=VALUE")
    value = _yaml_value(raw, where)
    if part == "train":
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        if field not in known:
            raise SetError(f"{where}: unknown train config field {field!r}")
        if field in NON_SEMANTIC_TRAIN_FIELDS:
            raise SetError(
                f"{where}: train config field {field!r} is not part of a run's definition; "
                f"{NON_SEMANTIC_TRAIN_FIELDS[field]}"
            )
        # The field's own rules, checked alone, and those TrainConfig leaves to the
        # definitions (seps.experiments.definition_checks), as for a profile value.
        problem = train_value_problem(field, value)
        if problem:
            raise SetError(f"{where}: {problem}")
        value = coerce_field(field, value)
    elif part == "head":
        known = {f.name for f in dataclasses.fields(SEPSConfig)}
        if field not in known:
            raise SetError(
                f"{where}: unknown head switch {field!r}; known: {', '.join(sorted(known))}"
            )
        if isinstance(value, list):
            raise SetError(f"{where}: config field {field!r}: expected a single value")
        try:
            get_config("code", **{field: value})
        except ValueError as exc:
            raise SetError(f"{where}: {exc}") from None
    else:
        raise SetError(f"{where}: unknown prefix {part!r}; expected train.FIELD or head.FIELD")
    return Setting(part, field, value, f"{part}.{field}={raw.strip()}")


def apply_sets(profile: Profile, sets: Sequence[str]) -> Profile:
    """``profile`` with every ``--set`` of ``sets`` applied in order (a later one of the
    same field wins), named ``<profile>+<setting>+...``; ``profile`` itself when
    ``sets`` is empty."""
    if not sets:
        return profile
    parsed = [parse_set(s) for s in sets]
    last = {(s.part, s.field): s for s in parsed}  # dicts keep the first insertion's place
    head, train = dict(profile.head), dict(profile.train)
    for s in last.values():
        (train if s.part == "train" else head)[s.field] = s.value
    name = "+".join([profile.name, *(s.text for s in last.values())])
    return dataclasses.replace(profile, name=name, head=head, train=train)


def shadowed_sets(matrix: Matrix, sets: Sequence[str]) -> list[str]:
    """One line per ``--set`` that some runs of ``matrix`` override with their own value
    (a run's fields win over the profile's), naming how many and which."""
    out = []
    for s in {(s.part, s.field): s for s in map(parse_set, sets)}.values():
        own = [r.id for r in matrix.runs if s.field in (r.train if s.part == "train" else r.set)]
        if own:
            shown = ", ".join(own[:5]) + (", ..." if len(own) > 5 else "")
            out.append(
                f"--set {s.text}: {len(own)} of {len(matrix.runs)} runs set {s.field} "
                f"themselves (or in the matrix's train:) and keep their value ({shown})"
            )
    return out
