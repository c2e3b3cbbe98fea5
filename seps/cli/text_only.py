"""The ``seps-bench text-only`` subcommand: what the dense captions alone give away.

Dispatches to :func:`seps.data.lexical.text_only_recalls`, and prints beside it the headroom
of `seps.data.oracle` (chance; the scene oracle on a synthetic set); this file holds only the
command line (arguments, output format, exit status).
"""

from __future__ import annotations

import argparse
import json

from tabulate import tabulate


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-path",
        required=True,
        help="dataset folder in the official layout ({split}_caps.txt, {split}_ids.txt, "
        "<name>_{split}.jsonl, id_mapping.json); images are not read, so a folder without "
        "them (e.g. ../shared/data/f30k) is fine; for the built-in synthetic data, render a "
        "folder first with 'seps-bench data synth'",
    )
    p.add_argument("--split", default="test", help="split to score, whole (default: test)")
    p.add_argument(
        "--name",
        help="dataset name in <name>_{split}.jsonl (default: the only such file in the folder)",
    )
    p.add_argument(
        "--matcher",
        choices=("bm25", "synthetic-vocabulary"),
        default="bm25",
        help="bm25: generic Okapi BM25 of each caption against every image's dense caption, "
        "any dataset (default); synthetic-vocabulary: the matcher that knows the built-in "
        "synthetic benchmark's vocabulary (the text-only rSum of the reports)",
    )
    p.add_argument("--k1", type=float, default=1.2, help="BM25 k1, > 0 (default 1.2)")
    p.add_argument("--b", type=float, default=0.75, help="BM25 b, in [0, 1] (default 0.75)")
    p.add_argument("--json", action="store_true", help="print the recalls as one JSON object")


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `--help` must not load torch (seps.cli.registry).
    from ..data.layout import load_split
    from ..data.lexical import text_only_recalls
    from ..data.oracle import (
        chance_recalls,
        expected_recalls,
        oracle_scores,
        scenes_of,
        synthetic_seed,
    )
    from ..report.records import RECALLS

    out = text_only_recalls(
        args.data_path, args.split, name=args.name, matcher=args.matcher, k1=args.k1, b=args.b
    )
    # The headroom beside it: chance, and on a synthetic set the scene-reading oracle.
    data = load_split(args.data_path, args.split, args.name, dense_per="image", check_images=False)
    seed = synthetic_seed(args.data_path)
    chance = chance_recalls(data.n_images, data.n_captions // data.n_images)
    oracle = None
    if seed is not None:
        scores = oracle_scores(data.captions, scenes_of(seed, data.image_ids))
        oracle = expected_recalls(scores, data.n_captions // data.n_images)
    if args.json:
        bounds = {"chance_rsum": chance["rsum"], "oracle_rsum": oracle and oracle["rsum"]}
        print(json.dumps({**out, **bounds}, sort_keys=True))
        return 0
    print(
        f"{args.matcher} text-only matcher, {args.data_path} split {args.split!r}, "
        f"{int(out['images'])} images (no pixels read)"
    )
    rows = [(args.matcher, out), ("chance", chance)]
    if oracle is not None:
        rows.append(("scene oracle", oracle))
    columns = (*RECALLS, "rsum")
    cells = [[name, *(f"{r[k]:.1f}" for k in columns)] for name, r in rows]
    print(tabulate(cells, headers=("", *columns), tablefmt="github", disable_numparse=True))
    print(
        "chance: expected recalls of a random ranking; scene oracle (synthetic sets only): "
        "reads each image's true scene, scores the images consistent with the caption by "
        "1 / their number, expected recalls over random order within ties (seps.data.oracle)"
    )
    return 0
