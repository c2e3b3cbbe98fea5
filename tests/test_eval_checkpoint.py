"""Which weights the test split evaluates (TrainConfig.eval_checkpoint): the last epoch's,
or those of the epoch with the best validation rSum, as the official training's
model_best.pth. The best weights are kept either way (checkpoint_best.safetensors), so
runs differing only in this share one training."""

from __future__ import annotations

import pytest
import torch
from test_train import HEAD, tiny

from seps.train import loop as train_loop
from seps.train import train
from seps.train.checkpoints import (
    BEST_NAME,
    best_val_epoch,
    load_best_weights,
    save_best_weights,
    select_eval_weights,
)


def _history(*rsums: float | None) -> list[dict]:
    return [
        {"epoch": e} if r is None else {"epoch": e, "val": {"rsum": r}} for e, r in enumerate(rsums)
    ]


def test_best_val_epoch_is_the_highest_and_the_first_on_ties():
    assert best_val_epoch(_history(5.0, 7.0, 6.0)) == 1
    assert best_val_epoch(_history(7.0, 7.0)) == 0  # the official `rsum > best_rsum`
    assert best_val_epoch(_history(None, None)) is None


@pytest.fixture()
def falling_validation(monkeypatch):
    """Validation rSum 10 after the first epoch, 5 after the second (the test split's
    evaluation is the real one): the first epoch is the best."""
    real = train_loop.evaluate_model
    scores = iter([10.0, 5.0, 10.0, 5.0, 10.0, 5.0])

    def fake(model, split, device, cfg, **kw):
        if kw.get("controls") is False:  # the per-epoch validation
            return {**real(model, split, device, cfg, **kw), "rsum": next(scores)}
        return real(model, split, device, cfg, **kw)

    monkeypatch.setattr(train_loop, "evaluate_model", fake)


def test_best_val_evaluates_the_first_epochs_weights_when_validation_falls(
    synth, tmp_path, falling_validation
):
    best = train(tiny(synth, tmp_path / "best", eval_checkpoint="best_val"), HEAD)
    last = train(tiny(synth, tmp_path / "last"), HEAD)
    first_only = train(tiny(synth, tmp_path / "first", epochs=1), HEAD)
    assert best["evaluated_epoch"] == 0 and last["evaluated_epoch"] == 1
    assert best["metrics"] == first_only["metrics"]  # the first epoch's weights, tested
    assert best["metrics"] != last["metrics"]
    # one training: only the evaluation differs
    assert [h["loss"] for h in best["history"]] == [h["loss"] for h in last["history"]]
    weights = load_best_weights(tmp_path / "last", 0)  # kept under `last` too
    assert weights.keys() and (tmp_path / "last" / BEST_NAME).is_file()


def test_resumed_best_val_run_tests_the_same_weights(synth, tmp_path, falling_validation):
    full = train(tiny(synth, tmp_path / "full", eval_checkpoint="best_val"), HEAD)
    cfg = tiny(synth, tmp_path / "resumed", eval_checkpoint="best_val")
    assert train(cfg, HEAD, stop_after_epoch=0) == {"interrupted_after_epoch": 0}
    resumed = train(cfg, HEAD, resume=True)
    assert resumed["metrics"] == full["metrics"] and resumed["evaluated_epoch"] == 0


def test_best_weights_of_another_epoch_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"checkpoint_best\.safetensors.*not found"):
        load_best_weights(tmp_path, 0)


def test_an_unknown_eval_checkpoint_names_the_field():
    with pytest.raises(ValueError, match=r"'eval_checkpoint'.*allowed: last, best_val"):
        tiny("unused", "unused", eval_checkpoint="best")


def test_best_val_without_validation_is_refused_by_field_name(tmp_path):
    cfg = tiny("unused", tmp_path, eval_checkpoint="best_val")
    with pytest.raises(ValueError, match=r"'eval_checkpoint': best_val needs a per-epoch valid"):
        select_eval_weights(cfg, torch.nn.Linear(1, 1), _history(None, None), 1)
    assert select_eval_weights(tiny("unused", tmp_path), torch.nn.Linear(1, 1), [], 1) == 1


def test_best_val_without_validation_is_refused_before_any_training(synth, tmp_path):
    cfg = tiny(synth, tmp_path / "run", eval_checkpoint="best_val", val_images=0)
    with pytest.raises(ValueError, match=r"'eval_checkpoint': best_val needs a per-epoch valid"):
        train(cfg, HEAD)
    assert not (tmp_path / "run" / "checkpoint_last.safetensors").exists()


def test_best_val_refuses_to_pick_the_epoch_on_the_evaluated_split():
    with pytest.raises(ValueError, match=r"'eval_checkpoint'.*evaluated split \('dev'\)"):
        tiny("unused", "unused", eval_checkpoint="best_val", eval_split="dev")


def test_best_weights_of_another_epoch_are_refused(tmp_path):
    save_best_weights(tmp_path, torch.nn.Linear(2, 2), 1, 5.0)
    assert load_best_weights(tmp_path, 1).keys() == {"weight", "bias"}
    with pytest.raises(ValueError, match=r"holds epoch 1, but the run's history puts its best"):
        load_best_weights(tmp_path, 0)
