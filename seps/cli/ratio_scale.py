"""``seps-bench ratio-scale``: ratio-loss weights that equalise the criteria's initial
gradient norms (:mod:`seps.runs.ratio_scale`), for the loss study's ``normalised`` runs."""

from __future__ import annotations

import argparse
import dataclasses
import os

import pandas as pd

from ..core.config import CHOICES
from ..experiments.definitions import RunSpec, load_profile, resolve
from ..runs.ratio_scale import (
    CRITERIA,
    FORMS,
    REFERENCE,
    normalised_weights,
    probe_grid,
    table,
    yaml_runs,
)
from .options import add_results_option


def _csv(allowed: tuple[str, ...], option: str):
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(v.strip() for v in text.split(",") if v.strip())
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(
                f"{option}: invalid value {text!r}; expected a comma-separated list of: "
                f"{', '.join(allowed)}"
            )
        return values

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        default="standard",
        help="profile whose model, data and pretraining are probed (default standard)",
    )
    p.add_argument(
        "--preset", default="paper", help="head preset (default paper, the loss study's)"
    )
    p.add_argument(
        "--decision",
        default="gumbel_per_patch",
        choices=CHOICES["decision"],
        help="selection decision (default gumbel_per_patch: under topk and gumbel_topk the "
        "ratio loss sends no gradient, so there is nothing to normalise)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the run seed whose model, data and batches are probed (default 0)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=8,
        help="training batches averaged, the weights as initialised (default 8)",
    )
    p.add_argument(
        "--criteria",
        type=_csv(CRITERIA, "--criteria"),
        default=CRITERIA,
        help=f"criteria to probe (default all: {','.join(CRITERIA)}); {REFERENCE}, the "
        "reference, is always probed",
    )
    p.add_argument(
        "--forms",
        type=_csv(FORMS, "--forms"),
        default=FORMS,
        help=f"ratio-loss forms (default all: {','.join(FORMS)})",
    )
    p.add_argument(
        "--align-loss",
        default="triplet",
        choices=CHOICES["align_loss"],
        help="alignment loss of the probed runs (default triplet, the loss study's ratio "
        "grid's; the ratio loss's own gradient on the score predictor does not depend on "
        "it, but the printed runs carry it)",
    )
    add_results_option(
        p,
        "whose feature cache (DIR/_work/feature_cache) a profile with frozen backbones "
        "reuses, as its runs do; a cache entry is added only when the features are not "
        "cached yet, e.g. from code of another version",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from ..experiments.definition_checks import seeds_problem

    profile = load_profile(args.profile)
    # Before anything is built or computed: values no probe can use.
    problem = seeds_problem([args.seed])
    if problem:
        raise ValueError(f"--seed: invalid value {args.seed}: {problem}")
    if args.steps < 1:
        raise ValueError(f"--steps: invalid value {args.steps}; expected a positive integer")
    if os.path.lexists(args.results) and not os.path.isdir(args.results):
        raise ValueError(f"--results: {args.results}: not a folder; expected a result store")
    spec = RunSpec(
        id="probe",
        preset=args.preset,
        set={"decision": args.decision, "align_loss": args.align_loss},
    )
    cfg, head = resolve(spec, profile, args.seed)
    if cfg.protocol == "frozen":  # the runner's cache, so the probe sees the run's features
        from ..runs.runner import feature_cache_dir

        cfg = dataclasses.replace(cfg, cache_dir=str(feature_cache_dir(args.results)))
    criteria = (REFERENCE, *[c for c in args.criteria if c != REFERENCE])
    probes = probe_grid(
        cfg,
        head,
        criteria=criteria,
        forms=args.forms,
        steps=args.steps,
        progress=not args.no_progress,
    )
    weights = normalised_weights(probes)
    print(
        f"Initial ratio-loss gradient norm on the score predictor: preset {args.preset}, "
        f"decision {args.decision}, alignment loss {args.align_loss}, profile {args.profile}, "
        f"seed {args.seed}, mean over the "
        f"first {args.steps} batches at lr 1e-12 (weights as initialised)\n"
    )
    print(pd.DataFrame(table(probes, weights)).to_markdown(index=False, floatfmt=".4g"))
    print(f"\nloss-study runs with the weights normalised to {REFERENCE}'s norm:\n")
    print(yaml_runs(weights, head, args.preset))
    return 0
