"""Kernel micro-benchmarks and the latency report: ``seps-bench bench`` (issue 5).

Workloads (shared with ``benchmarks/``, the pytest-benchmark suites):

- geometries :data:`GEOMETRIES`: ViT-224 (196 patches + [CLS]), ViT-384 (576 +
  [CLS]), Swin-224 (49), Swin-384 (144); Swin uses rho = 0.8, aggr 0.6 (SPEC.md);
- caption lengths drawn from the real Flickr30K test captions in
  ``../shared/data/f30k/`` when present, else from the stored whitespace-word
  histogram ``seps/data/f30k_lengths.json`` (:func:`caption_lengths`);
- the kernels per implementation (:data:`seps.kernels.IMPLEMENTATIONS`): TopK (the
  selection: top-K mask, extra-token softmax and the extra token), HRPA (patch-word
  matrix, maxima, HRPA terms, from given alignment tokens) and the whole head, in
  evaluation (no gradient) and training (forward + backward).

Timing: wall clock after one warm-up call, best of ``repeats``; on CUDA with CUDA
events after warm-up. The evaluation goal instead interleaves the loop's text shards
with whole batched calls and compares means over the same minutes
(:func:`measure_interleaved`). Peak memory: CUDA max allocated during the call; on CPU the
peak RSS growth of one training step in a fresh process for the goal table
and the preset table (:func:`train_peak_rss_mb`); in-process numbers (``VmHWM``
reset through ``/proc/self/clear_refs``) read low once an earlier call grew the heap.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import os
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .cli import command
from .config import SEPSConfig, get_config
from .devices import check_device
from .head import SEPSHead
from .kernels import IMPLEMENTATIONS, unavailable_reason
from .store import atomic_write_bytes, atomic_write_text

#: name -> (spatial patches, has [CLS], sparse_ratio, aggr_ratio)
GEOMETRIES: dict[str, tuple[int, bool, float, float]] = {
    "vit224": (196, True, 0.5, 0.4),
    "vit384": (576, True, 0.5, 0.4),
    "swin224": (49, False, 0.8, 0.6),
    "swin384": (144, False, 0.8, 0.6),
}

#: The single-difference variants of the report: the code preset with one of the
#: seven documented differences (and the detached-selection finding) set to the
#: paper's value.
VARIANTS: dict[str, dict[str, Any]] = {
    "code+paper scoring": {"scoring": "paper"},
    "code+fused": {"dense_fusion": "fused"},
    "code+dual aggregation": {"aggregation": "dual"},
    "code+mean_topk HRPA": {"hrpa": "mean_topk"},
    "code+no activation": {"similarity_activation": "none"},
    "code+gumbel_topk": {"decision": "gumbel_topk"},
    "code+separate ratio loss": {"ratio_loss": "separate"},
    "code+attached selection": {"detach_selection": False},
}

_DATA_DIRS = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "f30k",
    Path("../shared/data/f30k"),
)
_HIST = Path(__file__).with_name("data") / "f30k_lengths.json"


# ---------------------------------------------------------------- workloads
def caption_lengths(kind: str, count: int, seed: int = 0) -> tuple[list[int], str]:
    """``count`` word counts of ``kind`` (``sparse``/``dense``) captions and their source.

    Drawn from the real Flickr30K test captions when ``../shared/data/f30k/`` exists
    (whitespace word counts), else from the stored histogram of the same counts.
    """
    rng = random.Random(seed)
    for d in _DATA_DIRS:
        name = "test_caps.txt" if kind == "sparse" else "f30k_test.jsonl"
        path = d / name
        if path.is_file():
            lines = [s for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]
            if kind == "dense":
                lines = [json.loads(s)["text"] for s in lines]
            pool = [len(s.split()) for s in lines]
            return [rng.choice(pool) for _ in range(count)], str(path)
    hist = json.loads(_HIST.read_text(encoding="utf-8"))[kind]
    values = [int(k) for k in hist]
    weights = [hist[k] for k in hist]
    return rng.choices(values, weights=weights, k=count), str(_HIST)


def bench_config(preset: str, geometry: str, embed_size: int = 512, **overrides: Any) -> SEPSConfig:
    n, _, rho, aggr = GEOMETRIES[geometry]
    return get_config(
        preset, embed_size=embed_size, num_patches=n, sparse_ratio=rho, aggr_ratio=aggr, **overrides
    )


def make_inputs(
    geometry: str,
    b_v: int,
    b_t: int,
    *,
    embed_size: int = 512,
    device: str = "cpu",
    seed: int = 0,
    lengths: str = "f30k",
    dense_repeat: int = 1,
) -> list[Tensor]:
    """``[img, cap, cap_lens, long_cap, long_lens]`` for ``b_v`` images and ``b_t`` texts.

    lengths: ``f30k`` (real caption lengths, padded to the batch maximum) or
    ``fixed:S,D`` (every caption S sparse / D dense words, e.g. ``fixed:20,120``).
    dense_repeat: consecutive texts sharing one dense caption (5 in the official
    test loader, SPEC.md "Inputs"; 1 = every text its own dense caption).
    """
    g = torch.Generator().manual_seed(seed)
    n, cls, _, _ = GEOMETRIES[geometry]
    img = torch.randn(b_v, n + int(cls), embed_size, generator=g)
    if lengths.startswith("fixed:"):
        s, d = (int(v) for v in lengths[6:].split(","))
        sl, dl = [s] * b_t, [d] * b_t
    else:
        sl = caption_lengths("sparse", b_t, seed)[0]
        dl = caption_lengths("dense", b_t, seed + 1)[0]
    n_dense = math.ceil(b_t / dense_repeat)
    dl = [dl[i // dense_repeat] for i in range(b_t)]  # one length per dense caption
    cap = torch.randn(b_t, max(sl), embed_size, generator=g)
    long_cap = torch.randn(n_dense, max(dl), embed_size, generator=g)
    long_cap = long_cap.repeat_interleave(dense_repeat, 0)[:b_t]
    out = [img, cap, torch.tensor(sl), long_cap, torch.tensor(dl)]
    return [t.to(device) for t in out]


def make_head(cfg: SEPSConfig, impl: str, device: str = "cpu", seed: int = 0) -> SEPSHead:
    """A head with seeded parameters (the same for every implementation)."""
    torch.manual_seed(seed)
    return SEPSHead(cfg, impl=impl).to(device)


# ------------------------------------------------------------------ timing
def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _rss_kb(field: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(
    fn: Callable[[], Any], device: str = "cpu", repeats: int = 3, warmup: bool = True
) -> dict[str, Any]:
    """Best time (s) of ``repeats`` calls after a warm-up, the peak memory (MB) and the
    last call's output (``out``)."""
    if warmup:
        fn()  # also compiles under impl="compiled"
    _sync(device)
    times = []
    peak = 0.0
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
            peak = max(peak, (torch.cuda.max_memory_allocated() - base) / 2**20)
        else:
            base = _rss_kb("VmRSS")
            # Reset the peak RSS (VmHWM) to the current RSS (Linux only).
            with contextlib.suppress(OSError):
                Path("/proc/self/clear_refs").write_text("5")
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
            peak = max(peak, (_rss_kb("VmHWM") - base) / 1024)
    return {"seconds": min(times), "peak_mb": peak, "out": out}


