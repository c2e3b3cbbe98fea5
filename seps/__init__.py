"""seps-bench: SEPS (Semantic-Enhanced Patch Slimming), every paper-vs-code difference a switch.

Entry points:

- :func:`seps.config.get_config` / :data:`seps.config.PRESETS`: the switches;
- :class:`seps.head.SEPSHead`: the batched cross-modal head;
- :mod:`seps.losses`: triplet and ratio losses;
- :func:`seps.official.load_crossnet`: official weights.
"""

from .config import PRESETS, SEPSConfig, get_config
from .head import SEPSHead
from .losses import SEPSLoss, ratio_loss, triplet_loss

__version__ = "0.1.0"

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
