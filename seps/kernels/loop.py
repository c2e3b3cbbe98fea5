"""Compatibility alias: the per-text loop moved to :mod:`seps.reference`.

Kept only so that ``from seps.kernels.loop import _select, _hrpa`` (in
:mod:`seps.bench`) keeps working; new code imports :mod:`seps.reference`
(``select_for_text``, ``hrpa_for_text``, ``loop_forward``). Remove this module once
nothing imports it.
"""

from __future__ import annotations

from ..reference import hrpa_for_text as _hrpa
from ..reference import loop_forward
from ..reference import select_for_text as _select

__all__ = ["_hrpa", "_select", "loop_forward"]