_PEAK_SCRIPT = """
import json, sys, torch
from seps import bench
preset, geometry, impl, b, c, threads, over = sys.argv[1:8]
torch.set_num_threads(int(threads))
head = bench.make_head(bench.bench_config(preset, geometry, int(c), **json.loads(over)), impl)
fn = bench.train_fn(head, bench.make_inputs(geometry, int(b), int(b), embed_size=int(c)))
base = bench._rss_kb("VmRSS")
fn()
print((bench._rss_kb("VmHWM") - base) / 1024)
"""


def train_peak_rss_mb(
    preset: str,
    geometry: str,
    impl: str,
    batch: int,
    embed_size: int,
    overrides: dict[str, Any] | None = None,
) -> float:
    """Peak RSS growth (MB) of one training step in a fresh process (CPU).

    In-process RSS is unreliable for this: the allocator keeps freed pages, so a run
    after a larger one shows no growth. A fresh interpreter starts from the same
    baseline for every implementation.
    """
    import subprocess
    import sys

    args = [preset, geometry, impl, str(batch), str(embed_size), str(torch.get_num_threads())]
    args.append(json.dumps(overrides or {}))
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, *args], capture_output=True, text=True, check=True
    )
    return float(proc.stdout.strip().splitlines()[-1])


def eval_fn(head: SEPSHead, inputs: list[Tensor]) -> Callable[[], Tensor]:
    head.eval()

    def run() -> Tensor:
        with torch.no_grad():
            return head(*inputs)  # type: ignore[return-value]

    return run


