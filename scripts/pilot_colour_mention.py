#!/usr/bin/env python
"""Pilot for issue 42's calibration: sparse captions that name the colour less often.

Grammar v2 (`seps.data.captions`) names every sparse caption's object with its colour;
33% of the real Flickr30K test captions (`../shared/data/f30k/test_caps.txt`) hold a
colour word. This script renders a `standard`-sized synthetic set (10,000 images at 64
pixels, seed SEED, dense noise 0.12, grammar v2) whose sparse object phrases name the
colour with probability Q instead of always (the generator is patched inside this
process; the committed one is untouched), and prints, for the test and dev splits, the
share of captions that repeat another's text and the text-only rSum of both matchers.
At Q = 1 the set is the committed one byte for byte (the patch then calls the original).

Train `laps` on it with the profile's settings::

    python scripts/pilot_colour_mention.py 0.33 0 /tmp/colour-q0.33-s0
    seps-bench run controls --profile standard --only laps --seeds 0 \\
        --set train.eval_split=dev --data-path /tmp/colour-q0.33-s0 \\
        --results /tmp/colour-results --no-report

Findings (2026-11-30) are in docs/regime.md, "After the recompute".
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import seps.data.captions as captions
from seps.data.synth import generate_synthetic


def _patch(q: float) -> None:
    original = captions._obj_phrase_v2

    def phrase(obj, rng):  # the v2 phrase, its colour kept with probability q
        if q >= 1.0:
            return original(obj, rng)
        words = []
        if rng.random() < captions._V2_SIZE_P:
            opts = captions._SIZE_WORDS[obj.size]
            words.append(opts[rng.integers(len(opts))])
        if rng.random() < q:
            words.append(obj.colour)
        words.append(obj.shape)
        return captions._article(" ".join(words))

    captions._obj_phrase_v2 = phrase


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("q", type=float, help="probability that an object phrase names its colour")
    ap.add_argument("seed", type=int, help="the set's seed (the run seed it stands for)")
    ap.add_argument("out", type=Path, help="new folder for the set (reused when complete)")
    args = ap.parse_args()
    if not 0.0 <= args.q <= 1.0:
        ap.error(f"q: expected a probability in [0, 1], got {args.q}")
    _patch(args.q)
    if not args.out.exists():
        generate_synthetic(
            args.out, n_images=10000, seed=args.seed, image_size=64, dense_noise=0.12, grammar="v2"
        )
    out: dict[str, object] = {"q": args.q, "seed": args.seed}
    for split in ("test", "dev"):
        caps = (args.out / f"{split}_caps.txt").read_text().splitlines()
        count = collections.Counter(caps)
        out[f"{split}_repeated"] = round(sum(count[c] > 1 for c in caps) / len(caps), 4)
        out[f"{split}_words"] = round(float(np.mean([len(c.split()) for c in caps])), 2)
        for matcher in ("bm25", "synthetic-vocabulary"):
            cmd = [sys.executable, "-m", "seps", "text-only", "--data-path", str(args.out)]
            cmd += ["--split", split, "--matcher", matcher, "--json"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            out[f"{split}_{matcher}"] = round(json.loads(done.stdout)["rsum"], 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
