"""Import of official weights: the open-source naming (code) and the reference naming (paper)."""

from __future__ import annotations

import pytest
import torch

from seps import SEPSHead, get_config
from seps.train.official import CheckpointError, export_state_dict, load_crossnet

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
    # present with the wrong shape is not also missing
    missing = next(p for p in msg.split(" | ") if "missing keys:" in p)
    assert "weight.3.weight" not in missing


def test_misshaped_key_reported_once():
    sd = official_code_state_dict()
    sd["cross_net.aggr_net.weight.1.weight"] = torch.zeros(2, 2)
    with pytest.raises(CheckpointError) as exc:
        load_crossnet(sd, preset="code", **SIZES)
    msg = str(exc.value)
    assert "mis-shaped keys: cross_net.aggr_net.weight.1.weight: expected shape (3, 16)" in msg
    assert "missing keys" not in msg and "unexpected keys" not in msg
    assert msg.count("aggr_net.weight.1.weight") == 1


def test_code_weights_into_paper_head_is_an_error():
    with pytest.raises(CheckpointError, match=r"missing keys: .*sparse_net_cap.score_predictor"):
        load_crossnet(official_code_state_dict(), preset="paper", **SIZES)


def test_not_a_mapping():
    with pytest.raises(CheckpointError, match="mapping"):
        load_crossnet([1, 2], preset="code", **SIZES)  # type: ignore[arg-type]


# ------------------------------------------------------------- full checkpoints
def _tiny_official_checkpoint(tmp_path, *, drop: str | None = None):
    from argparse import Namespace

    from seps.model.encoders import ImageEncoder, TextEncoder, tiny_bert_config, tiny_vision_config
    from seps.model.seps_model import SEPSModel

    torch.manual_seed(0)
    vcfg, tcfg = tiny_vision_config("vit", 32), tiny_bert_config(50)
    img_enc, txt_enc = ImageEncoder(vcfg, C, image_size=32), TextEncoder(tcfg, C)
    cfg = get_config(
        "code", embed_size=C, num_patches=img_enc.num_patches, sparse_ratio=0.5, aggr_ratio=0.4
    )
    model = SEPSModel(img_enc, txt_enc, SEPSHead(cfg)).eval()
    sd = {f"img_enc.{k}": v for k, v in img_enc.state_dict().items()}
    sd.update({f"txt_enc.{k}": v for k, v in txt_enc.state_dict().items()})
    sd.update(export_state_dict(model.cross_net))
    if drop:
        del sd[drop]
    path = tmp_path / "model_best.pth"
    opt = Namespace(embed_size=C, sparse_ratio=0.5, aggr_ratio=0.4, vit_type="vit", img_res=32)
    torch.save({"model": sd, "opt": opt, "epoch": 3}, path)
    return path, model, vcfg, tcfg


def _embed_and_score(model):
    g = torch.Generator().manual_seed(1)
    images = torch.randn(3, 3, 32, 32, generator=g)
    ids = torch.randint(5, 50, (4, 7), generator=g)
    lens = torch.tensor([7, 5, 4, 6])
    with torch.no_grad():
        img = model.encode_images(images)
        cap = model.encode_texts(ids, lens)
        return model(img, cap, lens, cap, lens)


def test_official_full_checkpoint_round_trip(tmp_path):
    from seps.train.official import load_checkpoint

    path, model, vcfg, tcfg = _tiny_official_checkpoint(tmp_path)
    loaded = load_checkpoint(path, vision=vcfg, text=tcfg)
    assert loaded.config.embed_size == C and loaded.config.aggr_ratio == 0.4
    torch.testing.assert_close(_embed_and_score(loaded), _embed_and_score(model), rtol=0, atol=0)


def test_official_full_checkpoint_errors(tmp_path):
    from seps.train.official import load_checkpoint

    path, _, vcfg, tcfg = _tiny_official_checkpoint(tmp_path, drop="txt_enc.fc.bias")
    with pytest.raises(CheckpointError, match=r"missing keys: txt_enc\.fc\.bias"):
        load_checkpoint(path, vision=vcfg, text=tcfg)
    bad = tmp_path / "not_a_checkpoint.pth"
    torch.save({"weights": 1}, bad)
    with pytest.raises(CheckpointError, match=r"not_a_checkpoint.pth.*expected a dict with key"):
        load_checkpoint(bad, vision=vcfg, text=tcfg)
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not torch")
    with pytest.raises(CheckpointError, match="not a readable torch file"):
        load_checkpoint(garbage, vision=vcfg, text=tcfg)
    with pytest.raises(CheckpointError, match="file not found"):
        load_checkpoint(tmp_path / "missing.pth", vision=vcfg, text=tcfg)


def test_official_full_checkpoint_misshaped_encoder_key_reported_once(tmp_path):
    from seps.train.official import load_checkpoint

    path, _, vcfg, tcfg = _tiny_official_checkpoint(tmp_path)
    ckpt = torch.load(path, weights_only=False)
    want = tuple(ckpt["model"]["txt_enc.fc.bias"].shape)
    ckpt["model"]["txt_enc.fc.bias"] = torch.zeros(want[0] + 1)
    ckpt["model"]["img_enc.vision_proj.bias"] = "not a tensor"
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError) as exc:
        load_checkpoint(path, vision=vcfg, text=tcfg)
    msg = str(exc.value)
    assert f"txt_enc.fc.bias: expected shape {want}, got ({want[0] + 1},)" in msg
    assert "img_enc.vision_proj.bias: expected a tensor, got str" in msg
    assert "missing keys" not in msg and "unexpected keys" not in msg
    assert msg.count("txt_enc.fc.bias") == 1 and msg.count("vision_proj.bias") == 1
