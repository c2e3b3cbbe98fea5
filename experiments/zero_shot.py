"""Zero-shot rSum of a pretraining build: its own late-interaction score
(``seps.train.pretrain.late_interaction``, the pretraining's objective) between the
build's image tokens and caption words on a standard seed's 1,000-image test split. No
SEPS head and no fine-tuning: what the backbones retrieve on their own.

    python experiments/zero_shot.py data/pretrained/synth-48-9c469803d9455b2a --seeds 0,1

An experiment tool, not part of the suite (no record stores its numbers).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from seps.encoders import build_image_encoder, build_text_encoder
from seps.metrics import recall_at_k
from seps.text import load_tokenizer
from seps.train.data import load, prepare_data_dir, split_tensors
from seps.train.pretrain import PROJECTIONS, late_interaction, load_projections
from seps.train_config import TrainConfig


def _encoders(folder: Path, vocab: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The build's encoders, loaded as a run loads them (weights, then projections)."""
    r = json.loads((folder / "meta.json").read_text())["values"]
    img = build_image_encoder(
        r["backbone"], r["embed_size"], image_size=r["image_size"],
        pretrained=str(folder / "vision.safetensors"),
    )  # fmt: skip
    txt = build_text_encoder(str(folder / "text"), r["embed_size"], vocab)
    if not load_projections(SimpleNamespace(img_enc=img, txt_enc=txt), folder):
        raise ValueError(f"{folder / PROJECTIONS}: shapes do not fit embed_size")
    return img.eval(), txt.eval()


def zero_shot_rsum(folder: Path, seed: int, synth_images: int = 10000) -> float:
    """rSum of the build at ``folder`` on the test split of the standard profile's seed."""
    tok = load_tokenizer(str(folder / "tokenizer"))
    cfg = TrainConfig(synth_images=synth_images, synth_seed=seed, image_size=48, seed=seed,
                      progress=False)  # fmt: skip
    data_dir = prepare_data_dir(cfg)
    split = split_tensors(cfg, load(cfg, data_dir, cfg.eval_split), tok)
    img_enc, txt_enc = _encoders(folder, len(tok))
    n, n_caps = split.data.n_images, len(split.captions.pieces)
    with torch.no_grad():
        imgs = torch.cat([img_enc(split.images.batch(list(range(i, min(i + 100, n)))))
                          for i in range(0, n, 100)])  # fmt: skip
        cols = []
        for t in range(0, n_caps, 250):
            ids, lens = split.captions.batch(list(range(t, min(t + 250, n_caps))))
            cols.append(late_interaction(imgs, txt_enc(ids, lens), lens))
    return recall_at_k(torch.cat(cols, 1).numpy(), 5)["rsum"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", type=Path, help="pretraining build folders")
    ap.add_argument("--seeds", default="0", help="standard seeds whose test split is used")
    args = ap.parse_args(argv)
    for folder in args.builds:
        for seed in (int(s) for s in args.seeds.split(",")):
            print(f"{folder}\tseed {seed}\tzero-shot rSum {zero_shot_rsum(folder, seed):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
