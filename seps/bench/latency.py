"""The latency report: ``reports/latency.md`` and ``reports/latency.png``.

:func:`run_report` measures every section (:mod:`seps.bench.sections`) in one run,
renders the markdown (:func:`render_report`) and the speed-up plot (:func:`plot`) and
writes both atomically; with ``json_path`` also every number of the report as JSON
(:func:`report_json`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tabulate import tabulate

from ..io.store import atomic_write_bytes, atomic_write_text
from ..runtime.float_path import requested
from .gpu_figures import gpu_lines
from .sections import (
    FLOP_IMAGES,
    device_info,
    flop_profile_section,
    full_eval_section,
    goal_section,
    micro_section,
    presets_section,
    stage_time_section,
    versions,
)
from .settings import BenchSettings
from .workloads import caption_lengths

#: The speed-up goals against the official loop (issue 45): evaluation with a distinct
#: dense caption per text, evaluation in the official layout (5 texts share one), and
#: the training step at B = 64.
GOALS = {"eval_repeat1": 10.0, "eval_repeat5": 20.0, "train": 5.0}

#: The header's provenance line, and its form when the GPU check's figures are appended.
MEASURED_HERE = "every number below was measured in this run"
MEASURED_HERE_BUT_GPU = (
    'every number below was measured in this run, except the section "On a GPU" '
    "(read from the GPU check's files)"
)


def _table(rows: list[dict[str, Any]], floatfmt: str = ".4g") -> str:
    if not rows:
        return "(none)"
    return tabulate(
        [list(r.values()) for r in rows],
        headers=list(rows[0]),
        tablefmt="github",
        floatfmt=floatfmt,
    )


def _spread(ratios: list[float]) -> str:
    return f"{min(ratios):.2f}-{max(ratios):.2f}x" if len(ratios) > 1 else f"{ratios[0]:.2f}x"


def render_report(
    s: BenchSettings,
    goal: dict,
    presets: list,
    micro: dict,
    meta: dict,
    flops: list | None = None,
    stage_time: dict | None = None,
    gpu_section: bool = False,
) -> str:
    """The report's markdown; ``gpu_section``: the GPU check's figures will follow it
    (the header then says they were not measured here)."""
    lines = ["# Latency report: HRPA and TopK kernels, whole head", ""]
    lines += [
        f"- device: {meta['device']}",
        f"- versions: {json.dumps(meta['versions'])}",
        f"- command: `{meta['command']}`",
        f"- date: {meta['date']}",
        f"- caption lengths: {meta['lengths_source']}",
        f"- machine load: {meta['load']}",
        f"- CPU float path: {meta.get('float_path', 'not recorded')}",
        f"- embed size C = {s.embed_size}; "
        + (MEASURED_HERE_BUT_GPU if gpu_section else MEASURED_HERE)
        + (" (QUICK: tiny sizes, numbers are not meaningful)" if s.quick else ""),
    ]
    if not (s.fresh_process_peak or s.device.startswith("cuda")):
        lines.append(
            "- peak memory: in-process growth of the peak RSS, not one fresh process per "
            "training step as in the full report; it reads low once an earlier call grew the heap"
        )
    lines.append("")
    tr = goal["train"]
    lines += ["## Goals (code preset, ViT-224 + [CLS], batched vs loop)", ""]
    lines += [
        f"Evaluation, {s.eval_images} images x {s.eval_texts} texts, "
        + ("sparse 8 / dense 24 words:" if s.quick else "sparse 20 / dense 120 words:"),
        "",
        "| dense captions | loop pairs/s | batched pairs/s | speed-up | max abs diff | goal |",
        "|---|---|---|---|---|---|",
    ]
    for key, label in (
        ("eval_repeat1", "distinct per text"),
        ("eval_repeat5", "5 texts share one (official loader)"),
    ):
        ev, want = goal[key], GOALS[key]
        ok = "met" if ev["ratio"] >= want else f"NOT met ({ev['ratio'] / want:.2f} of it)"
        lines.append(
            f"| {label} | {ev['loop']:.0f} | {ev['batched']:.0f} | {ev['ratio']:.2f}x "
            f"({_spread(ev['round_ratios'])}) | {ev['max_abs_diff']:.2e} | {want:g}x: {ok} |"
        )
    lines += [
        "",
        f"Interleaved timing ({goal['rounds']} rounds): in each round the loop evaluates "
        f"the pairs in {s.eval_parts} text shards (it loops over texts, so its time adds "
        "up over shards), each shard followed by one whole batched call; the loop's "
        "time is the sum of its shards and the batched time the mean of its calls, so "
        "both are measured over the same minutes of machine load. Throughputs and "
        "speed-ups are means over the rounds; in parentheses the speed-up of each round.",
    ]
    lt, bt = tr["loop"], tr["batched"]
    sp = lt["seconds"] / bt["seconds"]
    fe = goal.get("full_eval")
    if fe is not None:
        how = "measured" if fe["measured"] else "extrapolated from the batched throughput above"
        lines += [
            "",
            f"Flickr30K-size evaluation ({fe['images']} images x {fe['texts']} texts, real "
            f"caption lengths, batched): {fe['seconds']:.1f} s ({fe['seconds'] / 60:.1f} min, "
            f"{how}).",
        ]
    lines += [
        "",
        f"Training step, B = {tr['batch']} pairs, forward + backward:",
        "",
        "| impl | ms / step | peak memory (MB) |",
        "|---|---|---|",
        f"| loop | {lt['seconds'] * 1e3:.0f} | {lt['peak_mb']:.0f} |",
        f"| batched | {bt['seconds'] * 1e3:.0f} | {bt['peak_mb']:.0f} |",
        "",
        f"Speed-up {sp:.2f}x (per round {_spread(tr['round_ratios'])}; goal "
        f"{GOALS['train']:g}x: {'met' if sp >= GOALS['train'] else 'NOT met'}); peak memory "
        f"{'not higher' if bt['peak_mb'] <= lt['peak_mb'] * 1.05 else 'HIGHER'} than loop.",
        "",
    ]
    lines += [
        "## Presets and single-difference variants (batched)",
        "",
        "Evaluation shard 32 x 160 (dense captions shared by 5 texts), training B = 64; "
        f"MFLOP per pair from `torch.utils.flop_counter` on a {FLOP_IMAGES} x "
        f"{s.eval_texts} evaluation pass (real caption lengths), per-image work left out, "
        "with a distinct dense caption per text and with dense captions shared by 5 "
        "texts (`shared5`), beside the products SPEC.md requires per pair "
        "(`spec_min`, `seps.bench.flops.spec_min_flops`).",
        "",
        _table(presets),
        "",
    ]
    if flops:
        lines += [
            "## FLOPs per pair by stage",
            "",
            f"MFLOP per pair of each stage of the batched head ({FLOP_IMAGES} images x "
            f"{s.eval_texts} texts, real caption lengths; the image stage in MFLOP per "
            "image). Counted, not timed: the same on any machine.",
            "",
            _table(flops),
            "",
        ]
    if stage_time:
        lines += _stage_time_lines(stage_time, goal["eval_repeat1"]["loop"])
        if stage_time.get("floors"):
            lines += _floor_lines(stage_time["floors"], goal, s)
    lines += [
        "## Micro-benchmarks",
        "",
        f"{s.micro_images} images x {s.micro_texts} texts per call (real caption lengths, "
        "dense captions shared by 5 texts); TopK on sparse scores; HRPA from given tokens "
        "against the sparse or the dense words; times in ms (lower is better), head in "
        "pairs/s (higher is better).",
        "",
    ]
    if micro["skipped"]:
        for impl, why in micro["skipped"].items():
            lines.append(f"- `{impl}` skipped: {why}")
        lines.append("")
    lines += [_table(micro["rows"]), ""]
    lines += ["### Speed-up against loop", "", _table(speedups(micro["rows"]), ".3g"), ""]
    return "\n".join(lines)


def _stage_time_lines(st: dict[str, Any], loop_pairs_s: float | None = None) -> list[str]:
    """The section "Where the time goes" (:func:`seps.bench.sections.stage_time_section`);
    ``loop_pairs_s``: the goal's loop throughput with distinct dense captions, to state
    the rate that the 10x goal asks of the whole call."""
    s, d = (int(v) for v in st["lengths"].removeprefix("fixed:").split(","))
    lines = [
        "## Where the time goes (code preset, distinct dense captions)",
        "",
        f"One batched evaluation call of the goal above ({st['images']} images x "
        f"{st['texts']} texts, sparse {s} / dense {d} words, a distinct dense caption per "
        "text), timed by stage (`seps.bench.stages.stage_seconds`, median of the rounds) "
        "beside its FLOPs by stage (the image stage's amortised over the call's pairs). "
        "Times are exclusive: a stage's time leaves out the stages nested in it (HRPA runs "
        "inside each alignment unit), and `other` is the rest of the call (loops over "
        "images and text chunks, concatenation, Python overhead); FLOPs count matrix "
        "products only, so elementwise work, top-K, maxima and gathers take time but no "
        "FLOPs.",
        "",
        "| stage | ms / call | time share | MFLOP / pair | FLOP share | GFLOP/s |",
        "|---|---|---|---|---|---|",
    ]
    for r in st["rows"]:
        rate = "-" if r["gflop_s"] is None else f"{r['gflop_s']:.3g}"
        lines.append(
            f"| {r['stage']} | {r['ms']:.4g} | {r['time_share']:.1%} | "
            f"{r['mflop_per_pair']:.4g} | {r['flop_share']:.1%} | {rate} |"
        )
    gemm = st.get("gemm_gflop_s")
    total = next(r for r in st["rows"] if r["stage"] == "total")
    if gemm:
        lines += [
            "",
            f"Reference: one 512 x 512 x 512 float32 product runs at {gemm:.3g} GFLOP/s on "
            f"this device and thread count; the whole call reaches "
            f"{total['gflop_s']:.3g} ({total['gflop_s'] / gemm:.0%} of it).",
        ]
        if loop_pairs_s:
            need = GOALS["eval_repeat1"] * loop_pairs_s * total["mflop_per_pair"] / 1e3
            lines.append(
                f"The {GOALS['eval_repeat1']:g}x goal asks for "
                f"{GOALS['eval_repeat1'] * loop_pairs_s:.0f} pairs/s, that is "
                f"{need:.3g} GFLOP/s over the whole call at these FLOPs per pair: "
                f"{need / gemm:.0%} of the reference product's rate."
            )
    return [*lines, ""]


def _floor_lines(floors: dict[str, dict[str, Any]], goal: dict, s: BenchSettings) -> list[str]:
    """The section "The product floor" (:func:`seps.bench.sections.goal_floors`): per
    goal, the time its target allows beside the time the call's matrix products take
    alone, each timed bare at its own shapes."""
    pairs = s.eval_images * s.eval_texts
    lines = [
        "## The product floor of each goal",
        "",
        "Every matrix product of the goal's batched call (backward included for the "
        "training step) is recorded and then timed bare, at its own shapes, on fresh "
        "contiguous operands (`seps.bench.floor.product_floor`); their sum is the time "
        "the call would take if nothing but its products took time. It is an optimistic "
        "bound for these products at these shapes, run one after another with this "
        "device's library: where the goal allows less time than the floor, the goal needs "
        "fewer FLOPs (the FLOP table above gives SPEC.md's minimum), the same FLOPs in "
        "fewer and larger products, or a faster product kernel at these shapes. The time "
        "a goal allows comes from the loop's timing above, minutes before the floor: read "
        "ratios near 1 with the machine's drift in mind. *Measured* is one plain call "
        "beside the floor, on the same minutes of load (the goal's own timing is above).",
        "",
        "| goal | target | allowed per call | products alone (floor) | products' GFLOP/s "
        "| measured | floor / allowed |",
        "|---|---|---|---|---|---|---|",
    ]
    labels = {
        "eval_repeat1": "eval, distinct dense captions",
        "eval_repeat5": "eval, official layout",
        "train": "training step",
    }
    for key, f in floors.items():
        if key == "train":
            allowed = goal["train"]["loop"]["seconds"] / GOALS[key]
        else:
            allowed = pairs / (GOALS[key] * goal[key]["loop"])
        rate = "-" if f["gflop_s"] is None else f"{f['gflop_s']:.3g}"
        lines.append(
            f"| {labels[key]} | {GOALS[key]:g}x | {allowed * 1e3:.4g} ms | "
            f"{f['seconds'] * 1e3:.4g} ms ({f['calls']} products, {f['distinct']} shapes) | "
            f"{rate} | {f['seconds_measured'] * 1e3:.4g} ms | {f['seconds'] / allowed:.2f} |"
        )
    return [*lines, ""]


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per geometry and implementation: loop time / implementation time."""
    base = {r["geometry"]: r for r in rows if r["impl"] == "loop"}
    out = []
    for r in rows:
        b = base.get(r["geometry"])
        if b is None:
            continue
        row: dict[str, Any] = {"geometry": r["geometry"], "impl": r["impl"]}
        for key, val in r.items():
            if key in ("geometry", "impl"):
                continue
            row[key] = val / b[key] if key == "head_pairs_per_s" else b[key] / val
        out.append(row)
    return out


