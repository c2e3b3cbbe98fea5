"""Encoding a split into the joint space and scoring retrieval on it.

:func:`encode_split` embeds every image, caption and dense caption of a split (from
pixels and word ids, or from cached frozen-backbone features); :func:`evaluate_model`
scores them with the model's head under a dense-caption protocol and returns the recall
metrics (R@1/5/10 both ways, rsum; on COCO 5K also the 1K-fold means), or raises
:class:`NonFiniteSimilaritiesError` when a score is not finite.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import Tensor

from ..core.evaluate import evaluate_retrieval, similarity_matrix
from ..core.metrics import recall_at_k
from ..core.selection import has_cls_token
from ..data.baselines import text_only_sims
from ..data.layout import SplitData
from ..data.oracle import headroom, synthetic_seed
from ..model.seps_model import SEPSModel
from ..runtime.faults import kill_point
from .config import TrainConfig
from .controls import add_sim_noise, presentation_order, selection_prior_fn
from .data import SplitTensors, keep_first_tokens


class NonFiniteSimilaritiesError(ValueError):
    """The similarity matrix has NaN or infinite entries: the weights, finite, are so
    large that scoring overflows. The training loop turns it into a divergence."""

    def __init__(self, bad: int, total: int) -> None:
        super().__init__(f"{bad} of {total} similarities are not finite")


@torch.no_grad()
def encode_split(
    model: SEPSModel,
    split: SplitTensors,
    device: torch.device,
    feats: dict[str, Tensor] | None = None,
    batch: int = 128,
) -> dict[str, Tensor]:
    """Joint-space embeddings of a split (projections applied), on the CPU."""
    model.eval()
    out: dict[str, list[Tensor]] = {
        k: [] for k in ("img", "cap", "cap_lens", "dense", "dense_lens")
    }
    n_img, n_cap = len(split.images), len(split.captions.pieces)
    for s in range(0, n_img, batch):
        idx = list(range(s, min(s + batch, n_img)))
        if feats is not None:
            out["img"].append(model.project_images(feats["img"][idx].to(device)).cpu())
        else:
            out["img"].append(model.encode_images(split.images.batch(idx).to(device)).cpu())
    for key, table, n in (("cap", split.captions, n_cap), ("dense", split.dense, n_img)):
        # The official evaluation encodes the whole caption, then keeps the first
        # ``keep`` token features (``eval_max_words``; 0 keeps all).
        width = min(table.max_len, table.keep) if table.keep else table.max_len
        for s in range(0, n, batch):
            idx = list(range(s, min(s + batch, n)))
            if feats is not None:
                lens = feats[f"{key}_lens"][idx]
                h = feats[key][idx][:, : int(lens.max())].to(device)
                e = model.project_texts(h).cpu()
            else:
                ids, lens = table.batch(idx)
                e = model.encode_texts(ids.to(device), lens.to(device)).cpu()
            e, lens = keep_first_tokens(e, lens, table.keep)
            out[key].append(torch.nn.functional.pad(e, (0, 0, 0, width - e.shape[1])))
            out[f"{key}_lens"].append(lens)
    return {k: torch.cat(v) for k, v in out.items()}


def evaluate_model(
    model: SEPSModel,
    split: SplitTensors,
    device: torch.device,
    cfg: TrainConfig,
    dense_source: str | None = None,
    feats: dict[str, Tensor] | None = None,
    progress: bool = False,
    controls: bool = True,
) -> dict[str, float]:
    """Recall metrics of ``model`` on ``split`` under a dense-caption protocol.

    ``controls``: apply the evaluation controls of ``cfg`` (``eval_permute``,
    ``eval_sim_noise``; :mod:`seps.train.controls`). The test-split evaluation does; the
    per-epoch validation passes False, so that its history does not depend on them. The
    head's ``selection`` control applies in both (it is part of the model).
    """
    emb = encode_split(model, split, device, feats)
    kill_point("eval")
    d = split.data
    n_patches = emb["img"].shape[1] - (1 if has_cls_token(emb["img"].shape[1]) else 0)
    prior = selection_prior_fn(
        model.config.selection,
        n_patches,
        cfg.seed,
        dataset=cfg.dataset,
        data_dir=d.data_dir,
        image_ids=d.image_ids,
        captions=d.captions,
    )
    order = None
    if controls and cfg.eval_permute:
        order = presentation_order(d.n_images, len(d.captions), cfg.seed)
    sims = similarity_matrix(
        model.cross_net,
        emb["img"],
        emb["cap"],
        emb["cap_lens"],
        emb["dense"],
        emb["dense_lens"],
        caption_to_image=torch.as_tensor(split.data.caption_to_image),
        dense_source=dense_source or cfg.eval_protocol,
        image_shard=cfg.eval_image_shard,
        text_shard=cfg.eval_text_shard,
        seed=cfg.seed,
        device=device,
        progress=progress,
        present_order=order,
        selection_prior=prior,
    )
    if controls and cfg.eval_sim_noise:
        sims = add_sim_noise(sims, cfg.eval_sim_noise, cfg.seed)
    bad = int((~torch.isfinite(torch.as_tensor(sims))).sum())
    if bad:  # a check only: the metrics of finite similarities are computed as before
        raise NonFiniteSimilaritiesError(bad, int(torch.as_tensor(sims).numel()))
    return evaluate_retrieval(sims, coco_folds=cfg.dataset == "coco")


def split_bounds(data_dir: Path, data: SplitData) -> dict[str, float | None]:
    """What a synthetic split gives without the head, printed beside every run's rSum:
    ``text_only_rsum``, the rSum of a word matcher of each caption against every image's
    dense caption (:func:`seps.data.baselines.text_only_sims`; what the dense captions give
    away without pixels; it knows the synthetic vocabulary only), and the headroom
    (:func:`seps.data.oracle.headroom`): ``chance_rsum`` and ``oracle_rsum``, the scene-reading
    oracle's. A function of the split alone, so computed once per process and split (keyed
    by the folder and the split's texts and images; the same values either way)."""
    # The synthetic seed too: headroom reads it from the folder's meta.json.
    seed = synthetic_seed(data_dir)
    key = (tuple(data.captions), tuple(data.dense), tuple(data.image_ids))
    return dict(_bounds(data_dir, seed, *key, data.n_captions // data.n_images))


# One split at a time: a matrix runs a seed's runs together, all on the same split, and
# the text-only matcher alone took about 5 s a run.
@functools.lru_cache(maxsize=1)
def _bounds(
    data_dir: Path,
    seed: int | None,
    captions: tuple[str, ...],
    dense: tuple[str, ...],
    image_ids: tuple[str, ...],
    per_image: int,
) -> dict[str, float | None]:
    """:func:`split_bounds` of one split (``seed`` only keys the cache)."""
    sims = text_only_sims(list(captions), list(dense))
    return {
        "text_only_rsum": recall_at_k(sims, per_image)["rsum"],
        **headroom(data_dir, list(captions), list(image_ids)),
    }
