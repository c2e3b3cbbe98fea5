"""The loss-study matrix's per-step records, as rows per cell of the study.

The ``loss-study`` matrix (issue 6) crosses the ratio constraint's decision, criterion
and form, and separately the alignment loss. :func:`seps.train.train` stores a per-step
log in every record (``history[*].steps_log``: loss terms, keep ratios, gradient norms);
this module reads it back and groups the completed runs into the cells the study
compares (:func:`ratio_rows`, :func:`align_rows`), for the tables, statements and plots
of :mod:`seps.report.loss_study` and :mod:`seps.report.loss_plots`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..core.config import CHOICES, get_config
from ..stats.paired import mean_ci
from ..train.config import TrainConfig
from .definition import defined_profile
from .records import dense_pair

#: Ratio criteria of the study, ``off`` meaning ``ratio_loss=off``.
CRITERIA = ("mse", "l1", "ce", "off")
DECISIONS = CHOICES["decision"]
FORMS = ("unified", "separate", "eq7")
ALIGN_LOSSES = CHOICES["align_loss"]
#: Table 2's label for ``align_loss=triplet`` when the hardest negative never starts
#: (``max_violation_from`` at or past the last epoch, as in the ``standard`` profile):
#: the same training as ``triplet_sum``, not the official schedule, which keeps the
#: label ``triplet``.
SUMMED_TRIPLET = "triplet, summed every epoch"
#: Table 2's rows, in order.
ALIGN_CELLS = ("triplet", SUMMED_TRIPLET, *(k for k in ALIGN_LOSSES if k != "triplet"))
#: The form the plots and seed 000's claim are read on: the paper text's form, one keep
#: ratio per mask.
PLOT_FORM = "separate"
#: The paper preset's ratio setting; the alignment cells differ from it only by the loss.
_PAPER_RATIO = {
    k: getattr(get_config("paper"), k) for k in ("decision", "ratio_loss", "ratio_criterion")
}
#: The study's grid runs every criterion at this weight; a run with another
#: ``ratio_weight`` is a *scaled* cell (the ``.../normalised`` runs: the weight that
#: gives the criterion the reference's initial gradient norm, ``seps-bench ratio-scale``).
PAPER_RATIO_WEIGHT = get_config("paper").ratio_weight


def criterion_of(head: Mapping[str, Any]) -> str:
    """``off`` when the ratio loss is off, else the ratio criterion (mse, l1, ce)."""
    return "off" if head.get("ratio_loss") == "off" else str(head.get("ratio_criterion", "mse"))


def steps(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The per-step records of a run, in order, each with its ``epoch``."""
    out = []
    for h in history or []:
        for rec in h.get("steps_log") or []:
            out.append({**rec, "epoch": h.get("epoch")})
    return out


def mean_keep(rec: Mapping[str, Any]) -> float:
    """Keep ratio of a step, averaged over the branches."""
    kr = rec.get("keep_ratio") or {}
    return float(np.mean(list(kr.values()))) if kr else math.nan


def completed_runs(cur: pd.DataFrame) -> pd.DataFrame:
    """The completed current records, each run once, with the study's coordinates as
    columns: ``decision``, ``criterion``, ``form`` (the ``ratio_loss`` setting) and
    ``align_loss``."""
    if cur.empty:
        return cur
    done = cur[cur["status"] == "done"]
    # Two run ids with the same resolved config and seed are one run (the paper default
    # is both a ratio cell and the official-triplet cell): count it once.
    done = done.drop_duplicates(["profile", "key", "seed"]).copy()
    done["decision"] = [h.get("decision") for h in done["head_config"]]
    done["criterion"] = [criterion_of(h) for h in done["head_config"]]
    done["form"] = [h.get("ratio_loss") for h in done["head_config"]]
    done["align_loss"] = [h.get("align_loss", "triplet") for h in done["head_config"]]
    trains = [t if isinstance(t, Mapping) else {} for t in done["train_config"]]
    done["align_cell"] = [
        _align_cell(kind, t) for kind, t in zip(done["align_loss"], trains, strict=True)
    ]
    done["profile_schedule"] = [
        _switch_epoch(t)
        == _switch_epoch({**t, "max_violation_from": _profile_hardest_from(str(p))})
        for t, p in zip(trains, done["profile"], strict=True)
    ]
    done["ratio_weight"] = [
        float(h.get("ratio_weight", PAPER_RATIO_WEIGHT)) for h in done["head_config"]
    ]
    done["scaled"] = [w != PAPER_RATIO_WEIGHT for w in done["ratio_weight"]]
    return done


def _hardest_from(train: Mapping[str, Any]) -> int:
    return int(train.get("max_violation_from", TrainConfig.max_violation_from))


def _switch_epoch(train: Mapping[str, Any]) -> int:
    """The epoch the hardest negative starts, ``epochs`` when it never does: two runs
    with the same value train the same schedule (2 and 99 at 2 epochs)."""
    return min(_hardest_from(train), int(train.get("epochs", TrainConfig.epochs)))


