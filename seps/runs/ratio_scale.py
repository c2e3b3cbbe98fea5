"""Ratio-loss weights that put the criteria at equal scale (the loss study, issue 15).

The ratio criteria (``mse``, ``l1``, ``ce``) differ in magnitude as much as in shape: at
the paper's ``ratio_weight`` one may send the score predictor a gradient ten times the
other's, so "MSE beats CE" could be "a larger weight beats a smaller one". The study
therefore also runs each criterion with its weight *normalised*: scaled so that the
gradient the ratio loss alone sends to the score predictor at initialisation equals the
reference criterion's (``mse``, the paper's) in the same form.

:func:`initial_ratio_grad_norms` measures that gradient with the training loop itself
(:func:`seps.train.train`), so it is exactly what the loop logs as ``ratio_grad_norm``:
the first ``steps`` batches of epoch 0 at a learning rate of 1e-12 (the weights do not
move, so every batch sees the model as initialised), no validation, stopped after the
epoch (no evaluation). :func:`normalised_weights` turns the norms into weights. The
command is ``seps-bench ratio-scale``; its weights are copied into
``ablations/matrices/loss-study.yaml`` (the ``.../normalised`` runs), where they count in
each run's key like any other field.

Not part of :func:`seps.versioning.version.code_version` (the training path does not import it):
nothing here produces a stored number; the weights it prints become numbers in a
matrix file.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config import CHOICES, SEPSConfig
from ..train.config import TrainConfig

#: Learning rate of the probe: small enough that no weight moves in float32.
PROBE_LR = 1e-12
#: The criterion the others are scaled to (the paper's).
REFERENCE = "mse"
CRITERIA = tuple(CHOICES["ratio_criterion"])
FORMS = tuple(f for f in CHOICES["ratio_loss"] if f != "off")


@dataclass(frozen=True)
class Probe:
    """Initial ratio-loss gradient norms of one (criterion, form): ``norms`` per batch,
    measured at ``weight`` (the config's ``ratio_weight``)."""

    criterion: str
    form: str
    weight: float
    norms: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.norms)

    @property
    def sd(self) -> float:
        return statistics.stdev(self.norms) if len(self.norms) > 1 else math.nan


def initial_ratio_grad_norms(cfg: TrainConfig, head: SEPSConfig, steps: int = 8) -> list[float]:
    """``||d (ratio_weight * L_ratio) / d theta_selector||`` on the first ``steps``
    training batches of ``cfg`` (its seed, data and order), the weights as initialised.

    Args:
        cfg: the run's training config; ``out_dir`` is ignored (a temporary folder is
            used), ``lr``, ``epochs``, ``max_steps_per_epoch`` and ``val_images`` are
            replaced by the probe's. Under the ``frozen`` protocol the loop trains the
            head on cached backbone features, as the run does: give ``cache_dir`` (the
            runner's is ``<results>/_work/feature_cache``) to reuse the run's cache,
            else the features are computed into the temporary folder.
        head: the run's head; its ratio loss must be on.
        steps: batches to measure (>= 1).

    Returns:
        One norm per batch, as :func:`seps.train.loop.ratio_grad_norm` logs it (0.0 where
        the ratio loss has no gradient, e.g. under a top-K decision).
    """
    from ..train import load_run_checkpoint, run_checkpoint_path, train
    from .prebuild import prebuild_pretraining

    if head.ratio_loss == "off":
        raise ValueError("ratio-scale: the head's 'ratio_loss' is off: nothing to measure")
    if steps < 1:
        raise ValueError(f"ratio-scale: --steps {steps}: expected at least 1")
    with tempfile.TemporaryDirectory(prefix="seps-ratio-scale-") as tmp:
        probe = dataclasses.replace(
            cfg,
            lr=PROBE_LR,
            epochs=1,
            max_steps_per_epoch=steps,
            val_images=0,
            out_dir=tmp,
            progress=False,
        )
        prebuild_pretraining(probe, progress=False)  # never inside the run: seps.runs.prebuild
        train(probe, head, stop_after_epoch=0)  # returns before the evaluation
        state = load_run_checkpoint(run_checkpoint_path(Path(tmp)))["state"]
    log = state["history"][0]["steps_log"]
    return [float(s["ratio_grad_norm"] or 0.0) for s in log]


