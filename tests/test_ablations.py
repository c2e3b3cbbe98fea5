"""Ablation definitions, matrices and profiles (ablations/*.yaml)."""

from __future__ import annotations

import re

import pytest
import yaml

from seps.core.config import get_config
from seps.experiments.definitions import (
    AblationError,
    config_key,
    default_root,
    list_matrices,
    load_differences,
    load_matrix,
    load_profile,
    profile_summaries,
    resolve,
    seeds_problem,
    select_runs,
)
from seps.train.config import TrainConfig


def test_the_differences_match_both_presets_and_every_code_side_matches_the_code():
    """A difference's two values are the two presets'; a finding's ``code`` value is what
    the open-source code does (its other value is the alternative the finding tests, not
    necessarily the paper preset's: e.g. ``gumbel_per_patch`` for the constant ratio
    loss). The official hyper-parameters are the training defaults."""
    diffs = load_differences()
    kinds = [d.kind for d in diffs]
    assert kinds.count("difference") == 7 and kinds.count("finding") == 4
    code, paper = get_config("code"), get_config("paper")
    for d in diffs:
        head_code, train_code = d.values("code")
        head_other, _ = d.values("paper")
        assert head_code or train_code, d.id
        assert set(head_code) == set(head_other), d.id
        for k in head_code:
            assert getattr(code, k) == head_code[k], (d.id, k)
            assert head_other[k] != head_code[k], (d.id, k)
            if d.kind == "difference":
                assert getattr(paper, k) == head_other[k], (d.id, k)
    official = next(d for d in diffs if d.id == "hyper_parameters").values("code")[1]
    assert official and all(getattr(TrainConfig(), k) == v for k, v in official.items())


def test_matrix_level_train_fields_apply_to_every_run_and_a_run_value_wins(tmp_path):
    (tmp_path / "matrices").mkdir()
    for name in ("differences.yaml",):
        (tmp_path / name).write_text((default_root() / name).read_text())
    (tmp_path / "matrices" / "m.yaml").write_text(
        "name: m\ntrain: {dense_source: query}\nruns:\n"
        "  - {id: a, preset: code}\n  - {id: b, preset: code, train: {dense_source: none}}\n"
    )
    m = load_matrix("m", tmp_path)
    assert m.run("a").train == {"dense_source": "query"}
    assert m.run("b").train == {"dense_source": "none"}
    (tmp_path / "matrices" / "bad.yaml").write_text(
        "name: bad\ntrain: {dense_sauce: query}\nruns:\n  - {id: a, preset: code}\n"
    )
    with pytest.raises(AblationError, match="dense_sauce"):
        load_matrix("bad", tmp_path)


def test_seven_differences_matrix_expands_flips_and_reverts():
    m = load_matrix("seven-differences")
    ids = [r.id for r in m.runs]
    assert len(ids) == 17 and ids[:2] == ["laps", "code"] and "paper" in ids
    flip = m.run("code+hrpa")
    assert flip.preset == "code" and dict(flip.set) == {"hrpa": "mean_topk"}
    revert = m.run("paper-scoring")
    assert revert.preset == "paper" and dict(revert.set) == {"scoring": "code"}
    # Flipping all seven differences of code gives exactly the paper preset's switches.
    cfg = get_config(
        "code", **{k: v for r in m.runs if r.id.startswith("code+") for k, v in r.set.items()}
    )
    paper = get_config("paper")
    for k in (
        "scoring",
        "dense_fusion",
        "aggregation",
        "hrpa",
        "similarity_activation",
        "decision",
        "ratio_loss",
    ):
        assert getattr(cfg, k) == getattr(paper, k)


def test_every_named_matrix_loads():
    names = list_matrices()
    assert {
        "seven-differences",
        "findings",
        "paper-modules",
        "selection-ratio",
        "coefficients",
        "training-protocol",
    } <= set(names)
    for name in names:
        assert load_matrix(name).runs


