"""Alignment and ratio losses (SPEC.md "Alignment loss", row 7 and the ratio findings).

- :func:`triplet_loss`: the hinge triplet of VSE++/SCAN used by both forms, summed.
- :func:`distance_weighted_triplet`: the official repository's second loss option,
  a triplet with distance-weighted negative sampling (Wu et al., ICCV 2017).
- :func:`infonce_loss`: a multi-positive InfoNCE / cross-entropy over the batch's
  similarity matrix (the seeds' alternative to the triplet).
- :func:`alignment_loss`: dispatch on ``SEPSConfig.align_loss``.
- :func:`ratio_loss`: the ratio constraint on the decision matrices in the
  ``unified`` (code), ``separate`` (paper text) and ``eq7`` (paper equation 7) forms,
  each with the ``mse`` (paper), ``l1`` or ``ce`` criterion (:func:`ratio_penalty`).
- :class:`SEPSLoss`: ``L = L_align + ratio_weight * L_ratio`` with the parts kept apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

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
    positive = _positives(n, img_ids, sims.device)
    cost_s = cost_s.masked_fill(positive, 0)
    cost_im = cost_im.masked_fill(positive, 0)
    if max_violation:
        return cost_s.amax(dim=1).sum() + cost_im.amax(dim=0).sum()
    return cost_s.sum() + cost_im.sum()


def _positives(n: int, img_ids: Tensor | None, device: torch.device) -> Tensor:
    """``(B, B)`` bool: pairs i, j whose images are the same (the diagonal at least)."""
    if img_ids is None:
        return torch.eye(n, dtype=torch.bool, device=device)
    if img_ids.shape != (n,):
        raise ValueError(f"img_ids: expected shape ({n},), got {tuple(img_ids.shape)}")
    return img_ids.view(n, 1) == img_ids.view(1, n)


#: Distance clamp and sampling cut-off of the official distance-weighted triplet
#: (``cut_off = 0.5``; ``nonzero_loss_cutoff = 1.7`` on Flickr30K, 1.9 on COCO).
DW_MIN_DISTANCE = 0.5
DW_MAX_DISTANCE = 1.7


def _dw_direction(
    sims: Tensor,
    positive: Tensor,
    margin: float,
    dim: int,
    generator: torch.Generator | None,
) -> Tensor:
    """One direction of :func:`distance_weighted_triplet`: anchors are the rows."""
    with torch.no_grad():
        # Distance of unit vectors with cosine s; sims above 1 (SEPS sums two
        # branches) have no real distance and, as in the official code, are never drawn.
        dist = torch.sqrt(2.0 - 2.0 * sims.float()).clamp(min=DW_MIN_DISTANCE)
        # log of 1 / q(d), q the density of distances on the unit sphere in R^dim.
        log_w = (2.0 - dim) * dist.log() - ((dim - 3.0) / 2.0) * (1.0 - 0.25 * dist * dist).log()
        eligible = (~positive) & torch.isfinite(log_w) & (dist < DW_MAX_DISTANCE)
        log_w = log_w.masked_fill(~eligible, float("-inf"))
        anchor, pos = positive.nonzero(as_tuple=True)
        has_neg = eligible[anchor].any(dim=1)
        anchor, pos = anchor[has_neg], pos[has_neg]
        neg = anchor
        if anchor.numel():
            probs = torch.softmax(log_w[anchor], dim=1)
            neg = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    if anchor.numel() == 0:
        return sims.sum() * 0.0
    return (margin + sims[anchor, neg] - sims[anchor, pos]).clamp(min=0).sum()


def distance_weighted_triplet(
    sims: Tensor,
    img_ids: Tensor | None = None,
    margin: float = 0.2,
    dim: int = 512,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Triplet loss with distance-weighted negative sampling, summed (the official
    repository's ``loss_type='trip'``; "Sampling Matters", Wu et al. 2017).

    For every positive (anchor, positive) pair of the batch, in both directions
    (image anchors over the rows of ``sims``, caption anchors over its columns), one
    negative ``n`` is drawn with probability ``~ 1/q(d)`` where ``d = sqrt(2 - 2 s)``
    clamped below at 0.5, ``q`` the density of distances between random points of
    the unit sphere in ``R^dim`` (``dim`` = the embedding size), restricted to
    negatives with ``d < 1.7``; the loss is ``sum [a + s_an - s_ap]_+``.

    Decisions where the official code is silent or fragile: anchors with no eligible
    negative are skipped (the official code's ``multinomial`` raises and the whole
    direction's loss becomes 0); the weights are normalised with a softmax over the
    eligible negatives (the same distribution, without underflow). Draws come from
    ``generator`` (the global RNG by default: seeded per epoch by the trainer).

    sims: ``(B, B)``; img_ids: ``(B,)`` or ``None`` (only the diagonal is positive).
    """
    if sims.dim() != 2 or sims.shape[0] != sims.shape[1]:
        raise ValueError(f"sims: expected a square (B, B) matrix, got {tuple(sims.shape)}")
    positive = _positives(sims.shape[0], img_ids, sims.device)
    return _dw_direction(sims, positive, margin, dim, generator) + _dw_direction(
        sims.t(), positive.t(), margin, dim, generator
    )


