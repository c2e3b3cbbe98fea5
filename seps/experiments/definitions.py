"""Ablation definitions, named matrices and profiles, read from ``ablations/``.

``ablations/differences.yaml`` lists every documented difference and every finding with
its code and paper values; ``ablations/matrices/<name>.yaml`` lists the runs of a named
matrix; ``ablations/profiles.yaml`` says how large a run is (``smoke``, ``quick``,
``paper``). The runner, the docs and the reports read these files, so adding a
difference is adding an entry to ``differences.yaml``.

A matrix's ``runs`` entries are one of:

- ``{id, preset, set: {switch: value}, train: {field: value}, paper_row}``: one run;
- ``{expand: flip | revert, from: PRESET, to: PRESET, over: differences | findings}``:
  one run per entry, ``from`` with that entry's switches set to their ``to`` value
  (ids ``from+entry`` for flip, ``from-entry`` for revert);
- ``{grid: {preset: [...], switch: [...], train.field: [...]}, id: TEMPLATE}``: the
  Cartesian product; ``TEMPLATE`` may use ``{key}`` or ``{key:format}`` of grid keys.

Every error names the file, the run and the field.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.config import HEAD_KEY_OMITTED_AT_DEFAULT, PRESETS, SEPSConfig, get_config
from ..versioning.data_fingerprint import data_fingerprint, resolved_path

# Re-exported: they were defined here before --help needed them without torch.
from .ablation_index import (  # noqa: F401
    default_root,
    list_matrices,
    packaged_root,
    profile_summaries,
)
from .definition_checks import (  # noqa: F401  (re-exported)
    SEED_LIMIT,
    as_mapping,
    check_grid,
    check_matrix_keys,
    check_profile_entry,
    check_run_entry,
    check_run_ids,
    read_yaml_file,
    seeds_problem,
    train_value_problem,
)

# TrainConfig (whose module loads torch) is imported where used: `status` reads YAML without it.

#: TrainConfig fields a matrix or a profile may not set (they are where/how, not what),
#: each with where a user sets it instead (the ``--set`` error says so).
NON_SEMANTIC_TRAIN_FIELDS = {
    "out_dir": "the runner keeps each training under <--results>/_work",
    "cache_dir": "the runner keeps feature caches under <--results>/_work",
    "progress": "use --no-progress",
    "device": "use --device",
}
#: TrainConfig fields a profile may set that cannot change a result (loader workers give
#: the same batches; the optimizer state only decides what a finished checkpoint keeps):
#: left out of run keys, so changing them never recomputes a stored run.
RESULT_NEUTRAL_TRAIN_FIELDS = ("workers", "keep_optimizer")


#: Extra report sections a matrix may ask for (``sections: [...]``), rendered by
#: :data:`seps.report.SECTIONS`.
REPORT_SECTIONS = ("controls", "differences", "loss-study", "protocols")
#: What a matrix's ``name`` may be: it names the store's folder and the report's file, so
#: it can hold no path separator and cannot start with a dot.
MATRIX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class AblationError(ValueError):
    """A malformed ablation file; the message names the file, run and field."""


def _read_yaml(path: Path) -> Any:
    return read_yaml_file(
        path, AblationError
    )  # one line per fault (seps.experiments.definition_checks)


def _train_fields() -> dict[str, dataclasses.Field[Any]]:
    from ..train.config import TrainConfig

    return {f.name: f for f in dataclasses.fields(TrainConfig)}


def _check_train_value(name: str, value: Any, where: str) -> None:
    """The type and range rules of :class:`TrainConfig` (and those of
    :func:`seps.experiments.definition_checks.train_value_problem`) applied where the value was
    written, so the error names the file and run (YAML 1.1 reads ``lr: 1e-3`` as a
    string: accepted)."""
    problem = train_value_problem(name, value)
    if problem:
        raise AblationError(f"{where}: {problem}")


def _check_train_fields(values: Mapping[str, Any], where: str) -> None:
    """Refuse an unknown or non-semantic train field, or a badly typed value, at ``where``."""
    trains = _train_fields()
    for k, v in values.items():
        if k not in trains or k in NON_SEMANTIC_TRAIN_FIELDS:
            raise AblationError(f"{where}: unknown train field {k!r}")
        _check_train_value(k, v, where)


def _head_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(SEPSConfig)}


# ---------------------------------------------------------------------- differences
@dataclass(frozen=True)
class Difference:
    """One documented difference or finding (``ablations/differences.yaml``)."""

    id: str
    name: str
    kind: str
    description: str
    spec: str
    switches: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    train: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    claimed_impact: str | None = None
    number: int | None = None

    def values(self, side: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(head switches, train fields) of ``side`` (``code`` or ``paper``)."""
        return (
            {k: v[side] for k, v in self.switches.items()},
            {k: v[side] for k, v in self.train.items()},
        )

    def summary(self) -> str:
        parts = [
            f"{k}: {v['code']} -> {v['paper']}" for k, v in {**self.switches, **self.train}.items()
        ]
        return "; ".join(parts)


