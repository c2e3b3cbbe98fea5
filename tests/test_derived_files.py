"""Derived files are checked on read (seps.io.derived): a feature cache, checkpoint, tokenizer
cache, dataset or pretraining build damaged on disk (cut short, or bytes overwritten in its
middle) is named in one line, made again, and the run's record equals a fresh store's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from ablation_roots import make_ablation_root
from tiny_recipe import make_tiny_recipe

from seps import get_config
from seps.experiments.definitions import load_matrix, load_profile
from seps.io.derived import (
    HASH_KEY,
    MANIFEST,
    folder_problem,
    load_safetensors,
    save_safetensors,
    tensors_digest,
)
from seps.report.same_bits import compare_records
from seps.runs.runner import run_matrix
from seps.train import TrainConfig, train

REPO = Path(__file__).resolve().parents[1]

# The smoke profile's shape at test size (seconds a run).
PROFILES = """
tiny:
  description: test-sized
  seeds: [0]
  head: {embed_size: 32}
  train: {synth_images: 60, image_size: 32, epochs: 1, batch_size: 8, max_steps_per_epoch: 2,
          val_images: 0, backbone_lr_mult: 1.0, vocab_size: 300, max_dense_words: 48}
"""
MATRIX = "name: mini\ndescription: one run\nbaseline: code\nruns:\n  - {id: code, preset: code}\n"


@pytest.fixture()
def root(tmp_path):
    return make_ablation_root(tmp_path / "ablations", {"mini": MATRIX}, profiles=PROFILES)


def _run(root, results, **train):
    """The one run of ``mini`` into the store ``results``: its record."""
    (rec,) = run_matrix(
        load_matrix("mini", root),
        load_profile("tiny", root),
        [0],
        results,
        progress=False,
        device="cpu",
        **train,
    )
    assert rec["status"] == "done", rec.get("error")
    return rec


def _damage(path: Path, how: str) -> None:
    """Cut ``path`` to two thirds, or flip every bit of up to 4 KiB in its middle."""
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[: len(data) * 2 // 3]))
        return
    n = min(4096, len(data) // 4)
    start = len(data) // 2 - n // 2
    data[start : start + n] = bytes(b ^ 0xFF for b in data[start : start + n])
    path.write_bytes(bytes(data))


def _named(err: str, path: Path) -> list[str]:
    """The warning lines that name ``path``; the output holds no traceback."""
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.startswith(f"warning: {path}: ")]


def _same(a: dict, b: dict) -> None:
    pair = compare_records("code", a, b)
    assert pair.same, pair.first_difference


def test_a_damaged_feature_cache_is_named_computed_again_and_gives_a_fresh_stores_record(
    root, synth, tmp_path, capsys
):
    fresh = _run(root, tmp_path / "a", data_path=str(synth), protocol="frozen")
    cache = tmp_path / "a" / "_work" / "feature_cache"
    files = sorted(cache.glob("*.safetensors"))
    assert [f.name.split("-")[0] for f in files] == ["eval", "train"]
    original = {f.name: f.read_bytes() for f in files}
    # A second store whose feature cache is the first one's, damaged: one file cut short,
    # the other overwritten in its middle (it reads whole, but not as written).
    shutil.copytree(cache, tmp_path / "b" / "_work" / "feature_cache")
    cut, flipped = (tmp_path / "b" / "_work" / "feature_cache" / f.name for f in files)
    _damage(cut, "truncate")
    _damage(flipped, "overwrite")
    capsys.readouterr()
    again = _run(root, tmp_path / "b", data_path=str(synth), protocol="frozen")
    err = capsys.readouterr().err
    (cut_line,) = _named(err, cut)
    (flipped_line,) = _named(err, flipped)
    assert "unreadable" in cut_line and "expected a whole safetensors file" in cut_line
    assert "does not match the sha256 written with it" in flipped_line
    assert all(line.endswith("computing the features again") for line in (cut_line, flipped_line))
    assert {f.name: f.read_bytes() for f in (cut, flipped)} == original  # made again
    _same(fresh, again)


@pytest.fixture(scope="module")
def uninterrupted(synth, tmp_path_factory):
    """A two-epoch run trained in one go (the fresh store's result)."""
    return train(_tiny(synth, tmp_path_factory.mktemp("full")), get_config("code", embed_size=32))


def _tiny(synth, out) -> TrainConfig:
    return TrainConfig(
        data_path=str(synth),
        image_size=32,
        epochs=2,
        batch_size=8,
        max_steps_per_epoch=2,
        val_images=0,
        progress=False,
        out_dir=str(out),
        vocab_size=300,
        max_dense_words=48,
        backbone_lr_mult=1.0,
    )


@pytest.mark.parametrize(
    "name,how",
    [
        ("checkpoint_last.safetensors", "truncate"),
        ("checkpoint_last.safetensors", "overwrite"),
        ("movement_init.safetensors", "overwrite"),
    ],
)
def test_a_run_resumed_from_a_damaged_checkpoint_trains_again_from_scratch(
    synth, tmp_path, capsys, uninterrupted, name, how
):
    head = get_config("code", embed_size=32)
    cfg = _tiny(synth, tmp_path / "run")
    assert train(cfg, head, stop_after_epoch=0) == {"interrupted_after_epoch": 0}
    damaged = tmp_path / "run" / name
    _damage(damaged, how)
    capsys.readouterr()
    resumed = train(cfg, head, resume=True)
    (line,) = _named(capsys.readouterr().err, damaged)
    assert line.endswith("; training again from the first epoch")
    assert "checkpoint_last.safetensors.corrupt" in line
    assert (tmp_path / "run" / f"{name}.corrupt").is_file()
    _same(uninterrupted, resumed)
    assert resumed["movement"] == uninterrupted["movement"]


def test_a_damaged_checkpoint_named_on_the_command_line_is_refused_in_one_line(tmp_path):
    from seps.io.safe_files import save_tensor_json
    from seps.train.checkpoints import load_run_checkpoint

    path = tmp_path / "checkpoint_last.safetensors"
    save_tensor_json(path, {"format": "seps-bench/1", "model": {"w": torch.ones(4096)}})
    _damage(path, "overwrite")
    with pytest.raises(ValueError, match=r"checkpoint '.*checkpoint_last.safetensors': content "
                       r"does not match the sha256 written with it \(expected "):  # fmt: skip
        load_run_checkpoint(path)
    assert path.is_file()  # a file given by name is the user's: left where it is


def test_a_damaged_tokenizer_cache_entry_is_named_trained_again_and_gives_a_fresh_stores_record(
    root, tmp_path, capsys
):
    data = tmp_path / "data"  # generated, with its tokenizer, by the first run
    fresh = _run(root, tmp_path / "a", data_path=str(data))
    (entry,) = (data / "tokenizer-cache").iterdir()
    assert folder_problem(entry) is None and folder_problem(data) is None  # both sealed
    original = (entry / "tokenizer.json").read_bytes()
    _damage(entry / "tokenizer.json", "overwrite")
    capsys.readouterr()
    again = _run(root, tmp_path / "b", data_path=str(data))
    (line,) = _named(capsys.readouterr().err, entry / "tokenizer.json")
    assert f"does not match the sha256 in {MANIFEST}" in line
    assert line.endswith(f"moved aside as {entry.name}.corrupt; training the tokenizer again")
    assert (entry / "tokenizer.json").read_bytes() == original and folder_problem(entry) is None
    assert again["tokenizer_hash"] == fresh["tokenizer_hash"]
    _same(fresh, again)


def test_an_unsealed_tokenizer_cache_entry_is_compared_with_one_trained_anew(tmp_path, capsys):
    """An entry made before entries were sealed: sealed when it equals what its captions
    give, else named and trained again."""
    from seps.runs.prebuild import check_inputs

    cfg = TrainConfig(data_path=str(tmp_path / "data"), synth_images=30, vocab_size=300)
    check_inputs(cfg)
    (entry,) = (tmp_path / "data" / "tokenizer-cache").iterdir()
    (entry / MANIFEST).unlink()
    check_inputs(cfg)
    assert folder_problem(entry) is None and capsys.readouterr().err == ""
    (entry / MANIFEST).unlink()
    doc = json.loads((entry / "tokenizer.json").read_text())
    vocab = doc["model"]["vocab"]
    a, b = sorted(vocab)[-2:]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # a valid tokenizer, but another one
    (entry / "tokenizer.json").write_text(json.dumps(doc))
    check_inputs(cfg)
    (line,) = _named(capsys.readouterr().err, entry / "tokenizer.json")
    assert "holds tokenizer" in line and "but its captions give" in line
    assert folder_problem(entry) is None


def test_a_damaged_generated_dataset_is_named_generated_again_and_gives_a_fresh_stores_record(
    root, tmp_path, capsys
):
    data = tmp_path / "data"
    fresh = _run(root, tmp_path / "a", data_path=str(data))
    image = sorted((data / "images").iterdir())[3]
    _damage(image, "truncate")
    _damage(data / "train_caps.txt", "overwrite")
    capsys.readouterr()
    again = _run(root, tmp_path / "b", data_path=str(data))
    err = capsys.readouterr().err
    (line,) = _named(err, image)  # the first damaged file, in path order
    assert "(1 more file of the folder differs)" in line
    assert line.endswith(f"moved aside as {data.name}.corrupt; generating the dataset again")
    assert len([x for x in err.splitlines() if x.startswith("warning: ")]) == 1
    assert folder_problem(data) is None and (tmp_path / f"{data.name}.corrupt").is_dir()
    _same(fresh, again)


def test_a_users_copy_of_a_synthetic_set_is_not_sealed_and_reads_as_before(synth, tmp_path):
    """At an explicit --data-path, a set without a seal may be a copy changed on purpose
    (tests/test_train.py cuts an image of one): it is read as it is, never regenerated."""
    from seps.runs.prebuild import check_inputs

    data = tmp_path / "copy"
    shutil.copytree(synth, data, ignore=shutil.ignore_patterns("tokenizer-cache", MANIFEST))
    check_inputs(TrainConfig(data_path=str(data), vocab_size=300))
    assert not (data / MANIFEST).exists()


@pytest.fixture()
def tiny_recipe(tmp_path, monkeypatch):
    """A test-sized pretraining recipe ``tiny-test`` built under ``tmp_path``."""
    import seps.train.pretrain as pretrain

    monkeypatch.chdir(tmp_path)  # the recipe's own synthetic draw goes under ./data
    monkeypatch.setitem(pretrain.RECIPES, "tiny-test", make_tiny_recipe())
    monkeypatch.setattr(pretrain, "DEFAULT_ROOT", tmp_path / "pretrained")
    return pretrain


def test_a_damaged_pretraining_build_is_named_built_again_and_gives_a_fresh_stores_record(
    root, synth, tmp_path, capsys, tiny_recipe
):
    fresh = _run(root, tmp_path / "a", data_path=str(synth), pretrain="tiny-test")
    folder = tiny_recipe.pretrained_dir("tiny-test")
    assert folder_problem(folder) is None  # sealed when built
    _damage(folder / "meta.json", "truncate")  # still a complete build by its marker file
    _damage(folder / "vision.safetensors", "overwrite")
    capsys.readouterr()
    again = _run(root, tmp_path / "b", data_path=str(synth), pretrain="tiny-test")
    (line,) = _named(capsys.readouterr().err, folder / "meta.json")  # the first, by path
    assert line.endswith(
        f"(1 more file of the folder differs); moved aside as {folder.name}.corrupt; "
        "building it again"
    )
    assert folder_problem(folder) is None
    assert again["pretrain_fingerprint"] == fresh["pretrain_fingerprint"]
    _same(fresh, again)


def test_a_builds_unreadable_float_path_stamp_is_named_and_the_build_made_again(
    tiny_recipe, capsys
):
    from seps.runs.prebuild import BUILT_ON, build_checked

    folder = build_checked("tiny-test", progress=False)
    weights = (folder / "vision.safetensors").read_bytes()
    _damage(folder / BUILT_ON, "truncate")
    capsys.readouterr()
    assert build_checked("tiny-test", progress=False) == folder
    (line,) = _named(capsys.readouterr().err, folder / BUILT_ON)
    assert "expected a JSON object" in line and line.endswith("; building it again")
    assert json.loads((folder / BUILT_ON).read_text())["cpu"]
    assert (folder / "vision.safetensors").read_bytes() == weights
    assert folder_problem(folder) is None


#: The fingerprints (seps.experiments.provenance.pretrain_fingerprint) of the committed builds'
#: weights,
#: as every committed record that starts from them names them.
COMMITTED_BUILDS = {
    "uni-48-w128": "72ff60f57a955f1d",
    "uni-48-w128@1": "456a7ca6dc625290",
    "uni-48-w128@2": "4ba4cbe1a7af76ce",
}


@pytest.mark.parametrize("name", sorted(COMMITTED_BUILDS))
def test_the_committed_builds_match_their_seals_and_keep_their_weights(name):
    from seps.experiments.provenance import pretrain_fingerprint
    from seps.runs.prebuild import _build_problem
    from seps.train.pretrain import pretrained_dir

    folder = pretrained_dir(name, REPO / "data" / "pretrained")
    assert (folder / MANIFEST).is_file()
    assert folder_problem(folder) is None and _build_problem(folder) is None
    assert pretrain_fingerprint(folder) == COMMITTED_BUILDS[name]


def test_a_safetensors_file_carries_the_hash_of_its_tensors_in_its_own_metadata(tmp_path):
    """One file, one atomic rename: no sidecar to lose; any safetensors reader reads it."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    tensors = {"b": torch.arange(6).view(2, 3), "a": torch.ones(3, dtype=torch.bfloat16)}
    path = tmp_path / "x.safetensors"
    save_safetensors(path, tensors)
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {HASH_KEY: tensors_digest(tensors)}
    assert all(torch.equal(load_file(str(path))[k], v) for k, v in tensors.items())
    assert all(torch.equal(load_safetensors(path)[k], v) for k, v in tensors.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.safetensors"]