def train_fn(head: SEPSHead, inputs: list[Tensor]) -> Callable[[], None]:
    """Forward + backward of one training batch (pairs i <-> i; sum of sims as loss)."""
    head.train()
    img = inputs[0].clone().requires_grad_(True)

    def run() -> None:
        head.zero_grad(set_to_none=True)
        sims, masks = head(img, *inputs[1:])  # type: ignore[misc]
        loss = sims.diagonal().sum() - 0.01 * sims.sum() + sum(m.sum() for m in masks.values())
        loss.backward()

    return run


def topk_fn(head: SEPSHead, inputs: list[Tensor], impl: str) -> Callable[[], Any]:
    """The TopK kernel: scores -> top-K mask, extra-token weights and extra token."""
    from .config import keep_count
    from .head import has_cls_token
    from .kernels import get_kernel
    from .kernels.loop import _select

    img = inputs[0]
    x = img[:, 1:] if has_cls_token(img.shape[1]) else img
    b_v, n, _ = x.shape
    b_t = inputs[1].shape[0]
    g = torch.Generator().manual_seed(1)
    score = torch.randn(b_v, b_t, n, generator=g).to(x.device)
    k = keep_count(n, head.config.sparse_ratio)
    head.eval()
    if impl == "loop":

        def run_loop() -> Any:
            with torch.no_grad():
                return [_select(head, "sparse", x, score[:, t], ()) for t in range(b_t)]

        return run_loop
    ops = get_kernel(impl).ops

    def run() -> Any:
        with torch.no_grad():
            keep = ops.topk_mask(score, k)
            w = ops.extra_weights(score, 1.0 - keep)
            return keep, torch.bmm(w, x)

    return run


def hrpa_fn(head: SEPSHead, inputs: list[Tensor], impl: str, words: str = "sparse") -> Callable:
    """The HRPA kernel: alignment tokens ``(B_v, B_t, L, C)`` + words -> similarities."""
    from .kernels import get_kernel
    from .kernels.loop import _hrpa
    from .selection import l2n

    b_v = inputs[0].shape[0]
    cap, lens = (inputs[1], inputs[2]) if words == "sparse" else (inputs[3], inputs[4])
    b_t, m, c = cap.shape
    n_l = head.config.num_aggregated + 2
    g = torch.Generator().manual_seed(2)
    tokens = l2n(torch.randn(b_v, b_t, n_l, c, generator=g)).to(cap.device)
    u = l2n(cap)
    mask = torch.arange(m, device=cap.device)[None] < lens[:, None]
    if impl == "loop":

        def run_loop() -> Tensor:
            with torch.no_grad():
                return torch.stack(
                    [_hrpa(head, tokens[:, t], None, u[t, : int(lens[t])]) for t in range(b_t)], 1
                )

        return run_loop
    rowcol = get_kernel(impl).ops.row_col_max

    def run() -> Tensor:
        with torch.no_grad():
            rows = []
            for v in range(b_v):
                s = torch.bmm(u, tokens[v].transpose(1, 2))  # (B_t, M, L)
                rows.append(head.hrpa.reduce(s, None, mask, None, rowcol))
            return torch.stack(rows)

    return run


# ------------------------------------------------------------------ report
#: Implementations that ``--quick`` leaves out unless named in ``--impls``: at the quick
#: sizes their one-off set-up, not the kernels, would be the run time (measured on this
#: project's 2-core CPU: ``compiled`` added 26 s with a cold compile cache, 6 s warm; the
#: Triton CPU interpreter about 6 s, against about 1 s for loop and batched together).
QUICK_SKIPS: dict[str, str] = {
    "compiled": "not run with --quick: torch.compile's set-up (about 6-26 s on a 2-core CPU) "
    "would dominate the run; name it in --impls to include it",
    "triton": "not run with --quick: compiling the Triton kernels (or running them in the "
    "CPU interpreter, TRITON_INTERPRET=1) would dominate the run; name it in --impls to "
    "include it",
}
QUICK_IMPLS: tuple[str, ...] = tuple(i for i in IMPLEMENTATIONS if i not in QUICK_SKIPS)


