"""Seeds added until decided: the sequential designs of ``sequential.yaml``, replayed on
the records.

A design (:class:`Design`, read by :func:`load_designs` from ``sequential.yaml`` in the
ablation root) names claims of ``claims.yaml``, the looks (seeds at each analysis; the
last is the cap), the alpha-spending shape, the family-wise level per claim and the
margin a row must be bounded within. :func:`analyse` replays it on a result store:

1. **Rows.** Every effect row of the design's claims (:mod:`.scorecard_rows`)
   that is a test at the first look (two sides with records, not identical bits, both
   sides able to read the text, the learned part trained) is a member of its claim's
   family; the family is fixed there and then. Each row is a series of per-seed paired
   differences, variant minus baseline, each with its block: the pretrained build (seed
   ``s`` on build ``s mod builds``) and the CPU type of its two records, which must be
   one (a paired difference across CPU types holds the machines' own difference).
2. **Looks.** Look ``k`` of a row is seeds ``0 .. n_k - 1``, all paired. At each look the
   row gets the paired t-test twice: plain (seeds independent) and blocked (build and CPU
   type as fixed blocks, :func:`seps.stats.group_sequential.blocked_t`), and the decision is
   the blocked one.
3. **Decisions**, analysis by analysis in look order: Holm over the looks
   (:func:`seps.stats.group_sequential.holm_over_looks`) rejects rows (*detected*, with the
   sign); a row not rejected whose repeated interval at level ``alpha / m`` lies within
   ``+- margin`` is *bounded*; a row rejected or bounded stops (its later seeds, if any
   exist for other rows, are not read). A row still running at the cap is *open at the
   cap*; below the cap, *open*.

:func:`next_stage` says which runs and seeds the next look needs (``seps-bench run
--until-decided``); :func:`analysis_log` is what the store keeps of an analysis
(``<results>/_sequential/<design>.json``), and a replay on the same records gives the
same log (``seps-bench sequential --check``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..experiments.definition_checks import read_yaml_file
from ..experiments.definitions import default_root
from ..experiments.provenance import record_cpu_model
from ..stats.group_sequential import (
    SHAPES,
    LookStat,
    blocked_t,
    holm_over_looks,
    nominal_levels,
    plain_t,
    repeated_interval,
)
from .claims import load_claim_file
from .scorecard_rows import by_seed, claim_rows, matrix_records

__all__ = [
    "DESIGNS_FILE",
    "Analysis",
    "Design",
    "DesignError",
    "RowResult",
    "Stage",
    "analyse",
    "analysis_log",
    "design_for",
    "designs_for",
    "load_designs",
    "next_stage",
    "replay",
]

#: The designs file inside an ablation root.
DESIGNS_FILE = "sequential.yaml"
#: The fields of a design.
_FIELDS = {
    "claims",
    "matrices",
    "looks",
    "spending",
    "alpha",
    "margin",
    "reference",
    "blocks",
    "written",
    "multiplicity",
    "profile",
}
_BLOCKS = ("build", "cpu")
#: The decisions a row can end with, in the order the pages count them.
DECISIONS = ("detected", "bounded", "open at the cap", "open")


class DesignError(ValueError):
    """A malformed designs file; the message names the file, the design and the field."""


@dataclass(frozen=True)
class Design:
    """One entry of ``sequential.yaml`` (its header describes the fields)."""

    name: str
    claims: tuple[str, ...]
    matrices: tuple[str, ...]
    looks: tuple[int, ...]
    spending: str
    alpha: float
    margin: float
    reference: Mapping[str, str]
    blocks: tuple[str, ...]
    written: str
    profile: str = "standard"

    @property
    def cap(self) -> int:
        """The seeds at information 1: the last look."""
        return self.looks[-1]


def _design(name: str, entry: Any, where: str) -> Design:
    def fail(message: str) -> DesignError:
        return DesignError(f"{where}: design {name!r}: {message}")

    if not isinstance(entry, Mapping):
        raise fail("expected a mapping")
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise fail(f"unknown field(s) {unknown}; allowed: {sorted(_FIELDS)}")
    missing = sorted(_FIELDS - {"multiplicity", "profile"} - set(entry))
    if missing:
        raise fail(f"missing field(s) {missing}")
    looks = entry["looks"]
    if (
        not isinstance(looks, list)
        or len(looks) < 1
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 2 for n in looks)
        or any(b <= a for a, b in itertools.pairwise(looks))
    ):
        raise fail(f"field 'looks': expected increasing seed counts of at least 2, got {looks!r}")
    if entry["spending"] not in SHAPES:
        raise fail(f"field 'spending': {entry['spending']!r}; expected one of {', '.join(SHAPES)}")
    for key, lo, hi in (("alpha", 0.0, 0.5), ("margin", 0.0, 1.0)):
        v = entry[key]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo < v < hi:
            raise fail(f"field {key!r}: expected a number between {lo} and {hi}, got {v!r}")
    ref = entry["reference"]
    ok = isinstance(ref, Mapping) and set(ref) == {"flip", "revert"}
    if not ok or not all(isinstance(v, str) for v in ref.values()):
        raise fail("field 'reference': expected {flip: RUN, revert: RUN}")
    blocks = entry["blocks"]
    names = isinstance(blocks, list) and all(isinstance(b, str) for b in blocks)
    if not names or not set(blocks) <= set(_BLOCKS):
        raise fail(f"field 'blocks': expected a list of {', '.join(_BLOCKS)}, got {blocks!r}")
    if entry.get("multiplicity", "holm") != "holm":
        raise fail(f"field 'multiplicity': {entry['multiplicity']!r}; expected holm")
    for key in ("claims", "matrices"):
        v = entry[key]
        if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
            raise fail(f"field {key!r}: expected a list of names")
    return Design(
        name,
        tuple(entry["claims"]),
        tuple(entry["matrices"]),
        tuple(looks),
        entry["spending"],
        float(entry["alpha"]),
        float(entry["margin"]),
        dict(ref),
        tuple(blocks),
        str(entry["written"]),
        str(entry.get("profile", "standard")),
    )


def load_designs(root: Path | None = None) -> dict[str, Design]:
    """The designs of ``<root>/sequential.yaml`` by name (none when the file is absent)."""
    path = (root or default_root()) / DESIGNS_FILE
    if not path.exists():
        return {}
    doc = read_yaml_file(
        path, DesignError
    )  # one line per fault (seps.experiments.definition_checks)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("designs"), Mapping):
        raise DesignError(f"{path}: expected a mapping with a 'designs' mapping")
    return {str(k): _design(str(k), v, str(path)) for k, v in doc["designs"].items()}


def designs_for(matrix: str, root: Path | None = None) -> list[Design]:
    """Every design whose ``matrices`` name ``matrix`` (one per world, in file order)."""
    return [d for d in load_designs(root).values() if matrix in d.matrices]


def design_for(matrix: str, root: Path | None = None, profile: str | None = None) -> Design | None:
    """The design of ``matrix`` for the records of ``profile`` (any profile when None:
    the first), or None."""
    found = [d for d in designs_for(matrix, root) if profile is None or d.profile == profile]
    return found[0] if found else None


@dataclass(frozen=True)
class SeedPair:
    """One seed of a row: variant minus baseline rSum, and the seed's block."""

    seed: int
    diff: float
    build: str
    cpu: str