def probe_grid(
    cfg: TrainConfig,
    head: SEPSConfig,
    *,
    criteria: Sequence[str] = CRITERIA,
    forms: Sequence[str] = FORMS,
    steps: int = 8,
    progress: bool = True,
) -> list[Probe]:
    """:func:`initial_ratio_grad_norms` of ``head`` with each (criterion, form)."""
    from tqdm.auto import tqdm

    cells = [(c, f) for f in forms for c in criteria]
    out = []
    for crit, form in tqdm(cells, desc="ratio-scale", disable=not progress):
        h = head.replace(ratio_criterion=crit, ratio_loss=form)
        out.append(
            Probe(crit, form, h.ratio_weight, tuple(initial_ratio_grad_norms(cfg, h, steps)))
        )
    return out


def normalised_weights(
    probes: Sequence[Probe], reference: str = REFERENCE
) -> dict[tuple[str, str], float]:
    """``(criterion, form) -> weight`` giving each criterion the reference criterion's
    mean initial gradient norm in the same form: ``weight * mean_ref / mean``.

    Raises ``ValueError`` naming the cell when a mean is 0 (the ratio loss sends no
    gradient there, e.g. under a top-K decision: no weight can match it) or when the
    reference criterion was not probed in a form.
    """
    by = {(p.criterion, p.form): p for p in probes}
    out: dict[tuple[str, str], float] = {}
    for (crit, form), p in by.items():
        ref = by.get((reference, form))
        if ref is None:
            raise ValueError(
                f"ratio-scale: no probe of the reference criterion {reference!r} in form {form!r}"
            )
        for q in (p, ref):
            if not q.mean > 0:
                raise ValueError(
                    f"ratio-scale: criterion {q.criterion!r}, form {q.form!r}: the ratio loss "
                    "sends no gradient to the score predictor (a top-K decision?): nothing "
                    "to normalise; use decision=gumbel_per_patch"
                )
        out[crit, form] = p.weight * ref.mean / p.mean
    return out


def yaml_runs(
    weights: dict[tuple[str, str], float], head: SEPSConfig, preset: str, digits: int = 4
) -> str:
    """The loss-study entries of the normalised cells (the reference's own are left
    out: its weight is unchanged), one flow mapping per line."""
    lines = []
    for (crit, form), w in weights.items():
        if crit == REFERENCE:
            continue
        lines.append(
            f"  - {{id: ratio/{head.decision}/{crit}/{form}/normalised, preset: {preset}, "
            f"set: {{align_loss: {head.align_loss}, decision: {head.decision}, "
            f"ratio_criterion: {crit}, ratio_loss: {form}, ratio_weight: {w:.{digits}g}}}}}"
        )
    return "\n".join(lines)


def table(probes: Sequence[Probe], weights: dict[tuple[str, str], float]) -> list[dict[str, Any]]:
    """Rows for printing: criterion, form, weight, mean and SD of the initial norms,
    the normalised weight."""
    return [
        {
            "criterion": p.criterion,
            "form": p.form,
            "ratio_weight": p.weight,
            "initial grad norm (mean)": p.mean,
            "SD over batches": p.sd,
            "normalised weight": weights.get((p.criterion, p.form), math.nan),
        }
        for p in probes
    ]


__all__ = [
    "CRITERIA",
    "FORMS",
    "PROBE_LR",
    "REFERENCE",
    "Probe",
    "initial_ratio_grad_norms",
    "normalised_weights",
    "probe_grid",
    "table",
    "yaml_runs",
]
