"""Claims whose switch acts through a learned part that did not train.

Some switches change the model only through a learned part: the paper's scoring adds the
score-aware predictor of eq. (1), ``hrpa="mean_topk"`` the relevance MLP, the dual
aggregation a second aggregation network, the ratio-loss settings a gradient into the
selection's parameters. When that part barely moved from its initialisation, the runs
compare a random network with its absence, not the claim: the scorecard then says *not
testable here: the module did not train* instead of a verdict.

*The rule* (:func:`frozen_reason`): a comparison is judged this way when

1. every setting in which the two sides differ (:func:`~seps.report.compare.config_difference`)
   is a switch of :data:`SWITCH_MODULES` (one unlisted difference, e.g. the dense
   caption, and the switch may act otherwise: no automatic verdict);
2. every record of both sides carries ``movement`` (:mod:`seps.train.movement`;
   records made before it existed keep their verdicts exactly);
3. at least one of the parts those switches act through is in some record's
   ``movement``, and in every record where it is, its ``relative_change`` is below
   :data:`MOVED` (1%): none of them trained in any seed, on either side.

A part may exist on one side only (the code preset has no score predictor): it is judged
where it exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..io.formatting import is_missing
from .compare import RATIO_LOSS_FIELDS, Comparison, config_difference

__all__ = ["MOVED", "SWITCH_MODULES", "frozen_reason", "with_frozen"]

#: Below this ``relative_change`` a part did not train (``seps.train.movement.MOVED``).
MOVED = 0.01
#: Setting (as :func:`~seps.report.compare.config_difference` names it) -> the learned
#: parts (``movement`` groups of :mod:`seps.train.movement`) it acts through. Only
#: switches whose claimed effect is that of a learned part are listed.
SWITCH_MODULES: dict[str, tuple[str, ...]] = {
    # The paper's scoring is (1-2b) s_p + b (...): its claim is the learned predictor s_p.
    "head.scoring": ("score_predictor",),
    # Shared vs dual networks, or none: the networks are the whole difference.
    "head.aggregation": ("aggregation",),
    # mean vs mean + relevance MLP over the top-k maxima.
    "head.hrpa": ("relevance_mlp",),
    # The straight-through decisions exist to send a gradient to the selection's scores.
    "head.decision": ("score_predictor", "keep_bias"),
    # The ratio loss reaches the model only through the selection's parameters.
    **{f"head.{f}": ("score_predictor", "keep_bias") for f in RATIO_LOSS_FIELDS},
}


def _modules(first: Mapping[str, Any], other: Mapping[str, Any]) -> set[str] | None:
    """The parts the settings in which two records differ act through; ``None`` when
    some differing setting is not in :data:`SWITCH_MODULES` (or none differs)."""
    diff = config_difference(first, other)
    if not diff or any(k not in SWITCH_MODULES for k in diff):
        return None
    return {m for k in diff for m in SWITCH_MODULES[k]}


def _changes(records: Iterable[Mapping[str, Any]], modules: set[str]) -> dict[str, float] | None:
    """The largest ``relative_change`` of each of ``modules`` over ``records`` (parts no
    record has are left out); ``None`` when a record has no ``movement`` or a present
    part has no measured change."""
    top: dict[str, float] = {}
    for rec in records:
        moved = rec.get("movement")
        if is_missing(moved) or not isinstance(moved, Mapping):
            return None
        for m in sorted(modules & set(moved)):
            r = (moved[m] or {}).get("relative_change")
            if r is None or is_missing(r):
                return None
            top[m] = max(top.get(m, 0.0), float(r))
    return top


def frozen_reason(sides: Sequence[Mapping[Any, Mapping[str, Any]]]) -> str | None:
    """Why the comparison of ``sides`` tests a part that did not train (the module
    docstring's rule), or ``None``.

    ``sides``: ``{seed: record or record row}`` per side, the reference (baseline, or a
    grid's claimed cell) first; each other side is compared with it on their first
    common seed (every seed shares the configuration)."""
    if len(sides) < 2 or not sides[0]:
        return None
    modules: set[str] = set()
    for other in sides[1:]:
        common = sorted(s for s in other if s in sides[0])
        if not common:
            return None
        found = _modules(sides[0][common[0]], other[common[0]])
        if found is None:
            return None
        modules |= found
    top = _changes((r for side in sides for r in side.values()), modules)
    if not top or any(v >= MOVED for v in top.values()):
        return None
    parts = ", ".join(f"{m} at most {100.0 * v:.2g}%" for m, v in sorted(top.items()))
    return f"the module did not train (relative parameter change: {parts})"


def with_frozen(
    c: Comparison,
    reference: Mapping[Any, Mapping[str, Any]],
    variant: Mapping[Any, Mapping[str, Any]],
) -> Comparison:
    """``c`` (the comparison of ``variant`` with ``reference``, each ``{seed: record}``)
    with ``frozen`` set to :func:`frozen_reason` when the rule applies: the reports then
    show it as no test and leave it out of their correction family, as the scorecard
    does. Bit-identical and text-blind comparisons keep their own labels."""
    if c.identical or c.blind:
        return c
    reason = frozen_reason([reference, variant])
    return replace(c, frozen=reason) if reason else c