def infonce_loss(sims: Tensor, img_ids: Tensor | None = None, temperature: float = 0.05) -> Tensor:
    """Multi-positive InfoNCE over the batch's similarity matrix, summed over anchors.

    Image ``i`` (row) against all captions: ``-log(sum_{j in P(i)} e^{s_ij/t} /
    sum_j e^{s_ij/t})`` where ``P(i)`` are the captions of the same image (``img_ids``);
    caption ``j`` (column) against all images likewise. Summing over the positives
    inside the log lets several captions per image be correct at once, the case the
    seeds (``000_*``) say cross-entropy cannot handle. Summed over the 2B anchors,
    like :func:`triplet_loss`, so ``ratio_weight`` keeps its relative size.

    sims: ``(B, B)``; img_ids: ``(B,)`` or ``None``; temperature ``t > 0``.
    """
    if sims.dim() != 2 or sims.shape[0] != sims.shape[1]:
        raise ValueError(f"sims: expected a square (B, B) matrix, got {tuple(sims.shape)}")
    positive = _positives(sims.shape[0], img_ids, sims.device)
    logits = sims / temperature
    neg_inf = torch.finfo(logits.dtype).min
    pos_logits = logits.masked_fill(~positive, neg_inf)
    i2t = torch.logsumexp(logits, dim=1) - torch.logsumexp(pos_logits, dim=1)
    t2i = torch.logsumexp(logits, dim=0) - torch.logsumexp(pos_logits, dim=0)
    return i2t.sum() + t2i.sum()


def alignment_loss(
    sims: Tensor,
    img_ids: Tensor | None,
    config: SEPSConfig,
    *,
    max_violation: bool = False,
) -> Tensor:
    """The alignment loss ``config.align_loss`` names (summed over the batch).

    ``triplet``: the official schedule, summed over all negatives or the hardest
    one as ``max_violation`` says (the trainer sets it from epoch
    ``max_violation_from`` on); ``triplet_sum`` / ``triplet_hardest``: one of the two
    for the whole run; ``distance_weighted``: :func:`distance_weighted_triplet`;
    ``infonce``: :func:`infonce_loss`.
    """
    kind = config.align_loss
    if kind == "triplet":
        return triplet_loss(sims, img_ids, config.margin, max_violation)
    if kind in ("triplet_sum", "triplet_hardest"):
        return triplet_loss(sims, img_ids, config.margin, kind == "triplet_hardest")
    if kind == "distance_weighted":
        return distance_weighted_triplet(sims, img_ids, config.margin, config.embed_size)
    if kind == "infonce":
        return infonce_loss(sims, img_ids, config.infonce_temperature)
    raise ValueError(
        f"config field 'align_loss': invalid value {kind!r}; "
        f"allowed: {', '.join(CHOICES['align_loss'])}"
    )


def ratio_bin_centres(upper: float, bins: int) -> Tensor:
    """Centres of ``bins`` equal classes of the keep ratio on ``[0, upper]``."""
    width = upper / bins
    return (torch.arange(bins, dtype=torch.float64) + 0.5) * width


def ratio_target_bin(target: float, upper: float, bins: int) -> int:
    """The class of ``target``: ``floor(target / width)``, clamped to the bins.

    A target on a boundary belongs to the class above it (``0.5`` with 10 bins is
    class 5, ``[0.5, 0.6)``), so the CE optimum is that class's centre, not the
    target itself: one of the discretisation effects the loss study measures.
    """
    width = upper / bins
    return min(max(math.floor(round(target / width, 9)), 0), bins - 1)


def ratio_penalty(
    value: Tensor,
    target: float,
    criterion: str = "mse",
    upper: float = 1.0,
    bins: int = 10,
    temperature: float = 0.1,
) -> Tensor:
    """Penalty of a keep ratio ``value`` (a scalar) against ``target``.

    - ``mse`` (paper): ``(value - target)^2``
    - ``l1``: ``|value - target|``
    - ``ce``: the ratio as a ``bins``-class classification (the seeds' ``000_*``
      "0-10%, 10-20%, ... 90-100%"): class logits
      ``-|value - c_b| / (temperature * width)`` over the class centres ``c_b`` of
      ``[0, upper]`` (a soft nearest-class classifier), cross-entropy against the
      class of ``target`` (:func:`ratio_target_bin`). Small ``temperature`` makes it
      a staircase: flat inside a class, steep across class boundaries.

    ``upper`` is the largest value the ratio can take (1 for one mask, 2 for the
    ``unified`` sum of two masks).
    """
    if criterion == "mse":
        return (value - target) ** 2
    if criterion == "l1":
        return (value - target).abs()
    if criterion == "ce":
        width = upper / bins
        centres = ratio_bin_centres(upper, bins).to(value)
        logits = -(value - centres).abs() / (temperature * width)
        cls = ratio_target_bin(target, upper, bins)
        return torch.logsumexp(logits, dim=0) - logits[cls]
    raise ValueError(
        f"config field 'ratio_criterion': invalid value {criterion!r}; "
        f"allowed: {', '.join(CHOICES['ratio_criterion'])}"
    )


