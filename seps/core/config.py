"""Typed configuration of the SEPS head and the preset registry.

Every switch of ``SPEC.md`` ("The seven documented differences" and "Findings")
is one field of :class:`SEPSConfig`. Presets live in :data:`PRESETS`; a preset
plus keyword overrides gives a validated config::

    >>> cfg = get_config("code", hrpa="mean_topk")
    >>> cfg.hrpa
    'mean_topk'

Invalid input raises :class:`ValueError` naming the field, the bad value and what
is allowed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Allowed values of every categorical switch (SPEC.md table rows 1-7 + findings).
CHOICES: dict[str, tuple[str, ...]] = {
    "scoring": ("code", "paper"),
    "dense_fusion": ("dual_branch", "fused", "none", "dense_only"),
    "aggregation": ("shared", "dual", "none"),
    "hrpa": ("mean", "mean_topk", "topk_only"),
    "similarity_activation": ("leaky_relu", "none"),
    "decision": ("topk", "gumbel_topk", "gumbel_per_patch"),
    "ratio_loss": ("unified", "separate", "eq7", "off"),
    "ratio_criterion": ("mse", "l1", "ce"),
    "align_loss": ("triplet", "triplet_sum", "triplet_hardest", "distance_weighted", "infonce"),
}

#: Short human description of each field, used by ``seps-bench presets`` and the docs.
FIELD_HELP: dict[str, str] = {
    "scoring": "patch score: code = s_im + s_st; paper = (1-2b)*s_p + b*(s_st'+s_dt'+2*s_im')",
    "dense_fusion": "how the dense caption enters: dual_branch, fused, none, dense_only",
    "aggregation": "aggregation network: shared (one MLP), dual (W_s, W_d), none",
    "hrpa": "patch-word score: mean, mean_topk (paper eq. 5), topk_only",
    "similarity_activation": "activation on patch-word cosines: leaky_relu (0.1) or none",
    "decision": "selection decision: topk, gumbel_topk (straight-through), gumbel_per_patch",
    "ratio_loss": "ratio constraint: unified (code), separate (paper text), eq7, off",
    "ratio_criterion": "penalty on (keep ratio, target): mse (paper), l1, ce (binned classes)",
    "align_loss": "alignment loss: triplet (official schedule: sum, then hardest), "
    "triplet_sum, triplet_hardest, distance_weighted (official option 2), infonce",
    "detach_selection": "run selection + extra token without gradient (SEPS code finding)",
    "embed_size": "joint embedding size C",
    "num_patches": "spatial patches N used to size the aggregation network",
    "sparse_ratio": "selection ratio rho, K = ceil(N * rho)",
    "aggr_ratio": "aggregation ratio, N_c = int(num_patches * aggr_ratio * rho)",
    "beta": "paper scoring weight b (eq. 3)",
    "top_k": "k of the paper HRPA relevance MLP",
    "gumbel_tau": "Gumbel-softmax temperature",
    "margin": "hinge margin a of the triplet loss",
    "ratio_weight": "weight of the ratio loss in the total loss",
    "lambda_sparse": "ratio-loss coefficient l1 of the sparse-guided mask",
    "lambda_dense": "ratio-loss coefficient l2 of the dense-guided mask",
    "ratio_bins": "number of keep-ratio classes of ratio_criterion=ce",
    "ratio_ce_temperature": "sharpness of the ce ratio classifier, in bin widths",
    "infonce_temperature": "temperature of align_loss=infonce",
    "selection": "which patches are kept (a control; the count is the learned decision's): "
    "learned (the head's score), random (uniform per pair), oracle (the patches of the "
    "objects the caption names; synthetic data only)",
}

#: Values of ``selection`` (not in :data:`CHOICES`: a control of the controls matrix,
#: not a switch of SPEC.md; any value but ``learned`` needs a ``selection_prior``).
SELECTIONS: tuple[str, ...] = ("learned", "random", "oracle")
#: Head fields added after records were first stored: run keys hash them only when they
#: differ from their default (:func:`seps.experiments.definitions.config_key`).
HEAD_KEY_OMITTED_AT_DEFAULT: tuple[str, ...] = ("selection",)


@dataclass(frozen=True)
class SEPSConfig:
    """Every switch and hyper-parameter of the SEPS cross-modal head (SPEC.md).

    The defaults are the open-source code's (``preset="code"``, ViT-224).
    """

    scoring: str = "code"
    dense_fusion: str = "dual_branch"
    aggregation: str = "shared"
    hrpa: str = "mean"
    similarity_activation: str = "leaky_relu"
    decision: str = "topk"
    ratio_loss: str = "unified"
    detach_selection: bool = True
    embed_size: int = 512
    num_patches: int = 196
    sparse_ratio: float = 0.5
    aggr_ratio: float = 0.4
    beta: float = 0.25
    top_k: int = 5
    gumbel_tau: float = 1.0
    margin: float = 0.2
    ratio_weight: float = 2.0
    lambda_sparse: float = 1.0
    lambda_dense: float = 1.0
    ratio_criterion: str = "mse"
    ratio_bins: int = 10
    ratio_ce_temperature: float = 0.1
    align_loss: str = "triplet"
    infonce_temperature: float = 0.05
    # Controls matrix (docs/controls.md): which K patches are kept, the count unchanged.
    # ``learned`` is the head of SPEC.md; ``random`` and ``oracle`` need the caller's
    # ``selection_prior`` (seps.train.controls) and a decision with a fixed count K.
    selection: str = "learned"

    def __post_init__(self) -> None:
        validate(self)

    # Derived sizes (SPEC.md "Notation").
    @property
    def num_keep(self) -> int:
        """K = ceil(N * rho) for ``num_patches`` spatial patches."""
        return keep_count(self.num_patches, self.sparse_ratio)

    @property
    def num_aggregated(self) -> int:
        """N_c = int(num_patches * aggr_ratio * rho)."""
        return int(self.num_patches * self.aggr_ratio * self.sparse_ratio)

    @property
    def uses_dense(self) -> bool:
        """Whether the forward pass needs the dense caption."""
        return self.dense_fusion != "none"

    @property
    def branches(self) -> tuple[str, ...]:
        """Selection branches this config runs: ``sparse`` and/or ``dense``."""
        return {
            "dual_branch": ("sparse", "dense"),
            "fused": ("sparse", "dense"),
            "none": ("sparse",),
            "dense_only": ("dense",),
        }[self.dense_fusion]

    def replace(self, **overrides: Any) -> SEPSConfig:
        """A copy with ``overrides`` applied (validated)."""
        return apply_overrides(self, overrides)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def keep_count(n: int, ratio: float) -> int:
    """K = ceil(n * ratio), computed so that 196 * 0.5 gives exactly 98."""
    # round() first: ceil(0.1 * 30) would otherwise be 4 because of float error.
    return max(1, math.ceil(round(n * ratio, 9)))


_INT_FIELDS = ("embed_size", "num_patches", "top_k", "ratio_bins")
_FLOAT_FIELDS = (
    "sparse_ratio",
    "aggr_ratio",
    "beta",
    "gumbel_tau",
    "margin",
    "ratio_weight",
    "lambda_sparse",
    "lambda_dense",
    "ratio_ce_temperature",
    "infonce_temperature",
)


def validate(cfg: SEPSConfig) -> None:
    """Raise ``ValueError`` naming the field, the bad value and what is allowed."""
    for name, allowed in CHOICES.items():
        value = getattr(cfg, name)
        if value not in allowed:
            raise ValueError(
                f"config field {name!r}: invalid value {value!r}; allowed: {', '.join(allowed)}"
            )
    if not isinstance(cfg.detach_selection, bool):
        raise ValueError(
            f"config field 'detach_selection': invalid value {cfg.detach_selection!r}; "
            "allowed: true or false"
        )
    for name in _INT_FIELDS:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"config field {name!r}: invalid value {value!r}; expected an integer")
    for name in _FLOAT_FIELDS:
        value = getattr(cfg, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise ValueError(f"config field {name!r}: invalid value {value!r}; expected a number")
    if not 0.0 < cfg.sparse_ratio <= 1.0:
        raise ValueError(
            f"config field 'sparse_ratio': invalid value {cfg.sparse_ratio!r}; allowed: (0, 1]"
        )
    if cfg.top_k < 1:
        raise ValueError(f"config field 'top_k': invalid value {cfg.top_k!r}; allowed: >= 1")
    if cfg.num_patches < 1:
        raise ValueError(
            f"config field 'num_patches': invalid value {cfg.num_patches!r}; allowed: >= 1"
        )
    if cfg.embed_size < 5:
        # int(0.2 * C) hidden units of the aggregation MLP and C // 4 of the score predictor.
        raise ValueError(
            f"config field 'embed_size': invalid value {cfg.embed_size!r}; allowed: >= 5"
        )
    if cfg.aggregation != "none" and cfg.num_aggregated < 1:
        raise ValueError(
            f"config field 'aggr_ratio': invalid value {cfg.aggr_ratio!r}; "
            f"int(num_patches * aggr_ratio * sparse_ratio) = "
            f"int({cfg.num_patches} * {cfg.aggr_ratio} * {cfg.sparse_ratio}) = "
            f"{cfg.num_aggregated}; allowed: a ratio giving at least 1 aggregated patch"
        )
    if cfg.gumbel_tau <= 0:
        raise ValueError(
            f"config field 'gumbel_tau': invalid value {cfg.gumbel_tau!r}; allowed: > 0"
        )
    for name in ("ratio_ce_temperature", "infonce_temperature"):
        if getattr(cfg, name) <= 0:
            raise ValueError(
                f"config field {name!r}: invalid value {getattr(cfg, name)!r}; allowed: > 0"
            )
    if cfg.ratio_bins < 2:
        raise ValueError(
            f"config field 'ratio_bins': invalid value {cfg.ratio_bins!r}; allowed: >= 2"
        )
    if cfg.margin < 0:
        raise ValueError(f"config field 'margin': invalid value {cfg.margin!r}; allowed: >= 0")
    if cfg.selection not in SELECTIONS:
        raise ValueError(
            f"config field 'selection': invalid value {cfg.selection!r}; "
            f"allowed: {', '.join(SELECTIONS)}"
        )
    if cfg.selection != "learned" and cfg.decision == "gumbel_per_patch":
        raise ValueError(
            f"config field 'selection': invalid value {cfg.selection!r} with decision "
            "'gumbel_per_patch' (its keep count varies); allowed: learned, or decision "
            "topk / gumbel_topk"
        )


#: The preset registry: name -> (one-line description, field values).
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {}


def register_preset(name: str, description: str, **values: Any) -> None:
    """Add a preset; ``values`` override :class:`SEPSConfig` defaults (validated now)."""
    if name in PRESETS:
        raise ValueError(f"preset {name!r} is already registered")
    SEPSConfig(**values)  # fail at import time, not at first use
    PRESETS[name] = (description, dict(values))


register_preset(
    "code",
    "the open-source SEPS repository (lib/cross_net.py, lib/xttn.py, lib/vse.py)",
)
register_preset(
    "paper",
    "the paper's formulas (eqs. 1-7), as in the reference re-implementation",
    scoring="paper",
    dense_fusion="fused",
    aggregation="dual",
    hrpa="mean_topk",
    similarity_activation="none",
    decision="gumbel_topk",
    ratio_loss="separate",
    detach_selection=False,
)
register_preset(
    "laps",
    "LAPS, the code SEPS was built on: sparse text only, gradients through the patches",
    dense_fusion="none",
    detach_selection=False,
)


def _field_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(SEPSConfig))


def apply_overrides(base: SEPSConfig, overrides: Mapping[str, Any]) -> SEPSConfig:
    """``base`` with ``overrides``; unknown field names raise ``ValueError``."""
    names = _field_names()
    unknown = [k for k in overrides if k not in names]
    if unknown:
        raise ValueError(
            f"unknown config field(s) {', '.join(map(repr, unknown))}; "
            f"known fields: {', '.join(names)}"
        )
    return dataclasses.replace(base, **dict(overrides))


def get_config(preset: str = "code", **overrides: Any) -> SEPSConfig:
    """The config of a registered preset with ``overrides`` applied."""
    if preset not in PRESETS:
        raise ValueError(
            f"config field 'preset': invalid value {preset!r}; allowed: {', '.join(PRESETS)}"
        )
    return apply_overrides(SEPSConfig(**PRESETS[preset][1]), overrides)


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``field=value`` command-line override, typed by the field's default."""
    if "=" not in text:
        raise ValueError(f"override {text!r}: expected the form field=value")
    key, raw = (s.strip() for s in text.split("=", 1))
    fields = {f.name: f for f in dataclasses.fields(SEPSConfig)}
    if key not in fields:
        raise ValueError(f"unknown config field {key!r}; known fields: {', '.join(fields)}")
    default = fields[key].default
    value: Any
    try:
        if isinstance(default, bool):
            low = raw.lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            value = low in ("true", "1", "yes")
        elif isinstance(default, int):
            value = int(raw)
        elif isinstance(default, float):
            value = float(raw)
        else:
            value = raw
    except ValueError:
        raise ValueError(
            f"config field {key!r}: invalid value {raw!r}; expected {type(default).__name__}"
        ) from None
    return key, value


__all__ = [
    "CHOICES",
    "FIELD_HELP",
    "HEAD_KEY_OMITTED_AT_DEFAULT",
    "PRESETS",
    "SELECTIONS",
    "SEPSConfig",
    "apply_overrides",
    "get_config",
    "keep_count",
    "parse_override",
    "register_preset",
    "validate",
]