@dataclasses.dataclass
class BenchSettings:
    device: str = "cpu"
    quick: bool = False
    impls: tuple[str, ...] = IMPLEMENTATIONS
    geometries: tuple[str, ...] = tuple(GEOMETRIES)
    eval_images: int = 100
    eval_texts: int = 500
    micro_images: int = 16
    micro_texts: int = 128
    train_batches: tuple[int, ...] = (32, 64, 128)
    repeats: int = 3
    #: Text shards of the loop's goal evaluation, each followed by a whole batched call.
    eval_parts: int = 5
    embed_size: int = 512
    #: Flickr30K-size evaluation (images, texts), timed on CUDA (and in quick mode,
    #: at toy size); on the CPU it would take minutes, so the report extrapolates it.
    full_eval: tuple[int, int] = (1000, 5000)
    #: Implementations left out on purpose -> why; the report lists them with the skipped.
    not_run: dict[str, str] = dataclasses.field(default_factory=dict)
    #: CPU peak memory of a training step from a fresh interpreter (:func:`train_peak_rss_mb`).
    #: Each one costs about 3 s of start-up on a 2-core CPU, 13 of them most of a quick
    #: run; quick mode reads the in-process peak instead, and the report says so.
    fresh_process_peak: bool = True

    @classmethod
    def quick_settings(cls, device: str, impls: tuple[str, ...] | None = None) -> BenchSettings:
        """Tiny sizes that check the pipeline in seconds. Without ``impls``, the
        implementations of :data:`QUICK_SKIPS` are left out (their set-up would dominate)."""
        return cls(
            device=device,
            quick=True,
            impls=QUICK_IMPLS if impls is None else impls,
            not_run={} if impls is not None else dict(QUICK_SKIPS),
            fresh_process_peak=False,
            geometries=("vit224", "swin224"),
            eval_images=4,
            eval_texts=10,
            micro_images=2,
            micro_texts=6,
            train_batches=(4,),
            repeats=1,
            embed_size=64,
            full_eval=(4, 20),
        )


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
    from torch.utils.flop_counter import FlopCounterMode

    head.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        head(*inputs)
    return int(counter.get_total_flops())


