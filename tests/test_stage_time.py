"""Wall time of the batched head by stage (:mod:`seps.bench.stages`) and its report
section; the shared stage attribution leaves the FLOP profile as it was.

Not timed for figures: the tests pin how the time is split (exclusive times, the
remainder in ``other``, synchronisation on CUDA), not how large it is.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import torch

from seps.bench import stages
from seps.bench.flops import STAGES, stage_flops
from seps.bench.latency import render_report, report_json
from seps.bench.sections import stage_time_section
from seps.bench.settings import BenchSettings
from seps.bench.stages import instrument, stage_functions, stage_seconds
from seps.bench.workloads import bench_config, make_head, make_inputs
from seps.core import chunking, head_steps
from seps.core.head import SEPSHead


def _head_and_inputs(preset: str = "code", share: int = 1):
    cfg = bench_config(preset, "vit224", 32)
    inputs = make_inputs("vit224", 2, 6, embed_size=32, lengths="fixed:5,9", dense_repeat=share)
    return make_head(cfg, "batched"), inputs


def _originals(head: SEPSHead) -> list[Any]:
    return [getattr(owner, attr) for owner, attr, _ in stage_functions(head)]


def _assert_restored(head: SEPSHead, before: list[Any]) -> None:
    assert _originals(head) == before  # bound methods compare by function and instance
    assert "_image_state" not in vars(head) and "reduce" not in vars(head.hrpa)
    assert head._select_block.__func__ is SEPSHead._select_block
    assert head.hrpa.reduce.__func__ is type(head.hrpa).reduce
    assert head_steps.patch_word_scores.__module__ == "seps.core.alignment"
    assert chunking.cls_word_scores.__module__ == "seps.core.alignment"


def test_exclusive_stage_times_and_other_add_up_to_the_total() -> None:
    head, inputs = _head_and_inputs()
    got = stage_seconds(head, inputs, repeats=3)
    assert list(got) == [*STAGES, "total"]
    parts = sum(got[s] for s in STAGES)
    assert parts == pytest.approx(got["total"], rel=1e-9, abs=1e-12)
    assert all(got[s] >= 0 for s in STAGES if s != "other")


def test_every_stage_with_flops_gets_a_positive_time() -> None:
    head, inputs = _head_and_inputs()
    flops = stage_flops(head, inputs)
    seconds = stage_seconds(head, inputs, repeats=1)
    with_flops = [s for s in STAGES if flops[s] > 0]
    assert {"image", "selection", "[CLS] column", "alignment"} <= set(with_flops)
    assert all(seconds[s] > 0 for s in with_flops), seconds


def test_nested_stage_time_is_left_out_of_the_outer_stage(monkeypatch) -> None:
    """Exclusive time: with a fake clock, an outer stage that runs 3 s itself and calls
    an inner one of 2 s is charged 3 s, the inner 2 s."""
    clock = [0.0]
    monkeypatch.setattr(stages.time, "perf_counter", lambda: clock[0])
    timer = stages._StageTimer(lambda: None)

    def inner() -> None:
        clock[0] += 2.0

    wrapped_inner = timer.wrap("[CLS] column", inner)

    def outer() -> None:
        clock[0] += 1.0
        wrapped_inner()
        clock[0] += 2.0

    timer.wrap("selection", outer)()
    timer.wrap("selection", outer)()
    assert timer.seconds == {"selection": 6.0, "[CLS] column": 4.0}
    assert timer.open == []


def test_instrumenting_restores_the_head_and_the_modules() -> None:
    head, inputs = _head_and_inputs()
    before = _originals(head)
    stage_seconds(head, inputs, repeats=1)
    _assert_restored(head, before)
    stage_flops(head, inputs)
    _assert_restored(head, before)


def test_instrumenting_restores_the_head_after_an_exception() -> None:
    head, inputs = _head_and_inputs()
    before = _originals(head)

    def failing(stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(stage)

        return run

    with pytest.raises(RuntimeError, match="image"), instrument(head, failing):
        head.eval()
        with torch.no_grad():
            head(*inputs)
    _assert_restored(head, before)


@pytest.mark.parametrize("preset", ["code", "paper"])
def test_timing_does_not_change_the_similarities(preset: str, monkeypatch) -> None:
    """Every call stage_seconds makes (the warm-up and the instrumented repeats) returns
    exactly the similarities of a plain call; every stage function is reached."""
    head, inputs = _head_and_inputs(preset)
    head.eval()
    with torch.no_grad():
        plain = head(*inputs)
    seen: list[torch.Tensor] = []
    forward = head.forward

    def recording(*args: Any, **kwargs: Any) -> Any:
        out = forward(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(head, "forward", recording)
    reached: set[str] = set()
    wrap = stages._StageTimer.wrap

    def spying(self: Any, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        timed = wrap(self, stage, fn)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            reached.add(stage)
            return timed(*args, **kwargs)

        return run

    monkeypatch.setattr(stages._StageTimer, "wrap", spying)
    stage_seconds(head, inputs, repeats=2)
    assert len(seen) == 3
    assert all(torch.equal(out, plain) for out in seen)
    want = {"image", "selection", "[CLS] column", "alignment", "HRPA"}
    assert reached == want


def test_cuda_inputs_synchronise_at_every_stage_boundary(monkeypatch) -> None:
    """On CUDA each stage call is bracketed by two synchronisations, and each timed call
    by two more; CPU inputs never synchronise."""
    head, inputs = _head_and_inputs()
    syncs: list[None] = []

    def no_sync() -> None:
        raise AssertionError("CPU inputs must not synchronise")

    monkeypatch.setattr(torch.cuda, "synchronize", no_sync)
    stage_seconds(head, inputs, repeats=1)
    calls: list[str] = []

    def counting(stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            calls.append(stage)
            return fn(*args, **kwargs)

        return run

    with instrument(head, counting), torch.no_grad():
        head(*inputs)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: syncs.append(None))
    monkeypatch.setattr(stages, "_on_cuda", lambda inputs: True)
    stage_seconds(head, inputs, repeats=2)
    assert len(syncs) == 2 * (2 * len(calls) + 2)


def _old_stage_flops(head: SEPSHead, inputs: list[torch.Tensor]) -> dict[str, int]:
    """``stage_flops`` as it was before the stage list moved to ``seps.bench.stages``
    (commit 04d5b58), its patch list written out: the reference of the refactor."""
    from seps.bench.flops import _StageCounter

    head.eval()
    counter = _StageCounter()
    w = counter.wrap
    with contextlib.ExitStack() as stack:
        for attr, name in (
            ("_image_state", "image"),
            ("_gram_rows", "image"),
            ("_select_block", "selection"),
        ):
            stack.enter_context(mock.patch.object(head, attr, w(name, getattr(head, attr))))
        stack.enter_context(mock.patch.object(head.hrpa, "reduce", w("HRPA", head.hrpa.reduce)))
        for module, attr, name in (
            (head_steps, "patch_word_scores", "alignment"),
            (chunking, "cls_word_scores", "[CLS] column"),
        ):
            stack.enter_context(mock.patch.object(module, attr, w(name, getattr(module, attr))))
        with torch.no_grad(), counter:
            head(*inputs)
    return {s: int(counter.by_stage.get(s, 0)) for s in STAGES}


@pytest.mark.parametrize(("preset", "share"), [("code", 1), ("code", 5), ("paper", 1)])
def test_stage_flops_counts_are_those_of_the_old_patch_list(preset: str, share: int) -> None:
    head, inputs = _head_and_inputs(preset, share)
    assert stage_flops(head, inputs) == _old_stage_flops(head, inputs)


def test_stage_flops_code_counts_at_a_tiny_size() -> None:
    """Printed by the pre-refactor ``stage_flops`` (commit 04d5b58) for the code preset,
    2 images x 6 texts, C = 32, 5 sparse / 9 dense words, distinct dense captions."""
    head, inputs = _head_and_inputs()
    assert stage_flops(head, inputs) == {
        "image": 359072,
        "selection": 301056,
        "[CLS] column": 10752,
        "alignment": 6601728,
        "HRPA": 0,
        "other": 0,
    }


def test_stage_time_section_reports_time_and_flops_per_stage() -> None:
    s = BenchSettings.quick_settings("cpu")
    s.eval_images, s.eval_texts, s.embed_size = 2, 4, 32
    st = stage_time_section(s, lambda m: None)
    assert (st["images"], st["texts"], st["lengths"]) == (2, 4, "fixed:8,24")
    rows = {r["stage"]: r for r in st["rows"]}
    assert list(rows) == [*STAGES, "total"]
    parts = [rows[stage] for stage in STAGES]
    assert sum(r["time_share"] for r in parts) == pytest.approx(1.0)
    assert sum(r["flop_share"] for r in parts) == pytest.approx(1.0)
    assert rows["total"]["mflop_per_pair"] == pytest.approx(sum(r["mflop_per_pair"] for r in parts))
    for r in st["rows"]:
        assert (r["gflop_s"] is None) == (r["mflop_per_pair"] == 0), r
    assert rows["HRPA"]["gflop_s"] is None and rows["alignment"]["gflop_s"] > 0

    goal = {
        "rounds": 1,
        "eval_repeat1": {"loop": 1.0, "batched": 2.0, "ratio": 2.0, "round_ratios": [2.0],
                         "max_abs_diff": 0.0},
        "eval_repeat5": {"loop": 1.0, "batched": 2.0, "ratio": 2.0, "round_ratios": [2.0],
                         "max_abs_diff": 0.0},
        "train": {"batch": 4, "loop": {"seconds": 2.0, "peak_mb": 1.0},
                  "batched": {"seconds": 1.0, "peak_mb": 1.0}, "round_ratios": [2.0]},
    }  # fmt: skip
    meta = {k: "x" for k in ("device", "versions", "command", "date", "lengths_source", "load")}
    micro = {"rows": [], "skipped": {}}
    flops = [{"stage": "image", "code distinct": 1.0}]
    text = render_report(s, goal, [], micro, meta, flops, st)
    head = "## Where the time goes (code preset, distinct dense captions)"
    assert head in text and text.index("## FLOPs per pair by stage") < text.index(head)
    assert "exclusive" in text and "matrix products only" in text
    assert "| HRPA |" in text and "| - |" in text
    assert set(st["floors"]) == {"eval_repeat1", "eval_repeat5", "train"}
    assert all(f["seconds"] > 0 and f["calls"] > 0 for f in st["floors"].values())
    assert text.index(head) < text.index("## The product floor of each goal")
    doc = report_json(s, goal, [], micro, meta, flops, st)
    assert '"stage_time"' in doc and '"gflop_s": null' in doc


def test_stage_time_section_states_the_rate_the_10x_goal_needs() -> None:
    from seps.bench.latency import _stage_time_lines

    st = {
        "images": 1,
        "texts": 1,
        "lengths": "fixed:20,120",
        "gemm_gflop_s": 100.0,
        "rows": [
            {"stage": "alignment", "ms": 9.0, "time_share": 0.9, "mflop_per_pair": 10.0,
             "flop_share": 1.0, "gflop_s": 40.0},
            {"stage": "total", "ms": 10.0, "time_share": 1.0, "mflop_per_pair": 10.0,
             "flop_share": 1.0, "gflop_s": 36.0},
        ],
    }  # fmt: skip
    text = "\n".join(_stage_time_lines(st, loop_pairs_s=500.0))
    # 10 x 500 pairs/s x 10 MFLOP/pair = 50 GFLOP/s, half the reference product's 100
    assert "reaches 36 (36% of it)" in text
    assert "asks for 5000 pairs/s, that is 50 GFLOP/s" in text and "50% of the reference" in text
    assert "10x goal" not in "\n".join(_stage_time_lines(st))


def test_gemm_rate_is_positive_on_the_cpu() -> None:
    from seps.bench.sections import gemm_rate

    assert gemm_rate("cpu", 1, n=64) > 0
