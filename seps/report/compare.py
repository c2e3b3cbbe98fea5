"""Paired comparisons of a report, runs that cannot differ, and the one correction family.

Every paired test a report prints (a variant against the matrix's baseline in the results
table, a cell against another in an extra section) is a :class:`Comparison` made by
:func:`compare` from the records of the two sides, keyed by seed. A report corrects all
of its comparisons together (:func:`family_of`, Holm by default): one family per report,
so the verdicts of a report with many variants do not inherit its many chances of a false
positive.

Two kinds of comparison are not tests and stay out of the family:

- fewer than 2 paired seeds (no variance, no p-value);
- *identical* runs: every seed of the variant has the baseline's metrics bit for bit on
  the same seed. A t-test of all-zero differences would print "p = 1.000", which reads
  as weak evidence of no effect; in fact no effect was possible, usually for a reason
  that can be read off the configs (:func:`identical_reason`);
- *text-blind* sides: a side whose scores cannot depend on the text
  (:func:`~seps.report.blind.text_blind_reason`) has recalls set by the tie rule, so
  nothing is measured.

A comparison is identified by the record files on its two sides (:attr:`Comparison.key`),
so the same two sets of records compared in two places of a report (the results table
and a section's table) are one test of the family, not two.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..io.formatting import is_missing
from ..stats.paired import ALPHA, CORRECTIONS, correct, paired_sd, paired_test
from .blind import text_blind_reason
from .records import eval_dense_of

#: Head fields that only parameterise the ratio loss (not the selection itself).
RATIO_LOSS_FIELDS = (
    "ratio_loss",
    "ratio_criterion",
    "ratio_weight",
    "lambda_sparse",
    "lambda_dense",
    "ratio_bins",
    "ratio_ce_temperature",
)
#: Decisions that keep exactly K = ceil(N * rho) patches of every image: the keep ratio
#: is K / N at every step, so any ratio loss of it is a constant without gradient.
FIXED_COUNT_DECISIONS = ("topk", "gumbel_topk")
#: Settings that choose or shape the dense caption (``eval.dense_source``: the
#: evaluation protocol, :func:`~seps.report.records.eval_dense_of`).
DENSE_FIELDS = (
    "train.dense_source",
    "train.eval_dense_source",
    "eval.dense_source",
    "train.max_dense_words",
    "train.dense_noise",
)
#: Settings that act only through training (gradients, optimiser, training data order
#: and noise): with nothing trained, they cannot change a result.
TRAINING_ONLY_FIELDS = (
    *(f"head.{f}" for f in RATIO_LOSS_FIELDS),
    "head.detach_selection",
    "head.align_loss",
    "head.margin",
    "head.infonce_temperature",
    *(
        f"train.{f}"
        for f in (
            "lr",
            "backbone_lr_mult",
            "weight_decay",
            "lr_milestones",
            "lr_gamma",
            "grad_clip",
            "warmup",
            "max_violation_from",
            "augment",
            "dropout",
            "freeze_layers",
            "on_nonfinite",
        )
    ),
)
#: Train-config fields that never change what is measured (where files go, progress
#: output, evaluation shard sizes, the seed: comparisons are on the same seed).
IGNORED_TRAIN_FIELDS = (
    "seed",
    "out_dir",
    "cache_dir",
    "progress",
    "device",
    "eval_text_shard",
    "eval_image_shard",
)


def config_difference(base: Mapping[str, Any], variant: Mapping[str, Any]) -> dict[str, tuple]:
    """``{"head.<field>" | "train.<field>" | "eval.dense_source": (base value, variant
    value)}`` for every setting in which two run records differ, sorted by name."""
    out: dict[str, tuple] = {}
    for prefix, col in (("head", "head_config"), ("train", "train_config")):
        a, b = base.get(col) or {}, variant.get(col) or {}
        for k in sorted(set(a) | set(b)):
            if prefix == "train" and k in IGNORED_TRAIN_FIELDS:
                continue
            if a.get(k) != b.get(k):
                out[f"{prefix}.{k}"] = (a.get(k), b.get(k))
    ea, eb = eval_dense_of(base), eval_dense_of(variant)
    if ea != eb:
        out["eval.dense_source"] = (ea, eb)
    return dict(sorted(out.items()))


def _trains(rec: Mapping[str, Any]) -> bool:
    """False when the record shows that no weight can have changed: no trainable
    parameter, a learning rate of 0 or no training step per epoch."""
    train = rec.get("train_config") or {}
    trainable = rec.get("trainable_parameters")
    return not (
        (not is_missing(trainable) and float(trainable) == 0.0)
        or train.get("lr") == 0
        or train.get("max_steps_per_epoch") == 0
    )


def _straight_through_cut(hb: Mapping[str, Any], hv: Mapping[str, Any]) -> str | None:
    """Why the straight-through gradient of a Gumbel top-K decision reaches nothing, when
    both head configs show it (SPEC.md, decision and ratio loss): the selection runs
    without gradient (``detach_selection``), the ratio loss is off, or it takes the
    ``separate`` form, whose coefficient ``2 (K/N - rho)`` is 0 when the keep count is
    exactly rho N (as at N = 36, rho = 0.5); ``None`` otherwise."""
    both = [(h.get("detach_selection"), h.get("ratio_loss")) for h in (hb, hv)]
    if all(d is True for d, _ in both):
        return "and the selection is detached (detach_selection)"
    if all(r == "off" for _, r in both):
        return "which is off"
    if all(r == "separate" for _, r in both):
        return "zero in its separate form at K = rho N"
    return None


def identical_reason(base: Mapping[str, Any], variant: Mapping[str, Any]) -> str | None:
    """Why a variant whose runs are bit-identical to the baseline's could not differ.

    ``base`` and ``variant`` are run records (or rows of
    :func:`~seps.report.records.load_results`): ``head_config``, ``train_config``,
    optionally ``eval_dense_source`` and ``trainable_parameters``. Every setting in which
    they differ (:func:`config_difference`) must be explained by one of the known reasons,
    else the answer is ``None`` (identical for a reason this function does not know):

    - no setting differs: the variant resolves to the baseline's configuration;
    - only ratio-loss settings differ and both select with a fixed-count decision
      (``topk``, ``gumbel_topk``): every step keeps exactly K patches, so the ratio loss
      is a constant with no gradient;
    - the decision differs between ``topk`` and ``gumbel_topk`` (the same hard top-K) and
      the straight-through part reaches nothing (:func:`_straight_through_cut`);
    - only dense-caption settings differ and neither head reads a dense caption
      (``dense_fusion="none"``);
    - only settings that act through training differ and neither run trains anything
      (no trainable parameter, lr 0 or no step);
    - ``train.eval_permute`` (the negative control of :mod:`seps.train.controls`): the same
      pairs scored in another order, mapped back before ranking;
    - ``train.eval_checkpoint`` when both test the same epoch (``evaluated_epoch``): the
      best validation epoch is the last.

    The reasons found are joined with ``"; "`` in that order.
    """
    diff = config_difference(base, variant)
    if not diff:
        return "same configuration as the baseline"
    hb, hv = base.get("head_config") or {}, variant.get("head_config") or {}
    left = set(diff)
    reasons = []
    ratio = {k for k in left if k.removeprefix("head.") in RATIO_LOSS_FIELDS}
    decision = hb.get("decision")
    if ratio and decision == hv.get("decision") and decision in FIXED_COUNT_DECISIONS:
        reasons.append(f"the ratio loss is a constant under decision={decision}")
        left -= ratio
    same_k = {hb.get("decision"), hv.get("decision")} <= set(FIXED_COUNT_DECISIONS)
    if "head.decision" in left and same_k:
        why = _straight_through_cut(hb, hv)
        if why:
            reasons.append(
                "topk and gumbel_topk keep the same patches; the straight-through "
                f"gradient reaches only the ratio loss, {why}"
            )
            left.discard("head.decision")
    dense = left & set(DENSE_FIELDS)
    if dense and hb.get("dense_fusion") == "none" and hv.get("dense_fusion") == "none":
        reasons.append("the head reads no dense caption (dense_fusion=none)")
        left -= dense
    training = left & set(TRAINING_ONLY_FIELDS)
    if training and not _trains(base) and not _trains(variant):
        reasons.append("nothing trains, so a switch that only acts through training cannot act")
        left -= training
    if "train.eval_permute" in left:
        reasons.append("eval_permute scores the same pairs in another order (negative control)")
        left.discard("train.eval_permute")
    # Records name the epoch they tested; rows without it (older loaders) count as equal.
    if "train.eval_checkpoint" in left and base.get("evaluated_epoch") == variant.get(
        "evaluated_epoch"
    ):
        reasons.append("both test the same epoch's weights (the best validation epoch is the last)")
        left.discard("train.eval_checkpoint")
    return "; ".join(reasons) if reasons and not left else None


def _same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN (bitwise-identical floats compare equal)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def same_metrics(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two records' ``metrics`` dicts are identical (same keys, equal values)."""
    return bool(a) and set(a) == set(b) and all(_same(a[k], b[k]) for k in a)


