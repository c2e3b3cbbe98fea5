"""The claims the scorecard judges: ``ablations/claims.yaml``, read and checked.

:func:`load_claim_file` returns the claims in file order and the matrices they name
(:func:`seps.experiments.definitions.load_matrix`, so grid and flip/revert run ids are the expanded
ones). A claim naming a matrix that does not load or a run that is not in every one of
its matrices is an error, so a claim cannot silently test nothing; the one exception is a
control (``group: controls``) whose matrix file does not exist yet: it is kept with the
matrix named in :attr:`Claim.undefined`, and the scorecard's controls section says that
no control is judged (:mod:`seps.report.controls`). The fields are
described in the header of ``ablations/claims.yaml``; the scorecard itself is
:mod:`seps.report.scorecard`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..experiments.definition_checks import read_yaml_file
from ..experiments.definitions import Matrix, default_root, load_matrix
from .records import DENSE_LABELS

#: The claims file inside an ablation root.
CLAIMS_FILE = "claims.yaml"
#: Claimed sign of rSum(variant) - rSum(baseline) -> how the scorecard words it.
DIRECTIONS = {"+": "higher", "-": "lower", "0": "no effect"}
#: effect: paired tests; optimum: a grid's claimed best cell; leakage: an effect whose
#: gap the scorecard also states in its leakage section.
KINDS = ("effect", "optimum", "leakage")
#: The fields a claim may have.
FIELDS = ("id", "claim", "source", "matrix", "protocol", "runs", "direction", "size", "kind")
FIELDS += ("relative_size", "equivalence_margin")
FIELDS += ("testable", "why", "group", "shown", "order", "baseline_at_most")
#: Groups of claims other than the paper's (``group:``): ``controls``, the instrument's
#: own checks, judged in the scorecard's first section (:mod:`seps.report.controls`).
GROUPS = ("controls",)
#: Fields only a claim of a group may have (the claims table would not show them).
GROUP_FIELDS = ("shown", "order", "baseline_at_most")


class ClaimError(ValueError):
    """A malformed claims file; the message names the file, the claim and the field."""


@dataclass(frozen=True)
class Pair:
    """A baseline run and the variant runs compared with it (run ids of the matrices)."""

    baseline: str
    variants: tuple[str, ...]


@dataclass(frozen=True)
class Claim:
    """One entry of ``claims.yaml`` (its header describes the fields); ``matrices`` and
    ``protocols`` are parallel: under ``protocols[i]`` from the records of ``matrices[i]``."""

    id: str
    claim: str
    source: str
    matrices: tuple[str, ...]
    protocols: tuple[str, ...]
    pairs: tuple[Pair, ...]
    direction: str | None
    size: float | None
    kind: str = "effect"
    testable: bool = True
    why: str | None = None
    group: str | None = None
    shown: tuple[str, ...] = ()
    order: tuple[str, ...] = ()
    baseline_at_most: float | None = None
    undefined: tuple[str, ...] = ()
    relative_size: float | None = None
    equivalence_margin: float | None = None

    def runs(self) -> set[str]:
        """Every run id the claim names (its pairs, ``shown`` and ``order``)."""
        return {x for p in self.pairs for x in (p.baseline, *p.variants)} | {
            *self.shown,
            *self.order,
        }


def _names(value: Any, where: str, field: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(x, str) and x.strip() for x in items):
        raise ClaimError(f"{where}: field {field!r}: expected a name or a list of names")
    return tuple(items)


def _text(entry: Mapping[str, Any], field: str, where: str) -> str:
    text = entry.get(field)
    if not isinstance(text, str) or not text.strip():
        raise ClaimError(f"{where}: field {field!r}: expected a non-empty string")
    return " ".join(text.split())


def _pairs(value: Any, where: str) -> tuple[Pair, ...]:
    out = []
    for item in value if isinstance(value, list) else [value]:
        ok = isinstance(item, Mapping) and set(item) == {"baseline", "variants"}
        variants = item["variants"] if ok else None
        if not ok or not isinstance(item["baseline"], str) or not isinstance(variants, list):
            raise ClaimError(
                f"{where}: field 'runs': expected {{baseline: RUN, variants: [RUN, ...]}} "
                "or a list of them"
            )
        if not variants or not all(isinstance(v, str) for v in variants):
            raise ClaimError(f"{where}: field 'runs': 'variants' must list run ids")
        out.append(Pair(item["baseline"], tuple(variants)))
    return tuple(out)


def _matrix_path(name: str, root: Path | None) -> Path:
    """The file :func:`~seps.experiments.definitions.load_matrix` reads for ``name``."""
    if name.endswith((".yaml", ".yml")):
        return Path(name)
    return (root or default_root()) / "matrices" / f"{name}.yaml"


def _claim(entry: Any, index: str, root: Path | None, matrices: dict[str, Matrix]) -> Claim:
    """One checked claim (``matrices``: the matrices loaded so far, by name, extended)."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("id"), str):
        raise ClaimError(f"{index}: expected a mapping with an 'id'")
    where = f"{index.rsplit(':', 1)[0]}: claim {entry['id']!r}"

    def check(ok: Any, message: str) -> None:
        if not ok:
            raise ClaimError(f"{where}: {message}")

    unknown = sorted(set(entry) - set(FIELDS))
    check(not unknown, f"unknown field(s) {unknown}; allowed: {FIELDS}")
    names = _names(entry.get("matrix"), where, "matrix")
    protocols = _names(entry.get("protocol"), where, "protocol")
    check(len(protocols) == len(names), "fields 'matrix' and 'protocol' must have one length")
    for p in protocols:
        check(
            all(side in DENSE_LABELS for side in p.split(" vs ")),
            f"field 'protocol': invalid value {p!r}; expected one of {', '.join(DENSE_LABELS)}, "
            "or 'A vs B' of two of them",
        )
    group = entry.get("group")
    check(group in (None, *GROUPS), f"field 'group': invalid value {group!r}; allowed: {GROUPS}")
    extra = sorted(set(entry) & set(GROUP_FIELDS))
    check(group is not None or not extra, f"field(s) {extra} only for a claim with a 'group'")
    undefined = []
    for name in (n for n in names if n not in matrices):
        if group is not None and not _matrix_path(name, root).exists():
            undefined.append(name)  # a control whose matrix is not written yet
            continue
        try:
            matrices[name] = load_matrix(name, root)
        except ValueError as exc:
            raise ClaimError(f"{where}: field 'matrix': {exc}") from None
    testable, direction = entry.get("testable", True), entry.get("direction")
    kind, size = entry.get("kind", "effect"), entry.get("size")
    check(
        testable is True or (testable is False and entry.get("why")),
        "field 'testable': expected true, or false with a 'why'",
    )
    check("runs" in entry or not testable, "missing field 'runs' (only an untestable claim may)")
    pairs = _pairs(entry["runs"], where) if "runs" in entry else ()
    shown = _names(entry["shown"], where, "shown") if "shown" in entry else ()
    order = _names(entry["order"], where, "order") if "order" in entry else ()
    check(not order or len(order) >= 2, "field 'order': expected at least two run ids")
    at_most = entry.get("baseline_at_most")
    check(
        at_most is None
        or (isinstance(at_most, (int, float)) and not isinstance(at_most, bool) and at_most > 0),
        f"field 'baseline_at_most': expected a positive number, got {at_most!r}",
    )
    named = {x for p in pairs for x in (p.baseline, *p.variants)} | {*shown, *order}
    for name in (n for n in names if n not in undefined):
        unknown = sorted(named - set(r.id for r in matrices[name].runs))
        check(
            not unknown,
            f"field 'runs': {', '.join(map(repr, unknown))} not a run of matrix {name!r} "
            f"({matrices[name].path})",
        )
    check(
        (direction is None and not testable) or direction in tuple(DIRECTIONS),
        f"field 'direction': invalid value {direction!r}; expected '+', '-' or '0' (quoted)",
    )
    check(kind in KINDS, f"field 'kind': invalid value {kind!r}; allowed: {KINDS}")
    check(
        kind != "optimum" or (len(pairs) == 1 and direction == "-"),
        "an optimum claim needs one 'runs' mapping (baseline: the claimed best) and direction '-'",
    )
    check(
        size is None or (isinstance(size, (int, float)) and not isinstance(size, bool)),
        f"field 'size': expected a number or null, got {size!r}",
    )
    relative = entry.get("relative_size")
    check(
        relative is None or (_number(relative) and relative != 0 and direction in ("+", "-")),
        f"field 'relative_size': expected a non-zero number for a claim of direction '+' or "
        f"'-', or null, got {relative!r}",
    )
    check(
        relative is None or (relative > 0) == (direction == "+"),
        f"field 'relative_size': {relative!r} has the sign opposite to direction {direction!r}",
    )
    margin = entry.get("equivalence_margin")
    check(
        margin is None or (_number(margin) and margin > 0),
        f"field 'equivalence_margin': expected a positive number (rSum) or null, got {margin!r}",
    )
    why = _text(entry, "why", where) if not testable else None
    claim, source = _text(entry, "claim", where), _text(entry, "source", where)
    size = None if size is None else float(size)
    return Claim(
        entry["id"],
        claim,
        source,
        names,
        protocols,
        pairs,
        direction,
        size,
        kind,
        testable,
        why,
        group,
        shown,
        order,
        None if at_most is None else float(at_most),
        tuple(undefined),
        None if relative is None else float(relative),
        None if margin is None else float(margin),
    )


