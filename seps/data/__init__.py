"""Data: the built-in synthetic dataset and the loader of the official layout.

Modules: :mod:`seps.data.layout` (the loader), :mod:`seps.data.synth` (the generator),
which draws its images with :mod:`seps.data.scenes` and its captions with
:mod:`seps.data.captions`, the MLLM-like noise of the dense captions coming from
:mod:`seps.data.noise`.

Public names are imported lazily so that the generator does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seps.data.layout import DataError, SplitData, decode_image, load_split
    from seps.data.synth import generate_synthetic

__all__ = ["DataError", "SplitData", "decode_image", "generate_synthetic", "load_split"]

_WHERE = {
    "DataError": "seps.data.layout",
    "SplitData": "seps.data.layout",
    "load_split": "seps.data.layout",
    "decode_image": "seps.data.layout",
    "generate_synthetic": "seps.data.synth",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'seps.data' has no attribute {name!r}")
