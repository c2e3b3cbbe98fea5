"""The training loop: one run from config to ``result.json``.

One run = :class:`TrainConfig` (data, encoders, protocol, optimisation) + a
:class:`seps.config.SEPSConfig` (the head's switches). :func:`train` follows the
official ``train.py``:

- AdamW with the official parameter groups (backbones at ``lr * backbone_lr_mult``),
  weight decay 1e-4, MultiStepLR (milestones, gamma 0.3);
- hinge triplet summed over all negatives in epoch 0 with the loss scaled by the
  warm-up factor ``i / n_batches``, hardest negative from ``max_violation_from`` on;
- gradient clipping at 2.0; bf16 autocast on CUDA (``precision``, see :mod:`seps.precision`);
- a non-finite loss skips the step and is counted (the official code zeroes it silently).

Protocols: ``finetune`` (everything trains), ``partial`` (the embeddings and the first
``freeze_layers`` blocks of both backbones are frozen), ``frozen`` (backbone tokens are
computed once, cached on disk with safetensors, and only the projections and the head
train; caption augmentation is then off because the cached text states are fixed).

Determinism: every epoch re-seeds Python, NumPy and PyTorch from ``(seed, epoch)`` and
draws its caption order from that seed, so a run resumed from its epoch checkpoint
reproduces the uninterrupted run exactly on the CPU.

Here: :func:`train` (and :func:`finish`, the final evaluation and ``result.json``), the
run state kept in checkpoints (:class:`RunState`) and :class:`DivergedError` (both in
:mod:`.run_state`), and the
per-step gradient norms of the score predictor (:func:`grad_norm`, :func:`ratio_grad_norm`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ..config import SEPSConfig
from ..controls import oracle_prior, oracle_table, step_generator
from ..evaluate import shuffle_permutation
from ..faults import kill_point
from ..interrupts import check_stop, stop_on_sigterm, stop_requested
from ..kernels import IMPLEMENTATIONS, unavailable_reason
from ..losses import SEPSLoss, keep_ratios, triplet_loss
from ..model import (
    ModelSpec,
    SEPSModel,
    build_model,
    count_parameters,
    freeze_first_layers,
    parameter_groups,
)
from ..precision import autocast, grad_scaler
from ..store import atomic_write_json
from ..text import tokenizer_hash
from ..train_config import TrainConfig
from .checkpoints import (
    NO_VALIDATION,
    best_val_epoch,
    check_same_tokenizer,
    drop_training_state,
    load_run_checkpoint,
    restore_training_state,
    run_checkpoint_path,
    save_best_weights,
    save_run_checkpoint,
    select_eval_weights,
)
from .data import (
    build_tokenizer,
    image_batches,
    load,
    prepare_data_dir,
    split_tensors,
    validation_split,
)
from .distributed import TrainStep, barrier, data_parallel, init_distributed
from .evaluation import NonFiniteSimilaritiesError, evaluate_model, split_bounds
from .features import cached_features
from .movement import MovementMeter
from .pretrain import load_projections, pretrained_parts
from .run_environment import (
    environment,
    epoch_seed,
    peak_memory,
    rng_states,
    seed_everything,
    set_rng_states,
)
from .run_state import DivergedError, RunState


def build_run(cfg: TrainConfig, seps_cfg: SEPSConfig) -> tuple[Any, ModelSpec, Path]:
    data_dir = prepare_data_dir(cfg)
    pretrained, text_backbone = cfg.pretrained, cfg.text_backbone
    if cfg.pretrain is not None:
        pretrained, text_backbone, tokenizer = pretrained_parts(cfg)
    else:
        tokenizer = build_tokenizer(cfg, data_dir)
    spec = ModelSpec(
        backbone=cfg.backbone,
        backbone_source=cfg.backbone_source,
        pretrained=pretrained,
        image_size=cfg.image_size,
        text_backbone=text_backbone,
        vocab_size=len(tokenizer),
    )
    return tokenizer, spec, data_dir


def _log_line(rec: dict[str, Any]) -> str:
    parts = [f"epoch {rec['epoch']}", f"loss {rec['loss']:.3f}"]
    if "val" in rec:
        parts.append(f"val rsum {rec['val']['rsum']:.1f}")
    parts.append(f"{rec['seconds']:.0f}s")
    return " | ".join(parts)


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


def dense_rows(cfg: TrainConfig, n_images: int) -> Tensor | None:
    """Which dense caption goes with each training image under ``cfg.dense_source``:
    ``rows[j]`` is the dense caption used for image ``j``'s row of the batch, or
    ``None`` under ``none`` (the sparse caption stands in).

    ``query`` and ``candidate`` both fetch image ``j``'s own caption, ``rows = arange``;
    they differ in which pairs use it (``query``: every pair of the text whose image is
    ``j``; ``candidate``: every pair of image ``j``, see :class:`TrainStep`).
    ``shuffled``: a fixed derangement of the training images seeded by the run's seed,
    so a text always comes with the same other image's description.
    """
    if cfg.dense_source == "none":
        return None
    if cfg.dense_source == "shuffled":
        return shuffle_permutation(n_images, cfg.seed)
    return torch.arange(n_images)


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

    A checkpoint (``checkpoint_last.safetensors``, with the tokenizer inside) is written
    atomically after every epoch; ``resume=True`` continues from it. Once the last epoch
    is done the checkpoint loses its optimizer and scheduler state, unless
    ``keep_optimizer`` (resuming a completed run then only evaluates again).
    ``stop_after_epoch`` ends the call after that epoch (used to test resuming).
    A SIGTERM (:mod:`seps.interrupts`) ends it after the current step, with the
    checkpoint written at that step (``resume=True`` continues from it, to the same
    bits), by raising :class:`seps.interrupts.StopRequested`.

    Raises:
        DivergedError: training could not go on (see ``TrainConfig.on_nonfinite``);
            ``result.json`` then says ``"status": "diverged"`` with where and how often.
    """
    try:
        with stop_on_sigterm():
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


