"""The training configuration: :class:`TrainConfig`, everything about a run but the head.

Its own module so that the ablation definitions, the runner and the trainer all import it
normally (it needs no model code). Values are checked and coerced on construction
(:func:`coerce_field`), so a YAML profile, a matrix, a checkpoint and the command line
all meet the same rules and the same one-line errors.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from ..core.evaluate import DENSE_SOURCES
from ..data.captions import GRAMMARS
from ..data.noise import MAX_NOISE
from ..data.synth import DEFAULT_DENSE_NOISE
from ..runtime.devices import valid_device_name
from ..runtime.precision import PRECISIONS

__all__ = [
    "DATASETS",
    "KEY_OMITTED_AT_DEFAULT",
    "NONFINITE_POLICIES",
    "PROTOCOLS",
    "TrainConfig",
    "coerce_field",
    "doc",
    "field_kind",
]

PROTOCOLS = ("finetune", "partial", "frozen")
DATASETS = ("synthetic", "f30k", "coco")
#: What training does at a step whose loss is not finite; see ``TrainConfig.on_nonfinite``.
NONFINITE_POLICIES = ("skip", "stop")
#: Which weights the test split evaluates; see ``TrainConfig.eval_checkpoint``.
EVAL_CHECKPOINTS = ("last", "best_val")
#: Fields added after records were first stored: the run key hashes them only when they
#: differ from their default, so records made before they existed keep their keys.
KEY_OMITTED_AT_DEFAULT = (
    "on_nonfinite",
    "kernel",
    "precision",
    "eval_max_words",
    "image_augment",
    "augment_whole_word",
    "workers",
    "keep_optimizer",
    "grammar",
    "pretrain_builds",
    "eval_sim_noise",
    "eval_permute",
    "eval_checkpoint",
)


def doc(
    default: Any,
    help: str | None,
    *,
    choices: tuple[str, ...] | None = None,
    flag: str | None = None,
) -> Any:
    """A field ``default`` that is also a command-line option: ``help`` (None: no help
    text), ``choices``, and ``flag`` when the flag is not ``--<field-name>`` (a flag
    ``--no-X`` on a field that defaults to True turns it off)."""
    meta = {"help": help, "choices": choices, "flag": flag, "cli": True}
    return dataclasses.field(default=default, metadata=meta)


def field_kind(annotation: str) -> tuple[str, bool]:
    """(base type name, optional) of a field annotation such as ``"float | None"``."""
    parts = [p.strip() for p in annotation.split("|")]
    return next(p for p in parts if p != "None"), "None" in parts


def _number(name: str, value: Any, base: str) -> int | float:
    want = "an integer" if base == "int" else "a number"
    if isinstance(value, str):
        # YAML 1.1 reads ``1e-3`` (no dot) as a string: accept numeric strings.
        try:
            value = float(value) if base == "float" else int(value.strip())
        except ValueError:
            raise ValueError(
                f"train config field {name!r}: expected {want}, got the string {value!r}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"train config field {name!r}: expected {want}, got {value!r} ({type(value).__name__})"
        )
    if base == "int":
        if value != int(value):
            raise ValueError(f"train config field {name!r}: expected an integer, got {value!r}")
        return int(value)
    return float(value)


@functools.cache
def _annotations() -> dict[str, str]:
    """Field name -> annotation of :class:`TrainConfig` (read once, not per value)."""
    return {f.name: str(f.type) for f in dataclasses.fields(TrainConfig)}


def coerce_field(name: str, value: Any) -> Any:
    """``value`` as the type of :class:`TrainConfig` field ``name``, or a ``ValueError``
    that names the field, the value and the expected type.

    Numeric strings are accepted where a number is expected (``lr: 1e-3`` in YAML), an
    integral float where an integer is; booleans must be booleans; lists become tuples.
    """
    annotation = _annotations().get(name)
    if annotation is None:
        raise ValueError(f"train config: unknown field {name!r}")
    base, optional = field_kind(annotation)
    if value is None:
        if optional:
            return None
        raise ValueError(f"train config field {name!r}: expected {base}, got null")
    if base in ("int", "float"):
        return _number(name, value, base)
    if base == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"train config field {name!r}: expected true or false, got {value!r}")
        return value
    if base == "str":
        if not isinstance(value, str):
            raise ValueError(
                f"train config field {name!r}: expected a string, got {value!r} "
                f"({type(value).__name__})"
            )
        return value
    if base.startswith("tuple"):
        if not isinstance(value, (list, tuple)):
            raise ValueError(
                f"train config field {name!r}: expected a list of integers, got {value!r}"
            )
        return tuple(_number(name, v, "int") for v in value)
    raise AssertionError(f"unhandled field type {base} of {name}")  # pragma: no cover


@dataclass
class TrainConfig:
    """Everything about a run except the head's switches.

    The defaults are the CPU recipe for the built-in synthetic dataset (tiny random-init
    backbones, 64 px). ``paper``-scale runs set ``backbone``/``text_backbone`` to real
    checkpoints, ``image_size=224`` and the official optimisation values.
    """

    # Fields with a ``help`` are options of ``seps-bench train`` (seps.cli builds the flags
    # from these: name, type, default, choices and help, so no default is written twice).
    dataset: str = doc(
        "synthetic", "synthetic (built in, generated on first use), f30k or coco", choices=DATASETS
    )
    data_path: str | None = doc(
        None,
        "dataset folder in the official layout (f30k/coco), or where the synthetic set is "
        "generated (default data/synth-<n>-s<seed>)",
    )
    image_dir: str | None = doc(None, "image folder (default <data-path>/images)")
    synth_images: int = doc(5000, "size of the synthetic set")
    # None: the run's seed, so that seeds vary the dataset draw as well as the model
    # initialisation and the data order (a confidence interval then covers the data).
    synth_seed: int | None = doc(
        None, "seed of the synthetic dataset draw (default: the run's --seed)"
    )
    dense_noise: float = doc(
        DEFAULT_DENSE_NOISE,
        "MLLM-like noise of the synthetic dense captions: hallucinated share of object "
        "mentions, with omissions and attribute errors scaled to it (0: perfect captions)",
    )
    grammar: str = doc(
        "v1",
        "caption grammar of the synthetic set: v1 (the original) or v2 (distinct, "
        "Flickr-length sparse captions; dense captions with vague positions and sizes)",
        choices=GRAMMARS,
    )
    train_split: str = "train"
    eval_split: str = "test"
    val_split: str = "dev"
    val_images: int = doc(100, "dev images evaluated after every epoch (0: none)")
    skip_bad_images: bool = doc(
        False,
        "drop missing or unreadable images (fully decoded to check) with their captions "
        "instead of stopping; the count is recorded",
    )
    pretrain: str | None = doc(
        None,
        "pretraining recipe whose backbones and tokenizer the run starts from (see "
        "`seps-bench pretrain --help`); built once, cached under data/pretrained",
    )
    pretrain_builds: int = doc(
        1,
        "builds of the pretraining recipe the seeds are spread over: seed s starts from "
        "build s mod N (build 0 is the recipe itself, build b its copy with seeds moved by b)",
    )
    backbone: str = doc(
        "tiny-vit",
        "tiny-vit, tiny-vit-128 (width 128), tiny-swin, hf-tiny-vit, hf-tiny-swin, or a "
        "timm/transformers name",
    )
    backbone_source: str = doc("timm", None, choices=("timm", "hf"))
    pretrained: str | None = doc(None, "'hub' or a local weights path (default random init)")
    image_size: int = doc(64, "square input resolution")
    text_backbone: str = doc(
        "tiny-bert", "tiny-bert, tiny-bert-128 (width 128) or a BERT name/folder"
    )
    tokenizer: str | None = doc(
        None, "tokenizer folder or hub name (default: built offline from the training captions)"
    )
    vocab_size: int = 4000
    # Truncation. The official code cuts nothing before BERT, in training or evaluation
    # (its collate function pads every caption to the longest of the batch); its
    # evaluation then keeps the first ``--max_word`` = 90 token features of every encoded
    # caption and dense caption ([CLS] included, the rest dropped after BERT has read the
    # whole text). Official values: max_words=0, max_dense_words=0, eval_max_words=90.
    max_words: int = doc(
        32,
        "word pieces kept of a sparse caption before the text encoder, [CLS] and [SEP] "
        "included, in training and evaluation (0: no truncation, as the official code)",
    )
    max_dense_words: int = doc(
        160,
        "the same for dense captions (0: no truncation, as the official code)",
    )
    eval_max_words: int = doc(
        0,
        "evaluation only: keep the first N token features of every caption and dense caption "
        "after the text encoder has read it whole (official: 90, its --max_word; 0: keep all)",
    )
    protocol: str = doc(
        "finetune",
        "finetune (all train; backbones at lr x backbone-lr-mult), partial (first "
        "--freeze-layers blocks frozen), frozen (cached backbone features)",
        choices=PROTOCOLS,
    )
    freeze_layers: int = doc(1, "blocks frozen by 'partial'")
    epochs: int = doc(6, "training epochs")
    batch_size: int = doc(64, "pairs per batch")
    lr: float = doc(2e-4, "learning rate of head+projections")
    backbone_lr_mult: float = doc(
        0.1, "backbone lr factor (official 0.1; use 1.0 for random-init backbones)"
    )
    weight_decay: float = 1e-4
    lr_milestones: tuple[int, ...] = (9, 15, 20, 25)
    lr_gamma: float = 0.3
    grad_clip: float = 2.0
    warmup: bool = True
    max_violation_from: int = doc(
        1,
        "first epoch of the hardest-negative triplet (official 1; epochs before it sum over "
        "all negatives)",
    )
    augment: bool = doc(True, "no caption augmentation", flag="--no-augment")
    # The official caption augmentation (``process_caption_bert``) draws once per word of
    # BERT's basic tokenizer and applies the draw to all of the word's pieces.
    augment_whole_word: bool = doc(
        False,
        "caption augmentation decides per whole word, as the official code (default: per "
        "word piece)",
    )
    # The official training transform: RandomResizedCrop(size, scale=(0.6, 1.0), bicubic)
    # of the original image, RandomHorizontalFlip(0.5), ImageNet normalisation; evaluation
    # resizes to size x size (bicubic). See seps.data.augment.
    image_augment: bool = doc(
        False,
        "official training image augmentation: a random resized crop (area 0.6-1, aspect "
        "3/4-4/3, bicubic) of the original image and a horizontal flip at p=0.5; training "
        "images only, never at evaluation, off under the frozen protocol",
    )
    workers: int = doc(
        0,
        "DataLoader worker processes decoding the training images (0: the main process); "
        "the batches are the same for any number",
    )
    max_steps_per_epoch: int | None = doc(None, "cap on steps per epoch")
    dropout: float | None = doc(
        None, "set every dropout probability of both backbones (default: theirs)"
    )
    seed: int = doc(0, "random seed")
    device: str = doc("auto", "auto (CUDA when present), cpu, cuda[:N]")
    dense_source: str = doc(
        "candidate",
        "dense-caption protocol of training and evaluation: candidate (fair: a pair uses "
        "its image's dense caption), query (official; leaks the ground-truth image's "
        "dense caption into every pair of a text), none (the sparse caption stands in), "
        "shuffled (another image's, control)",
        choices=DENSE_SOURCES,
    )
    eval_dense_source: str | None = doc(
        None,
        "evaluate under another dense-caption protocol than the training one (default: the same)",
        choices=DENSE_SOURCES,
    )
    # ``skip``: a step whose loss (or gradient norm) is not finite is skipped and counted,
    # as the official code's zeroed loss would leave the weights (it zeroes NaN losses
    # silently; this suite counts them); the run is recorded as diverged if an entire
    # epoch is skipped or the trained weights are not finite. ``stop``: the first such
    # step ends the run as diverged.
    on_nonfinite: str = doc(
        "skip",
        "a step with a non-finite loss or gradient: skip it and count it (default; the run is "
        "recorded as diverged if a whole epoch is skipped or the weights end non-finite), or "
        "stop the run as diverged",
        choices=NONFINITE_POLICIES,
    )
    # Checked against this machine when training starts (seps.core.kernels.unavailable_reason):
    # the registry lives above this module, so the choices are not repeated here.
    kernel: str = doc(
        "batched",
        "head kernel implementation in training and evaluation: batched (default), loop "
        "(the literal reference; slow), compiled (torch.compile) or triton (fused kernels; "
        "CUDA, or the slow CPU interpreter with TRITON_INTERPRET=1); equal results up to "
        "float rounding",
    )
    precision: str = doc(
        "auto",
        "numeric precision of training: auto (bf16 autocast on CUDA, fp32 on the CPU), fp32, "
        "bf16 or fp16 autocast (fp16 with loss scaling); evaluation runs in fp32",
        choices=PRECISIONS,
    )
    # Controls of the controls matrix (seps.train.controls, docs/controls.md): test-split
    # evaluation only (never the per-epoch validation), so that runs differing only in
    # them share one training (seps.runs.runner.EVAL_ONLY_FIELDS).
    eval_sim_noise: float = doc(
        0.0,
        "planted effect: add i.i.d. Gaussian noise of this std to the test similarity matrix "
        "before ranking (a private generator seeded by --seed); a deliberately damaged "
        "variant of known size for the controls matrix (0: off)",
    )
    eval_permute: bool = doc(
        False,
        "negative control: present the test images and captions to the scorer in a seeded "
        "random order and map the similarities back before ranking (metrics must not change)",
    )
    # The official training tests model_best.pth, the epoch with the best validation rSum;
    # `last` (default) tests the last epoch. The best weights are kept either way, so runs
    # differing only here share one training (seps.runs.runner.EVAL_ONLY_FIELDS).
    eval_checkpoint: str = doc(
        "last",
        "which weights the test split evaluates: last (the last epoch, default) or best_val "
        "(the epoch with the best validation rSum, the first on ties, as the official "
        "model_best.pth but chosen on the validation images, never the test split; needs a "
        "validation split)",
        choices=EVAL_CHECKPOINTS,
    )
    eval_text_shard: int = 512
    eval_image_shard: int = 128
    out_dir: str = doc("runs/default", "run folder (checkpoints, result.json)", flag="--out")
    cache_dir: str | None = None
    progress: bool = doc(True, "no progress bars", flag="--no-progress")
    keep_optimizer: bool = doc(
        False,
        "keep the optimizer and scheduler state in the checkpoint of a completed run (by "
        "default it is dropped once the last epoch is done; an unfinished run always keeps it)",
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, coerce_field(f.name, getattr(self, f.name)))
        checks = [
            ("dataset", self.dataset in DATASETS, f"one of {', '.join(DATASETS)}"),
            ("protocol", self.protocol in PROTOCOLS, f"one of {', '.join(PROTOCOLS)}"),
            ("dense_source", self.dense_source in DENSE_SOURCES, ", ".join(DENSE_SOURCES)),
            ("eval_checkpoint", self.eval_checkpoint in EVAL_CHECKPOINTS, "last, best_val"),
            (
                "eval_dense_source",
                self.eval_dense_source in (None, *DENSE_SOURCES),
                ", ".join(DENSE_SOURCES),
            ),
            ("dense_noise", 0.0 <= self.dense_noise <= MAX_NOISE, f"in [0, {MAX_NOISE}]"),
            ("pretrain_builds", self.pretrain_builds >= 1, "a count >= 1"),
            ("grammar", self.grammar in GRAMMARS, ", ".join(GRAMMARS)),
            ("on_nonfinite", self.on_nonfinite in NONFINITE_POLICIES, "skip, stop"),
            ("precision", self.precision in PRECISIONS, ", ".join(PRECISIONS)),
            (
                "device",
                valid_device_name(self.device),
                "auto, cpu, cuda or cuda:N",
            ),
            ("epochs", self.epochs >= 1, ">= 1"),
            ("batch_size", self.batch_size >= 2, ">= 2 (the triplet loss needs negatives)"),
            ("lr", self.lr > 0, "> 0"),
            ("freeze_layers", self.freeze_layers >= 0, ">= 0"),
            ("max_words", self.max_words == 0 or self.max_words >= 3, "0 (no truncation) or >= 3"),
            (
                "max_dense_words",
                self.max_dense_words == 0 or self.max_dense_words >= 3,
                "0 (no truncation) or >= 3",
            ),
            (
                "eval_max_words",
                self.eval_max_words == 0 or self.eval_max_words >= 2,
                "0 (keep all) or >= 2",
            ),
            ("workers", self.workers >= 0, ">= 0"),
            ("eval_sim_noise", 0.0 <= self.eval_sim_noise < float("inf"), ">= 0 and finite"),
            ("val_images", self.val_images >= 0, ">= 0"),
            ("image_size", self.image_size >= 8, ">= 8"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(
                    f"train config field {name!r}: invalid value {getattr(self, name)!r}; "
                    f"allowed: {allowed}"
                )
        if self.eval_checkpoint == "best_val" and self.val_split == self.eval_split:
            raise ValueError(
                f"train config field 'eval_checkpoint': best_val picks the epoch on the "
                f"validation split, which here is the evaluated split ({self.eval_split!r}); "
                "set val_split and eval_split apart"
            )
        if self.dataset != "synthetic" and not self.data_path:
            raise ValueError(
                f"train config field 'data_path': required for dataset {self.dataset!r} "
                "(a folder in the official layout, see README)"
            )

    @property
    def data_seed(self) -> int:
        """The seed of the synthetic dataset draw: ``synth_seed``, or the run's seed."""
        return self.seed if self.synth_seed is None else self.synth_seed

    @property
    def pretrain_build(self) -> str | None:
        """The pretraining build this run starts from (None without ``pretrain``): the
        recipe name for build 0, ``"<recipe>@<b>"`` for build ``b = seed mod
        pretrain_builds`` (`seps.train.pretrain.recipe` reads it). Runs of one seed share
        a build, so a paired comparison is made within a build, and seeds spread over the
        builds put the build-to-build spread into the interval."""
        if self.pretrain is None:
            return None
        return build_name(self.pretrain, self.seed % self.pretrain_builds)

    @property
    def eval_protocol(self) -> str:
        """The dense-caption protocol of evaluation (``eval_dense_source`` or the training one)."""
        return self.eval_dense_source or self.dense_source

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def build_name(recipe: str, build: int) -> str:
    """The name of build ``build`` of pretraining recipe ``recipe``: the name itself for
    build 0, else ``"<recipe>@<build>"``."""
    return recipe if build == 0 else f"{recipe}@{build}"
