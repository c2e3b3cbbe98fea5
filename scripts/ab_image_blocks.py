"""Whole-run A/B (issue 45, docs/kernels.md): one `standard` run with the head's blocks
of images (as committed) against the same run forced to one image per alignment call
(the head before commit e61eb19), alternating, each in its own process and scratch store.

``SEPSHead._block_mode`` is the method the tests force; "none" aligns every unit image by
image. Everything else is the committed code, so the pair isolates the blocks. Each
process pins the float path before torch is imported, as the CLI does, and reuses the
checkout's feature cache (``results/_work/feature_cache``), so no run pays for features.

Usage: ``python scripts/ab_image_blocks.py OUT [RUN] [SEED] [ORDER]`` (defaults: the
`regime` matrix's ``laps``, seed 1, ``before,after,after,before,before,after``). Prints
each run's wall time from its record and the median ratio. A benchmark, not a test; run
it on an idle machine and quote the machine load it prints.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys
import seps.float_path
seps.float_path.pin()
if sys.argv[1] == "before":
    import seps.head
    seps.head.SEPSHead._block_mode = lambda self, n, device: "none"
from seps.cli import main
sys.exit(main(["run", "regime", "--profile", "standard", "--only", sys.argv[3],
               "--seeds", sys.argv[4], "--results", sys.argv[2], "--no-report",
               "--quiet", "--no-progress"]))
"""


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    run = argv[1] if len(argv) > 1 else "laps"
    seed = argv[2] if len(argv) > 2 else "1"
    order = (argv[3] if len(argv) > 3 else "before,after,after,before,before,after").split(",")
    cache = Path("results/_work/feature_cache").resolve()
    env = {**os.environ, "SEPS_FLOAT_PATH": os.environ.get("SEPS_FLOAT_PATH", "portable")}
    walls: dict[str, list[float]] = {"before": [], "after": []}
    for i, mode in enumerate(order, 1):
        store = out / f"{i}-{mode}"
        (store / "_work").mkdir(parents=True, exist_ok=False)
        if cache.is_dir():
            (store / "_work" / "feature_cache").symlink_to(cache)
        loadavg = Path("/proc/loadavg")
        load = " ".join(loadavg.read_text().split()[:3]) if loadavg.exists() else "?"
        code = [sys.executable, "-c", CHILD, mode, str(store), run, seed]
        subprocess.run(code, env=env, check=True)
        record = json.loads(next((store / "regime").glob("*.json")).read_text())
        walls[mode].append(record["wall_seconds"])
        rsum = record["metrics"]["rsum"]
        print(f"{i} {mode}: {record['wall_seconds']:.1f} s, rSum {rsum:.2f}, load {load}")
    before, after = statistics.median(walls["before"]), statistics.median(walls["after"])
    print(f"median before {before:.1f} s, after {after:.1f} s: {before / after:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
