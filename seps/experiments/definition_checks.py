"""Checks of the definition files that :mod:`seps.experiments.definitions` and the other
readers share.

Every definition a command uses (matrices, profiles, differences, claims, sequential
designs, campaigns, ``--set`` values) is read and checked before anything trains, and a
fault is one line naming the file, the entry and the field, with what was expected.
This module holds what the readers have in common, so that each reader stays small:

- :func:`read_yaml_file` / :func:`load_yaml_text`: a YAML file read safely. A file that
  is missing, a folder, not UTF-8, too large, not valid YAML, or that expands through
  aliases into more than :data:`MAX_YAML_VALUES` values (a "billion laughs" document:
  ``yaml.safe_load`` builds it fast, as shared references, but anything that walks it,
  a message showing it included, would take the machine's memory) is refused in one line.
- :func:`check_run_entry`, :func:`check_run_ids`, :func:`check_matrix_keys`: the types of
  a matrix's fields, and run ids that would make the store's file names collide or run
  past the file system's limit.
- :func:`check_profile_entry`, :func:`train_value_problem`: a profile's fields, and the
  ranges of train fields that :class:`~seps.train.config.TrainConfig` itself accepts but
  no run can use (a synthetic set of no images, an infinite learning rate...). They live
  here rather than in ``TrainConfig``, whose module is hashed into every record's code
  version (:mod:`seps.versioning.version`).

Nothing here imports torch: ``seps-bench status`` reads definitions without it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MATRIX_KEYS",
    "MAX_RUN_ID",
    "MAX_YAML_BYTES",
    "MAX_YAML_VALUES",
    "SEED_LIMIT",
    "as_mapping",
    "check_grid",
    "check_matrix_keys",
    "check_profile_entry",
    "check_run_entry",
    "check_run_ids",
    "config_problem",
    "load_yaml_text",
    "read_yaml_file",
    "record_slug",
    "seeds_problem",
    "short",
    "train_value_problem",
]

#: A definition file larger than this is refused before it is parsed (the shipped files
#: are a few kB to 60 kB).
MAX_YAML_BYTES = 8 * 2**20
#: The most values (scalars, lists and mappings, each alias counted at every place it is
#: used) a definition file may expand to; the shipped files hold a few thousand.
MAX_YAML_VALUES = 200_000
#: The longest run id file name part (:func:`record_slug`): a record's name adds its key,
#: seed and suffixes, a temporary or set-aside copy a few more, and names stop at 255 bytes.
MAX_RUN_ID = 150
#: The top-level keys of a matrix file.
MATRIX_KEYS = ("name", "description", "baseline", "runs", "train", "sections")

Error = Callable[[str], Exception]


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages (never the repr of a
    huge structure in full)."""
    text = repr(value) if not isinstance(value, list | dict | tuple) else _short_repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short_repr(value: Any, budget: int = 80) -> str:
    # repr of a nested container stops early (a shared structure is not walked in full).
    out: list[str] = []

    def walk(v: Any) -> None:
        if sum(map(len, out)) > budget:
            return
        if isinstance(v, Mapping):
            out.append("{")
            for i, (k, x) in enumerate(v.items()):
                if i:
                    out.append(", ")
                out.append(f"{k!r}: ")
                walk(x)
                if sum(map(len, out)) > budget:
                    return
            out.append("}")
        elif isinstance(v, list | tuple):
            out.append("[")
            for i, x in enumerate(v):
                if i:
                    out.append(", ")
                walk(x)
                if sum(map(len, out)) > budget:
                    return
            out.append("]")
        else:
            out.append(repr(v)[:budget])

    walk(value)
    return "".join(out)


