"""Pilot (docs/regime.md): what do a trained run's selection scores pick?

For every finished run under ``RESULTS/_work`` (a ``seps-bench run controls --profile
standard --set train.eval_split=dev`` results folder with frozen backbones, so the cached
evaluation tokens are the backbone's), this recomputes SPEC.md's two parameter-free
selection scores with the run's *learned* projections on the first 200 dev images, each
against its own first caption:

- ``s_im`` (step 2): each patch's cosine with the image's mean projected patch;
- ``s_st`` (step 3): each patch's cosine with the caption's mean projected word;

and prints their AUC for telling the patches of the objects the caption names (from the
redrawn scene, ``seps.controls.oracle_prior``) from the others, the AUC of ``s_im +
s_st`` (the ``laps``/``code`` score), and how many of the named patches its top half
keeps. 0.5 is chance; below it, the score prefers the other patches.

Usage: ``python scripts/pilot_selection_scores.py RESULTS [DATA_DIR]`` (default data:
the grammar-v2 10,000-image set of seed 0 under ``data/``). A diagnostic, not a test.
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

from seps.controls import oracle_prior, oracle_table
from seps.data.layout import load_split
from seps.train.checkpoints import load_run_checkpoint

N_IMAGES = 200


def auc(score: np.ndarray, positive: np.ndarray) -> float:
    pos = positive.astype(bool)
    return float(mannwhitneyu(score[pos], score[~pos]).statistic / (pos.sum() * (~pos).sum()))


def main() -> None:
    work = Path(sys.argv[1]) / "_work"
    default_data = glob.glob("data/synth-10000-s0-dn0.12-gr2-*")[0]
    data = Path(sys.argv[2] if len(sys.argv) > 2 else default_data)
    torch.set_num_threads(1)
    cache = load_file(glob.glob(str(work / "feature_cache" / "eval-*.safetensors"))[0])
    split = load_split(data, "dev", dense_per="image")
    n = N_IMAGES
    table = oracle_table(data, split.image_ids[:n], split.captions[: 5 * n], 36)
    idx = torch.arange(n)
    named = oracle_prior(table, idx, idx * 5)[idx, idx].numpy()  # (n, N): the named objects
    tokens = cache["img"][:n, 1:].float()  # (n, N, H), [CLS] dropped
    words, lens = cache["cap"][: 5 * n : 5].float(), cache["cap_lens"][: 5 * n : 5]
    real = (torch.arange(words.shape[1])[None] < lens[:, None]).float()[..., None]
    print(f"named patches per image: {named.sum(1).mean():.2f} of 36")
    for run in sorted(work.glob("*-s*")):
        ckpt = load_run_checkpoint(run / "checkpoint_last.safetensors")
        m = ckpt["model"]
        x = F.linear(tokens, m["img_enc.vision_proj.weight"], m["img_enc.vision_proj.bias"])
        xn = F.normalize(x, dim=-1)
        s_im = (F.normalize(x.mean(1), dim=-1)[:, None] * xn).sum(-1)
        w = F.linear(words, m["txt_enc.fc.weight"], m["txt_enc.fc.bias"])
        g = F.normalize((w * real).sum(1) / lens[:, None], dim=-1)
        s_st = (g[:, None] * xn).sum(-1)
        # Diagnostic, not SPEC.md: the same cosines after subtracting the mean projected
        # patch and the mean projected word over these images. If the scores rank by how
        # typical a patch is (a shared offset), the centred ones should not.
        xc = F.normalize(x - x.mean((0, 1)), dim=-1)
        s_im_c = (F.normalize(xc.mean(1), dim=-1)[:, None] * xc).sum(-1)
        wc = w - (w * real).sum((0, 1)) / real.sum()
        s_st_c = (F.normalize((wc * real).sum(1), dim=-1)[:, None] * xc).sum(-1)
        score = (s_im + s_st).numpy()
        top = np.argsort(-score, 1)[:, :18]
        cfg = ckpt["seps_config"]
        print(
            f"{run.name} (scoring {cfg['scoring']}, dense {cfg['dense_fusion']}, selection "
            f"{cfg.get('selection')}): AUC s_im {auc(s_im.numpy(), named):.3f}, "
            f"s_st {auc(s_st.numpy(), named):.3f}, s_im + s_st {auc(score, named):.3f}; "
            f"its top half keeps {np.take_along_axis(named, top, 1).sum(1).mean():.2f} "
            f"named patches; centred (not SPEC): s_im {auc(s_im_c.numpy(), named):.3f}, "
            f"s_st {auc(s_st_c.numpy(), named):.3f}"
        )


if __name__ == "__main__":
    main()
