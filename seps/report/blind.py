"""Runs whose scores cannot depend on the query text: their recalls are not retrieval.

A head with ``dense_fusion="dense_only"`` aligns the image with the dense caption alone
and never reads the sparse caption (SPEC.md, "dense fusion"). Under the fair
``candidate`` evaluation protocol the dense caption that enters ``sims[v, t]`` is the one
of the image ``v`` being scored (:mod:`seps.core.evaluate`), so ``sims[v, t]`` is a function of
``v`` only: every text ranks the gallery in the same order.

Such a matrix is all ties. :mod:`seps.core.metrics` counts a tie in favour of the positive
(the official code's ``argsort`` leaves tied order arbitrary), so image-to-text recall
comes out at 100% and text-to-image at chance: a number made by the tie rule, not by
retrieval. A report therefore shows these runs as *text-blind*: their recalls are printed
as stored, but they are compared with nothing (not a test, not in the correction family)
and the scorecard calls a claim that rests on them not testable here.

*Decision* (SPEC.md does not say): the rule is read off the record's configuration
(:func:`text_blind_reason`), not guessed from the metrics, so it never depends on how
ties happened to fall. Under ``query`` the same head scores each text with its own
ground-truth image's dense caption (text-dependent, but that is the leak), under
``shuffled`` with another image's (text-dependent through the text's image), under
``none`` with the sparse caption itself; none of these is blind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .records import eval_dense_of

__all__ = ["BLIND", "text_blind_reason"]

#: The word the report's tables use for a text-blind run.
BLIND = "text-blind"


def text_blind_reason(rec: Mapping[str, Any]) -> str | None:
    """Why a run's test scores cannot depend on the text, or ``None`` when they can.

    ``rec``: a run record or a row of :func:`~seps.report.records.load_results`
    (``head_config``; the evaluation protocol as :func:`~seps.report.records.eval_dense_of`
    reads it)."""
    head = rec.get("head_config") or {}
    if head.get("dense_fusion") == "dense_only" and eval_dense_of(rec) == "candidate":
        return (
            "dense_fusion=dense_only never reads the query text, and under candidate each "
            "image is scored with its own dense caption: every text ranks the gallery alike"
        )
    return None
