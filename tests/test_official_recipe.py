"""The official training recipe as switches: truncation, image and caption augmentation,
validation on the official dev split, DataLoader workers, slim final checkpoints.

The official values (``lib/image_caption.py``, ``lib/evaluation.py``, ``arguments.py`` of
the SEPS/LAPS code): no truncation before BERT, the first 90 token features kept at
evaluation, RandomResizedCrop(scale 0.6-1, bicubic) + horizontal flip in training only,
caption augmentation decided per whole word. The ``paper`` profile turns them on; the
defaults keep the earlier behaviour.
"""

from __future__ import annotations

import json
import math
import random
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from test_train import tiny as train_tiny

from seps import get_config
from seps.cli import main
from seps.data.augment import CROP_RATIO, CROP_SCALE, random_resized_crop_box
from seps.data.layout import DataError, decode_image, load_split
from seps.data.text import augment_caption_ids
from seps.experiments.definitions import load_profile
from seps.train import TrainConfig, load_run_checkpoint, train
from seps.train.data import (
    TextTable,
    build_tokenizer,
    image_batches,
    keep_first_tokens,
    load,
    split_tensors,
)

HEAD = get_config("code", embed_size=32)


def tiny(data, out, **kw) -> TrainConfig:
    """test_train's tiny run, one epoch of two steps."""
    return train_tiny(data, out, **{"epochs": 1, "max_steps_per_epoch": 2, **kw})


def official_copy(synth, dest, *, dev_dense: bool = True, dev: bool = True):
    """The synthetic set as a user's folder in the official layout (no meta.json), named
    f30k like the official files; without ``dev_dense`` it lacks ``f30k_dev.jsonl``, as
    the official Flickr30K files do."""
    shutil.copytree(synth, dest, ignore=shutil.ignore_patterns("meta.json", "tokenizer-cache"))
    for path in dest.glob("synth_*.jsonl"):
        path.rename(dest / path.name.replace("synth_", "f30k_"))
    if not dev_dense:
        (dest / "f30k_dev.jsonl").unlink()
    if not dev:
        for name in ("dev_caps.txt", "dev_ids.txt", "f30k_dev.jsonl"):
            (dest / name).unlink(missing_ok=True)
    return dest


# --------------------------------------------------------------------------- truncation


def test_paper_profile_sets_the_official_recipe():
    train_values = load_profile("paper").train
    assert train_values["max_words"] == 0 and train_values["max_dense_words"] == 0
    assert train_values["eval_max_words"] == 90
    assert train_values["image_augment"] and train_values["augment_whole_word"]
    assert train_values["workers"] > 0
    cfg = TrainConfig(**{**train_values, "data_path": "anywhere"})
    assert not cfg.keep_optimizer


def test_defaults_keep_the_earlier_truncation():
    cfg = TrainConfig()
    assert (cfg.max_words, cfg.max_dense_words, cfg.eval_max_words) == (32, 160, 0)
    assert not (cfg.image_augment or cfg.augment_whole_word or cfg.keep_optimizer)
    assert cfg.workers == 0


@pytest.mark.parametrize(
    ("field", "value"), [("max_words", 2), ("max_dense_words", 1), ("eval_max_words", 1)]
)
def test_truncation_values_are_checked(field, value):
    with pytest.raises(ValueError, match=f"'{field}'.*0 "):
        TrainConfig(**{field: value})


def test_max_words_zero_keeps_every_word_piece(synth):
    cfg = tiny(synth, "unused")
    tokenizer = build_tokenizer(cfg, synth)
    long_text = " ".join(["a red cube left of a blue sphere"] * 12)
    texts = [long_text, "a red cube"]
    full = tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert len(full[0]) > 40

    whole = TextTable(tokenizer, texts, 0)
    ids, lens = whole.batch([0, 1])
    assert lens.tolist() == [len(full[0]) + 2, len(full[1]) + 2]
    assert whole.max_len == len(full[0]) + 2  # the width evaluation pads to
    assert ids[0, 1:-1].tolist() == full[0]

    cut = TextTable(tokenizer, texts, 32)  # the default: cut before the encoder
    ids, lens = cut.batch([0, 1])
    assert lens.tolist() == [32, len(full[1]) + 2] and cut.max_len == 32
    assert ids[0, 1:31].tolist() == full[0][:30]


def test_keep_first_tokens_cuts_encoded_rows_after_the_encoder():
    embs = torch.arange(2 * 120 * 3, dtype=torch.float32).view(2, 120, 3)
    lens = torch.tensor([120, 40])
    kept, kept_lens = keep_first_tokens(embs, lens, 90)
    assert kept.shape == (2, 90, 3) and torch.equal(kept, embs[:, :90])
    assert kept_lens.tolist() == [90, 40]
    same, same_lens = keep_first_tokens(embs, lens, 0)
    assert same is embs and same_lens is lens


