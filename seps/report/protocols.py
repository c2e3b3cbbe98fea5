"""The ``protocols`` report section: rSum of each preset under each dense-caption protocol.

Issue 16 asks the `findings` report for one view of the leak: for every preset, the rSum
when the model is trained and evaluated under ``query`` (official), ``candidate`` (fair),
``none`` and ``shuffled``, and when a model trained under ``query`` is evaluated under the
others. The results table has these numbers scattered over runs named after their
switches; this section pivots them into preset x (training / evaluation protocol), with
the mean and 95% CI over seeds, and draws the same as grouped bars
(``<matrix>-protocols.png``).

*Which runs enter* (a decision: a cell must measure the protocol and nothing else): runs
whose only changes to their preset are ``dense_source`` / ``eval_dense_source``, or head
switches set to the preset's own value (findings' baseline ``code/detach_selection=true``
is the plain ``code`` preset). When several runs fill one cell, the first in matrix order
is shown. A preset with ``dense_fusion = "none"`` (``laps``) reads no dense caption, so
one record stands for every protocol by construction (:mod:`seps.core.evaluate`); its other
cells stay empty rather than repeat a number that was not measured under them.

The section adds no test to the report's family: every paired comparison it implies is
already in the results table (Δ against the matrix baseline) or in the scorecard's
leakage gap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ..core.config import PRESETS, get_config
from ..io.formatting import code, fmt_ci, markdown_table, pyplot, save_png
from ..stats.paired import mean_ci
from .compare import Comparison, Family
from .records import profiles

#: Protocol pairs (training, evaluation) in column order: trained and evaluated alike,
#: then trained under the official protocol and evaluated under the others.
PAIRS = (
    ("query", "query"),
    ("candidate", "candidate"),
    ("none", "none"),
    ("shuffled", "shuffled"),
    ("query", "candidate"),
    ("query", "none"),
    ("query", "shuffled"),
)
_PROTOCOL_FIELDS = {"dense_source", "eval_dense_source"}
#: Cells: {profile: {preset: {(train, eval): (run_id, [rsum per seed])}}}.
Cells = dict[str, dict[str, dict[tuple[str, str], tuple[str, list[float]]]]]


def _only_protocol(preset: str, describe: str) -> bool:
    """Whether a run's ``describe`` text changes nothing but the protocol: every
    ``field=value`` item is a protocol field, or a head switch at the preset's value."""
    if describe == "(preset)":
        return True
    cfg = get_config(preset)
    for item in describe.split(", "):
        field, _, value = item.partition("=")
        if field in _PROTOCOL_FIELDS:
            continue
        if not hasattr(cfg, field) or str(getattr(cfg, field)) != value:
            return False
    return True


