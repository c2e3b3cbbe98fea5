"""Import of official weights: the open-source naming (code) and the reference naming (paper)."""

from __future__ import annotations

import pytest
import torch

from seps import SEPSHead, get_config
from seps.official import CheckpointError, export_state_dict, load_crossnet

C, N = 16, 9
SIZES = dict(embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5)


def inputs():
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(3, N + 1, C, generator=g),
        torch.randn(4, 5, C, generator=g),
        torch.tensor([5, 3, 2, 4]),
        torch.randn(4, 7, C, generator=g),
        torch.tensor([7, 6, 2, 5]),
    )


def official_code_state_dict(prefix: str = "cross_net.") -> dict[str, torch.Tensor]:
    """A state dict spelled exactly as the open-source repository's cross_net."""
    g = torch.Generator().manual_seed(1)
    h, nc = int(0.2 * C), int(N * 0.5 * 0.5)
    sd = {
        "aggr_net.weight.0.weight": torch.rand(C, generator=g) + 0.5,
        "aggr_net.weight.0.bias": torch.randn(C, generator=g),
        "aggr_net.weight.1.weight": torch.randn(h, C, generator=g),
        "aggr_net.weight.1.bias": torch.randn(h, generator=g),
        "aggr_net.weight.3.weight": torch.randn(nc, h, generator=g),
        "aggr_net.weight.3.bias": torch.randn(nc, generator=g),
        "aggr_net.scale": torch.full((1, 1, 1), 1.3),
    }
    return {prefix + k: v for k, v in sd.items()}


@pytest.mark.parametrize("prefix", ["cross_net.", "", "module.cross_net."])
def test_official_code_names_load_into_head(prefix):
    sd = official_code_state_dict(prefix)
    head = load_crossnet(sd, preset="code", **SIZES)
    assert not head.training
    net = head.aggregation.nets["shared"]
    torch.testing.assert_close(net[1].weight, sd[prefix + "aggr_net.weight.1.weight"])
    torch.testing.assert_close(net[3].bias, sd[prefix + "aggr_net.weight.3.bias"])
    assert head.aggregation.scale.item() == pytest.approx(1.3)
    assert head(*inputs()).shape == (3, 4)


@pytest.mark.parametrize("preset", ["code", "paper"])
def test_round_trip_gives_identical_similarities(preset):
    torch.manual_seed(0)
    src = SEPSHead(get_config(preset, **SIZES)).eval()
    for p in src.parameters():  # move away from the initial values
        p.data.add_(0.1 * torch.randn_like(p))
    sd = export_state_dict(src)
    if preset == "paper":
        assert {
            "cross_net.sparse_net_cap.score_predictor.0.weight",
            "cross_net.sparse_net_long.score_predictor.2.bias",
            "cross_net.aggr_net.weight_sparse.1.weight",
            "cross_net.aggr_net.weight_dense.3.weight",
            "cross_net.aggr_net.scale",
            "cross_net.hrpa.relevance_mlp.0.weight",
            "cross_net.hrpa.relevance_mlp.2.bias",
        } <= set(sd)
    else:
        assert set(sd) == set(official_code_state_dict())
    assert sd["cross_net.aggr_net.scale"].shape == (1, 1, 1)
    dst = load_crossnet(sd, preset=preset, **SIZES)
    with torch.no_grad():
        torch.testing.assert_close(dst(*inputs()), src(*inputs()), rtol=0, atol=0)


def test_errors_list_missing_unexpected_and_misshaped_keys():
    sd = official_code_state_dict()
    del sd["cross_net.aggr_net.weight.1.bias"]
    sd["cross_net.aggr_net.weight.3.weight"] = torch.zeros(3, 3)
    sd["cross_net.something_else.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointError) as exc:
        load_crossnet(sd, preset="code", **SIZES)
    msg = str(exc.value)
    assert "missing keys: aggr_net.weight.1.bias" in msg
    assert "unexpected keys: cross_net.something_else.weight" in msg
    assert "cross_net.aggr_net.weight.3.weight: expected shape (2, 3), got (3, 3)" in msg


def test_code_weights_into_paper_head_is_an_error():
    with pytest.raises(CheckpointError, match=r"missing keys: .*sparse_net_cap.score_predictor"):
        load_crossnet(official_code_state_dict(), preset="paper", **SIZES)


def test_not_a_mapping():
    with pytest.raises(CheckpointError, match="mapping"):
        load_crossnet([1, 2], preset="code", **SIZES)  # type: ignore[arg-type]
