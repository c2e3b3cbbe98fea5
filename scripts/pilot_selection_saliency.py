"""Pilot (docs/regime.md): does LAPS' image self-attention score favour object patches?

SPEC.md step 2: ``s_im[v, n] = <l2n(mean_n x[v]), l2n(x[v, n])>``, the cosine of each patch
with the image's mean patch token. On the synthetic scenes most patches are background,
so the mean token is the background's and ``s_im`` may rank the objects last. This script
measures that on the frozen tokens of a ``uni-48-w128`` build (before the run's learned
projection, which is linear) over the first images of a split, with the patches each
object covers taken from the redrawn scene (``seps.controls.oracle_table``).

Usage: ``python scripts/pilot_selection_saliency.py [DATA_DIR] [BUILD_DIR] [N_IMAGES]``
(defaults: the 10,000-image grammar-v2 set of seed 0 and build 0 under ``data/``, 300).
A diagnostic for the regime's design, not a test and not a benchmark.
"""

from __future__ import annotations

import glob
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from scipy.stats import mannwhitneyu

from seps.controls import oracle_table
from seps.data.layout import decode_image, load_split
from seps.encoders import build_image_encoder
from seps.train.data import IMAGENET_MEAN, IMAGENET_STD


def main() -> None:
    data = Path(sys.argv[1] if len(sys.argv) > 1 else glob.glob("data/synth-10000-s0-*gr2*")[0])
    default_build = glob.glob("data/pretrained/uni-48-w128-*")[0]
    build = Path(sys.argv[2] if len(sys.argv) > 2 else default_build)
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    torch.set_num_threads(1)
    enc = build_image_encoder("tiny-vit-128", 64, image_size=48)
    enc.visual_encoder.load_state_dict(load_file(build / "vision.safetensors"))
    enc.eval()
    split = load_split(data, "dev", dense_per="image")
    imgs = torch.stack([decode_image(f, 48) for f in split.image_files[:n]]).float() / 255
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        tokens = enc.backbone_tokens((imgs - mean) / std)[:, 1:]  # drop [CLS]
    x = F.normalize(tokens, dim=-1)
    s_im = (F.normalize(tokens.mean(1), dim=-1)[:, None] * x).sum(-1).numpy()  # (n, N)
    table = oracle_table(data, split.image_ids[:n], split.captions[: 5 * n], x.shape[1])
    obj = table.cover[:n].any(1).numpy()  # (n, N): patch covers some object
    auc = mannwhitneyu(s_im[obj], s_im[~obj]).statistic / (obj.sum() * (~obj).sum())
    top = np.argsort(-s_im, 1)[:, : x.shape[1] // 2]
    print(f"object patches per image: {obj.sum(1).mean():.1f} of {x.shape[1]}")
    print(f"AUC of s_im, object over background patches: {auc:.3f}")
    print(
        f"object share of the top half by s_im: {np.take_along_axis(obj, top, 1).mean():.3f} "
        f"(all patches: {obj.mean():.3f})"
    )


if __name__ == "__main__":
    main()