def _profile_hardest_from(profile: str) -> int:
    """``max_violation_from`` of the profile's own runs (TrainConfig's default for a
    profile this checkout does not define)."""
    prof = defined_profile(profile)
    return _hardest_from(prof.train if prof is not None else {})


def _align_cell(kind: str, train: Mapping[str, Any]) -> str:
    """Table 2's row of a run: its ``align_loss``, except that a ``triplet`` set on
    purpose to never start the hardest negative (``max_violation_from`` moved off its
    default to at or past the last epoch, as the ``standard`` profile does) is
    :data:`SUMMED_TRIPLET`. A one-epoch run at the default (``smoke``) keeps
    ``triplet``: it is the official schedule cut short, not a choice to sum."""
    hardest = _hardest_from(train)
    moved = hardest != TrainConfig.max_violation_from
    if kind == "triplet" and moved and hardest >= int(train.get("epochs", TrainConfig.epochs)):
        return SUMMED_TRIPLET
    return kind


def ratio_part(done: pd.DataFrame) -> pd.DataFrame:
    """The runs of the ratio grid: the ``triplet`` runs at the profile's own schedule
    (not ``align/official-schedule``, which differs from the paper default only by
    the schedule where the profile sums in every epoch)."""
    if done.empty:
        return done
    return done[(done["align_loss"] == "triplet") & done["profile_schedule"]]


def at_paper_weight(done: pd.DataFrame) -> pd.DataFrame:
    """The runs of :func:`completed_runs` at the paper's ``ratio_weight`` (the grid,
    the controls and the alignment cells; what the plots draw)."""
    return done[~done["scaled"]] if len(done) else done


def is_align_variant(head: Mapping[str, Any]) -> bool:
    """A run that differs from the paper preset's ratio setting only by its alignment loss."""
    weight = float(head.get("ratio_weight", PAPER_RATIO_WEIGHT))
    return weight == PAPER_RATIO_WEIGHT and all(head.get(k) == v for k, v in _PAPER_RATIO.items())


def _ratio_row(sel: pd.DataFrame) -> dict[str, Any]:
    """Ratio-loss values, gradients, final keep ratio and rSum of one cell's runs."""
    values, grads, sgrads, finals, targets, initial = [], [], [], [], [], []
    for hist, head in zip(sel["history"], sel["head_config"], strict=True):
        st = steps(hist)
        values += [s["ratio"] for s in st]
        grads += [s["ratio_grad_norm"] for s in st if s.get("ratio_grad_norm") is not None]
        if st and st[0].get("ratio_grad_norm") is not None:
            initial.append(st[0]["ratio_grad_norm"])
        sgrads += [s["selector_grad_norm"] for s in st if s.get("selector_grad_norm") is not None]
        last = [s for s in st if s["epoch"] == st[-1]["epoch"]] if st else []
        finals.append(float(np.mean([mean_keep(s) for s in last])) if last else math.nan)
        targets.append(float(head.get("sparse_ratio", math.nan)))
    gaps = {
        int(seed): abs(f - t)
        for seed, f, t in zip(sel["seed"], finals, targets, strict=True)
        if not (math.isnan(f) or math.isnan(t))
    }
    return {
        "seeds": len(sel),
        "target": float(np.mean(targets)),
        "keep_final": float(np.nanmean(finals)) if not np.isnan(finals).all() else math.nan,
        # |final keep ratio - target| per seed: "which criterion ends closer" is a paired
        # comparison over seeds, not a reading of two means.
        "keep_gap_by_seed": gaps,
        "ratio_min": min(values) if values else math.nan,
        "ratio_max": max(values) if values else math.nan,
        "ratio_grad_max": max(grads) if grads else math.nan,
        "ratio_grad_initial": float(np.mean(initial)) if initial else math.nan,
        "selector_grad_mean": float(np.mean(sgrads)) if sgrads else math.nan,
        **_per_seed(sel),
    }


def _per_seed(sel: pd.DataFrame) -> dict[str, Any]:
    """rSum mean ± CI, rSum and record row per seed, dense-caption protocols of a cell."""
    protocols = sorted({dense_pair(r) for r in sel.to_dict("records")})
    return {
        "rsum": mean_ci([float(v) for v in sel["rsum"]]),
        "rsum_by_seed": dict(zip(sel["seed"], sel["rsum"], strict=True)),
        "by_seed": {int(r["seed"]): r for r in sel.to_dict("records")},
        "dense": protocols[0] if len(protocols) == 1 else "varies",
    }


