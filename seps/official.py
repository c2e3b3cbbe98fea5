"""Import and export of official weights (SPEC.md "Official checkpoints").

Two naming schemes exist for the head's parameters:

- the open-source repository (``preset="code"``): ``aggr_net.weight.{0,1,3}.*`` and
  ``aggr_net.scale``;
- the reference re-implementation of the paper (``preset="paper"``):
  ``sparse_net_cap.score_predictor.{0,2}.*``, ``sparse_net_long.score_predictor.{0,2}.*``,
  ``aggr_net.weight_sparse.{0,1,3}.*``, ``aggr_net.weight_dense.{0,1,3}.*``,
  ``aggr_net.scale`` and ``hrpa.relevance_mlp.{0,2}.*``.

Both are prefixes of one table, :data:`PREFIX_MAP`, so a state dict of either
scheme (with or without the ``cross_net.`` prefix of a full model, and with or
without DDP's ``module.``) maps onto :class:`seps.head.SEPSHead`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor

from .config import get_config
from .head import SEPSHead

if TYPE_CHECKING:
    from .model import SEPSModel

#: official prefix -> this project's parameter prefix.
PREFIX_MAP: dict[str, str] = {
    "aggr_net.weight.": "aggregation.nets.shared.",
    "aggr_net.weight_sparse.": "aggregation.nets.sparse.",
    "aggr_net.weight_dense.": "aggregation.nets.dense.",
    "aggr_net.scale": "aggregation.scale",
    "sparse_net_cap.": "selectors.sparse.",
    "sparse_net_long.": "selectors.dense.",
    "hrpa.": "hrpa.",
}

#: Parameters that are one number whatever shape a checkpoint stores them in
#: (the official ``scale`` is ``(1, 1, 1)``).
SCALAR_KEYS = ("aggregation.scale",)


class CheckpointError(ValueError):
    """A state dict or checkpoint does not fit the head; the message lists every problem."""


def strip_prefixes(key: str) -> str:
    """Drop DDP's ``module.`` and the full model's ``cross_net.`` prefixes."""
    for prefix in ("module.", "cross_net."):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key


def to_project_key(key: str) -> str | None:
    """This project's name of an official key, or ``None`` if no rule maps it."""
    key = strip_prefixes(key)
    for src, dst in PREFIX_MAP.items():
        if key.startswith(src):
            return dst + key[len(src) :]
    return None


def to_official_key(key: str) -> str | None:
    """The official name of one of this project's parameter names."""
    for src, dst in PREFIX_MAP.items():
        if key.startswith(dst):
            return src + key[len(dst) :]
    return None


def export_state_dict(head: SEPSHead, prefix: str = "cross_net.") -> dict[str, Tensor]:
    """The head's parameters under official names (``scale`` stored as ``(1, 1, 1)``).

    Parameters with no official counterpart (the ``gumbel_per_patch`` keep bias)
    are left out.
    """
    out: dict[str, Tensor] = {}
    for key, value in head.state_dict().items():
        name = to_official_key(key)
        if name is None:
            continue
        if key in SCALAR_KEYS:
            value = value.reshape(1, 1, 1)
        out[prefix + name] = value.detach().clone()
    return out


def map_state_dict(state_dict: Mapping[str, Any], head: SEPSHead) -> dict[str, Tensor]:
    """Rename ``state_dict`` for ``head``; raise :class:`CheckpointError` listing every
    missing, unexpected or mis-shaped key."""
    own = head.state_dict()
    mapped: dict[str, Tensor] = {}
    # Names the state dict provides, fitting or not: a key that is there with the wrong
    # shape is reported as mis-shaped only, not also as missing.
    present: set[str] = set()
    unexpected: list[str] = []
    misshaped: list[str] = []
    for key, value in state_dict.items():
        name = to_project_key(key)
        if name is None or name not in own:
            unexpected.append(key)
            continue
        present.add(name)
        if not isinstance(value, Tensor):
            misshaped.append(f"{key}: expected a tensor, got {type(value).__name__}")
            continue
        want = own[name].shape
        if name in SCALAR_KEYS and value.numel() == 1:
            value = value.reshape(want)
        if value.shape != want:
            misshaped.append(f"{key}: expected shape {tuple(want)}, got {tuple(value.shape)}")
            continue
        mapped[name] = value
    # The per-patch keep bias has no official counterpart: keep its initial value.
    optional = {k for k in own if k.endswith("keep_bias")}
    missing = [
        f"{to_official_key(k) or k} (-> {k})" for k in own if k not in present and k not in optional
    ]
    problems = []
    if missing:
        problems.append("missing keys: " + ", ".join(missing))
    if unexpected:
        problems.append("unexpected keys: " + ", ".join(unexpected))
    if misshaped:
        problems.append("mis-shaped keys: " + "; ".join(misshaped))
    if problems:
        raise CheckpointError(
            "state dict does not fit the head "
            f"(scoring={head.config.scoring}, dense_fusion={head.config.dense_fusion}, "
            f"aggregation={head.config.aggregation}, hrpa={head.config.hrpa}): "
            + " | ".join(problems)
        )
    for k in optional:
        mapped[k] = own[k]
    return mapped


