"""The training loop: one run from config to ``result.json``.

One run = :class:`TrainConfig` (data, encoders, protocol, optimisation) + a
:class:`seps.core.config.SEPSConfig` (the head's switches). :func:`train` follows the
official ``train.py``:

- AdamW with the official parameter groups (backbones at ``lr * backbone_lr_mult``),
  weight decay 1e-4, MultiStepLR (milestones, gamma 0.3);
- hinge triplet summed over all negatives in epoch 0 with the loss scaled by the
  warm-up factor ``i / n_batches``, hardest negative from ``max_violation_from`` on;
- gradient clipping at 2.0; bf16 autocast on CUDA (``precision``, see
:mod:`seps.runtime.precision`);
- a non-finite loss skips the step and is counted (the official code zeroes it silently).

Protocols: ``finetune`` (everything trains), ``partial`` (the embeddings and the first
``freeze_layers`` blocks of both backbones are frozen), ``frozen`` (backbone tokens are
computed once, cached on disk with safetensors, and only the projections and the head
train; caption augmentation is then off because the cached text states are fixed).

Determinism: every epoch re-seeds Python, NumPy and PyTorch from ``(seed, epoch)`` and
draws its caption order from that seed, so a run resumed from its epoch checkpoint
reproduces the uninterrupted run exactly on the CPU.

The loop itself is the method (:func:`train_epoch`: per step :func:`train_step`, which
encodes, scores with the head, takes the loss and steps the optimiser; then the epoch's
record and its validation). Everything else attaches through :mod:`.hooks`
(:func:`run_hooks`): the selection controls (:mod:`.hooks_controls`), the movement meter
(:mod:`.movement`), SIGTERM and checkpoints (:mod:`.hooks_checkpoint`), the console and
TensorBoard logs (:mod:`.hooks_log`, :mod:`.hooks_tensorboard`). The final evaluation and
``result.json``: :mod:`.result` (:func:`finish`).
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.config import SEPSConfig
from ..core.losses import LossOutput, SEPSLoss, keep_ratios, triplet_loss
from ..io.store import atomic_write_json
from ..runtime.faults import kill_point
from ..runtime.interrupts import stop_on_sigterm, stop_requested
from ..runtime.precision import autocast
from .config import TrainConfig
from .data import image_batches
from .distributed import barrier
from .evaluation import NonFiniteSimilaritiesError, evaluate_model
from .hooks import Batch, Epoch, Hooks, Run, TrainHook
from .hooks_checkpoint import CheckpointHook, InterruptHook
from .hooks_controls import SelectionControl
from .hooks_log import ConsoleLog
from .hooks_tensorboard import TensorBoardLog
from .movement import MovementHook, MovementMeter
from .prepare import build_run, check_kernel, dense_rows, prepare_run, set_dropout
from .result import finish, run_result
from .run_environment import environment, epoch_seed, seed_everything, set_rng_states
from .run_state import DivergedError, RunState

__all__ = [
    "FIXED_LOSSES",
    "DivergedError",
    "RunState",
    "build_run",
    "check_kernel",
    "dense_rows",
    "finish",
    "fixed_alignment_losses",
    "grad_norm",
    "ratio_grad_norm",
    "run_hooks",
    "set_dropout",
    "train",
]


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


#: Alignment losses logged at every step under one definition for the whole run (the
#: active term, ``align``, changes definition with the warm-up and the hardest-negative
#: schedule, so its curve alone mixes two losses): the triplet summed over all negatives
#: and over the hardest negative, margin of the config, no warm-up factor.
FIXED_LOSSES = ("align_sum", "align_hardest")


def fixed_alignment_losses(sims: Tensor, img_ids: Tensor, margin: float) -> dict[str, float]:
    """:data:`FIXED_LOSSES` of a batch's ``(B, B)`` similarities (no gradient)."""
    with torch.no_grad():
        return {
            "align_sum": float(triplet_loss(sims, img_ids, margin, max_violation=False)),
            "align_hardest": float(triplet_loss(sims, img_ids, margin, max_violation=True)),
        }