@dataclass
class RowResult:
    """A row of a design replayed: its identity, the reference rSum its margin is a
    fraction of, the claimed sign of variant minus baseline (``direction``), each look's
    two analyses, and the decision."""

    claim: str
    matrix: str
    protocol: str
    baseline: str
    variant: str
    reference: str
    reference_rsum: float
    margin: float
    pairs: list[SeedPair]
    direction: str = "+"
    plain: list[LookStat] = field(default_factory=list)
    blocked: list[LookStat] = field(default_factory=list)
    levels: list[float] = field(default_factory=list)
    intervals: list[tuple[float, float]] = field(default_factory=list)
    decision: str = "open"
    decided_look: int | None = None
    crossed_look: int | None = None

    @property
    def key(self) -> str:
        """``<matrix>: <variant> vs <baseline>``: a row's name in logs and messages."""
        return f"{self.matrix}: {self.variant} vs {self.baseline}"

    @property
    def looks_taken(self) -> int:
        return len(self.blocked)

    def final(self) -> LookStat | None:
        """The statistics of the look the decision rests on (the crossing look of a
        detected row, else the last look taken)."""
        if not self.blocked:
            return None
        j = self.crossed_look if self.crossed_look is not None else len(self.blocked) - 1
        return self.blocked[j]

    def interval(self) -> tuple[float, float] | None:
        """The repeated interval at level ``alpha / m`` of the last look taken."""
        return self.intervals[-1] if self.intervals else None

    def bound(self) -> float | None:
        """The largest |effect| the last look's repeated interval leaves: ``X`` of "rules
        out effects beyond +- X" (None before any look)."""
        ci = self.interval()
        return None if ci is None else max(abs(ci[0]), abs(ci[1]))