def test_eval_max_words_reaches_evaluation_tables_only(synth):
    cfg = tiny(synth, "unused", max_words=0, max_dense_words=0, eval_max_words=90)
    tokenizer = build_tokenizer(cfg, synth)
    data = load(cfg, synth, "dev")
    evaluation = split_tensors(cfg, data, tokenizer)
    training = split_tensors(cfg, data, tokenizer, train=True)
    assert evaluation.captions.keep == evaluation.dense.keep == 90
    assert training.captions.keep == training.dense.keep == 0


def test_evaluation_scores_only_the_first_eval_max_words_features(synth):
    from seps.model.seps_model import ModelSpec, build_model
    from seps.train.evaluation import encode_split

    cfg = tiny(synth, "unused", max_words=0, max_dense_words=0, eval_max_words=5)
    tokenizer = build_tokenizer(cfg, synth)
    split = split_tensors(cfg, load(cfg, synth, "dev"), tokenizer)
    model = build_model(ModelSpec(image_size=32, vocab_size=len(tokenizer)), HEAD)
    emb = encode_split(model, split, torch.device("cpu"))
    assert emb["dense"].shape[1] == 5 and int(emb["dense_lens"].max()) == 5


# --------------------------------------------------------------------------- augmentation


def test_random_resized_crop_box_stays_in_the_official_ranges():
    rng = np.random.default_rng(0)
    for width, height in [(500, 375), (375, 500), (64, 64), (33, 200)]:
        for _ in range(200):
            left, top, w, h = random_resized_crop_box(width, height, rng)
            assert left >= 0 and top >= 0 and left + w <= width and top + h <= height
            if (width, height) != (33, 200):  # a too-narrow image takes the central fallback
                # rounding w and h to whole pixels moves area and ratio by a pixel's worth
                tol = 2.0 / min(w, h)
                assert CROP_SCALE[0] - tol <= w * h / (width * height) <= CROP_SCALE[1] + tol
                assert CROP_RATIO[0] - tol <= w / h <= CROP_RATIO[1] + tol


