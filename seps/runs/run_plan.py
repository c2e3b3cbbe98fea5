"""What ``seps-bench run --dry-run`` says about a plan before anything trains.

Four parts, all computed from the plan (:func:`seps.runs.runner.plan`) and the result store,
without training, downloading or writing anything:

- the resolved runs (one row per run and seed, with its key and what is stored);
- the resolved settings: the train config fields that differ from the
  :class:`~seps.train.config.TrainConfig` defaults and the head switches that differ from
  each run's preset, those shared by every run once, the others per run;
- what is to do: runs, trainings (runs that differ only in evaluation share one) and
  epochs, after the records that are stored and current and those to copy from another
  matrix that has measured the same run (:mod:`seps.runs.twins`), saying how many of the stored
  records were made on another machine (:func:`seps.experiments.provenance.bits_key`: another CPU
  type or float path, whose runs pair with this machine's only at the cost of the
  machine's own effect; docs/across-machines.md);
- the disk the trainings' checkpoints take, from parameter counts of the models built on
  the ``meta`` device (no weights in memory, nothing downloaded; ``unknown`` when the
  architecture is not available offline).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..core.config import SEPSConfig, get_config
from ..experiments.provenance import here_bits_key, record_bits_key
from ..io.store import RecordError, read_record
from ..train.config import TrainConfig
from ..train.official_backbones import builtin_config
from .runner import PlannedRun, decide, is_stale, record_path, reusable_work_dir
from .twins import find_twin

__all__ = [
    "ModelSize",
    "dry_run_text",
    "head_differences",
    "model_size",
    "settings_lines",
    "train_differences",
]

#: TrainConfig fields the settings leave out: the seed has its own column, the runner
#: sets the others.
UNSHOWN_TRAIN_FIELDS = ("seed", "out_dir", "cache_dir", "progress")

#: Bytes a parameter takes in a checkpoint: weights (and AdamW moments) are kept in fp32
#: whatever the training precision (autocast computes in bf16/fp16, it stores fp32).
BYTES_PER_PARAMETER = 4


# ------------------------------------------------------------------------- settings
def train_differences(cfg: TrainConfig) -> dict[str, Any]:
    """The fields of ``cfg`` that differ from the :class:`TrainConfig` defaults (without
    :data:`UNSHOWN_TRAIN_FIELDS`), in field order."""
    out = {}
    for f in dataclasses.fields(TrainConfig):
        value = getattr(cfg, f.name)
        if f.name not in UNSHOWN_TRAIN_FIELDS and value != f.default:
            out[f.name] = value
    return out


def head_differences(preset: str, head: SEPSConfig) -> dict[str, Any]:
    """The switches of ``head`` that differ from the preset ``preset``, in field order
    (``num_patches`` as resolved; the model sets it from its backbone when built)."""
    base = get_config(preset)
    return {
        f.name: getattr(head, f.name)
        for f in dataclasses.fields(SEPSConfig)
        if getattr(head, f.name) != getattr(base, f.name)
    }


def _fmt(items: dict[str, Any]) -> str:
    def one(v: Any) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, tuple):
            return "[" + ", ".join(map(str, v)) + "]"
        return str(v)

    return ", ".join(f"{k}={one(v)}" for k, v in items.items()) or "(defaults)"


def settings_lines(planned: list[PlannedRun]) -> list[str]:
    """The resolved settings: ``every run`` (what all share), then one line per run id
    that has settings of its own (seeds of a run share them)."""
    per_run: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for p in planned:
        per_run.setdefault(
            p.run.id, (train_differences(p.train_cfg), head_differences(p.run.preset, p.head))
        )
    if not per_run:
        return []

    def common(which: int) -> dict[str, Any]:
        first, *rest = (v[which] for v in per_run.values())
        return {k: v for k, v in first.items() if all(k in r and r[k] == v for r in rest)}

    train0, head0 = common(0), common(1)
    lines = [
        "resolved settings (train: fields that differ from the TrainConfig defaults; "
        "head: switches that differ from the run's preset):",
        f"  every run: train: {_fmt(train0)}; head: {_fmt(head0)}",
    ]
    for rid, (train, head) in per_run.items():
        t = {k: v for k, v in train.items() if k not in train0}
        h = {k: v for k, v in head.items() if k not in head0}
        if t or h:
            parts = [f"train: {_fmt(t)}"] * bool(t) + [f"head: {_fmt(h)}"] * bool(h)
            lines.append(f"  {rid}: {'; '.join(parts)}")
    return lines


# ----------------------------------------------------------------------- model size
@dataclasses.dataclass(frozen=True)
class ModelSize:
    """Parameter counts of a run's model: all of them, and those the optimiser updates."""

    parameters: int
    trainable: int

    @property
    def weights_bytes(self) -> int:
        return BYTES_PER_PARAMETER * self.parameters

    @property
    def checkpoint_bytes(self) -> int:
        """``checkpoint_last.safetensors`` while training: the weights and AdamW's two moments of
        every trainable parameter (3 x the weights when everything trains)."""
        return BYTES_PER_PARAMETER * (self.parameters + 2 * self.trainable)