@dataclass(frozen=True)
class Analysis:
    """A design replayed on a store: the rows of each claim's family, in claim order."""

    design: Design
    families: Mapping[str, list[RowResult]]

    def rows(self) -> list[RowResult]:
        return [r for rows in self.families.values() for r in rows]


def _build(rec: Mapping[str, Any], seed: int) -> str:
    train = rec.get("train_config") or {}
    builds = int(train.get("pretrain_builds") or 1)
    return f"{train.get('pretrain') or 'no pretraining'} build {seed % builds}"


def _pairs(
    key: str, var: Mapping[int, Mapping[str, Any]], ref: Mapping[int, Mapping[str, Any]]
) -> list[SeedPair]:
    out = []
    for s in sorted(set(var) & set(ref)):
        cpu_v, cpu_r = record_cpu_model(var[s]), record_cpu_model(ref[s])
        if cpu_v != cpu_r:
            raise ValueError(
                f"{key}: seed {s}: the two records were made on different CPU types "
                f"({cpu_v}; {cpu_r}); a seed's runs must all come from one CPU type: rerun "
                "one side there, or remove the seed's records made on the other"
            )
        out.append(
            SeedPair(s, float(var[s]["rsum"]) - float(ref[s]["rsum"]), _build(var[s], s), cpu_v)
        )
    return out


def _reference_rsum(frame: Any, profile: str | None, run: str, seeds: int) -> float:
    side = by_seed(frame, profile, run)
    values = [float(side[s]["rsum"]) for s in range(seeds) if s in side]
    return sum(values) / len(values) if len(values) == seeds else math.nan


def check_design(design: Design, root: Path | None) -> tuple[list[Any], dict[str, Any]]:
    """(claims, matrices) of ``claims.yaml``, once every claim and matrix ``design``
    names is there (else a :class:`DesignError` naming them)."""
    claims, matrices = load_claim_file(root=root)
    by_id = {c.id: c for c in claims}
    where = f"{(root or default_root()) / DESIGNS_FILE}: design {design.name!r}"
    unknown = [c for c in design.claims if c not in by_id]
    if unknown:
        raise DesignError(f"{where}: field 'claims': {unknown} not in claims.yaml")
    missing = [m for m in design.matrices if m not in matrices]
    if missing:
        raise DesignError(f"{where}: field 'matrices': {missing} named by no claim of claims.yaml")
    return claims, matrices