def measure_alternating(
    fns: dict[str, Callable[[], Any]],
    device: str = "cpu",
    rounds: int = 3,
    warmup: tuple[str, ...] = (),
) -> dict[str, dict[str, Any]]:
    """Times of several implementations called in alternation, ``rounds`` times each.

    Speed-up goals compare two implementations; on a shared machine the speed drifts
    by 10-20% over minutes, so timing one after the other would fold that drift into
    the ratio. Alternating calls see the same drift, and the best time of each (as
    :func:`measure`) drops the rounds that something else slowed down. Returns per
    name ``seconds`` (best), ``samples`` (every round, in order), ``peak_mb`` (largest)
    and the last ``out``.
    ``warmup`` names the implementations that get one untimed call first.
    """
    for name in warmup:
        fns[name]()
    _sync(device)
    res: dict[str, dict[str, Any]] = {k: {"samples": []} for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            m = measure(fn, device, repeats=1, warmup=False)
            res[name]["samples"].append(m["seconds"])
            res[name]["peak_mb"] = max(res[name].get("peak_mb", 0.0), m["peak_mb"])
            res[name]["out"] = m["out"]
    for r in res.values():
        r["seconds"] = min(r["samples"])
    return res


def measure_interleaved(
    parts: list[Callable[[], Any]],
    whole: Callable[[], Any],
    device: str = "cpu",
    rounds: int = 3,
) -> dict[str, dict[str, Any]]:
    """A slow implementation cut into ``parts`` interleaved with whole calls of a fast one.

    ``parts`` together do the work of one ``whole`` call (the loop on text shards: it
    loops over texts, so its time adds up over shards). Each part is followed by one
    whole call. Per round, the slow time is the sum of its parts and the fast time
    the mean of its calls, so both are measured over the same minutes of machine
    load.

    Why not :func:`measure_alternating`: at 100 x 500 pairs the loop takes about a
    minute and the batched head a few seconds, so with one call of each per round a
    change of machine load lasting tens of seconds falls on one and not on the other
    (speed-ups of 8.4-12.2x per round were measured that way in one run on this
    project's shared 2-core CPU). Returns, for ``slow`` and ``fast``: ``seconds`` (mean
    over rounds), ``samples`` (per round), ``peak_mb`` and ``out`` (the last round's:
    the list of part outputs for ``slow``).
    """
    slow: dict[str, Any] = {"samples": [], "peak_mb": 0.0}
    fast: dict[str, Any] = {"samples": [], "peak_mb": 0.0}
    _sync(device)
    for _ in range(rounds):
        slow_s, fast_s, outs = 0.0, 0.0, []
        for part in parts:
            m = measure(part, device, repeats=1, warmup=False)
            slow_s += m["seconds"]
            outs.append(m["out"])
            slow["peak_mb"] = max(slow["peak_mb"], m["peak_mb"])
            m = measure(whole, device, repeats=1, warmup=False)
            fast_s += m["seconds"]
            fast["out"] = m["out"]
            fast["peak_mb"] = max(fast["peak_mb"], m["peak_mb"])
        slow["samples"].append(slow_s)
        slow["out"] = outs
        fast["samples"].append(fast_s / len(parts))
    for r in (slow, fast):
        r["seconds"] = sum(r["samples"]) / len(r["samples"])
    return {"slow": slow, "fast": fast}


def _round_ratios(base: dict[str, Any], other: dict[str, Any]) -> list[float]:
    """Per-round speed-ups ``base / other`` of :func:`measure_alternating` samples."""
    return [a / b for a, b in zip(base["samples"], other["samples"], strict=True)]


def goal_section(s: BenchSettings, log: Callable[[str], None]) -> dict[str, Any]:
    """Code preset: evaluation at eval_images x eval_texts (sparse 20 / dense 120 words),
    batched vs loop, with distinct and with repeated (official) dense captions; and the
    training step at B = 64, batched vs loop. The evaluation interleaves the loop's
    ``eval_parts`` text shards with whole batched calls (:func:`measure_interleaved`),
    the training steps alternate (:func:`measure_alternating`); ``repeats`` rounds."""
    cfg = bench_config("code", "vit224", s.embed_size)
    out: dict[str, Any] = {"rounds": s.repeats}
    lengths = "fixed:8,24" if s.quick else "fixed:20,120"
    pairs = s.eval_images * s.eval_texts
    for repeat in (1, 5):
        inputs = make_inputs(
            "vit224",
            s.eval_images,
            s.eval_texts,
            embed_size=s.embed_size,
            device=s.device,
            lengths=lengths,
            dense_repeat=repeat,
        )
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
            "round_ratios": _round_ratios(loop, fast),
            "max_abs_diff": (loop_out - batched_out).abs().max().item(),
        }
    b = 4 if s.quick else 64
    inputs = make_inputs("vit224", b, b, embed_size=s.embed_size, device=s.device)
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
        "round_ratios": _round_ratios(train["loop"], train["batched"]),
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
    """Each preset and each single-difference variant, batched implementation."""
    rows = []
    configs: list[tuple[str, SEPSConfig]] = [
        (p, bench_config(p, "vit224", s.embed_size)) for p in ("code", "paper", "laps")
    ]
    configs += [(n, bench_config("code", "vit224", s.embed_size, **o)) for n, o in VARIANTS.items()]
    b_v, b_t = (2, 6) if s.quick else (32, 160)
    b_train = 4 if s.quick else 64
    for name, cfg in configs:
        head = make_head(cfg, "batched", s.device)
        ev_in = make_inputs(
            "vit224", b_v, b_t, embed_size=s.embed_size, device=s.device, dense_repeat=5
        )
        ev = measure(eval_fn(head, ev_in), s.device, s.repeats)
        tr_in = make_inputs("vit224", b_train, b_train, embed_size=s.embed_size, device=s.device)
        tr = measure(train_fn(head, tr_in), s.device, s.repeats)
        if not s.device.startswith("cuda") and s.fresh_process_peak:
            preset, over = (
                (name, {}) if name in ("code", "paper", "laps") else ("code", VARIANTS[name])
            )
            tr["peak_mb"] = train_peak_rss_mb(
                preset, "vit224", "batched", b_train, s.embed_size, over
            )
        flops = count_flops(
            head, make_inputs("vit224", 2, 5, embed_size=s.embed_size, device=s.device)
        )
        rows.append(
            {
                "config": name,
                "eval_pairs_per_s": b_v * b_t / ev["seconds"],
                "train_ms": tr["seconds"] * 1e3,
                "train_peak_mb": tr["peak_mb"],
                "params": sum(p.numel() for p in head.parameters()),
                "gflops_per_pair": flops / 10 / 1e9,
            }
        )
        log(
            f"preset {name}: {rows[-1]['eval_pairs_per_s']:.0f} pairs/s, "
            f"{tr['seconds'] * 1e3:.0f} ms/step"
        )
    return rows