def keep_ratios(masks: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``mean(D)`` of every branch's decision matrix (a differentiable scalar each)."""
    return {b: m.mean() for b, m in masks.items()}


def ratio_loss_parts(
    masks: Mapping[str, Tensor],
    target: float,
    form: str = "unified",
    lambda_sparse: float = 1.0,
    lambda_dense: float = 1.0,
    criterion: str = "mse",
    bins: int = 10,
    temperature: float = 0.1,
) -> dict[str, Tensor]:
    """The terms of :func:`ratio_loss`: ``{"sparse": l1 p(mean D_s), "dense": ...}`` for
    ``separate``, ``{"joint": ...}`` for ``unified`` and ``eq7``, ``{}`` for ``off``
    (``p`` = :func:`ratio_penalty`). Logged per step by the trainer."""
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
    if form == "off":
        return {}
    ratios = keep_ratios(masks)
    lam = {"sparse": lambda_sparse, "dense": lambda_dense}

    def penalty(value: Tensor, upper: float) -> Tensor:
        return ratio_penalty(value, target, criterion, upper, bins, temperature)

    if form == "unified":
        total = sum(ratios.values())
        return {"joint": penalty(total, float(len(ratios)))}  # type: ignore[arg-type]
    if form == "separate":
        return {b: lam[b] * penalty(r, 1.0) for b, r in ratios.items()}
    weighted = sum(lam[b] * r for b, r in ratios.items())
    upper = sum(lam[b] for b in ratios)
    return {"joint": penalty(weighted, upper if upper > 0 else 1.0)}  # type: ignore[arg-type]


def ratio_loss(
    masks: Mapping[str, Tensor],
    target: float,
    form: str = "unified",
    lambda_sparse: float = 1.0,
    lambda_dense: float = 1.0,
    criterion: str = "mse",
    bins: int = 10,
    temperature: float = 0.1,
) -> Tensor:
    """Ratio constraint on the decision matrices (SPEC.md row 7 and findings).

    masks: branch name (``sparse``/``dense``) -> D ``(B_v, B_t, N)``.

    - ``unified`` (code):   ``(mean(D_s + D_d) - rho)^2``
    - ``separate`` (paper text): ``l1 (mean(D_s) - rho)^2 + l2 (mean(D_d) - rho)^2``
    - ``eq7`` (paper eq. 7): ``(rho - l1 mean(D_s) - l2 mean(D_d))^2``
    - ``off``: 0

    ``criterion`` replaces the square by :func:`ratio_penalty` (``mse`` is the square
    above; ``l1``; ``ce`` with ``bins`` classes on the range the ratio can take:
    ``[0, number of masks]`` for ``unified``, ``[0, 1]`` per mask for ``separate``,
    ``[0, l1 + l2]`` for ``eq7``).

    A branch that the configuration does not run contributes no term. Under a
    top-K decision ``mean(D) = K/N`` exactly, so every form is a constant with
    zero gradient (finding "The ratio loss is a constant").
    """
    parts = ratio_loss_parts(
        masks, target, form, lambda_sparse, lambda_dense, criterion, bins, temperature
    )
    if not parts:
        return next(iter(masks.values())).new_zeros(())
    return sum(parts.values())  # type: ignore[return-value]


@dataclass
class LossOutput:
    """The parts of the training loss (scalars)."""

    total: Tensor
    align: Tensor
    ratio: Tensor
    ratio_parts: dict[str, Tensor] = field(default_factory=dict)


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
        align = warmup_alpha * alignment_loss(sims, img_ids, cfg, max_violation=max_violation)
        parts = ratio_loss_parts(
            masks,
            cfg.sparse_ratio,
            cfg.ratio_loss,
            cfg.lambda_sparse,
            cfg.lambda_dense,
            cfg.ratio_criterion,
            cfg.ratio_bins,
            cfg.ratio_ce_temperature,
        )
        ratio = sum(parts.values()) if parts else sims.new_zeros(())
        return LossOutput(
            total=align + cfg.ratio_weight * ratio,  # type: ignore[operator]
            align=align,
            ratio=ratio,  # type: ignore[arg-type]
            ratio_parts=parts,
        )


__all__ = [
    "LossOutput",
    "SEPSLoss",
    "alignment_loss",
    "distance_weighted_triplet",
    "infonce_loss",
    "keep_ratios",
    "ratio_bin_centres",
    "ratio_loss",
    "ratio_loss_parts",
    "ratio_penalty",
    "ratio_target_bin",
    "triplet_loss",
]
