"""Unimodal pretraining: backbones that know their own modality, not the alignment.

The paper fine-tunes an ImageNet ViT and an MLM BERT: each backbone has learned to see
or to read, and nothing has learned which words go with which pixels; the fine-tuning
learns that. The recipes whose ``objective`` is ``"unimodal"`` reproduce this in
miniature on a *separate* synthetic draw (its own seed; no run's scenes are in it):

- **vision: per-patch scene attributes** (the stand-in for ImageNet labels). Every patch
  token predicts the shape, colour and size of the object in its 3x3 grid cell (or
  "none"), the ``[CLS]`` token the background kind and colour and the object count
  (:func:`scene_targets`; the labels come from the scene, which the generator draws first
  from ``np.random.default_rng([seed, gid])``, so nothing needs storing). Per patch, not
  per image: SEPS selects patches, so a patch must carry its own content.
- **text: masked language modelling** over the draw's sparse and dense captions (15% of
  the pieces, 80/10/10 as BERT, through ``transformers``' collator), with the loss at
  *every* real position when the recipe's ``text_objective`` is ``"mlm-all"``: a masked
  piece is predicted from its context, every other piece reproduces itself. Why: with
  BERT's loss on the masked pieces only, nothing asks the last layer to keep the identity
  of the words it is not predicting, and a late interaction matches words one by one. On
  the dev split (seed 0, frozen features, a linear late interaction trained 400 steps by
  InfoNCE) the last layer of the plain MLM build gave rSum 67.8, the ``mlm-all`` build
  108.6 (docs/regime.md).

Nothing crosses modalities: no caption sees an image, the prediction heads are dropped,
and no projection to a joint space is saved, so a run starts from fresh projections and
must learn the alignment itself (``docs/regime.md``). The two objectives share nothing,
so one loop steps both with their own optimisers.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..core.selection import split_cls_token
from ..data.scenes import BACKGROUND_COLOURS, BACKGROUND_KINDS, COLOURS, SHAPES, SIZES, sample_scene

__all__ = ["N_CLASSES", "scene_targets", "train_unimodal"]

#: Classes of each target; index 0 of the per-cell targets is "no object".
N_CLASSES: dict[str, int] = {
    "shape": 1 + len(SHAPES),
    "colour": 1 + len(COLOURS),
    "size": 1 + len(SIZES),
    "bg_kind": len(BACKGROUND_KINDS),
    "bg_colour": len(BACKGROUND_COLOURS),
    "count": 4,
}
_CELL_TARGETS = ("shape", "colour", "size")
_IMAGE_TARGETS = ("bg_kind", "bg_colour", "count")


def scene_targets(seed: int, gids: range | list[int]) -> dict[str, Tensor]:
    """The labels of the scenes of global image ids ``gids`` of the draw ``seed``.

    Returns ``shape``, ``colour``, ``size``: ``(n, 9)`` long, per 3x3 cell in row-major
    order, 0 for an empty cell, else 1 + the attribute's index in `seps.data.scenes`;
    ``bg_kind``, ``bg_colour``: ``(n,)``; ``count``: ``(n,)`` objects - 1.
    """
    shapes = {s: i + 1 for i, s in enumerate(SHAPES)}
    colours = {c: i + 1 for i, c in enumerate(COLOURS)}
    sizes = {s: i + 1 for i, s in enumerate(SIZES)}
    out = {k: np.zeros((len(gids), 9), np.int64) for k in _CELL_TARGETS}
    image = {k: np.zeros(len(gids), np.int64) for k in _IMAGE_TARGETS}
    for row, gid in enumerate(gids):
        scene = sample_scene(np.random.default_rng([seed, gid]))
        for obj in scene.objects:
            out["shape"][row, obj.cell] = shapes[obj.shape]
            out["colour"][row, obj.cell] = colours[obj.colour]
            out["size"][row, obj.cell] = sizes[obj.size]
        image["bg_kind"][row] = BACKGROUND_KINDS.index(scene.bg_kind)
        image["bg_colour"][row] = list(BACKGROUND_COLOURS).index(scene.bg_colour)
        image["count"][row] = len(scene.objects) - 1
    return {k: torch.from_numpy(v) for k, v in {**out, **image}.items()}


def patch_cells(grid: int) -> Tensor:
    """The 3x3 cell (row-major) of each patch of a ``grid x grid`` patch grid: ``(grid**2,)``."""
    rows = torch.arange(grid) * 3 // grid
    return (rows[:, None] * 3 + rows[None, :]).flatten()


class VisionProbe(nn.Module):
    """Linear read-outs of the per-patch and per-image targets (dropped after pretraining)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.cell = nn.ModuleDict({k: nn.Linear(hidden, N_CLASSES[k]) for k in _CELL_TARGETS})
        self.image = nn.ModuleDict({k: nn.Linear(hidden, N_CLASSES[k]) for k in _IMAGE_TARGETS})

    def loss(self, tokens: Tensor, targets: dict[str, Tensor], cells: Tensor) -> Tensor:
        """tokens ``(B, 1 + N, H)`` (``[CLS]`` first); targets of :func:`scene_targets` for
        the batch; cells ``(N,)`` -> the summed mean cross-entropies."""
        cls, patches = split_cls_token(tokens)
        if cls is None:
            raise ValueError("the unimodal vision objective needs a [CLS] token")
        loss = tokens.new_zeros(())
        for k, head in self.cell.items():
            logits = head(patches)  # (B, N, classes)
            loss = loss + F.cross_entropy(logits.flatten(0, 1), targets[k][:, cells].flatten())
        for k, head in self.image.items():
            loss = loss + F.cross_entropy(head(cls), targets[k])
        return loss


