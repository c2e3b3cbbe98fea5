"""The ``paper`` profile at its real model sizes, one step on the CPU, fully offline.

``seps-bench run <matrix> --profile paper`` with ``--set`` options that keep the paper's
architectures (the transformers ViT-Base/16 at 224 px, BERT-base, C=512) and the rest of
its official recipe, but start them from random weights built here (ViT-Base from a folder
holding only ``ViTConfig()``'s ``config.json``; BERT-base a ``save_pretrained`` folder of
a random ``BertConfig()`` sized to a WordPiece tokenizer trained on the captions), train
one step of batch 2 on a generated Flickr30K-layout folder (6 train and 4 test images at
224 px) and evaluate on its 4 test images x 20 captions. The hub is unreachable
(``HF_HUB_OFFLINE=1`` and sockets that refuse to connect), so a path that still needed the
network would fail here.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from test_official_recipe import official_copy
from transformers import BertConfig, BertModel, ViTConfig

from seps.cli import main
from seps.data.layout import load_split
from seps.data.synth import generate_synthetic
from seps.data.text import train_wordpiece_tokenizer

N_TRAIN, N_DEV, N_TEST = 6, 1, 4


def _f30k_folder(tmp_path: Path) -> Path:
    """A Flickr30K-layout folder (``f30k_*.jsonl``, ``*_caps.txt``, ``id_mapping.json``,
    no ``meta.json``) of 6 train, 1 dev and 4 test images at 224 px, 5 captions each."""
    n = N_TRAIN + N_DEV + N_TEST
    synth = generate_synthetic(
        tmp_path / "synth",
        n_images=n,
        seed=0,
        image_size=224,
        splits=(N_TRAIN / n, N_DEV / n, N_TEST / n),
    )
    return official_copy(synth, tmp_path / "f30k")


def _bert_base(tmp_path: Path, data: Path) -> tuple[Path, Path]:
    """(BERT-base folder with random weights, its tokenizer folder): a WordPiece tokenizer
    trained on the folder's captions and a ``BertConfig()`` (hidden 768, 12 layers, 12
    heads) whose vocabulary is exactly that tokenizer's, as a pretrained BERT requires."""
    train = load_split(data, "train", dense_per="image")
    tokenizer = train_wordpiece_tokenizer(train.captions + train.dense, vocab_size=2000)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=len(tokenizer)), add_pooling_layer=True)
    bert.save_pretrained(tmp_path / "bert-base")
    return tmp_path / "bert-base", tmp_path / "tokenizer"


@pytest.mark.slow
def test_paper_profile_trains_one_step_with_random_vit_base_and_bert_base_offline(
    tmp_path, no_network, capsys
):
    data = _f30k_folder(tmp_path)
    bert, tokenizer = _bert_base(tmp_path, data)
    vit = tmp_path / "vit-base"
    ViTConfig().save_pretrained(vit)  # the defaults are ViT-Base/16 at 224 px
    results, reports = tmp_path / "results", tmp_path / "reports"
    sets = {
        "train.epochs": 1,
        "train.max_steps_per_epoch": 1,
        "train.batch_size": 2,
        "train.workers": 0,
        "train.val_images": 0,
        # The official warm-up weighs the alignment loss of epoch 0's step i by i / steps:
        # the only step would be weighed 0 and no gradient would reach the backbones.
        "train.warmup": "false",
        # The profile's transformers ViT-Base/16 at 224 px, built from a config.json alone
        # (random init): the profile's backbone_source=hf stays.
        "train.backbone": vit,
        "train.pretrained": "null",
        "train.text_backbone": bert,
        "train.tokenizer": tokenizer,
    }
    t0 = time.perf_counter()
    try:
        code = main(
            ["run", "seven-differences", "--profile", "paper", "--only", "code", "--seeds", "0",
             "--dataset", "f30k", "--data-path", str(data), "--image-dir", str(data / "images"),
             "--results", str(results), "--reports", str(reports), "--no-report",
             "--no-progress", "--device", "cpu",
             *(a for k, v in sets.items() for a in ("--set", f"{k}={v}"))]
        )  # fmt: skip
    finally:  # the random BERT-base weights and the checkpoint take about 1 GB
        shutil.rmtree(bert, ignore_errors=True)
        shutil.rmtree(results / "_work", ignore_errors=True)
    seconds = time.perf_counter() - t0
    out = capsys.readouterr().out
    records = [p for p in results.rglob("*.json") if "_work" not in p.parts]
    assert len(records) == 1, (out, records)
    record = json.loads(records[0].read_text())
    assert record["status"] == "done", record.get("traceback") or record.get("error")
    assert code == 0, out
    assert no_network == []
    cfg = record["train_config"]
    assert (cfg["backbone"], cfg["backbone_source"], cfg["pretrained"]) == (str(vit), "hf", None)
    assert (cfg["image_size"], cfg["text_backbone"]) == (224, str(bert))
    assert (cfg["dataset"], cfg["image_augment"], cfg["eval_max_words"]) == ("f30k", True, 90)
    assert record["head_config"]["embed_size"] == 512 and record["run_id"] == "code"
    assert record["profile"].startswith("paper+")
    [epoch] = record["history"]
    assert epoch["steps"] == 1 and epoch["nonfinite_steps"] == 0
    # The step trained: a hinge loss and a gradient through ViT-Base and BERT-base.
    assert epoch["align"] > 0 and epoch["grad_norm"] > 0
    metrics = record["metrics"]
    assert {"i2t_r1", "t2i_r1", "rsum"} <= set(metrics), metrics
    assert 0.0 <= metrics["rsum"] <= 600.0
    print(f"paper-scale one-step run: {seconds:.0f} s")
