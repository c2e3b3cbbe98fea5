"""The benchmark suites run on the command line's CPU float path: pinned here, before the
suites import torch, as ``seps-bench`` pins it first thing (``import seps`` does not)."""

from seps.runtime.float_path import apply_requested

apply_requested()