def _rows(design: Design, results: Path, root: Path | None) -> dict[str, list[RowResult]]:
    """Each claim's family: its effect rows that are tests at the first look."""
    claims, matrices = check_design(design, root)
    by_id = {c.id: c for c in claims}
    frames = {name: matrix_records(results, matrices[name]) for name in design.matrices}
    first = design.looks[0]
    early = {n: f[f["seed"] < first] if len(f) else f for n, f in frames.items()}
    # A claim may also have rows in matrices the design does not read (the dense-world
    # design reads dense_fusion's rows in seven-differences, not in seven-differences-query):
    # those rows are skipped below, but claim_rows walks every matrix the claim names.
    named = {n for c in by_id.values() if c.id in design.claims for n in c.matrices}
    empty = {
        n: matrix_records(results, matrices[n]).iloc[0:0]
        for n in named - set(early)
        if n in matrices
    }
    early = {**empty, **early}
    families: dict[str, list[RowResult]] = {}
    for cid in design.claims:
        claim = by_id[cid]
        rows = []
        for row in claim_rows(claim, matrices, early):
            if row.matrix.name not in design.matrices or row.variant is None:
                continue
            if row.profile != design.profile:  # another world's rows: another design's
                continue
            c = row.comparison
            if c is None or not c.testable or row.frozen or c.n < first:
                continue
            frame = frames[row.matrix.name]
            kind = "flip" if row.baseline == design.reference["flip"] else "revert"
            ref_run = design.reference[kind]
            ref_rsum = _reference_rsum(frame, row.profile, ref_run, first)
            key = f"{row.matrix.name}: {row.variant} vs {row.baseline}"
            pairs = _pairs(
                key,
                by_seed(frame, row.profile, row.variant),
                by_seed(frame, row.profile, row.baseline),
            )
            rows.append(
                RowResult(
                    cid,
                    row.matrix.name,
                    row.protocol,
                    row.baseline,
                    row.variant,
                    ref_run,
                    ref_rsum,
                    design.margin * ref_rsum,
                    pairs,
                    str(claim.direction),
                )
            )
        families[cid] = rows
    return families


def _blocks(design: Design, pairs: Sequence[SeedPair]) -> list[tuple[str, ...]]:
    """Each seed's block: its values of the design's ``blocks`` (build, CPU type)."""
    build, cpu = "build" in design.blocks, "cpu" in design.blocks
    return [(p.build if build else "", p.cpu if cpu else "") for p in pairs]


def _take_look(design: Design, row: RowResult, n: int, alpha_row: float) -> None:
    pairs = row.pairs[:n]
    diffs = [p.diff for p in pairs]
    row.plain.append(plain_t(diffs))
    row.blocked.append(blocked_t(diffs, _blocks(design, pairs)))
    fractions = [s.n / design.cap for s in row.blocked]
    level = nominal_levels(fractions, alpha_row, design.spending)[-1]
    row.levels.append(level)
    row.intervals.append(repeated_interval(row.blocked[-1], level))


def _complete(row: RowResult, n: int) -> bool:
    """Seeds 0 .. n-1 all paired."""
    return len(row.pairs) >= n and [p.seed for p in row.pairs[:n]] == list(range(n))


def _decide(design: Design, rows: list[RowResult], k: int) -> None:
    """Analysis ``k`` of one family: new looks, Holm over all looks so far, bounds."""
    if not rows:
        return
    alpha_row = design.alpha / len(rows)
    fresh = []
    for row in rows:
        stopped = row.decision in ("detected", "bounded")
        if not stopped and row.looks_taken == k and _complete(row, design.looks[k]):
            _take_look(design, row, design.looks[k], alpha_row)
            fresh.append(row)
    rejected = holm_over_looks(
        {r.key: r.blocked for r in rows}, design.cap, design.alpha, design.spending
    )
    for row in rows:
        if row.key in rejected and row.decision != "detected":
            row.decision, row.decided_look = "detected", k
            row.crossed_look = rejected[row.key]
    for row in fresh:
        if row.decision == "detected":
            continue
        lo, hi = row.intervals[-1]
        if -row.margin < lo and hi < row.margin:
            row.decision, row.decided_look = "bounded", k
        elif row.blocked[-1].n >= design.cap:
            row.decision = "open at the cap"


def replay(design: Design, families: Mapping[str, list[RowResult]]) -> Analysis:
    """The design's analyses, look by look, on rows whose ``pairs`` are filled and whose
    looks are not yet taken (see the module docstring); the rows are updated in place."""
    for k in range(len(design.looks)):
        for rows in families.values():
            _decide(design, rows, k)
    return Analysis(design, families)


