"""A trained run's final evaluation and its ``result.json``: :func:`run_result` (what the
training loop calls, its hooks then add their fields) and :func:`finish` (the same for a
model, state and meter given one by one, written to ``result.json``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from ..data.text import tokenizer_hash
from ..io.store import atomic_write_json
from ..model.seps_model import ModelSpec, SEPSModel, count_parameters
from .checkpoints import select_eval_weights
from .config import TrainConfig
from .data import load, split_tensors
from .evaluation import NonFiniteSimilaritiesError, evaluate_model, split_bounds
from .features import cached_features
from .hooks import Run
from .movement import MovementMeter
from .run_environment import environment, peak_memory
from .run_state import DivergedError, RunState

__all__ = ["evaluation_result", "finish", "run_result"]


def run_result(run: Run) -> dict[str, Any]:
    """:func:`evaluation_result` of a trained :class:`~.hooks.Run` (``movement`` left
    ``None`` for its hook to fill)."""
    return evaluation_result(
        run.cfg, run.model, run.tokenizer, run.data_dir, run.device, run.state, run.spec
    )


def finish(
    cfg: TrainConfig,
    model: SEPSModel,
    tokenizer: Any,
    data_dir: Path,
    device: torch.device,
    state: RunState,
    spec: ModelSpec,
    meter: MovementMeter | None = None,
) -> dict[str, Any]:
    """Evaluate on ``eval_split`` and write ``result.json`` (with ``movement`` when
    ``meter`` measured the run: :mod:`seps.train.movement`)."""
    result = evaluation_result(cfg, model, tokenizer, data_dir, device, state, spec)
    if meter is not None:
        result["movement"] = meter.result(state.history)
    atomic_write_json(Path(cfg.out_dir) / "result.json", result)
    return result


def evaluation_result(
    cfg: TrainConfig,
    model: SEPSModel,
    tokenizer: Any,
    data_dir: Path,
    device: torch.device,
    state: RunState,
    spec: ModelSpec,
) -> dict[str, Any]:
    """Evaluate the weights ``eval_checkpoint`` names on ``eval_split``; the result
    record (``movement``: ``None``)."""
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        raise DivergedError("the trained weights are not finite", state, 0)
    evaluated_epoch = select_eval_weights(cfg, model, state.history, state.epoch)
    eval_split = split_tensors(cfg, load(cfg, data_dir, cfg.eval_split), tokenizer)
    feats = None
    if cfg.protocol == "frozen":
        feats = cached_features(model, eval_split, cfg, spec, device, "eval")
    t0 = time.perf_counter()
    try:
        metrics = evaluate_model(model, eval_split, device, cfg, feats=feats, progress=cfg.progress)
    except NonFiniteSimilaritiesError as exc:
        where = {"epoch": state.epoch, "phase": "evaluation"}
        raise DivergedError(f"{exc} at evaluation", state, 0, where) from None
    eval_seconds = time.perf_counter() - t0
    pairs = eval_split.data.n_images * eval_split.data.n_captions
    bounds = split_bounds(data_dir, eval_split.data) if cfg.dataset == "synthetic" else {}
    return {
        "metrics": metrics,
        "dense_source": cfg.dense_source,
        "eval_dense_source": cfg.eval_protocol,
        "protocol": cfg.protocol,
        "eval_split": cfg.eval_split,
        "eval_images": eval_split.data.n_images,
        "text_only_rsum": bounds.get("text_only_rsum"),
        "chance_rsum": bounds.get("chance_rsum"),
        "oracle_rsum": bounds.get("oracle_rsum"),
        "history": state.history,
        "evaluated_epoch": evaluated_epoch,
        "movement": None,
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
