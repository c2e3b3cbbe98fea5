"""Option values and flags shared by the subcommands.

:func:`add_config_flags` makes one flag per field of a config dataclass from the field
itself (name, type, default) and its metadata (help, choices, flag name; see
:func:`seps.train.config.doc`), and :func:`config_values` reads them back, so a default
lives in one place: the dataclass.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

__all__ = [
    "add_config_flags",
    "add_reports_option",
    "add_results_option",
    "config_values",
    "deprecated_alias",
    "head_and_train_sets",
    "seed_list",
]

_TYPES = {"int": int, "float": float, "str": None}

#: The one name and default of each kind of output path (docs/cli.md): a result store, and
#: a folder of reports. A single file a command writes is ``--output PATH``.
RESULTS_DEFAULT, REPORTS_DEFAULT = "results", "reports"


def add_results_option(p: argparse.ArgumentParser, role: str = "") -> None:
    """``--results DIR``: the result store (``role``, e.g. "to read", in its help)."""
    p.add_argument(
        "--results",
        metavar="DIR",
        default=RESULTS_DEFAULT,
        help=f"result store{' ' + role if role else ''} (default: {RESULTS_DEFAULT}/)",
    )


def add_reports_option(p: argparse.ArgumentParser, what: str = "report folder") -> None:
    """``--reports DIR``: the folder reports are written to (``what`` it holds, in its
    help)."""
    p.add_argument(
        "--reports", metavar="DIR", default=REPORTS_DEFAULT, help=f"{what} (default: reports/)"
    )


#: Help of config fields whose metadata has none. The field's own metadata is the place
#: for it, but ``train_config`` is part of the code version: editing it there would mark
#: every stored record stale. Move each entry into the field with the next change that
#: alters the code version anyway.
_HELP_NOT_IN_CONFIG = {
    "backbone_source": "library that builds --backbone: timm (timm model names) or hf "
    "(transformers: hub names or save_pretrained folders); tiny-vit/tiny-swin are built by "
    "either, hf-tiny-vit/hf-tiny-swin always by hf",
}


#: Flags renamed on the command line whose field metadata still has the old name (for the
#: same reason as above): field -> (flag, the old spelling kept as a hidden alias). The
#: run folder of ``train`` is ``--run-dir``: ``--output`` names one file a command writes,
#: ``--results`` and ``--reports`` the result store and the report folder (docs/cli.md).
_FLAG_NOT_IN_CONFIG = {"out_dir": ("--run-dir", "--out")}


def _flag(f: dataclasses.Field[Any]) -> str:
    if f.name in _FLAG_NOT_IN_CONFIG:
        return _FLAG_NOT_IN_CONFIG[f.name][0]
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str, **kw: Any) -> None:
    """Accept ``old`` as a spelling of ``new`` (same value, same type), left out of
    ``--help``: a renamed flag keeps working in the scripts that use it."""
    parser.add_argument(
        old, dest=new[2:].replace("-", "_"), help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kw
    )


def add_config_flags(parser: argparse.ArgumentParser, cls: type, names: list[str]) -> None:
    """One option per field ``names`` of ``cls``, in that order. A boolean field is a
    switch: ``--X`` sets it when its default is False, ``--no-X`` clears it when True."""
    from ..train.config import field_kind  # loads torch: only commands that use it pay

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
        if name in _FLAG_NOT_IN_CONFIG:
            alias_kw = {k: v for k, v in kw.items() if k in ("action", "type", "choices")}
            deprecated_alias(parser, _FLAG_NOT_IN_CONFIG[name][1], _flag(f), **alias_kw)


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
    parts = [s.strip() for s in text.split(",")]
    if any(parts) and not all(parts):  # "0,,1": a seed left out between commas
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: an empty seed between commas; expected comma-separated "
            "integers, e.g. 0,1,2"
        )
    try:
        seeds = [int(s) for s in parts if s]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}; expected comma-separated integers, e.g. 0,1,2"
        ) from None
    if not seeds:
        raise argparse.ArgumentTypeError("expected at least one seed, e.g. 0 or 0,1,2")
    from ..experiments.definitions import (
        seeds_problem,  # here: only a given --seeds pays its import
    )

    problem = seeds_problem(seeds)
    if problem:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: {problem}")
    return seeds


def head_and_train_sets(sets: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--set`` values as ``(head switches, train config fields)``: each is
    ``head.FIELD=VALUE`` or ``train.FIELD=VALUE``, as for ``seps-bench run``
    (:func:`seps.experiments.overrides.parse_set`). A later setting of the same field wins.

    Raises:
        ValueError: one line naming the ``--set`` and what was expected (a bare
            ``FIELD=VALUE``, the form ``train`` took before, included).
    """
    from ..core.config import parse_override
    from ..experiments.overrides import SetError, parse_set

    head: dict[str, Any] = {}
    train: dict[str, Any] = {}
    for text in sets:
        name, eq, raw = text.partition("=")
        part, dot, field = name.strip().partition(".")
        if not dot and eq:
            raise SetError(
                f"--set {text}: expected head.FIELD=VALUE or train.FIELD=VALUE, e.g. "
                f"--set head.{part}={raw.strip()}"
            )
        if part == "head" and eq and field:
            # Typed by the field's default, as bare head overrides were; then the preset
            # checks it when the config is built.
            try:
                key, value = parse_override(f"{field}={raw}")
            except ValueError as exc:
                raise SetError(f"--set {text}: {exc}") from None
            head[key] = value
        else:
            setting = parse_set(text)  # the train part, or one clear error
            train[setting.field] = setting.value
    return head, train
