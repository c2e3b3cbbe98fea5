"""Checkpoints are read as data only: a pickle that calls a function is refused, unrun."""

from __future__ import annotations

import argparse
import collections
import os

import pytest
import torch

from seps.cli import main
from seps.io.safe_files import UnsafeFileError, load_tensor_json, save_tensor_json
from seps.train import CHECKPOINT_FORMAT, load_run_checkpoint
from seps.train.official import CheckpointError, load_checkpoint


def _touch(path: str) -> None:  # what a malicious pickle would run (os.system, say)
    open(path, "w").close()


class Payload:
    """Unpickling this calls ``_touch(marker)``: code run by loading the file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (_touch, (self.marker,))


def test_official_checkpoint_whose_pickle_calls_a_function_is_refused_and_not_run(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "model_best.pth"
    opt = argparse.Namespace(embed_size=8, hook=Payload(str(marker)))
    torch.save({"model": {"w": torch.zeros(2)}, "opt": opt, "epoch": 1}, path)
    with pytest.raises(CheckpointError, match=r"model_best.pth.*refused.*_touch"):
        load_checkpoint(path, vision="vit", text="bert-base-uncased")
    assert not marker.exists()


def test_official_cli_refuses_it_in_one_line(tmp_path, capsys):
    marker = tmp_path / "ran"
    path = tmp_path / "model_best.pth"
    torch.save({"model": {}, "opt": Payload(str(marker))}, path)
    args = ["eval", "--checkpoint", str(path), "--official", "--data-path", str(tmp_path)]
    code = main([*args, "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not marker.exists()
    assert len(err.splitlines()) == 1 and "refused" in err and "model_best.pth" in err


def test_run_checkpoint_whose_pickle_calls_a_function_is_refused_and_not_run(tmp_path, capsys):
    marker = tmp_path / "ran"
    path = tmp_path / "checkpoint_last.pt"  # the older, pickled run checkpoint
    torch.save({"format": CHECKPOINT_FORMAT, "model": {}, "state": Payload(str(marker))}, path)
    with pytest.raises(UnsafeFileError, match=r"checkpoint_last.pt.*refused.*_touch"):
        load_run_checkpoint(path)
    assert main(["eval", "--checkpoint", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refused" in err
    assert not marker.exists()


def test_older_pickled_run_checkpoint_of_plain_data_still_loads(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2])
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched.step()
    ckpt = {
        "format": CHECKPOINT_FORMAT,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "state": {"epoch": 0, "history": []},
        "train_config": {},
        "seps_config": {},
        "model_spec": {},
    }
    torch.save(ckpt, tmp_path / "checkpoint_last.pt")
    got = load_run_checkpoint(tmp_path / "checkpoint_last.pt")
    assert got["scheduler"]["milestones"] == collections.Counter({2: 1})
    torch.testing.assert_close(got["model"]["weight"], model.weight.detach(), rtol=0, atol=0)


def test_tensor_json_file_gives_back_optimizer_state_with_its_types_and_bits(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model[1].weight = model[1].weight  # (a plain parameter; shared storage below)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[3, 5], gamma=0.3)
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    sched.step()
    w = torch.randn(4, 4)
    obj = {
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "tied": [w, w, w.t()],
        "misc": {"$odd": 1, "nan": float("nan"), "tiny": 1e-310, "none": None},
        "rng": (3, (1, 2), None),
    }
    save_tensor_json(tmp_path / "c.safetensors", obj)
    got = load_tensor_json(tmp_path / "c.safetensors")
    assert set(got["optimizer"]["state"]) == {0, 1, 2, 3}  # integer keys kept
    assert got["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert got["scheduler"]["milestones"] == collections.Counter({3: 1, 5: 1})
    for k, v in opt.state_dict()["state"][0].items():
        assert torch.equal(got["optimizer"]["state"][0][k], v)
    assert all(torch.equal(a, b) for a, b in zip(got["tied"], [w, w, w.t()], strict=True))
    assert got["misc"]["tiny"] == 1e-310 and got["misc"]["nan"] != got["misc"]["nan"]
    assert got["rng"] == (3, (1, 2), None)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
