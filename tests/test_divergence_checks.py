"""Divergence is caught wherever it shows: non-finite similarities at validation or at the
final evaluation make the run ``diverged``, with a record that says where."""

from __future__ import annotations

import json

import pytest
from test_train import HEAD, tiny

import seps.train.evaluation as evaluation
from seps.cli import main
from seps.train import DivergedError, train


def test_train_with_an_overflowing_lr_leaves_a_diverged_result_and_exits_1(synth, tmp_path, capsys):
    out = tmp_path / "hot"
    args = ["train", "--data-path", str(synth), "--out", str(out), "--lr", "1e30",
            "--image-size", "32", "--epochs", "1", "--batch-size", "8",
            "--max-steps-per-epoch", "3", "--val-images", "4", "--set", "head.embed_size=32",
            "--no-progress"]  # fmt: skip
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "diverged" in err and "Traceback" not in err
    rec = json.loads((out / "result.json").read_text())
    assert rec["status"] == "diverged"
    assert rec["divergence"]["where"] == {"epoch": 0, "phase": "validation"}
    assert "similarities are not finite at validation" in rec["error"]


def test_nonfinite_similarities_at_the_final_evaluation_are_a_divergence(
    synth, tmp_path, monkeypatch
):
    real = evaluation.similarity_matrix

    def overflowing(*args, **kwargs):
        sims = real(*args, **kwargs)
        sims[0, 0] = float("inf")
        return sims

    monkeypatch.setattr(evaluation, "similarity_matrix", overflowing)
    cfg = tiny(synth, tmp_path / "eval", epochs=1, val_images=0)
    with pytest.raises(DivergedError, match=r"1 of .* similarities are not finite at evaluation"):
        train(cfg, HEAD)
    rec = json.loads((tmp_path / "eval" / "result.json").read_text())
    assert rec["status"] == "diverged" and len(rec["history"]) == 1
    assert rec["divergence"]["where"] == {"epoch": 0, "phase": "evaluation"}