def protocol_cells(current: pd.DataFrame) -> Cells:
    """The completed records of protocol-only runs, by profile, preset (registry order)
    and protocol pair (the first run in record order fills a cell)."""
    out: Cells = {}
    if current.empty:
        return out
    done = current[current["status"] == "done"]
    for profile in profiles(done):
        prof = done[done["profile"] == profile]
        for run_id in dict.fromkeys(prof["run_id"]):  # first-seen order
            sub = prof[prof["run_id"] == run_id].sort_values("seed")
            first = sub.iloc[0]
            preset, describe = str(first["preset"]), str(first["describe"])
            if not _only_protocol(preset, describe):
                continue
            pair = (str(first["train_dense_source"]), str(first["eval_dense_source"]))
            if pair not in PAIRS:
                continue
            cells = out.setdefault(profile, {}).setdefault(preset, {})
            cells.setdefault(pair, (str(run_id), [float(x) for x in sub["rsum"]]))
    # Presets in the registry's order, whatever order the records came in.
    rank = {name: i for i, name in enumerate(PRESETS)}
    return {
        prof: dict(sorted(by.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
        for prof, by in out.items()
    }


def _header(pair: tuple[str, str]) -> str:
    train, ev = pair
    label = {"query": "official", "candidate": "fair"}.get(train, "") if train == ev else ""
    return f"{train} / {ev}" + (f" ({label})" if label else "")


def protocol_comparisons(current: pd.DataFrame) -> list[Comparison]:
    """No tests of its own (see the module docstring)."""
    return []


def plot_protocols(cells: Cells, path: Path) -> dict[str, dict[str, list[float]]]:
    """Grouped bars: per profile panel, x the protocol pairs, one bar per preset (mean
    rSum, 95% CI error bars where 2+ seeds). Returns ``{profile: {preset: heights}}``
    read back from the drawn bars (NaN where no record); nothing drawn -> ``{}``."""
    if not cells:
        return {}
    plt = pyplot()
    panels = list(cells)
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(10, 4.2 * len(panels)), squeeze=False, layout="constrained"
    )
    drawn: dict[str, dict[str, list[float]]] = {}
    for ax, profile in zip(axes[:, 0], panels, strict=True):
        presets = list(cells[profile])
        width = 0.8 / max(1, len(presets))
        drawn[profile] = {}
        for i, preset in enumerate(presets):
            stats = [mean_ci(cells[profile][preset].get(p, ("", []))[1]) for p in PAIRS]
            xs = [j + (i - (len(presets) - 1) / 2) * width for j in range(len(PAIRS))]
            bars = ax.bar(xs, [s[0] for s in stats], width, label=preset)
            ax.errorbar(
                xs, [s[0] for s in stats], yerr=[s[1] for s in stats],
                fmt="none", ecolor="black", capsize=3, linewidth=1,
            )  # fmt: skip
            drawn[profile][preset] = [float(b.get_height()) for b in bars]
        ax.set_xticks(
            range(len(PAIRS)),
            [_header(p).replace(" / ", " /\n").replace(" (", "\n(") for p in PAIRS],
        )
        ax.set_xlabel("dense-caption protocol: training / evaluation")
        ax.set_ylabel("rSum (mean, 95% CI)")
        ax.set_title(f"profile {profile}: rSum by dense-caption protocol")
        # Outside the axes: inside, it covered the tallest bars and their error bars.
        ax.legend(title="preset", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.grid(axis="y", alpha=0.3)
    save_png(fig, path)
    plt.close(fig)
    return drawn


def protocol_section(
    current: pd.DataFrame, matrix_name: str, out_dir: Path, family: Family
) -> tuple[list[str], dict[str, str], Any]:
    """The section's markdown lines, ``{caption: png}`` and the plotted series."""
    cells = protocol_cells(current)
    png = Path(out_dir) / f"{matrix_name}-protocols.png"
    if not cells:
        png.unlink(missing_ok=True)
        return [], {}, {}
    drawn = plot_protocols(cells, png)
    lines = [
        "## Dense-caption protocols",
        "",
        "rSum (mean ± 95% CI over seeds) of each preset under each dense-caption "
        "protocol, training / evaluation: the first four columns train and evaluate "
        "alike; the last three evaluate the model trained under the official `query` "
        "protocol under the others. Only runs that change nothing but the protocol enter "
        "(`seps.report.protocols`); the per-run tests are in the results table above, the "
        "official-vs-fair gap of one model in the scorecard's leakage section. A preset "
        "without dense captions (`laps`) reads none under any protocol, so its one record "
        "holds for every column; the others stay empty (not measured under them).",
        "",
    ]
    for profile, presets in cells.items():
        rows = []
        for preset, by_pair in presets.items():
            row = [code(preset)]
            for pair in PAIRS:
                values = by_pair.get(pair, ("", []))[1]
                row.append(fmt_ci(*mean_ci(values)) if values else "—")
            rows.append(row)
        lines += [
            f"### Profile `{profile}`",
            "",
            markdown_table(rows, ["preset", *(_header(p) for p in PAIRS)]),
            "",
        ]
    caption = "rSum by dense-caption protocol (training / evaluation), per preset"
    lines += [f"![{caption}]({png.name})", ""]
    return lines, {caption: png.name}, drawn


__all__ = ["PAIRS", "plot_protocols", "protocol_cells", "protocol_comparisons", "protocol_section"]