def load_differences(root: Path | None = None, *, check_train: bool = True) -> list[Difference]:
    """Differences (``kind: difference``) then findings, in file order. ``check_train=False``
    leaves train fields unchecked (that loads TrainConfig, and torch): ``status`` lists runs."""
    path = (root or default_root()) / "differences.yaml"
    doc = _read_yaml(path)
    if not isinstance(doc, Mapping):
        raise AblationError(f"{path}: expected a mapping with 'differences' and 'findings'")
    out: list[Difference] = []
    heads = _head_fields()
    trains = set(_train_fields()) if check_train else None
    allowed = {f.name for f in dataclasses.fields(Difference)}
    for section in ("differences", "findings"):
        for i, entry in enumerate(doc.get(section) or []):
            where = f"{path}: {section}[{i}]"
            if not isinstance(entry, Mapping) or "id" not in entry:
                raise AblationError(f"{where}: expected a mapping with an 'id'")
            where = f"{path}: {section} entry {entry['id']!r}"
            unknown = set(entry) - allowed
            if unknown:
                raise AblationError(f"{where}: unknown field(s) {sorted(unknown)}")
            for key, known, what in (
                ("switches", heads, "head switch"),
                ("train", trains, "train field"),
            ):
                for name, sides in as_mapping(
                    entry.get(key), f"{where}: {key}", AblationError
                ).items():
                    if known is not None and name not in known:
                        raise AblationError(f"{where}: unknown {what} {name!r}")
                    if not isinstance(sides, Mapping) or set(sides) != {"code", "paper"}:
                        raise AblationError(f"{where}: {key}.{name} needs 'code' and 'paper'")
            missing = {"name", "kind", "description", "spec"} - set(entry)
            if missing:
                raise AblationError(f"{where}: missing field(s) {sorted(missing)}")
            out.append(Difference(**entry))
    return out


# ---------------------------------------------------------------------------- runs
@dataclass(frozen=True)
class RunSpec:
    """One variant of a matrix: a preset plus head and train overrides."""

    id: str
    preset: str
    set: Mapping[str, Any] = field(default_factory=dict)
    train: Mapping[str, Any] = field(default_factory=dict)
    difference: str | None = None
    paper_row: str | None = None

    def describe(self) -> str:
        """What differs from the preset, e.g. ``hrpa=mean_topk, dense_source=candidate``."""
        items = [f"{k}={v}" for k, v in self.set.items()]
        items += [f"{k}={v}" for k, v in self.train.items()]
        return ", ".join(items) or "(preset)"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    seeds: tuple[int, ...]
    head: Mapping[str, Any]
    train: Mapping[str, Any]


@dataclass(frozen=True)
class Matrix:
    name: str
    description: str
    baseline: str
    runs: tuple[RunSpec, ...]
    path: Path
    sections: tuple[str, ...] = ()

    def run(self, run_id: str) -> RunSpec:
        for r in self.runs:
            if r.id == run_id:
                return r
        raise KeyError(run_id)

    def reference(self, run_id: str) -> str:
        """The run a variant's Δ is measured against: the baseline, except for a run
        that changes one documented difference of *another* preset (a revert,
        ``paper-X``), measured against that preset's own run (``paper``) when the matrix
        has one; against the baseline (``code``) it would measure every other
        difference at once."""
        run = self.run(run_id)
        ids = {r.id for r in self.runs}
        base_preset = next((r.preset for r in self.runs if r.id == self.baseline), None)
        if (
            run.difference
            and run.preset != base_preset
            and run.preset in ids
            and run.id != run.preset
        ):
            return run.preset
        return self.baseline


def _fmt_id(template: str, values: Mapping[str, Any]) -> str:
    def sub(m: re.Match[str]) -> str:
        key, fmt = m.group(1), m.group(2) or ""
        if key not in values:
            raise KeyError(key)
        return format(values[key], fmt)

    return re.sub(r"\{([\w.]+)(?::([^}]*))?\}", sub, template)


