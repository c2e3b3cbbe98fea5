"""``seps-bench bench`` and the benchmark workloads (not timed: the numbers are not checked)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from seps import bench
from seps.bench import sections, workloads
from seps.cli import bench as command
from seps.cli import main


def test_caption_lengths_come_from_the_captions_found_else_from_the_histogram(
    monkeypatch, tmp_path
) -> None:
    # A captions folder in the Flickr30K layout: its word counts are the pool.
    (tmp_path / "test_caps.txt").write_text("a b c\n\none two three four five\n")
    dense = [{"text": " ".join(["w"] * n)} for n in (40, 60)]
    (tmp_path / "f30k_test.jsonl").write_text("\n".join(json.dumps(d) for d in dense))
    monkeypatch.setattr(workloads, "_DATA_DIRS", (Path("/nonexistent"), tmp_path))
    lengths, source = bench.caption_lengths("sparse", 50, seed=1)
    assert source == str(tmp_path / "test_caps.txt") and set(lengths) == {3, 5}
    lengths, source = bench.caption_lengths("dense", 50, seed=1)
    assert source == str(tmp_path / "f30k_test.jsonl") and set(lengths) == {40, 60}
    # Without one, the stored histogram of the real counts.
    monkeypatch.setattr(workloads, "_DATA_DIRS", (Path("/nonexistent"),))
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


def test_quick_report_writes_markdown_and_png(tmp_path: Path, monkeypatch) -> None:
    def no_fresh_process(*args, **kwargs):
        raise AssertionError("quick mode must not start a fresh process per peak measurement")

    # One fresh interpreter per measured peak costs ~3 s on a 2-core CPU (13 of them
    # made the quick report take over a minute); quick mode measures in-process.
    monkeypatch.setattr(sections, "train_peak_rss_mb", no_fresh_process)
    s = bench.BenchSettings.quick_settings("cpu", ("loop", "batched", "triton"))
    s.geometries = ("swin224",)
    # One thread: at these tiny sizes, two OpenMP threads on cores that other jobs share
    # wait on each other (10 s instead of 3 s under load); the numbers are not checked.
    gpu_call = tmp_path / "gpu" / "h200-abc"  # a committed GPU check's files
    gpu_call.mkdir(parents=True)
    (gpu_call / "kernels.json").write_text(json.dumps({"env": {"gpu": "NVIDIA H200"}, "rows": [
        {"impl": "batched", "head_eval_speedup_vs_loop": 6.0, "sims_equal": True}]}))  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        md = bench.run_report(
            s,
            tmp_path,
            "seps-bench bench --report --quick",
            lambda m: None,
            json_path=tmp_path / "latency.json",
        )
    finally:
        torch.set_num_threads(threads)
    text = md.read_text()
    for needle in ("## Goals", "Training step", "single-difference", "code+fused",
                   "Speed-up against loop", "torch", "swin224"):  # fmt: skip
        assert needle in text, needle
    if not torch.cuda.is_available():
        assert "`triton` skipped" in text
    assert "Flickr30K-size evaluation (4 images x 20 texts" in text and "measured)." in text
    assert "in-process" in text
    assert "## On a GPU" in text and "### NVIDIA H200 (torch ?, CUDA ?): `h200-abc`" in text
    assert 'except the section "On a GPU"' in text  # the header says what it did not measure
    assert (tmp_path / "latency.png").stat().st_size > 1000
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # atomic writes
    doc = json.loads((tmp_path / "latency.json").read_text())
    assert doc["settings"]["geometries"] == ["swin224"] and doc["settings"]["quick"]
    assert doc["goal"]["train"]["loop"]["seconds"] > 0
    ratio = doc["goal"]["eval_repeat1"]["ratio"]
    assert f"{ratio:.2f}x" in text  # the same numbers as the markdown
    assert {r["geometry"] for r in doc["micro"]["rows"]} == {"swin224"}
    assert doc["micro"]["speedups"] and doc["presets"]
    assert doc["meta"]["versions"]["torch"] == torch.__version__
    assert "## Where the time goes (code preset, distinct dense captions)" in text
    assert [r["stage"] for r in doc["stage_time"]["rows"]][-1] == "total"


def test_cli_json_goes_to_the_report(captured, tmp_path) -> None:
    out = ["--out", str(tmp_path), "--json", str(tmp_path / "latency.json")]
    assert main(["bench", "--report", "--quick", "--device", "cpu", *out]) == 0
    assert captured[0].json_path == tmp_path / "latency.json"


def test_cli_json_without_report_is_pytest_benchmarks_json(monkeypatch, tmp_path) -> None:
    """The suites mode runs the suites shipped with the suite (benchmarks/ at the top of
    a checkout) and hands --json to pytest-benchmark as --benchmark-json."""
    import pytest as pytest_module

    from seps.experiments.ablation_index import shipped

    SUITES = shipped("benchmarks")

    seen: list[list[str]] = []
    monkeypatch.setattr(pytest_module, "main", lambda argv: seen.append(argv) or 0)
    assert main(["bench", "--json", str(tmp_path / "b.json"), "--", "-k", "topk"]) == 0
    argv = seen[0]
    assert argv[0] == str(SUITES) and (SUITES / "test_bench_head.py").is_file()
    assert f"--benchmark-json={tmp_path / 'b.json'}" in argv and argv[-2:] == ["-k", "topk"]


def test_cli_help_explains_options(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    for opt in ("--report", "--quick", "--device", "--impls", "--eval-shard", "--threads",
                "--repeats", "--reports"):  # fmt: skip
        assert opt in out


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
    ratios = bench.round_ratios(res["a"], res["b"])
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
    ratios = bench.round_ratios(slow, fast)
    assert ratios[0] > ratios[1]


# ------------------------------------------------------------ CLI options
@pytest.fixture
def captured(monkeypatch) -> list[bench.BenchSettings]:
    """The settings ``seps-bench bench --report`` hands to ``run_report``, which is
    replaced so that no benchmark runs (a CLI test must not take minutes)."""
    seen: list[bench.BenchSettings] = []

    def fake_run_report(s, out_dir, command_line, log, json_path=None):
        s.json_path = json_path  # what --json handed on, for the test to read
        seen.append(s)
        return Path(out_dir) / "latency.md"

    monkeypatch.setattr(command, "run_report", fake_run_report)
    return seen


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("seps-bench bench: error: "), err
    return err


def test_cli_unknown_implementation_is_one_clear_line(captured, capsys, tmp_path) -> None:
    argv = ["bench", "--report", "--quick", "--impls", "fast", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = _one_error_line(capsys)
    assert "--impls" in err and "fast" in err, err
    assert not captured  # refused before any work


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cli_cuda_without_cuda_is_one_clear_line(captured, capsys, tmp_path) -> None:
    assert main(["bench", "--report", "--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "--device" in _one_error_line(capsys)
    assert not captured  # refused before any work


def test_cli_default_device() -> None:
    from seps.cli import build_parser

    args = build_parser().parse_args(["bench"])
    assert args.device == ("cuda" if torch.cuda.is_available() else "cpu")


SHARD_EXPECTED = "IMAGESxTEXTS with two positive integers, e.g. 100x500"


@pytest.mark.parametrize("quick", [[], ["--quick"]])
@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--eval-shard", "0x-5", SHARD_EXPECTED),
        ("--eval-shard", "abc", SHARD_EXPECTED),
        ("--eval-shard", "10", SHARD_EXPECTED),
        ("--micro-shard", "0x-5", SHARD_EXPECTED),
        ("--micro-shard", "abc", SHARD_EXPECTED),
        ("--micro-shard", "10", SHARD_EXPECTED),
        ("--train-batches", "32,x", "comma-separated positive integers"),
        ("--train-batches", "0", "comma-separated positive integers"),
        ("--train-batches", ",", "comma-separated positive integers"),
        ("--repeats", "0", "a positive integer"),
        ("--repeats", "abc", "a positive integer"),
        ("--threads", "-2", "a positive integer"),
    ],
)
def test_cli_invalid_sizes_are_one_clear_line(
    captured, capsys, tmp_path, quick, option, value, expected
) -> None:
    argv = ["bench", "--report", *quick, option, value, "--out", str(tmp_path)]
    assert main(argv) == 2
    err = _one_error_line(capsys)
    assert option in err and repr(value) in err and expected in err, err
    assert not captured


def test_cli_quick_starts_from_quick_settings_and_applies_given_sizes(captured, tmp_path) -> None:
    out = ["--out", str(tmp_path)]
    assert main(["bench", "--report", "--quick", "--device", "cpu", *out]) == 0
    quick = bench.BenchSettings.quick_settings("cpu")
    assert captured[-1] == quick
    # Implementations whose set-up (torch.compile, Triton) would dominate a quick run are
    # left out, and the report says so.
    assert set(quick.impls) == {"loop", "batched"}
    assert set(quick.not_run) == {"compiled", "triton"}
    assert all("--impls" in why for why in quick.not_run.values())

    sizes = ["--eval-shard", "3x7", "--micro-shard", "2X5", "--train-batches", "2,3"]
    sizes += ["--repeats", "2", "--geometries", "swin224", "--impls", "compiled"]
    assert main(["bench", "--report", "--quick", "--device", "cpu", *sizes, *out]) == 0
    s = captured[-1]
    assert s.quick and s.embed_size == quick.embed_size and s.full_eval == quick.full_eval
    assert (s.eval_images, s.eval_texts, s.micro_images, s.micro_texts) == (3, 7, 2, 5)
    assert s.train_batches == (2, 3) and s.repeats == 2 and s.geometries == ("swin224",)
    assert s.impls == ("compiled",) and not s.not_run  # named, so it runs

    assert main(["bench", "--report", "--device", "cpu", *out]) == 0
    assert captured[-1] == bench.BenchSettings(device="cpu")  # full defaults


def test_cli_help_states_full_and_quick_defaults(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("100x500", "4x10", "16x128", "2x6", "32,64,128", "vit224,swin224", "compiled"):
        assert text in out, text


def test_quick_micro_section_names_what_it_did_not_run() -> None:
    s = bench.BenchSettings.quick_settings("cpu")
    s.geometries = ()
    skipped = bench.micro_section(s, lambda m: None)["skipped"]
    assert "compiled" in skipped and "torch.compile" in skipped["compiled"]


def test_cli_unwritable_outputs_are_refused_before_any_measurement(captured, capsys, tmp_path):
    a_file = tmp_path / "latency.md"
    a_file.write_text("mine\n")
    for argv, named in (
        (["bench", "--report", "--quick", "--reports", str(a_file)], "--reports"),
        (["bench", "--report", "--quick", "--json", str(tmp_path)], "--json"),
    ):
        assert main(argv) == 2
        assert named in _one_error_line(capsys)
    assert captured == [] and a_file.read_text() == "mine\n"  # nothing measured
