"""Training data as tensors: the dataset folder, the tokenizer, images and captions.

- :func:`check_data_dir` / :func:`prepare_data_dir`: the dataset folder of a
  :class:`TrainConfig` (the synthetic set is generated on first use);
- :func:`build_tokenizer`: the run's tokenizer (named, or trained on the training captions);
- :class:`ImageStore`, :class:`TextTable`, :class:`SplitTensors`: one split's images and
  captions ready for batching; :func:`subset` cuts a quick validation set.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..data.layout import SplitData, decode_image, load_split
from ..data.synth import generate_synthetic, is_synthetic_dir
from ..text import augment_caption_ids, load_tokenizer
from ..train_config import TrainConfig
from ..version import data_version

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def synthetic_path(cfg: TrainConfig) -> Path:
    """Where the synthetic set of ``cfg`` lives: ``data_path`` (a complete set there is
    used as it is), or a folder named after everything that determines its content
    (size, draw, dense-caption noise, generator code), so a default folder is never
    reused for other settings."""
    default = (
        f"data/synth-{cfg.synth_images}-s{cfg.data_seed}-dn{cfg.dense_noise:g}-g{data_version()}"
    )
    return Path(cfg.data_path or default)


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
    if cfg.dataset == "synthetic" and not is_synthetic_dir(path):
        generate_synthetic(
            path, n_images=cfg.synth_images, seed=cfg.data_seed, dense_noise=cfg.dense_noise
        )
    return path


def load(cfg: TrainConfig, data_dir: Path, split: str) -> SplitData:
    return load_split(
        data_dir,
        split,
        image_dir=cfg.image_dir,
        dense_per="image",
        skip_bad_images=cfg.skip_bad_images,
    )


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