def ratio_rows(done: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per (decision, criterion, form, weight) of the ratio part (the
    profile's triplet schedule, :func:`ratio_part`), each decision's cells at the
    paper's weight first, then its scaled cells (``scaled`` True, by weight):
    ``weight``, ``seeds``, ``target``, ``keep_final``, ``ratio_min``/``ratio_max``,
    ``ratio_grad_max``, ``ratio_grad_initial`` (the first step's, mean over seeds),
    ``selector_grad_mean``, ``rsum`` (mean, CI, n), ``rsum_by_seed``, ``by_seed`` (the
    record rows) and ``dense`` (their dense-caption protocols, ``varies`` if mixed)."""
    rows = []
    part = ratio_part(done)
    for decision in DECISIONS:
        for scaled in (False, True):
            for crit in CRITERIA:
                for form in ("off",) if crit == "off" else FORMS:
                    sel = part[
                        (part["decision"] == decision)
                        & (part["criterion"] == crit)
                        & (part["form"] == form)
                        & (part["scaled"] == scaled)
                    ]
                    for weight in sorted(set(sel["ratio_weight"])) if len(sel) else []:
                        cell = sel[sel["ratio_weight"] == weight]
                        rows.append(
                            {
                                "decision": decision,
                                "criterion": crit,
                                "form": form,
                                "weight": float(weight),
                                "scaled": scaled,
                                **_ratio_row(cell),
                            }
                        )
    return rows


#: An alignment cell's similarities read as *flat* (an embedding collapse: every
#: similarity of a batch about equal; not the validation collapse of
#: :mod:`seps.report.collapse`) when the mean, over its runs and its last
#: epoch's steps, of both batch triplets (``align_sum`` and ``align_hardest``) lies
#: within this fraction of their levels with every similarity of a batch equal
#: (:func:`flat_levels`). A stated threshold, not a test: at ``standard`` the flat
#: ``triplet_hardest`` cell's last epoch sits 0.5% (summed) and 0.4% (hardest) off,
#: ``triplet_sum``'s 88% below and 40% above (AMD EPYC records; 38% on the Intel ones).
FLAT_TOLERANCE = 0.02


def flat_levels(sel: pd.DataFrame) -> dict[str, float] | None:
    """The batch triplets' values when every similarity of a batch is equal (flat
    similarities, a collapsed embedding): each non-matching pair violates by the
    margin, ``2 B (B - 1) m`` summed (with ``B`` distinct images; captions of one
    image in a batch lower it slightly) and ``2 B m`` for the hardest negative.
    ``None`` unless the runs share ``B`` and ``m``."""
    pairs = {
        (int(t.get("batch_size", 0)), float(h.get("margin", math.nan)))
        for t, h in zip(sel["train_config"], sel["head_config"], strict=True)
        if isinstance(t, Mapping)
    }
    if len(pairs) != 1:
        return None
    ((b, m),) = pairs
    if b < 2 or not math.isfinite(m):
        return None
    return {"align_sum": 2 * b * (b - 1) * m, "align_hardest": 2 * b * m}


def last_epoch_triplets(sel: pd.DataFrame) -> dict[str, float]:
    """Mean over the runs and their last epoch's steps of ``align_sum`` and
    ``align_hardest`` (NaN where no step logged them)."""
    out = {}
    for field in ("align_sum", "align_hardest"):
        vals = [
            float(rec[field])
            for hist in sel["history"]
            if hist
            for rec in hist[-1].get("steps_log") or []
            if rec.get(field) is not None
        ]
        out[field] = float(np.mean(vals)) if vals else math.nan
    return out


def flat(row: Mapping[str, Any]) -> bool:
    """Whether an alignment row's last-epoch batch triplets both lie within
    :data:`FLAT_TOLERANCE` of their :func:`flat_levels`."""
    levels = row.get("flat_levels")
    if not levels:
        return False
    return all(
        abs(row["last_triplets"][k] - level) <= FLAT_TOLERANCE * level
        for k, level in levels.items()
    )


def align_rows(done: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per alignment cell of :data:`ALIGN_CELLS` (paper preset's ratio
    setting): ``align_loss`` (the cell's label), ``seeds``, ``rsum``, ``rsum_by_seed``,
    ``by_seed``, ``dense``, ``run_ids``, ``last_triplets``
    (:func:`last_epoch_triplets`) and ``flat_levels`` (:func:`flat_levels`)."""
    rows = []
    if done.empty:
        return rows
    part = done[[is_align_variant(h) for h in done["head_config"]]]
    for kind in ALIGN_CELLS:
        sel = part[part["align_cell"] == kind]
        if sel.empty:
            continue
        rows.append(
            {
                "align_loss": kind,
                "seeds": len(sel),
                **_per_seed(sel),
                "run_ids": sorted(set(sel["run_id"])),
                "last_triplets": last_epoch_triplets(sel),
                "flat_levels": flat_levels(sel),
            }
        )
    return rows


__all__ = [
    "ALIGN_CELLS",
    "ALIGN_LOSSES",
    "CRITERIA",
    "DECISIONS",
    "FLAT_TOLERANCE",
    "FORMS",
    "PAPER_RATIO_WEIGHT",
    "PLOT_FORM",
    "SUMMED_TRIPLET",
    "align_rows",
    "at_paper_weight",
    "completed_runs",
    "criterion_of",
    "flat",
    "flat_levels",
    "is_align_variant",
    "last_epoch_triplets",
    "mean_keep",
    "ratio_part",
    "ratio_rows",
    "steps",
]