def check_kernel(name: str, device: torch.device) -> None:
    """Refuse, before any work, a ``kernel`` that is unknown or cannot run on ``device``."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(
            f"train config field 'kernel': invalid value {name!r}; allowed: "
            f"{', '.join(IMPLEMENTATIONS)}"
        )
    reason = unavailable_reason(name, str(device))
    if reason is not None:
        raise ValueError(f"train config field 'kernel': {name!r} cannot run here: {reason}")


def _train(
    cfg: TrainConfig, seps_cfg: SEPSConfig, *, resume: bool, stop_after_epoch: int | None
) -> dict[str, Any]:
    dist, device = init_distributed(cfg.device)
    check_kernel(cfg.kernel, device)
    out = Path(cfg.out_dir)
    if dist.main:
        out.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg.seed)
    if dist.main:  # rank 0 generates the data and trains the tokenizer first
        build_run(cfg, seps_cfg)
    barrier(dist)
    tokenizer, spec, data_dir = build_run(cfg, seps_cfg)
    model = build_model(spec, seps_cfg)
    model.cross_net.impl = cfg.kernel
    if cfg.pretrain is not None:
        load_projections(model, Path(spec.pretrained).parent)  # type: ignore[arg-type]
    model = model.to(device)
    if cfg.dropout is not None:
        set_dropout(model, cfg.dropout)
    seps_cfg = model.config
    if cfg.protocol == "partial":
        freeze_first_layers(model.img_enc.visual_encoder, cfg.freeze_layers)
        freeze_first_layers(model.txt_enc.bert, cfg.freeze_layers)
    if cfg.protocol == "frozen":
        for m in (model.img_enc.visual_encoder, model.txt_enc.bert):
            m.requires_grad_(False)
    train_split = split_tensors(cfg, load(cfg, data_dir, cfg.train_split), tokenizer, train=True)
    # Selection controls (seps.controls): the oracle's scene table of the training split.
    oracle = None
    if seps_cfg.selection == "oracle":
        if cfg.dataset != "synthetic":
            raise ValueError(
                f"config field 'selection': oracle needs the synthetic dataset (scene "
                f"layouts), got dataset {cfg.dataset!r}"
            )
        d = train_split.data
        oracle = oracle_table(d.data_dir, d.image_ids, d.captions, seps_cfg.num_patches)
    val_split, val_protocol = None, cfg.dense_source
    if dist.main:  # rank 0 validates
        val_split, val_protocol = validation_split(cfg, data_dir, tokenizer, seps_cfg.uses_dense)
        if val_split is None and cfg.eval_checkpoint == "best_val":  # before any training
            raise ValueError(NO_VALIDATION)
    train_feats = val_feats = None
    if cfg.protocol == "frozen":
        if dist.main:
            cached_features(model, train_split, cfg, spec, device, "train")
        barrier(dist)
        train_feats = cached_features(model, train_split, cfg, spec, device, "train")
        if val_split is not None:
            val_feats = cached_features(model, val_split, cfg, spec, device, "val")
    if cfg.batch_size % dist.world:
        raise ValueError(
            f"train config field 'batch_size': {cfg.batch_size} is not divisible by the "
            f"{dist.world} processes"
        )
    per_image = cfg.dense_source == "candidate"
    step = data_parallel(
        TrainStep(model, dist.world, cfg.protocol == "frozen", per_image_dense=per_image),
        dist,
        device,
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
    ckpt_path = run_checkpoint_path(out)
    partial: dict[str, Any] | None = None  # the epoch a SIGTERM stopped, to go on with
    # Reads weights and gradients only: the run's bits are the same without it.
    meter = MovementMeter(model, out, resume and ckpt_path.exists(), save=dist.main)
    if resume and ckpt_path.exists():
        ckpt = load_run_checkpoint(ckpt_path)
        check_same_tokenizer(ckpt, tokenizer, ckpt_path)
        model.load_state_dict(ckpt["model"])
        restore_training_state(ckpt, optimizer, scheduler, cfg.epochs, ckpt_path)
        state = RunState(**ckpt["state"])
        partial = ckpt.get("partial_epoch")

    def save(partial_epoch: dict[str, Any] | None = None) -> None:
        nonlocal ckpt_path
        extra = {} if partial_epoch is None else {"partial_epoch": partial_epoch}
        save_run_checkpoint(
            ckpt_path,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            state=dataclasses.asdict(state),
            cfg=cfg,
            seps_cfg=seps_cfg,
            spec=spec,
            tokenizer=tokenizer,
            **extra,
        )
        ckpt_path = run_checkpoint_path(out)  # an older .pt is rewritten as .safetensors

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
    dense_of = dense_rows(cfg, train_split.data.n_images)
    # fp16 only (a disabled scaler passes through). Its scale is not checkpointed: a
    # resumed fp16 run restarts from the initial scale.
    scaler = grad_scaler(cfg.precision, device)
    for epoch in range(state.epoch + 1, cfg.epochs):
        t0 = time.perf_counter()
        es = epoch_seed(cfg.seed, epoch)
        seed_everything(es)
        order = torch.randperm(n_caps, generator=torch.Generator().manual_seed(es))
        text_rng = random.Random(es) if cfg.augment and cfg.protocol != "frozen" else None
        part, partial = (partial if partial and partial["epoch"] == epoch else None), None
        start = part["next_step"] if part else 0
        if part:  # this epoch was stopped at step ``start``: go on from there, same bits
            set_rng_states(part["rng"], device)
            if text_rng is not None:
                text_rng.setstate(part["text_rng"])
            t0 -= part["seconds"]
        model.train()
        if cfg.protocol == "frozen":
            model.img_enc.visual_encoder.eval()
            model.txt_enc.bert.eval()
        max_violation = epoch >= cfg.max_violation_from
        sums = dict.fromkeys(("loss", "align", *FIXED_LOSSES, "ratio", "grad_norm"), 0.0)
        ratio_sums: dict[str, float] = {}
        step_log: list[dict[str, Any]] = []
        steps = 0
        if part:
            sums, ratio_sums = part["sums"], part["ratio_sums"]
            step_log, steps = part["step_log"], part["steps"]
            meter.restore_partial(part.get("movement"))
        bar = tqdm(
            range(start, n_batches), desc=f"epoch {epoch}", disable=not cfg.progress, leave=False
        )
        per_rank = cfg.batch_size // dist.world
        local = slice(dist.rank * per_rank, (dist.rank + 1) * per_rank)
        if train_feats is None:
            steps_imgs = [
                c2i[order[i * cfg.batch_size : (i + 1) * cfg.batch_size]].tolist()[local]
                for i in range(n_batches)
            ]
            images = image_batches(
                train_split.images,
                steps_imgs,
                seed=es if train_split.images.augment else None,
                offset=local.start,
                workers=cfg.workers,
                pin_memory=device.type == "cuda",
                start=start,
            )
        for i in bar:
            if stop_requested():  # SIGTERM: keep the steps done, at this step
                if i > start and dist.world == 1:  # (under DDP: the last epoch's checkpoint)
                    save(
                        {
                            "epoch": epoch,
                            "next_step": i,
                            "seconds": time.perf_counter() - t0,
                            "sums": sums,
                            "ratio_sums": ratio_sums,
                            "step_log": step_log,
                            "steps": steps,
                            "rng": rng_states(device),
                            "text_rng": None if text_rng is None else text_rng.getstate(),
                            "movement": meter.partial_state(),
                        }
                    )
                if (i > start and dist.world == 1) or part:  # the checkpoint is at step i
                    check_stop(f"{ckpt_path} at epoch {epoch}, step {i}")
                done = f"{ckpt_path} after epoch {state.epoch}"
                check_stop(done if state.epoch >= 0 else "no checkpoint (no epoch done yet)")
            caps = order[i * cfg.batch_size : (i + 1) * cfg.batch_size].tolist()
            imgs = c2i[caps].tolist()
            img_ids = torch.tensor(imgs, device=device)
            dense_in = dlens_local = dlens = None
            with autocast(cfg.precision, device):
                if train_feats is not None:
                    img_in = train_feats["img"][imgs[local]]
                    lens = train_feats["cap_lens"][caps]
                    cap_in = train_feats["cap"][caps[local]][:, : int(lens.max())]
                    if use_dense and dense_of is None:  # none: the sparse caption
                        dlens, dense_in = lens, cap_in
                    elif use_dense:
                        rows = dense_of[imgs].tolist()
                        dlens = train_feats["dense_lens"][rows]
                        dense_in = train_feats["dense"][rows[local]][:, : int(dlens.max())]
                else:
                    img_in = next(images)  # the images of imgs[local]
                    # Every rank tokenises and augments the whole batch, so that the
                    # random draws and the padding match a single process.
                    ids, lens = train_split.captions.batch(caps, text_rng)
                    cap_in = ids[local]
                    if use_dense and dense_of is None:  # none: the sparse caption
                        dlens, dense_in = lens, cap_in
                    elif use_dense:
                        rows = dense_of[imgs].tolist()
                        dids, dlens = train_split.dense.batch(rows, text_rng)
                        dense_in = dids[local]
                if dense_in is not None and dlens is not None:
                    dense_in, dlens_local = dense_in.to(device), dlens[local].to(device)
                    dlens = dlens.to(device)
                prior = None  # a selection control's (B, B, N) prior
                if seps_cfg.selection == "random":
                    shape = (len(imgs), len(caps), seps_cfg.num_patches)
                    prior = torch.rand(shape, generator=step_generator(cfg.seed, epoch, i))
                elif oracle is not None:
                    prior = oracle_prior(oracle, torch.tensor(imgs), torch.tensor(caps))
                sims, masks = step(
                    img_in.to(device),
                    cap_in.to(device),
                    lens[local].to(device),
                    lens.to(device),
                    dense_in,
                    dlens_local,
                    dlens,
                    None if prior is None else prior.to(device),
                )
                alpha = i / n_batches if (cfg.warmup and epoch == 0) else 1.0
                loss = criterion(
                    sims, masks, img_ids, max_violation=max_violation, warmup_alpha=alpha
                )
                fixed = fixed_alignment_losses(sims.detach(), img_ids, seps_cfg.margin)
            optimizer.zero_grad(set_to_none=True)
            finite = bool(torch.isfinite(loss.total))
            if finite:
                ratio_gn = None
                if dist.world == 1:
                    ratio_gn = ratio_grad_norm(seps_cfg.ratio_weight * loss.ratio, selector_params)
                scaler.scale(loss.total).backward()
                scaler.unscale_(optimizer)  # no-op unless fp16: norms and clipping see true grads
                selector_gn = grad_norm(selector_params)
                shares = meter.step()  # before clipping rescales the gradients
                gn = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                # A finite loss can still have an overflowing gradient; stepping on it
                # would write NaN into every weight.
                finite = bool(torch.isfinite(gn))
            if not finite:
                if scaler.is_enabled() and math.isfinite(float(loss.total.detach())):
                    scaler.update()  # fp16 overflow: lower the loss scale for the next step
                state.nonfinite_steps += 1
                if state.first_nonfinite is None:
                    state.first_nonfinite = {"epoch": epoch, "step": i}
                optimizer.zero_grad(set_to_none=True)
                if cfg.on_nonfinite == "stop":
                    reason = "non-finite loss or gradient (on_nonfinite=stop)"
                    raise DivergedError(reason, state, steps)
                continue
            kill_point("train_step")
            scaler.step(optimizer)
            scaler.update()
            steps += 1
            meter.count(shares)
            kr = {b: float(r.detach()) for b, r in keep_ratios(masks).items()}
            step_log.append(
                {
                    "step": i,
                    "loss": loss.total.item(),
                    "align": loss.align.item(),
                    **fixed,
                    "ratio": float(loss.ratio.detach()),
                    "ratio_parts": {k: float(v.detach()) for k, v in loss.ratio_parts.items()},
                    "keep_ratio": kr,
                    "selector_grad_norm": selector_gn,
                    "ratio_grad_norm": ratio_gn,
                }
            )
            sums["loss"] += step_log[-1]["loss"]
            for k in ("align", *FIXED_LOSSES):
                sums[k] += step_log[-1][k]
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
            **meter.epoch_fields(),
        }
        if val_split is not None:
            # Under the training protocol: runs that share this training (differing in
            # eval_dense_source only) must share its history too.
            try:
                rec["val"] = evaluate_model(
                    model,
                    val_split,
                    device,
                    cfg,
                    dense_source=val_protocol,
                    feats=val_feats,
                    controls=False,
                )
            except NonFiniteSimilaritiesError as exc:
                where = {"epoch": epoch, "phase": "validation"}
                reason = f"{exc} at validation of epoch {epoch}"
                raise DivergedError(reason, state, steps, where) from None
            if val_protocol != cfg.dense_source:  # the split has no dense captions
                rec["val_dense_source"] = val_protocol
        state.history.append(rec)
        state.epoch = epoch
        state.train_seconds += seconds
        if not dist.main:
            barrier(dist)
            continue
        # The best-validation weights, whatever eval_checkpoint says (an evaluation-only
        # choice: runs differing in it share this training). Written before the run
        # checkpoint, so a stop in between re-runs this epoch and writes them again.
        if "val" in rec and best_val_epoch(state.history) == epoch:
            save_best_weights(out, model, epoch, rec["val"]["rsum"])
        save()
        barrier(dist)
        if cfg.progress:
            print(_log_line(rec), flush=True)
        if stop_after_epoch is not None and epoch >= stop_after_epoch:
            return {"interrupted_after_epoch": epoch}

    if not dist.main:
        return {"rank": dist.rank}
    check_stop(f"{ckpt_path} after its last epoch ({state.epoch})")
    if not cfg.keep_optimizer and ckpt_path.exists():  # complete: resuming needs no optimizer
        drop_training_state(ckpt_path)
    return finish(cfg, model, tokenizer, data_dir, device, state, spec, meter)


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
    result = {
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
        "movement": meter.result(state.history) if meter is not None else None,
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