@dataclass(frozen=True)
class Comparison:
    """A paired comparison of ``metric``: variant − reference on their common seeds.

    ``mean``/``half``/``p``/``n``: :func:`seps.stats.paired.paired_test` of the per-seed
    differences; ``key``: the record files of the two sides (one test however many
    places show it); ``identical``/``reason``: every variant seed bit-identical to the
    reference on that seed, and why (:func:`identical_reason`, ``None`` when unknown);
    ``blind``: why one side's scores cannot depend on the text
    (:func:`~seps.report.blind.text_blind_reason`), ``None`` when both can;
    ``blind_side``: ``"variant"`` or ``"reference"``, the side it was found on;
    ``frozen``: why the comparison tests a learned part that did not train
    (:func:`seps.report.frozen.with_frozen` sets it; ``None`` when it trained or the rule
    does not apply).
    """

    mean: float
    half: float
    p: float
    n: int
    key: Hashable
    identical: bool = False
    reason: str | None = None
    blind: str | None = None
    blind_side: str | None = None
    frozen: str | None = None

    @property
    def sd(self) -> float:
        """The standard deviation of the per-seed differences (NaN below 2 seeds)."""
        return paired_sd(self.half, self.n)

    @property
    def testable(self) -> bool:
        """A test of the family: at least 2 paired seeds, a p-value, not identical, both
        sides able to read the text, the part the switch acts through trained."""
        if self.n < 2 or self.identical or math.isnan(self.p):
            return False
        return self.blind is None and self.frozen is None