# ------------------------------------------------------------------------------ YAML
def read_yaml_file(path: str | Path, error: Error = ValueError) -> Any:
    """The YAML document of ``path``, or ``error(message)`` raised with one line naming
    the file and what was expected (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        raise error(f"{path}: is a folder; expected a YAML file")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as exc:
        raise error(
            f"{path}: cannot be read ({exc.strerror or exc}); expected a YAML file"
        ) from None
    if len(data) > MAX_YAML_BYTES:
        raise error(
            f"{path}: larger than {MAX_YAML_BYTES // 2**20} MiB; expected a definitions file"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "expected a YAML file in UTF-8"
        ) from None
    return load_yaml_text(text, str(path), error)


def load_yaml_text(
    text: str, where: str, error: Error = ValueError, invalid: str = "not valid YAML"
) -> Any:
    """``yaml.safe_load(text)`` with the limits of :func:`read_yaml_file`; errors name
    ``where`` (a parse error as ``<where>: <invalid> (<reason>)``)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_YAML_VALUES:
            raise error(
                f"{where}: expands to more than {MAX_YAML_VALUES:,} values through YAML "
                "aliases (*name); expected a plain definitions file"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise error(f"{where}: {invalid} ({' '.join(str(exc).split())})") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply; expected a plain definitions file") from None
    finally:
        loader.dispose()


def _expanded_size(root: yaml.Node) -> float:
    """How many values ``root`` stands for once every alias is replaced by what it names:
    each node counted once per place it is used, computed once per node (so a document
    of aliases of aliases costs its node count, not its expansion). A node that contains
    itself counts as infinite."""
    sizes: dict[int, float] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [x for pair in node.value for x in pair]
        if done:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes.get(id(c), math.inf) for c in children)
            if sizes[key] > MAX_YAML_VALUES:
                return sizes[key]
            continue
        if key in open_:
            return math.inf  # the node contains itself (an alias inside its own anchor)
        open_.add(key)
        stack.append((node, True))
        for c in children:
            if id(c) in open_:
                return math.inf
            if id(c) not in sizes:
                stack.append((c, False))
    return sizes[id(root)]


