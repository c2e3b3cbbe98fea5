"""The world card on the pages: each world's measures beside Flickr30K's.

A world is a profile; its card (``<results>/_worlds/<profile>.json``, written by
``seps-bench world``, :mod:`seps.runs.world`) holds what its data give away without
pixels and the room its heads have, measured per draw. :func:`world_lines` puts the
cards of the worlds a page reads side by side, with the ratio of each text-only matcher
to the world's trained ``laps`` (its records' mean rSum over the seeds the card
measured), and Flickr30K's figures where one exists: its text measures are measured on
the real captions (``../shared/data/f30k``), LAPS' rSum is the paper's reported one.
A world without a card says how to make it. Below the card, the control that every
second world carries (:mod:`.world_control`: ``laps`` has the same bits in each).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..io.formatting import DASH, code, fmt, markdown_table
from .world_control import LAPS_MATRIX, control_lines

__all__ = ["flickr30k_laps_rsum", "load_card", "world_lines"]


def flickr30k_laps_rsum(root: Path | None = None) -> float:
    """LAPS' rSum on Flickr30K 1K test as the paper reports it (ViT-Base-224, from
    ``paper_figures.yaml``): the denominator of Flickr30K's text-only ratio."""
    from .paper import load_paper_figures

    for table in load_paper_figures(root).values():
        for row in (table or {}).get("rows") or []:
            if (row.get("method"), row.get("dataset"), row.get("backbone")) == (
                "LAPS",
                "Flickr30K 1K",
                "ViT-Base-224",
            ):
                return float(row["rsum"])
    return math.nan


#: The card's measures, in the order the table shows them: (key, label, digits).
MEASURES = (
    ("bm25_rsum", "generic BM25 matcher, rSum (no pixels)", 1),
    ("bm25_ratio", "BM25 / trained `laps`", 2),
    ("vocabulary_rsum", "vocabulary-aware matcher, rSum (no pixels)", 1),
    ("vocabulary_ratio", "vocabulary matcher / trained `laps`", 2),
    ("s_im_auc", "`s_im` object AUC (0.5: chance; below: prefers the backdrop)", 2),
    ("oracle_rsum", "scene-reading oracle, rSum (the ceiling)", 1),
    ("chance_rsum", "chance, rSum", 1),
    ("duplicate_share", "test captions shared with another image", 3),
    ("laps_rsum", "trained `laps`, rSum (its `seven-differences` records)", 1),
)


def load_card(results: str | Path, profile: str) -> dict[str, Any] | None:
    """The card of ``profile`` in the store, or None (absent or unreadable)."""
    path = Path(results) / "_worlds" / f"{profile}.json"
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return card if isinstance(card, Mapping) and isinstance(card.get("draws"), list) else None


def _mean(values: Iterable[float | None]) -> float:
    v = [float(x) for x in values if x is not None and not math.isnan(float(x))]
    return sum(v) / len(v) if v else math.nan


def _laps_rsum(records: pd.DataFrame, profile: str, seeds: Sequence[int]) -> float:
    """The mean rSum of the world's ``laps`` records over ``seeds`` (every matrix; one
    record per seed: the latest)."""
    if records.empty:
        return math.nan
    sub = records[
        (records["run_id"] == "laps")
        & (records["profile"] == profile)
        & (records["status"] == "done")
        & (records["seed"].isin(list(seeds)))
    ]
    per_seed = sub.sort_values("seed").drop_duplicates("seed", keep="last")
    return float(per_seed["rsum"].mean()) if len(per_seed) else math.nan


def _column(card: Mapping[str, Any], laps: float) -> dict[str, float]:
    draws = card["draws"]
    out = {k: _mean(d.get(k) for d in draws) for k, _, _ in MEASURES if k in draws[0]}
    out["laps_rsum"] = laps
    for name in ("bm25", "vocabulary"):
        if f"{name}_rsum" in out and laps > 0:
            out[f"{name}_ratio"] = out[f"{name}_rsum"] / laps
    return out


def world_lines(
    results: str | Path, profiles: Sequence[str], root: Path | None = None
) -> list[str]:
    """The world card of ``profiles`` (markdown lines; none without a profile)."""
    if not profiles:
        return []
    from .records import load_results

    folder = Path(results) / LAPS_MATRIX
    records = load_results(results, LAPS_MATRIX) if folder.is_dir() else pd.DataFrame()
    columns, headers, missing = [], ["measure"], []
    f30k = None
    for profile in profiles:
        card = load_card(results, profile)
        if card is None:
            missing.append(profile)
            continue
        seeds = [int(d["seed"]) for d in card["draws"]]
        columns.append(_column(card, _laps_rsum(records, profile, seeds)))
        noise = card.get("dense_noise")
        draws = ", ".join(map(str, seeds))
        headers.append(f"world {code(profile)} (dense noise {fmt(noise, 2)}; draws {draws})")
        f30k = f30k or card.get("flickr30k")
    lines = ["## The world", ""]
    if columns:
        if f30k:
            f = dict(f30k)
            f["laps_rsum"] = flickr30k_laps_rsum(root)
            f["bm25_ratio"] = f["bm25_rsum"] / f["laps_rsum"]
            columns.append(f)
            headers.append("Flickr30K (test; LAPS as reported)")
        rows = []
        for key, label, digits in MEASURES:
            cells = [
                fmt(c[key], digits) if key in c and not math.isnan(c[key]) else DASH
                for c in columns
            ]
            if any(x != DASH for x in cells):
                rows.append([label, *cells])
        lines += [
            "What the dense captions give away without pixels and how much room the heads "
            "have, measured on the test splits of the draws the runs train on "
            "(`seps-bench world`; a verdict that holds in two worlds does not hinge on "
            "how much the dense captions give away).",
            "",
            markdown_table(rows, headers),
            "",
        ]
    lines += control_lines(results, [p for p in profiles if p not in missing])
    for profile in missing:
        lines += [
            f"No card of world {code(profile)} yet: `seps-bench world --profile {profile}` "
            "measures it.",
            "",
        ]
    return lines