def analyse(design: Design, results: str | Path, root: Path | None = None) -> Analysis:
    """Replay ``design`` on the records of ``results`` (see the module docstring)."""
    return replay(design, _rows(design, Path(results), root))


@dataclass(frozen=True)
class Stage:
    """What the next look of a matrix needs: the runs of its open rows, the seeds of the
    look (those already stored are skipped by the runner) and which look it is."""

    look: int
    seeds: tuple[int, ...]
    runs: tuple[str, ...]
    rows: tuple[str, ...]


def next_stage(analysis: Analysis, matrix: str, max_seeds: int | None = None) -> Stage | None:
    """The next look of ``matrix``'s open rows (None: every row of it is decided, bounded
    or at the cap, or the next look would pass ``max_seeds``)."""
    design = analysis.design
    open_rows = [r for r in analysis.rows() if r.matrix == matrix and r.decision in ("open",)]
    if not open_rows:
        return None
    k = min(r.looks_taken for r in open_rows)
    if k >= len(design.looks):
        return None
    n = design.looks[k]
    if max_seeds is not None and n > max_seeds:
        return None
    waiting = [r for r in open_rows if r.looks_taken == k]
    runs = sorted({x for r in waiting for x in (r.baseline, r.variant)})
    return Stage(k, tuple(range(n)), tuple(runs), tuple(r.key for r in waiting))


def _stat(s: LookStat) -> dict[str, Any]:
    return {
        "n": s.n,
        "mean": round(s.mean, 6),
        "se": None if math.isnan(s.se) else round(s.se, 6),
        "df": s.df,
        "p": None if math.isnan(s.p) else float(f"{s.p:.6g}"),
    }


def _round(x: float) -> float | None:
    return None if math.isnan(x) or math.isinf(x) else round(x, 4)


def analysis_log(analysis: Analysis) -> dict[str, Any]:
    """What the store keeps of an analysis: the design, and per row its looks (plain and
    blocked statistics, nominal level, repeated interval), the seeds' blocks and the
    decision with the analysis that made it. Numbers rounded so that a replay on another
    machine writes the same file."""
    d = analysis.design
    rows = []
    for r in analysis.rows():
        used = r.pairs[: r.blocked[-1].n] if r.blocked else []
        rows.append(
            {
                "claim": r.claim,
                "matrix": r.matrix,
                "protocol": r.protocol,
                "baseline": r.baseline,
                "variant": r.variant,
                "reference": r.reference,
                "reference_rsum": _round(r.reference_rsum),
                "margin": _round(r.margin),
                "decision": r.decision,
                "decided_at_look": None if r.decided_look is None else r.decided_look + 1,
                "crossed_at_look": None if r.crossed_look is None else r.crossed_look + 1,
                "looks": [
                    {
                        "look": j + 1,
                        "plain": _stat(p),
                        "blocked": _stat(b),
                        "nominal_level": float(f"{lvl:.6g}"),
                        "interval": [_round(lo), _round(hi)],
                    }
                    for j, (p, b, lvl, (lo, hi)) in enumerate(
                        zip(r.plain, r.blocked, r.levels, r.intervals, strict=True)
                    )
                ],
                "seeds": [{"seed": p.seed, "build": p.build, "cpu": p.cpu} for p in used],
            }
        )
    counts = {k: sum(r.decision == k for r in analysis.rows()) for k in DECISIONS}
    return {
        "schema": "seps-bench/sequential/1",
        "design": {
            "name": d.name,
            "claims": list(d.claims),
            "matrices": list(d.matrices),
            "looks": list(d.looks),
            "spending": d.spending,
            "alpha": d.alpha,
            "margin": d.margin,
            "reference": dict(d.reference),
            "blocks": list(d.blocks),
            "written": d.written,
            "profile": d.profile,
        },
        "counts": counts,
        "rows": rows,
    }
