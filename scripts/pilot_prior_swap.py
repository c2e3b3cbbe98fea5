"""Pilot (docs/regime.md): does the learned selection beat random when the image prior
is not inverted?

SPEC.md step 2's image score ``s_im`` ranks the backdrop first on the synthetic scenes
(object AUC 0.02-0.10). This script runs a ``seps-bench`` command with ``s_im`` swapped,
inside this process only, for one of:

- ``zero``: ``s_im = 0``, a prior that says nothing (the selection follows ``s_st``, and
  for ``paper`` the predictor and ``s_dt``): what scenes with ``s_im`` at chance, route
  (d) of docs/regime.md, could give at best;
- ``negated``: ``-s_im``, a prior that ranks the objects first (AUC about 0.9): what an
  informative prior, as the method assumes of photographs, gives with the same head.

Everything else is SPEC.md's head. The records it writes carry the code version of the
unpatched code, so write them to a scratch results folder, never to ``results/``.

Usage: ``python scripts/pilot_prior_swap.py negated run controls --profile standard
--only laps --seeds 0 --results /tmp/pilot --reports /tmp/pilot-rep --set
train.eval_split=dev``. A diagnostic, not a test.
"""

from __future__ import annotations

import sys

from seps.float_path import apply_requested

apply_requested()  # before torch loads, as the command line does

import torch  # noqa: E402

import seps.head as head  # noqa: E402
from seps.cli import main  # noqa: E402
from seps.selection import image_self_attention  # noqa: E402

PRIORS = ("zero", "negated")


def swapped(prior: str):
    def s_im(x: torch.Tensor) -> torch.Tensor:
        s = image_self_attention(x)
        return torch.zeros_like(s) if prior == "zero" else -s

    return s_im


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in PRIORS:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(PRIORS)}}} SEPS-BENCH-ARGS...")
    if "--results" not in sys.argv:
        sys.exit("pilot_prior_swap: give --results (a scratch folder, never results/)")
    head.image_self_attention = swapped(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