def test_grid_ids_and_train_fields():
    m = load_matrix("findings")
    run = m.run("paper/dense_source=none")
    assert dict(run.train) == {"dense_source": "none"} and run.preset == "paper"
    leak = m.run("code/dense_source=query/eval_dense_source=candidate")
    assert dict(leak.train) == {"dense_source": "query", "eval_dense_source": "candidate"}
    cell = load_matrix("coefficients").run("gumbel_per_patch/l1=0.25,l2=0.75")
    assert cell.set["lambda_dense"] == 0.75 and cell.set["decision"] == "gumbel_per_patch"


def test_resolve_and_keys():
    m, p = load_matrix("seven-differences"), load_profile("smoke")
    t, h = resolve(m.run("code+scoring"), p, 3)
    assert h.scoring == "paper" and h.embed_size == p.head["embed_size"] and t.seed == 3
    t0, h0 = resolve(m.run("code"), p, 3)
    assert config_key(t, h) != config_key(t0, h0)
    t1, h1 = resolve(m.run("code"), p, 3, device="cpu", out_dir="elsewhere")
    assert config_key(t0, h0) == config_key(t1, h1), "where/how fields must not change the key"


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("runs: [{id: a, preset: code, set: {hrpa: max}}]", r"m.yaml.*run 'a'.*'hrpa'.*'max'"),
        ("runs: [{id: a, set: {bogus: 1}}]", r"m.yaml.*run 'a'.*unknown switch 'bogus'"),
        ("runs: [{id: a, train: {epochz: 1}}]", r"m.yaml.*run 'a'.*unknown train field 'epochz'"),
        ("runs: [{id: a, preset: nope}]", r"m.yaml.*run 'a'.*'preset'.*'nope'"),
        ("runs: [{id: a}, {id: a}]", r"m.yaml.*run 'a'.*duplicate"),
        ("runs: [{preset: code}]", r"m.yaml: runs\[0\].*missing field 'id'"),
        ("runs: [{expand: swap, from: code, to: paper}]", r"m.yaml: runs\[0\].*'expand'.*'swap'"),
        ("runs: [{id: a, colour: red}]", r"m.yaml: runs\[0\].*unknown field.*colour"),
        ("runs: {a: 1}", r"m.yaml.*'runs' list"),
        ("runs: [{id: a}]\nbaseline: b", r"m.yaml.*'baseline'.*'b'"),
        ("runs: [", r"m.yaml.*not valid YAML"),
    ],
)
def test_malformed_matrix_errors_name_file_run_and_field(tmp_path, text, pattern):
    with pytest.raises(AblationError, match=pattern):
        load_matrix(_write(tmp_path, text))


def test_unknown_matrix_and_profile():
    with pytest.raises(AblationError, match="matrix file not found; known matrices"):
        load_matrix("no-such-matrix")
    with pytest.raises(AblationError, match="unknown profile 'huge'"):
        load_profile("huge")


def test_run_help_lists_every_profile_with_its_summary(capsys):
    from seps.cli import main

    summaries = profile_summaries()
    assert set(summaries) >= {"smoke", "quick", "standard", "paper"}
    assert all(summaries.values()), summaries
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name, summary in summaries.items():
        assert f"{name}: {' '.join(summary.split())}" in help_text


def _root_with(tmp_path, profile: str, matrix: str):
    import shutil
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1] / "ablations"
    root = tmp_path / "ablations"
    (root / "matrices").mkdir(parents=True)
    shutil.copy(repo / "differences.yaml", root / "differences.yaml")
    (root / "profiles.yaml").write_text(profile)
    (root / "matrices" / "m.yaml").write_text(matrix)
    return root


