"""Config validation, presets and overrides."""

from __future__ import annotations

import pytest

from seps.core.config import PRESETS, SEPSConfig, get_config, keep_count, parse_override


def test_presets_registry_and_values():
    assert set(PRESETS) >= {"code", "paper", "laps"}
    code, paper, laps = get_config("code"), get_config("paper"), get_config("laps")
    assert (code.scoring, code.dense_fusion, code.aggregation, code.hrpa) == (
        "code",
        "dual_branch",
        "shared",
        "mean",
    )
    assert (code.similarity_activation, code.decision, code.ratio_loss) == (
        "leaky_relu",
        "topk",
        "unified",
    )
    assert code.detach_selection is True
    assert (paper.scoring, paper.dense_fusion, paper.aggregation, paper.hrpa) == (
        "paper",
        "fused",
        "dual",
        "mean_topk",
    )
    assert (paper.similarity_activation, paper.decision, paper.ratio_loss) == (
        "none",
        "gumbel_topk",
        "separate",
    )
    assert paper.detach_selection is False
    assert (laps.dense_fusion, laps.aggregation, laps.hrpa, laps.decision) == (
        "none",
        "shared",
        "mean",
        "topk",
    )
    assert laps.similarity_activation == "leaky_relu" and laps.detach_selection is False


def test_derived_sizes_match_spec_examples():
    vit = get_config("code")
    assert (vit.num_keep, vit.num_aggregated) == (98, 39)
    swin = get_config("code", num_patches=49, sparse_ratio=0.8, aggr_ratio=0.6)
    assert (swin.num_keep, swin.num_aggregated) == (40, 23)
    assert keep_count(30, 0.1) == 3  # not 4 from 0.1 * 30 = 3.0000000000000004


def test_overrides_apply_and_validate():
    cfg = get_config("paper", hrpa="mean", top_k=3)
    assert cfg.hrpa == "mean" and cfg.top_k == 3 and cfg.scoring == "paper"
    assert cfg.replace(decision="topk").decision == "topk"


@pytest.mark.parametrize(
    ("overrides", "field", "hint"),
    [
        ({"scoring": "magic"}, "scoring", "code, paper"),
        ({"dense_fusion": "both"}, "dense_fusion", "dual_branch"),
        ({"aggregation": "triple"}, "aggregation", "shared, dual, none"),
        ({"hrpa": "max"}, "hrpa", "mean_topk"),
        ({"similarity_activation": "relu"}, "similarity_activation", "leaky_relu"),
        ({"decision": "soft"}, "decision", "gumbel_per_patch"),
        ({"ratio_loss": "mse"}, "ratio_loss", "eq7"),
        ({"sparse_ratio": 0.0}, "sparse_ratio", "(0, 1]"),
        ({"sparse_ratio": 1.5}, "sparse_ratio", "(0, 1]"),
        ({"top_k": 0}, "top_k", ">= 1"),
        ({"aggr_ratio": 0.001}, "aggr_ratio", "at least 1 aggregated patch"),
        ({"detach_selection": "yes"}, "detach_selection", "true or false"),
        ({"embed_size": 2.5}, "embed_size", "integer"),
        ({"gumbel_tau": 0.0}, "gumbel_tau", "> 0"),
    ],
)
def test_invalid_values_name_field_value_and_allowed(overrides, field, hint):
    with pytest.raises(ValueError) as exc:
        get_config("code", **overrides)
    msg = str(exc.value)
    assert repr(field) in msg and hint in msg
    assert repr(next(iter(overrides.values()))) in msg


def test_aggregation_none_accepts_tiny_aggr_ratio():
    assert get_config("code", aggregation="none", aggr_ratio=0.001).aggregation == "none"


def test_unknown_field_and_preset():
    with pytest.raises(ValueError, match=r"unknown config field.*'hrpa_k'"):
        get_config("code", hrpa_k=3)
    with pytest.raises(ValueError, match=r"'preset'.*'nope'.*code, paper, laps"):
        get_config("nope")


def test_parse_override_types():
    assert parse_override("top_k=7") == ("top_k", 7)
    assert parse_override("sparse_ratio=0.3") == ("sparse_ratio", 0.3)
    assert parse_override("detach_selection=false") == ("detach_selection", False)
    assert parse_override("hrpa=mean_topk") == ("hrpa", "mean_topk")
    with pytest.raises(ValueError, match=r"top_k.*'x'"):
        parse_override("top_k=x")
    with pytest.raises(ValueError, match="field=value"):
        parse_override("top_k")
    with pytest.raises(ValueError, match="unknown config field 'nope'"):
        parse_override("nope=1")


def test_config_is_frozen():
    cfg = SEPSConfig()
    with pytest.raises(AttributeError):
        cfg.hrpa = "mean_topk"  # type: ignore[misc]