@contextlib.contextmanager
def _hub_cache_only() -> Iterator[None]:
    """No hub request while active: ``HF_HUB_OFFLINE`` set, for this package's loaders
    (read at each load) and for ``huggingface_hub`` (read once at import; its client
    otherwise contacts the hub even for a ``local_files_only`` load)."""
    old_env = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - transformers needs the hub client
        constants = None
    old_const = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        if constants is not None:
            constants.HF_HUB_OFFLINE = old_const
        if old_env is None:
            del os.environ["HF_HUB_OFFLINE"]
        else:
            os.environ["HF_HUB_OFFLINE"] = old_env


def _local_folder(name: str, filename: str) -> str:
    """The local folder that holds ``filename`` for ``name``: ``name`` itself when it is a
    folder, else the hub cache's snapshot of that repository (a file-system lookup, never
    a request). ``LookupError`` when neither has it."""
    folder = Path(name).expanduser()
    if folder.is_dir():
        return str(folder)
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(name, filename)
    if not isinstance(found, str):
        raise LookupError(f"{name!r}: {filename} is not in a local folder or the hub cache")
    return str(Path(found).parent)


def _local_config(name: str) -> Any:
    """The transformers configuration of ``name`` from local files only (no weights), or
    the package's own copy for the official backbones (ViT/Swin-Base, BERT-base) that are
    not cached here."""
    from transformers import AutoConfig

    try:
        folder = _local_folder(name, "config.json")
    except LookupError:
        config = builtin_config(name)
        if config is None:
            raise
        return config
    return AutoConfig.from_pretrained(folder, local_files_only=True)


def _vocab_size(cfg: TrainConfig) -> int:
    """The tokenizer size of a ``tiny-bert`` run: the named tokenizer's (local files or
    cache only), else the cap of the WordPiece vocabulary trained on the captions (the
    pretraining recipe's when ``pretrain`` is set; the trained one may be a little
    smaller)."""
    if cfg.pretrain is not None:
        from ..train.pretrain import recipe

        return recipe(cfg.pretrain).vocab_size
    if cfg.tokenizer is not None:
        from ..data.text import load_tokenizer

        return len(load_tokenizer(_local_folder(cfg.tokenizer, "tokenizer_config.json")))
    return cfg.vocab_size


@functools.lru_cache(maxsize=64)
def _size(
    backbone: str,
    source: str,
    image_size: int,
    text: str,
    vocab: int | None,
    protocol: str,
    freeze_layers: int,
    head: SEPSConfig,
) -> ModelSize:
    from transformers import BertConfig

    from ..core.head import SEPSHead
    from ..model.encoders import (
        TINY_BACKBONES,
        TINY_TEXT_BACKBONES,
        ImageEncoder,
        build_image_encoder,
        build_text_encoder,
    )
    from ..model.seps_model import SEPSModel, count_parameters, freeze_first_layers

    text_backbone: Any = text
    if text not in TINY_TEXT_BACKBONES:
        # A BERT name or folder: its configuration only (never its weights).
        text_backbone = _local_config(text)
        if not isinstance(text_backbone, BertConfig):
            raise ValueError(f"text_backbone {text!r}: not a BERT configuration")
        vocab = None
    with torch.device("meta"):
        # As seps.model.seps_model.build_model, but a transformers backbone is built from its
        # configuration (weights are never read; timm builds the architecture offline).
        if source == "hf" and backbone not in TINY_BACKBONES:
            img = ImageEncoder(_local_config(backbone), head.embed_size, image_size=image_size)
        else:
            img = build_image_encoder(
                backbone,
                head.embed_size,
                image_size=image_size,
                source=source,  # type: ignore[arg-type]
            )
        txt = build_text_encoder(text_backbone, head.embed_size, vocab)
        model = SEPSModel(img, txt, SEPSHead(head.replace(num_patches=img.num_patches)))
    if protocol == "partial":
        freeze_first_layers(model.img_enc.visual_encoder, freeze_layers)
        freeze_first_layers(model.txt_enc.bert, freeze_layers)
    if protocol == "frozen":
        for m in (model.img_enc.visual_encoder, model.txt_enc.bert):
            m.requires_grad_(False)
    return ModelSize(count_parameters(model), count_parameters(model, trainable_only=True))


