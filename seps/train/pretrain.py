"""Backbones pretrained once on synthetic scenes: where the ``standard`` regime starts.

A paper-scale user fine-tunes backbones pretrained on millions of pairs (ViT on
ImageNet-21k, BERT on books); a run that starts SEPS from random weights on a few
thousand synthetic pairs spends its budget learning to see and read, and every variant
sits near chance. This module gives the CPU suite the same starting point in miniature:
the tiny ViT and tiny BERT are pretrained together once, on a *separate* synthetic draw
(its own seed; no run's test scenes are in it), with a contrastive objective, and every
run that names the recipe (``TrainConfig.pretrain``) starts from the result.

Objective (a choice; the paper pretrains nothing itself): symmetric InfoNCE over a batch
of distinct images, each paired with one of its five sparse captions under a
*fine-grained* late-interaction score ``s(v, t) = mean_w max_n cos(x_n, u_w)`` over the
image's tokens ``x`` and the caption's words ``u`` (in a small projection of the
pretraining only, then dropped), plus the same loss for the first ``dense_share`` of the
batch's images against their dense captions under a pooled score (mean words against
mean tokens; a late interaction over 100-word captions would cost ten times the rest of
the step). A pooled score alone would leave the patch tokens unspecific; SEPS selects
patches, so they must carry local content. AdamW with a linear warm-up and a cosine
decay.

Token subsets (``PretrainRecipe.keep_tokens``, a quarter in ``synth-48``): each step the
sparse late interaction sees only a uniformly random ``ceil(keep_tokens * N)`` of each
image's ``N`` patch tokens, plus ``[CLS]`` (:func:`token_subset`). Why: SEPS keeps about
half of the patches, chosen first by their similarity to the image's mean token (SPEC.md
step 2), and on these scenes (1-4 objects in at most 4 of 9 grid cells) that prior keeps
background. A backbone pretrained on all tokens puts an object's content in the object's
own patches, so slimming cost 65-69 rSum at initialisation and the fine-tuned ``laps``
ranged 156-186 over three recipe seeds; pretrained on random quarters, every token has to
retrieve from a few of its neighbours, slimming cost 4-9 and ``laps`` ranged 201-208
(``experiments/token-subset/``, README "Why the build matters"). The subset is random,
not the SEPS prior, so that the backbone is not tuned to the method under test; a ViT
pretrained at scale has the same property (its patch tokens carry their context).
``keep_tokens=1`` is the earlier objective, bit for bit (no draw is made).

The result is a folder ``<root>/<recipe>-<key>/`` holding ``vision.safetensors`` (the
timm state dict of the image backbone, loaded through ``ModelSpec.pretrained``),
``text/`` (``BertModel.save_pretrained``), ``tokenizer/``, ``projections.safetensors``
(the pretraining's projections, which a run of the same ``embed_size`` starts from) and
``meta.json`` (the recipe,
the loss curve, the time, the environment). ``key`` hashes the recipe and the source of
the modules the pretraining runs, so a change of either builds anew and nothing stale is
reused. Building is deterministic (seeded, single process, one thread) and happens under a lock, in
a private folder renamed into place when complete: a killed build leaves nothing that
could be mistaken for a result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor
from tqdm.auto import tqdm

from ..core.selection import split_cls_token
from ..data.text import load_tokenizer
from ..io.store import RunLock, atomic_write_json, clean_stale_temps
from ..model.encoders import build_image_encoder, build_text_encoder
from ..versioning.version import source_hash
from .config import TrainConfig, build_name
from .data import build_tokenizer, load, prepare_data_dir, split_tensors
from .run_environment import environment, seed_everything
from .unimodal import train_unimodal

__all__ = [
    "RECIPES",
    "PretrainRecipe",
    "build_name",
    "ensure_pretrained",
    "pretrained_dir",
    "recipe",
    "token_subset",
]

#: The pretraining's projections to its joint space, kept so that a run whose
#: ``embed_size`` matches starts from token embeddings already aligned across modalities
#: (a CLIP-like start; fresh projections would discard what the pretraining aligned).
PROJECTIONS = "projections.safetensors"

#: Default folder of pretrained backbones (beside the generated datasets).
DEFAULT_ROOT = Path("data/pretrained")


@dataclass(frozen=True)
class PretrainRecipe:
    """How a pair of tiny backbones is pretrained (see the module docstring)."""

    description: str
    backbone: str = "tiny-vit"
    text_backbone: str = "tiny-bert"
    image_size: int = 48
    synth_images: int = 20000
    synth_seed: int = 1_000_003  # far from any run's seed: a separate draw of scenes
    dense_noise: float = 0.12
    vocab_size: int = 4000
    max_words: int = 32
    max_dense_words: int = 160
    # 4500: the zero-shot rSum of the late-interaction score on a 1,000-image test split
    # (seed 0) was 149 after 1,500 steps, 216 after 4,500 (README, The standard regime).
    steps: int = 4500
    batch_size: int = 96
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100
    temperature: float = 0.07
    dense_share: float = 0.5
    embed_size: int = 64
    seed: int = 0
    # The share of patch tokens each step's late interaction sees (token_subset); 1 is
    # every token. A quarter: see the module docstring.
    keep_tokens: float = 0.25
    # "contrastive" (the module docstring) or "unimodal" (`seps.train.unimodal`: per-patch
    # scene attributes for the image backbone, masked language modelling for the text one;
    # no cross-modal loss, no projections saved).
    objective: str = "contrastive"
    # Unimodal only: "mlm" (BERT's loss, masked pieces only) or "mlm-all" (a loss at every
    # real position; `seps.train.unimodal`).
    text_objective: str = "mlm"

    def __post_init__(self) -> None:
        if not 0.0 < self.keep_tokens <= 1.0:
            raise ValueError(
                f"pretraining recipe field 'keep_tokens': {self.keep_tokens!r}; expected a "
                "share in (0, 1]"
            )
        if self.text_objective not in ("mlm", "mlm-all"):
            raise ValueError(
                f"pretraining recipe field 'text_objective': {self.text_objective!r}; "
                "expected mlm or mlm-all"
            )
        if self.objective not in ("contrastive", "unimodal"):
            raise ValueError(
                f"pretraining recipe field 'objective': {self.objective!r}; expected "
                "contrastive or unimodal"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


RECIPES: dict[str, PretrainRecipe] = {
    "synth-48": PretrainRecipe(
        description=(
            "tiny ViT (48 px, 36 patches) + tiny BERT, contrastive fine-grained pretraining on "
            "a separate 20,000-image synthetic draw with MLLM-like dense captions, each step "
            "on a random quarter of each image's patch tokens"
        ),
    ),
    "uni-48": PretrainRecipe(
        description=(
            "tiny ViT (48 px, 36 patches) trained to name each grid cell's object and the "
            "background, tiny BERT trained by masked language modelling with a loss at "
            "every position, each alone, on a separate 20,000-image synthetic draw; no "
            "cross-modal loss, no projections kept"
        ),
        objective="unimodal",
        text_objective="mlm-all",
        synth_seed=2_000_003,
        steps=1500,
        batch_size=128,
        lr=1e-3,
        dense_share=0.25,
        keep_tokens=1.0,
    ),
    # uni-48 at width 128: a linear late interaction trained on frozen features reaches
    # 176 dev rSum on these against 109 on uni-48's (docs/regime.md).
    "uni-48-w128": PretrainRecipe(
        description=(
            "uni-48 with backbones twice as wide (tiny-vit-128, tiny-bert-128: width 128, "
            "4 heads, 2 layers): each alone, per-cell scene attributes and masked language "
            "modelling at every position, on a separate 20,000-image synthetic draw"
        ),
        backbone="tiny-vit-128",
        text_backbone="tiny-bert-128",
        objective="unimodal",
        text_objective="mlm-all",
        synth_seed=2_000_003,
        steps=1500,
        batch_size=128,
        lr=1e-3,
        dense_share=0.25,
        keep_tokens=1.0,
    ),
}

#: The modules whose code determines a pretraining's result (hashed into its key).
_SOURCES = (
    "model/encoders.py",
    "data/text.py",
    "data/scenes.py",
    "data/captions.py",
    "data/dense_captions.py",
    "data/synth.py",
    "data/layout.py",
    "train/data.py",
    "train/pretrain.py",
    "train/unimodal.py",
)


def recipe(name: str) -> PretrainRecipe:
    """The recipe ``name`` or a ``ValueError`` that lists the known ones.

    ``"<recipe>@<b>"`` is build ``b`` of the recipe: the same recipe with its seed and its
    draw's seed moved by ``b`` (another initialisation, batch order and set of scenes),
    so that the builds of one recipe sample what a build can come out as.
    """
    base, _, build = name.partition("@")
    if base not in RECIPES or (build and not (build.isdigit() and int(build) > 0)):
        raise ValueError(
            f"train config field 'pretrain': unknown recipe {name!r}; known: "
            f"{', '.join(sorted(RECIPES))} (build b > 0 of one: '<recipe>@<b>')"
        )
    r = RECIPES[base]
    if not build:
        return r
    b = int(build)
    return dataclasses.replace(r, seed=r.seed + b, synth_seed=r.synth_seed + 7919 * b)


def recipe_key(name: str) -> str:
    """16 hex digits of the recipe's values and the source of :data:`_SOURCES`."""
    sources = source_hash(Path(__file__).resolve().parent.parent, _SOURCES)
    blob = json.dumps([name, recipe(name).to_dict(), sources], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pretrained_dir(name: str, root: str | Path | None = None) -> Path:
    """Where recipe ``name``'s backbones live (whether built or not)."""
    return Path(root or DEFAULT_ROOT) / f"{name}-{recipe_key(name)}"


def is_complete(folder: Path) -> bool:
    """A finished build: ``meta.json`` is written last."""
    return (folder / "meta.json").is_file()


def ensure_pretrained(
    name: str, root: str | Path | None = None, *, progress: bool = True, wait: bool = True
) -> Path:
    """The folder of recipe ``name``'s pretrained backbones, built first if absent.

    Concurrent callers (a matrix with several workers) wait for one build under a lock
    on ``<root>/.<recipe>-<key>.lock`` rather than building twice.
    """
    folder = pretrained_dir(name, root)
    if is_complete(folder):
        return folder
    lock = RunLock(folder.parent / f".{folder.name}.lock")
    while not lock.acquire():
        if not wait:
            raise ValueError(f"pretraining {name!r} is being built by {lock.holder}")
        time.sleep(5)
    try:
        if not is_complete(folder):
            _build(name, folder, progress)
    finally:
        lock.release()
    return folder


def _data_config(r: PretrainRecipe) -> TrainConfig:
    return TrainConfig(
        synth_images=r.synth_images,
        synth_seed=r.synth_seed,
        dense_noise=r.dense_noise,
        image_size=r.image_size,
        vocab_size=r.vocab_size,
        max_words=r.max_words,
        max_dense_words=r.max_dense_words,
        backbone=r.backbone,
        text_backbone=r.text_backbone,
        seed=r.seed,
        progress=False,
    )


def late_interaction(img: Tensor, words: Tensor, lens: Tensor) -> Tensor:
    """``s[v, t] = mean_w max_n cos(img[v, n], words[t, w])`` over the real words.

    img: ``(B_v, N, C)``, words: ``(B_t, L, C)``, lens: ``(B_t,)`` -> ``(B_v, B_t)``.
    """
    cos = torch.einsum("vnc,twc->vtwn", F.normalize(img, dim=-1), F.normalize(words, dim=-1))
    best = cos.max(dim=-1).values  # (B_v, B_t, L)
    mask = (torch.arange(words.shape[1], device=lens.device)[None] < lens[:, None]).to(best)
    return (best * mask[None]).sum(-1) / lens.clamp(min=1).to(best)[None]


def token_subset(img: Tensor, keep: float) -> Tensor:
    """A uniformly random ``ceil(keep * N)`` of each image's ``N`` patch tokens, after its
    ``[CLS]`` when it has one (SEPS never drops ``[CLS]``; see
    :func:`seps.core.selection.split_cls_token`).

    img: ``(B, L, C)`` -> ``(B, [1 +] ceil(keep * N), C)``. The draw comes from the global
    torch generator, which the build seeds, so a build stays deterministic; ``keep=1``
    returns ``img`` itself and draws nothing.
    """
    if keep >= 1.0:
        return img
    cls, x = split_cls_token(img)
    k = math.ceil(keep * x.shape[1])
    order = torch.rand(x.shape[:2]).argsort(dim=1)[:, :k]
    kept = x.gather(1, order[..., None].expand(-1, -1, x.shape[2]))
    return kept if cls is None else torch.cat([cls[:, None], kept], 1)


def contrastive_loss(sims: Tensor, temperature: float) -> Tensor:
    """Symmetric InfoNCE of a square matrix whose diagonal holds the positives."""
    logits = sims / temperature
    target = torch.arange(sims.shape[0], device=sims.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target))


