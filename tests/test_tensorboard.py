"""TensorBoard event files: every training writes them under its folder, they hold the
numbers its history holds, a resumed run shows each step once, and ``--no-tensorboard``
(or a missing package) writes none and changes no record."""

from __future__ import annotations

import json
import sys

import pytest
from ablation_roots import make_ablation_root
from test_runner import MATRIX, PROFILE, _comparable
from test_train import HEAD, tiny

from seps.cli import main
from seps.train import hooks_tensorboard, train
from seps.train.hooks_tensorboard import TENSORBOARD_DIR, epoch_scalars, step_scalars

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
plugin_event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.plugin_event_accumulator"
)
tensor_util = pytest.importorskip("tensorboard.util.tensor_util")
SummaryWriter = pytest.importorskip("torch.utils.tensorboard").SummaryWriter


def _events(folder, reader=event_accumulator) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of the event files in ``folder``. ``reader``: the
    accumulator module; TensorBoard's own (``plugin_event_accumulator``) drops what a
    later file's purge step says a killed process logged after its checkpoint (the
    older ``event_accumulator`` purges no tensor events)."""
    acc = reader.EventAccumulator(str(folder), size_guidance={"tensors": 0})
    acc.Reload()
    out: dict[str, dict[int, float]] = {}
    for tag in acc.Tags()["tensors"]:
        events = acc.Tensors(tag)
        steps = [e.step for e in events]
        assert len(steps) == len(set(steps)), f"{tag}: a step shown twice"
        out[tag] = {e.step: tensor_util.make_ndarray(e.tensor_proto).item() for e in events}
    return out


def _expected(result) -> dict[str, dict[int, float]]:
    """What the files must hold: every value of the history, at its global step."""
    n = result["train_config"]["max_steps_per_epoch"]
    names = ["head+projections", "backbones"][: len(result["history"][0]["lr"])]
    want: dict[str, dict[int, float]] = {}
    for rec in result["history"]:
        for logged in rec["steps_log"]:
            for tag, v in step_scalars(logged):
                want.setdefault(tag, {})[rec["epoch"] * n + logged["step"]] = v
        for tag, v in epoch_scalars(rec, names):
            want.setdefault(tag, {})[rec["epoch"] * n + n - 1] = v
    return want


def test_event_files_hold_the_values_of_the_history(synth, tmp_path):
    result = train(tiny(synth, tmp_path / "run"), HEAD)
    folder = tmp_path / "run" / TENSORBOARD_DIR
    assert list(folder.glob("events.out.tfevents.*"))
    got = _events(folder)
    assert got == _expected(result)
    # The main curves, spelled out from the record (float64 both sides: equal, not close).
    first, last = result["history"][0], result["history"][-1]
    assert got["step/loss"][1] == first["steps_log"][1]["loss"]
    assert got["step/align_hardest"][0] == first["steps_log"][0]["align_hardest"]
    assert got["epoch/loss"][5] == last["loss"]
    assert got["epoch/grad_norm"][2] == first["grad_norm"]
    assert got["epoch/lr/head+projections"][5] == last["lr"][0]
    assert got["val/rsum"][5] == last["val"]["rsum"]
    assert got["val/t2i_r1"][2] == first["val"]["t2i_r1"]
    assert got["time/seconds_per_step"][2] == first["seconds"] / first["steps"]
    assert set(got["epoch/keep_ratio/sparse"]) == {2, 5}
    assert any(tag.startswith("epoch/grad_share/") for tag in got)


def test_a_resumed_run_shows_each_step_once_with_the_resumed_values(synth, tmp_path):
    cfg = tiny(synth, tmp_path / "run")
    folder = tmp_path / "run" / TENSORBOARD_DIR
    train(cfg, HEAD, stop_after_epoch=0)
    (first,) = folder.glob("events.out.tfevents.*")
    assert _events(folder)["step/loss"].keys() == {0, 1, 2}
    # As if the process had been killed after logging epoch 1's first step (global step 3)
    # but before its checkpoint: an event the resumed run must purge.
    with SummaryWriter(str(folder)) as w:
        w.add_scalar("step/loss", -1.0, 3, new_style=True, double_precision=True)
    (orphan,) = set(folder.glob("events.out.tfevents.*")) - {first}
    orphan.rename(folder / f"{first.name}-killed")  # read after the first, before the next
    result = train(cfg, HEAD, resume=True)
    assert len(list(folder.glob("events.out.tfevents.*"))) == 3
    assert _events(folder, plugin_event_accumulator) == _expected(result)
    again = train(cfg, HEAD, resume=True)  # complete: evaluates only, logs nothing
    assert again["metrics"] == result["metrics"]
    assert len(list(folder.glob("events.out.tfevents.*"))) == 3


def test_without_the_package_the_run_says_so_once_and_trains(synth, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    monkeypatch.setattr(hooks_tensorboard, "_said_missing", False)
    result = train(tiny(synth, tmp_path / "a", epochs=1), HEAD)
    train(tiny(synth, tmp_path / "b", epochs=1), HEAD)
    err = capsys.readouterr().err
    assert err.count("tensorboard is not installed") == 1
    assert "metrics" in result and not (tmp_path / "a" / TENSORBOARD_DIR).exists()


def _run_cli(root, synth, results, *extra) -> int:
    return main(["run", "mini", "--ablations", str(root), "--profile", "tiny", "--only", "code",
                 "--results", str(results), "--data-path", str(synth), "--device", "cpu",
                 "--no-report", "--no-progress", *extra])  # fmt: skip


def _records(results):
    return {f.name: _comparable(json.loads(f.read_text())) for f in (results / "mini").glob("*")}


def test_run_writes_event_files_in_the_training_folder_and_no_tensorboard_none(synth, tmp_path):
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX}, profiles=PROFILE)
    assert _run_cli(root, synth, tmp_path / "on") == 0
    assert _run_cli(root, synth, tmp_path / "off", "--no-tensorboard") == 0
    (work,) = [p for p in (tmp_path / "on" / "_work").iterdir() if p.is_dir() and "-s0" in p.name]
    (record,) = (tmp_path / "on" / "mini").glob("*.json")
    history = json.loads(record.read_text())["history"]
    got = _events(work / TENSORBOARD_DIR)
    assert got["epoch/loss"] == {1: history[0]["loss"], 3: history[1]["loss"]}
    assert not list((tmp_path / "off").rglob(TENSORBOARD_DIR))
    # Logging is no part of the run: the same records (keys, metrics, history) either way.
    assert _records(tmp_path / "on") == _records(tmp_path / "off")


def test_train_no_tensorboard_writes_none(synth, tmp_path):
    argv = ["train", "--data-path", str(synth), "--image-size", "32", "--epochs", "1",
            "--batch-size", "8", "--max-steps-per-epoch", "2", "--val-images", "0",
            "--set", "train.vocab_size=300", "--set", "train.max_dense_words=48",
            "--no-progress"]  # fmt: skip
    assert main([*argv, "--no-tensorboard", "--out", str(tmp_path / "off")]) == 0
    assert (tmp_path / "off" / "result.json").is_file()
    assert not (tmp_path / "off" / TENSORBOARD_DIR).exists()
    assert main([*argv, "--out", str(tmp_path / "on")]) == 0
    assert list((tmp_path / "on" / TENSORBOARD_DIR).glob("events.out.tfevents.*"))


def test_campaign_hands_no_tensorboard_to_each_run(tmp_path, capsys):
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX}, profiles=PROFILE)
    (tmp_path / "c.yaml").write_text("profile: tiny\nsteps:\n  - {matrix: mini, seeds: [0]}\n")
    argv = ["campaign", str(tmp_path / "c.yaml"), "--ablations", str(root), "--dry-run"]
    assert main([*argv, "--no-tensorboard"]) == 0
    assert "--no-tensorboard" in capsys.readouterr().out
    assert main(argv) == 0
    assert "--no-tensorboard" not in capsys.readouterr().out