def test_random_resized_crop_box_falls_back_to_a_central_crop():
    class Never:  # every draw: an area and ratio that cannot fit
        def uniform(self, lo, hi):
            return hi

        def integers(self, lo, hi):  # pragma: no cover - never reached
            raise AssertionError

    # 10 x 100: ratio 0.1 < 3/4, so the fallback keeps the full width, h = 10 / (3/4)
    box = random_resized_crop_box(10, 100, Never(), scale=(2.0, 2.0))
    assert box == (0, (100 - 13) // 2, 10, 13)


def test_augmented_decode_is_torchvisions_resized_crop_and_flip(tmp_path):
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    path = tmp_path / "photo.png"
    pixels = np.random.default_rng(1).integers(0, 256, (60, 90, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    flips = 0
    for seed in range(12):
        out = decode_image(path, 32, np.random.default_rng(seed))
        rng = np.random.default_rng(seed)
        left, top, w, h = random_resized_crop_box(90, 60, rng)
        with Image.open(path) as im:
            ref = TF.resized_crop(
                im.convert("RGB"), top, left, h, w, [32, 32], InterpolationMode.BICUBIC
            )
        if rng.random() < 0.5:
            ref, flips = TF.hflip(ref), flips + 1
        assert torch.equal(out, torch.from_numpy(np.asarray(ref).copy()).permute(2, 0, 1))
    assert 0 < flips < 12
    # without a generator: the evaluation transform (whole image, bicubic resize)
    with Image.open(path) as im:
        ref = im.convert("RGB").resize((32, 32), Image.Resampling.BICUBIC)
    assert torch.equal(
        decode_image(path, 32), torch.from_numpy(np.asarray(ref).copy()).permute(2, 0, 1)
    )


def _first_step_images(cfg, synth, tokenizer, *, train_split: bool, seed: int | None = 7):
    split = split_tensors(cfg, load(cfg, synth, "dev"), tokenizer, train=train_split)
    seed = seed if split.images.augment else None
    return next(image_batches(split.images, [[0, 1, 2, 3]], seed=seed)), split


def test_image_augment_changes_training_images_only_when_on(synth):
    tokenizer = build_tokenizer(tiny(synth, "unused"), synth)
    plain, _ = _first_step_images(tiny(synth, "u"), synth, tokenizer, train_split=False)

    off, split = _first_step_images(tiny(synth, "u"), synth, tokenizer, train_split=True)
    assert not split.images.augment and torch.equal(off, plain)

    on = tiny(synth, "u", image_augment=True)
    augmented, split = _first_step_images(on, synth, tokenizer, train_split=True)
    assert split.images.augment and split.images.cache is None
    assert augmented.shape == plain.shape and not torch.equal(augmented, plain)
    again, _ = _first_step_images(on, synth, tokenizer, train_split=True)
    assert torch.equal(again, augmented)  # seeded: the same draw for the same epoch and step
    other, _ = _first_step_images(on, synth, tokenizer, train_split=True, seed=8)
    assert not torch.equal(other, augmented)

    # never at evaluation, and not on the cached features of the frozen protocol
    evaluation, split = _first_step_images(on, synth, tokenizer, train_split=False)
    assert not split.images.augment and torch.equal(evaluation, plain)
    frozen = tiny(synth, "u", image_augment=True, protocol="frozen")
    _, split = _first_step_images(frozen, synth, tokenizer, train_split=True)
    assert not split.images.augment


def test_augment_whole_word_reaches_the_caption_augmentation(synth):
    cfg = tiny(synth, "u", augment_whole_word=True)
    tokenizer = build_tokenizer(cfg, synth)
    split = split_tensors(cfg, load(cfg, synth, "train"), tokenizer, train=True)
    assert split.captions.whole_word and split.dense.whole_word
    rows = list(range(10))
    ids, lens = split.dense.batch(rows, random.Random(3))
    rng = random.Random(3)
    for r in rows:
        want = augment_caption_ids(split.dense.pieces[r], tokenizer, rng, whole_word=True)
        assert ids[r, 1 : int(lens[r]) - 1].tolist() == want[: split.dense.max_len - 2]


def test_training_with_the_paper_recipe_runs(synth, tmp_path):
    cfg = tiny(
        synth,
        tmp_path / "paper",
        max_words=0,
        max_dense_words=0,
        augment_whole_word=True,
        image_augment=True,
    )
    result = train(cfg, HEAD)
    assert math.isfinite(result["history"][0]["loss"]) and result["history"][0]["steps"] == 2
    assert result["metrics"]["rsum"] >= 0


# --------------------------------------------------------------------------- dev split


def test_loader_reads_a_split_without_dense_captions_when_told(synth, tmp_path):
    folder = official_copy(synth, tmp_path / "f30k", dev_dense=False)
    with pytest.raises(DataError, match=r"_dev\.jsonl: file not found"):
        load_split(folder, "dev")
    data = load_split(folder, "dev", require_dense=False)
    assert not data.has_dense and data.dense == [] and data.n_images > 0
    with pytest.raises(DataError, match="no dense-caption file"):
        _ = data.dense_texts
    assert load_split(folder, "test", require_dense=False).has_dense


def test_validation_on_the_official_dev_split_with_its_dense_captions(synth, tmp_path, capsys):
    folder = official_copy(synth, tmp_path / "f30k")
    result = train(tiny(folder, tmp_path / "out", dataset="f30k"), HEAD)
    epoch = result["history"][0]
    assert "val" in epoch and "val_dense_source" not in epoch
    assert "validation" not in capsys.readouterr().out


def test_validation_without_dev_dense_captions_falls_back_to_none_and_says_so(
    synth, tmp_path, capsys
):
    folder = official_copy(synth, tmp_path / "f30k", dev_dense=False)
    result = train(tiny(folder, tmp_path / "out", dataset="f30k"), HEAD)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("validation")]
    assert len(lines) == 1
    assert "no dense captions" in lines[0] and "dense_source=none instead of candidate" in lines[0]
    epoch = result["history"][0]
    assert epoch["val_dense_source"] == "none" and epoch["val"]["rsum"] >= 0
    assert result["dense_source"] == "candidate"  # training and test keep their protocol


def test_validation_without_a_dev_split_says_it_is_skipped(synth, tmp_path, capsys):
    folder = official_copy(synth, tmp_path / "f30k", dev=False)
    result = train(tiny(folder, tmp_path / "out", dataset="f30k"), HEAD)
    out = capsys.readouterr().out
    assert "validation: no 'dev' split" in out and "skipped" in out
    assert "val" not in result["history"][0]


def test_a_malformed_dev_split_is_an_error_not_a_skip(synth, tmp_path):
    folder = official_copy(synth, tmp_path / "f30k")
    (folder / "dev_ids.txt").write_text("1\n2\n")
    with pytest.raises(DataError, match=r"dev_ids\.txt"):
        train(tiny(folder, tmp_path / "out", dataset="f30k"), HEAD)


# --------------------------------------------------------------------------- workers


@pytest.mark.parametrize("augment", [False, True])
def test_workers_give_the_same_batches_as_the_main_process(synth, augment):
    cfg = tiny(synth, "u", image_augment=augment)
    tokenizer = build_tokenizer(cfg, synth)
    split = split_tensors(cfg, load(cfg, synth, "train"), tokenizer, train=True)
    if not augment:
        split.images.cache = None  # a split too large for memory: decoded at every step
    steps = [[3, 1, 4, 1], [5, 9, 2, 6], [5, 3, 5, 8]]
    seed = 11 if augment else None
    inline = list(image_batches(split.images, steps, seed=seed, offset=4))
    workers = list(image_batches(split.images, steps, seed=seed, offset=4, workers=2))
    assert len(inline) == len(workers) == 3
    assert all(torch.equal(a, b) for a, b in zip(inline, workers, strict=True))


def test_training_with_workers_equals_training_without(synth, tmp_path):
    runs = [
        train(tiny(synth, tmp_path / f"w{w}", image_augment=True, workers=w), HEAD) for w in (0, 2)
    ]
    assert runs[0]["metrics"] == runs[1]["metrics"]
    assert [s["loss"] for s in runs[0]["history"][0]["steps_log"]] == [
        s["loss"] for s in runs[1]["history"][0]["steps_log"]
    ]


# --------------------------------------------------------------------------- checkpoints


def test_completed_checkpoint_drops_optimizer_state_unless_kept(synth, tmp_path):
    slim = tiny(synth, tmp_path / "slim", epochs=2, val_images=0)
    assert train(slim, HEAD, stop_after_epoch=0) == {"interrupted_after_epoch": 0}
    path = tmp_path / "slim" / "checkpoint_last.safetensors"
    assert {"optimizer", "scheduler"} <= set(load_run_checkpoint(path))  # in progress
    done = train(slim, HEAD, resume=True)
    assert not {"optimizer", "scheduler"} & set(load_run_checkpoint(path))

    kept = tiny(synth, tmp_path / "kept", epochs=2, val_images=0, keep_optimizer=True)
    train(kept, HEAD)
    assert {"optimizer", "scheduler"} <= set(
        load_run_checkpoint(tmp_path / "kept" / "checkpoint_last.safetensors")
    )

    # resuming the completed run only evaluates again, without optimizer state
    again = train(slim, HEAD, resume=True)
    assert again["metrics"] == done["metrics"] and again["history"] == done["history"]


def test_a_slim_checkpoint_cannot_train_further_and_says_why(synth, tmp_path):
    cfg = tiny(synth, tmp_path / "run", val_images=0)
    train(cfg, HEAD)
    longer = tiny(synth, tmp_path / "run", val_images=0, epochs=2)
    with pytest.raises(ValueError, match=r"without --keep-optimizer.*--epochs 1"):
        train(longer, HEAD, resume=True)


def test_cli_flags_set_the_recipe(synth, tmp_path):
    out = tmp_path / "cli"
    args = ["train", "--data-path", str(synth), "--image-size", "32", "--epochs", "1",
            "--batch-size", "8", "--max-steps-per-epoch", "1", "--val-images", "0",
            "--set", "head.embed_size=32", "--out", str(out), "--no-progress",
            "--max-words", "0", "--max-dense-words", "0", "--eval-max-words", "90",
            "--image-augment", "--augment-whole-word", "--workers", "2",
            "--keep-optimizer"]  # fmt: skip
    assert main(args) == 0
    stored = json.loads((out / "result.json").read_text())["train_config"]
    assert {k: stored[k] for k in ("max_words", "max_dense_words", "eval_max_words")} == {
        "max_words": 0,
        "max_dense_words": 0,
        "eval_max_words": 90,
    }
    assert stored["image_augment"] and stored["augment_whole_word"] and stored["keep_optimizer"]
    assert stored["workers"] == 2
    assert "optimizer" in load_run_checkpoint(out / "checkpoint_last.safetensors")


def test_a_matrix_on_an_incomplete_official_folder_stops_before_any_record(tmp_path):
    """Only test files (as ../shared/data/f30k): one message naming the missing file, no
    failed record per run."""
    from seps.cli import main

    data = tmp_path / "f30k"
    data.mkdir()
    for name in ("test_caps.txt", "test_ids.txt", "f30k_test.jsonl", "id_mapping.json"):
        (data / name).write_text("")
    results = tmp_path / "results"
    args = ["run", "seven-differences", "--profile", "smoke", "--only", "code", "--seeds", "0",
            "--dataset", "f30k", "--data-path", str(data), "--results", str(results),
            "--no-report"]  # fmt: skip
    assert main(args) == 2
    assert not list(results.rglob("*.json"))