# -------------------------------------------------------------------------- matrices
def as_mapping(value: Any, where: str, error: Error) -> Mapping[str, Any]:
    """``value`` when it is a mapping whose keys are strings (``{}`` for null), else
    ``error`` naming ``where`` (a field written as a list, a number, ...)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(f"{where}: expected a mapping, got {short(value)}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise error(f"{where}: {short(bad[0])} is not a field name")
    return value


def check_grid(entry: Mapping[str, Any], where: str, error: Error) -> None:
    """A grid entry's keys are field names, its presets strings and its ``id`` template
    a string."""
    grid = as_mapping(entry["grid"], f"{where}: field 'grid'", error)
    presets = grid.get("preset", [])
    for p in presets if isinstance(presets, list) else [presets]:
        if not isinstance(p, str):
            raise error(f"{where}: grid field 'preset': expected preset names, got {short(p)}")
    if "id" in entry and not isinstance(entry["id"], str):
        raise error(f"{where}: field 'id': expected a template string, got {short(entry['id'])}")


def record_slug(run_id: str) -> str:
    """The file name part of a run id in its record's name
    (``<slug>-<key>-s<seed>.json``): each run of other characters is one ``_``."""
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", run_id)


def check_matrix_keys(doc: Mapping[str, Any], path: Path, error: Error) -> None:
    """Refuse an unknown top-level key of a matrix file (a typo such as ``baselin:``
    would otherwise be ignored) and a ``description`` that is not text."""
    unknown = [str(k) for k in doc if k not in MATRIX_KEYS]
    if unknown:
        raise error(
            f"{path}: unknown field(s) {sorted(unknown)}; allowed: {', '.join(MATRIX_KEYS)}"
        )
    description = doc.get("description")
    if description is not None and not isinstance(description, str):
        raise error(f"{path}: field 'description': expected text, got {short(description)}")


def check_run_entry(entry: Mapping[str, Any], where: str, error: Error) -> None:
    """The types of one run entry's fields: ``id`` a non-empty string (or a number),
    ``preset``, ``difference`` and ``paper_row`` strings, ``set`` and ``train`` mappings
    whose keys are field names."""
    rid = entry.get("id")
    if isinstance(rid, bool) or not isinstance(rid, str | int) or not str(rid).strip():
        raise error(
            f"{where}: field 'id': expected a run id (a non-empty string), got {short(rid)}"
        )
    for key in ("preset", "difference", "paper_row"):
        value = entry.get(key)
        if value is not None and not isinstance(value, str):
            raise error(f"{where}: field {key!r}: expected a string, got {short(value)}")
    for key in ("set", "train"):
        if key in entry:
            as_mapping(entry[key], f"{where}: field {key!r}", error)


def check_run_ids(ids: Sequence[str], path: Path, error: Error) -> None:
    """Refuse, before anything runs, run ids whose records could not be stored apart: two
    ids of one file name part (:func:`record_slug`: ``a b`` and ``a_b``), or an id so long
    that its record's name passes the file system's limit (found only when the first
    record is written, after its training)."""
    seen: dict[str, str] = {}
    for rid in ids:
        slug = record_slug(rid)
        if len(slug) > MAX_RUN_ID:
            raise error(
                f"{path}: run {short(rid)}: run id of {len(slug)} characters; expected at "
                f"most {MAX_RUN_ID} (it names the run's record file)"
            )
        if slug in seen and seen[slug] != rid:
            raise error(
                f"{path}: runs {seen[slug]!r} and {rid!r}: both store their records as "
                f"{slug}-...json; expected run ids that differ in letters, digits or '._=+-'"
            )
        seen[slug] = rid


# -------------------------------------------------------------------------- profiles
#: Seeds are below this: numpy's seed range is [0, 2**32), and the training derives other
#: seeds from a run's (``(seed, epoch)``), so half of it is left as headroom.
SEED_LIMIT = 2**31


def seeds_problem(seeds: Any) -> str | None:
    """What is wrong with ``seeds`` as a list of run seeds (empty, not integers, negative,
    at or above :data:`SEED_LIMIT`, repeated: a repeat would plan every run twice), or
    ``None``. Shared by ``--seeds``, a profile's ``seeds`` and a campaign step's."""
    if not isinstance(seeds, list | tuple) or not seeds:
        return f"{short(seeds)}; expected a non-empty list of seeds, e.g. 0,1,2"
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int)]
    if bad:
        return f"{short(bad[0])} is not an integer"
    out = [s for s in seeds if not 0 <= s < SEED_LIMIT]
    if out:
        return f"{out[0]} is outside [0, {SEED_LIMIT})"
    repeated = sorted(s for s, n in Counter(seeds).items() if n > 1)
    if repeated:
        return f"seed {repeated[0]} is given twice"
    return None


#: The fields of a profile.
PROFILE_KEYS = ("summary", "description", "seeds", "head", "train")


def check_profile_entry(entry: Any, where: str, error: Error) -> None:
    """A profile entry is a mapping of :data:`PROFILE_KEYS` whose ``head`` and ``train``
    are mappings of field names and whose texts are text."""
    if not isinstance(entry, Mapping):
        raise error(f"{where}: expected a mapping of {', '.join(PROFILE_KEYS)}, got {short(entry)}")
    unknown = sorted(str(k) for k in set(entry) - set(PROFILE_KEYS))
    if unknown:
        raise error(f"{where}: unknown field(s) {unknown}")
    for key in ("summary", "description"):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            raise error(f"{where}: field {key!r}: expected text, got {short(entry[key])}")
    for key in ("head", "train"):
        as_mapping(entry.get(key), f"{where}: field {key!r}", error)


# -------------------------------------------------------------------- train values
def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


#: Train fields whose every value ``TrainConfig`` accepts is not usable by a run: field ->
#: (test of a coerced value, what is allowed). ``None`` passes where the field is optional.
EXTRA_TRAIN_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "synth_images": (lambda v: v >= 3, ">= 3 (one image per split at least)"),
    "synth_seed": (lambda v: v is None or v >= 0, ">= 0 or null"),
    "vocab_size": (lambda v: v >= 1, ">= 1"),
    "max_steps_per_epoch": (lambda v: v is None or v >= 1, ">= 1 or null (no cap)"),
    "lr": (_finite, "> 0 and finite"),
    "backbone_lr_mult": (lambda v: _finite(v) and v >= 0, ">= 0 and finite"),
    "weight_decay": (lambda v: _finite(v) and v >= 0, ">= 0 and finite"),
    "lr_gamma": (lambda v: _finite(v) and v > 0, "> 0 and finite"),
    "grad_clip": (lambda v: v > 0, "> 0"),
    "dropout": (lambda v: v is None or 0 <= v < 1, "in [0, 1) or null"),
    "eval_text_shard": (lambda v: v >= 1, ">= 1"),
    "eval_image_shard": (lambda v: v >= 1, ">= 1"),
}


def config_problem(cfg: Any) -> str | None:
    """The first field of a resolved :class:`~seps.train.config.TrainConfig` that breaks
    :data:`EXTRA_TRAIN_RULES` (``seps-bench train`` builds one from its flags), or
    ``None``."""
    for name, (ok, allowed) in EXTRA_TRAIN_RULES.items():
        value = getattr(cfg, name)
        if not ok(value):
            return f"train config field {name!r}: invalid value {value!r}; allowed: {allowed}"
    return None


def train_value_problem(name: str, value: Any) -> str | None:
    """What makes ``value`` unusable for train field ``name`` beyond its type (the
    field's own rules in :class:`~seps.train.config.TrainConfig`, checked alone, and
    :data:`EXTRA_TRAIN_RULES`), or ``None``. Loads ``TrainConfig`` (and torch)."""
    from ..train.config import TrainConfig, coerce_field

    try:
        coerced = coerce_field(name, value)
        # A placeholder data path, so that only this field's own rules apply.
        TrainConfig(**{"data_path": "-", name: coerced})
    except ValueError as exc:
        return str(exc)
    rule = EXTRA_TRAIN_RULES.get(name)
    if rule is not None and not rule[0](coerced):
        return f"train config field {name!r}: invalid value {coerced!r}; allowed: {rule[1]}"
    return None