def train_unimodal(
    r: Any,
    split: Any,
    tokenizer: Any,
    img_enc: Any,
    txt_enc: Any,
    *,
    seed: int,
    lr_factor: Callable[[int], float],
    progress: bool,
) -> tuple[list[dict[str, float]], float]:
    """Pretrain ``img_enc``'s backbone and ``txt_enc``'s BERT in place, each on its own
    objective (module docstring); ``r`` is the `PretrainRecipe`, ``split`` the draw's
    training `SplitTensors`, ``seed`` the draw's seed (for the scene labels),
    ``lr_factor`` the recipe's learning-rate schedule (step -> factor), the one the
    contrastive objective uses too.

    Returns the loss curve (every 10 steps) and the training seconds.
    """
    from transformers import DataCollatorForLanguageModeling

    backbone = img_enc.visual_encoder
    hidden_v = backbone.embed_dim
    probe = VisionProbe(hidden_v)
    bert = txt_enc.bert
    decoder = nn.Linear(bert.config.hidden_size, bert.config.vocab_size)
    n_img = split.data.n_images
    gids = [int(i) for i in split.data.image_ids]
    targets = scene_targets(seed, gids)
    grid = round(math.sqrt(img_enc.num_patches))
    cells = patch_cells(grid)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    params_v = [*backbone.parameters(), *probe.parameters()]
    params_t = [*bert.parameters(), *decoder.parameters()]
    opts = [
        torch.optim.AdamW(p, lr=r.lr, weight_decay=r.weight_decay) for p in (params_v, params_t)
    ]
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lr_factor) for o in opts]
    per_image = len(split.captions.pieces) // n_img
    rng = random.Random(r.seed)
    special = torch.tensor([tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id])
    curve: list[dict[str, float]] = []
    backbone.train()
    bert.train()
    t0 = time.perf_counter()
    bar = tqdm(range(r.steps), desc="pretrain (unimodal)", disable=not progress)
    for step in bar:
        imgs = rng.sample(range(n_img), r.batch_size)
        tokens = img_enc.backbone_tokens(split.images.batch(imgs))
        loss_v = probe.loss(tokens, {k: v[imgs] for k, v in targets.items()}, cells)
        # Text: one sparse caption of each image, plus the dense captions of a share of them.
        caps = [i * per_image + rng.randrange(per_image) for i in imgs]
        n_dense = round(r.dense_share * r.batch_size)
        loss_t = tokens.new_zeros(())
        for table, rows in ((split.captions, caps), (split.dense, imgs[:n_dense])):
            if not rows:
                continue
            ids, lens = table.batch(rows)
            attention = (torch.arange(ids.shape[1])[None] < lens[:, None]).long()
            special_mask = torch.isin(ids, special) | (attention == 0)
            inputs, labels = collator.torch_mask_tokens(ids.clone(), special_mask)
            if r.text_objective == "mlm-all":
                labels = ids.masked_fill(special_mask, -100)
            h = bert(input_ids=inputs, attention_mask=attention).last_hidden_state
            picked = labels != -100
            loss_t = loss_t + F.cross_entropy(decoder(h[picked]), labels[picked])
        for opt, loss, params in ((opts[0], loss_v, params_v), (opts[1], loss_t, params_t)):
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 2.0)
            opt.step()
        for s in scheds:
            s.step()
        lv, lt = float(loss_v.detach()), float(loss_t.detach())
        if step % 10 == 0:
            curve.append({"step": step, "vision": lv, "text": lt})
        bar.set_postfix(vision=f"{lv:.3f}", text=f"{lt:.3f}")
    return curve, time.perf_counter() - t0