def _number(x: Any) -> bool:
    """A YAML number (an int or a float, not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def load_claim_file(
    path: str | Path | None = None, root: Path | None = None
) -> tuple[list[Claim], dict[str, Matrix]]:
    """(claims in file order, the matrices they name by name) of ``path`` (default
    ``<root>/claims.yaml``). Every matrix must load from ``root`` and every run a claim
    names must be a run of each of its matrices, else :class:`ClaimError` names them."""
    root = root or default_root()
    path = Path(path) if path is not None else root / CLAIMS_FILE
    if not path.exists():
        raise ClaimError(f"{path}: claims file not found")
    doc = read_yaml_file(
        path, ClaimError
    )  # one line per fault (seps.experiments.definition_checks)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("claims"), list):
        raise ClaimError(f"{path}: expected a mapping with a 'claims' list")
    matrices: dict[str, Matrix] = {}
    claims = []
    for i, entry in enumerate(doc["claims"]):
        claims.append(_claim(entry, f"{path}: claims[{i}]", root, matrices))
        if claims[-1].id in {c.id for c in claims[:-1]}:
            raise ClaimError(f"{path}: claim {claims[-1].id!r}: duplicate id")
    return claims, matrices


__all__ = [
    "CLAIMS_FILE",
    "DIRECTIONS",
    "GROUPS",
    "KINDS",
    "Claim",
    "ClaimError",
    "Pair",
    "load_claim_file",
]
