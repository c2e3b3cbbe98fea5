"""Run checkpoints: writing them whole, reading them with clear errors, and their tokenizer.

A run checkpoint (``<out>/checkpoint_last.safetensors``, written by :func:`seps.train.train`
after every epoch, and at the step a SIGTERM stops it) holds the model, optimiser,
scheduler and run state, the configs and the tokenizer, under ``"format":
"seps-bench/1"``. It is data only (:func:`seps.io.safe_files.save_tensor_json`: safetensors
plus JSON), so reading one runs no code. Checkpoints written before that
(``checkpoint_last.pt``, pickled) are still read, with ``weights_only=True``: tensors and
plain containers only (:func:`run_checkpoint_path` finds either). A data-only file carries
the hash of its tensors (:mod:`seps.io.derived`), checked on every read: a damaged checkpoint
named on the command line is refused in one line, and the one a run would resume from is
set aside, with the other state it reads back, so the run trains again
(:func:`set_aside_damaged_state`).
:func:`checkpoint_tokenizer` is the one place that reads the stored tokenizer back.

Once a run has done its last epoch, :func:`drop_training_state` rewrites its checkpoint
without the optimiser and scheduler state (AdamW keeps two moments per weight: about two
thirds of the file), unless ``keep_optimizer``; :func:`restore_training_state` resumes
either kind, and says why a slimmed checkpoint cannot train further.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import torch

from ..core.config import SEPSConfig
from ..data.text import tokenizer_from_json, tokenizer_hash, tokenizer_to_json
from ..io.safe_files import load_tensor_json, load_torch_data, save_tensor_json
from ..model.seps_model import ModelSpec
from .config import TrainConfig

#: the ``"format"`` entry of every run checkpoint
CHECKPOINT_FORMAT = "seps-bench/1"
#: What a run needs only to continue training (dropped from a completed run's checkpoint).
TRAINING_STATE_KEYS = ("optimizer", "scheduler")
#: A run's checkpoint in its ``out_dir`` (data only), and the pickled one written before.
CHECKPOINT_NAME = "checkpoint_last.safetensors"
LEGACY_CHECKPOINT_NAME = "checkpoint_last.pt"


def run_checkpoint_path(out_dir: Path) -> Path:
    """The checkpoint of the run in ``out_dir``: the data-only one, or else one written in
    the older pickled format; the data-only name when there is neither.

    What a resumed run reads back is checked first (:func:`set_aside_damaged_state`): a
    damaged checkpoint is named in one line and set aside, and the data-only name, now
    absent, is returned, so the run trains again from its first epoch."""
    new, old = Path(out_dir) / CHECKPOINT_NAME, Path(out_dir) / LEGACY_CHECKPOINT_NAME
    if new.is_file():
        set_aside_damaged_state(Path(out_dir))
    return old if old.is_file() and not new.is_file() else new


def set_aside_damaged_state(out_dir: Path) -> list[Path]:
    """Check what a run resumed in ``out_dir`` reads back (its checkpoint, the movement
    baseline ``θ_init`` and the best-validation weights, each against the hash written
    with it, :mod:`seps.io.derived`). When one is damaged (cut short, unreadable, or not
    matching its hash) it is named in one line and all of them are moved aside as
    ``*.corrupt``: the run then starts from scratch, which gives the same record as a
    fresh store (one checkpoint is kept, so there is no earlier good one to go back to).
    Returns what was moved (empty when all is well). Files written before files carried
    a hash are only checked to be readable."""
    from ..io.derived import report, safetensors_problem, set_aside
    from .movement import INIT_FILE

    out_dir = Path(out_dir)
    state = [out_dir / n for n in (CHECKPOINT_NAME, INIT_FILE, BEST_NAME)]
    for path in state:
        problem = safetensors_problem(path, require_hash=False) if path.is_file() else None
        if problem is not None:
            break
    else:
        return []
    moved = [m for m in (set_aside(p) for p in state if p.is_file()) if m is not None]
    report(
        path,
        problem,
        f"moved the run's state aside ({', '.join(m.name for m in moved) or 'by another process'})"
        "; training again from the first epoch",
    )
    return moved


def _read(path: Path) -> Any:
    if path.suffix == ".safetensors":
        return load_tensor_json(path)
    # The scheduler's milestones are a Counter: a plain container too.
    return load_torch_data(path, allowed=[collections.Counter])


def _write(path: Path, obj: dict[str, Any]) -> None:
    """Data only, atomically. A legacy ``.pt`` path is rewritten under the new name (and
    the pickle removed), so a resumed old run continues in the new format."""
    path = Path(path)
    save_tensor_json(path.with_name(CHECKPOINT_NAME), obj)
    if path.name != CHECKPOINT_NAME:
        path.unlink(missing_ok=True)


def save_run_checkpoint(
    path: Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: dict[str, Any],
    cfg: TrainConfig,
    seps_cfg: SEPSConfig,
    spec: ModelSpec,
    tokenizer: Any,
    partial_epoch: dict[str, Any] | None = None,
) -> None:
    """Write a run checkpoint atomically (``state``: the run state as a dict;
    ``partial_epoch``: the progress of an epoch stopped at a step, see
    :func:`seps.train.train`)."""
    extra = {} if partial_epoch is None else {"partial_epoch": partial_epoch}
    _write(
        path,
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "state": state,
            "train_config": cfg.to_dict(),
            "seps_config": seps_cfg.to_dict(),
            "model_spec": spec.to_dict(),
            "tokenizer": tokenizer_to_json(tokenizer),
            "format": CHECKPOINT_FORMAT,
            **extra,
        },
    )


def load_run_checkpoint(path: Path) -> dict[str, Any]:
    """A run checkpoint written by :func:`train` (either format), with a clear error
    otherwise; one that needs more than tensors and plain data is refused unread."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"checkpoint {str(path)!r}: file not found")
    try:
        ckpt = _read(path)
    except ValueError as exc:
        raise type(exc)(f"checkpoint {exc}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        keys = list(ckpt)[:8] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(
            f"checkpoint {str(path)!r}: expected a seps-bench run checkpoint (key 'format' = "
            f"'{CHECKPOINT_FORMAT}'), got {keys}; for an official model_best.pth use --official"
        )
    # The head config is "seps_config" in checkpoints and "head_config" in run records:
    # accept either name, so that both spellings load.
    if "seps_config" not in ckpt and "head_config" in ckpt:
        ckpt["seps_config"] = ckpt["head_config"]
    missing = [k for k in ("model", "train_config", "seps_config", "model_spec") if k not in ckpt]
    if missing:
        raise ValueError(f"checkpoint {str(path)!r}: missing keys {missing}")
    return ckpt