def model_size(cfg: TrainConfig, head: SEPSConfig) -> ModelSize | None:
    """Parameter counts of the model a run trains, built on the ``meta`` device (no memory
    for the weights; pretrained weights are never read, transformers configurations only
    from a local folder or the hub cache, nothing is requested from the hub), or ``None``
    when the model cannot be built so (e.g. a hub name that is not in the local cache)."""
    from ..model.encoders import TINY_TEXT_BACKBONES

    with _hub_cache_only():
        try:
            vocab = _vocab_size(cfg) if cfg.text_backbone in TINY_TEXT_BACKBONES else None
            return _size(
                cfg.backbone,
                cfg.backbone_source,
                cfg.image_size,
                cfg.text_backbone,
                vocab,
                cfg.protocol,
                cfg.freeze_layers,
                head,
            )
        # An estimate: whatever keeps the model from being built (no local config, an
        # unknown name, a backbone that does not build on meta) makes it unknown.
        except Exception:
            return None


def fmt_bytes(n: int | None) -> str:
    """``n`` bytes in decimal units (``1.2 GB``); ``unknown`` for ``None``."""
    if n is None:
        return "unknown"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


# -------------------------------------------------------------------------- the plan
def _stored(path: Path, version: str) -> tuple[dict[str, Any] | None, str]:
    """(record or None, the table's ``stored`` text) of the record at ``path``, marked
    ``(stale)`` when made by other code than ``version``."""
    try:
        rec = read_record(path)
    except RecordError:
        return None, "unreadable"
    if rec is None:
        return None, "-"
    return rec, rec["status"] + (" (stale)" if is_stale(rec, version) else "")


def dry_run_text(
    planned: list[PlannedRun],
    results: Path,
    *,
    version: str,
    retry_failed: bool = False,
    rerun_stale: bool = False,
    reuse: bool = True,
) -> str:
    """Everything ``--dry-run`` prints for ``planned`` (see the module docstring); what is
    to do follows :func:`seps.runs.runner.decide` for this code's ``version``
    (:func:`seps.versioning.version.code_version`) with the same ``retry_failed``, ``rerun_stale``
    and ``reuse`` as the run would (with ``reuse``, a run another matrix has measured is
    counted as copied: :mod:`seps.runs.twins`)."""
    from tabulate import tabulate

    rows, todo = [], []
    # elsewhere / unstamped: stored and current, made on another machine / before the
    # runner stamped the CPU.
    counts = dict.fromkeys(
        ("current", "failed", "stale", "unreadable", "copied", "elsewhere", "unstamped"), 0
    )
    here = here_bits_key()
    for p in planned:
        rec, stored = _stored(record_path(results, p), version)
        rows.append([p.run.id, p.seed, p.run.preset, p.run.describe(), p.key, stored])
        if stored == "unreadable":
            what = "run" if retry_failed else "unreadable"
        else:
            what = decide(rec, version, retry_failed=retry_failed, rerun_stale=rerun_stale)
        if what in ("run", "rerun-stale"):
            if reuse and find_twin(results, p.matrix, p.key, p.seed, version, here):
                counts["copied"] += 1
            else:
                todo.append(p)
        elif what == "skip":
            counts["current" if rec and rec["status"] == "done" else "failed"] += 1
            there = record_bits_key(rec) if rec and rec["status"] == "done" else here
            if there != here:
                counts["unstamped" if there is None else "elsewhere"] += 1
        else:
            counts[what] += 1
    lines = [
        tabulate(
            rows, headers=["run", "seed", "preset", "overrides", "key", "stored"], tablefmt="github"
        ),
        "",
        *settings_lines(planned),
        "",
        *_todo_lines(planned, todo, counts, version),
    ]
    return "\n".join(lines)


