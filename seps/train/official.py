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
without DDP's ``module.``) maps onto :class:`seps.core.head.SEPSHead`.

Full official checkpoints (:func:`load_checkpoint`) also carry the backbones, saved with
transformers 4 names; they are renamed to the installed transformers' names by the
library's own conversion table, and the four official model types (:data:`OFFICIAL_VISION`)
and ``bert-base-uncased`` are built without downloads. :func:`load_official_tokenizer`
tokenises as the official data loader.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..core.config import get_config
from ..core.head import SEPSHead
from .official_backbones import (
    CheckpointError,
    config_from,
    describe_config,
    ignored_keys,
    library_renamer,
    official_text_config,
    official_vision_config,
)

if TYPE_CHECKING:
    from ..model.seps_model import SEPSModel

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
    """Rename ``state_dict`` for ``head``; raise a one-line :class:`CheckpointError` naming
    the first missing, unexpected and mis-shaped keys with their counts."""
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
        problems.append("missing keys: " + _key_list(missing))
    if unexpected:
        problems.append("unexpected keys: " + _key_list(unexpected))
    if misshaped:
        problems.append("mis-shaped keys: " + _key_list(misshaped, "; "))
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


#: How many keys of each kind an error message names (it gives the count of the rest).
_KEYS_SHOWN = 3


def _read_official(path: str | os.PathLike[str]) -> tuple[dict[str, Tensor], Any]:
    """The state dict and ``opt`` of an official ``model_best.pth``, read as data only:
    tensors, plain containers and the argparse ``Namespace`` its ``opt`` is (rebuilt from
    its attributes); a file that asks for anything else is refused before any of it runs
    (:func:`seps.io.safe_files.load_torch_data`)."""
    import argparse

    from ..io.safe_files import load_torch_data

    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"checkpoint {str(p)!r}: file not found")
    try:
        ckpt = load_torch_data(p, allowed=[argparse.Namespace])
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {exc}") from None
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


def _key_list(items: Sequence[str], sep: str = ", ") -> str:
    """The first :data:`_KEYS_SHOWN` of ``items``, then how many there are in all."""
    shown = sep.join(items[:_KEYS_SHOWN])
    return shown if len(items) <= _KEYS_SHOWN else f"{shown}{sep}... ({len(items)} in all)"


def _installed_names(
    state: Mapping[str, Any], model: SEPSModel
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """``state`` with the backbone keys under the installed transformers' names.

    Keys under ``img_enc.visual_encoder.`` and ``txt_enc.bert.`` go through
    :func:`library_renamer` of that backbone; a renamed key the backbone does not have and
    the library ignores on load (:func:`ignored_keys`) is dropped. Returns the renamed state, the
    original name of each renamed key, and the keys that two checkpoint keys were renamed to.
    """
    own = model.state_dict()
    backbones = {
        "img_enc.visual_encoder.": model.img_enc.visual_encoder,
        "txt_enc.bert.": model.txt_enc.bert,
    }
    rules = {p: (library_renamer(m), ignored_keys(m, "unexpected")) for p, m in backbones.items()}
    out: dict[str, Any] = {}
    origin: dict[str, str] = {}
    clashes: list[str] = []
    for key, value in state.items():
        name = key
        prefix = next((p for p in rules if key.startswith(p)), None)
        if prefix is not None:
            rename, ignore = rules[prefix]
            name = prefix + rename(key[len(prefix) :])
            if name not in own and ignore is not None and ignore.search(name[len(prefix) :]):
                continue
        if name in out:
            clashes.append(f"{origin[name]} and {key} -> {name}")
            continue
        out[name] = value
        origin[name] = key
    return out, origin, clashes


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    vision: Any = None,
    text: Any = None,
    preset: str = "code",
    **overrides: Any,
) -> SEPSModel:
    """Map an official ``model_best.pth`` (``{'model': state_dict, 'opt': Namespace}``)
    onto :class:`seps.model.seps_model.SEPSModel`.

    ``img_enc.visual_encoder.*`` (a transformers ViTModel or SwinModel) and ``txt_enc.bert.*``
    (BertModel) are renamed to the installed transformers' names by the library's own
    conversion table (the official code saved transformers 4 names; transformers 5 renamed
    the ViT and Swin weights), keys the library ignores on load are dropped;
    ``img_enc.vision_proj.*`` and ``txt_enc.fc.*`` load as they are; ``cross_net.*`` goes
    through :data:`PREFIX_MAP`.

    The architectures come from ``vision`` / ``text`` (a transformers config, a local folder,
    a hub name, or for ``vision`` one of :data:`OFFICIAL_VISION`'s types). By default, as the
    official code: the vision backbone of ``opt.vit_type`` (:func:`official_vision_config`,
    no download) and ``bert-base-uncased`` whatever ``opt.bert_path`` says
    (:func:`official_text_config`). ``embed_size`` is read from ``vision_proj``;
    ``sparse_ratio`` and ``aggr_ratio`` from ``opt`` (defaults 0.5 and 0.4), unless
    overridden. The model is returned in eval mode.

    Raises:
        CheckpointError: one line naming the first missing, unexpected and mis-shaped keys of
            each kind with their counts.
    """
    state, opt = _read_official(path)
    model, vcfg, tcfg = _official_model(state, opt, path, vision, text, preset, overrides)
    encoders, head_state = _mapped_state(state, model, vcfg, tcfg, path)
    model.img_enc.load_state_dict(
        {k[len("img_enc.") :]: v for k, v in encoders.items() if k.startswith("img_enc.")}
    )
    model.txt_enc.load_state_dict(
        {k[len("txt_enc.") :]: v for k, v in encoders.items() if k.startswith("txt_enc.")}
    )
    model.cross_net.load_state_dict(head_state)
    return model.eval()


