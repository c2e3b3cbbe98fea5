"""``seps-bench run`` from the command line: ``--set``, the dry-run summary, data keys."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from seps.cli import main
from seps.core.config import HEAD_KEY_OMITTED_AT_DEFAULT, SEPSConfig, get_config
from seps.experiments.definitions import (
    NON_SEMANTIC_TRAIN_FIELDS,
    config_key,
    load_matrix,
    load_profile,
    resolve,
)
from seps.experiments.overrides import apply_sets, parse_set
from seps.io.store import SCHEMA, atomic_write_json
from seps.runs.run_plan import model_size
from seps.runs.runner import plan, record_path
from seps.train.config import KEY_OMITTED_AT_DEFAULT, TrainConfig
from seps.versioning.version import VERSION_KEY, code_version

REPO_ABLATIONS = Path(__file__).resolve().parents[1] / "ablations"

PROFILE = """
tiny:
  description: test-sized
  seeds: [0, 1]
  head: {embed_size: 32}
  train: {synth_images: 60, image_size: 32, epochs: 2, batch_size: 8, max_steps_per_epoch: 2,
          val_images: 0, backbone_lr_mult: 1.0, vocab_size: 300, max_dense_words: 48}
"""

MATRIX = """
name: mini
baseline: code
runs:
  - {id: code, preset: code}
  - {id: code+hrpa, preset: code, set: {hrpa: mean_topk}}
  - {id: code-candidate, preset: code, train: {eval_dense_source: query}}
