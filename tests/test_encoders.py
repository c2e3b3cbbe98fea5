"""Tests of the image and text encoders (seps.model.encoders), tiny random configurations only."""

from __future__ import annotations

import math
from pathlib import Path

import huggingface_hub
import pytest
import torch
from safetensors.torch import save_file

from seps.model.encoders import (
    ImageEncoder,
    TextEncoder,
    build_image_encoder,
    build_text_encoder,
    tiny_bert_config,
    tiny_timm_spec,
    tiny_vision_config,
)

C = 24
IMAGE = 32


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # huggingface_hub reads the variable once at import; make late setting effective too.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True, raising=False)


def _is_square(n: int) -> bool:
    return math.isqrt(n) ** 2 == n


def _assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


# name, has [CLS], N at 32 px
CASES = [
    ("tiny-vit", "timm", True, 16),
    ("tiny-swin", "timm", False, 16),
    ("hf-tiny-vit", "timm", True, 16),
    ("hf-tiny-swin", "timm", False, 16),
]


@pytest.mark.parametrize(("backbone", "source", "has_cls", "n"), CASES)
def test_image_encoder_shapes_and_cls_convention(
    backbone: str, source: str, has_cls: bool, n: int
) -> None:
    torch.manual_seed(0)
    enc = build_image_encoder(backbone, C, image_size=IMAGE, source=source).eval()
    assert enc.source == ("hf" if backbone.startswith("hf-") else "timm")
    images = torch.randn(2, 3, IMAGE, IMAGE)
    out = enc(images)
    assert out.shape == (2, n + int(has_cls), C)
    assert enc.has_cls is has_cls
    assert enc.num_patches == n
    # The convention the SEPS head relies on: perfect square exactly when there is no [CLS].
    assert _is_square(out.shape[1]) is (not has_cls)
    # Images are encoded independently (no batch mixing) and the output is finite.
    assert torch.isfinite(out).all()
    torch.testing.assert_close(enc(images[1:]), out[1:], rtol=1e-4, atol=1e-5)
    keys = enc.state_dict().keys()
    assert any(k.startswith("visual_encoder.") for k in keys)
    assert {"vision_proj.weight", "vision_proj.bias"} <= set(keys)


def test_tiny_source_hf_and_larger_images() -> None:
    enc = build_image_encoder("tiny-vit", C, image_size=48, source="hf").eval()
    assert enc.source == "hf" and enc.num_patches == 36
    assert enc(torch.randn(1, 3, 48, 48)).shape == (1, 37, C)
    # A transformers ViT fed another resolution interpolates its position embeddings.
    assert enc(torch.randn(1, 3, 32, 32)).shape == (1, 17, C)
    swin = build_image_encoder("tiny-swin", C, image_size=64).eval()
    assert swin.num_patches == 64 and swin(torch.randn(1, 3, 64, 64)).shape == (1, 64, C)
    with pytest.raises(ValueError, match="multiple of 16"):
        tiny_vision_config("swin", 40)


def test_timm_vit_drops_register_tokens_keeps_cls() -> None:
    name, kwargs = tiny_timm_spec("vit", IMAGE)
    enc = ImageEncoder(name, C, image_size=IMAGE, model_kwargs={**kwargs, "reg_tokens": 3}).eval()
    assert enc.visual_encoder.num_prefix_tokens == 4
    images = torch.randn(2, 3, IMAGE, IMAGE)
    tokens = enc.backbone_tokens(images)
    raw = enc.visual_encoder.forward_features(images)
    assert tokens.shape == (2, 17, 64)
    assert torch.equal(tokens[:, 0], raw[:, 0])  # [CLS] first
    assert torch.equal(tokens[:, 1:], raw[:, 4:])  # registers dropped
    assert enc(images).shape == (2, 17, C)


def test_non_square_grid_is_rejected() -> None:
    enc = build_image_encoder("hf-tiny-swin", C, image_size=IMAGE).eval()
    with pytest.raises(ValueError, match="square grid"):
        enc(torch.randn(1, 3, 32, 64))


@pytest.mark.parametrize("kind", ["vit", "swin"])
@pytest.mark.parametrize("fmt", ["pth", "safetensors"])
def test_timm_pretrained_local_file(kind: str, fmt: str, tmp_path: Path) -> None:
    torch.manual_seed(1)
    src = build_image_encoder(f"tiny-{kind}", C, image_size=IMAGE)
    file = tmp_path / f"weights.{fmt}"
    state = {k: v.contiguous() for k, v in src.visual_encoder.state_dict().items()}
    if fmt == "pth":
        torch.save(state, file)
    else:
        save_file(state, str(file))
    torch.manual_seed(2)
    fresh = build_image_encoder(f"tiny-{kind}", C, image_size=IMAGE)
    loaded = build_image_encoder(f"tiny-{kind}", C, image_size=IMAGE, pretrained=file)
    # Not vacuous: a fresh random init differs from the saved weights.
    assert not torch.equal(
        fresh.visual_encoder.patch_embed.proj.weight, src.visual_encoder.patch_embed.proj.weight
    )
    _assert_same_weights(loaded.visual_encoder, src.visual_encoder)
    images = torch.randn(1, 3, IMAGE, IMAGE)
    torch.testing.assert_close(
        loaded.eval().backbone_tokens(images), src.eval().backbone_tokens(images)
    )