def _official_model(
    state: Mapping[str, Any],
    opt: Any,
    path: str | os.PathLike[str],
    vision: Any,
    text: Any,
    preset: str,
    overrides: Mapping[str, Any],
) -> tuple[SEPSModel, Any, Any]:
    """The freshly built model a checkpoint loads into, with its vision and text configs
    (:func:`load_checkpoint` says where each size comes from)."""
    from ..model.encoders import ImageEncoder, TextEncoder
    from ..model.seps_model import SEPSModel

    def opt_value(name: str, default: Any) -> Any:
        return getattr(opt, name, default) if opt is not None else default

    vcfg = (
        official_vision_config(opt_value("vit_type", "vit"))
        if vision is None
        else config_from(vision, "vision")
    )
    tcfg = official_text_config() if text is None else config_from(text, "text")
    proj = state.get("img_enc.vision_proj.weight")
    if proj is None:
        raise CheckpointError(
            f"checkpoint {os.fspath(path)!r}: missing key img_enc.vision_proj.weight"
        )
    embed_size = int(proj.shape[0])
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
    return SEPSModel(img_enc, txt_enc, head), vcfg, tcfg


def _mapped_state(
    state: Mapping[str, Any], model: SEPSModel, vcfg: Any, tcfg: Any, path: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The checkpoint's encoder weights under the installed names (a key the library
    tolerates missing keeps its freshly built value, as ``from_pretrained`` does) and the
    head's state; every missing, unexpected and mis-shaped key at once in one
    :class:`CheckpointError`."""
    renamed, origin, clashes = _installed_names(state, model)
    encoders = {k: v for k, v in renamed.items() if not k.startswith("cross_net.")}
    cross = {k: v for k, v in renamed.items() if k.startswith("cross_net.")}
    own = model.state_dict()
    ignore_missing = {
        p: ignored_keys(m, "missing")
        for p, m in (
            ("img_enc.visual_encoder.", model.img_enc.visual_encoder),
            ("txt_enc.bert.", model.txt_enc.bert),
        )
    }

    def tolerated(key: str) -> bool:
        return any(
            key.startswith(p) and rx is not None and rx.search(key[len(p) :])
            for p, rx in ignore_missing.items()
        )

    # A key that is there with the wrong shape (or not a tensor) is in `encoders`, so it is
    # reported as mis-shaped only, never also as missing (as map_state_dict does).
    missing = [k for k in own if not k.startswith("cross_net.") and k not in encoders]
    problems = _key_problems(
        [k for k in missing if not tolerated(k)],
        [origin[k] for k in encoders if k not in own],
        _misshaped(encoders, own, origin),
        clashes,
    )
    if problems:
        problems.append(
            f"the backbones are vision {type(vcfg).__name__} ({describe_config(vcfg)}) and "
            f"text {type(tcfg).__name__} ({describe_config(tcfg)}): pass vision=/text= "
            "(--vision/--text) configs that match the checkpoint's"
        )
    try:
        head_state = map_state_dict(cross, model.cross_net)
    except CheckpointError as exc:
        problems.append(f"{exc}; pass the preset (--preset) whose naming the checkpoint uses")
        head_state = {}
    if problems:
        raise CheckpointError(f"checkpoint {os.fspath(path)!r}: " + " | ".join(problems))
    for k in missing:  # tolerated: keep the freshly built values, as from_pretrained does
        encoders[k] = own[k]
    return encoders, head_state


def _misshaped(
    encoders: Mapping[str, Any], own: Mapping[str, Tensor], origin: Mapping[str, str]
) -> list[str]:
    """``<key>: expected ...`` for each checkpoint weight of the wrong shape or type."""
    shaped = []
    for k, v in encoders.items():
        if k not in own:
            continue
        if not isinstance(v, Tensor):
            shaped.append(f"{origin[k]}: expected a tensor, got {type(v).__name__}")
        elif v.shape != own[k].shape:
            shaped.append(
                f"{origin[k]}: expected shape {tuple(own[k].shape)}, got {tuple(v.shape)}"
            )
    return shaped


def _key_problems(
    missing: list[str], unexpected: list[str], shaped: list[str], clashes: list[str]
) -> list[str]:
    """One phrase per kind of key problem, in a fixed order."""
    problems: list[str] = []
    for kind, keys, sep in (
        ("missing keys", missing, ", "),
        ("unexpected keys", unexpected, ", "),
        ("mis-shaped keys", shaped, "; "),
        ("keys renamed to the same name", clashes, "; "),
    ):
        if keys:
            problems.append(f"{kind}: {_key_list(keys, sep)}")
    return problems
