"""``seps-bench campaign``: a campaign file's steps run in order through ``seps-bench run``,
``--dry-run`` lists them, a resumed campaign skips what is done, and a bad file is one
line naming the file, the step and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ablation_roots import make_ablation_root

from seps.cli import main
from seps.experiments.campaigns import list_campaigns, load_campaign

REPO_ABLATIONS = Path(__file__).resolve().parents[1] / "ablations"

PROFILE = """
tiny:
  description: test-sized
  seeds: [0, 1]
  head: {embed_size: 32}
  train: {synth_images: 60, image_size: 32, epochs: 1, batch_size: 8, max_steps_per_epoch: 2,
          val_images: 0, backbone_lr_mult: 1.0, vocab_size: 300, max_dense_words: 48}
"""

MATRIX = """
name: mini
baseline: code
runs:
  - {id: code, preset: code}
  - {id: laps, preset: laps}
"""

CAMPAIGN = """
profile: tiny
steps:
  - {matrix: mini, only: laps, seeds: [0], note: the one small step}
"""


@pytest.fixture()
def env(tmp_path, monkeypatch):
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX}, profiles=PROFILE)
    (tmp_path / "tiny.yaml").write_text(CAMPAIGN)
    monkeypatch.chdir(tmp_path)
    return tmp_path, root


def _campaign(env, *extra: str) -> list[str]:
    tmp, root = env
    return ["campaign", str(tmp / "tiny.yaml"), "--ablations", str(root), "--results",
            str(tmp / "results"), "--no-progress", *extra]  # fmt: skip


def test_a_tiny_campaign_runs_its_step_through_run_and_resumes(env, capsys):
    tmp, _ = env
    assert main(_campaign(env)) == 0
    out = capsys.readouterr().out
    assert "step 1/1: mini --only 'laps' --seeds 0" in out and "1 of 1 steps completed" in out
    records = sorted((tmp / "results" / "mini").glob("*.json"))
    assert [p.name.split("-")[0] for p in records] == ["laps"]  # only the step's run and seed
    assert json.loads(records[0].read_text())["status"] == "done"
    before = records[0].read_bytes()
    assert main(_campaign(env)) == 0  # resumes: the done run is skipped, not retrained
    assert records[0].read_bytes() == before


def test_dry_run_lists_the_steps_as_run_commands_and_runs_nothing(env, capsys):
    tmp, _ = env
    assert main(_campaign(env, "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "campaign " in out and "1 steps, profile tiny" in out
    assert "  1. seps-bench run mini --profile tiny" in out and "--only laps --seeds 0" in out
    assert not (tmp / "results").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("profile: tiny\nsteps:\n  - {matrix: mini, seed: [0]}\n",
         "steps[0]: unknown key 'seed'; expected one of matrix, only, seeds, note"),
        ("profile: tiny\nstep: []\n", "unknown key 'step'; expected one of profile"),
        ("profile: tiny\nsteps:\n  - {matrix: nope}\n",
         "steps[0]: 'matrix': unknown matrix 'nope'"),
        ("profile: tiny\nsteps:\n  - {matrix: mini, seeds: 0}\n",
         "steps[0]: 'seeds': expected a list of integers"),
        ("profile: [\n", "not valid YAML"),
    ],
)  # fmt: skip
def test_a_bad_campaign_file_is_one_line_naming_file_step_and_key(env, capsys, text, expected):
    tmp, _ = env
    (tmp / "tiny.yaml").write_text(text)
    assert main(_campaign(env)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tiny.yaml" in err and expected in err, err
    assert not (tmp / "results").exists()


def test_a_dry_run_checks_the_profile_and_matrices_a_run_would_read(env, capsys):
    tmp, _ = env
    (tmp / "tiny.yaml").write_text(CAMPAIGN.replace("profile: tiny", "profile: nosuch"))
    assert main(_campaign(env, "--dry-run")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown profile 'nosuch'" in err, err


def test_the_shipped_standard_campaign_is_valid_and_names_known_matrices():
    assert "standard" in list_campaigns()
    matrices = sorted(p.stem for p in (REPO_ABLATIONS / "matrices").glob("*.yaml"))
    campaign = load_campaign("standard", matrices)
    assert campaign.profile == "standard" and campaign.rerun_stale and not campaign.report
    # The regime's controls first, then the check that every preset learns.
    assert [s.matrix for s in campaign.steps[:2]] == ["controls", "regime"]
    assert all(s.seeds == (0, 1, 2, 3, 4) for s in campaign.steps)
    assert campaign.steps[-1].matrix == "loss-study" and campaign.steps[-1].only is None
