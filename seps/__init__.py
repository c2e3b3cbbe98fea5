"""seps-bench: SEPS (Semantic-Enhanced Patch Slimming), every paper-vs-code difference a switch.

Entry points:

- :func:`seps.config.get_config` / :data:`seps.config.PRESETS`: the switches;
- :class:`seps.head.SEPSHead`: the batched cross-modal head;
- :mod:`seps.losses`: triplet and ratio losses;
- :func:`seps.official.load_crossnet`: official weights.
"""

from .float_path import apply_requested

# Before anything imports torch: SEPS_FLOAT_PATH pins the CPU kernels (seps.float_path),
# which the libraries read once, when they first compute.
apply_requested()

from .config import PRESETS, SEPSConfig, get_config  # noqa: E402
from .head import SEPSHead  # noqa: E402
from .losses import SEPSLoss, ratio_loss, triplet_loss  # noqa: E402

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