def _todo_lines(
    planned: list[PlannedRun], todo: list[PlannedRun], counts: dict[str, int], version: str
) -> list[str]:
    n_runs = len({p.run.id for p in planned})
    n_seeds = len({p.seed for p in planned})
    kept = [f"{counts['current']} stored and current"]
    if counts["failed"]:
        kept.append(f"{counts['failed']} failed kept (--retry-failed redoes them)")
    if counts["stale"]:
        kept.append(f"{counts['stale']} stale kept (--rerun-stale redoes them)")
    if counts["unreadable"]:
        kept.append(f"{counts['unreadable']} unreadable left in place (--retry-failed)")
    if counts["copied"]:
        kept.append(f"{counts['copied']} to copy from other matrices' records (--no-reuse)")
    # One training per (training key, seed); one already finished by this code (another
    # run of its group is stored) is only evaluated again.
    trainings: dict[tuple[str, int], PlannedRun] = {}
    evaluations = set()
    for p in todo:
        work = Path(p.train_cfg.out_dir)
        if (work / "result.json").is_file() and reusable_work_dir(work, version):
            evaluations.add((p.train_key, p.seed))
        else:
            trainings.setdefault((p.train_key, p.seed), p)
    epochs = sum(p.train_cfg.epochs for p in trainings.values())
    lines = [
        f"to do: {len(todo)} of {len(planned)} runs ({_n(n_runs, 'run')} x "
        f"{_n(n_seeds, 'seed')}; "
        f"{', '.join(kept)}): {_n(len(trainings), 'training')} (runs that differ only in "
        f"evaluation share one), {_n(epochs, 'epoch')} in all"
        + (f", {len(evaluations)} finished trainings evaluated again" if evaluations else ""),
    ]
    if counts["elsewhere"] or counts["unstamped"]:
        which = [
            f"{counts['elsewhere']} made on another CPU model or float path than this one",
            f"{counts['unstamped']} made before records named their CPU",
        ]
        lines.append(
            f"machine: of the {counts['current']} stored and current records, "
            f"{' and '.join(w for w in which if not w.startswith('0 '))}; runs made here "
            "would pair with them at the cost of the machine's own effect, so remove them "
            "to rerun here (docs/across-machines.md)"
        )
    return lines + _disk_lines(planned, list(trainings.values()))


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _disk_lines(planned: list[PlannedRun], trainings: list[PlannedRun]) -> list[str]:
    from tabulate import tabulate

    sizes: dict[str, ModelSize | None] = {}
    for p in planned:
        if p.run.id not in sizes:
            sizes[p.run.id] = model_size(p.train_cfg, p.head)
    rows = [
        [
            rid,
            "unknown" if s is None else f"{s.parameters:,}",
            fmt_bytes(None if s is None else s.weights_bytes),
            fmt_bytes(None if s is None else s.checkpoint_bytes),
        ]
        for rid, s in sizes.items()
    ]
    known = [(p, sizes[p.run.id]) for p in trainings if sizes[p.run.id] is not None]
    # A finished training keeps its weights only, unless keep_optimizer (seps.train.loop),
    # and one that validates also the best-validation weights (checkpoint_best).
    kept = sum(
        (s.checkpoint_bytes if p.train_cfg.keep_optimizer else s.weights_bytes)
        + (s.weights_bytes if p.train_cfg.val_images > 0 else 0)
        for p, s in known
        if s is not None
    )
    peak = max((s.checkpoint_bytes for _, s in known if s is not None), default=0)
    unknown = len(trainings) - len(known)
    if not trainings:
        what = "nothing (no training to do)"
    elif not known:
        what = "unknown"
    else:
        what = fmt_bytes(kept) + (
            f" at least ({_n(unknown, 'training')} of unknown size)" if unknown else ""
        )
    progress = f", plus up to {fmt_bytes(peak)} while one trains" if known else ""
    return [
        f"disk: {what} kept by the checkpoints of the {_n(len(trainings), 'training')} to do "
        f"(under <results>/_work/){progress}",
        "  while it trains, a training's checkpoint_last.safetensors holds the weights and "
        "AdamW's two moments of each trainable parameter, 4 bytes a number (3 x the weights "
        "when every "
        "parameter trains); once finished it keeps the weights only (all of it with "
        "--set train.keep_optimizer=true), and a training that validates keeps the weights "
        "of its best validation epoch beside them (checkpoint_best.safetensors); data, "
        "feature caches and records are not counted. Per run:",
        tabulate(
            rows,
            headers=["run", "parameters", "weights", "checkpoint while training"],
            tablefmt="github",
            disable_numparse=True,
        ),
    ]