def _fmt_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _expand(entry: Mapping[str, Any], where: str, diffs: list[Difference]) -> list[RunSpec]:
    mode = entry["expand"]
    unknown = set(entry) - {"expand", "from", "to", "over"}
    if unknown:
        raise AblationError(f"{where}: unknown field(s) {sorted(unknown)} in an expand entry")
    if mode not in ("flip", "revert"):
        raise AblationError(
            f"{where}: field 'expand': invalid value {mode!r}; allowed: flip, revert"
        )
    src, dst = entry.get("from"), entry.get("to")
    for name, value in (("from", src), ("to", dst)):
        if value not in ("code", "paper"):
            raise AblationError(
                f"{where}: field {name!r}: invalid value {value!r}; allowed: code, paper"
            )
    kinds = {"differences": "difference", "findings": "finding"}
    over = entry.get("over", "differences")
    if not isinstance(over, str) or over not in kinds:
        raise AblationError(
            f"{where}: field 'over': invalid value {over!r}; allowed: differences, findings"
        )
    sep = "+" if mode == "flip" else "-"
    runs = []
    for d in diffs:
        if d.kind != kinds[over]:
            continue
        head, train = d.values(dst)  # type: ignore[arg-type]
        runs.append(
            RunSpec(
                id=f"{src}{sep}{d.id}",
                preset=src,
                set=head,
                train=train,  # type: ignore[arg-type]
                difference=d.id,
            )
        )
    return runs


def _grid(entry: Mapping[str, Any], where: str) -> list[RunSpec]:
    unknown = set(entry) - {"grid", "id"}
    if unknown:
        raise AblationError(f"{where}: unknown field(s) {sorted(unknown)} in a grid entry")
    check_grid(entry, where, AblationError)
    grid = entry["grid"]
    if not isinstance(grid, Mapping) or not grid:
        raise AblationError(f"{where}: field 'grid': expected a mapping of field -> list of values")
    keys = list(grid)
    lists = []
    for k in keys:
        vals = grid[k] if isinstance(grid[k], list) else [grid[k]]
        if not vals:
            raise AblationError(f"{where}: grid field {k!r} has no values")
        lists.append(vals)
    runs = []
    for combo in itertools.product(*lists):
        values = dict(zip(keys, combo, strict=True))
        preset = values.pop("preset", "code")
        head = {k: v for k, v in values.items() if not k.startswith("train.")}
        train = {k[len("train.") :]: v for k, v in values.items() if k.startswith("train.")}
        if "id" in entry:
            try:
                rid = _fmt_id(str(entry["id"]), {"preset": preset, **values})
            except (KeyError, ValueError) as exc:
                raise AblationError(
                    f"{where}: field 'id': bad template {entry['id']!r} ({exc})"
                ) from exc
        else:
            rid = "/".join(
                [
                    preset,
                    *(f"{k.removeprefix('train.')}={_fmt_value(v)}" for k, v in values.items()),
                ]
            )
        runs.append(RunSpec(id=rid, preset=preset, set=head, train=train))
    return runs


def _single(entry: Mapping[str, Any], where: str) -> RunSpec:
    allowed = {"id", "preset", "set", "train", "difference", "paper_row"}
    unknown = set(entry) - allowed
    if unknown:
        raise AblationError(
            f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
        )
    if "id" not in entry:
        raise AblationError(f"{where}: missing field 'id'")
    check_run_entry(entry, where, AblationError)  # types: id, preset, set, train, ...
    return RunSpec(
        id=str(entry["id"]),
        preset=entry.get("preset", "code"),
        set=dict(entry.get("set") or {}),
        train=dict(entry.get("train") or {}),
        difference=entry.get("difference"),
        paper_row=entry.get("paper_row"),
    )


def _validate_run(run: RunSpec, where: str, check_train: bool = True) -> None:
    if run.preset not in PRESETS:
        raise AblationError(
            f"{where}: run {run.id!r}: field 'preset': invalid value {run.preset!r}; "
            f"allowed: {', '.join(PRESETS)}"
        )
    heads = _head_fields()
    for k in run.set:
        if k not in heads:
            raise AblationError(f"{where}: run {run.id!r}: unknown switch {k!r}")
    if check_train:
        _check_train_fields(run.train, f"{where}: run {run.id!r}")
    try:
        get_config(run.preset, **run.set)
    except ValueError as exc:
        raise AblationError(f"{where}: run {run.id!r}: {exc}") from exc


