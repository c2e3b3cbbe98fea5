"""Module movement: how far each learned part of a run moved, and how much gradient it got.

A claim whose switch acts through a learned part (the paper's score predictor, the
relevance MLP, the aggregation networks) can only be tested if that part trains. Every
run record therefore stores, per *group* of parameters (:data:`GROUPS`), under
``movement``::

    {group: {"relative_change": r, "change": d, "init_norm": n, "grad_share": s}}

- ``change`` ``d = ||θ_end − θ_init||`` and ``init_norm`` ``n = ||θ_init||``: joint L2
  norms over the group's trainable parameters, in float64; ``θ_init`` is the weights as
  training starts (after any pretrained projections are loaded), ``θ_end`` after the
  last step.
- ``relative_change`` ``r = d / n``; when ``n = 0`` (a parameter initialised at zero,
  e.g. the per-patch keep bias) it is the absolute change ``d`` instead: a move of 0.01
  from 0 counts as 1%, on the unit scale of a logit.
- ``grad_share`` ``s``: the mean over the training steps taken of
  ``||g_group||² / Σ_groups ||g||²``, read after the backward pass and the fp16
  unscaling but *before* gradient clipping. Clipping rescales every gradient by the same
  factor, so the share is the same either way, but reading before clipping keeps the
  norms the loss actually produced. The shares of one step sum to 1; a step whose total
  gradient is 0 or not finite is left out of the mean. ``None`` when no step counted.

A part that a run lacks (no score predictor under ``scoring="code"``), or whose every
parameter is frozen (the backbones under ``protocol="frozen"``), is absent, not 0. Under
``partial`` a backbone group holds its trainable blocks only.

Measuring only reads the weights and gradients (copies, no in-place operation, no random
draw), so a run's metrics are the same bits with or without it.

Resuming: ``θ_init`` is saved beside the checkpoint (:data:`INIT_FILE`, safetensors) when
training starts and read back on resume; the per-epoch shares are kept in the history
(``grad_share``), which the checkpoint already carries. A run resumed from a checkpoint
made before this file existed has ``relative_change``, ``change`` and ``init_norm``
``None``.

The training loop measures through :class:`MovementHook`, one of its hooks
(:mod:`seps.train.hooks`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .hooks import Epoch, Run, TrainHook

#: Parameter groups in record order: name -> what it holds. Names are what the
#: scorecard's switch table (:mod:`seps.report.frozen`) refers to.
GROUPS = {
    "image_backbone": "the vision backbone (img_enc.visual_encoder)",
    "text_backbone": "BERT (txt_enc.bert)",
    "image_projection": "the patch embedding projection (img_enc.vision_proj)",
    "text_projection": "the word embedding projection (txt_enc.fc)",
    "score_predictor": "the score-aware prediction MLP of eq. (1), every branch",
    "keep_bias": "the per-patch keep bias of decision=gumbel_per_patch, every branch",
    "aggregation": "the aggregation network(s) and their shared scale",
    "relevance_mlp": "HRPA's relevance MLP over the top-k maxima",
    "other": "any trainable parameter not in a group above",
}
#: Below this relative change a part is taken not to have trained (the scorecard's rule).
MOVED = 0.01
#: Where ``θ_init`` is kept in the run's output folder, for resuming.
INIT_FILE = "movement_init.safetensors"


def _params(modules: Iterable[nn.Module | nn.Parameter | None]) -> list[nn.Parameter]:
    out: list[nn.Parameter] = []
    for m in modules:
        if isinstance(m, nn.Parameter):
            out.append(m)
        elif m is not None:
            out.extend(m.parameters())
    return out


def module_groups(model: Any) -> dict[str, list[nn.Parameter]]:
    """``{group: [trainable parameters]}`` of a :class:`~seps.model.seps_model.SEPSModel`, in the
    order of :data:`GROUPS`, each parameter in one group; groups without a trainable
    parameter are left out."""
    head = model.cross_net
    selectors = list(head.selectors.values())
    found = {
        "image_backbone": _params([model.img_enc.visual_encoder]),
        "text_backbone": _params([model.txt_enc.bert]),
        "image_projection": _params([model.img_enc.vision_proj]),
        "text_projection": _params([model.txt_enc.fc]),
        "score_predictor": _params(s.score_predictor for s in selectors),
        "keep_bias": _params(s.keep_bias for s in selectors),
        "aggregation": _params([head.aggregation]),
        "relevance_mlp": _params([head.hrpa.relevance_mlp]),
    }
    seen = {id(p) for ps in found.values() for p in ps}
    found["other"] = [p for p in model.parameters() if id(p) not in seen]
    groups = {}
    for name, ps in found.items():
        unique = list({id(p): p for p in ps}.values())  # a shared module counts once
        trainable = [p for p in unique if p.requires_grad]
        if trainable:
            groups[name] = trainable
    return groups


def snapshot(model: nn.Module) -> dict[str, Tensor]:
    """``{parameter name: CPU copy}`` of every trainable parameter: ``θ_init``."""
    return {
        name: p.detach().to("cpu", copy=True).contiguous()
        for name, p in model.named_parameters()
        if p.requires_grad
    }


def save_init(path: Path, init: Mapping[str, Tensor]) -> None:
    """Write ``θ_init`` to ``path`` atomically (a half-written file is never read), with
    the hash of its tensors (:func:`seps.io.derived.save_safetensors`)."""
    from ..io.derived import save_safetensors

    save_safetensors(path, init)


def load_init(path: Path) -> dict[str, Tensor] | None:
    """``θ_init`` saved by :func:`save_init`, or ``None`` when there is no such file.

    Raises:
        ValueError: the file does not match its hash or cannot be read (the run's resume
            check, :func:`seps.train.checkpoints.run_checkpoint_path`, sets such a file
            aside with the checkpoint before training starts, so this is a damage that
            happened since).
    """
    if not path.is_file():
        return None
    from ..io.derived import load_safetensors

    return load_safetensors(path, require_hash=False)


def grad_shares(groups: Mapping[str, Sequence[nn.Parameter]]) -> dict[str, float] | None:
    """``{group: ||g_group||² / Σ ||g||²}`` of the current ``.grad`` (a parameter without
    a gradient counts as 0); ``None`` when the total is 0 or not finite. Reads only:
    call it before clipping."""
    grads = [[p.grad.detach() for p in ps if p.grad is not None] for ps in groups.values()]
    device = next((g[0].device for g in grads if g), torch.device("cpu"))
    zero = torch.zeros((), dtype=torch.float64, device=device)
    sq = [torch.stack([x.double().pow(2).sum() for x in g]).sum() if g else zero for g in grads]
    flat = torch.stack(sq).tolist()  # one device synchronisation for every group
    total = sum(flat)
    if not math.isfinite(total) or total <= 0.0:
        return None
    return {name: v / total for name, v in zip(groups, flat, strict=True)}


def epoch_shares(sums: Mapping[str, float], steps: int) -> dict[str, float] | None:
    """The mean share per group over the ``steps`` counted steps of an epoch."""
    return {k: v / steps for k, v in sums.items()} if steps else None


def _mean_share(history: Sequence[Mapping[str, Any]], group: str) -> float | None:
    """Mean of the per-step share over every epoch, weighting an epoch by its counted
    steps (``grad_share_steps``); ``None`` when an epoch has no share recorded."""
    total, n = 0.0, 0
    for h in history:
        shares, steps = h.get("grad_share"), h.get("grad_share_steps")
        if shares is None or not steps:
            if h.get("steps"):
                return None  # an epoch trained without the measurement: no mean
            continue
        total += shares.get(group, 0.0) * steps
        n += steps
    return total / n if n else None


def movement(
    groups: Mapping[str, Sequence[nn.Parameter]],
    names: Mapping[int, str],
    init: Mapping[str, Tensor] | None,
    history: Sequence[Mapping[str, Any]],
) -> dict[str, dict[str, float | None]]:
    """The record's ``movement`` (see the module docstring): per group of ``groups``
    (:func:`module_groups` of the trained model), its change from ``init``
    (:func:`snapshot`, keyed by the names ``names`` gives each parameter's ``id``;
    ``None``: unknown) and its mean gradient share over ``history``."""
    out: dict[str, dict[str, float | None]] = {}
    for group, ps in groups.items():
        change = init_norm = rel = None
        if init is not None and all(names[id(p)] in init for p in ps):
            d2 = n2 = 0.0
            for p in ps:
                start = init[names[id(p)]].double()
                end = p.detach().to("cpu").double()
                d2 += float((end - start).pow(2).sum())
                n2 += float(start.pow(2).sum())
            change, init_norm = math.sqrt(d2), math.sqrt(n2)
            rel = change / init_norm if init_norm > 0.0 else change
        out[group] = {
            "relative_change": rel,
            "change": change,
            "init_norm": init_norm,
            "grad_share": _mean_share(history, group),
        }
    return out


class MovementMeter:
    """What the training loop holds: the groups, ``θ_init`` and the epoch's share sums.

    ``MovementMeter(model, out_dir, resuming)`` takes ``θ_init`` now and saves it, or,
    when ``resuming``, reads the saved one (the model then still holds its fresh
    initialisation, which need not be the run's). Per step, :meth:`step` (before
    clipping); per epoch, :meth:`epoch_fields` for the history record; at the end,
    :meth:`result` for ``result.json``.
    """

    def __init__(self, model: nn.Module, out_dir: Path, resuming: bool, save: bool) -> None:
        self.model = model
        self.groups = module_groups(model)
        self.names = {id(p): n for n, p in model.named_parameters()}
        path = Path(out_dir) / INIT_FILE
        self.init = load_init(path) if resuming else None
        if not resuming:
            self.init = snapshot(model)
            if save:
                save_init(path, self.init)
        self._sums: dict[str, float] = {}
        self._steps = 0

    def step(self) -> dict[str, float] | None:
        """Read this step's gradient shares (before clipping); :meth:`count` adds them to
        the epoch once the step is taken."""
        return grad_shares(self.groups)

    def count(self, shares: Mapping[str, float] | None) -> None:
        if shares is None:
            return
        for k, v in shares.items():
            self._sums[k] = self._sums.get(k, 0.0) + v
        self._steps += 1

    def partial_state(self) -> dict[str, Any]:
        """The epoch's sums so far, kept in a mid-epoch (SIGTERM) checkpoint so that the
        resumed epoch's ``grad_share`` equals an uninterrupted one's."""
        return {"sums": dict(self._sums), "steps": self._steps}

    def restore_partial(self, state: Mapping[str, Any] | None) -> None:
        """Go on with the sums of :meth:`partial_state` (``None``: a checkpoint without
        them, from before they were kept: the epoch counts only the resumed steps)."""
        if state is not None:
            self._sums, self._steps = dict(state["sums"]), int(state["steps"])

    def epoch_fields(self) -> dict[str, Any]:
        """``grad_share`` (mean per group over the epoch's counted steps) and
        ``grad_share_steps`` for the epoch's history record; resets the sums."""
        fields = {
            "grad_share": epoch_shares(self._sums, self._steps),
            "grad_share_steps": self._steps,
        }
        self._sums, self._steps = {}, 0
        return fields

    def result(self, history: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
        return movement(self.groups, self.names, self.init, history)


class MovementHook(TrainHook):
    """The meter attached to the training loop (:mod:`.hooks`): built when the run starts
    (``meter`` makes it: :class:`MovementMeter`), it reads each step's shares before
    clipping, counts them once the step is taken, adds ``grad_share`` and
    ``grad_share_steps`` to each epoch's record, keeps its sums in a mid-epoch
    checkpoint (``movement``) and fills the result's ``movement``."""

    def __init__(self, meter: Callable[..., Any] = MovementMeter) -> None:
        self.make = meter
        self.meter: Any = None
        self._shares: dict[str, float] | None = None

    def on_run_start(self, run: Run) -> None:
        self.meter = self.make(run.model, run.out, run.resuming, save=run.dist.main)

    def on_epoch_start(self, run: Run, ep: Epoch) -> None:
        if ep.resumed:
            self.meter.restore_partial(ep.resumed.get("movement"))

    def on_gradients(self, run: Run, ep: Epoch) -> None:
        self._shares = self.meter.step()

    def on_step_end(self, run: Run, ep: Epoch, logged: dict[str, Any]) -> None:
        self.meter.count(self._shares)

    def epoch_fields(self, run: Run, ep: Epoch) -> dict[str, Any]:
        return self.meter.epoch_fields()

    def partial_state(self) -> dict[str, Any]:
        return {"movement": self.meter.partial_state()}

    def on_run_end(self, run: Run, result: dict[str, Any] | None) -> None:
        if result is not None:
            result["movement"] = self.meter.result(run.state.history)


__all__ = [
    "GROUPS",
    "INIT_FILE",
    "MOVED",
    "MovementHook",
    "MovementMeter",
    "epoch_shares",
    "grad_shares",
    "load_init",
    "module_groups",
    "movement",
    "save_init",
    "snapshot",
]
