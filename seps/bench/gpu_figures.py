"""The GPU figures of the latency report: one table per GPU-check call under
``reports/gpu/<folder>/`` (:mod:`seps.bench.gpu_check` writes them; each folder is one
call's untouched output), labelled with the card the call ran on.

The latency report is measured on the machine that runs ``seps-bench bench --report``;
these figures come from the JSON files of the GPU check, read as they are, so that the
report never retypes a GPU number (one source of truth: the check's files).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["gpu_lines"]


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _call_rows(folder: Path) -> list[str]:
    """The rows ``| what | figure |`` of one call's folder; empty when it holds none of
    the step files."""
    kernels, evals, train = (_load(folder / f"{n}.json") for n in ("kernels", "eval", "train"))
    rows = []
    for name, data in (("eval", evals), ("kernels", kernels), ("train", train)):
        if data is not None and data.get("partial"):
            rows.append(f"| {name} step | stopped by its time limit (partial) |")
    if evals:
        for r in evals.get("rows", []):
            if r.get("seconds") is not None:
                layout = str(r.get("layout", "?")).split(" (")[0]
                rows.append(
                    f"| {r.get('images')} x {r.get('texts')} evaluation, `{layout}` | "
                    f"{r['seconds']:.1f} s ({r.get('pairs_per_s', 0):,.0f} pairs/s) |"
                )
    if kernels:
        speed = ", ".join(
            f"{r['impl']} {r['head_eval_speedup_vs_loop']:.1f}x"
            for r in kernels.get("rows", [])
            if r.get("impl") != "loop" and r.get("head_eval_speedup_vs_loop") is not None
        )
        equal = all(r.get("sims_equal") for r in kernels.get("rows", []) if "sims_equal" in r)
        if speed:
            rows.append(
                f"| head vs loop, {kernels.get('images')} x {kernels.get('texts')} | {speed}; "
                f"similarities {'equal' if equal else 'NOT equal'} within the tests' tolerance |"
            )
    if train:
        steps = ", ".join(
            f"`{r['preset']}` {r['step_ms_median']:.0f} ms" for r in train.get("rows", [])
            if r.get("step_ms_median") is not None
        )  # fmt: skip
        batch = next((r["batch"] for r in train.get("rows", []) if r.get("batch")), "?")
        if steps:
            rows.append(f"| training step, {train.get('profile')}, B = {batch}, bf16 | {steps} |")
    report = folder / "bench-report" / "latency.md"
    if report.is_file():
        rel = f"gpu/{folder.name}/bench-report/latency.md"
        rows.append(f"| latency report at reduced sizes | [{rel}]({rel}) |")
    return rows


def gpu_lines(gpu_dir: Path, link: str = "gpu/README.md") -> list[str]:
    """Markdown lines of the report's GPU section: for each call folder under
    ``gpu_dir`` (sorted by name) that holds GPU-check files, its card and figures;
    no lines when there is none (the report then says nothing about GPUs)."""
    if not gpu_dir.is_dir():
        return []
    out: list[str] = []
    for folder in sorted(p for p in gpu_dir.iterdir() if p.is_dir()):
        rows = _call_rows(folder)
        if not rows:
            continue
        env = (_load(folder / "kernels.json") or {}).get("env") or {}
        card = env.get("gpu") or "GPU not recorded"
        sw = f"torch {env.get('torch', '?')}, CUDA {env.get('cuda', '?')}"
        out += [f"### {card}: `{folder.name}` ({sw})", "", "| what | figure |", "|---|---|"]
        out += [*rows, ""]
    if not out:
        return []
    head = [
        "## On a GPU",
        "",
        f"From the GPU check's own files ([{link}]({link}) says which commit and call each "
        "folder is); not measured by this report, and comparable only within one folder.",
        "",
    ]
    return head + out
