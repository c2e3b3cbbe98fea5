"""``seps-bench bench`` and the benchmark workloads (not timed: the numbers are not checked)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from seps import bench
from seps.cli import main


def test_caption_lengths_real_and_histogram(monkeypatch) -> None:
    lengths, source = bench.caption_lengths("dense", 50, seed=1)
    assert len(lengths) == 50 and all(20 <= n <= 300 for n in lengths)
    monkeypatch.setattr(bench, "_DATA_DIRS", (Path("/nonexistent"),))
    lengths, source = bench.caption_lengths("sparse", 200, seed=1)
    assert source.endswith("f30k_lengths.json")
    hist = json.loads(Path(source).read_text())
    assert sum(hist["sparse"].values()) == 5000 and sum(hist["dense"].values()) == 1000
    assert 10 < sum(lengths) / len(lengths) < 17  # Flickr30K captions: 13.5 words on average


def test_make_inputs_shapes_and_dense_repeat() -> None:
    img, cap, lens, long_cap, long_lens = bench.make_inputs(
        "swin224", 3, 7, embed_size=16, dense_repeat=5
    )
    assert img.shape == (3, 49, 16) and cap.shape[0] == 7 and long_cap.shape[0] == 7
    assert int(lens.max()) == cap.shape[1] and int(long_lens.max()) == long_cap.shape[1]
    assert torch.equal(long_cap[0], long_cap[4]) and not torch.equal(long_cap[4], long_cap[5])
    img, *_ = bench.make_inputs("vit384", 1, 2, embed_size=8, lengths="fixed:3,4")
    assert img.shape == (1, 577, 8)


def test_quick_report_writes_markdown_and_png(tmp_path: Path) -> None:
    s = bench.BenchSettings.quick_settings("cpu", ("loop", "batched", "triton"))
    s.geometries = ("swin224",)
    md = bench.run_report(s, tmp_path, "seps-bench bench --report --quick", lambda m: None)
    text = md.read_text()
    for needle in ("## Goals", "Training step", "single-difference", "code+fused",
                   "Speed-up against loop", "torch", "swin224"):  # fmt: skip
        assert needle in text, needle
    if not torch.cuda.is_available():
        assert "`triton` skipped" in text
    assert "Flickr30K-size evaluation (4 images x 20 texts" in text and "measured)." in text
    assert (tmp_path / "latency.png").stat().st_size > 1000
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # atomic writes


def test_cli_help_explains_options(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    for opt in ("--report", "--quick", "--device", "--impls", "--eval-shard", "--threads",
                "--repeats", "--out"):  # fmt: skip
        assert opt in out


def test_cli_rejects_unknown_impl() -> None:
    assert main(["bench", "--report", "--quick", "--impls", "fast"]) != 0


def _sleepers(times: dict[str, list[float]], calls: list[str]):
    """``fn(name)``: a callable that logs ``name`` in ``calls``, sleeps the next of
    ``times[name]`` and returns ``name`` (a stand-in for a timed implementation)."""
    its = {k: iter(v) for k, v in times.items()}

    def fn(name: str):
        def run() -> str:
            calls.append(name)
            time.sleep(next(its[name]))
            return name

        return run

    return fn


def test_measure_alternating_interleaves_and_keeps_the_best() -> None:
    calls: list[str] = []
    fn = _sleepers({"a": [0.06, 0.01, 0.03], "b": [0.005, 0.04, 0.01]}, calls)

    res = bench.measure_alternating({"a": fn("a"), "b": fn("b")}, rounds=3)
    assert calls == ["a", "b"] * 3
    assert res["a"]["seconds"] == min(res["a"]["samples"]) and len(res["a"]["samples"]) == 3
    assert res["a"]["seconds"] >= 0.01 and res["b"]["seconds"] >= 0.005
    # The slow first round is kept as a sample.
    assert res["a"]["samples"][0] > res["a"]["samples"][1]
    assert res["b"]["out"] == "b"
    ratios = bench._round_ratios(res["a"], res["b"])
    assert ratios[0] > 1 > ratios[1]


def test_full_eval_is_extrapolated_on_cpu_at_full_size() -> None:
    s = bench.BenchSettings(device="cpu")
    goal = {"eval_repeat5": {"batched": 10_000.0}}
    out = bench.full_eval_section(s, goal, lambda m: None)
    assert out == {"images": 1000, "texts": 5000, "seconds": 500.0, "measured": False}


def test_measure_interleaved_sums_parts_and_averages_whole_calls() -> None:
    calls: list[str] = []
    fn = _sleepers({"p0": [0.02, 0.01], "p1": [0.03, 0.01], "w": [0.01, 0.03] * 2}, calls)

    res = bench.measure_interleaved([fn("p0"), fn("p1")], fn("w"), rounds=2)
    # Each part is followed by one whole call, round after round.
    assert calls == ["p0", "w", "p1", "w"] * 2
    slow, fast = res["slow"], res["fast"]
    assert len(slow["samples"]) == len(fast["samples"]) == 2
    # Per round: the sum of the parts (>= 50 ms, then >= 20 ms) and the mean of the
    # whole calls (>= 20 ms each round).
    assert slow["samples"][0] >= 0.05 and 0.02 <= slow["samples"][1] < 0.05
    assert all(0.02 <= t < 0.035 for t in fast["samples"])
    assert slow["seconds"] == sum(slow["samples"]) / 2
    assert slow["out"] == ["p0", "p1"] and fast["out"] == "w"
    ratios = bench._round_ratios(slow, fast)
    assert ratios[0] > ratios[1]
