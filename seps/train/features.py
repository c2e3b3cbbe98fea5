"""Frozen backbone features: computed once per split and cached on disk.

Under the ``frozen`` protocol the backbones never change, so their token outputs
(before the projections) are computed by :func:`backbone_features` and cached as
safetensors by :func:`cached_features`, keyed by the backbone weights, the data and
the caption lengths; training and evaluation then only run the projections and the head.
Each cache file carries the hash of its tensors (:mod:`seps.io.derived`): a damaged one is
named in one line and computed again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..io.derived import DerivedFileError, load_safetensors, report, save_safetensors
from ..model.seps_model import ModelSpec, SEPSModel
from ..versioning.version import code_version
from .config import TrainConfig
from .data import SplitTensors


def _fingerprint(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


@torch.no_grad()
def backbone_features(
    model: SEPSModel, split: SplitTensors, device: torch.device, batch: int = 128
) -> dict[str, Tensor]:
    """Backbone outputs before the projections: images ``(n_img, L_v, H_v)``, captions
    ``(n_cap, L, H_t)`` + lengths, dense captions ``(n_img, L_d, H_t)`` + lengths."""
    model.eval()
    out: dict[str, list[Tensor]] = {
        k: [] for k in ("img", "cap", "cap_lens", "dense", "dense_lens")
    }
    for s in range(0, len(split.images), batch):
        idx = range(s, min(s + batch, len(split.images)))
        out["img"].append(model.img_enc.backbone_tokens(split.images.batch(idx).to(device)).cpu())
    for key, table in (("cap", split.captions), ("dense", split.dense)):
        width = table.max_len
        for s in range(0, len(table.pieces), batch):
            ids, lens = table.batch(range(s, min(s + batch, len(table.pieces))))
            mask = (torch.arange(ids.shape[1])[None] < lens[:, None]).long()
            h = model.txt_enc.bert(
                input_ids=ids.to(device), attention_mask=mask.to(device)
            ).last_hidden_state.cpu()
            out[key].append(torch.nn.functional.pad(h, (0, 0, 0, width - h.shape[1])))
            out[f"{key}_lens"].append(lens)
    return {k: torch.cat(v) for k, v in out.items()}


def cached_features(
    model: SEPSModel,
    split: SplitTensors,
    cfg: TrainConfig,
    spec: ModelSpec,
    device: torch.device,
    tag: str,
) -> dict[str, Tensor]:
    """:func:`backbone_features`, cached as safetensors keyed by backbone weights and data.

    The file carries the hash of its tensors (:mod:`seps.io.derived`); one that does not match
    it, or cannot be read, is named in one line and computed again."""
    cache = Path(cfg.cache_dir or Path(cfg.out_dir) / "feature_cache")
    weights = _fingerprint(
        [
            (k, float(v.float().sum()), tuple(v.shape))
            for k, v in model.img_enc.visual_encoder.state_dict().items()
        ],
        [(k, float(v.float().sum())) for k, v in model.txt_enc.bert.state_dict().items()],
    )
    key = _fingerprint(
        spec.to_dict(),
        weights,
        split.data.image_ids,
        # Every caption and dense caption (their noise differs between draws that share
        # image ids), and the code that encodes them.
        _fingerprint(split.data.captions, split.data.dense),
        code_version(),
        cfg.max_words,
        cfg.max_dense_words,
        tag,
    )
    path = cache / f"{tag}-{key}.safetensors"
    if path.exists():
        try:
            return load_safetensors(path)
        except DerivedFileError as exc:  # damaged on disk: computed again, never used
            report(path, exc.problem, "computing the features again")
    feats = backbone_features(model, split, device)
    save_safetensors(path, {k: v.contiguous() for k, v in feats.items()})
    return feats