@pytest.mark.parametrize("kind", ["vit", "swin"])
def test_hf_pretrained_local_folder(kind: str, tmp_path: Path) -> None:
    torch.manual_seed(1)
    src = build_image_encoder(f"hf-tiny-{kind}", C, image_size=IMAGE)
    src.visual_encoder.save_pretrained(tmp_path / "backbone")
    torch.manual_seed(2)
    fresh = build_image_encoder(f"hf-tiny-{kind}", C, image_size=IMAGE)
    loaded = build_image_encoder(
        f"hf-tiny-{kind}", C, image_size=IMAGE, pretrained=tmp_path / "backbone"
    )
    # A folder passed as the backbone name with source="hf" loads the same way.
    by_name = ImageEncoder(
        str(tmp_path / "backbone"), C, image_size=IMAGE, pretrained=True, source="hf"
    )
    ref = src.visual_encoder.embeddings.patch_embeddings.projection.weight
    assert not torch.equal(fresh.visual_encoder.embeddings.patch_embeddings.projection.weight, ref)
    _assert_same_weights(loaded.visual_encoder, src.visual_encoder)
    _assert_same_weights(by_name.visual_encoder, src.visual_encoder)
    assert loaded.has_cls is (kind == "vit")


def test_official_image_keys_load_directly() -> None:
    torch.manual_seed(0)
    src = build_image_encoder("hf-tiny-vit", C, image_size=IMAGE)
    official = {f"img_enc.{k}": v for k, v in src.state_dict().items()}
    assert "img_enc.visual_encoder.embeddings.cls_token" in official
    assert "img_enc.visual_encoder.pooler.dense.weight" in official
    dst = build_image_encoder("hf-tiny-vit", C, image_size=IMAGE)
    stripped = {k.removeprefix("img_enc."): v for k, v in official.items()}
    dst.load_state_dict(stripped, strict=True)
    _assert_same_weights(dst, src)


def test_pretrained_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        build_image_encoder("tiny-vit", C, image_size=IMAGE, pretrained=tmp_path / "missing.pth")
    with pytest.raises(RuntimeError, match="pretrained=True"):
        build_image_encoder("vit_tiny_patch16_224", C, image_size=IMAGE, pretrained=True)
    with pytest.raises(RuntimeError, match="could not load pretrained weights"):
        ImageEncoder("no-such-org/no-such-vit", C, pretrained=True, source="hf")
    with pytest.raises(ValueError, match="pretrained=True"):
        ImageEncoder(tiny_vision_config("vit"), C, pretrained=True)


def test_text_encoder_shapes_padding_and_keys() -> None:
    torch.manual_seed(0)
    enc = build_text_encoder("tiny-bert", C, vocab_size=50).eval()
    keys = set(enc.state_dict())
    assert any(k.startswith("bert.embeddings.") for k in keys)
    assert "bert.pooler.dense.weight" in keys
    assert {"fc.weight", "fc.bias"} <= keys
    assert enc.vocab_size == 50

    short = torch.tensor([[2, 10, 11, 3]])
    long = torch.tensor([[2, 12, 13, 14, 15, 16, 3]])
    ids = torch.zeros(2, 7, dtype=torch.long)
    ids[0, :4], ids[1] = short[0], long[0]
    lens = torch.tensor([4, 7])
    out = enc(ids, lens)
    assert out.shape == (2, 7, C)
    alone = enc(short, torch.tensor([4]))
    torch.testing.assert_close(out[0, :4], alone[0], rtol=1e-4, atol=1e-5)
    # Padding content does not matter either, only lens does.
    noisy = ids.clone()
    noisy[0, 4:] = torch.tensor([20, 21, 22])
    torch.testing.assert_close(enc(noisy, lens)[0, :4], out[0, :4], rtol=1e-4, atol=1e-5)
    # ... and the mask is really applied (not vacuous): attending to the padding changes it.
    assert not torch.allclose(enc(noisy, torch.tensor([7, 7]))[0, :4], out[0, :4], atol=1e-4)
    with pytest.raises(ValueError, match="lens"):
        enc(ids, torch.tensor([4]))


def test_text_encoder_from_config_folder_and_vocab_override(tmp_path: Path) -> None:
    torch.manual_seed(0)
    src = TextEncoder(tiny_bert_config(40), C)
    src.bert.save_pretrained(tmp_path / "bert")
    loaded = build_text_encoder(str(tmp_path / "bert"), C)
    _assert_same_weights(loaded.bert, src.bert)
    assert build_text_encoder(tiny_bert_config(40), C, vocab_size=60).vocab_size == 60
    with pytest.raises(ValueError, match="vocab_size"):
        build_text_encoder(str(tmp_path / "bert"), C, vocab_size=100)
    with pytest.raises(ValueError, match="vocab_size is required"):
        build_text_encoder("tiny-bert", C)
    with pytest.raises(RuntimeError, match="bert="):
        TextEncoder("no-such-org/no-such-bert", C)


def test_width_128_backbones_double_the_tiny_width() -> None:
    img = build_image_encoder("tiny-vit-128", C, image_size=IMAGE).eval()
    assert img.backbone_tokens(torch.randn(1, 3, IMAGE, IMAGE)).shape == (1, 17, 128)
    hf = build_image_encoder("tiny-vit-128", C, image_size=IMAGE, source="hf")
    assert hf.visual_encoder.config.hidden_size == 128
    txt = build_text_encoder("tiny-bert-128", C, vocab_size=40)
    assert txt.bert.config.hidden_size == 128 and txt.bert.config.num_attention_heads == 4
    assert build_text_encoder("tiny-bert", C, vocab_size=40).bert.config.hidden_size == 64
    with pytest.raises(ValueError, match="width must be one of"):
        tiny_bert_config(40, width=96)
    with pytest.raises(ValueError, match="width 64 only"):
        tiny_timm_spec("swin", 32, width=128)
