"""Option values and flags shared by the subcommands.

:func:`add_config_flags` makes one flag per field of a config dataclass from the field
itself (name, type, default) and its metadata (help, choices, flag name; see
:func:`seps.train_config.doc`), and :func:`config_values` reads them back, so a default
lives in one place: the dataclass.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ..train_config import field_kind

__all__ = ["add_config_flags", "config_values", "seed_list"]

_TYPES = {"int": int, "float": float, "str": None}

#: Help of config fields whose metadata has none. The field's own metadata is the place
#: for it, but ``train_config`` is part of the code version: editing it there would mark
#: every stored record stale. Move each entry into the field with the next change that
#: alters the code version anyway.
_HELP_NOT_IN_CONFIG = {
    "backbone_source": "library that builds --backbone: timm (timm model names) or hf "
    "(transformers: hub names or save_pretrained folders); tiny-vit/tiny-swin are built by "
    "either, hf-tiny-vit/hf-tiny-swin always by hf",
}


def _flag(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def add_config_flags(parser: argparse.ArgumentParser, cls: type, names: list[str]) -> None:
    """One option per field ``names`` of ``cls``, in that order. A boolean field is a
    switch: ``--X`` sets it when its default is False, ``--no-X`` clears it when True."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in names:
        f = fields[name]
        meta = f.metadata
        base, _ = field_kind(str(f.type))
        kw: dict[str, Any] = {"help": meta.get("help") or _HELP_NOT_IN_CONFIG.get(name)}
        if base == "bool":
            kw["action"] = "store_true"
        else:
            kw.update(default=f.default, type=_TYPES[base])
            if meta.get("choices"):
                kw["choices"] = meta["choices"]
        parser.add_argument(_flag(f), **kw)


def config_values(args: argparse.Namespace, cls: type, names: list[str]) -> dict[str, Any]:
    """The values of the options :func:`add_config_flags` made, as config fields."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out = {}
    for name in names:
        f = fields[name]
        flag = _flag(f)
        value = getattr(args, flag[2:].replace("-", "_"))
        out[name] = (not value) if flag.startswith("--no-") else value
    return out


def seed_list(text: str) -> list[int]:
    """``--seeds``: comma-separated integers, e.g. ``0,1,2``."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}; expected comma-separated integers, e.g. 0,1,2"
        ) from None
    if not seeds:
        raise argparse.ArgumentTypeError("expected at least one seed, e.g. 0 or 0,1,2")
    return seeds
