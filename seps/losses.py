"""Alignment and ratio losses (SPEC.md "Alignment loss", row 7 and the ratio findings).

- :func:`triplet_loss`: the hinge triplet of VSE++/SCAN used by both forms, summed.
- :func:`ratio_loss`: the ratio constraint on the decision matrices in the
  ``unified`` (code), ``separate`` (paper text) and ``eq7`` (paper equation 7) forms.
- :class:`SEPSLoss`: ``L = L_align + ratio_weight * L_ratio`` with the parts kept apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .config import CHOICES, SEPSConfig


def triplet_loss(
    sims: Tensor,
    img_ids: Tensor | None = None,
    margin: float = 0.2,
    max_violation: bool = False,
) -> Tensor:
    """Hinge triplet loss over a batch's ``(B, B)`` similarity matrix, summed.

    ``cost_s[i, j] = [a + sims[i, j] - sims[i, i]]_+`` (negative captions of image i),
    ``cost_im[i, j] = [a + sims[i, j] - sims[j, j]]_+`` (negative images of caption j);
    entries whose ``img_id`` equals the anchor's are positives and cost 0; with
    ``max_violation`` only each row's max of ``cost_s`` and each column's max of
    ``cost_im`` are kept. Returns the sum (not the mean) of what is kept.

    sims: ``(B, B)``, ``sims[i, j]`` = image of pair i vs caption of pair j;
    img_ids: ``(B,)`` image id of each pair (``None``: only the diagonal is positive).
    """
    if sims.dim() != 2 or sims.shape[0] != sims.shape[1]:
        raise ValueError(f"sims: expected a square (B, B) matrix, got {tuple(sims.shape)}")
    n = sims.shape[0]
    diag = sims.diagonal().view(n, 1)
    cost_s = (margin + sims - diag).clamp(min=0)
    cost_im = (margin + sims - diag.t()).clamp(min=0)
    if img_ids is None:
        positive = torch.eye(n, dtype=torch.bool, device=sims.device)
    else:
        if img_ids.shape != (n,):
            raise ValueError(f"img_ids: expected shape ({n},), got {tuple(img_ids.shape)}")
        positive = img_ids.view(n, 1) == img_ids.view(1, n)
    cost_s = cost_s.masked_fill(positive, 0)
    cost_im = cost_im.masked_fill(positive, 0)
    if max_violation:
        return cost_s.amax(dim=1).sum() + cost_im.amax(dim=0).sum()
    return cost_s.sum() + cost_im.sum()


def keep_ratios(masks: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``mean(D)`` of every branch's decision matrix (a differentiable scalar each)."""
    return {b: m.mean() for b, m in masks.items()}


def ratio_loss(
    masks: Mapping[str, Tensor],
    target: float,
    form: str = "unified",
    lambda_sparse: float = 1.0,
    lambda_dense: float = 1.0,
) -> Tensor:
    """Ratio constraint on the decision matrices (SPEC.md row 7 and findings).

    masks: branch name (``sparse``/``dense``) -> D ``(B_v, B_t, N)``.

    - ``unified`` (code):   ``(mean(D_s + D_d) - rho)^2``
    - ``separate`` (paper text): ``l1 (mean(D_s) - rho)^2 + l2 (mean(D_d) - rho)^2``
    - ``eq7`` (paper eq. 7): ``(rho - l1 mean(D_s) - l2 mean(D_d))^2``
    - ``off``: 0

    A branch that the configuration does not run contributes no term. Under a
    top-K decision ``mean(D) = K/N`` exactly, so every form is a constant with
    zero gradient (finding "The ratio loss is a constant").
    """
    if form not in CHOICES["ratio_loss"]:
        raise ValueError(
            f"config field 'ratio_loss': invalid value {form!r}; "
            f"allowed: {', '.join(CHOICES['ratio_loss'])}"
        )
    unknown = set(masks) - {"sparse", "dense"}
    if unknown:
        raise ValueError(f"masks: unknown branch(es) {sorted(unknown)}; expected 'sparse', 'dense'")
    if not masks:
        raise ValueError("masks: expected at least one decision matrix")
    ref = next(iter(masks.values()))
    if form == "off":
        return ref.new_zeros(())
    ratios = keep_ratios(masks)
    lam = {"sparse": lambda_sparse, "dense": lambda_dense}
    if form == "unified":
        total = sum(ratios.values())
        return (total - target) ** 2  # type: ignore[operator]
    if form == "separate":
        return sum(lam[b] * (r - target) ** 2 for b, r in ratios.items())  # type: ignore[return-value]
    weighted = sum(lam[b] * r for b, r in ratios.items())
    return (target - weighted) ** 2  # type: ignore[operator]


@dataclass
class LossOutput:
    """The parts of the training loss (scalars)."""

    total: Tensor
    align: Tensor
    ratio: Tensor


class SEPSLoss(nn.Module):
    """``L = L_align + ratio_weight * L_ratio`` (SPEC.md "Both presets").

    ``forward(sims, masks, img_ids, max_violation=..., warmup_alpha=1.0)``; the
    warm-up factor of the first epoch multiplies the alignment loss only, as in
    the official ``train.py``.
    """

    def __init__(self, config: SEPSConfig) -> None:
        super().__init__()
        self.config = config

    def forward(
        self,
        sims: Tensor,
        masks: Mapping[str, Tensor],
        img_ids: Tensor | None = None,
        *,
        max_violation: bool = False,
        warmup_alpha: float = 1.0,
    ) -> LossOutput:
        cfg = self.config
        align = warmup_alpha * triplet_loss(sims, img_ids, cfg.margin, max_violation)
        ratio = ratio_loss(
            masks, cfg.sparse_ratio, cfg.ratio_loss, cfg.lambda_sparse, cfg.lambda_dense
        )
        return LossOutput(total=align + cfg.ratio_weight * ratio, align=align, ratio=ratio)


__all__ = ["LossOutput", "SEPSLoss", "keep_ratios", "ratio_loss", "triplet_loss"]