def test_yaml_numbers_read_as_strings_are_accepted(tmp_path):
    # YAML 1.1 (PyYAML) reads 1e-3, without a dot, as the string "1e-3".
    root = _root_with(
        tmp_path,
        "p:\n  train: {lr: 1e-3, epochs: 1}\n",
        "runs:\n  - {id: a, preset: code, train: {backbone_lr_mult: 5e-1}}\n",
    )
    cfg, _ = resolve(load_matrix("m", root).runs[0], load_profile("p", root), seed=0)
    assert cfg.lr == 0.001 and cfg.backbone_lr_mult == 0.5


@pytest.mark.parametrize(
    ("profile", "matrix", "pattern"),
    [
        (
            "p:\n  train: {epochs: two}\n",
            "runs:\n  - {id: a, preset: code}\n",
            r"profiles.yaml: profile 'p': train config field 'epochs': expected an integer",
        ),
        (
            "p:\n  train: {epochs: 1}\n",
            "runs:\n  - {id: a, preset: code, train: {augment: maybe}}\n",
            r"m.yaml: run 'a': train config field 'augment': expected true or false",
        ),
    ],
)
def test_wrong_train_field_types_name_file_run_and_field(
    tmp_path, capsys, profile, matrix, pattern
):
    from seps.cli import main

    root = _root_with(tmp_path, profile, matrix)
    code = main(["run", "m", "--ablations", str(root), "--profile", "p", "--device", "cpu",
                 "--results", str(tmp_path / "r"), "--dry-run"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    import re

    assert re.search(pattern, err), err


def test_loader_workers_and_kept_optimizer_state_do_not_change_run_keys():
    from seps.experiments.definitions import config_key
    from seps.train.config import TrainConfig

    head = get_config("code")
    base = config_key(TrainConfig(), head)
    assert config_key(TrainConfig(workers=4, keep_optimizer=True), head) == base
    assert config_key(TrainConfig(precision="bf16"), head) != base


@pytest.mark.parametrize("name", ["../escaped", "/tmp/elsewhere", ".hidden", "a/b", 5, ""])
def test_a_matrix_name_that_is_not_a_plain_file_name_is_refused(tmp_path, name):
    """The name is the store's folder and the report's file stem: never a path."""
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"name": name, "runs": [{"id": "c"}]}))
    with pytest.raises(AblationError, match=r"m\.yaml: field 'name': invalid value"):
        load_matrix(str(tmp_path / "m.yaml"))


def test_a_missing_definitions_folder_is_named_as_such(tmp_path):
    with pytest.raises(AblationError, match=r"nope: not an ablation definitions folder"):
        load_matrix("regime", tmp_path / "nope")


def test_only_selects_in_matrix_order_and_refuses_a_pattern_that_matches_nothing():
    matrix = load_matrix("seven-differences")
    picked = [r.id for r in select_runs(matrix, "paper,code+s*")]
    assert picked == ["code+scoring", "code+similarity_activation", "paper"]
    assert select_runs(matrix, None) == matrix.runs
    for only, named in (("code,zzz*", "'zzz*'"), ("", "''"), ("code,", "''")):
        with pytest.raises(ValueError, match=rf"^--only: {re.escape(named)} matches no run id"):
            select_runs(matrix, only)


@pytest.mark.parametrize(
    ("seeds", "said"),
    [
        ([], "expected a non-empty list"),
        ([0, 1.5], "1.5 is not an integer"),
        ([True], "True is not an integer"),
        ([-5, 1], "-5 is outside [0, 2147483648)"),
        ([2**31], "2147483648 is outside"),
        ([0, 1, 1], "seed 1 is given twice"),
    ],
)
def test_seeds_that_would_plan_nothing_twice_or_out_of_range_are_refused(tmp_path, seeds, said):
    assert seeds_problem(seeds).endswith(said) or said in seeds_problem(seeds)
    (tmp_path / "matrices").mkdir()
    (tmp_path / "profiles.yaml").write_text(yaml.safe_dump({"p": {"seeds": seeds}}))
    with pytest.raises(AblationError, match=r"profile 'p': field 'seeds': "):
        load_profile("p", tmp_path)
    assert seeds_problem([0, 1, 2]) is None