def run_hooks(
    cfg: TrainConfig,
    seps_cfg: SEPSConfig,
    *,
    tensorboard: bool = True,
    extra: Sequence[TrainHook] = (),
) -> Hooks:
    """The hooks of a run, in calling order: SIGTERM first (a stop comes before anything
    else of the step), the selection control, the movement meter, the checkpoint, the
    console log, TensorBoard (``tensorboard``: a runner option, not part of the run), then
    ``extra``. The interrupt and the meter are looked up here, at call time, so that tests
    can stand in for them."""
    hooks: list[TrainHook] = [
        InterruptHook(stop_requested),
        SelectionControl(cfg, seps_cfg),
        MovementHook(MovementMeter),
        CheckpointHook(),
        ConsoleLog(),
    ]
    if tensorboard:
        hooks.append(TensorBoardLog())
    return Hooks([*hooks, *extra])


def train(
    cfg: TrainConfig,
    seps_cfg: SEPSConfig,
    *,
    resume: bool = False,
    stop_after_epoch: int | None = None,
    tensorboard: bool = True,
    hooks: Sequence[TrainHook] = (),
) -> dict[str, Any]:
    """Train, evaluate and write ``<out_dir>/result.json``; return the result record.

    A checkpoint (``checkpoint_last.safetensors``, with the tokenizer inside) is written
    atomically after every epoch; ``resume=True`` continues from it. Once the last epoch
    is done the checkpoint loses its optimizer and scheduler state, unless
    ``keep_optimizer`` (resuming a completed run then only evaluates again).
    ``stop_after_epoch`` ends the call after that epoch (used to test resuming).
    A SIGTERM (:mod:`seps.runtime.interrupts`) ends it after the current step, with the
    checkpoint written at that step (``resume=True`` continues from it, to the same
    bits), by raising :class:`seps.runtime.interrupts.StopRequested`.

    ``tensorboard`` writes TensorBoard event files under ``<out_dir>/tensorboard/``
    (:mod:`.hooks_tensorboard`); ``hooks`` are added after the run's own
    (:func:`run_hooks`). Neither changes what the run computes, nor its key.

    Raises:
        DivergedError: training could not go on (see ``TrainConfig.on_nonfinite``);
            ``result.json`` then says ``"status": "diverged"`` with where and how often.
    """
    all_hooks = run_hooks(cfg, seps_cfg, tensorboard=tensorboard, extra=hooks)
    try:
        with stop_on_sigterm():
            return _train(
                cfg, seps_cfg, all_hooks, resume=resume, stop_after_epoch=stop_after_epoch
            )
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
    cfg: TrainConfig,
    seps_cfg: SEPSConfig,
    hooks: Hooks,
    *,
    resume: bool,
    stop_after_epoch: int | None,
) -> dict[str, Any]:
    """Prepare the run, train its epochs, evaluate it (rank 0)."""
    run = prepare_run(cfg, seps_cfg, hooks, loss=SEPSLoss, resume=resume)
    hooks.on_run_start(run)
    result = None
    try:
        for epoch in range(run.state.epoch + 1, cfg.epochs):
            train_epoch(run, epoch)
            if run.dist.main and stop_after_epoch is not None and epoch >= stop_after_epoch:
                return {"interrupted_after_epoch": epoch}
        if not run.dist.main:
            return {"rank": run.dist.rank}
        hooks.on_train_end(run)
        result = run_result(run)
        hooks.on_run_end(run, result)
        atomic_write_json(run.out / "result.json", result)
        return result
    finally:
        if result is None:
            hooks.on_run_end(run, None)


# ------------------------------------------------------------------------ the epoch