def checkpoint_tokenizer(ckpt: dict[str, Any], path: Path) -> Any | None:
    """The tokenizer stored in a run checkpoint (``None`` for checkpoints written before
    the tokenizer was stored in them)."""
    if "tokenizer" not in ckpt:
        return None
    try:
        return tokenizer_from_json(ckpt["tokenizer"])
    except Exception as exc:
        raise ValueError(f"checkpoint {str(path)!r}: stored tokenizer unreadable ({exc})") from None


def check_same_tokenizer(ckpt: dict[str, Any], tokenizer: Any, path: Path) -> None:
    """A run resumes only with the tokenizer it was trained with (the ids the
    embeddings learned); checkpoints written before tokenizers were stored pass."""
    stored = checkpoint_tokenizer(ckpt, path)
    if stored is None:
        return
    saved = tokenizer_hash(stored)
    if saved != tokenizer_hash(tokenizer):
        raise ValueError(
            f"checkpoint {str(path)!r}: trained with tokenizer {saved}, but this run builds "
            f"{tokenizer_hash(tokenizer)} (its captions or --tokenizer changed); "
            "use a new --out or remove the checkpoint"
        )


def drop_training_state(path: Path) -> bool:
    """Rewrite the run checkpoint ``path`` atomically without :data:`TRAINING_STATE_KEYS`;
    False (nothing written) when it holds none of them."""
    ckpt = _read(Path(path))
    if not any(k in ckpt for k in TRAINING_STATE_KEYS):
        return False
    _write(path, {k: v for k, v in ckpt.items() if k not in TRAINING_STATE_KEYS})
    return True