def select_runs(matrix: Matrix, only: str | None) -> tuple[RunSpec, ...]:
    """The runs of ``matrix`` whose id matches one of ``only``'s comma-separated globs, in
    the matrix's order (``None``: every run).

    Raises:
        ValueError: one line naming ``--only`` when a pattern is empty or matches no run
            id (a typo would otherwise run nothing, or less than asked, and say "done").
    """
    if only is None:
        return matrix.runs
    patterns = only.split(",")
    ids = [r.id for r in matrix.runs]
    bad = [p for p in patterns if not p or not fnmatch.filter(ids, p)]
    if bad:
        shown = ", ".join(ids[:8]) + (", ..." if len(ids) > 8 else "")
        raise ValueError(
            f"--only: {', '.join(repr(p) for p in bad)} matches no run id of {matrix.name} "
            f"({shown}; `seps-bench run {matrix.name} --dry-run` lists them)"
        )
    return tuple(r for r in matrix.runs if any(fnmatch.fnmatch(r.id, p) for p in patterns))


def load_matrix(name: str, root: Path | None = None, *, check_train: bool = True) -> Matrix:
    """A named matrix (``ablations/matrices/<name>.yaml``) or a path to a matrix file;
    ``check_train=False`` as :func:`load_differences`."""
    root = root or default_root()
    path = Path(name) if name.endswith((".yaml", ".yml")) else root / "matrices" / f"{name}.yaml"
    if not path.exists():
        if path.parent == root / "matrices" and not path.parent.is_dir():
            raise AblationError(
                f"{root}: not an ablation definitions folder (no matrices/ in it); expected "
                "the folder given by --ablations or $SEPS_ABLATIONS"
            )
        known = ", ".join(list_matrices(root)) or "none"
        raise AblationError(f"{path}: matrix file not found; known matrices: {known}")
    doc = _read_yaml(path)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("runs"), list):
        raise AblationError(f"{path}: expected a mapping with a 'runs' list")
    check_matrix_keys(doc, path, AblationError)
    matrix_name = doc.get("name", path.stem)
    # The name is a folder of the store and the stem of the report: never a path.
    if not isinstance(matrix_name, str) or not MATRIX_NAME.fullmatch(matrix_name):
        raise AblationError(
            f"{path}: field 'name': invalid value {matrix_name!r}; expected letters, digits, "
            "'.', '_' or '-', starting with a letter or digit (it names the store's folder "
            "and the report's file)"
        )
    diffs = load_differences(root, check_train=check_train)
    runs: list[RunSpec] = []
    for i, entry in enumerate(doc["runs"]):
        where = f"{path}: runs[{i}]"
        if not isinstance(entry, Mapping):
            raise AblationError(f"{where}: expected a mapping")
        if "expand" in entry:
            runs += _expand(entry, where, diffs)
        elif "grid" in entry:
            runs += _grid(entry, where)
        else:
            runs.append(_single(entry, where))
    # A matrix-level ``train:`` mapping applies to every run (a run's own value wins):
    # the same matrix under another protocol is one more file of five lines.
    common = doc.get("train") or {}
    if not isinstance(common, Mapping):
        raise AblationError(f"{path}: field 'train': expected a mapping of train fields")
    if check_train:
        _check_train_fields(common, f"{path}: field 'train'")
    if common:
        runs = [dataclasses.replace(r, train={**common, **r.train}) for r in runs]
    if not runs:
        raise AblationError(f"{path}: field 'runs': no run (expected at least one)")
    check_run_ids([r.id for r in runs], path, AblationError)  # record names apart
    seen: set[str] = set()
    for r in runs:
        _validate_run(r, str(path), check_train)
        if r.id in seen:
            raise AblationError(f"{path}: run {r.id!r}: duplicate run id")
        seen.add(r.id)
    baseline = str(doc.get("baseline", runs[0].id if runs else ""))
    if baseline not in seen:
        raise AblationError(
            f"{path}: field 'baseline': {baseline!r} is not a run id of this matrix"
        )
    sections = doc.get("sections") or []
    if not isinstance(sections, list) or any(x not in REPORT_SECTIONS for x in sections):
        raise AblationError(
            f"{path}: field 'sections': invalid value {sections!r}; expected a list of: "
            f"{', '.join(REPORT_SECTIONS)}"
        )
    return Matrix(
        name=matrix_name,
        description=str(doc.get("description", "")).strip(),
        baseline=baseline,
        runs=tuple(runs),
        path=path,
        sections=tuple(sections),
    )


