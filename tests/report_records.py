"""Hand-written run records for the report tests (tests/test_report*.py and the modules
that read reports: chance level, text-blind, grid plots, machine load, versions).

No record here was trained: each is a JSON file with the fields of ``seps.runs.runner.execute``
and metrics chosen so that means, confidence intervals and paired differences can be
computed by hand (the table ``K`` below). The fixture ``env`` (tests/conftest.py) writes
them into a results folder.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from seps.runs.runner import SCHEMA
from seps.versioning.version import VERSION_KEY, code_version

REPO = Path(__file__).resolve().parents[1]
#: The six recalls of every record are BASE + k, so rsum = 370 + 6k.
BASE = [50.0, 70.0, 80.0, 40.0, 60.0, 70.0]
RECALL_KEYS = ["i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"]
#: (run, seed) -> k. base: rsum 370, 376, 364. flip-hrpa: paired Δ 12, 15, 12 (clear
#: effect). no-act: paired Δ 6, -6, -3 (noise). lonely: one seed, Δ 3.
K = {
    ("base", 0): 0.0,
    ("base", 1): 1.0,
    ("base", 2): -1.0,
    ("flip-hrpa", 0): 2.0,
    ("flip-hrpa", 1): 3.5,
    ("flip-hrpa", 2): 1.0,
    ("no-act", 0): 1.0,
    ("no-act", 1): 0.0,
    ("no-act", 2): -1.5,
    ("lonely", 0): 0.5,
}
T975_DF2 = 4.302652729911275  # Student t 0.975 quantile, 2 degrees of freedom
#: Paired t-test p-values of flip-hrpa (t = 13 / 1) and no-act (t = 1 / sqrt(13)), df = 2:
#: p = 1 - t / sqrt(t^2 + 2).
P_FLIP = 1 - 13 / math.sqrt(171)
P_NOACT = 1 - (1 / math.sqrt(13)) / math.sqrt(1 / 13 + 2)

MATRIX_YAML = {
    "name": "mini",
    "description": "A five-variant test matrix.",
    "baseline": "base",
    "runs": [
        {"id": "base", "preset": "code"},
        {"id": "flip-hrpa", "preset": "code", "set": {"hrpa": "mean_topk"}, "difference": "hrpa"},
        {"id": "no-act", "preset": "code", "set": {"similarity_activation": "none"}},
        {"id": "lonely", "preset": "code", "set": {"decision": "gumbel_topk"}},
        {"id": "broken", "preset": "code", "set": {"aggregation": "dual"}},
    ],
}


def _history(seed: int, k: float) -> list[dict[str, Any]]:
    return [
        {
            "epoch": e,
            "loss": 1.0 - 0.1 * e + 0.01 * seed + 0.001 * k,
            "align": 0.9,
            "ratio": 0.25,
            "grad_norm": 1.5,
            "keep_ratio": {"sparse": 0.5, "dense": 0.5},
            "steps": 6,
            "lr": [0.0002],
            "seconds": 1.0,
            "train_pairs_per_second": 100.0,
            "val": {"rsum": 100.0 + 10.0 * e + seed + k},
        }
        for e in range(2)
    ]


def _record(
    run_id: str,
    seed: int,
    *,
    profile: str = "quick",
    status: str = "done",
    error: str | None = None,
    started: float = 1000.0,
    key: str = "k0",
    seconds: float = 12.0,
    k: float | None = None,
) -> dict[str, Any]:
    run = next(r for r in MATRIX_YAML["runs"] if r["id"] == run_id)
    rec: dict[str, Any] = {
        "schema": SCHEMA,
        "matrix": "mini",
        "profile": profile,
        "run_id": run_id,
        "describe": ", ".join(f"{a}={b}" for a, b in run.get("set", {}).items()) or "(preset)",
        "preset": run["preset"],
        "difference": run.get("difference"),
        "paper_row": None,
        "seed": seed,
        "key": key,
        "train_key": key,
        "head_config": {"embed_size": 64},
        "train_config": {
            "dataset": "synthetic",
            "synth_images": 300,
            "eval_split": "test",
            "epochs": 2,
            "batch_size": 16,
            "max_steps_per_epoch": 6,
            "backbone": "tiny-vit",
            "text_backbone": "tiny-bert",
            "dense_source": "query",
            "protocol": "finetune",
            "seed": seed,
        },
        "started": started,
        "status": status,
        "error": error,
        "traceback": None if status == "done" else "Traceback ...",
        "environment": {"torch": "2.14.1", "device_name": "x86_64", "git_commit": "abc123" * 7},
        "wall_seconds": seconds + 1.0,
    }
    if status == "done":
        kk = K[(run_id, seed)] if k is None else k
        recalls = dict(zip(RECALL_KEYS, [b + kk for b in BASE], strict=True))
        rec.update(
            metrics={**recalls, "rsum": sum(recalls.values()), "i2t_medr": 1.0, "t2i_medr": 2.0},
            dense_source="query",
            protocol="finetune",
            history=_history(seed, kk),
            nonfinite_steps=0,
            train_seconds=seconds,
            eval_seconds=seconds / 10,
            eval_pairs_per_second=1000.0 / seconds,
            train_pairs_per_second=50.0 / seconds,
            parameters=1_234_567,
            trainable_parameters=1_000_000,
            peak_memory_bytes=2**30,
            eval_images=30,
        )
    return rec


def _write(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True))


def _store(results: Path, seconds: float = 12.0) -> None:
    """The records of ``mini`` plus files the loader must ignore."""
    d = results / "mini"
    for (run_id, seed), _ in K.items():
        _write(d / f"{run_id}-k0-s{seed}.json", _record(run_id, seed, seconds=seconds))
    _write(
        d / "broken-k0-s0.json",
        _record("broken", 0, status="failed", error="RuntimeError: out of memory\nmore"),
    )
    # Superseded: an older record of base/seed 0 under another config key.
    _write(d / "base-old-s0.json", _record("base", 0, key="old", started=1.0, k=40.0))
    # Not records: another schema, a temp file, and the training work folder.
    _write(d / "notes.json", {"hello": "world"})
    (d / ".base-k0-s1.json.123.tmp").write_text("{partial")
    _write(results / "_work" / "abc-s0" / "result.json", _record("base", 0))


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def _table_after(text: str, marker: str) -> list[list[str]]:
    """The cells of the first markdown table after ``marker``."""
    lines = text[text.index(marker) :].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _stamp_current(results: Path) -> None:
    """Stamp every record of ``mini`` with this code's version: the command refuses a
    page of records made by other code (tests/test_report_versions.py)."""
    for f in sorted((results / "mini").glob("*.json")):
        rec = json.loads(f.read_text())
        if rec.get("schema") == SCHEMA:
            _write(f, {**rec, VERSION_KEY: code_version()})


def _add_run(env: dict[str, Path], run: dict[str, Any]) -> None:
    doc = {**MATRIX_YAML, "runs": [*MATRIX_YAML["runs"], run]}
    (env["root"] / "matrices" / "mini.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _copy_of_base(env: dict[str, Path], run_id: str, head: dict[str, Any], seed: int) -> None:
    rec = _record("base", seed)
    rec.update(run_id=run_id, describe=run_id, head_config=head)
    _write(env["results"] / "mini" / f"{run_id}-k0-s{seed}.json", rec)