def compare(
    variant: Mapping[Any, Mapping[str, Any]],
    reference: Mapping[Any, Mapping[str, Any]],
    metric: str = "rsum",
) -> Comparison:
    """The paired comparison of two sides given as ``{seed: record row}`` (rows need
    ``file``, ``metrics`` and ``metric``; the config columns for the identical reason)."""
    common = sorted(s for s in variant if s in reference)
    mean, half, p, n = paired_test(
        [float(variant[s][metric]) - float(reference[s][metric]) for s in common]
    )
    key = frozenset(
        tuple(sorted(str(side[s].get("file")) for s in common)) for side in (variant, reference)
    )
    identical = bool(variant) and all(
        s in reference
        and same_metrics(variant[s].get("metrics") or {}, reference[s].get("metrics") or {})
        for s in variant
    )
    reason = identical_reason(reference[common[0]], variant[common[0]]) if identical else None
    blind, blind_side = None, None
    for name, side in (("variant", variant), ("reference", reference)):
        blind = next((b for r in side.values() if (b := text_blind_reason(r))), None)
        if blind:
            blind_side = name
            break
    return Comparison(mean, half, p, n, key, identical, reason, blind, blind_side)


@dataclass(frozen=True)
class Family:
    """The tests of one report and their corrected p-values (``method`` of
    :data:`seps.stats.paired.CORRECTIONS`)."""

    method: str
    adjusted: Mapping[Hashable, float]

    @property
    def size(self) -> int:
        """Number of distinct paired tests in the family."""
        return len(self.adjusted)

    def p(self, c: Comparison) -> float:
        """The corrected p-value of ``c`` (NaN when ``c`` is not a test)."""
        return self.adjusted.get(c.key, math.nan) if c.testable else math.nan

    def guarantee(self) -> str:
        """What rejecting at corrected p < 0.05 controls, in words."""
        rate = "false discovery rate" if self.method == "bh" else "family-wise error rate"
        return f"{rate} {ALPHA:.0%}"

    def sentence(self) -> str:
        """What the corrected p-values are corrected for, to state in the report."""
        name = CORRECTIONS[self.method]
        tests = "test" if self.size == 1 else "tests"
        text = f"{name}-corrected across the {self.size} paired {tests} of this report"
        return text + (" (none: nothing to correct)" if self.size == 0 else "")


def family_of(comparisons: Iterable[Comparison], method: str = "holm") -> Family:
    """One correction family of every testable comparison (each key once). A key that
    any of ``comparisons`` marks ``frozen`` is left out, even where another place
    computed the same pair without the mark."""
    comparisons = list(comparisons)
    frozen = {c.key for c in comparisons if c.frozen}
    raw: dict[Hashable, float] = {}
    for c in comparisons:
        if c.testable and c.key not in frozen:
            raw.setdefault(c.key, c.p)
    return Family(method, dict(zip(raw, correct(list(raw.values()), method), strict=True)))


__all__ = [
    "DENSE_FIELDS",
    "FIXED_COUNT_DECISIONS",
    "RATIO_LOSS_FIELDS",
    "TRAINING_ONLY_FIELDS",
    "Comparison",
    "Family",
    "compare",
    "config_difference",
    "family_of",
    "identical_reason",
    "same_metrics",
]