def _lr_factor(step: int, r: PretrainRecipe) -> float:
    if step < r.warmup_steps:
        return (step + 1) / r.warmup_steps
    done = (step - r.warmup_steps) / max(1, r.steps - r.warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(done, 1.0)))


def _build(name: str, folder: Path, progress: bool) -> None:
    # One thread: float sums then run in one order whatever the machine's core count, so
    # the weights are the same bits everywhere (with two threads they differ in the last
    # bits), and a loaded machine does not slow the build with spinning threads.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _build_single_thread(name, folder, progress)
    finally:
        torch.set_num_threads(threads)


def _build_single_thread(name: str, folder: Path, progress: bool) -> None:
    r = recipe(name)
    cfg = _data_config(r)
    seed_everything(r.seed)
    data_dir = prepare_data_dir(cfg)
    tokenizer = build_tokenizer(cfg, data_dir)
    split = split_tensors(cfg, load(cfg, data_dir, cfg.train_split), tokenizer)
    img_enc = build_image_encoder(r.backbone, r.embed_size, image_size=r.image_size)
    txt_enc = build_text_encoder(r.text_backbone, r.embed_size, len(tokenizer))
    if r.objective == "unimodal":
        curve, seconds = train_unimodal(
            r,
            split,
            tokenizer,
            img_enc,
            txt_enc,
            seed=r.synth_seed,
            lr_factor=lambda s: _lr_factor(s, r),
            progress=progress,
        )
        final = {k: sum(c[k] for c in curve[-5:]) / len(curve[-5:]) for k in ("vision", "text")}
        _save(name, folder, r, img_enc, txt_enc, tokenizer, curve, seconds, final, data_dir)
        return
    params = list(img_enc.parameters()) + list(txt_enc.parameters())
    opt = torch.optim.AdamW(params, lr=r.lr, weight_decay=r.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, r))
    n_img = split.data.n_images
    per_image = len(split.captions.pieces) // n_img
    rng = random.Random(r.seed)
    curve: list[dict[str, float]] = []
    t0 = time.perf_counter()
    bar = tqdm(range(r.steps), desc=f"pretrain {name}", disable=not progress)
    img_enc.train()
    txt_enc.train()
    for step in bar:
        imgs = rng.sample(range(n_img), r.batch_size)
        caps = [i * per_image + rng.randrange(per_image) for i in imgs]
        n_dense = round(r.dense_share * r.batch_size)
        img = img_enc(split.images.batch(imgs))
        ids, lens = split.captions.batch(caps)
        # The text first: its dropout draws from the same generator as token_subset.
        words = txt_enc(ids, lens)
        sims = late_interaction(token_subset(img, r.keep_tokens), words, lens)
        loss = contrastive_loss(sims, r.temperature)
        if n_dense >= 2:
            # The dense captions of the first n_dense images, pooled: a late interaction
            # over 100-word captions would cost ten times the rest of the step.
            ids, lens = split.dense.batch(imgs[:n_dense])
            words = txt_enc(ids, lens)
            mask = (torch.arange(words.shape[1])[None] < lens[:, None]).to(words)
            pooled = (words * mask[..., None]).sum(1) / lens[:, None].to(words)
            sims = F.normalize(img[:n_dense].mean(1), dim=-1) @ F.normalize(pooled, dim=-1).t()
            loss = loss + contrastive_loss(sims, r.temperature)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 2.0)
        opt.step()
        sched.step()
        curve.append({"step": step, "loss": float(loss.detach())})
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
    seconds = time.perf_counter() - t0
    final_loss = sum(c["loss"] for c in curve[-50:]) / len(curve[-50:])
    _save(name, folder, r, img_enc, txt_enc, tokenizer, curve[::10], seconds, final_loss, data_dir)


