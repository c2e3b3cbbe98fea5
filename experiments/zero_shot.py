"""Zero-shot rSum of a pretraining build: its own late-interaction score
(``seps.train.pretrain.late_interaction``, the pretraining's objective) between the
build's image tokens and caption words on a standard seed's 1,000-image test split. No
SEPS head and no fine-tuning: what the backbones retrieve on their own.

    python experiments/zero_shot.py data/pretrained/synth-48-9c469803d9455b2a --seeds 0,1

With ``--keep``, the image side keeps half of its patch tokens (``ceil(N/2)``, as the
SEPS head's ``sparse_ratio=0.5``; ``[CLS]`` always kept) before the late interaction:

- ``all``: every token (the default, the pretraining's own score);
- ``self-attention``: the half most similar to the image's mean patch token, the image
  prior of SEPS's patch score (``seps.selection.image_self_attention``, SPEC.md step 2),
  i.e. what the selection keeps before any text or learned predictor has a say;
- ``random``: a seeded random half (the same draw for every build);
- ``least-attended``: the other half (the patches that prior drops).

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
from seps.selection import image_self_attention, split_cls_token
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


KEEPS = ("all", "self-attention", "random", "least-attended")


def keep_half(imgs: torch.Tensor, keep: str) -> torch.Tensor:
    """``imgs (B, L_v, C)`` with half of the patch tokens kept as ``keep`` says (above)."""
    if keep == "all":
        return imgs
    cls, x = split_cls_token(imgs)
    n = x.shape[1]
    k = (n + 1) // 2
    if keep == "random":
        score = torch.rand(x.shape[:2], generator=torch.Generator().manual_seed(0))
    else:
        score = image_self_attention(x)
        score = score if keep == "self-attention" else -score
    idx = score.topk(k, dim=1).indices
    kept = x.gather(1, idx[..., None].expand(-1, -1, x.shape[2]))
    return kept if cls is None else torch.cat([cls[:, None], kept], 1)


def zero_shot_rsums(
    folder: Path, seed: int, keeps: tuple[str, ...] = ("all",), synth_images: int = 10000
) -> dict[str, float]:
    """rSum of the build at ``folder`` on the test split of the standard profile's seed,
    per ``keep`` (:func:`keep_half`); the images and captions are encoded once for all."""
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
        texts = []
        for t in range(0, n_caps, 250):
            ids, lens = split.captions.batch(list(range(t, min(t + 250, n_caps))))
            texts.append((txt_enc(ids, lens), lens))
        out = {}
        for keep in keeps:
            kept = keep_half(imgs, keep)
            sims = torch.cat([late_interaction(kept, w, lens) for w, lens in texts], 1)
            out[keep] = recall_at_k(sims.numpy(), 5)["rsum"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", type=Path, help="pretraining build folders")
    ap.add_argument("--seeds", default="0", help="standard seeds whose test split is used")
    ap.add_argument(
        "--keep", default="all", help=f"comma-separated token halves to score: {', '.join(KEEPS)}"
    )
    args = ap.parse_args(argv)
    keeps = args.keep.split(",")
    for k in keeps:
        if k not in KEEPS:
            ap.error(f"--keep {k!r}: expected one of {', '.join(KEEPS)}")
    for folder in args.builds:
        for seed in (int(s) for s in args.seeds.split(",")):
            for k, rsum in zero_shot_rsums(folder, seed, tuple(keeps)).items():
                print(f"{folder}\tseed {seed}\tkeep {k}\tzero-shot rSum {rsum:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