def plot(micro: dict, goal: dict, path: Path | io.BytesIO) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # The loop's own groups are 1.0 by definition (the line at 1 shows it): left out.
    ups = [r for r in speedups(micro["rows"]) if r["impl"] != "loop"]
    keys = {
        "topk_ms": "top-K selection",
        "hrpa_sparse_ms": "HRPA, sparse",
        "hrpa_dense_ms": "HRPA, dense",
        "head_pairs_per_s": "whole head (pairs/s)",
    }
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), layout="constrained")
    ax = axes[0]
    labels = [f"{r['geometry']}\n{r['impl']}" for r in ups]
    width = 0.2
    for i, (key, name) in enumerate(keys.items()):
        ax.bar([j + i * width for j in range(len(ups))], [r[key] for r in ups], width, label=name)
    ax.set_xticks([j + 1.5 * width for j in range(len(ups))], labels, fontsize=7)
    ax.set_yscale("log")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel("speed-up vs loop (loop = 1)")
    # Below the axes: inside, it covered the tallest bars.
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncols=4)
    ax.set_title("micro-benchmarks")
    ax = axes[1]
    names = ["eval (distinct dense)", "eval (shared dense)", "train step"]
    tr = goal["train"]
    vals = [
        goal["eval_repeat1"]["ratio"],
        goal["eval_repeat5"]["ratio"],
        tr["loop"]["seconds"] / tr["batched"]["seconds"],
    ]
    ax.bar(names, vals, color=["C0", "C1", "C2"])
    wants = [GOALS[k] for k in ("eval_repeat1", "eval_repeat5", "train")]
    for j, want in enumerate(wants):  # each bar's own goal, as a dashed mark across it
        ax.hlines(want, j - 0.45, j + 0.45, colors="r", linestyles="--", lw=1.2)
    ax.plot([], [], "r--", lw=1.2, label="goal (10x, 20x, 5x)")
    ax.set_ylim(0, 1.1 * max(*vals, *wants))
    ax.set_ylabel("batched / loop")
    ax.legend(fontsize=7)
    ax.set_title("goals (code preset, ViT-224)")
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def float_path_line() -> str:
    """The float path in force and what it means for the numbers (seps.runtime.float_path)."""
    name = requested()
    if name == "native":
        return (
            "native (each library's own kernels; `seps-bench bench` runs natively unless "
            "SEPS_FLOAT_PATH is set; runs and records default to `portable`, whose MKL "
            "SSE2 GEMMs are slower)"
        )
    return f"{name} (SEPS_FLOAT_PATH; MKL on its SSE2 branch: GEMM-bound numbers are slower)"


