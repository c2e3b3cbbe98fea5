"""Training data as tensors: the dataset folder, the tokenizer, images and captions.

- :func:`check_data_dir` / :func:`prepare_data_dir`: the dataset folder of a
  :class:`TrainConfig` (the synthetic set is generated on first use);
- :func:`build_tokenizer`: the run's tokenizer (named, or trained on the training captions);
- :class:`ImageStore`, :class:`TextTable`, :class:`SplitTensors`: one split's images and
  captions ready for batching; :func:`subset` cuts a quick validation set;
- :func:`image_batches`: one epoch's training images, decoded in DataLoader workers or in
  this process (the same tensors either way);
- :func:`validation_split`: the per-epoch validation set and the dense-caption protocol it
  can be scored under (the official files have no dense captions for ``dev``).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..data.layout import SplitData, decode_image, load_split
from ..data.synth import generate_synthetic, is_synthetic_dir
from ..data.text import augment_caption_ids, load_tokenizer, resolve_tokenizer
from ..versioning.version import data_version
from .config import TrainConfig

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def synthetic_path(cfg: TrainConfig) -> Path:
    """Where the synthetic set of ``cfg`` lives: ``data_path`` (a complete set there is
    used as it is), or a folder named after everything that determines its content
    (size, draw, dense-caption noise, caption grammar when not v1: ``-gr2``, generator
    code), so a default folder is never reused for other settings."""
    grammar = "" if cfg.grammar == "v1" else f"-gr{cfg.grammar.removeprefix('v')}"
    default = (
        f"data/synth-{cfg.synth_images}-s{cfg.data_seed}-dn{cfg.dense_noise:g}{grammar}"
        f"-g{data_version()}"
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


def check_training_files(cfg: TrainConfig) -> None:
    """Refuse, before a run trains, an official-layout folder that lacks a file the run
    reads: the caption, id and dense-caption files of its training and evaluation splits,
    ``id_mapping.json`` and the image folder. (The loader checks the files' contents when
    it reads them; this only catches what is absent, once for a whole matrix.)"""
    if cfg.dataset == "synthetic":
        return
    path = check_data_dir(cfg)
    expected = "a folder in the official layout (see README, Data and evaluation)"
    for split in dict.fromkeys((cfg.train_split, cfg.eval_split)):
        for name in (f"{split}_caps.txt", f"{split}_ids.txt"):
            if not (path / name).is_file():
                raise ValueError(
                    f"--data-path {str(path)!r}: {name} not found; expected {expected}"
                )
        if not any(path.glob(f"*_{split}.jsonl")):
            raise ValueError(
                f"--data-path {str(path)!r}: no <name>_{split}.jsonl (dense captions of the "
                f"{split} split); expected {expected}"
            )
    if not (path / "id_mapping.json").is_file():
        raise ValueError(
            f"--data-path {str(path)!r}: id_mapping.json not found; expected {expected}"
        )
    images = Path(cfg.image_dir) if cfg.image_dir else path / "images"
    if not images.is_dir():
        option = "--image-dir" if cfg.image_dir else "--data-path"
        raise ValueError(f"{option}: image folder {str(images)!r} not found")


def prepare_data_dir(cfg: TrainConfig) -> Path:
    """:func:`check_data_dir`, generating the synthetic set when it is absent."""
    path = check_data_dir(cfg)
    if cfg.dataset == "synthetic" and not is_synthetic_dir(path):
        generate_synthetic(
            path,
            n_images=cfg.synth_images,
            seed=cfg.data_seed,
            dense_noise=cfg.dense_noise,
            grammar=cfg.grammar,
        )
    return path


def load(cfg: TrainConfig, data_dir: Path, split: str, *, require_dense: bool = True) -> SplitData:
    return load_split(
        data_dir,
        split,
        image_dir=cfg.image_dir,
        dense_per="image",
        skip_bad_images=cfg.skip_bad_images,
        require_dense=require_dense,
    )


def build_tokenizer(cfg: TrainConfig, data_dir: Path) -> Any:
    """``cfg.tokenizer``, else the pretrained text backbone's own tokenizer
    (:func:`seps.data.text.resolve_tokenizer`), else the WordPiece tokenizer built
    deterministically from the training captions (cached under ``<data>/tokenizer-cache``)."""
    train_data = load(cfg, data_dir, cfg.train_split)
    return load_tokenizer(
        resolve_tokenizer(cfg.tokenizer, cfg.text_backbone),
        captions=train_data.captions + train_data.dense,
        vocab_size=cfg.vocab_size,
        cache_dir=data_dir / "tokenizer-cache",
    )


class ImageStore:
    """Images of a split as normalised tensors ``(3, S, S)``; decoded once and kept in
    memory as uint8 when the whole split fits in 2 GB, else read on demand.

    ``augment``: the store of a training split under ``image_augment``; :meth:`batch`
    then crops every image afresh from its file (the original resolution is needed), so
    nothing is cached.
    """

    def __init__(self, files: Sequence[Path], size: int, augment: bool = False) -> None:
        self.files = list(files)
        self.size = size
        self.augment = augment
        self.mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
        self.cache: Tensor | None = None
        if not augment and len(self.files) * 3 * size * size <= 2 * 2**30:
            self.cache = torch.stack([self._decode(f) for f in self.files])

    def _decode(self, path: Path) -> Tensor:
        return decode_image(path, self.size)

    def __len__(self) -> int:
        return len(self.files)

    def batch(self, idx: Sequence[int], seeds: Sequence[Sequence[int]] | None = None) -> Tensor:
        """Normalised images ``(B, 3, S, S)`` of ``idx``; with ``seeds`` (one per image) on
        an ``augment`` store, each image is augmented with ``np.random.default_rng(seed)``."""
        if self.augment and seeds is not None:
            raw = torch.stack(
                [
                    decode_image(self.files[i], self.size, np.random.default_rng(list(s)))
                    for i, s in zip(idx, seeds, strict=True)
                ]
            )
        elif self.cache is not None:
            raw = self.cache[list(idx)]
        else:
            raw = torch.stack([self._decode(self.files[i]) for i in idx])
        return (raw.float() / 255.0 - self.mean) / self.std


class _StepImages(torch.utils.data.Dataset):
    """Item ``i``: the images of step ``i`` of an epoch (what a worker decodes)."""

    def __init__(
        self, store: ImageStore, steps: Sequence[Sequence[int]], seed: int | None, offset: int
    ) -> None:
        self.store, self.steps, self.seed, self.offset = store, steps, seed, offset

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, i: int) -> Tensor:
        idx = self.steps[i]
        seeds = None
        if self.seed is not None:
            # One generator per (epoch seed, step, position in the whole batch): the draws
            # do not depend on which process decodes, nor on the rank under DDP.
            seeds = [(self.seed, i, self.offset + k) for k in range(len(idx))]
        return self.store.batch(idx, seeds)


def image_batches(
    store: ImageStore,
    steps: Sequence[Sequence[int]],
    *,
    seed: int | None = None,
    offset: int = 0,
    workers: int = 0,
    pin_memory: bool = False,
    start: int = 0,
) -> Iterator[Tensor]:
    """The images ``(B, 3, S, S)`` of each step of an epoch from step ``start`` on (an
    epoch resumed at that step), in order.

    ``steps[i]``: the image indices of step ``i`` (this process's share of the batch, whose
    first image is at ``offset`` in the whole batch); ``seed``: the epoch's seed, which
    turns on the augmentation of an ``augment`` store (None: no augmentation). With
    ``workers`` > 0 the images are decoded by that many DataLoader worker processes, a few
    steps ahead; the tensors are the same as with ``workers=0``, which decodes each step in
    this process when it is asked for. A store already decoded in memory and not augmented
    has nothing to decode: it is read in this process whatever ``workers`` says.
    """
    data = _StepImages(store, steps, seed, offset)
    decoding = store.cache is None or (store.augment and seed is not None)
    if workers == 0 or not decoding:
        return (data[i] for i in range(start, len(data)))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(data, range(start, len(data))) if start else data,
        batch_size=None,
        shuffle=False,
        num_workers=workers,
        pin_memory=pin_memory,
        # The loader draws its workers' base seed from this generator; by default it would
        # draw from the global torch RNG and shift every later draw (dropout) of the run.
        generator=torch.Generator().manual_seed(0),
    )
    return iter(loader)


class TextTable:
    """Word pieces of every caption (without ``[CLS]``/``[SEP]``), truncated once.

    ``max_len``: the longest row kept, ``[CLS]`` and ``[SEP]`` included (0: no
    truncation); the attribute ``max_len`` is then the longest row of the table, the
    width its encoded rows are padded to. ``keep``: how many token features of each
    encoded row evaluation keeps (0: all; :func:`keep_first_tokens`).
    ``whole_word``: the augmentation decides per word (``augment_whole_word``).
    """

    def __init__(
        self,
        tokenizer: Any,
        texts: Sequence[str],
        max_len: int,
        *,
        keep: int = 0,
        whole_word: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        pieces = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        if max_len == 0:
            self.pieces = [list(p) for p in pieces]
            max_len = 2 + max((len(p) for p in self.pieces), default=0)
        else:
            self.pieces = [p[: max_len - 2] for p in pieces]
        self.max_len = max_len
        self.keep = keep
        self.whole_word = whole_word
        self.cls = int(tokenizer.cls_token_id)
        self.sep = int(tokenizer.sep_token_id)
        self.pad = int(tokenizer.pad_token_id)

    def batch(self, idx: Sequence[int], rng: random.Random | None = None) -> tuple[Tensor, Tensor]:
        """Padded ids ``(B, L)`` and lengths ``(B,)``; augmented when ``rng`` is given."""
        rows = []
        for i in idx:
            p = self.pieces[i]
            if rng is not None:
                p = augment_caption_ids(p, self.tokenizer, rng, whole_word=self.whole_word)
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


def keep_first_tokens(embs: Tensor, lens: Tensor, keep: int) -> tuple[Tensor, Tensor]:
    """The official evaluation's cut: the first ``keep`` token features ``(B, <=keep, C)``
    of encoded rows ``embs (B, L, C)``, and their lengths ``lens (B,)`` clamped to
    ``keep`` (``keep=0``: unchanged). The encoder has read the whole row before the cut."""
    if keep == 0:
        return embs, lens
    return embs[:, :keep], lens.clamp(max=keep)


def split_tensors(
    cfg: TrainConfig, data: SplitData, tokenizer: Any, *, train: bool = False
) -> SplitTensors:
    """The tensors of one split: for training (``train``: augmented images when
    ``image_augment`` and the backbones are not frozen, word-level caption augmentation
    when ``augment_whole_word``) or for evaluation (``eval_max_words`` cut).

    A split without dense captions (`SplitData.has_dense` False) gets an empty dense
    caption per image, for protocols that do not read them (``dense_source`` none).
    """
    augment = train and cfg.image_augment and cfg.protocol != "frozen"
    keep = 0 if train else cfg.eval_max_words
    dense = data.dense if data.has_dense else [""] * data.n_images
    words = dict(keep=keep, whole_word=cfg.augment_whole_word)
    return SplitTensors(
        data,
        ImageStore(data.image_files, cfg.image_size, augment=augment),
        TextTable(tokenizer, data.captions, cfg.max_words, **words),
        TextTable(tokenizer, dense, cfg.max_dense_words, **words),
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


def validation_split(
    cfg: TrainConfig, data_dir: Path, tokenizer: Any, uses_dense: bool
) -> tuple[SplitTensors | None, str]:
    """The per-epoch validation set (the first ``val_images`` images of ``val_split``)
    and the dense-caption protocol it is scored under; never skipped silently.

    The protocol is the training one, except when the split has no dense captions (the
    official files have none for ``dev``) and the head reads them: then ``none`` (the
    sparse caption stands in), and one line says so. Without a ``val_split`` at all
    (no ``{val_split}_caps.txt``), one line says that validation is skipped. A split that
    is there but malformed raises its `DataError`.

    (The official code scores its test split after every epoch and keeps the best
    epoch's weights; this suite validates on ``dev`` and tests the last epoch, or with
    ``eval_checkpoint="best_val"`` the best epoch on ``dev``, never chosen on the test
    split.)
    """
    protocol = cfg.dense_source
    if cfg.val_images == 0:
        return None, protocol
    caps = data_dir / f"{cfg.val_split}_caps.txt"
    if not caps.is_file():
        print(
            f"validation: no {cfg.val_split!r} split in {data_dir} ({caps.name} not found); "
            "per-epoch validation skipped",
            flush=True,
        )
        return None, protocol
    data = load(cfg, data_dir, cfg.val_split, require_dense=False)
    if not data.has_dense and uses_dense and protocol != "none":
        print(
            f"validation: the {cfg.val_split!r} split of {data_dir} has no dense captions "
            f"(no *_{cfg.val_split}.jsonl); validating under dense_source=none instead of "
            f"{protocol}",
            flush=True,
        )
        protocol = "none"
    return subset(split_tensors(cfg, data, tokenizer), cfg.val_images), protocol
