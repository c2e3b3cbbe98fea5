"""Module movement: every record says how far each learned part moved and how much
gradient it got, and measuring it changes nothing of the run."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_train import tiny as train_tiny

import seps.train.loop as loop
from seps import get_config
from seps.model.seps_model import ModelSpec, build_model
from seps.train import TrainConfig, load_run_checkpoint, train
from seps.train.checkpoints import run_checkpoint_path
from seps.train.movement import GROUPS, INIT_FILE, grad_shares, module_groups, movement

PAPER = get_config("paper", embed_size=32)
#: The learned parts of the paper preset when everything trains (finetune).
PAPER_PARTS = {
    "image_backbone",
    "text_backbone",
    "image_projection",
    "text_projection",
    "score_predictor",
    "aggregation",
    "relevance_mlp",
}


def tiny(synth, out, **kw) -> TrainConfig:
    """``test_train``'s tiny run, one epoch without validation unless ``kw`` says."""
    return train_tiny(synth, out, **{"epochs": 1, "val_images": 0, **kw})


class _NoMeter:
    """The training loop without the measurement (what runs did before it existed)."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def step(self):
        return None

    def count(self, shares) -> None:
        pass

    def epoch_fields(self):
        return {}

    def result(self, history):
        return None


def test_groups_partition_the_trainable_parameters_of_each_preset():
    for preset in ("paper", "code", "laps"):
        model = build_model(ModelSpec(image_size=32, vocab_size=100), get_config(preset))
        groups = module_groups(model)
        assert set(groups) <= set(GROUPS)
        ids = [id(p) for ps in groups.values() for p in ps]
        assert len(ids) == len(set(ids))  # each parameter in one group
        assert set(ids) == {id(p) for p in model.parameters() if p.requires_grad}
        assert "other" not in groups  # every parameter has a named part
    paper = module_groups(build_model(ModelSpec(image_size=32, vocab_size=100), PAPER))
    assert set(paper) == PAPER_PARTS
    code = module_groups(build_model(ModelSpec(image_size=32, vocab_size=100), get_config("code")))
    # A part the preset lacks is absent, not an empty group.
    assert "score_predictor" not in code and "relevance_mlp" not in code


def test_zero_initialised_part_reports_its_absolute_change():
    bias = torch.nn.Parameter(torch.zeros(()))
    weight = torch.nn.Parameter(torch.full((2,), 3.0))
    init = {"b": bias.detach().clone(), "w": weight.detach().clone()}
    with torch.no_grad():
        bias += 0.02
        weight += torch.tensor([0.0, 4.0])  # (3, 7): moved by 4
    got = movement({"keep_bias": [bias], "w": [weight]}, {id(bias): "b", id(weight): "w"}, init, [])
    assert got["keep_bias"]["init_norm"] == 0.0
    assert got["keep_bias"]["relative_change"] == pytest.approx(0.02)  # absolute: ||θ_init|| = 0
    assert got["w"]["relative_change"] == pytest.approx(4.0 / math.sqrt(18.0))
    assert got["w"]["grad_share"] is None  # no step measured


def test_gradient_shares_sum_to_one_and_skip_a_zero_gradient():
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(1))
    assert grad_shares({"a": [a], "b": [b]}) is None  # no gradient at all
    a.grad, b.grad = torch.tensor([1.0, 1.0, 1.0]), torch.tensor([1.0])
    assert grad_shares({"a": [a], "b": [b]}) == {"a": 0.75, "b": 0.25}


def test_paper_run_records_movement_of_every_learned_part_without_changing_the_run(
    synth, tmp_path, monkeypatch
):
    measured = train(tiny(synth, tmp_path / "measured"), PAPER)
    stored = json.loads((tmp_path / "measured" / "result.json").read_text())
    assert stored["movement"] == measured["movement"]
    moved = measured["movement"]
    assert set(moved) == PAPER_PARTS
    for part, m in moved.items():
        for key in ("relative_change", "change", "init_norm", "grad_share"):
            assert math.isfinite(m[key]), (part, key)
        assert m["relative_change"] > 0.0, part  # every part of paper gets a gradient
    assert sum(m["grad_share"] for m in moved.values()) == pytest.approx(1.0)
    assert measured["history"][0]["grad_share_steps"] >= 1
    assert (tmp_path / "measured" / INIT_FILE).is_file()

    monkeypatch.setattr(loop, "MovementMeter", _NoMeter)
    plain = train(tiny(synth, tmp_path / "plain"), PAPER)
    assert plain["movement"] is None
    assert plain["metrics"] == measured["metrics"]
    drop = ("seconds", "train_pairs_per_second", "grad_share", "grad_share_steps")
    assert [{k: v for k, v in h.items() if k not in drop} for h in plain["history"]] == [
        {k: v for k, v in h.items() if k not in drop} for h in measured["history"]
    ]
    a = load_run_checkpoint(run_checkpoint_path(tmp_path / "plain"))["model"]
    b = load_run_checkpoint(run_checkpoint_path(tmp_path / "measured"))["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_frozen_backbones_are_absent_and_resume_keeps_the_initial_weights(synth, tmp_path):
    cfg = tiny(synth, tmp_path / "full", protocol="frozen", epochs=2, max_steps_per_epoch=2)
    full = train(cfg, PAPER)
    assert set(full["movement"]) == PAPER_PARTS - {"image_backbone", "text_backbone"}
    resumed_cfg = tiny(
        synth, tmp_path / "resumed", protocol="frozen", epochs=2, max_steps_per_epoch=2
    )
    train(resumed_cfg, PAPER, stop_after_epoch=0)
    resumed = train(resumed_cfg, PAPER, resume=True)
    assert resumed["metrics"] == full["metrics"]
    for part, m in full["movement"].items():
        assert resumed["movement"][part] == pytest.approx(m), part


def test_runner_record_carries_the_movement(synth, tmp_path):
    from test_runner import PROFILE, REPO_ABLATIONS

    from seps.experiments.definitions import load_matrix, load_profile
    from seps.runs.runner import run_matrix

    root = tmp_path / "ablations"
    (root / "matrices").mkdir(parents=True)
    (root / "differences.yaml").write_bytes((REPO_ABLATIONS / "differences.yaml").read_bytes())
    (root / "profiles.yaml").write_text(PROFILE)
    (root / "matrices" / "one.yaml").write_text(
        "name: one\ndescription: the paper preset\nbaseline: paper\n"
        "runs:\n  - {id: paper, preset: paper}\n"
    )
    [record] = run_matrix(
        load_matrix("one", root),
        load_profile("tiny", root),
        [0],
        tmp_path / "results",
        progress=False,
        data_path=str(synth),
        device="cpu",
    )
    assert record["status"] == "done"
    assert set(record["movement"]) == PAPER_PARTS
    [stored] = (tmp_path / "results" / "one").glob("*.json")
    assert json.loads(stored.read_text())["movement"] == record["movement"]