def train_epoch(run: Run, epoch: int) -> dict[str, Any]:
    """One epoch: every step, then its record (with validation) into the history."""
    ep = start_epoch(run, epoch)
    run.hooks.on_epoch_start(run, ep)
    for i in range(ep.start, run.n_batches):
        caps = ep.order[i * run.cfg.batch_size : (i + 1) * run.cfg.batch_size].tolist()
        batch = Batch(i, caps, run.caption_to_image[caps].tolist())
        run.hooks.on_step_start(run, ep, batch)  # SIGTERM stops here; controls add a prior
        logged = train_step(run, ep, batch)
        if logged is not None:
            run.hooks.on_step_end(run, ep, logged)
    rec = end_epoch(run, ep)
    if run.dist.main:
        run.hooks.on_epoch_end(run, rec)  # the checkpoint, the logs
    barrier(run.dist)
    return rec


def start_epoch(run: Run, epoch: int) -> Epoch:
    """Seed the epoch from ``(seed, epoch)`` and draw its caption order; an epoch a
    SIGTERM stopped goes on from its step with its sums and random states."""
    cfg, device = run.cfg, run.device
    t0 = time.perf_counter()
    es = epoch_seed(cfg.seed, epoch)
    seed_everything(es)
    n_caps = len(run.train_split.captions.pieces)
    order = torch.randperm(n_caps, generator=torch.Generator().manual_seed(es))
    text_rng = random.Random(es) if cfg.augment and cfg.protocol != "frozen" else None
    part = run.partial if run.partial and run.partial["epoch"] == epoch else None
    run.partial = None
    if part:  # this epoch was stopped at step part["next_step"]: go on from there, same bits
        set_rng_states(part["rng"], device)
        if text_rng is not None:
            text_rng.setstate(part["text_rng"])
        t0 -= part["seconds"]
    run.model.train()
    if cfg.protocol == "frozen":
        run.model.img_enc.visual_encoder.eval()
        run.model.txt_enc.bert.eval()
    ep = Epoch(
        epoch=epoch,
        seed=es,
        order=order,
        text_rng=text_rng,
        start=part["next_step"] if part else 0,
        t0=t0,
        max_violation=epoch >= cfg.max_violation_from,
        sums=dict.fromkeys(("loss", "align", *FIXED_LOSSES, "ratio", "grad_norm"), 0.0),
        ratio_sums={},
        step_log=[],
        resumed=part,
    )
    if part:
        ep.sums, ep.ratio_sums = part["sums"], part["ratio_sums"]
        ep.step_log, ep.steps = part["step_log"], part["steps"]
    if run.train_feats is None:
        ep.images = epoch_images(run, ep)
    return ep


def local_slice(run: Run) -> slice:
    """This process's share of a batch (the whole batch in a single process)."""
    per_rank = run.cfg.batch_size // run.dist.world
    return slice(run.dist.rank * per_rank, (run.dist.rank + 1) * per_rank)


def epoch_images(run: Run, ep: Epoch) -> Any:
    """The images of this process's share of each step of the epoch, from ``ep.start``."""
    cfg, split, local = run.cfg, run.train_split, local_slice(run)
    bs = cfg.batch_size
    steps_imgs = [
        run.caption_to_image[ep.order[i * bs : (i + 1) * bs]].tolist()[local]
        for i in range(run.n_batches)
    ]
    return image_batches(
        split.images,
        steps_imgs,
        seed=ep.seed if split.images.augment else None,
        offset=local.start,
        workers=cfg.workers,
        pin_memory=run.device.type == "cuda",
        start=ep.start,
    )


def end_epoch(run: Run, ep: Epoch) -> dict[str, Any]:
    """Step the schedule, write the epoch's record (means over its steps, the hooks'
    fields, the validation) and put it in the history."""
    state, steps = run.state, ep.steps
    if steps == 0:
        raise DivergedError(f"every step of epoch {ep.epoch} had a non-finite loss", state, 0)
    run.scheduler.step()
    seconds = time.perf_counter() - ep.t0
    rec: dict[str, Any] = {
        "epoch": ep.epoch,
        **{k: v / max(steps, 1) for k, v in ep.sums.items()},
        "keep_ratio": {b: v / max(steps, 1) for b, v in ep.ratio_sums.items()},
        "steps": steps,
        "nonfinite_steps": state.nonfinite_steps,
        "lr": [g["lr"] for g in run.optimizer.param_groups],
        "seconds": seconds,
        "train_pairs_per_second": steps * run.cfg.batch_size / max(seconds, 1e-9),
        "steps_log": ep.step_log,
        **run.hooks.epoch_fields(run, ep),
    }
    if run.val_split is not None:
        rec.update(validate(run, ep))
    state.history.append(rec)
    state.epoch = ep.epoch
    state.train_seconds += seconds
    return rec


