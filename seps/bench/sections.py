"""The measurements of the latency report, one function per section.

- :func:`goal_section`: the speed-up goals of the code preset, batched vs loop: the
  evaluation interleaves the loop's text shards with whole batched calls
  (:func:`seps.bench.timing.measure_interleaved`), the training steps alternate
  (:func:`seps.bench.timing.measure_alternating`);
- :func:`full_eval_section`: a Flickr30K-size evaluation, timed or extrapolated;
- :func:`presets_section`: each preset and single-difference variant
  (:func:`seps.bench.workloads.variants`), batched;
- :func:`flop_profile_section`: FLOPs per pair of each preset by stage, beside the
  SPEC.md minimum (:mod:`seps.bench.flops`);
- :func:`stage_time_section`: where the time of the goal's batched evaluation goes,
  by stage (:mod:`seps.bench.stages`), beside its FLOPs, and each goal's product
  floor (:mod:`seps.bench.floor`);
- :func:`micro_section`: TopK, HRPA and the whole head per implementation and geometry.

Each returns plain data that :mod:`seps.bench.latency` renders; :func:`versions` and
:func:`device_info` describe the machine for the report's header.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from ..core.config import SEPSConfig
from ..core.head import SEPSHead
from ..core.kernels import unavailable_reason
from .cases import eval_fn, hrpa_fn, topk_fn, train_fn
from .floor import product_floor
from .flops import PER_IMAGE_STAGES, STAGES, pair_flops, spec_min_flops, stage_flops
from .settings import BenchSettings
from .stages import stage_seconds
from .timing import (
    measure,
    measure_alternating,
    measure_interleaved,
    round_ratios,
    train_fits,
    train_peak_rss_mb,
)
from .workloads import bench_config, make_head, make_inputs, variants


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("triton", "numpy"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = "not installed"
    return out


def device_info(device: str) -> str:
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU {cpu}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"


def count_flops(head: SEPSHead, inputs: list[Tensor]) -> int:
    """FLOPs of one evaluation forward pass (``torch.utils.flop_counter``)."""
    head.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        head(*inputs)
    return int(counter.get_total_flops())


#: Images of the FLOP counts: the per-pair stages do not depend on it (per-image work
#: is counted apart), so two keep the count cheap.
FLOP_IMAGES = 2


#: The dense-caption layouts of the FLOP counts: name -> texts sharing one dense caption.
FLOP_LAYOUTS: dict[str, int] = {"distinct": 1, "shared5": 5}


def pair_flop_counts(cfg: SEPSConfig, s: BenchSettings) -> dict[str, dict[str, float]]:
    """Per layout (:data:`FLOP_LAYOUTS`): the head's FLOPs per pair by stage
    (:func:`seps.bench.flops.pair_flops`) and ``spec_min``
    (:func:`seps.bench.flops.spec_min_flops`), on ``FLOP_IMAGES`` images x
    ``s.eval_texts`` texts with real caption lengths (the goal's text count, so that
    the chunks and their padding are the evaluation's)."""
    head = make_head(cfg, "batched", s.device)
    out = {}
    for layout, share in FLOP_LAYOUTS.items():
        inputs = make_inputs(
            "vit224",
            FLOP_IMAGES,
            s.eval_texts,
            embed_size=s.embed_size,
            device=s.device,
            dense_repeat=share,
        )
        counts = pair_flops(head, inputs)
        counts["spec_min"] = spec_min_flops(
            cfg,
            has_cls=True,
            sparse_words=inputs[2].float().mean().item(),
            dense_words=inputs[4].float().mean().item(),
            dense_share=share,
        )
        out[layout] = counts
    return out


def flop_profile_section(s: BenchSettings, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Per-stage FLOP profile of the head (MFLOP per pair; the image stage per image)
    for each preset and layout, with the per-pair sum and the SPEC.md minimum."""
    cols: dict[str, dict[str, float]] = {}
    for preset in ("code", "paper", "laps"):
        counts = pair_flop_counts(bench_config(preset, "vit224", s.embed_size), s)
        for layout, c in counts.items():
            cols[f"{preset} {layout}"] = c
            log(f"flops {preset} {layout}: {c['per_pair'] / 1e6:.2f} MFLOP/pair")
    rows = [
        {"stage": f"{stage} (per image)"} | {k: c["per_image"] / 1e6 for k, c in cols.items()}
        for stage in PER_IMAGE_STAGES
    ]
    for stage in [*STAGES[len(PER_IMAGE_STAGES) :], "per_pair", "spec_min"]:
        label = {"per_pair": "per pair, all stages", "spec_min": "SPEC.md minimum"}.get(
            stage, stage
        )
        rows.append({"stage": label} | {k: c[stage] / 1e6 for k, c in cols.items()})
    return rows


def goal_lengths(s: BenchSettings) -> str:
    """The goal's caption lengths (:func:`seps.bench.workloads.make_inputs`)."""
    return "fixed:8,24" if s.quick else "fixed:20,120"


def goal_inputs(s: BenchSettings, dense_repeat: int) -> list[Tensor]:
    """The goal's evaluation inputs: ``eval_images x eval_texts`` at the goal's caption
    lengths, each dense caption shared by ``dense_repeat`` texts (1: distinct)."""
    return make_inputs(
        "vit224",
        s.eval_images,
        s.eval_texts,
        embed_size=s.embed_size,
        device=s.device,
        lengths=goal_lengths(s),
        dense_repeat=dense_repeat,
    )


def goal_train_inputs(s: BenchSettings) -> list[Tensor]:
    """The goal's training inputs: ``B x B`` pairs at ViT-224 (``B`` = 64, 4 when quick)."""
    b = goal_train_batch(s)
    return make_inputs("vit224", b, b, embed_size=s.embed_size, device=s.device)


def goal_train_batch(s: BenchSettings) -> int:
    """The goal's training batch ``B`` (images and texts alike)."""
    return 4 if s.quick else 64


def stage_time_section(s: BenchSettings, log: Callable[[str], None]) -> dict[str, Any]:
    """Where the time goes: the code preset's batched evaluation at the goal's geometry
    with a distinct dense caption per text (``eval_images x eval_texts``, the goal's
    caption lengths), timed by stage (:func:`seps.bench.stages.stage_seconds`,
    exclusive time, median of ``repeats``) and counted by stage
    (:func:`seps.bench.flops.stage_flops`) on the same inputs.

    Returns ``images``, ``texts``, ``lengths`` and ``rows``: per stage of
    :data:`STAGES` and a ``total`` row, ``ms`` per call, ``time_share`` (of the
    total), ``mflop_per_pair`` (the call's FLOPs of the stage over its pairs; the
    image stage amortised over the texts), ``flop_share`` and ``gflop_s`` (FLOPs of
    the stage over its time; ``None`` where the stage counts no FLOPs)."""
    cfg = bench_config("code", "vit224", s.embed_size)
    lengths = goal_lengths(s)
    inputs = goal_inputs(s, 1)
    head = make_head(cfg, "batched", s.device)
    seconds = stage_seconds(head, inputs, repeats=s.repeats)
    counts = stage_flops(head, inputs)
    pairs = s.eval_images * s.eval_texts
    total_flops = sum(counts.values())
    rows = []
    for stage in [*STAGES, "total"]:
        sec = seconds[stage]
        flops = total_flops if stage == "total" else counts[stage]
        rows.append(
            {
                "stage": stage,
                "ms": sec * 1e3,
                "time_share": sec / seconds["total"],
                "mflop_per_pair": flops / pairs / 1e6,
                "flop_share": flops / total_flops if total_flops else 0.0,
                "gflop_s": flops / sec / 1e9 if flops > 0 and sec > 0 else None,
            }
        )
        log(f"stage {stage}: {sec * 1e3:.2f} ms, {flops / pairs / 1e6:.3f} MFLOP/pair")
    return {
        "images": s.eval_images,
        "texts": s.eval_texts,
        "lengths": lengths,
        "rows": rows,
        "gemm_gflop_s": gemm_rate(s.device, s.repeats),
        "floors": goal_floors(s, cfg),
    }


def goal_floors(s: BenchSettings, cfg: SEPSConfig) -> dict[str, dict[str, Any]]:
    """The product floor (:func:`seps.bench.floor.product_floor`) of each goal's batched
    call: the evaluation with distinct (``eval_repeat1``) and shared
    (``eval_repeat5``) dense captions, and the training step (``train``, the goal's
    batch). Each entry adds ``seconds_measured`` (one plain call after a warm-up: a
    reference on the same minutes of load, not the goal's timing)."""
    fns = {
        f"eval_repeat{r}": eval_fn(make_head(cfg, "batched", s.device), goal_inputs(s, r))
        for r in (1, 5)
    }
    fns["train"] = train_fn(make_head(cfg, "batched", s.device), goal_train_inputs(s))
    out = {}
    for key, fn in fns.items():
        floor = product_floor(fn, s.device, s.repeats)
        floor["seconds_measured"] = measure(fn, s.device, repeats=1)["seconds"]
        out[key] = floor
    return out


def gemm_rate(device: str, repeats: int, n: int = 512) -> float:
    """GFLOP/s of one ``n x n`` by ``n x n`` float32 product on ``device`` with the
    current threads (best of ``repeats`` timings of 20 products, after one warm-up):
    the reference for the stage rates, since a product this size runs near the BLAS
    peak while the head's products are small and many."""
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)

    def run() -> None:
        for _ in range(20):
            torch.mm(a, b)

    t = measure(run, device, repeats=max(repeats, 1))["seconds"]
    return 20 * 2 * n**3 / t / 1e9


def goal_section(s: BenchSettings, log: Callable[[str], None]) -> dict[str, Any]:
    """Code preset: evaluation at eval_images x eval_texts (sparse 20 / dense 120 words),
    batched vs loop, with distinct and with repeated (official) dense captions; and the
    training step at B = 64, batched vs loop. The evaluation interleaves the loop's
    ``eval_parts`` text shards with whole batched calls (:func:`measure_interleaved`),
    the training steps alternate (:func:`measure_alternating`); ``repeats`` rounds."""
    cfg = bench_config("code", "vit224", s.embed_size)
    out: dict[str, Any] = {"rounds": s.repeats}
    pairs = s.eval_images * s.eval_texts
    for repeat in (1, 5):
        inputs = goal_inputs(s, repeat)
        img, *texts = inputs
        loop_head = make_head(cfg, "loop", s.device)
        shard = math.ceil(s.eval_texts / s.eval_parts)
        parts = [
            eval_fn(loop_head, [img, *(t[t0 : t0 + shard] for t in texts)])
            for t0 in range(0, s.eval_texts, shard)
        ]
        batched = eval_fn(make_head(cfg, "batched", s.device), inputs)
        batched()  # warm-up; the loop has nothing to warm up
        res = measure_interleaved(parts, batched, s.device, s.repeats)
        loop, fast = res["slow"], res["fast"]
        for impl, r in (("loop", loop), ("batched", fast)):
            log(f"eval dense_repeat={repeat} {impl}: {pairs / r['seconds']:.0f} pairs/s")
        loop_out = torch.cat(loop["out"], dim=1).float().cpu()
        batched_out = fast["out"].float().cpu()
        out[f"eval_repeat{repeat}"] = {
            "loop": pairs / loop["seconds"],
            "batched": pairs / fast["seconds"],
            "ratio": loop["seconds"] / fast["seconds"],
            "round_ratios": round_ratios(loop, fast),
            "max_abs_diff": (loop_out - batched_out).abs().max().item(),
        }
    b = goal_train_batch(s)
    inputs = goal_train_inputs(s)
    fns = {impl: train_fn(make_head(cfg, impl, s.device), inputs) for impl in ("loop", "batched")}
    train = measure_alternating(fns, s.device, s.repeats, warmup=("loop", "batched"))
    for impl in fns:
        if not s.device.startswith("cuda") and s.fresh_process_peak:
            train[impl]["peak_mb"] = train_peak_rss_mb("code", "vit224", impl, b, s.embed_size)
        log(
            f"train B={b} {impl}: {train[impl]['seconds'] * 1e3:.0f} ms, "
            f"peak {train[impl]['peak_mb']:.0f} MB"
        )
    out["train"] = {
        "batch": b,
        **train,
        "round_ratios": round_ratios(train["loop"], train["batched"]),
    }
    return out


def full_eval_section(s: BenchSettings, goal: dict[str, Any], log: Callable[[str], None]) -> dict:
    """Flickr30K-size evaluation of the code preset (``s.full_eval``: 1,000 images x
    5,000 texts, real caption lengths, dense captions shared by 5 as in the official
    test loader), batched, in shards of 100 images like the evaluator.

    Timed on CUDA and in quick mode. On the CPU a timed run would add minutes to the
    report, so the time is extrapolated from the goal's measured throughput and marked
    as such.
    """
    images, texts = s.full_eval
    pairs = images * texts
    if not (s.quick or s.device.startswith("cuda")):
        est = pairs / goal["eval_repeat5"]["batched"]
        log(f"eval {images}x{texts}: about {est:.0f} s (extrapolated)")
        return {"images": images, "texts": texts, "seconds": est, "measured": False}
    cfg = bench_config("code", "vit224", s.embed_size)
    head = make_head(cfg, "batched", s.device).eval()
    img, *text_inputs = make_inputs(
        "vit224", images, texts, embed_size=s.embed_size, device=s.device, dense_repeat=5
    )
    shard = 100

    def run() -> None:
        with torch.no_grad():
            for v0 in range(0, images, shard):
                head(img[v0 : v0 + shard], *text_inputs)

    with torch.no_grad():
        head(img[:1], *(t[:10] for t in text_inputs))  # warm-up (CUDA context, kernels)
    m = measure(run, s.device, repeats=1, warmup=False)
    log(f"eval {images}x{texts}: {m['seconds']:.1f} s")
    return {"images": images, "texts": texts, "seconds": m["seconds"], "measured": True}


def presets_section(s: BenchSettings, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each preset and each single-difference variant (:func:`variants`), batched
    implementation."""
    rows = []
    configs: list[tuple[str, SEPSConfig]] = [
        (p, bench_config(p, "vit224", s.embed_size)) for p in ("code", "paper", "laps")
    ]
    switches = variants()
    configs += [(n, bench_config("code", "vit224", s.embed_size, **o)) for n, o in switches.items()]
    b_v, b_t = (2, 6) if s.quick else (32, 160)
    b_train = goal_train_batch(s)
    for name, cfg in configs:
        head = make_head(cfg, "batched", s.device)
        ev_in = make_inputs(
            "vit224", b_v, b_t, embed_size=s.embed_size, device=s.device, dense_repeat=5
        )
        ev = measure(eval_fn(head, ev_in), s.device, s.repeats)
        tr_in = goal_train_inputs(s)
        tr = measure(train_fn(head, tr_in), s.device, s.repeats)
        if not s.device.startswith("cuda") and s.fresh_process_peak:
            preset, over = (
                (name, {}) if name in ("code", "paper", "laps") else ("code", switches[name])
            )
            tr["peak_mb"] = train_peak_rss_mb(
                preset, "vit224", "batched", b_train, s.embed_size, over
            )
        flops = pair_flop_counts(cfg, s)
        rows.append(
            {
                "config": name,
                "eval_pairs_per_s": b_v * b_t / ev["seconds"],
                "train_ms": tr["seconds"] * 1e3,
                "train_peak_mb": tr["peak_mb"],
                "params": sum(p.numel() for p in head.parameters()),
                "mflop_per_pair": flops["distinct"]["per_pair"] / 1e6,
                "spec_min_mflop": flops["distinct"]["spec_min"] / 1e6,
                "mflop_per_pair_shared5": flops["shared5"]["per_pair"] / 1e6,
                "spec_min_shared5": flops["shared5"]["spec_min"] / 1e6,
            }
        )
        log(
            f"preset {name}: {rows[-1]['eval_pairs_per_s']:.0f} pairs/s, "
            f"{tr['seconds'] * 1e3:.0f} ms/step"
        )
    return rows


def micro_section(s: BenchSettings, log: Callable[[str], None]) -> dict[str, Any]:
    """TopK, HRPA and the whole head per implementation and geometry."""
    rows = []
    skipped = dict(s.not_run)
    for impl in s.not_run:
        log(f"skip {impl}: {s.not_run[impl]}")
    for impl in s.impls:
        reason = unavailable_reason(impl, s.device)
        if reason is not None:
            skipped[impl] = reason
            log(f"skip {impl}: {reason}")
    impls = [i for i in s.impls if i not in skipped]
    for geo in s.geometries:
        cfg = bench_config("code", geo, s.embed_size)
        inputs = make_inputs(
            geo,
            s.micro_images,
            s.micro_texts,
            embed_size=s.embed_size,
            device=s.device,
            dense_repeat=5,
        )
        pairs = s.micro_images * s.micro_texts
        for impl in impls:
            head = make_head(cfg, impl, s.device)
            reps = 1 if impl == "loop" else s.repeats
            row: dict[str, Any] = {"geometry": geo, "impl": impl}
            row["topk_ms"] = measure(topk_fn(head, inputs, impl), s.device, reps)["seconds"] * 1e3
            row["hrpa_sparse_ms"] = (
                measure(hrpa_fn(head, inputs, impl), s.device, reps)["seconds"] * 1e3
            )
            row["hrpa_dense_ms"] = (
                measure(hrpa_fn(head, inputs, impl, "dense"), s.device, reps)["seconds"] * 1e3
            )
            row["head_pairs_per_s"] = (
                pairs / measure(eval_fn(head, inputs), s.device, reps)["seconds"]
            )
            for b in s.train_batches:
                if not train_fits(impl, geo, b, s.embed_size, s.device):
                    row[f"train{b}_ms"] = float("nan")  # skipped: would not fit in memory
                    skipped.setdefault(f"{impl} train B={b} {geo}", "estimated memory > 50% of RAM")
                    continue
                tin = make_inputs(geo, b, b, embed_size=s.embed_size, device=s.device)
                row[f"train{b}_ms"] = measure(train_fn(head, tin), s.device, reps)["seconds"] * 1e3
            rows.append(row)
            log(f"micro {geo} {impl}: {row}")
    return {"rows": rows, "skipped": skipped, "pairs": pairs if s.geometries else 0}
