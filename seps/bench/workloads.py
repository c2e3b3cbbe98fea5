"""What the benchmarks run on: geometries, caption lengths, inputs, heads and configs.

Shared by the latency report (:mod:`seps.bench.latency`) and the pytest-benchmark
suites in ``benchmarks/``:

- geometries :data:`GEOMETRIES`: ViT-224 (196 patches + [CLS]), ViT-384 (576 +
  [CLS]), Swin-224 (49), Swin-384 (144); Swin uses rho = 0.8, aggr 0.6 (SPEC.md);
- caption lengths drawn from the real Flickr30K test captions in
  ``../shared/data/f30k/`` when present, else from the stored whitespace-word
  histogram ``seps/data/f30k_lengths.json`` (:func:`caption_lengths`);
- the single-difference variants of the report (:func:`variants`), read from
  ``ablations/differences.yaml``.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.config import SEPSConfig, get_config
from ..core.head import SEPSHead
from ..experiments.definitions import load_differences

#: name -> (spatial patches, has [CLS], sparse_ratio, aggr_ratio)
GEOMETRIES: dict[str, tuple[int, bool, float, float]] = {
    "vit224": (196, True, 0.5, 0.4),
    "vit384": (576, True, 0.5, 0.4),
    "swin224": (49, False, 0.8, 0.6),
    "swin384": (144, False, 0.8, 0.6),
}

#: Findings (``kind: finding`` in ``differences.yaml``) benchmarked as variants besides
#: every documented difference.
VARIANT_FINDINGS: tuple[str, ...] = ("detach_selection",)

#: Row names of the report's variants, by difference id (``code+LABEL``). A difference
#: without a label here is named ``code+ID``.
VARIANT_LABELS: dict[str, str] = {
    "scoring": "paper scoring",
    "dense_fusion": "fused",
    "aggregation": "dual aggregation",
    "hrpa": "mean_topk HRPA",
    "similarity_activation": "no activation",
    "decision": "gumbel_topk",
    "ratio_loss": "separate ratio loss",
    "detach_selection": "attached selection",
}

_DATA_DIRS = (
    Path(__file__).resolve().parents[3] / "shared" / "data" / "f30k",
    Path("../shared/data/f30k"),
)
_HIST = Path(__file__).parent.with_name("data") / "f30k_lengths.json"


def variants(root: Path | None = None) -> dict[str, dict[str, Any]]:
    """The single-difference variants of the report: name -> head switches.

    The code preset with one documented difference of ``ROOT/differences.yaml``
    (:func:`seps.experiments.definitions.load_differences`; ``root`` as there), or one finding of
    :data:`VARIANT_FINDINGS`, set to its paper value, in file order. Training switches
    are left out (they do not change the head); an entry with none of the head's
    switches is no variant. Adding a difference to the YAML adds it here.
    """
    out: dict[str, dict[str, Any]] = {}
    for diff in load_differences(root):
        if diff.kind != "difference" and diff.id not in VARIANT_FINDINGS:
            continue
        switches = diff.values("paper")[0]
        if switches:
            out["code+" + VARIANT_LABELS.get(diff.id, diff.id)] = switches
    return out


def caption_lengths(kind: str, count: int, seed: int = 0) -> tuple[list[int], str]:
    """``count`` word counts of ``kind`` (``sparse``/``dense``) captions and their source.

    Drawn from the real Flickr30K test captions when ``../shared/data/f30k/`` exists
    (whitespace word counts), else from the stored histogram of the same counts.
    """
    rng = random.Random(seed)
    for d in _DATA_DIRS:
        name = "test_caps.txt" if kind == "sparse" else "f30k_test.jsonl"
        path = d / name
        if path.is_file():
            lines = [s for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]
            if kind == "dense":
                lines = [json.loads(s)["text"] for s in lines]
            pool = [len(s.split()) for s in lines]
            return [rng.choice(pool) for _ in range(count)], str(path)
    hist = json.loads(_HIST.read_text(encoding="utf-8"))[kind]
    values = [int(k) for k in hist]
    weights = [hist[k] for k in hist]
    return rng.choices(values, weights=weights, k=count), str(_HIST)


def bench_config(preset: str, geometry: str, embed_size: int = 512, **overrides: Any) -> SEPSConfig:
    n, _, rho, aggr = GEOMETRIES[geometry]
    return get_config(
        preset, embed_size=embed_size, num_patches=n, sparse_ratio=rho, aggr_ratio=aggr, **overrides
    )


def make_inputs(
    geometry: str,
    b_v: int,
    b_t: int,
    *,
    embed_size: int = 512,
    device: str = "cpu",
    seed: int = 0,
    lengths: str = "f30k",
    dense_repeat: int = 1,
) -> list[Tensor]:
    """``[img, cap, cap_lens, long_cap, long_lens]`` for ``b_v`` images and ``b_t`` texts.

    lengths: ``f30k`` (real caption lengths, padded to the batch maximum) or
    ``fixed:S,D`` (every caption S sparse / D dense words, e.g. ``fixed:20,120``).
    dense_repeat: consecutive texts sharing one dense caption (5 in the official
    test loader, SPEC.md "Inputs"; 1 = every text its own dense caption).
    """
    g = torch.Generator().manual_seed(seed)
    n, cls, _, _ = GEOMETRIES[geometry]
    img = torch.randn(b_v, n + int(cls), embed_size, generator=g)
    if lengths.startswith("fixed:"):
        s, d = (int(v) for v in lengths[6:].split(","))
        sl, dl = [s] * b_t, [d] * b_t
    else:
        sl = caption_lengths("sparse", b_t, seed)[0]
        dl = caption_lengths("dense", b_t, seed + 1)[0]
    n_dense = math.ceil(b_t / dense_repeat)
    dl = [dl[i // dense_repeat] for i in range(b_t)]  # one length per dense caption
    cap = torch.randn(b_t, max(sl), embed_size, generator=g)
    long_cap = torch.randn(n_dense, max(dl), embed_size, generator=g)
    long_cap = long_cap.repeat_interleave(dense_repeat, 0)[:b_t]
    out = [img, cap, torch.tensor(sl), long_cap, torch.tensor(dl)]
    return [t.to(device) for t in out]


def make_head(cfg: SEPSConfig, impl: str, device: str = "cpu", seed: int = 0) -> SEPSHead:
    """A head with seeded parameters (the same for every implementation)."""
    torch.manual_seed(seed)
    return SEPSHead(cfg, impl=impl).to(device)