def restore_training_state(
    ckpt: dict[str, Any], optimizer: torch.optim.Optimizer, scheduler: Any, epochs: int, path: Path
) -> None:
    """Load the optimiser and scheduler state of a run checkpoint to resume training.

    A completed run's checkpoint may have none (:func:`drop_training_state`): resuming it
    only evaluates again, which needs none; training it further (a larger ``epochs``) is a
    ``ValueError`` that says what to do.
    """
    if "optimizer" in ckpt:
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        return
    done = int(ckpt["state"]["epoch"]) + 1
    if done < epochs:
        raise ValueError(
            f"checkpoint {str(path)!r}: a completed {done}-epoch run saved without its optimizer "
            f"state (trained without --keep-optimizer), so it cannot continue to {epochs} "
            f"epochs; train again under a new --out (with --keep-optimizer to extend it later), "
            f"or resume with --epochs {done} to evaluate it only"
        )


#: Why ``eval_checkpoint="best_val"`` cannot run (refused before training, and again at
#: evaluation for a history without validation).
NO_VALIDATION = (
    "train config field 'eval_checkpoint': best_val needs a per-epoch validation "
    "(val_images > 0 and the data's val_split present)"
)
#: The weights of the epoch with the best validation rSum so far (what the official
#: training keeps as ``model_best.pth``), beside the run checkpoint.
BEST_NAME = "checkpoint_best.safetensors"


def best_val_epoch(history: list[dict[str, Any]]) -> int | None:
    """The epoch whose validation rSum is the highest in ``history`` (the first on ties,
    as the official ``rsum > best_rsum`` keeps the earlier); ``None`` without validation."""
    scored = [
        (h["val"]["rsum"], -h["epoch"])
        for h in history
        if isinstance(h.get("val"), dict) and "rsum" in h["val"]
    ]
    return -max(scored)[1] if scored else None


def save_best_weights(out_dir: Path, model: torch.nn.Module, epoch: int, val_rsum: float) -> None:
    """Write the model's weights as the best-validation ones (data only, atomically)."""
    save_tensor_json(
        Path(out_dir) / BEST_NAME,
        {
            "model": model.state_dict(),
            "epoch": epoch,
            "val_rsum": val_rsum,
            "format": CHECKPOINT_FORMAT,
        },
    )


def load_best_weights(out_dir: Path, epoch: int) -> dict[str, torch.Tensor]:
    """The best-validation weights of ``out_dir``, which must be those of ``epoch``."""
    path = Path(out_dir) / BEST_NAME
    if not path.is_file():
        raise ValueError(
            f"checkpoint {str(path)!r}: file not found (needed by eval_checkpoint best_val)"
        )
    try:
        best = load_tensor_json(path)
    except ValueError as exc:
        raise ValueError(f"checkpoint {exc}") from None
    if not isinstance(best, dict) or best.get("format") != CHECKPOINT_FORMAT or "model" not in best:
        raise ValueError(
            f"checkpoint {str(path)!r}: expected best-validation weights ('format', 'model')"
        )
    if best.get("epoch") != epoch:
        raise ValueError(
            f"checkpoint {str(path)!r}: holds epoch {best.get('epoch')!r}, but the run's "
            f"history puts its best validation at epoch {epoch}"
        )
    return best["model"]


def select_eval_weights(
    cfg: TrainConfig, model: torch.nn.Module, history: list[dict[str, Any]], last_epoch: int
) -> int:
    """Put the weights ``cfg.eval_checkpoint`` asks for into ``model`` (which holds the
    last epoch's) and return their epoch: the last one, or the best on validation."""
    if cfg.eval_checkpoint != "best_val":
        return last_epoch
    best = best_val_epoch(history)
    if best is None:
        raise ValueError(NO_VALIDATION)
    if best != last_epoch:
        model.load_state_dict(load_best_weights(Path(cfg.out_dir), best))
    return best
