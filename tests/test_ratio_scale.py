"""``seps-bench ratio-scale``: the initial ratio-loss gradient it measures is the one the
training loop logs, and its weights put the criteria at equal initial gradient norm."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml
from test_train import tiny as train_tiny

from seps import get_config
from seps.cli import main
from seps.cli import ratio_scale as cli_ratio_scale
from seps.experiments.definitions import load_matrix
from seps.runs.ratio_scale import (
    Probe,
    initial_ratio_grad_norms,
    normalised_weights,
    probe_grid,
    yaml_runs,
)
from seps.train import TrainConfig, features, train

HEAD = get_config("paper", embed_size=32, decision="gumbel_per_patch")


def tiny(synth, out) -> TrainConfig:
    """test_train's tiny run, one step of one epoch, no validation."""
    return train_tiny(synth, out, epochs=1, max_steps_per_epoch=1, val_images=0)


def test_probe_measures_the_gradient_the_training_loop_logs_at_its_first_step(synth, tmp_path):
    cfg = tiny(synth, tmp_path / "run")
    logged = train(cfg, HEAD)["history"][0]["steps_log"][0]["ratio_grad_norm"]
    probed = initial_ratio_grad_norms(cfg, HEAD, steps=1)
    assert logged > 0
    assert probed == [pytest.approx(logged, rel=1e-6)]


def test_probe_under_frozen_backbones_measures_what_the_frozen_loop_logs(
    synth, tmp_path, monkeypatch
):
    # The `standard` profile trains the head on cached features of frozen backbones; the
    # probe runs that same loop (and reuses the run's feature cache).
    cache = str(tmp_path / "cache")
    cfg = dataclasses.replace(tiny(synth, tmp_path / "run"), protocol="frozen", cache_dir=cache)
    logged = train(cfg, HEAD)["history"][0]["steps_log"][0]["ratio_grad_norm"]

    def no_backbone(*_a, **_k):
        raise AssertionError("the probe recomputed the backbone features")

    monkeypatch.setattr(features, "backbone_features", no_backbone)  # the cache must serve
    probed = initial_ratio_grad_norms(cfg, HEAD, steps=1)
    assert logged > 0
    assert probed == [pytest.approx(logged, rel=1e-6)]


def test_the_command_probes_a_frozen_profile_on_its_stores_feature_cache(monkeypatch, tmp_path):
    seen = {}

    def fake_grid(cfg, head, **_kw):
        seen.update(cache_dir=cfg.cache_dir, protocol=cfg.protocol, loss=head.align_loss)
        return [Probe(c, "unified", 2.0, (0.5,)) for c in ("mse", "l1")]

    monkeypatch.setattr(cli_ratio_scale, "probe_grid", fake_grid)
    store = tmp_path / "store"
    assert main(["ratio-scale", "--profile", "standard", "--results", str(store)]) == 0
    assert seen == {
        "cache_dir": str(store / "_work" / "feature_cache"),
        "protocol": "frozen",
        "loss": "triplet",
    }


def test_normalised_weights_equalise_the_initial_gradient_norms(synth, tmp_path):
    cfg = tiny(synth, tmp_path / "run")
    probes = probe_grid(
        cfg, HEAD, criteria=("mse", "l1"), forms=("unified",), steps=2, progress=False
    )
    weights = normalised_weights(probes)
    assert weights["mse", "unified"] == HEAD.ratio_weight
    means = {p.criterion: p.mean for p in probes}
    assert not math.isclose(means["l1"], means["mse"], rel_tol=1e-2)  # unequal before
    head = HEAD.replace(
        ratio_criterion="l1", ratio_loss="unified", ratio_weight=weights["l1", "unified"]
    )
    after = initial_ratio_grad_norms(cfg, head, steps=2)
    assert sum(after) / len(after) == pytest.approx(means["mse"], rel=1e-5)


def test_a_cell_without_ratio_gradient_is_refused_by_name():
    probes = [Probe("mse", "separate", 2.0, (0.5, 0.7)), Probe("ce", "separate", 2.0, (0.0, 0.0))]
    with pytest.raises(ValueError, match=r"criterion 'ce', form 'separate'.*sends no gradient"):
        normalised_weights(probes)
    with pytest.raises(ValueError, match=r"reference criterion 'mse' in form 'eq7'"):
        normalised_weights([Probe("l1", "eq7", 2.0, (1.0,))])


def test_printed_runs_are_valid_loss_study_entries(tmp_path):
    weights = {("mse", "unified"): 2.0, ("l1", "unified"): 6.25, ("ce", "eq7"): 0.123456}
    head = get_config("paper", decision="gumbel_per_patch")
    text = yaml_runs(weights, head, "paper")
    path = tmp_path / "study.yaml"
    path.write_text(
        f"name: study\nbaseline: {'ratio/gumbel_per_patch/l1/unified/normalised'}\nruns:\n{text}\n"
    )
    m = load_matrix(str(path))
    assert [r.id for r in m.runs] == [
        "ratio/gumbel_per_patch/l1/unified/normalised",
        "ratio/gumbel_per_patch/ce/eq7/normalised",
    ]  # the reference keeps its weight: no run of its own
    ce = m.run("ratio/gumbel_per_patch/ce/eq7/normalised")
    assert ce.set == {
        "align_loss": "triplet",  # the head's: the loss study's ratio runs set it
        "decision": "gumbel_per_patch",
        "ratio_criterion": "ce",
        "ratio_loss": "eq7",
        "ratio_weight": 0.1235,
    }
    assert yaml.safe_load(text)[0]["set"]["ratio_weight"] == 6.25


def test_unknown_criterion_is_a_one_line_error_naming_the_option(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["ratio-scale", "--criteria", "mse,hinge"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--criteria" in err and "hinge" in err and "mse, l1, ce" in err