def _load() -> str:
    try:
        return "/".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def report_json(
    s: BenchSettings,
    goal: dict,
    presets: list,
    micro: dict,
    meta: dict,
    flops: list | None = None,
    stage_time: dict | None = None,
) -> str:
    """The report's numbers as one JSON document: the settings, the run's metadata, the
    goal measurements, the preset rows, the FLOP profile, the time by stage
    (``stage_time``), the micro-benchmark rows and their speed-ups
    against loop (the same values the markdown rounds)."""
    doc = {
        "settings": dataclasses.asdict(s),
        "meta": meta,
        "goal": goal,
        "presets": presets,
        "flops": flops or [],
        "stage_time": stage_time or {},
        "micro": {**micro, "speedups": speedups(micro["rows"])},
    }
    return json.dumps(doc, indent=2, default=str) + "\n"


def run_report(
    s: BenchSettings,
    out_dir: Path,
    command_line: str,
    log: Callable[[str], None],
    json_path: Path | None = None,
) -> Path:
    load_start = _load()
    goal = goal_section(s, log)
    goal["full_eval"] = full_eval_section(s, goal, log)
    presets = presets_section(s, log)
    flops = flop_profile_section(s, log)
    stage_time = stage_time_section(s, log)
    micro = micro_section(s, log)
    meta = {
        "device": device_info(s.device),
        "versions": versions(),
        "command": command_line,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "lengths_source": caption_lengths("sparse", 1)[1],
        "float_path": float_path_line(),
        "load": f"{load_start} at the start, {_load()} at the end (1/5/15-min load averages; "
        "other processes on the machine slow every number)",
    }
    gpu = gpu_lines(out_dir / "gpu")  # the GPU check's committed figures, if any
    text = render_report(s, goal, presets, micro, meta, flops, stage_time, bool(gpu))
    md = out_dir / "latency.md"
    png = out_dir / "latency.png"
    buf = io.BytesIO()
    plot(micro, goal, buf)
    atomic_write_bytes(png, buf.getvalue())
    text += f"\n![speed-ups]({png.name})\n"
    if gpu:
        text += "\n" + "\n".join(gpu)
    atomic_write_text(md, text)
    if json_path is not None:
        atomic_write_text(
            Path(json_path), report_json(s, goal, presets, micro, meta, flops, stage_time)
        )
    return md
