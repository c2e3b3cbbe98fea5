"""Training and evaluation of the full model, and the ``train`` / ``eval`` commands.

One run = :class:`TrainConfig` (data, encoders, protocol, optimisation) + a
:class:`seps.config.SEPSConfig` (the head's switches). :func:`train` follows the
official ``train.py``:

- AdamW with the official parameter groups (backbones at ``lr * backbone_lr_mult``),
  weight decay 1e-4, MultiStepLR (milestones, gamma 0.3);
- hinge triplet summed over all negatives in epoch 0 with the loss scaled by the
  warm-up factor ``i / n_batches``, hardest negative from ``max_violation_from`` on;
- gradient clipping at 2.0; bf16 autocast on CUDA;
- a non-finite loss skips the step and is counted (the official code zeroes it silently).

Protocols: ``finetune`` (everything trains), ``partial`` (the embeddings and the first
``freeze_layers`` blocks of both backbones are frozen), ``frozen`` (backbone tokens are
computed once, cached on disk with safetensors, and only the projections and the head
train; caption augmentation is then off because the cached text states are fixed).

Determinism: every epoch re-seeds Python, NumPy and PyTorch from ``(seed, epoch)`` and
draws its caption order from that seed, so a run resumed from its epoch checkpoint
reproduces the uninterrupted run exactly on the CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .cli import command
from .config import PRESETS, SEPSConfig, get_config, parse_override
from .data.layout import SplitData, decode_image, load_split
from .devices import check_device, resolve_device
from .evaluate import DENSE_SOURCES, evaluate_retrieval, similarity_matrix
from .faults import kill_point
from .losses import SEPSLoss, keep_ratios
from .model import (
    ModelSpec,
    SEPSModel,
    build_model,
    count_parameters,
    freeze_first_layers,
    parameter_groups,
)
from .store import atomic_write_json, temp_path
from .text import (
    augment_caption_ids,
    load_tokenizer,
    tokenizer_from_json,
    tokenizer_hash,
    tokenizer_to_json,
)
from .train_config import DATASETS, PROTOCOLS, TrainConfig

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# ----------------------------------------------------------------------------- utils
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def epoch_seed(seed: int, epoch: int) -> int:
    return (seed * 1_000_003 + epoch * 7919 + 17) % 2**31


def environment() -> dict[str, Any]:
    """Library versions, device and git commit, recorded with every result."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "device_name": torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }
    for mod in ("timm", "transformers", "numpy"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:  # pragma: no cover - optional
            env[mod] = None
    try:
        env["git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except Exception:
        env["git_commit"] = None
    return env


def atomic_torch_save(path: Path, obj: Any) -> None:
    """``torch.save`` that leaves ``path`` whole (old or new) if killed mid-write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    torch.save(obj, tmp)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------ data
def synthetic_path(cfg: TrainConfig) -> Path:
    return Path(cfg.data_path or f"data/synth-{cfg.synth_images}-s{cfg.synth_seed}")


def check_data_dir(cfg: TrainConfig) -> Path:
    """The dataset folder of ``cfg`` if it can be used as asked, else a ``ValueError``.

    A synthetic target must be a complete synthetic set, or new, or empty: the generator
    only ever writes into a new or empty folder, so a folder that already holds files it
    did not make (say, Flickr30K in the official layout given without ``--dataset f30k``)
    is refused with a message, never overwritten and never silently read as synthetic.
    """
    if cfg.dataset != "synthetic":
        path = Path(cfg.data_path)  # type: ignore[arg-type]
        if not path.is_dir():
            raise ValueError(f"--data-path {str(path)!r}: folder not found")
        return path
    from .data.synth import is_synthetic_dir

    path = synthetic_path(cfg)
    if not is_synthetic_dir(path) and path.is_dir() and any(path.iterdir()):
        found = ", ".join(sorted(p.name for p in path.iterdir())[:4])
        raise ValueError(
            f"--data-path {str(path)!r}: holds files the synthetic generator did not create "
            f"({found}, ...) and no synthetic meta.json; pass --dataset f30k or --dataset coco "
            "to load it as a dataset, or name a new or empty folder for the synthetic set"
        )
    return path


def prepare_data_dir(cfg: TrainConfig) -> Path:
    """:func:`check_data_dir`, generating the synthetic set when it is absent."""
    path = check_data_dir(cfg)
    if cfg.dataset == "synthetic":
        from .data.synth import generate_synthetic, is_synthetic_dir

        if not is_synthetic_dir(path):
            generate_synthetic(path, n_images=cfg.synth_images, seed=cfg.synth_seed)
    return path


def load(cfg: TrainConfig, data_dir: Path, split: str) -> SplitData:
    return load_split(
        data_dir,
        split,
        image_dir=cfg.image_dir,
        dense_per="image",
        skip_bad_images=cfg.skip_bad_images,
    )


class ImageStore:
    """Images of a split as normalised tensors ``(3, S, S)``; decoded once and kept in
    memory as uint8 when the whole split fits in 2 GB, else read on demand."""

    def __init__(self, files: Sequence[Path], size: int) -> None:
        self.files = list(files)
        self.size = size
        self.mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
        self.cache: Tensor | None = None
        if len(self.files) * 3 * size * size <= 2 * 2**30:
            self.cache = torch.stack([self._decode(f) for f in self.files])

    def _decode(self, path: Path) -> Tensor:
        return decode_image(path, self.size)

    def __len__(self) -> int:
        return len(self.files)

    def batch(self, idx: Sequence[int]) -> Tensor:
        raw = (
            self.cache[list(idx)]
            if self.cache is not None
            else torch.stack([self._decode(self.files[i]) for i in idx])
        )
        return (raw.float() / 255.0 - self.mean) / self.std


class TextTable:
    """Word pieces of every caption (without ``[CLS]``/``[SEP]``), truncated once."""

    def __init__(self, tokenizer: Any, texts: Sequence[str], max_len: int) -> None:
        self.tokenizer = tokenizer
        self.max_len = max_len
        pieces = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        self.pieces = [p[: max_len - 2] for p in pieces]
        self.cls = int(tokenizer.cls_token_id)
        self.sep = int(tokenizer.sep_token_id)
        self.pad = int(tokenizer.pad_token_id)

    def batch(self, idx: Sequence[int], rng: random.Random | None = None) -> tuple[Tensor, Tensor]:
        """Padded ids ``(B, L)`` and lengths ``(B,)``; augmented when ``rng`` is given."""
        rows = []
        for i in idx:
            p = self.pieces[i]
            if rng is not None:
                p = augment_caption_ids(p, self.tokenizer, rng)
            rows.append([self.cls, *p[: self.max_len - 2], self.sep])
        lens = torch.tensor([len(r) for r in rows])
        ids = torch.full((len(rows), int(lens.max())), self.pad, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
        return ids, lens


@dataclass
class SplitTensors:
    """One split ready for training or evaluation."""

    data: SplitData
    images: ImageStore
    captions: TextTable
    dense: TextTable


def split_tensors(cfg: TrainConfig, data: SplitData, tokenizer: Any) -> SplitTensors:
    return SplitTensors(
        data,
        ImageStore(data.image_files, cfg.image_size),
        TextTable(tokenizer, data.captions, cfg.max_words),
        TextTable(tokenizer, data.dense, cfg.max_dense_words),
    )


def subset(split: SplitTensors, n_images: int) -> SplitTensors:
    """The first ``n_images`` images with their captions (a quick validation set)."""
    n = min(n_images, split.data.n_images)
    d = split.data
    data = dataclasses.replace(
        d,
        captions=d.captions[: 5 * n],
        image_ids=d.image_ids[:n],
        image_files=d.image_files[:n],
        dense=d.dense[:n],
        caption_to_image=d.caption_to_image[: 5 * n],
    )
    images = ImageStore.__new__(ImageStore)
    images.__dict__.update(split.images.__dict__)
    images.files = split.images.files[:n]
    images.cache = None if split.images.cache is None else split.images.cache[:n]
    caps = TextTable.__new__(TextTable)
    caps.__dict__.update(split.captions.__dict__)
    caps.pieces = split.captions.pieces[: 5 * n]
    dense = TextTable.__new__(TextTable)
    dense.__dict__.update(split.dense.__dict__)
    dense.pieces = split.dense.pieces[:n]
    return SplitTensors(data, images, caps, dense)


# ------------------------------------------------------------------- frozen features
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
    """:func:`backbone_features`, cached as safetensors keyed by backbone weights and data."""
    from safetensors.torch import load_file, save_file

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
        split.data.captions[:50],
        cfg.max_words,
        cfg.max_dense_words,
        tag,
    )
    path = cache / f"{tag}-{key}.safetensors"
    if path.exists():
        return load_file(str(path))
    feats = backbone_features(model, split, device)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    save_file({k: v.contiguous() for k, v in feats.items()}, str(tmp))
    os.replace(tmp, path)
    return feats


# ----------------------------------------------------------------------- encode/eval
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
        width = table.max_len
        for s in range(0, n, batch):
            idx = list(range(s, min(s + batch, n)))
            if feats is not None:
                lens = feats[f"{key}_lens"][idx]
                h = feats[key][idx][:, : int(lens.max())].to(device)
                e = model.project_texts(h).cpu()
            else:
                ids, lens = table.batch(idx)
                e = model.encode_texts(ids.to(device), lens.to(device)).cpu()
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
) -> dict[str, float]:
    """Recall metrics of ``model`` on ``split`` under a dense-caption protocol."""
    emb = encode_split(model, split, device, feats)
    kill_point("eval")
    sims = similarity_matrix(
        model.cross_net,
        emb["img"],
        emb["cap"],
        emb["cap_lens"],
        emb["dense"],
        emb["dense_lens"],
        caption_to_image=torch.as_tensor(split.data.caption_to_image),
        dense_source=dense_source or cfg.dense_source,
        image_shard=cfg.eval_image_shard,
        text_shard=cfg.eval_text_shard,
        seed=cfg.seed,
        device=device,
        progress=progress,
    )
    return evaluate_retrieval(sims, coco_folds=cfg.dataset == "coco")


# ---------------------------------------------------------------------------- train
@dataclass
class RunState:
    epoch: int = -1  # last completed epoch
    history: list[dict[str, Any]] = field(default_factory=list)
    nonfinite_steps: int = 0
    train_seconds: float = 0.0
    #: ``{"epoch", "step"}`` of the first step whose loss or gradient was not finite.
    first_nonfinite: dict[str, int] | None = None


class DivergedError(RuntimeError):
    """Training cannot go on: a non-finite loss under ``on_nonfinite="stop"``, an epoch
    whose every step was non-finite, or non-finite weights after training.

    :attr:`info` is what the run record stores as ``divergence`` (reason, first
    non-finite epoch and step, count of non-finite steps, steps taken); :attr:`history`
    holds the completed epochs.
    """

    def __init__(self, reason: str, state: RunState, steps_this_epoch: int) -> None:
        first = state.first_nonfinite or {}
        where = f" (first at epoch {first['epoch']}, step {first['step']})" if first else ""
        super().__init__(f"{reason}; {state.nonfinite_steps} non-finite steps{where}")
        self.info: dict[str, Any] = {
            "reason": reason,
            "first_nonfinite": state.first_nonfinite,
            "nonfinite_steps": state.nonfinite_steps,
            "steps_done": sum(h["steps"] for h in state.history) + steps_this_epoch,
        }
        self.history = state.history


def build_tokenizer(cfg: TrainConfig, data_dir: Path) -> Any:
    """``cfg.tokenizer``, or the WordPiece tokenizer built deterministically from the
    training captions (cached under ``<data>/tokenizer-cache``)."""
    train_data = load(cfg, data_dir, cfg.train_split)
    return load_tokenizer(
        cfg.tokenizer,
        captions=train_data.captions + train_data.dense,
        vocab_size=cfg.vocab_size,
        cache_dir=data_dir / "tokenizer-cache",
    )


def build_run(cfg: TrainConfig, seps_cfg: SEPSConfig) -> tuple[Any, ModelSpec, Path]:
    data_dir = prepare_data_dir(cfg)
    tokenizer = build_tokenizer(cfg, data_dir)
    spec = ModelSpec(
        backbone=cfg.backbone,
        backbone_source=cfg.backbone_source,
        pretrained=cfg.pretrained,
        image_size=cfg.image_size,
        text_backbone=cfg.text_backbone,
        vocab_size=len(tokenizer),
    )
    return tokenizer, spec, data_dir


def _log_line(rec: dict[str, Any]) -> str:
    parts = [f"epoch {rec['epoch']}", f"loss {rec['loss']:.3f}"]
    if "val" in rec:
        parts.append(f"val rsum {rec['val']['rsum']:.1f}")
    parts.append(f"{rec['seconds']:.0f}s")
    return " | ".join(parts)


@dataclass(frozen=True)
class Dist:
    """This process's place in a ``torchrun`` job (world 1 without one)."""

    world: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device_name: str) -> tuple[Dist, torch.device]:
    """Join the process group that ``torchrun`` describes in the environment (NCCL on
    CUDA, gloo on the CPU); without ``WORLD_SIZE > 1`` this is a plain single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(), resolve_device(device_name)
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device_name != "cpu" and torch.cuda.is_available()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    device = torch.device(f"cuda:{local}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    return Dist(world, rank, local), device


def _barrier(d: Dist) -> None:
    if d.world > 1:
        import torch.distributed as dist

        dist.barrier()


class TrainStep(torch.nn.Module):
    """Encoders and head for one training batch (the module DDP wraps).

    Under ``torchrun`` each rank encodes its contiguous slice of the batch; the embeddings
    are all-gathered with their gradient, in rank order, so every rank scores the whole
    ``(B, B)`` batch exactly as a single process would. The all-gather's backward sums
    the ranks' (identical) loss gradients and DDP then averages the parameter gradients,
    which gives the single-process gradient.
    """

    def __init__(self, model: SEPSModel, world: int, frozen: bool) -> None:
        super().__init__()
        self.model = model
        self.world = world
        self.frozen = frozen

    def _gather(self, x: Tensor) -> Tensor:
        if self.world == 1:
            return x
        from torch.distributed.nn.functional import all_gather

        return torch.cat(all_gather(x.contiguous()), dim=0)

    def _text(self, x: Tensor, lens: Tensor) -> Tensor:
        m = self.model
        return m.project_texts(x) if self.frozen else m.encode_texts(x, lens)

    def forward(
        self,
        img_in: Tensor,
        cap_in: Tensor,
        cap_lens_local: Tensor,
        cap_lens: Tensor,
        dense_in: Tensor | None,
        dense_lens_local: Tensor | None,
        dense_lens: Tensor | None,
    ) -> Any:
        m = self.model
        img = m.project_images(img_in) if self.frozen else m.encode_images(img_in)
        img = self._gather(img.float())
        cap = self._gather(self._text(cap_in, cap_lens_local).float())
        dense = None
        if dense_in is not None and dense_lens_local is not None:
            dense = self._gather(self._text(dense_in, dense_lens_local).float())
        return m(img, cap, cap_lens, dense, dense_lens)


def _l2(tensors: Sequence[Tensor | None]) -> float:
    """Joint L2 norm of ``tensors`` (``None`` entries count as 0)."""
    return math.sqrt(sum(float(t.detach().float().pow(2).sum()) for t in tensors if t is not None))


def grad_norm(params: Sequence[torch.nn.Parameter]) -> float | None:
    """L2 norm of the accumulated ``.grad`` of ``params`` (``None`` without parameters;
    a parameter that received no gradient counts as 0)."""
    return _l2([p.grad for p in params]) if params else None


def ratio_grad_norm(ratio_term: Tensor, params: Sequence[torch.nn.Parameter]) -> float | None:
    """L2 norm of ``d ratio_term / d params``: what the ratio loss alone sends to the
    score predictor. Exactly 0 when the term does not depend on them at all (a hard
    top-K decision: no graph); ``None`` without parameters."""
    if not params:
        return None
    if not ratio_term.requires_grad:
        return 0.0
    return _l2(torch.autograd.grad(ratio_term, params, retain_graph=True, allow_unused=True))


def set_dropout(module: torch.nn.Module, p: float) -> None:
    """Set every dropout probability of ``module`` (``TrainConfig.dropout``)."""
    for m in module.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = p


def train(
    cfg: TrainConfig,
    seps_cfg: SEPSConfig,
    *,
    resume: bool = False,
    stop_after_epoch: int | None = None,
) -> dict[str, Any]:
    """Train, evaluate and write ``<out_dir>/result.json``; return the result record.

    A checkpoint (``checkpoint_last.pt``, with the tokenizer inside) is written
    atomically after every epoch; ``resume=True`` continues from it.
    ``stop_after_epoch`` ends the call after that epoch (used to test resuming).

    Raises:
        DivergedError: training could not go on (see ``TrainConfig.on_nonfinite``);
            ``result.json`` then says ``"status": "diverged"`` with where and how often.
    """
    try:
        return _train(cfg, seps_cfg, resume=resume, stop_after_epoch=stop_after_epoch)
    except DivergedError as exc:
        if int(os.environ.get("RANK", "0")) == 0:
            result = {
                "status": "diverged",
                "error": str(exc),
                "divergence": exc.info,
                "history": exc.history,
                "train_config": cfg.to_dict(),
                "environment": environment(),
            }
            atomic_write_json(Path(cfg.out_dir) / "result.json", result)
        raise


def _train(
    cfg: TrainConfig, seps_cfg: SEPSConfig, *, resume: bool, stop_after_epoch: int | None
) -> dict[str, Any]:
    from tqdm.auto import tqdm

    dist, device = init_distributed(cfg.device)
    out = Path(cfg.out_dir)
    if dist.main:
        out.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg.seed)
    if dist.main:  # rank 0 generates the data and trains the tokenizer first
        build_run(cfg, seps_cfg)
    _barrier(dist)
    tokenizer, spec, data_dir = build_run(cfg, seps_cfg)
    model = build_model(spec, seps_cfg).to(device)
    if cfg.dropout is not None:
        set_dropout(model, cfg.dropout)
    seps_cfg = model.config
    if cfg.protocol == "partial":
        freeze_first_layers(model.img_enc.visual_encoder, cfg.freeze_layers)
        freeze_first_layers(model.txt_enc.bert, cfg.freeze_layers)
    if cfg.protocol == "frozen":
        for m in (model.img_enc.visual_encoder, model.txt_enc.bert):
            m.requires_grad_(False)
    train_split = split_tensors(cfg, load(cfg, data_dir, cfg.train_split), tokenizer)
    val_split = None
    if cfg.val_images > 0:
        try:
            val_split = subset(
                split_tensors(cfg, load(cfg, data_dir, cfg.val_split), tokenizer), cfg.val_images
            )
        except ValueError:
            val_split = None  # no dev split: per-epoch validation is skipped
    if not dist.main:
        val_split = None  # rank 0 validates
    train_feats = val_feats = None
    if cfg.protocol == "frozen":
        if dist.main:
            cached_features(model, train_split, cfg, spec, device, "train")
        _barrier(dist)
        train_feats = cached_features(model, train_split, cfg, spec, device, "train")
        if val_split is not None:
            val_feats = cached_features(model, val_split, cfg, spec, device, "val")
    if cfg.batch_size % dist.world:
        raise ValueError(
            f"train config field 'batch_size': {cfg.batch_size} is not divisible by the "
            f"{dist.world} processes"
        )
    step: torch.nn.Module = TrainStep(model, dist.world, cfg.protocol == "frozen")
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        step = DistributedDataParallel(
            step,
            device_ids=[device.index] if device.type == "cuda" else None,
            # BERT's pooler and frozen parts never receive a gradient.
            find_unused_parameters=True,
        )

    optimizer = torch.optim.AdamW(
        parameter_groups(model, cfg.lr, cfg.backbone_lr_mult),
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.MultiStepLR(
        optimizer, milestones=list(cfg.lr_milestones), gamma=cfg.lr_gamma
    )
    criterion = SEPSLoss(seps_cfg)
    # "The score predictor": every learnable parameter of the selection (eq. 1's
    # MLP, the per-patch keep bias); its gradient norm is logged every step.
    selector_params = [p for p in model.cross_net.selectors.parameters() if p.requires_grad]
    state = RunState()
    ckpt_path = out / "checkpoint_last.pt"
    if resume and ckpt_path.exists():
        ckpt = load_run_checkpoint(ckpt_path)
        _check_same_tokenizer(ckpt, tokenizer, ckpt_path)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        state = RunState(**ckpt["state"])

    n_caps = len(train_split.captions.pieces)
    n_batches = n_caps // cfg.batch_size
    if cfg.max_steps_per_epoch:
        n_batches = min(n_batches, cfg.max_steps_per_epoch)
    if n_batches < 1:
        raise ValueError(
            f"batch_size {cfg.batch_size} is larger than the {n_caps} training captions"
        )
    use_dense = seps_cfg.uses_dense
    c2i = torch.as_tensor(train_split.data.caption_to_image)
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device.type == "cuda"
        else torch.autocast("cpu", enabled=False)
    )
    for epoch in range(state.epoch + 1, cfg.epochs):
        t0 = time.perf_counter()
        es = epoch_seed(cfg.seed, epoch)
        seed_everything(es)
        order = torch.randperm(n_caps, generator=torch.Generator().manual_seed(es))
        text_rng = random.Random(es) if cfg.augment and cfg.protocol != "frozen" else None
        model.train()
        if cfg.protocol == "frozen":
            model.img_enc.visual_encoder.eval()
            model.txt_enc.bert.eval()
        max_violation = epoch >= cfg.max_violation_from
        sums = {"loss": 0.0, "align": 0.0, "ratio": 0.0, "grad_norm": 0.0}
        ratio_sums: dict[str, float] = {}
        step_log: list[dict[str, Any]] = []
        steps = 0
        bar = tqdm(range(n_batches), desc=f"epoch {epoch}", disable=not cfg.progress, leave=False)
        per_rank = cfg.batch_size // dist.world
        local = slice(dist.rank * per_rank, (dist.rank + 1) * per_rank)
        for i in bar:
            caps = order[i * cfg.batch_size : (i + 1) * cfg.batch_size].tolist()
            imgs = c2i[caps].tolist()
            img_ids = torch.tensor(imgs, device=device)
            dense_in = dlens_local = dlens = None
            with autocast:
                if train_feats is not None:
                    img_in = train_feats["img"][imgs[local]]
                    lens = train_feats["cap_lens"][caps]
                    cap_in = train_feats["cap"][caps[local]][:, : int(lens.max())]
                    if use_dense:
                        dlens = train_feats["dense_lens"][imgs]
                        dense_in = train_feats["dense"][imgs[local]][:, : int(dlens.max())]
                else:
                    img_in = train_split.images.batch(imgs[local])
                    # Every rank tokenises and augments the whole batch, so that the
                    # random draws and the padding match a single process.
                    ids, lens = train_split.captions.batch(caps, text_rng)
                    cap_in = ids[local]
                    if use_dense:
                        dids, dlens = train_split.dense.batch(imgs, text_rng)
                        dense_in = dids[local]
                if dense_in is not None and dlens is not None:
                    dense_in, dlens_local = dense_in.to(device), dlens[local].to(device)
                    dlens = dlens.to(device)
                sims, masks = step(
                    img_in.to(device),
                    cap_in.to(device),
                    lens[local].to(device),
                    lens.to(device),
                    dense_in,
                    dlens_local,
                    dlens,
                )
                alpha = i / n_batches if (cfg.warmup and epoch == 0) else 1.0
                loss = criterion(
                    sims, masks, img_ids, max_violation=max_violation, warmup_alpha=alpha
                )
            optimizer.zero_grad(set_to_none=True)
            finite = bool(torch.isfinite(loss.total))
            if finite:
                ratio_gn = None
                if dist.world == 1:
                    ratio_gn = ratio_grad_norm(seps_cfg.ratio_weight * loss.ratio, selector_params)
                loss.total.backward()
                selector_gn = grad_norm(selector_params)
                gn = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                # A finite loss can still have an overflowing gradient; stepping on it
                # would write NaN into every weight.
                finite = bool(torch.isfinite(gn))
            if not finite:
                state.nonfinite_steps += 1
                if state.first_nonfinite is None:
                    state.first_nonfinite = {"epoch": epoch, "step": i}
                optimizer.zero_grad(set_to_none=True)
                if cfg.on_nonfinite == "stop":
                    reason = "non-finite loss or gradient (on_nonfinite=stop)"
                    raise DivergedError(reason, state, steps)
                continue
            kill_point("train_step")
            optimizer.step()
            steps += 1
            kr = {b: float(r.detach()) for b, r in keep_ratios(masks).items()}
            step_log.append(
                {
                    "step": i,
                    "loss": loss.total.item(),
                    "align": loss.align.item(),
                    "ratio": float(loss.ratio.detach()),
                    "ratio_parts": {k: float(v.detach()) for k, v in loss.ratio_parts.items()},
                    "keep_ratio": kr,
                    "selector_grad_norm": selector_gn,
                    "ratio_grad_norm": ratio_gn,
                }
            )
            sums["loss"] += step_log[-1]["loss"]
            sums["align"] += step_log[-1]["align"]
            sums["ratio"] += step_log[-1]["ratio"]
            sums["grad_norm"] += float(gn)
            for b, r in kr.items():
                ratio_sums[b] = ratio_sums.get(b, 0.0) + r
            bar.set_postfix(loss=f"{sums['loss'] / steps:.2f}")
        if steps == 0:
            raise DivergedError(f"every step of epoch {epoch} had a non-finite loss", state, 0)
        scheduler.step()
        seconds = time.perf_counter() - t0
        rec: dict[str, Any] = {
            "epoch": epoch,
            **{k: v / max(steps, 1) for k, v in sums.items()},
            "keep_ratio": {b: v / max(steps, 1) for b, v in ratio_sums.items()},
            "steps": steps,
            "nonfinite_steps": state.nonfinite_steps,
            "lr": [g["lr"] for g in optimizer.param_groups],
            "seconds": seconds,
            "train_pairs_per_second": steps * cfg.batch_size / max(seconds, 1e-9),
            "steps_log": step_log,
        }
        if val_split is not None:
            rec["val"] = evaluate_model(model, val_split, device, cfg, feats=val_feats)
        state.history.append(rec)
        state.epoch = epoch
        state.train_seconds += seconds
        if not dist.main:
            _barrier(dist)
            continue
        atomic_torch_save(
            ckpt_path,
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "state": dataclasses.asdict(state),
                "train_config": cfg.to_dict(),
                "seps_config": seps_cfg.to_dict(),
                "model_spec": spec.to_dict(),
                "tokenizer": tokenizer_to_json(tokenizer),
                "format": "seps-bench/1",
            },
        )
        _barrier(dist)
        if cfg.progress:
            print(_log_line(rec), flush=True)
        if stop_after_epoch is not None and epoch >= stop_after_epoch:
            return {"interrupted_after_epoch": epoch}

    if not dist.main:
        return {"rank": dist.rank}
    return finish(cfg, model, tokenizer, data_dir, device, state, spec)


def finish(
    cfg: TrainConfig,
    model: SEPSModel,
    tokenizer: Any,
    data_dir: Path,
    device: torch.device,
    state: RunState,
    spec: ModelSpec,
) -> dict[str, Any]:
    """Evaluate on ``eval_split`` and write ``result.json``."""
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        raise DivergedError("the trained weights are not finite", state, 0)
    eval_split = split_tensors(cfg, load(cfg, data_dir, cfg.eval_split), tokenizer)
    feats = None
    if cfg.protocol == "frozen":
        feats = cached_features(model, eval_split, cfg, spec, device, "eval")
    t0 = time.perf_counter()
    metrics = evaluate_model(model, eval_split, device, cfg, feats=feats, progress=cfg.progress)
    eval_seconds = time.perf_counter() - t0
    pairs = eval_split.data.n_images * eval_split.data.n_captions
    result = {
        "metrics": metrics,
        "dense_source": cfg.dense_source,
        "protocol": cfg.protocol,
        "eval_split": cfg.eval_split,
        "eval_images": eval_split.data.n_images,
        "history": state.history,
        "nonfinite_steps": state.nonfinite_steps,
        "train_seconds": state.train_seconds,
        "eval_seconds": eval_seconds,
        "eval_pairs_per_second": pairs / max(eval_seconds, 1e-9),
        "parameters": count_parameters(model),
        "trainable_parameters": count_parameters(model, trainable_only=True),
        "peak_memory_bytes": peak_memory(device),
        "train_config": cfg.to_dict(),
        "seps_config": model.config.to_dict(),
        "model_spec": spec.to_dict(),
        "tokenizer_hash": tokenizer_hash(tokenizer),
        "environment": environment(),
    }
    atomic_write_json(Path(cfg.out_dir) / "result.json", result)
    return result


def _check_same_tokenizer(ckpt: dict[str, Any], tokenizer: Any, path: Path) -> None:
    """A run resumes only with the tokenizer it was trained with (the ids the
    embeddings learned); checkpoints written before tokenizers were stored pass."""
    if "tokenizer" not in ckpt:
        return
    saved = tokenizer_hash(tokenizer_from_json(ckpt["tokenizer"]))
    if saved != tokenizer_hash(tokenizer):
        raise ValueError(
            f"checkpoint {str(path)!r}: trained with tokenizer {saved}, but this run builds "
            f"{tokenizer_hash(tokenizer)} (its captions or --tokenizer changed); "
            "use a new --out or remove the checkpoint"
        )


def checkpoint_tokenizer(ckpt: dict[str, Any], path: Path) -> Any | None:
    """The tokenizer stored in a run checkpoint (``None`` for checkpoints written before
    the tokenizer was stored in them)."""
    if "tokenizer" not in ckpt:
        return None
    try:
        return tokenizer_from_json(ckpt["tokenizer"])
    except Exception as exc:
        raise ValueError(f"checkpoint {str(path)!r}: stored tokenizer unreadable ({exc})") from None


def peak_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except Exception:  # pragma: no cover - non-POSIX
        return 0


def load_run_checkpoint(path: Path) -> dict[str, Any]:
    """A ``checkpoint_last.pt`` written by :func:`train`, with a clear error otherwise."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"checkpoint {str(path)!r}: file not found")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise ValueError(f"checkpoint {str(path)!r}: not a readable torch file ({exc})") from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != "seps-bench/1":
        keys = list(ckpt)[:8] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(
            f"checkpoint {str(path)!r}: expected a seps-bench run checkpoint (key 'format' = "
            f"'seps-bench/1'), got {keys}; for an official model_best.pth use --official"
        )
    missing = [k for k in ("model", "train_config", "seps_config", "model_spec") if k not in ckpt]
    if missing:
        raise ValueError(f"checkpoint {str(path)!r}: missing keys {missing}")
    return ckpt


# ------------------------------------------------------------------------------- CLI
_TRAIN_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="code", help=f"head preset: {', '.join(PRESETS)}")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a head switch or hyper-parameter, e.g. --set hrpa=mean_topk (repeatable)",
    )
    p.add_argument(
        "--dataset",
        default="synthetic",
        choices=DATASETS,
        help="synthetic (built in, generated on first use), f30k or coco",
    )
    p.add_argument(
        "--data-path",
        help="dataset folder in the official layout (f30k/coco), or "
        "where the synthetic set is generated (default data/synth-<n>-s<seed>)",
    )
    p.add_argument("--image-dir", help="image folder (default <data-path>/images)")
    p.add_argument(
        "--skip-bad-images",
        action="store_true",
        help="drop missing or unreadable images (fully decoded to check) with their captions "
        "instead of stopping; the count is recorded",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda[:N]")
    p.add_argument(
        "--dense-source",
        default="query",
        choices=DENSE_SOURCES,
        help="dense-caption protocol at evaluation: query (official, leaks the "
        "answer image's description), candidate (fair), none, shuffled (control)",
    )
    p.add_argument("--out", default="runs/default", help="run folder (checkpoints, result.json)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _add_train_args(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument(
        "--protocol",
        default="finetune",
        choices=PROTOCOLS,
        help="finetune (all train; backbones at lr x backbone-lr-mult), partial "
        "(first --freeze-layers blocks frozen), frozen (cached backbone features)",
    )
    p.add_argument("--freeze-layers", type=int, default=1, help="blocks frozen by 'partial'")
    p.add_argument("--epochs", type=int, default=6, help="training epochs")
    p.add_argument("--batch-size", type=int, default=64, help="pairs per batch")
    p.add_argument("--lr", type=float, default=2e-4, help="learning rate of head+projections")
    p.add_argument(
        "--backbone-lr-mult",
        type=float,
        default=0.1,
        help="backbone lr factor (official 0.1; use 1.0 for random-init backbones)",
    )
    p.add_argument(
        "--backbone",
        default="tiny-vit",
        help="tiny-vit, tiny-swin, hf-tiny-vit, hf-tiny-swin, or a timm/transformers name",
    )
    p.add_argument("--backbone-source", default="timm", choices=("timm", "hf"))
    p.add_argument("--pretrained", help="'hub' or a local weights path (default random init)")
    p.add_argument("--image-size", type=int, default=64, help="square input resolution")
    p.add_argument("--text-backbone", default="tiny-bert", help="tiny-bert or a BERT name/folder")
    p.add_argument(
        "--tokenizer",
        help="tokenizer folder or hub name (default: trained offline on the training captions)",
    )
    p.add_argument("--synth-images", type=int, default=5000, help="size of the synthetic set")
    p.add_argument("--max-steps-per-epoch", type=int, help="cap on steps per epoch")
    p.add_argument(
        "--val-images",
        type=int,
        default=100,
        help="dev images evaluated after every epoch (0: none)",
    )
    p.add_argument(
        "--max-violation-from",
        type=int,
        default=1,
        help="first epoch of the hardest-negative triplet (official 1; epochs before it "
        "sum over all negatives)",
    )
    p.add_argument("--no-augment", action="store_true", help="no caption augmentation")
    p.add_argument(
        "--dropout",
        type=float,
        help="set every dropout probability of both backbones (default: theirs)",
    )
    p.add_argument(
        "--on-nonfinite",
        default="skip",
        choices=("skip", "stop"),
        help="a step with a non-finite loss or gradient: skip it and count it (default; the "
        "run is recorded as diverged if a whole epoch is skipped or the weights end "
        "non-finite), or stop the run as diverged",
    )
    p.add_argument("--resume", action="store_true", help="continue from <out>/checkpoint_last.pt")


def train_config_from_args(args: argparse.Namespace) -> TrainConfig:
    values = {
        "dataset": args.dataset,
        "data_path": args.data_path,
        "image_dir": args.image_dir,
        "device": args.device,
        "dense_source": args.dense_source,
        "out_dir": args.out,
        "seed": args.seed,
        "progress": not args.no_progress,
    }
    for name in (
        "protocol",
        "freeze_layers",
        "epochs",
        "batch_size",
        "lr",
        "backbone_lr_mult",
        "backbone",
        "backbone_source",
        "pretrained",
        "image_size",
        "text_backbone",
        "tokenizer",
        "synth_images",
        "max_steps_per_epoch",
        "val_images",
        "dropout",
        "max_violation_from",
        "skip_bad_images",
        "on_nonfinite",
    ):
        if hasattr(args, name):
            values[name] = getattr(args, name)
    if hasattr(args, "no_augment"):
        values["augment"] = not args.no_augment
    return TrainConfig(**values)


def _summary(result: dict[str, Any]) -> str:
    m = result["metrics"]
    keys = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")
    rec = " ".join(f"{k}={m[k]:.1f}" for k in keys)
    return f"rsum={m['rsum']:.1f} {rec} (dense_source={result['dense_source']})"


@command("train", "train one variant and evaluate it (writes <out>/result.json)", _add_train_args)
def _run_train(args: argparse.Namespace) -> int:
    check_device(args.device)
    seps_cfg = get_config(args.preset, **dict(parse_override(s) for s in args.set))
    cfg = train_config_from_args(args)
    try:
        result = train(cfg, seps_cfg, resume=args.resume)
    except DivergedError as exc:
        print(f"seps-bench train: diverged: {exc} -> {cfg.out_dir}/result.json", file=sys.stderr)
        return 1
    if "metrics" not in result:  # a non-zero torchrun rank: rank 0 reports
        return 0
    print(
        _summary(result) + f" | train {result['train_seconds']:.0f}s -> {cfg.out_dir}/result.json"
    )
    return 0


def _add_eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        required=True,
        help="a run's checkpoint_last.pt, or an official model_best.pth with --official",
    )
    p.add_argument(
        "--official", action="store_true", help="the checkpoint is an official SEPS model_best.pth"
    )
    p.add_argument("--split", default="test", help="split to evaluate (default test)")
    p.add_argument(
        "--dense-source",
        default="query",
        choices=DENSE_SOURCES,
        help="query (official), candidate (fair), none, shuffled (control)",
    )
    p.add_argument(
        "--dataset",
        default=None,
        choices=DATASETS,
        help="dataset kind (default: the run's; f30k for --official)",
    )
    p.add_argument("--data-path", help="dataset folder (default: the one the run trained on)")
    p.add_argument("--image-dir", help="image folder (default <data-path>/images)")
    p.add_argument(
        "--skip-bad-images",
        action="store_true",
        help="drop missing or unreadable images with their captions instead of stopping",
    )
    p.add_argument(
        "--preset",
        default="code",
        help="--official only: head preset whose naming the checkpoint uses",
    )
    p.add_argument(
        "--vision",
        help="--official only: transformers config of the vision "
        "backbone (folder or hub name; default from the checkpoint's opt)",
    )
    p.add_argument("--text", help="--official only: BERT config folder or hub name")
    p.add_argument(
        "--tokenizer",
        help="--official only: tokenizer folder or hub name (default bert-base-uncased)",
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda[:N]")
    p.add_argument("--output", help="result JSON path (default next to the checkpoint)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _eval_setup(args: argparse.Namespace) -> tuple[TrainConfig, SEPSModel, Any, Path]:
    """Config, model, tokenizer and data folder for ``seps-bench eval``."""
    check_device(args.device)
    common = dict(
        skip_bad_images=args.skip_bad_images,
        dense_source=args.dense_source,
        eval_split=args.split,
        device=args.device,
        progress=not args.no_progress,
    )
    if args.official:
        from .official import load_checkpoint

        if not args.data_path:
            raise ValueError(
                "--data-path: required with --official (a folder in the official layout)"
            )
        model = load_checkpoint(
            args.checkpoint, vision=args.vision, text=args.text, preset=args.preset
        )
        cfg = TrainConfig(
            dataset=args.dataset or "f30k",
            data_path=args.data_path,
            image_dir=args.image_dir,
            image_size=model.img_enc.image_size,
            tokenizer=args.tokenizer or "bert-base-uncased",
            **common,
        )
        data_dir = prepare_data_dir(cfg)
        return cfg, model, load_tokenizer(cfg.tokenizer), data_dir
    ckpt = load_run_checkpoint(Path(args.checkpoint))
    tc = dict(ckpt["train_config"])
    tc["lr_milestones"] = tuple(tc["lr_milestones"])
    tc.update(common)
    for key in ("data_path", "image_dir", "dataset"):
        if getattr(args, key):
            tc[key] = getattr(args, key)
    cfg = TrainConfig(**tc)
    model = build_model(ModelSpec(**ckpt["model_spec"]), SEPSConfig(**ckpt["seps_config"]))
    model.load_state_dict(ckpt["model"])
    data_dir = prepare_data_dir(cfg)
    tokenizer = checkpoint_tokenizer(ckpt, Path(args.checkpoint))
    if tokenizer is None:  # an older checkpoint: rebuild it from the training captions
        warnings.warn(
            f"checkpoint {args.checkpoint!r} holds no tokenizer (written by an older "
            "seps-bench); rebuilding it from the training captions",
            stacklevel=1,
        )
        tokenizer = build_tokenizer(cfg, data_dir)
    return cfg, model, tokenizer, data_dir


@command("eval", "evaluate a checkpoint under a dense-caption protocol", _add_eval_args)
def _run_eval(args: argparse.Namespace) -> int:
    cfg, model, tokenizer, data_dir = _eval_setup(args)
    device = resolve_device(cfg.device)
    model = model.to(device)
    split = split_tensors(cfg, load(cfg, data_dir, cfg.eval_split), tokenizer)
    feats = None
    if cfg.protocol == "frozen":
        spec = ModelSpec(image_size=cfg.image_size)
        feats = cached_features(model, split, cfg, spec, device, "eval")
    t0 = time.perf_counter()
    metrics = evaluate_model(model, split, device, cfg, feats=feats, progress=cfg.progress)
    result = {
        "metrics": metrics,
        "dense_source": cfg.dense_source,
        "split": cfg.eval_split,
        "checkpoint": str(args.checkpoint),
        "official": bool(args.official),
        "eval_seconds": time.perf_counter() - t0,
        "seps_config": model.config.to_dict(),
        "environment": environment(),
    }
    out = Path(
        args.output
        or Path(args.checkpoint).with_name(f"eval-{cfg.eval_split}-{cfg.dense_source}.json")
    )
    atomic_write_json(out, result)
    print(_summary(result) + f" -> {out}")
    return 0


__all__ = [
    "PROTOCOLS",
    "TrainConfig",
    "encode_split",
    "environment",
    "evaluate_model",
    "load_run_checkpoint",
    "train",
]