def validate(run: Run, ep: Epoch) -> dict[str, Any]:
    """The epoch's validation (``val``, and ``val_dense_source`` when the split has no
    dense captions), under the training protocol: runs that share this training
    (differing in ``eval_dense_source`` only) must share its history too."""
    try:
        val = evaluate_model(
            run.model,
            run.val_split,
            run.device,
            run.cfg,
            dense_source=run.val_protocol,
            feats=run.val_feats,
            controls=False,
        )
    except NonFiniteSimilaritiesError as exc:
        where = {"epoch": ep.epoch, "phase": "validation"}
        reason = f"{exc} at validation of epoch {ep.epoch}"
        raise DivergedError(reason, run.state, ep.steps, where) from None
    fields: dict[str, Any] = {"val": val}
    if run.val_protocol != run.cfg.dense_source:
        fields["val_dense_source"] = run.val_protocol
    return fields


# ------------------------------------------------------------------------- the step


def train_step(run: Run, ep: Epoch, batch: Batch) -> dict[str, Any] | None:
    """One step of SPEC.md's loop: encode the batch, score it with the head, take the
    loss, step the optimiser. Returns the step's ``steps_log`` entry, or ``None`` when a
    non-finite loss or gradient skipped the step."""
    cfg, device = run.cfg, run.device
    img_ids = torch.tensor(batch.imgs, device=device)
    with autocast(cfg.precision, device):
        inputs = step_inputs(run, ep, batch)
        prior = None if batch.prior is None else batch.prior.to(device)
        sims, masks = run.step(*inputs, prior)  # encoders, then the head
        alpha = batch.i / run.n_batches if (cfg.warmup and ep.epoch == 0) else 1.0
        loss = run.criterion(
            sims, masks, img_ids, max_violation=ep.max_violation, warmup_alpha=alpha
        )
        fixed = fixed_alignment_losses(sims.detach(), img_ids, run.seps_cfg.margin)
    norms = backward(run, ep, loss)
    if norms is None:
        skip_step(run, ep, batch, loss)
        return None
    kill_point("train_step")
    run.scaler.step(run.optimizer)
    run.scaler.update()
    return log_step(run, ep, batch, loss, masks, fixed, norms)


def step_inputs(run: Run, ep: Epoch, batch: Batch) -> tuple[Any, ...]:
    """The step's encoder inputs on the device: ``(images, captions, their lengths here,
    all lengths, dense captions, their lengths here, all lengths)`` (dense ``None`` when
    the head uses none). Cached backbone tokens under ``frozen``, else the images and
    word pieces."""
    feats, local = run.train_feats, local_slice(run)
    caps, imgs = batch.caps, batch.imgs
    dense_in = dlens = None
    use_dense = run.seps_cfg.uses_dense
    if feats is not None:
        img_in = feats["img"][imgs[local]]
        lens = feats["cap_lens"][caps]
        cap_in = feats["cap"][caps[local]][:, : int(lens.max())]
        if use_dense and run.dense_of is None:  # none: the sparse caption
            dlens, dense_in = lens, cap_in
        elif use_dense:
            rows = run.dense_of[imgs].tolist()
            dlens = feats["dense_lens"][rows]
            dense_in = feats["dense"][rows[local]][:, : int(dlens.max())]
    else:
        img_in = next(ep.images)  # type: ignore[arg-type]  # the images of imgs[local]
        # Every rank tokenises and augments the whole batch, so that the random draws
        # and the padding match a single process.
        ids, lens = run.train_split.captions.batch(caps, ep.text_rng)
        cap_in = ids[local]
        if use_dense and run.dense_of is None:  # none: the sparse caption
            dlens, dense_in = lens, cap_in
        elif use_dense:
            rows = run.dense_of[imgs].tolist()
            dids, dlens = run.train_split.dense.batch(rows, ep.text_rng)
            dense_in = dids[local]
    dlens_local = None
    if dense_in is not None and dlens is not None:
        dense_in, dlens_local = dense_in.to(run.device), dlens[local].to(run.device)
        dlens = dlens.to(run.device)
    d = run.device
    return (img_in.to(d), cap_in.to(d), lens[local].to(d), lens.to(d), dense_in, dlens_local, dlens)


