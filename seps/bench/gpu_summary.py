"""The summary of ``scripts/gpu-check.sh``: ``summary.md``, ``steps.json`` and
``tests.json`` from what the measurement steps (:mod:`seps.bench.gpu_check`) and the
script wrote (``python -m seps.bench.gpu_check summary``).

Only reads JSON, pytest's junit XML and the script's ``steps.tsv``; imports nothing of
the measurements, so that a summary can be written from a copied folder on any machine.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

#: The measurement steps, in the order the script runs them (``STEP.json`` each).
STEP_NAMES: tuple[str, ...] = ("kernels", "train", "eval")


def junit_summary(xml: Path) -> dict[str, Any]:
    """Counts and non-passed test cases of a pytest junit file."""
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    cases = []
    for s in suites:
        for k in counts:
            counts[k] += int(s.get(k, 0))
        for case in s.iter("testcase"):
            status = "passed"
            msg = ""
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    status, msg = tag, (el.get("message") or "")[:300]
            cases.append({"test": f"{case.get('classname')}::{case.get('name')}",
                          "status": status, "message": msg})  # fmt: skip
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "cases": cases, "ok": counts["failures"] == counts["errors"] == 0}


def _md_table(rows: list[dict[str, Any]], keys: list[str]) -> list[str]:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.0f}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r.get(k)) for k in keys) + " |" for r in rows]
    return lines


def read_steps(work: Path) -> list[dict[str, Any]]:
    """The script's ``steps.tsv`` (name, exit code or ``skipped``, seconds) as rows."""
    rows = []
    path = work / "steps.tsv"
    for line in path.read_text().splitlines() if path.is_file() else []:
        parts = line.split("\t")
        if len(parts) == 3:
            name, rc, secs = parts
            status = {"0": "ok", "skipped": "skipped", "124": "TIMEOUT"}.get(rc, "FAILED")
            rows.append({"step": name, "status": status, "exit_code": rc, "seconds": int(secs)})
    return rows


def write_summary(out: Path, work: Path | None = None) -> str:
    """``summary.md``, ``steps.json`` and ``tests.json`` in ``out`` from the steps' JSON
    files in ``out`` and the script's raw files (``steps.tsv``, pytest's ``tests.xml`` and
    ``tests.txt``) in ``work`` (default ``out``). Kept to 8 files in ``out`` with the
    latency report, the most a device run brings back."""
    work = out if work is None else work
    lines = ["# GPU check", "", f"Written {time.strftime('%Y-%m-%d %H:%M:%S %Z')}.", ""]
    env = next(
        (
            d["env"]
            for n in STEP_NAMES
            if (d := _load(out / f"{n}.json", errors_too=True)) and d.get("env")
        ),
        None,
    )
    if env:
        lines += [f"- {key}: {v}" for key, v in env.items()] + [""]
    steps = read_steps(work)
    if steps:
        (out / "steps.json").write_text(json.dumps(steps, indent=1) + "\n")
        lines += ["## Steps", "", *_md_table(steps, ["step", "status", "exit_code", "seconds"])]
        lines.append("")
    xml = work / "tests.xml"
    if xml.is_file():
        t = junit_summary(xml)
        txt = work / "tests.txt"
        t["output_tail"] = txt.read_text(errors="replace")[-6000:] if txt.is_file() else ""
        (out / "tests.json").write_text(json.dumps(t, indent=1) + "\n")
        lines += [
            "## CUDA tests",
            "",
            f"{t['passed']} passed, {t['failures']} failed, {t['errors']} errors, "
            f"{t['skipped']} skipped (details: tests.json, with pytest's output)",
            "",
        ]
        lines += [f"- {c['status']}: {c['test']} {c['message']}" for c in t["cases"]
                  if c["status"] in ("failure", "error", "skipped")]  # fmt: skip
        lines.append("")
    k = _load(out / "kernels.json")
    if k:
        tol = k.get("tolerance", {}).get("atol", "the tests' tolerance")
        lines += [
            f"## Kernels vs loop ({k.get('geometry')}, {k.get('images')} images x "
            f"{k.get('texts')} texts, C = {k.get('embed_size')}, best of {k.get('repeats')})"
            + _partial(k),
            "",
            f"Times in ms; `sims_equal`: head similarities within atol = rtol = "
            f"{tol} of the loop's.",
            "",
        ]
        lines += _md_table(
            k["rows"],
            ["impl", "topk_ms", "hrpa_sparse_ms", "hrpa_dense_ms", "head_eval_ms",
             "head_eval_speedup_vs_loop", "head_eval_max_abs_diff", "hrpa_dense_max_abs_diff",
             "sims_equal", "head_eval_warmup_s", "error"],
        )  # fmt: skip
        lines += [f"- `{i}` skipped: {why}" for i, why in k.get("skipped", {}).items()] + [""]
    t = _load(out / "train.json")
    if t:
        lines += [f"## Training step: {t.get('profile')}, {t.get('precision')}" + _partial(t), ""]
        lines += _md_table(
            t["rows"],
            ["preset", "alignment", "batch", "image_size", "params_m", "uses_dense",
             "dense_tokens_max", "step_ms_median", "step_ms_min", "step_ms_max", "peak_mem_mb",
             "first_loss", "first_loss_rel_diff", "last_loss", "error"],
        )  # fmt: skip
        lines.append("")
    e = _load(out / "eval.json")
    if e:
        lines += [
            f"## Evaluation ({e.get('preset', 'code')} head, C = {e.get('embed_size')}, "
            f"caption lengths from {e.get('caption_lengths')})" + _partial(e),
            "",
        ]
        lines += _md_table(
            e["rows"],
            [
                "layout",
                "images",
                "texts",
                "seconds",
                "pairs_per_s",
                "peak_mem_mb",
                "max_abs_diff_vs_blocks",
                "sims_equal",
                "error",
            ],
        )
        lines.append("")
    errors = []
    for step in STEP_NAMES:
        data = _load(out / f"{step}.json", errors_too=True)
        if data and data.get("error"):
            errors.append(f"- {step}: {data['error']}")
    if errors:
        lines += ["## Errors", "", *errors, ""]
    report = out / "bench-report" / "latency.md"
    if report.is_file():
        lines += ["## Latency report", "", "`seps-bench bench --report`: bench-report/latency.md"]
        lines.append("")
    text = "\n".join(lines)
    (out / "summary.md").write_text(text)
    return text


def _partial(data: dict[str, Any]) -> str:
    return " (PARTIAL: the step stopped before its end)" if data.get("partial") else ""


def _load(path: Path, errors_too: bool = False) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data if errors_too or "error" not in data else None