def load_crossnet(
    state_dict: Mapping[str, Any],
    *,
    preset: str = "code",
    embed_size: int,
    num_patches: int,
    sparse_ratio: float,
    aggr_ratio: float,
    **overrides: Any,
) -> SEPSHead:
    """Build the head of ``preset`` (plus ``overrides``) and load official weights into it.

    ``state_dict`` uses the official open-source naming for ``preset="code"`` and the
    reference re-implementation's naming for ``preset="paper"``, with or without
    the ``cross_net.`` prefix. The returned head is in eval mode; its forward is
    ``(img_embs, cap_embs, cap_lens, long_cap_embs, long_cap_lens) -> sims``.
    """
    if not isinstance(state_dict, Mapping):
        raise CheckpointError(
            f"state_dict: expected a mapping of parameter names to tensors, "
            f"got {type(state_dict).__name__}"
        )
    config = get_config(
        preset,
        embed_size=embed_size,
        num_patches=num_patches,
        sparse_ratio=sparse_ratio,
        aggr_ratio=aggr_ratio,
        **overrides,
    )
    head = SEPSHead(config)
    head.load_state_dict(map_state_dict(state_dict, head))
    return head.eval()


__all__ = [
    "PREFIX_MAP",
    "CheckpointError",
    "export_state_dict",
    "load_checkpoint",
    "load_crossnet",
    "map_state_dict",
    "to_official_key",
    "to_project_key",
]


# --------------------------------------------------------------- full checkpoints
OFFICIAL_VISION = {
    "vit": "google/vit-base-patch16-224-in21k",
    "swin": "microsoft/swin-base-patch4-window7-224-in22k",
}


def _read_official(path: str | os.PathLike[str]) -> tuple[dict[str, Tensor], Any]:
    import torch

    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"checkpoint {str(p)!r}: file not found")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise CheckpointError(f"checkpoint {str(p)!r}: not a readable torch file ({exc})") from exc
    if not isinstance(ckpt, Mapping) or "model" not in ckpt:
        got = list(ckpt)[:8] if isinstance(ckpt, Mapping) else type(ckpt).__name__
        raise CheckpointError(
            f"checkpoint {str(p)!r}: expected a dict with key 'model' (an official "
            f"model_best.pth), got {got}"
        )
    model = ckpt["model"]
    if not isinstance(model, Mapping):
        raise CheckpointError(f"checkpoint {str(p)!r}: 'model' is not a state dict")
    return {strip_module(k): v for k, v in model.items()}, ckpt.get("opt")


def strip_module(key: str) -> str:
    return key[len("module.") :] if key.startswith("module.") else key