def train_fits(impl: str, geometry: str, batch: int, embed_size: int, device: str) -> bool:
    """Whether a training step is expected to fit in half the machine's memory.

    Measured on ViT-224 at C = 512 (``reports/latency.md``): the loop keeps the
    autograd graph of every per-text MLP run, about 1.7 MB per pair, the batched
    head about 0.3 MB per pair; both grow roughly with N (patches) and C.
    """
    if device.startswith("cuda"):
        total = torch.cuda.get_device_properties(0).total_memory
    else:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return True
    per_pair = (1.7e6 if impl == "loop" else 0.3e6) * GEOMETRIES[geometry][0] / 196
    return batch * batch * per_pair * embed_size / 512 < 0.5 * total


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


def _table(rows: list[dict[str, Any]], floatfmt: str = ".4g") -> str:
    from tabulate import tabulate

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


def render_report(s: BenchSettings, goal: dict, presets: list, micro: dict, meta: dict) -> str:
    lines = ["# Latency report: HRPA and TopK kernels, whole head", ""]
    lines += [
        f"- device: {meta['device']}",
        f"- versions: {json.dumps(meta['versions'])}",
        f"- command: `{meta['command']}`",
        f"- date: {meta['date']}",
        f"- caption lengths: {meta['lengths_source']}",
        f"- machine load: {meta['load']}",
        f"- embed size C = {s.embed_size}; every number below was measured in this run"
        + (" (QUICK: tiny sizes, numbers are not meaningful)" if s.quick else ""),
    ]
    if not (s.fresh_process_peak or s.device.startswith("cuda")):
        lines.append(
            "- peak memory: in-process growth of the peak RSS, not one fresh process per "
            "training step as in the full report; it reads low once an earlier call grew the heap"
        )
    lines.append("")
    ev1, ev5, tr = goal["eval_repeat1"], goal["eval_repeat5"], goal["train"]
    lines += ["## Goals (code preset, ViT-224 + [CLS], batched vs loop)", ""]
    lines += [
        f"Evaluation, {s.eval_images} images x {s.eval_texts} texts, "
        + ("sparse 8 / dense 24 words:" if s.quick else "sparse 20 / dense 120 words:"),
        "",
        "| dense captions | loop pairs/s | batched pairs/s | speed-up | max abs diff | goal 10x |",
        "|---|---|---|---|---|---|",
    ]
    for label, ev in (("distinct per text", ev1), ("5 texts share one (official loader)", ev5)):
        ok = "met" if ev["ratio"] >= 10 else "NOT met"
        lines.append(
            f"| {label} | {ev['loop']:.0f} | {ev['batched']:.0f} | {ev['ratio']:.2f}x "
            f"({_spread(ev['round_ratios'])}) | {ev['max_abs_diff']:.2e} | {ok} |"
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
        f"Speed-up {sp:.2f}x (per round {_spread(tr['round_ratios'])}; goal 3x: "
        f"{'met' if sp >= 3 else 'NOT met'}); peak memory "
        f"{'not higher' if bt['peak_mb'] <= lt['peak_mb'] * 1.05 else 'HIGHER'} than loop.",
        "",
    ]
    lines += [
        "## Presets and single-difference variants (batched)",
        "",
        "Evaluation shard 32 x 160 (dense captions shared by 5 texts), training B = 64; "
        "GFLOPs per pair from `torch.utils.flop_counter` on a 2 x 5 forward pass.",
        "",
        _table(presets),
        "",
    ]
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

    ups = speedups(micro["rows"])
    keys = ["topk_ms", "hrpa_sparse_ms", "hrpa_dense_ms", "head_pairs_per_s"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    ax = axes[0]
    labels = [f"{r['geometry']}\n{r['impl']}" for r in ups]
    width = 0.2
    for i, key in enumerate(keys):
        ax.bar([j + i * width for j in range(len(ups))], [r[key] for r in ups], width, label=key)
    ax.set_xticks([j + 1.5 * width for j in range(len(ups))], labels, fontsize=7)
    ax.set_yscale("log")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel("speed-up vs loop")
    ax.legend(fontsize=7)
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
    ax.axhline(10, color="r", ls="--", lw=0.8, label="eval goal 10x")
    ax.axhline(3, color="g", ls="--", lw=0.8, label="train goal 3x")
    ax.set_ylabel("batched / loop")
    ax.legend(fontsize=7)
    ax.set_title("goals (code preset, ViT-224)")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def _load() -> str:
    try:
        return "/".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def run_report(
    s: BenchSettings, out_dir: Path, command_line: str, log: Callable[[str], None]
) -> Path:
    load_start = _load()
    goal = goal_section(s, log)
    goal["full_eval"] = full_eval_section(s, goal, log)
    presets = presets_section(s, log)
    micro = micro_section(s, log)
    meta = {
        "device": device_info(s.device),
        "versions": versions(),
        "command": command_line,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "lengths_source": caption_lengths("sparse", 1)[1],
        "load": f"{load_start} at the start, {_load()} at the end (1/5/15-min load averages; "
        "other processes on the machine slow every number)",
    }
    text = render_report(s, goal, presets, micro, meta)
    md = out_dir / "latency.md"
    png = out_dir / "latency.png"
    buf = io.BytesIO()
    plot(micro, goal, buf)
    atomic_write_bytes(png, buf.getvalue())
    text += f"\n![speed-ups]({png.name})\n"
    atomic_write_text(md, text)
    return md


# --------------------------------------------------------------------- CLI
# One parser per kind of value. They run inside the command (not as argparse ``type=``) so
# that a bad value is one ``ValueError`` line naming the option, which ``seps.cli.main``
# prints with exit code 2, like every other invalid input of ``seps-bench``.
def _invalid(option: str, value: str, expected: str) -> ValueError:
    return ValueError(f"{option}: invalid value {value!r}; expected {expected}")


def _positive_int(option: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise _invalid(option, value, "a positive integer")
    return n


def _positive_ints(option: str, value: str) -> tuple[int, ...]:
    """Comma-separated positive integers, e.g. ``32,64,128`` (at least one)."""
    expected = "comma-separated positive integers, e.g. 32,64,128"
    try:
        out = tuple(_positive_int(option, v) for v in value.split(",") if v.strip())
    except ValueError:
        raise _invalid(option, value, expected) from None
    if not out:
        raise _invalid(option, value, expected)
    return out


def _shard(option: str, value: str) -> tuple[int, int]:
    """``IMAGESxTEXTS``, e.g. ``100x500`` (``X`` works too)."""
    expected = "IMAGESxTEXTS with two positive integers, e.g. 100x500"
    try:
        images, texts = (_positive_int(option, v) for v in value.lower().split("x"))
    except ValueError:  # also a count of parts other than two
        raise _invalid(option, value, expected) from None
    return images, texts


def _names(option: str, value: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(v for v in value.split(",") if v)
    for name in names:
        if name not in allowed:
            raise ValueError(f"{option}: invalid value {name!r}; allowed: {', '.join(allowed)}")
    return names


def _defaults(full: object, quick: object) -> str:
    return f"(default {full}; with --quick {quick})"


_FULL = BenchSettings()
_QUICK = BenchSettings.quick_settings("cpu")


def _add_args(p: argparse.ArgumentParser) -> None:
    # The size options default to None so that --quick can tell the sizes the user gave
    # (applied on top of the quick ones) from the ones left out; the defaults are in
    # BenchSettings and BenchSettings.quick_settings, quoted in each help.
    def shard(s: BenchSettings, kind: str) -> str:
        return f"{getattr(s, kind + '_images')}x{getattr(s, kind + '_texts')}"

    p.description = (
        "Micro-benchmarks of the TopK (patch selection) and HRPA kernels and of the whole head, "
        "per implementation (loop, batched, compiled, triton), and with --report the latency "
        "report reports/latency.md + reports/latency.png. Without --report it runs the "
        "pytest-benchmark suites in benchmarks/ (like `tox -e bench`)."
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="measure everything in one run and write OUT/latency.md and OUT/latency.png "
        "(written atomically)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="check the pipeline: tiny sizes (C=64, a few pairs; the size options below "
        "override them when given), only the implementations "
        f"{','.join(QUICK_IMPLS)} unless --impls names others, and CPU peak memory read "
        "in-process instead of from a fresh process per step. Measured on this project's "
        "2-core CPU: about 8 s when idle, 16-40 s while other jobs kept the cores busy (8 s "
        "with --threads 1 under the same load); "
        "naming compiled in --impls adds torch.compile's set-up (about 6 s with a warm "
        "compile cache, 26 s cold). The numbers are not meaningful",
    )
    p.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="device to benchmark on: cpu, cuda, cuda:N or auto (default: cuda if available, "
        "else cpu); refused before any work if this machine lacks it",
    )
    p.add_argument(
        "--impls",
        default=None,
        help="comma-separated implementations for the micro-benchmarks "
        f"{_defaults('all: ' + ','.join(_FULL.impls), ','.join(_QUICK.impls))}; "
        "unavailable ones are skipped with their reason",
    )
    p.add_argument(
        "--geometries",
        default=None,
        help=f"comma-separated geometries out of {','.join(GEOMETRIES)} "
        f"{_defaults(','.join(_FULL.geometries), ','.join(_QUICK.geometries))}",
    )
    p.add_argument(
        "--eval-shard",
        default=None,
        metavar="IMAGESxTEXTS",
        help="evaluation shard of the goal measurement "
        f"{_defaults(shard(_FULL, 'eval'), shard(_QUICK, 'eval'))}",
    )
    p.add_argument(
        "--micro-shard",
        default=None,
        metavar="IMAGESxTEXTS",
        help="shard of the micro-benchmarks "
        f"{_defaults(shard(_FULL, 'micro'), shard(_QUICK, 'micro'))}; the pytest suites use "
        "128x1024 on CUDA",
    )
    p.add_argument(
        "--train-batches",
        default=None,
        help="comma-separated training batch sizes of the micro-benchmarks "
        + _defaults(
            ",".join(map(str, _FULL.train_batches)), ",".join(map(str, _QUICK.train_batches))
        ),
    )
    p.add_argument(
        "--threads",
        default=None,
        help="torch CPU threads (default: torch's default, the number of cores)",
    )
    p.add_argument(
        "--repeats",
        default=None,
        help="timed calls per measurement after the warm-up; the best is kept (loop: 1) "
        f"{_defaults(_FULL.repeats, _QUICK.repeats)}. "
        "The goals use it as their number of rounds: evaluation rounds interleave the "
        f"loop's {BenchSettings.eval_parts} text shards with whole batched calls and "
        "report means; training rounds alternate one step of each and report the best",
    )
    p.add_argument("--out", default="reports", help="report folder (default: reports)")
    p.add_argument("pytest_args", nargs="*", help="extra arguments passed to pytest (no --report)")


def bench_settings(args: argparse.Namespace) -> BenchSettings:
    """The report's settings: the full or the quick defaults, then every size option the
    user gave. Raises ``ValueError`` naming the option for a device this machine lacks or
    an invalid value, before any work."""
    device = check_device(args.device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    impls = None if args.impls is None else _names("--impls", args.impls, IMPLEMENTATIONS)
    if args.quick:
        s = BenchSettings.quick_settings(device, impls)
    else:
        s = BenchSettings(device=device, impls=IMPLEMENTATIONS if impls is None else impls)
    if args.geometries is not None:
        s.geometries = _names("--geometries", args.geometries, tuple(GEOMETRIES))
    if args.eval_shard is not None:
        s.eval_images, s.eval_texts = _shard("--eval-shard", args.eval_shard)
    if args.micro_shard is not None:
        s.micro_images, s.micro_texts = _shard("--micro-shard", args.micro_shard)
    if args.train_batches is not None:
        s.train_batches = _positive_ints("--train-batches", args.train_batches)
    if args.repeats is not None:
        s.repeats = _positive_int("--repeats", args.repeats)
    return s


@command("bench", "kernel micro-benchmarks and the latency report (--report)", _add_args)
def _run_bench(args: argparse.Namespace) -> int:
    import sys

    s = bench_settings(args)  # validates everything before any work
    if args.threads is not None:
        torch.set_num_threads(_positive_int("--threads", args.threads))
    if not args.report:
        import pytest

        bench_dir = Path(__file__).resolve().parents[1] / "benchmarks"
        return int(pytest.main([str(bench_dir), "--benchmark-only", "-q", *args.pytest_args]))
    cmd = (
        "seps-bench " + " ".join(sys.argv[1:])
        if sys.argv[0].endswith("seps-bench")
        else ("seps-bench bench --report" + (" --quick" if args.quick else ""))
    )
    md = run_report(s, Path(args.out), cmd, lambda m: print(m, flush=True))
    print(f"wrote {md} and {md.with_suffix('.png')}")
    return 0


__all__ = [
    "GEOMETRIES",
    "QUICK_IMPLS",
    "VARIANTS",
    "BenchSettings",
    "bench_config",
    "bench_settings",
    "caption_lengths",
    "make_head",
    "make_inputs",
    "measure",
    "run_report",
]
