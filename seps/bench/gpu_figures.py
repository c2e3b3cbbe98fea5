"""The GPU figures of the latency report: one table per folder of GPU-check files under
``reports/gpu/<folder>/`` (:mod:`seps.bench.gpu_check` writes them; a folder holds the
files of one commit's calls, as they were written), labelled with the card they ran on.

The latency report is measured on the machine that runs ``seps-bench bench --report``;
these figures come from the JSON files of the GPU check, read as they are, so that the
report never retypes a GPU number (one source of truth: the check's files). A folder
whose files cannot be read as the check writes them is named and skipped: the figures
must never cost the (long) report they are appended to.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = ["gpu_lines"]

#: The line of ``summary.md`` that dates a call (``write_summary``): the folders' order.
_WRITTEN = re.compile(r"^Written (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", re.MULTILINE)
#: The step files that may describe the machine (``env``), in the order they are read.
_STEP_FILES = ("kernels", "train", "eval")
#: Its line naming the card (when no step file names it).
_GPU = re.compile(r"^- gpu: (.+)$", re.MULTILINE)


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _dict(data: Any) -> dict[str, Any]:
    return data if isinstance(data, dict) else {}


def _rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    rows = data.get("rows")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _steps(folder: Path) -> dict[str, str]:
    """A row per step that did not end ``ok`` (``steps.json``), by step name: a step that
    died before it wrote its JSON would otherwise vanish from the table."""
    steps = _load(folder / "steps.json")
    out = {}
    for s in steps if isinstance(steps, list) else []:
        if isinstance(s, dict) and s.get("status") not in (None, "ok", "skipped"):
            out[str(s.get("step"))] = (
                f"| {s.get('step')} step | {s.get('status')} (exit {s.get('exit_code')} "
                f"after {s.get('seconds')} s) |"
            )
    return out


def _call_rows(folder: Path) -> list[str]:
    """The rows ``| what | figure |`` of one folder; empty when it holds none of the
    step files. Raises on files whose fields are not what the check writes."""
    kernels, evals, train = (
        _dict(_load(folder / f"{n}.json")) for n in ("kernels", "eval", "train")
    )
    failed = _steps(folder)
    rows = list(failed.values())
    for name, data in (("eval", evals), ("kernels", kernels), ("train", train)):
        if data.get("partial") and name not in failed:
            rows.append(f"| {name} step | stopped by its time limit (partial) |")
    for r in _rows(evals):
        if isinstance(r.get("seconds"), (int, float)):
            layout = str(r.get("layout", "?")).split(" (")[0]
            rate = r.get("pairs_per_s")
            rate = f" ({rate:,.0f} pairs/s)" if isinstance(rate, (int, float)) else ""
            rows.append(
                f"| {r.get('images')} x {r.get('texts')} evaluation, `{layout}` | "
                f"{r['seconds']:.1f} s{rate} |"
            )
    timed = [
        r for r in _rows(kernels)
        if r.get("impl") not in (None, "loop")
        and isinstance(r.get("head_eval_speedup_vs_loop"), (int, float))
    ]  # fmt: skip
    if timed:
        speed = ", ".join(f"{r['impl']} {r['head_eval_speedup_vs_loop']:.1f}x" for r in timed)
        equal = all(r.get("sims_equal") for r in _rows(kernels) if "sims_equal" in r)
        rows.append(
            f"| head vs loop, {kernels.get('images')} x {kernels.get('texts')} | {speed}; "
            f"similarities {'equal' if equal else 'NOT equal'} within the tests' tolerance |"
        )
    steps = [
        r for r in _rows(train)
        if r.get("preset") and isinstance(r.get("step_ms_median"), (int, float))
    ]  # fmt: skip
    if steps:
        batch = next((r["batch"] for r in steps if r.get("batch")), "?")
        # Checks since b5715a0 time each preset twice: as built, and one image per call.
        ours = [r for r in steps if r.get("alignment") != "per image"]
        before = {r["preset"]: r for r in steps if r.get("alignment") == "per image"}
        each = ", ".join(
            f"`{r['preset']}` {r['step_ms_median']:.0f} ms"
            + (
                f" ({before[r['preset']]['step_ms_median']:.0f} ms one image per call)"
                if r["preset"] in before
                else ""
            )
            for r in ours
        )
        rows.append(
            f"| training step, {train.get('profile')}, B = {batch}, "
            f"{train.get('precision', 'precision not recorded')} | {each} |"
        )
    report = folder / "bench-report" / "latency.md"
    if report.is_file():
        rel = f"gpu/{folder.name}/bench-report/latency.md"
        rows.append(f"| latency report (its own sizes) | [{rel}]({rel}) |")
    return rows


def _summary(folder: Path, pattern: re.Pattern[str]) -> str:
    """The first group of ``pattern`` in the folder's ``summary.md`` ("" when absent)."""
    summary = folder / "summary.md"
    text = summary.read_text(errors="replace") if summary.is_file() else ""
    found = pattern.search(text)
    return found.group(1).strip() if found else ""


def _card(folder: Path) -> str:
    envs = (_dict(_dict(_load(folder / f"{n}.json")).get("env")) for n in _STEP_FILES)
    env = next((e for e in envs if e.get("gpu")), {})
    if env.get("gpu"):
        return f"{env['gpu']} (torch {env.get('torch', '?')}, CUDA {env.get('cuda', '?')})"
    return _summary(folder, _GPU) or "GPU not recorded"


def gpu_lines(gpu_dir: Path, link: str = "gpu/README.md") -> list[str]:
    """Markdown lines of the report's GPU section: for each folder under ``gpu_dir``
    that holds GPU-check files (in the order their ``summary.md`` dates them, undated
    ones first, then by name), its card and figures; no lines when there is none (the
    report then says nothing about GPUs)."""
    if not gpu_dir.is_dir():
        return []
    out: list[str] = []
    folders = sorted(
        (p for p in gpu_dir.iterdir() if p.is_dir()), key=lambda p: (_summary(p, _WRITTEN), p.name)
    )
    for folder in folders:
        try:
            rows = _call_rows(folder)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            rows = [f"| files | not read as the GPU check writes them ({type(exc).__name__}) |"]
        if not rows:
            continue
        out += [f"### {_card(folder)}: `{folder.name}`", "", "| what | figure |", "|---|---|"]
        out += [*rows, ""]
    if not out:
        return []
    head = [
        "## On a GPU",
        "",
        f"From the GPU check's own files ([{link}]({link}) says which commit and calls each "
        "folder holds); not measured by this report, and comparable only within one folder.",
        "",
    ]
    return head + out