def _config_from(spec: Any, what: str) -> Any:
    """A transformers config from a config object, a local folder or a hub name."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(spec, PretrainedConfig):
        return spec
    try:
        return AutoConfig.from_pretrained(os.fspath(spec))
    except Exception as exc:
        raise CheckpointError(
            f"{what}={spec!r}: could not load a transformers config ({exc}); pass a config "
            "object or a local folder holding config.json"
        ) from exc


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    vision: Any = None,
    text: Any = None,
    preset: str = "code",
    **overrides: Any,
) -> SEPSModel:
    """Map an official ``model_best.pth`` (``{'model': state_dict, 'opt': Namespace}``)
    onto :class:`seps.model.SEPSModel`.

    ``img_enc.visual_encoder.*`` / ``img_enc.vision_proj.*`` (a transformers ViTModel or
    SwinModel), ``txt_enc.bert.*`` / ``txt_enc.fc.*`` (BertModel) load as they are;
    ``cross_net.*`` goes through :data:`PREFIX_MAP`. The architectures come from
    ``vision`` / ``text`` (a transformers config, a local folder or a hub name); by default
    from the checkpoint's ``opt`` (``vit_type``: vit or swin, ``bert_path``), which needs
    those configs in the local cache. ``embed_size`` is read from ``vision_proj``;
    ``sparse_ratio`` and ``aggr_ratio`` from ``opt`` (defaults 0.5 and 0.4), unless
    overridden. The model is returned in eval mode. Every missing, unexpected or
    mis-shaped key is listed in the :class:`CheckpointError`.
    """
    from .encoders import ImageEncoder, TextEncoder
    from .model import SEPSModel

    state, opt = _read_official(path)

    def opt_value(name: str, default: Any) -> Any:
        return getattr(opt, name, default) if opt is not None else default

    if vision is None:
        vision = OFFICIAL_VISION.get(str(opt_value("vit_type", "vit")), OFFICIAL_VISION["vit"])
    if text is None:
        text = opt_value("bert_path", "bert-base-uncased")
    proj = state.get("img_enc.vision_proj.weight")
    if proj is None:
        raise CheckpointError(
            f"checkpoint {os.fspath(path)!r}: missing key img_enc.vision_proj.weight"
        )
    embed_size = int(proj.shape[0])
    vcfg, tcfg = _config_from(vision, "vision"), _config_from(text, "text")
    size = vcfg.image_size if isinstance(vcfg.image_size, int) else vcfg.image_size[0]
    img_enc = ImageEncoder(vcfg, embed_size, image_size=int(opt_value("img_res", size)))
    txt_enc = TextEncoder(tcfg, embed_size)
    settings = {
        "embed_size": embed_size,
        "num_patches": img_enc.num_patches,
        "sparse_ratio": float(opt_value("sparse_ratio", 0.5)),
        "aggr_ratio": float(opt_value("aggr_ratio", 0.4)),
    }
    settings.update(overrides)
    head = SEPSHead(get_config(preset, **settings))
    model = SEPSModel(img_enc, txt_enc, head)

    encoders = {k: v for k, v in state.items() if not k.startswith("cross_net.")}
    cross = {k: v for k, v in state.items() if k.startswith("cross_net.")}
    problems: list[str] = []
    own = model.state_dict()
    # A key that is there with the wrong shape (or not a tensor) is in `encoders`, so it is
    # reported as mis-shaped only, never also as missing (as map_state_dict does).
    missing = [k for k in own if not k.startswith("cross_net.") and k not in encoders]
    unexpected = [k for k in encoders if k not in own]
    shaped = []
    for k, v in encoders.items():
        if k not in own:
            continue
        if not isinstance(v, Tensor):
            shaped.append(f"{k}: expected a tensor, got {type(v).__name__}")
        elif v.shape != own[k].shape:
            shaped.append(f"{k}: expected shape {tuple(own[k].shape)}, got {tuple(v.shape)}")
    if missing:
        problems.append("missing keys: " + ", ".join(missing))
    if unexpected:
        problems.append("unexpected keys: " + ", ".join(unexpected))
    if shaped:
        problems.append("mis-shaped keys: " + "; ".join(shaped))
    try:
        head_state = map_state_dict(cross, head)
    except CheckpointError as exc:
        problems.append(str(exc))
        head_state = {}
    if problems:
        raise CheckpointError(f"checkpoint {os.fspath(path)!r}: " + " | ".join(problems))
    model.img_enc.load_state_dict(
        {k[len("img_enc.") :]: v for k, v in encoders.items() if k.startswith("img_enc.")}
    )
    model.txt_enc.load_state_dict(
        {k[len("txt_enc.") :]: v for k, v in encoders.items() if k.startswith("txt_enc.")}
    )
    head.load_state_dict(head_state)
    return model.eval()