def _save(
    name: str,
    folder: Path,
    r: PretrainRecipe,
    img_enc: Any,
    txt_enc: Any,
    tokenizer: Any,
    curve: list[dict[str, float]],
    seconds: float,
    final_loss: Any,
    data_dir: Path,
) -> None:
    """Write the build into a private folder and rename it into place (``meta.json`` last)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(folder.parent, recursive=False)
    tmp = folder.parent / f".{folder.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        state = {k: v.contiguous() for k, v in img_enc.visual_encoder.state_dict().items()}
        save_file(state, str(tmp / "vision.safetensors"))
        if r.objective == "contrastive":  # a unimodal build has no joint space to keep
            projections = {
                **{f"vision_proj.{k}": v for k, v in img_enc.vision_proj.state_dict().items()},
                **{f"fc.{k}": v for k, v in txt_enc.fc.state_dict().items()},
            }
            save_file({k: v.contiguous() for k, v in projections.items()}, str(tmp / PROJECTIONS))
        txt_enc.bert.save_pretrained(tmp / "text")
        tokenizer.save_pretrained(tmp / "tokenizer")
        # Only the fingerprint matters to a run; the loss curve is kept every 10 steps.
        atomic_write_json(
            tmp / "meta.json",
            {
                "recipe": name,
                "key": folder.name.rsplit("-", 1)[-1],
                "values": r.to_dict(),
                "train_seconds": seconds,
                "final_loss": final_loss,
                "curve": curve,
                "data": str(data_dir),
                "environment": environment(),
            },
        )
        os.rename(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_projections(model: torch.nn.Module, folder: str | Path) -> bool:
    """Copy the pretraining's projections (``vision_proj``, ``fc``) into ``model``'s
    encoders when their shapes match (the run's ``embed_size`` equals the recipe's);
    return whether they were loaded (False: the run keeps fresh projections)."""
    from safetensors.torch import load_file

    if not (Path(folder) / PROJECTIONS).is_file():  # a unimodal build: fresh projections
        return False
    saved = load_file(str(Path(folder) / PROJECTIONS))
    targets = {"vision_proj": model.img_enc.vision_proj, "fc": model.txt_enc.fc}
    for name, module in targets.items():
        for k, v in module.state_dict().items():
            if saved[f"{name}.{k}"].shape != v.shape:
                return False
    for name, module in targets.items():
        module.load_state_dict({k: saved[f"{name}.{k}"] for k in module.state_dict()})
    return True


def pretrained_parts(cfg: TrainConfig) -> tuple[str, str, Any]:
    """``(vision weights file, text backbone folder, tokenizer)`` of ``cfg.pretrain``,
    built first if needed; a ``ValueError`` names the field that does not fit the recipe."""
    assert cfg.pretrain is not None
    r = recipe(cfg.pretrain)
    for field, want in (
        ("backbone", r.backbone),
        ("text_backbone", r.text_backbone),
        ("image_size", r.image_size),
    ):
        if getattr(cfg, field) != want:
            raise ValueError(
                f"train config field {field!r}: {getattr(cfg, field)!r} does not match "
                f"pretraining recipe {cfg.pretrain!r} ({want!r})"
            )
    for field in ("pretrained", "tokenizer"):
        if getattr(cfg, field) is not None:
            raise ValueError(
                f"train config field {field!r}: must be unset with pretrain={cfg.pretrain!r} "
                "(the recipe provides the weights and the tokenizer)"
            )
    folder = ensure_pretrained(cfg.pretrain_build, progress=cfg.progress)  # type: ignore[arg-type]
    tokenizer = load_tokenizer(str(folder / "tokenizer"))
    return str(folder / "vision.safetensors"), str(folder / "text"), tokenizer
