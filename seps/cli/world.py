"""``seps-bench world``: measure a world's card (:mod:`seps.runs.world`) and print it.

A world is a profile; its card says how much its dense captions give away without pixels
(BM25 and the vocabulary matcher), where its image prior points (``s_im``'s object
AUC), and its headroom (oracle, chance, duplicated captions), on the test splits of the
draws its runs train on, beside Flickr30K's. Every report and the scorecard show the
cards of the worlds they read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..experiments.ablation_index import default_root, profile_summaries
from .options import add_results_option, seed_list


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        default="standard",
        help="the world to measure, a profile of profiles.yaml ("
        + ", ".join(profile_summaries())
        + "; default standard)",
    )
    p.add_argument(
        "--seeds", type=seed_list, help="the draws to measure (default: the profile's seeds)"
    )
    add_results_option(p, "to write the card into (<results>/_worlds/<profile>.json)")
    p.add_argument(
        "--ablations",
        help="ablation definitions folder (default: $SEPS_ABLATIONS, else ./ablations when "
        "present, else the definitions shipped with the suite)",
    )


def run(args: argparse.Namespace) -> int:
    from ..experiments.definitions import load_profile
    from ..io.store import check_writable
    from ..report.world_card import world_lines
    from ..runs.world import measure_world

    root = Path(args.ablations) if args.ablations else default_root()
    profile = load_profile(args.profile, root)
    seeds = args.seeds if args.seeds is not None else list(profile.seeds)
    check_writable(Path(args.results), "--results")
    measure_world(profile, seeds, args.results, root)
    print("\n".join(world_lines(args.results, [profile.name], root)))
    return 0