def load_profile(name: str, root: Path | None = None, *, check_train: bool = True) -> Profile:
    path = (root or default_root()) / "profiles.yaml"
    doc = _read_yaml(path)
    if not isinstance(doc, Mapping) or name not in doc:
        known = ", ".join(doc) if isinstance(doc, Mapping) else ""
        raise AblationError(f"{path}: unknown profile {name!r}; known: {known}")
    entry = doc[name]
    where = f"{path}: profile {name!r}"
    check_profile_entry(entry, where, AblationError)
    heads = _head_fields()
    for k, v in (entry.get("head") or {}).items():
        if k not in heads:
            raise AblationError(f"{where}: unknown head field {k!r}")
        try:  # alone on the code preset, as --set head.FIELD=VALUE (seps.experiments.overrides)
            get_config("code", **{k: v})
        except ValueError as exc:
            raise AblationError(f"{where}: {exc}") from None
    if check_train:
        _check_train_fields(entry.get("train") or {}, where)
    seeds = entry.get("seeds", [0])
    problem = seeds_problem(seeds)
    if problem:
        raise AblationError(f"{where}: field 'seeds': {problem}")
    return Profile(
        name=name,
        description=str(entry.get("description", "")),
        seeds=tuple(seeds),
        head=dict(entry.get("head") or {}),
        train=dict(entry.get("train") or {}),
    )


# ------------------------------------------------------------------------ resolution
def resolve(
    run: RunSpec, profile: Profile, seed: int, **train_overrides: Any
) -> tuple[Any, SEPSConfig]:
    """(TrainConfig, SEPSConfig) of ``run`` under ``profile`` and ``seed``.

    Head: the run's preset, then the profile's sizes, then the run's switches. Train:
    defaults, then the profile, then the run's train fields, then ``train_overrides``
    (dataset, data path, device... from the command line).
    """
    from ..train.config import TrainConfig

    head = get_config(run.preset, **{**profile.head, **run.set})
    values = {**profile.train, **run.train, **train_overrides, "seed": seed}
    if "lr_milestones" in values:
        values["lr_milestones"] = tuple(values["lr_milestones"])
    return TrainConfig(**values), head


def config_key(train_cfg: Any, head: SEPSConfig, *, exclude: tuple[str, ...] = ()) -> str:
    """Hash of the fully resolved configs (without where/how fields and ``exclude``).

    Fields added after the first records (:data:`KEY_OMITTED_AT_DEFAULT`, and
    :data:`seps.core.config.HEAD_KEY_OMITTED_AT_DEFAULT` of the head) count only
    when set to something other than their default, so stored keys stay valid. A dataset
    in the official layout (not ``synthetic``) counts by what it is, not how it was
    named (:func:`_data_identity`); synthetic runs hash their fields as written.
    """
    from ..train.config import KEY_OMITTED_AT_DEFAULT, TrainConfig

    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    t = {
        k: v
        for k, v in train_cfg.to_dict().items()
        if k not in NON_SEMANTIC_TRAIN_FIELDS
        and k not in RESULT_NEUTRAL_TRAIN_FIELDS
        and k not in exclude
        and not (k in KEY_OMITTED_AT_DEFAULT and v == defaults[k])
    }
    if train_cfg.dataset != "synthetic" and train_cfg.data_path:
        t.update(_data_identity(train_cfg, exclude))
    head_defaults = {f.name: f.default for f in dataclasses.fields(SEPSConfig)}
    h = {
        k: v
        for k, v in head.to_dict().items()
        if not (k in HEAD_KEY_OMITTED_AT_DEFAULT and v == head_defaults[k])
    }
    blob = json.dumps({"head": h, "train": t}, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _data_identity(train_cfg: Any, exclude: tuple[str, ...]) -> dict[str, str]:
    """The key entries of an official-layout dataset: ``data_path`` (and ``image_dir``)
    resolved to absolute paths, and ``data_fingerprint`` of the split files the run reads
    (:func:`seps.versioning.data_fingerprint.data_fingerprint`): the training and, with
    ``val_images``, the validation split, and the evaluation split unless ``eval_split``
    is excluded (a training key then ignores the test captions it never reads)."""
    splits = {train_cfg.train_split}
    if train_cfg.val_images > 0:
        splits.add(train_cfg.val_split)
    if "eval_split" not in exclude:
        splits.add(train_cfg.eval_split)
    path = resolved_path(train_cfg.data_path)
    out = {"data_path": path, "data_fingerprint": data_fingerprint(path, splits)}
    if train_cfg.image_dir and "image_dir" not in exclude:
        out["image_dir"] = resolved_path(train_cfg.image_dir)
    return out


__all__ = [
    "AblationError",
    "Difference",
    "Matrix",
    "Profile",
    "RunSpec",
    "config_key",
    "default_root",
    "list_matrices",
    "load_differences",
    "load_matrix",
    "load_profile",
    "resolve",
]
