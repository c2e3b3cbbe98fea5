"""seps-bench: SEPS (Semantic-Enhanced Patch Slimming), every paper-vs-code difference a switch.

Entry points:

- :func:`seps.core.config.get_config` / :data:`seps.core.config.PRESETS`: the switches;
- :class:`seps.core.head.SEPSHead`: the batched cross-modal head;
- :mod:`seps.core.losses`: triplet and ratio losses;
- :func:`seps.train.official.load_crossnet`: official weights;
- :func:`seps.runtime.float_path.pin`: pin the CPU float path (call it before importing torch) to
  compute what the command line computes.

Importing ``seps`` imports nothing heavy and changes nothing (not even ``os.environ``):
the names below load their modules, and torch with them, on first use (PEP 562), so that
``seps-bench --help`` answers without loading torch, and the command line can pin the
float path before torch loads (:mod:`seps.runtime.float_path`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> the module that defines it, imported on first access.
_LAZY = {
    "PRESETS": "seps.core.config",
    "SEPSConfig": "seps.core.config",
    "get_config": "seps.core.config",
    "SEPSHead": "seps.core.head",
    "SEPSLoss": "seps.core.losses",
    "ratio_loss": "seps.core.losses",
    "triplet_loss": "seps.core.losses",
}

__all__ = [
    "PRESETS",
    "SEPSConfig",
    "SEPSHead",
    "SEPSLoss",
    "__version__",
    "get_config",
    "ratio_loss",
    "triplet_loss",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ below loads them
    from .core.config import PRESETS, SEPSConfig, get_config
    from .core.head import SEPSHead
    from .core.losses import SEPSLoss, ratio_loss, triplet_loss


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'seps' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