def backward(run: Run, ep: Epoch, loss: LossOutput) -> tuple[float | None, ...] | None:
    """Backward and clip: ``(ratio_grad_norm, selector_grad_norm, clipped norm)``, or
    ``None`` when the loss or the gradient is not finite (no step may be taken)."""
    run.optimizer.zero_grad(set_to_none=True)
    if not bool(torch.isfinite(loss.total)):
        return None
    ratio_gn = None
    if run.dist.world == 1:
        ratio_gn = ratio_grad_norm(run.seps_cfg.ratio_weight * loss.ratio, run.selector_params)
    run.scaler.scale(loss.total).backward()
    run.scaler.unscale_(run.optimizer)  # no-op unless fp16: norms and clipping see true grads
    selector_gn = grad_norm(run.selector_params)
    run.hooks.on_gradients(run, ep)  # before clipping rescales the gradients
    gn = torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.cfg.grad_clip)
    # A finite loss can still have an overflowing gradient; stepping on it would write
    # NaN into every weight.
    if not bool(torch.isfinite(gn)):
        return None
    return ratio_gn, selector_gn, float(gn)


def skip_step(run: Run, ep: Epoch, batch: Batch, loss: LossOutput) -> None:
    """Count a non-finite step and skip it (``on_nonfinite="skip"``) or end the run."""
    state = run.state
    if run.scaler.is_enabled() and math.isfinite(float(loss.total.detach())):
        run.scaler.update()  # fp16 overflow: lower the loss scale for the next step
    state.nonfinite_steps += 1
    if state.first_nonfinite is None:
        state.first_nonfinite = {"epoch": ep.epoch, "step": batch.i}
    run.optimizer.zero_grad(set_to_none=True)
    if run.cfg.on_nonfinite == "stop":
        reason = "non-finite loss or gradient (on_nonfinite=stop)"
        raise DivergedError(reason, state, ep.steps)


def log_step(
    run: Run,
    ep: Epoch,
    batch: Batch,
    loss: LossOutput,
    masks: Any,
    fixed: dict[str, float],
    norms: tuple[float | None, ...],
) -> dict[str, Any]:
    """Add a taken step to the epoch: its ``steps_log`` entry and the running sums."""
    ratio_gn, selector_gn, gn = norms
    ep.steps += 1
    kr = {b: float(r.detach()) for b, r in keep_ratios(masks).items()}
    logged = {
        "step": batch.i,
        "loss": loss.total.item(),
        "align": loss.align.item(),
        **fixed,
        "ratio": float(loss.ratio.detach()),
        "ratio_parts": {k: float(v.detach()) for k, v in loss.ratio_parts.items()},
        "keep_ratio": kr,
        "selector_grad_norm": selector_gn,
        "ratio_grad_norm": ratio_gn,
    }
    ep.step_log.append(logged)
    ep.sums["loss"] += logged["loss"]
    for k in ("align", *FIXED_LOSSES):
        ep.sums[k] += logged[k]
    ep.sums["ratio"] += logged["ratio"]
    ep.sums["grad_norm"] += gn  # type: ignore[operator]
    for b, r in kr.items():
        ep.ratio_sums[b] = ep.ratio_sums.get(b, 0.0) + r
    return logged
