"""The measurements of ``scripts/gpu-check.sh`` (see docs/gpu.md), one subcommand a step.

``python -m seps.bench.gpu_check STEP --out-dir DIR [--small] [--device D]``; each step
writes ``DIR/STEP.json``:

- ``kernels``: every implementation of :data:`seps.core.kernels.IMPLEMENTATIONS` against the
  ``loop`` baseline on the ViT-224 geometry: time of TopK, HRPA (sparse and dense words)
  and the whole head in evaluation, and whether the head's similarities (and the HRPA
  outputs) equal the loop's within the tests' tolerance (``atol = rtol = 1e-5``);
- ``train``: training steps of the ``code``, ``paper`` and ``laps`` presets at the
  ``paper`` profile's size (ViT-B/16 at 224 px, BERT-base, C = 512, B = 64), random
  initialisation (nothing downloaded), synthetic images and real caption lengths,
  under bf16 autocast: median step time and peak CUDA memory;
- ``eval``: a Flickr30K-size evaluation (1,000 images x 5,000 captions, real caption
  lengths) of the ``code`` head through :func:`seps.core.evaluate.similarity_matrix`, in the
  fair (``candidate``) and the official (``query``) protocols, and through the head
  directly with a distinct dense caption per text (the latency report's worst case);
- ``summary``: reads every ``*.json`` above, ``tests.xml`` and ``tests.txt`` (pytest's
  junit and output) and ``steps.tsv`` (the script's step status) from ``--work-dir`` and
  writes ``tests.json``, ``steps.json`` and ``summary.md``.

``kernels.json`` also holds the machine's description (``env``: versions, GPU).

``--small`` scales everything down (tiny encoders, a few steps, 20 images x 100
captions) so that the whole check runs on a CPU in seconds (with ``TRITON_INTERPRET=1``
for the Triton kernels); its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .gpu_summary import STEP_NAMES, write_summary

#: Tolerance of the similarities against the loop (tests/test_kernels.py).
ATOL = RTOL = 1e-5

Log = Callable[[str], None]
#: Writes the rows measured so far (``STEP.json`` with ``partial: true``), so that a step
#: stopped by its time limit still leaves what it measured.
Save = Callable[[dict[str, Any]], None]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], device: str, repeats: int) -> tuple[list[float], Any]:
    """Seconds of ``repeats`` calls (after the caller's warm-up) and the last output."""
    times, out = [], None
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return times, out


def _peak_reset(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_mb(device: str) -> float | None:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return None


def env_info(device: str) -> dict[str, Any]:
    import platform

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device,
        "cuda": torch.version.cuda,
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    for name in ("triton", "timm", "transformers"):
        try:
            info[name] = __import__(name).__version__
        except ImportError:
            info[name] = "not installed"
    return info


def _max_diff(a: Any, b: Any) -> float | None:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return None
    return (a.float().cpu() - b.float().cpu()).abs().max().item()


def _close(a: Any, b: Any) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return False
    return bool(torch.allclose(a.float().cpu(), b.float().cpu(), atol=ATOL, rtol=RTOL))


# --------------------------------------------------------------------------- kernels
def _kernel_row(
    impl: str, head: Any, inputs: list[torch.Tensor], device: str, repeats: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Warm-up and timed calls of TopK, HRPA (sparse, dense words) and the head."""
    from .cases import eval_fn, hrpa_fn, topk_fn

    row: dict[str, Any] = {"impl": impl}
    outs: dict[str, Any] = {}
    cases = {
        "topk": topk_fn(head, inputs, impl),
        "hrpa_sparse": hrpa_fn(head, inputs, impl),
        "hrpa_dense": hrpa_fn(head, inputs, impl, "dense"),
        "head_eval": eval_fn(head, inputs),
    }
    for name, fn in cases.items():
        t0 = time.perf_counter()
        fn()  # warm-up (compiles under compiled / triton)
        _sync(device)
        row[f"{name}_warmup_s"] = time.perf_counter() - t0
        times, outs[name] = _timed(fn, device, 1 if impl == "loop" else repeats)
        row[f"{name}_ms"] = min(times) * 1e3
    return row, outs


def run_kernels(device: str, small: bool, log: Log, save: Save) -> dict[str, Any]:
    from ..core.kernels import IMPLEMENTATIONS, unavailable_reason
    from .workloads import bench_config, make_head, make_inputs

    geo = "vit224"
    embed = 64 if small else 512
    b_v, b_t = (2, 6) if small else (16, 128)
    repeats = 1 if small else 5
    cfg = bench_config("code", geo, embed)
    inputs = make_inputs(geo, b_v, b_t, embed_size=embed, device=device, dense_repeat=5)
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    ref: dict[str, Any] = {}
    for impl in IMPLEMENTATIONS:
        reason = unavailable_reason(impl, device)
        if small and impl == "compiled":  # torch.compile's CPU set-up: 30 s on 2 cores
            reason = "not run with --small (torch.compile's set-up would dominate the check)"
        if reason is not None:
            skipped[impl] = reason
            log(f"skip {impl}: {reason}")
            continue
        try:
            row, outs = _kernel_row(impl, make_head(cfg, impl, device), inputs, device, repeats)
        except Exception as exc:  # one implementation's failure does not hide the others'
            log(f"{impl}: FAILED {type(exc).__name__}: {exc}")
            rows.append({"impl": impl, "error": f"{type(exc).__name__}: {exc}"[:500]})
            rows[-1]["sims_equal"] = False
            save({"rows": rows, "skipped": skipped})
            continue
        row["head_pairs_per_s"] = b_v * b_t / (row["head_eval_ms"] / 1e3)
        if impl == "loop":
            ref = outs
        for name in ("hrpa_sparse", "hrpa_dense", "head_eval"):
            row[f"{name}_max_abs_diff"] = _max_diff(outs[name], ref.get(name))
        row["sims_equal"] = _close(outs["head_eval"], ref.get("head_eval"))
        rows.append(row)
        save({"rows": rows, "skipped": skipped})
        log(
            f"{impl}: topk {row['topk_ms']:.3f} ms, hrpa sparse {row['hrpa_sparse_ms']:.3f} ms, "
            f"dense {row['hrpa_dense_ms']:.3f} ms, head {row['head_eval_ms']:.2f} ms, "
            f"max |sims - loop| {row['head_eval_max_abs_diff']} "
            f"({'equal' if row['sims_equal'] else 'DIFFERENT'})"
        )
    base = rows[0] if rows and "head_eval_ms" in rows[0] and rows[0]["impl"] == "loop" else None
    for row in rows:
        if base is not None and "head_eval_ms" in row:
            for k in ("topk", "hrpa_sparse", "hrpa_dense", "head_eval"):
                row[f"{k}_speedup_vs_loop"] = base[f"{k}_ms"] / row[f"{k}_ms"]
    ok = all(r["sims_equal"] for r in rows) and base is not None
    return {
        "geometry": geo,
        "embed_size": embed,
        "images": b_v,
        "texts": b_t,
        "dense_repeat": 5,
        "repeats": repeats,
        "tolerance": {"atol": ATOL, "rtol": RTOL},
        "rows": rows,
        "skipped": skipped,
        "ok": ok,
    }


# --------------------------------------------------------------------------- train
#: Largest relative difference of the first step's loss between the two alignments of
#: one preset (the same weights and batch; bf16 autocast rounds the two paths apart).
FIRST_LOSS_RTOL = 0.01


def _force_block_mode(head: Any, mode: str) -> None:
    """Make the :class:`seps.core.head.SEPSHead` ``head`` align as
    :func:`seps.core.head_steps.block_mode` ``mode`` says, whatever its device."""
    head._block_mode = lambda n, device: mode


def _train_model(preset: str, small: bool, device: str) -> Any:
    from transformers import BertConfig

    from ..core.config import get_config
    from ..core.head import SEPSHead
    from ..model.encoders import ImageEncoder, TextEncoder, build_image_encoder, tiny_bert_config
    from ..model.seps_model import SEPSModel

    embed = 64 if small else 512
    cfg = get_config(preset, embed_size=embed)
    if small:
        img_enc = build_image_encoder("tiny-vit", embed, image_size=32)
        txt_enc = TextEncoder(tiny_bert_config(1000), embed)
    else:
        # ViT-B/16 at 224 px and BERT-base (BertConfig's defaults), random weights: the
        # paper profile's sizes without downloading anything.
        img_enc = ImageEncoder("vit_base_patch16_224", embed, image_size=224, source="timm")
        txt_enc = TextEncoder(BertConfig(), embed)
    cfg = cfg.replace(num_patches=img_enc.num_patches)
    return SEPSModel(img_enc, txt_enc, SEPSHead(cfg)).to(device)


def _token_batch(kind: str, b: int, vocab: int, seed: int, device: str, cap: int) -> list[Any]:
    """Token ids of ``b`` captions with real word counts (+ [CLS], [SEP]), at most ``cap``."""
    from .workloads import caption_lengths

    words = caption_lengths(kind, b, seed)[0]
    lens = torch.tensor([min(w + 2, cap) for w in words])
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000 if vocab > 2000 else 5, vocab, (b, int(lens.max())), generator=g)
    ids[torch.arange(ids.shape[1])[None] >= lens[:, None]] = 0
    return [ids.to(device), lens.to(device)]


def train_sizes(small: bool) -> dict[str, int]:
    """Batch, warm-up and timed steps, image size, caption token cap of :func:`run_train`."""
    if small:
        return {"batch": 4, "warmup": 1, "steps": 2, "image_size": 32, "max_tokens": 24}
    # max_tokens: BERT-base's 512 positions (the paper profile truncates nothing)
    return {"batch": 64, "warmup": 3, "steps": 20, "image_size": 224, "max_tokens": 512}


def train_preset(
    preset: str, small: bool, device: str, sizes: dict[str, int], blocks: bool = True
) -> dict[str, Any]:
    """Warm-up then timed AdamW steps of one preset's whole model under bf16 autocast.

    ``blocks``: every alignment unit aligns a block of images per call (what the
    ``batched`` head does on a GPU, :func:`seps.core.head_steps.block_mode` ``all``; forced,
    so that the CPU run of the check compares two paths too); ``False``: one image per
    call (``none``), the head before blocks reached the GPU (the A/B)."""
    from ..core.losses import SEPSLoss
    from ..model.seps_model import parameter_groups
    from ..runtime.precision import autocast
    from ..train.distributed import TrainStep

    b, image_size, max_tokens = sizes["batch"], sizes["image_size"], sizes["max_tokens"]
    torch.manual_seed(0)
    _peak_reset(device)
    t_build = time.perf_counter()
    model = _train_model(preset, small, device)
    _force_block_mode(model.cross_net, "all" if blocks else "none")
    build_s = time.perf_counter() - t_build
    cfg = model.config
    step = TrainStep(model, 1, frozen=False)
    opt = torch.optim.AdamW(parameter_groups(model, 2e-4, 0.1), lr=2e-4)
    criterion = SEPSLoss(cfg)
    vocab = model.txt_enc.vocab_size
    g = torch.Generator().manual_seed(0)
    images = torch.randn(b, 3, image_size, image_size, generator=g).to(device)
    cap, lens = _token_batch("sparse", b, vocab, 0, device, max_tokens)
    dense, dlens = _token_batch("dense", b, vocab, 1, device, max_tokens)
    if not cfg.uses_dense:
        dense = dlens = None
    img_ids = torch.arange(b, device=device)
    model.train()
    dev = torch.device(device)

    def one_step() -> float:
        with autocast("bf16", dev):
            sims, masks = step(images, cap, lens, lens, dense, dlens, dlens)
            loss = criterion(sims, masks, img_ids, max_violation=False)
        opt.zero_grad(set_to_none=True)
        loss.total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        opt.step()
        return float(loss.total.detach())

    # the first step's loss: both alignments start from the same weights and batch
    first_loss = one_step()
    for _ in range(sizes["warmup"] - 1):
        one_step()
    _sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times, last_loss = _timed(one_step, device, sizes["steps"])
    return {
        "preset": preset,
        "alignment": _alignment(blocks),
        "batch": b,
        "image_size": image_size,
        "num_patches": cfg.num_patches,
        "uses_dense": cfg.uses_dense,
        "sparse_tokens_max": int(lens.max()),
        "dense_tokens_max": int(dlens.max()) if dlens is not None else None,
        "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
        "build_s": build_s,
        "warmup_steps": sizes["warmup"],
        "steps": sizes["steps"],
        "step_ms_median": statistics.median(times) * 1e3,
        "step_ms_min": min(times) * 1e3,
        "step_ms_max": max(times) * 1e3,
        "peak_mem_mb": _peak_mb(device),
        "first_loss": first_loss,
        "last_loss": last_loss,
        "loss_finite": math.isfinite(last_loss),
    }


def _alignment(blocks: bool) -> str:
    return "blocks" if blocks else "per image"


def run_train(device: str, small: bool, log: Log, save: Save) -> dict[str, Any]:
    sizes = train_sizes(small)
    rows: list[dict[str, Any]] = []
    meta = {  # in every partial save too (see run_eval)
        "profile": "small (tiny encoders)" if small else "paper (ViT-B/16 224 px, BERT-base)",
        "precision": "bf16 autocast",
        "embed_size": 64 if small else 512,
    }
    for preset, blocks in itertools.product(("code", "paper", "laps"), (True, False)):
        what = f"{preset} ({_alignment(blocks)})"
        try:
            row = train_preset(preset, small, device, sizes, blocks)
        except Exception as exc:  # one preset's failure does not hide the others'
            log(f"train {what}: FAILED {type(exc).__name__}: {exc}")
            rows.append({"preset": preset, "alignment": _alignment(blocks), "loss_finite": False})
            rows[-1]["error"] = f"{type(exc).__name__}: {exc}"[:500]
            save({**meta, "rows": rows})
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            continue
        if not blocks:  # the same weights and batch: the first step's loss must agree
            ref = next((r for r in rows if r["preset"] == preset and "first_loss" in r), None)
            if ref is not None:
                diff = abs(row["first_loss"] - ref["first_loss"])
                row["first_loss_rel_diff"] = diff / max(abs(ref["first_loss"]), 1e-12)
        rows.append(row)
        save({**meta, "rows": rows})
        peak = "n/a (CPU)" if row["peak_mem_mb"] is None else f"{row['peak_mem_mb']:.0f} MB"
        log(
            f"train {what}: {row['step_ms_median']:.1f} ms/step (median of {row['steps']}), "
            f"peak {peak}, loss {row['last_loss']:.3f}"
        )
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return {
        **meta,
        "rows": rows,
        # bf16 rounding of one forward pass: far below 1% (FIRST_LOSS_RTOL)
        "ok": all(
            r["loss_finite"] and r.get("first_loss_rel_diff", 0.0) <= FIRST_LOSS_RTOL for r in rows
        ),
    }


# --------------------------------------------------------------------------- eval
def run_eval(device: str, small: bool, log: Log, save: Save) -> dict[str, Any]:
    from ..core.evaluate import similarity_matrix
    from .workloads import bench_config, caption_lengths, make_head

    n_img, n_txt = (20, 100) if small else (1000, 5000)
    embed = 64 if small else 512
    cfg = bench_config("code", "vit224", embed)
    head = make_head(cfg, "batched", device).eval()
    g = torch.Generator().manual_seed(0)
    sl = caption_lengths("sparse", n_txt, 0)[0]
    dl = caption_lengths("dense", n_txt, 1)[0]
    img = torch.randn(n_img, 197, embed, generator=g).to(device)
    cap = torch.randn(n_txt, max(sl), embed, generator=g).to(device)
    lens = torch.tensor(sl, device=device)
    c2i = torch.arange(n_txt) // 5
    per_image_lens = torch.tensor(dl[:n_img], device=device)
    dense_img = torch.randn(n_img, int(per_image_lens.max()), embed, generator=g).to(device)
    rows: list[dict[str, Any]] = []
    # written with every partial save too, so a step stopped by its limit still names them
    meta = {
        "preset": "code",
        "embed_size": embed,
        "caption_lengths": caption_lengths("sparse", 1)[1],
        "sparse_words_max": max(sl),
        "dense_words_max": max(dl),
    }

    def protocol(source: str) -> Callable[[], Any]:
        def run() -> Any:
            return similarity_matrix(
                head,
                img,
                cap,
                lens,
                dense_img,
                per_image_lens,
                caption_to_image=c2i,
                dense_source=source,
                image_shard=100,
            )

        return run

    dense_t = torch.randn(n_txt, max(dl), embed, generator=g).to(device)
    dlens_t = torch.tensor(dl, device=device)

    def distinct() -> Any:
        out = []
        with torch.no_grad():
            for v0 in range(0, n_img, 100):
                out.append(head(img[v0 : v0 + 100], cap, lens, dense_t, dlens_t).float().cpu())
        return torch.cat(out)

    # Blocks of images as on a GPU (block_mode "all"), forced so that the CPU run of the
    # check compares two paths too; per_image: one image per alignment call (the A/B).
    _force_block_mode(head, "all")

    def per_image(source: str) -> Callable[[], Any]:
        def run() -> Any:
            _force_block_mode(head, "none")
            try:
                return protocol(source)()
            finally:
                _force_block_mode(head, "all")

        return run

    # name: (function, the name of the blocked layout whose similarities it must equal)
    layouts: dict[str, tuple[Callable[[], Any], str | None]] = {
        "candidate (fair: dense caption of the scored image)": (protocol("candidate"), None),
        "candidate, one image per alignment call (before blocks on a GPU)": (
            per_image("candidate"),
            "candidate",
        ),
        "query (official: dense caption of the text's image, shared by 5 texts)": (
            protocol("query"),
            None,
        ),
        "query, one image per alignment call": (per_image("query"), "query"),
        "distinct (a distinct dense caption per text, head called directly)": (distinct, None),
    }
    with torch.no_grad():  # warm-up: CUDA context, kernels
        head(img[:2], cap[:10], lens[:10], dense_img[:10], per_image_lens[:10])
    blocked: dict[str, Any] = {}  # each layout's similarities, by its first word
    for name, (fn, same_as) in layouts.items():
        _peak_reset(device)
        try:
            times, out = _timed(fn, device, 1)
        except Exception as exc:  # one layout's failure does not hide the others'
            log(f"eval {name.split(' (')[0]}: FAILED {type(exc).__name__}: {exc}")
            rows.append({"layout": name, "finite": False, "shape": None})
            rows[-1]["error"] = f"{type(exc).__name__}: {exc}"[:500]
            save({**meta, "rows": rows})
            continue
        if same_as is None:
            blocked[name.split(" ")[0]] = out.float().cpu()
        rows.append(
            {
                "layout": name,
                "images": n_img,
                "texts": n_txt,
                "seconds": times[0],
                "pairs_per_s": n_img * n_txt / times[0],
                "peak_mem_mb": _peak_mb(device),
                "shape": list(out.shape),
                "finite": bool(torch.isfinite(out).all()),
            }
        )
        if same_as is not None:  # the blocked head's similarities again
            rows[-1]["max_abs_diff_vs_blocks"] = _max_diff(out, blocked.get(same_as))
            rows[-1]["sims_equal"] = _close(out, blocked.get(same_as))
        save({**meta, "rows": rows})
        log(f"eval {name.split(' (')[0]}: {times[0]:.2f} s for {n_img}x{n_txt}")
    return {
        **meta,
        "rows": rows,
        "ok": all(
            r["finite"] and r["shape"] == [n_img, n_txt] and r.get("sims_equal", True) for r in rows
        ),
    }


# --------------------------------------------------------------------------- main
STEPS: dict[str, Callable[[str, bool, Log, Save], dict[str, Any]]] = dict(
    zip(STEP_NAMES, (run_kernels, run_train, run_eval), strict=True)
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seps.bench.gpu_check", description=__doc__)
    p.add_argument("step", choices=[*STEPS, "summary"])
    p.add_argument("--out-dir", default="reports/gpu", help="output folder (default reports/gpu)")
    p.add_argument("--small", action="store_true", help="tiny sizes (CPU check of the pipeline)")
    p.add_argument("--device", default=None, help="default: cuda, or cpu with --small")
    p.add_argument(
        "--work-dir",
        default=None,
        help="summary: where steps.tsv, tests.xml and tests.txt are (default: --out-dir)",
    )
    args = p.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = args.device or ("cpu" if args.small else "cuda")

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {args.step}: {msg}", flush=True)

    if args.step == "summary":
        print(write_summary(out, Path(args.work_dir) if args.work_dir else None))
        return 0
    if device.startswith("cuda") and not torch.cuda.is_available():
        print(f"{args.step}: --device {device} but CUDA is not available", file=sys.stderr)
        return 2
    path = out / f"{args.step}.json"
    head: dict[str, Any] = {"step": args.step, "device": device, "small": args.small}
    # Every measurement step describes the machine: a call may skip any of them.
    head["env"] = env_info(device)
    if args.step == "kernels":
        log(json.dumps(head["env"]))

    def save(partial: dict[str, Any]) -> None:
        data = {**head, "partial": True, "ok": False, **partial}
        path.write_text(json.dumps(data, indent=1) + "\n")

    if args.small:  # on a shared CPU one thread is faster than threads waiting on each other
        torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        result = STEPS[args.step](device, args.small, log, save)
    except Exception as exc:  # recorded in the step's JSON, then the script goes on
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {exc}", "ok": False}
    result = {**head, "seconds": time.perf_counter() - t0, **result}
    path.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {path} ({result['seconds']:.1f} s, ok={result['ok']})")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