"""


@pytest.fixture()
def root(tmp_path):
    r = tmp_path / "ablations"
    (r / "matrices").mkdir(parents=True)
    shutil.copy(REPO_ABLATIONS / "differences.yaml", r / "differences.yaml")
    (r / "profiles.yaml").write_text(PROFILE)
    (r / "matrices" / "mini.yaml").write_text(MATRIX)
    return r


def _official(folder: Path) -> Path:
    """Caption, id and dense-caption files of train/dev/test in the official layout (no
    images: keys and dry runs never read them)."""
    folder.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (folder / f"{split}_caps.txt").write_text(f"a dog in the {split} split .\n" * 5)
        (folder / f"{split}_ids.txt").write_text("7\n" * 5)
        (folder / f"f30k_{split}.jsonl").write_text('{"text": "a brown dog on grass ."}\n')
    (folder / "id_mapping.json").write_text('{"7": "7.jpg"}\n')
    return folder


# ----------------------------------------------------------------------------- --set
def test_set_applies_before_each_runs_own_fields(root):
    profile = apply_sets(
        load_profile("tiny", root),
        ["head.hrpa=topk_only", "train.eval_dense_source=none", "train.epochs=3"],
    )
    assert profile.name == "tiny+head.hrpa=topk_only+train.eval_dense_source=none+train.epochs=3"
    planned = {p.run.id: p for p in plan(load_matrix("mini", root), profile, [0], Path("r"))}
    assert planned["code"].head.hrpa == "topk_only"
    assert planned["code+hrpa"].head.hrpa == "mean_topk", "the run's own switch wins"
    assert planned["code"].train_cfg.eval_dense_source == "none"
    assert planned["code-candidate"].train_cfg.eval_dense_source == "query"
    assert {p.train_cfg.epochs for p in planned.values()} == {3}
    assert all(p.head.embed_size == 32 for p in planned.values()), "the profile's head stays"


def test_set_values_are_read_like_profile_yaml():
    assert parse_set("train.lr=1e-3").value == 0.001  # YAML 1.1 reads 1e-3 as a string
    assert parse_set("train.lr_milestones=[1, 2]").value == (1, 2)
    assert parse_set("train.max_steps_per_epoch=null").value is None
    assert parse_set("head.detach_selection=false").value is False
    assert parse_set("head.margin=0.3").value == 0.3
    s = parse_set("train.epochs=2")
    p = apply_sets(load_profile("smoke"), ["train.epochs=5", "train.epochs=2"])
    assert s.value == 2 and p.train["epochs"] == 2 and p.name == "smoke+train.epochs=2"


@pytest.mark.parametrize(
    ("setting", "pattern"),
    [
        (
            "train.epochs=two",
            r"--set train\.epochs=two: train config field 'epochs': expected an integer",
        ),
        ("train.epochs=0", r"--set train\.epochs=0: train config field 'epochs': invalid value 0"),
        ("train.epochz=1", r"--set train\.epochz=1: unknown train config field 'epochz'"),
        ("train.protocol=half", r"--set train\.protocol=half: .*'protocol'.*'half'"),
        ("head.hrpa=max", r"--set head\.hrpa=max: config field 'hrpa': invalid value 'max'"),
        ("head.bogus=1", r"--set head\.bogus=1: unknown head switch 'bogus'"),
        ("head.embed_size=big", r"--set head\.embed_size=big: config field 'embed_size'"),
        ("model.x=1", r"--set model\.x=1: unknown prefix 'model'"),
        ("epochs=3", r"--set epochs=3: expected train\.FIELD=VALUE or head\.FIELD=VALUE"),
        ("train.lr=[", r"--set train\.lr=\[: not a valid YAML value"),
        ("train.device=cpu", r"--set train\.device=cpu: .*'device'.*use --device"),
        ("train.progress=false", r"--set train\.progress=false: .*use --no-progress"),
    ],
)
def test_bad_set_is_one_line_naming_set_and_field(root, tmp_path, capsys, setting, pattern):
    code = main(["run", "mini", "--ablations", str(root), "--profile", "tiny", "--results",
                 str(tmp_path / "r"), "--dry-run", "--set", setting])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert re.search(pattern, err), err


def test_every_non_semantic_field_is_refused_by_set():
    for field in NON_SEMANTIC_TRAIN_FIELDS:
        with pytest.raises(ValueError, match=rf"--set train\.{field}=x: .*{field!r}"):
            parse_set(f"train.{field}=x")


def test_set_that_runs_override_is_named(root, tmp_path, capsys):
    code = main(["run", "mini", "--ablations", str(root), "--profile", "tiny", "--results",
                 str(tmp_path / "r"), "--dry-run", "--set", "head.hrpa=topk_only"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "--set head.hrpa=topk_only: 1 of 3 runs set hrpa themselves" in out
    assert "(code+hrpa)" in out


# --------------------------------------------------------------------------- dry run
def test_dry_run_prints_settings_work_and_disk(root, tmp_path, capsys):
    results = tmp_path / "r"
    args = ["run", "mini", "--ablations", str(root), "--profile", "tiny", "--results",
            str(results), "--dry-run", "--set", "train.epochs=3"]  # fmt: skip
    planned = plan(
        load_matrix("mini", root),
        apply_sets(load_profile("tiny", root), ["train.epochs=3"]),
        [0, 1],
        results,
    )
    done = next(p for p in planned if p.run.id == "code+hrpa" and p.seed == 1)
    atomic_write_json(
        record_path(results, done),
        {"schema": SCHEMA, VERSION_KEY: code_version(), "status": "done", "run_id": "code+hrpa"},
    )
    assert main(args) == 0
    out = capsys.readouterr().out
    # The settings: shared once, the runs' own below.
    assert re.search(r"every run: train: synth_images=60, .*epochs=3, .*; head: embed_size=32$",
                     out, re.M)  # fmt: skip
    assert "  code+hrpa: head: hrpa=mean_topk" in out
    assert "  code-candidate: train: eval_dense_source=query" in out
    assert not re.search(r"^  code: ", out, re.M), "a run without settings of its own"
    # 6 runs, 1 stored; code and code-candidate share their trainings (2 seeds): 3 trainings.
    assert (
        "to do: 5 of 6 runs (3 runs x 2 seeds; 1 stored and current): 3 trainings (runs that "
        "differ only in evaluation share one), 9 epochs in all"
    ) in out
    size = model_size(done.train_cfg, done.head)
    assert size is not None and size.checkpoint_bytes == 3 * 4 * size.parameters
    assert re.search(rf"\| code\+hrpa +\| {size.parameters:,} +\|", out)
    # Finished trainings keep their weights only; up to 3 x while one trains.
    assert re.search(
        r"^disk: [\d.]+ MB kept by the checkpoints of the 3 trainings to do "
        r"\(under <results>/_work/\), plus up to [\d.]+ MB while one trains",
        out,
        re.M,
    )
    assert "AdamW's two moments" in out
    assert not (results / "_work").exists()


def test_meta_parameter_count_matches_the_built_model():
    from seps.model.seps_model import ModelSpec, build_model, count_parameters

    for protocol in ("finetune", "partial", "frozen"):
        cfg = TrainConfig(image_size=32, vocab_size=300, protocol=protocol)
        head = get_config("paper", embed_size=32)
        size = model_size(cfg, head)
        model = build_model(
            ModelSpec(image_size=32, text_backbone="tiny-bert", vocab_size=300), head
        )
        assert size is not None and size.parameters == count_parameters(model)
        if protocol == "finetune":
            assert size.trainable == size.parameters
        else:
            assert 0 < size.trainable < size.parameters


def test_paper_dry_run_counts_trainings_epochs_and_disk_offline(tmp_path, capsys, no_network):
    data = _official(tmp_path / "f30k")
    results = tmp_path / "r"
    code = main(["run", "seven-differences", "--profile", "paper", "--dry-run",
                 "--data-path", str(data), "--results", str(results)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "to do: 51 of 51 runs (17 runs x 3 seeds; 0 stored and current): 51 trainings "
        "(runs that differ only in evaluation share one), 1530 epochs in all"
    ) in out
    # ViT-Base/BERT-base from the hub: counted from the package's own copies of their
    # configurations (seps.train.official_backbones.builtin_config); never fetched.
    assert re.search(r"^disk: [\d.]+ GB kept by the checkpoints of the 51 trainings", out, re.M)
    assert "dataset=f30k" in out and "epochs=30" in out and "code+hrpa: head: hrpa=mean_topk" in out
    assert no_network == [] and not results.exists()


def test_vit_base_and_bert_base_are_counted_on_meta_from_their_configs(
    tmp_path, capsys, no_network
):
    from transformers import BertConfig, ViTConfig

    ViTConfig().save_pretrained(tmp_path / "vit-base")  # the defaults are ViT-Base/16, 224
    BertConfig().save_pretrained(tmp_path / "bert-base")  # and BERT-base (uncased vocab)
    data = _official(tmp_path / "f30k")
    code = main(["run", "seven-differences", "--profile", "paper", "--dry-run", "--only", "code",
                 "--seeds", "0", "--data-path", str(data), "--results", str(tmp_path / "r"),
                 "--set", f"train.backbone={tmp_path / 'vit-base'}",
                 "--set", f"train.text_backbone={tmp_path / 'bert-base'}"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and no_network == []
    row = re.search(r"^\| code +\| ([\d,]+) +\| ([\d.]+) MB +\| ([\d.]+) GB", out, re.M)
    assert row, out
    n = int(row.group(1).replace(",", ""))
    # ViT-B/16 (86.4M with its pooler) + BERT-base (109.5M) + projections and the head.
    assert 190e6 < n < 200e6
    assert float(row.group(2)) == pytest.approx(4 * n / 1e6, abs=0.05)
    assert float(row.group(3)) == pytest.approx(12 * n / 1e9, abs=0.05)
    assert re.search(
        # the weights (787 MB) and the best-validation weights beside them
        r"^disk: 1\.6 GB kept by the checkpoints of the 1 training to do .*up to 2\.4 GB",
        out,
        re.M,
    )


# -------------------------------------------------------------------------- data keys
def _keys(data_path: str, **over):
    m, p = load_matrix("seven-differences"), load_profile("paper")
    out = []
    for run in (m.run("code"), m.run("code+hrpa")):
        t, h = resolve(run, p, 0, data_path=data_path, **over)
        out.append((config_key(t, h), config_key(t, h, exclude=("eval_split",))))
    return out


def test_data_keys_follow_the_resolved_folder_and_its_caption_bytes(tmp_path, monkeypatch):
    data = _official(tmp_path / "rel" / "dir")
    monkeypatch.chdir(tmp_path)
    keys = _keys("rel/dir")
    assert keys == _keys(str(data)) == _keys("./rel/../rel/dir")
    (tmp_path / "link").symlink_to(data)
    assert _keys("link") == keys
    # The literal path stays in the resolved config (and so in the record).
    t, _ = resolve(load_matrix("seven-differences").run("code"), load_profile("paper"), 0,
                   data_path="rel/dir")  # fmt: skip
    assert t.data_path == "rel/dir"

    with (data / "test_caps.txt").open("a") as f:
        f.write("one more caption .\n")
    after_test = _keys("rel/dir")
    # A test caption changes the run key, not the training key (training never reads it).
    assert [k for k, _ in after_test] != [k for k, _ in keys]
    assert [tk for _, tk in after_test] == [tk for _, tk in keys]
    (data / "f30k_train.jsonl").write_text('{"text": "a black dog on grass ."}\n')
    after_train = _keys("rel/dir")
    assert all(a[1] != b[1] for a, b in zip(after_train, after_test, strict=True))
    (data / "images").mkdir()
    (data / "images" / "7.jpg").write_bytes(b"not read")
    assert _keys("rel/dir") == after_train, "images are not part of the key"


def _key_before_data_identity(train_cfg, head) -> str:
    """The run key as it was before data folders were keyed by their content."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    t = {
        k: v
        for k, v in train_cfg.to_dict().items()
        if k not in NON_SEMANTIC_TRAIN_FIELDS
        and not (k in KEY_OMITTED_AT_DEFAULT and v == defaults[k])
    }
    # Head fields added since (``selection``) did not exist then: absent at their default.
    h = {
        k: v
        for k, v in head.to_dict().items()
        if not (k in HEAD_KEY_OMITTED_AT_DEFAULT and v == getattr(SEPSConfig(), k))
    }
    blob = json.dumps({"head": h, "train": t}, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_synthetic_keys_are_unchanged(synth):
    p = plan(load_matrix("seven-differences"), load_profile("smoke"), [0], Path("results"))
    code = next(x for x in p if x.run.id == "code")
    assert (code.key, code.train_key) == ("e8ad28200e3de298", "79f5fb37ce2f66e9")  # stored
    for profile in ("smoke", "standard"):
        for x in plan(load_matrix("findings"), load_profile(profile), [1], Path("results")):
            assert x.key == _key_before_data_identity(x.train_cfg, x.head)
    t, h = resolve(load_matrix("findings").runs[0], load_profile("smoke"), 0, data_path=str(synth))
    assert config_key(t, h) == _key_before_data_identity(t, h)


def test_no_progress_also_silences_hugging_face_loading_bars(monkeypatch, tmp_path):
    import transformers

    from seps.cli import quiet_hub_progress

    hf = transformers.utils.logging
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    hf.enable_progress_bar()
    try:
        argv = ["run", "seven-differences", "--profile", "smoke", "--dry-run", "--no-progress"]
        assert main([*argv, "--results", str(tmp_path)]) == 0
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"  # reaches worker processes
        assert not hf.is_progress_bar_enabled()
        # a value the user chose is theirs
        hf.enable_progress_bar()
        monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
        quiet_hub_progress()
        assert hf.is_progress_bar_enabled()
    finally:
        hf.enable_progress_bar()
