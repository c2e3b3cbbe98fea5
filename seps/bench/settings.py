"""What the latency report measures: :class:`BenchSettings`, full and quick."""

from __future__ import annotations

import dataclasses

from ..core.kernels import IMPLEMENTATIONS
from .workloads import GEOMETRIES

#: Implementations that ``--quick`` leaves out unless named in ``--impls``: at the quick
#: sizes their one-off set-up, not the kernels, would be the run time (measured on this
#: project's 2-core CPU: ``compiled`` added 26 s with a cold compile cache, 6 s warm; the
#: Triton CPU interpreter about 6 s, against about 1 s for loop and batched together).
QUICK_SKIPS: dict[str, str] = {
    "compiled": "not run with --quick: torch.compile's set-up (about 6-26 s on a 2-core CPU) "
    "would dominate the run; name it in --impls to include it",
    "triton": "not run with --quick: compiling the Triton kernels (or running them in the "
    "CPU interpreter, TRITON_INTERPRET=1) would dominate the run; name it in --impls to "
    "include it",
}
QUICK_IMPLS: tuple[str, ...] = tuple(i for i in IMPLEMENTATIONS if i not in QUICK_SKIPS)


@dataclasses.dataclass
class BenchSettings:
    device: str = "cpu"
    quick: bool = False
    impls: tuple[str, ...] = IMPLEMENTATIONS
    geometries: tuple[str, ...] = tuple(GEOMETRIES)
    eval_images: int = 100
    eval_texts: int = 500
    micro_images: int = 16
    micro_texts: int = 128
    train_batches: tuple[int, ...] = (32, 64, 128)
    repeats: int = 3
    #: Text shards of the loop's goal evaluation, each followed by a whole batched call.
    eval_parts: int = 5
    embed_size: int = 512
    #: Flickr30K-size evaluation (images, texts), timed on CUDA (and in quick mode,
    #: at toy size); on the CPU it would take minutes, so the report extrapolates it.
    full_eval: tuple[int, int] = (1000, 5000)
    #: Implementations left out on purpose -> why; the report lists them with the skipped.
    not_run: dict[str, str] = dataclasses.field(default_factory=dict)
    #: CPU peak memory of a training step from a fresh interpreter
    #: (:func:`seps.bench.timing.train_peak_rss_mb`). Each one costs about 3 s of
    #: start-up on a 2-core CPU, 13 of them most of a quick run; quick mode reads the
    #: in-process peak instead, and the report says so.
    fresh_process_peak: bool = True

    @classmethod
    def quick_settings(cls, device: str, impls: tuple[str, ...] | None = None) -> BenchSettings:
        """Tiny sizes that check the pipeline in seconds. Without ``impls``, the
        implementations of :data:`QUICK_SKIPS` are left out (their set-up would dominate)."""
        return cls(
            device=device,
            quick=True,
            impls=QUICK_IMPLS if impls is None else impls,
            not_run={} if impls is not None else dict(QUICK_SKIPS),
            fresh_process_peak=False,
            geometries=("vit224", "swin224"),
            eval_images=4,
            eval_texts=10,
            micro_images=2,
            micro_texts=6,
            train_batches=(4,),
            repeats=1,
            embed_size=64,
            full_eval=(4, 20),
        )
