"""The ablation runner: store, skipping, failures, dry run, interruption and resume, Ray."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_recipe import make_tiny_recipe

from seps.cli import main
from seps.experiments.definitions import load_matrix, load_profile
from seps.runs.runner import (
    plan,
    read_record,
    run_matrix,
    stale_message,
    work_dir_version,
)
from seps.versioning.version import VERSION_KEY, code_version

REPO_ABLATIONS = Path(__file__).resolve().parents[1] / "ablations"

PROFILE = """
tiny:
  description: test-sized
  seeds: [0]
  head: {embed_size: 32}
  train: {synth_images: 60, image_size: 32, epochs: 2, batch_size: 8, max_steps_per_epoch: 2,
          val_images: 0, backbone_lr_mult: 1.0, vocab_size: 300, max_dense_words: 48}
"""

MATRIX = """
name: mini
description: two variants and a shared-training evaluation variant
baseline: code
runs:
  - {id: code, preset: code}
  - {id: code+hrpa, preset: code, set: {hrpa: mean_topk}}
  - {id: code-candidate, preset: code, train: {dense_source: candidate}}
"""


@pytest.fixture()
def root(tmp_path):
    r = tmp_path / "ablations"
    (r / "matrices").mkdir(parents=True)
    shutil.copy(REPO_ABLATIONS / "differences.yaml", r / "differences.yaml")
    (r / "profiles.yaml").write_text(PROFILE)
    (r / "matrices" / "mini.yaml").write_text(MATRIX)
    (r / "matrices" / "broken.yaml").write_text(
        MATRIX.replace("name: mini", "name: broken")
        + "  - {id: bad, preset: code, train: {backbone: no_such_backbone_xyz}}\n"
    )
    return r


def _run(root, results, synth, matrix="mini", **kw):
    return run_matrix(
        load_matrix(matrix, root),
        load_profile("tiny", root),
        [0],
        results,
        progress=False,
        data_path=str(synth),
        device="cpu",
        **kw,
    )


def test_runs_are_stored_skipped_and_share_training(root, synth, tmp_path):
    results = tmp_path / "results"
    records = _run(root, results, synth)
    assert [r["run_id"] for r in records] == ["code", "code+hrpa", "code-candidate"]
    assert all(r["status"] == "done" for r in records)
    by_id = {r["run_id"]: r for r in records}
    # The candidate-protocol run shares the code run's training: same history, other metrics.
    assert by_id["code-candidate"]["train_key"] == by_id["code"]["train_key"]
    assert by_id["code-candidate"]["history"] == by_id["code"]["history"]
    assert by_id["code-candidate"]["dense_source"] == "candidate"
    files = sorted((results / "mini").glob("*.json"))
    assert len(files) == 3
    before = {f: f.read_bytes() for f in files}
    again = _run(root, results, synth)
    assert [r["key"] for r in again] == [r["key"] for r in records]
    assert {f: f.read_bytes() for f in files} == before, "completed runs must be skipped"


def test_failed_run_is_recorded_and_does_not_stop_others(root, synth, tmp_path):
    results = tmp_path / "results"
    records = _run(root, results, synth, matrix="broken")
    status = {r["run_id"]: r["status"] for r in records}
    assert status == {
        "code": "done",
        "code+hrpa": "done",
        "code-candidate": "done",
        "bad": "failed",
    }
    bad = next(r for r in records if r["run_id"] == "bad")
    assert "no_such_backbone_xyz" in bad["error"] and "Traceback" in bad["traceback"]
    planned = plan(
        load_matrix("broken", root), load_profile("tiny", root), [0], results, data_path=str(synth)
    )
    p = next(p for p in planned if p.run.id == "bad")
    stamp = read_record(results / "broken" / p.record_name)["started"]
    _run(root, results, synth, matrix="broken")
    assert read_record(results / "broken" / p.record_name)["started"] == stamp
    _run(root, results, synth, matrix="broken", retry_failed=True)
    assert read_record(results / "broken" / p.record_name)["started"] != stamp


def test_dry_run_lists_resolved_runs(root, tmp_path, capsys):
    assert (
        main(
            [
                "run",
                "mini",
                "--ablations",
                str(root),
                "--profile",
                "tiny",
                "--results",
                str(tmp_path / "r"),
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "code+hrpa" in out and "hrpa=mean_topk" in out and "dense_source=candidate" in out
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_killed_matrix_resumes_without_losing_or_repeating_runs(root, synth, tmp_path):
    results = tmp_path / "interrupted"
    cmd = [
        sys.executable,
        "-m",
        "seps.cli",
        "run",
        "mini",
        "--ablations",
        str(root),
        "--profile",
        "tiny",
        "--results",
        str(results),
        "--data-path",
        str(synth),
        "--device",
        "cpu",
        "--no-report",
        "--no-progress",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 900
    while time.time() < deadline and not list((results / "mini").glob("*.json")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = {f.name: f.read_bytes() for f in (results / "mini").glob("*.json")}
    assert 1 <= len(done_before) < 3, "the kill should land mid-matrix"
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    after = {f.name: f.read_bytes() for f in (results / "mini").glob("*.json")}
    assert len(after) == 3
    for name, blob in done_before.items():
        assert after[name] == blob, "a completed run was done twice"
    reference = _run(root, tmp_path / "uninterrupted", synth)
    got = {json.loads(b)["run_id"]: json.loads(b) for b in after.values()}
    for rec in reference:
        assert got[rec["run_id"]]["metrics"] == rec["metrics"]
        assert len(got[rec["run_id"]]["history"]) == 2


@pytest.mark.slow
def test_ray_backend_runs_in_local_ray(root, synth, tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'seps-bench[ray]'")
    results = tmp_path / "ray"
    records = run_matrix(
        load_matrix("mini", root),
        load_profile("tiny", root),
        [0],
        results,
        progress=False,
        backend="ray",
        only="code,code+hrpa",
        data_path=str(synth),
        device="cpu",
    )
    assert sorted(r["run_id"] for r in records) == ["code", "code+hrpa"]
    assert all(r["status"] == "done" for r in records)
    local = {r["run_id"]: r for r in _run(root, tmp_path / "local", synth, only="code,code+hrpa")}
    for r in records:
        # The same configs and keys as a local run. A Ray worker gets one thread (the task
        # asks for one CPU), the local run all of torch's, so float rounding differs in the
        # last bits: the losses agree to 1e-5 (measured: 4e-8), and the rSum within one
        # rank move of one image query on the 6 test images (16.7).
        here = local[r["run_id"]]
        assert r["key"] == here["key"]
        assert r["environment"]["threads"] == 1
        ray_losses = [h["loss"] for h in r["history"]]
        assert len(ray_losses) == len(here["history"]) == 2
        assert ray_losses == pytest.approx([h["loss"] for h in here["history"]], rel=1e-5)
        assert r["metrics"]["rsum"] == pytest.approx(here["metrics"]["rsum"], abs=16.7)


def _record_of(results, matrix, run_id):
    files = [f for f in (results / matrix).glob("*.json") if f.name.startswith(run_id + "-")]
    assert len(files) == 1, files
    return files[0]


def test_corrupt_record_is_named_kept_and_redone_only_when_asked(root, synth, tmp_path, capsys):
    results = tmp_path / "results"
    _run(root, results, synth, only="code")
    path = _record_of(results, "mini", "code")
    path.write_bytes(path.read_bytes()[:200])  # truncated, as by a full disk
    broken = path.read_bytes()
    said = []
    out = _run(root, results, synth, only="code", say=said.append)
    assert out == [] and [e.path for e in out.unreadable] == [path]
    assert path.read_bytes() == broken, "an unreadable record must never be overwritten"
    assert any(path.name in s and "unreadable record" in s for s in said)
    args = ["run", "mini", "--ablations", str(root), "--profile", "tiny", "--results",
            str(results), "--data-path", str(synth), "--device", "cpu", "--only", "code",
            "--no-progress", "--reports", str(tmp_path / "reports")]  # fmt: skip
    capsys.readouterr()
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "1 unreadable" in captured.out and f"{path.name}: unreadable record" in captured.out
    report = (tmp_path / "reports" / "mini.md").read_text()
    failed = report.split("## Failed runs")[1].split("##")[0]
    assert "unreadable" in failed and path.name in failed
    assert main([*args, "--retry-failed"]) == 0
    assert path.with_name(path.name + ".corrupt").read_bytes() == broken
    assert read_record(path)["status"] == "done"


def test_diverged_run_is_recorded_with_step_and_count(root, synth, tmp_path):
    (root / "matrices" / "hot.yaml").write_text(
        "name: hot\nruns:\n  - {id: code, preset: code}\n"
        "  - {id: code-lr, preset: code, train: {lr: 1.0e+30}}\n"
    )
    results = tmp_path / "results"
    records = {r["run_id"]: r for r in _run(root, results, synth, matrix="hot")}
    rec = records["code-lr"]
    assert rec["status"] == "diverged" and rec[VERSION_KEY] == code_version()
    assert rec["divergence"]["nonfinite_steps"] == rec["nonfinite_steps"] >= 1
    assert rec["divergence"]["first_nonfinite"]["epoch"] == 0
    assert "non-finite" in rec["error"] and len(rec["history"]) == 1  # epoch 0 trained
    from seps.report import write_report

    report = write_report("hot", results, tmp_path / "reports", root=root).read_text()
    failed = report.split("## Failed runs")[1].split("##")[0]
    assert "| code-lr" in failed and "diverged" in failed and "non-finite steps" in failed


def test_environment_failures_are_not_final(root, synth, tmp_path, monkeypatch):
    results = tmp_path / "results"
    import seps.train as st

    real = st.train

    def oom(*args, **kwargs):
        raise MemoryError("out of memory")

    monkeypatch.setattr(st, "train", oom)
    (rec,) = _run(root, results, synth, only="code")
    assert rec["status"] == "failed" and rec["failure_kind"] == "environment"
    assert rec[VERSION_KEY] == code_version()
    monkeypatch.setattr(st, "train", real)
    (rec,) = _run(root, results, synth, only="code")  # no --retry-failed needed
    assert rec["status"] == "done"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_run_on_missing_cuda_stops_before_any_record(root, tmp_path, capsys):
    results = tmp_path / "r"
    code = main(["run", "mini", "--ablations", str(root), "--profile", "tiny", "--results",
                 str(results), "--device", "cuda", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--device" in err and "CUDA is not available" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (results / "mini").exists()


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--seeds", "0,one"], "--seeds"),
        (["--seeds", ","], "--seeds"),
        (["--results", "FILE/sub"], "--results"),
        (["--reports", "FILE/sub"], "--reports"),
    ],
)
def test_run_bad_options_give_one_line(root, tmp_path, capsys, args, names):
    blocker = tmp_path / "FILE"
    blocker.write_text("a file where a folder is expected")
    args = [a.replace("FILE", str(blocker)) for a in args]
    base = ["run", "mini", "--ablations", str(root), "--profile", "tiny", "--device", "cpu",
            "--results", str(tmp_path / "r"), "--no-progress"]  # fmt: skip
    try:
        code = main([*base, *args])
    except SystemExit as exc:  # argparse's own one-line error
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and names in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("seps-bench")


@pytest.mark.slow
def test_two_processes_on_one_store_train_each_run_once(root, synth, tmp_path):
    results = tmp_path / "shared"
    cmd = [sys.executable, "-m", "seps.cli", "run", "mini", "--ablations", str(root),
           "--profile", "tiny", "--results", str(results), "--data-path", str(synth),
           "--device", "cpu", "--no-report", "--no-progress"]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    ran = [line.split(":")[0] for out in outs for line in out.splitlines() if ": done in" in line]
    assert sorted(ran) == ["code s0", "code+hrpa s0", "code-candidate s0"], outs
    assert len(list((results / "mini").glob("*.json"))) == 3
    assert not list(results.rglob("*.lock")) and not list(results.rglob("*.tmp"))


_TIMING = ("seconds", "train_pairs_per_second")  # per epoch


def _comparable(rec):
    """A record without what depends on the clock or the process (times, throughput,
    peak memory, the machine's load and what of the run the process did) or on where
    the store lives (the work folders in the train config)."""
    keep = {k: v for k, v in rec.items() if "second" not in k and k != "started"}
    keep.pop("environment", None)
    keep.pop("machine_load", None)
    keep.pop("peak_memory_bytes", None)
    keep["train_config"] = {
        k: v for k, v in rec["train_config"].items() if k not in ("out_dir", "cache_dir")
    }
    keep["history"] = [
        {k: v for k, v in h.items() if k not in _TIMING} for h in rec.get("history") or []
    ]
    return keep


@pytest.mark.slow
def test_kills_during_training_evaluation_and_record_write_lose_nothing(root, synth, tmp_path):
    def cmd(name):
        return [sys.executable, "-m", "seps.cli", "run", "mini", "--ablations", str(root),
                "--profile", "tiny", "--results", str(tmp_path / name), "--reports",
                str(tmp_path / f"{name}-reports"), "--data-path", str(synth), "--device",
                "cpu", "--no-progress"]  # fmt: skip

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SEPS_BENCH_KILL_AT", None)
    # tiny: 2 epochs x 2 steps. Step 3 is inside epoch 1 of the first training; the
    # evaluation and the record write of the first run come after it.
    for point in ("train_step:3", "eval:1", "record_write:1"):
        killed = subprocess.run(
            cmd("killed"), env={**env, "SEPS_BENCH_KILL_AT": point}, capture_output=True
        )
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-2000:])
    assert list((tmp_path / "killed").rglob(".*.tmp")), "the record-write kill leaves a temp"
    assert subprocess.run(cmd("killed"), env=env, capture_output=True).returncode == 0
    assert subprocess.run(cmd("clean"), env=env, capture_output=True).returncode == 0

    def records(name):
        files = sorted((tmp_path / name / "mini").glob("*"))
        return {f.name: _comparable(json.loads(f.read_text())) for f in files}

    assert records("killed") == records("clean") and len(records("clean")) == 3

    def report(name):
        folder = tmp_path / f"{name}-reports"
        text = (folder / "mini.md").read_text().split("## Cost")[0]
        return text, {p.name: p.read_bytes() for p in sorted(folder.glob("*.png"))}

    assert report("killed") == report("clean")
    leftovers = [p for p in (tmp_path / "killed").rglob("*") if p.suffix in (".tmp", ".lock")]
    leftovers += list((tmp_path / "killed-reports").glob(".*"))
    assert leftovers == []


def test_run_refuses_a_users_folder_as_synthetic_target_before_training(root, tmp_path, capsys):
    user = tmp_path / "f30k"
    user.mkdir()
    (user / "train_caps.txt").write_text("mine\n")
    code = main(["run", "mini", "--ablations", str(root), "--profile", "tiny", "--device",
                 "cpu", "--results", str(tmp_path / "r"), "--data-path", str(user)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--dataset f30k" in err and len(err.strip().splitlines()) == 1
    assert (user / "train_caps.txt").read_text() == "mine\n" and len(list(user.iterdir())) == 1
    assert not list((tmp_path / "r").rglob("*.json"))


def test_stale_records_are_counted_kept_and_rerun_only_when_asked(
    root, synth, tmp_path, monkeypatch, capsys
):
    results = tmp_path / "results"
    (rec,) = _run(root, results, synth, only="code")
    assert rec["status"] == "done" and rec[VERSION_KEY] == code_version()
    path = _record_of(results, "mini", "code")
    old = path.read_bytes()

    import seps.cli.run
    import seps.runs.runner

    changed = "a" * 16
    for module in (seps.runs.runner, seps.cli.run):  # the code changed since
        monkeypatch.setattr(module, "code_version", lambda: changed)
    said = []
    out = _run(root, results, synth, only="code", say=said.append)
    assert path.read_bytes() == old and out.stale == [path]
    assert [s for s in said if "stale" in s] == [stale_message("mini", 1, rerun_stale=False)]
    args = ["run", "mini", "--ablations", str(root), "--profile", "tiny", "--results",
            str(results), "--data-path", str(synth), "--device", "cpu", "--only", "code",
            "--no-progress", "--no-report"]  # fmt: skip
    assert main([*args, "--dry-run"]) == 0
    assert "done (stale)" in capsys.readouterr().out

    assert main([*args, "--rerun-stale"]) == 0
    out = capsys.readouterr().out
    assert "1 stale record" in out and "training again" in out
    assert path.with_name(path.stem + ".stale.json").read_bytes() == old
    new = read_record(path)
    assert new["status"] == "done" and new[VERSION_KEY] == changed
    assert new["started"] != json.loads(old)["started"]
    # Trained again by this code, not only evaluated from the old code's checkpoints.
    work = Path(new["train_config"]["out_dir"])
    assert work_dir_version(work) == changed
    assert work_dir_version(f"{work}.stale") == rec[VERSION_KEY]
    assert [h["epoch"] for h in new["history"]] == [h["epoch"] for h in rec["history"]]
    assert new["history"][0]["seconds"] != rec["history"][0]["seconds"]

    again = _run(root, results, synth, only="code", rerun_stale=True, say=said.append)
    assert again.stale == [] and read_record(path) == new
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        [path.name, path.stem + ".stale.json"]
    )


@pytest.fixture()
def tiny_recipe(tmp_path, monkeypatch):
    """A test-sized pretraining recipe ``tiny-test`` built under ``tmp_path``."""
    import seps.train.pretrain as pretrain

    monkeypatch.chdir(tmp_path)  # the recipe's own synthetic draw goes under ./data
    monkeypatch.setitem(pretrain.RECIPES, "tiny-test", make_tiny_recipe())
    monkeypatch.setattr(pretrain, "DEFAULT_ROOT", tmp_path / "pretrained")
    return pretrain


def test_a_run_gives_the_same_numbers_whether_or_not_its_pretraining_was_cached(
    root, synth, tmp_path, tiny_recipe
):
    """The first run on a machine builds the recipe's backbones; that build seeds and
    draws from the global generators, so it must happen before the run seeds its own
    (seps.runs.prebuild), or the first run's model starts from other weights."""
    pretrain = tiny_recipe
    built_here = _run(root, tmp_path / "a", synth, only="code", pretrain="tiny-test")
    assert pretrain.is_complete(pretrain.pretrained_dir("tiny-test"))
    cached = _run(root, tmp_path / "b", synth, only="code", pretrain="tiny-test")
    assert [r["status"] for r in built_here + cached] == ["done", "done"]
    assert built_here[0]["metrics"] == cached[0]["metrics"]
    assert built_here[0]["history"][-1]["loss"] == cached[0]["history"][-1]["loss"]


def test_every_record_names_its_cpu_and_the_pretrained_weights_it_started_from(
    root, synth, tmp_path, tiny_recipe
):
    """Same configs and code give other bits on another CPU float path or from other
    pretrained weights (seps.experiments.provenance): both are stamped on the stored record."""
    import torch

    from seps.experiments.provenance import pretrain_fingerprint

    rec = _run(root, tmp_path / "a", synth, only="code", pretrain="tiny-test")[0]
    stored = read_record(next((tmp_path / "a" / "mini").glob("*.json")))
    folder = tiny_recipe.pretrained_dir("tiny-test")
    for r in (rec, stored):
        assert (
            r["environment"]["cpu"]["torch_capability"] == torch.backends.cpu.get_cpu_capability()
        )
        assert r["environment"]["cpu"]["model"]
        assert r["pretrain_fingerprint"] == pretrain_fingerprint(folder)
        assert len(r["pretrain_fingerprint"]) == 16
    # Other weights, another fingerprint.
    with (folder / "vision.safetensors").open("ab") as f:
        f.write(b"\0")
    assert pretrain_fingerprint(folder) != rec["pretrain_fingerprint"]
    # A run without a recipe starts from no pretraining, and still names its CPU.
    plain = _run(root, tmp_path / "b", synth, only="code")[0]
    assert plain["pretrain_fingerprint"] is None
    assert plain["environment"]["cpu"]["torch_capability"]


def test_a_failed_record_names_its_cpu_too(root, synth, tmp_path):
    rec = _run(root, tmp_path, synth, matrix="broken", only="bad")[0]
    assert rec["status"] == "failed"
    assert rec["environment"]["cpu"]["model"] and rec["pretrain_fingerprint"] is None


def test_a_matrix_resumed_on_another_machine_warns_once_before_it_runs(
    root, synth, tmp_path, float_path
):
    """Its runs pair with records of another machine; the user hears it before the runs,
    in one line (seps.experiments.provenance.resume_warning). Another CPU model is another machine,
    pinned float path or not (docs/across-machines.md)."""
    float_path("portable")
    results = tmp_path / "results"
    said: list[str] = []
    _run(root, results, synth, only="code", say=said.append)
    _run(root, results, synth, only="code,code+hrpa", say=said.append)
    assert not [s for s in said if "may differ" in s]  # same machine: nothing to say
    path = _record_of(results, "mini", "code")
    rec = json.loads(path.read_text())
    rec["environment"]["cpu"]["model"] = "Some Other CPU"
    path.write_text(json.dumps(rec))
    _run(root, results, synth, say=said.append)
    (line,) = [s for s in said if "may differ" in s]
    assert line.startswith(
        f"{results / 'mini'}: 1 run to make here beside 2 records that may differ in "
        "machine: 1 other, 0 not recorded."
    )


def test_a_pretraining_built_on_another_float_path_is_refused(tiny_recipe, float_path, monkeypatch):
    """A run pinned to one float path must not start from weights another path made."""
    from seps.experiments.provenance import cpu_identity
    from seps.runs.prebuild import BUILT_ON, build_checked
    from seps.runtime.float_path import FLOAT_PATHS

    float_path("native")  # natively another CPU model is another float path
    folder = build_checked("tiny-test", progress=False)
    stamp_file = folder / BUILT_ON
    assert json.loads(stamp_file.read_text()) == {"cpu": json.loads(json.dumps(cpu_identity()))}
    assert build_checked("tiny-test", progress=False) == folder  # same path: reused
    other = {"cpu": {**cpu_identity(), "model": "Some Other CPU"}}
    stamp_file.write_text(json.dumps(other))
    with pytest.raises(ValueError, match=r"built on another float path \(Some Other CPU .*; "
                       r"move the folder aside to build it here"):  # fmt: skip
        build_checked("tiny-test", progress=False)
    stamp_file.unlink()  # a build from before the stamp existed is used as it is...
    assert build_checked("tiny-test", progress=False) == folder
    import seps.runs.prebuild

    pinned = {**cpu_identity(), "overrides": {**FLOAT_PATHS["portable"]}}
    monkeypatch.setattr(seps.runs.prebuild, "cpu_identity", lambda: pinned)
    unknown = r"built before pretraining builds named their float path \(no built_on.json\)"
    with pytest.raises(ValueError, match=unknown):
        build_checked("tiny-test", progress=False)  # ...but not by a pinned run


def test_a_pinned_pretraining_is_reused_on_another_cpu_model_of_the_same_pin(
    tiny_recipe, float_path
):
    """The point of the default pin: weights built pinned on one CPU are what a pinned run
    on another CPU would build, so they are used, not rebuilt."""
    from seps.experiments.provenance import cpu_identity
    from seps.runs.prebuild import BUILT_ON, build_checked

    float_path("portable")
    folder = build_checked("tiny-test", progress=False)
    elsewhere = {"cpu": {**cpu_identity(), "model": "Some Other CPU"}}
    (folder / BUILT_ON).write_text(json.dumps(elsewhere))
    assert build_checked("tiny-test", progress=False) == folder
