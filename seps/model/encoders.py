"""Image and text encoders with a projection to the joint embedding size ``C``.

- :class:`ImageEncoder`: a timm ViT / Swin (tokens from ``forward_features``) or a
  transformers ``ViTModel`` / ``SwinModel`` (``last_hidden_state``), then ``vision_proj``.
  Output ``(B, L_v, C)``; ``L_v`` is a perfect square exactly when there is no ``[CLS]``
  token, the convention the SEPS head uses to detect ``[CLS]`` (SPEC.md, "Inputs and
  outputs of the head").
- :class:`TextEncoder`: a transformers ``BertModel`` (``bert``) then ``fc``.

Attribute names follow the official code, so that an official checkpoint's keys
(``img_enc.visual_encoder.*``, ``img_enc.vision_proj.*``, ``txt_enc.bert.*``,
``txt_enc.fc.*``, less their prefix) load directly. The transformers backbones keep their
pooling layers (``add_pooling_layer=True``, the ``from_pretrained`` default the official
code used), so the checkpoints' ``pooler.*`` keys load too; the pooler output is unused.

Nothing here downloads unless asked to (``pretrained=True`` or a hub name); when
:func:`seps.io.hub.hub_offline` (``HF_HUB_OFFLINE`` set, or the hub unreachable), hub names
resolve from the local cache only and fail with a one-line error otherwise. A transformers
folder that holds weights is never silently built from its ``config.json`` alone, and a
pretrained BERT only takes a tokenizer of its own vocabulary size. ``tiny_*`` helpers give
small random-initialised configurations for CPU runs and tests.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from transformers import BertConfig, BertModel, PretrainedConfig, SwinConfig, ViTConfig

from ..io.hub import hub_offline, one_line

__all__ = [
    "TINY_BACKBONES",
    "TINY_TEXT_BACKBONES",
    "ImageEncoder",
    "TextEncoder",
    "build_image_encoder",
    "build_text_encoder",
    "tiny_bert_config",
    "tiny_timm_spec",
    "tiny_vision_config",
]

Source = Literal["timm", "hf"]
PathLike = str | os.PathLike[str]

#: Backbone names that select the tiny random-initialised configurations:
#: name -> (kind, forced source or None to follow ``source``, width).
#: ``tiny-vit-128`` is the ViT at width 128 (4 heads, FFN 256): the unimodal regime's
#: pilots found the 64-wide pair the limit of what a head can align on frozen features
#: (docs/regime.md, "Toward a regime that can see").
TINY_BACKBONES: dict[str, tuple[str, str | None, int]] = {
    "tiny-vit": ("vit", None, 64),
    "tiny-swin": ("swin", None, 64),
    "hf-tiny-vit": ("vit", "hf", 64),
    "hf-tiny-swin": ("swin", "hf", 64),
    "tiny-vit-128": ("vit", None, 128),
}

#: Text backbone names that select :func:`tiny_bert_config` (random initialisation, the
#: tokenizer trained on the captions): name -> width.
TINY_TEXT_BACKBONES: dict[str, int] = {"tiny-bert": 64, "tiny-bert-128": 128}

#: The widths the tiny configurations come in: one head per 32 channels, FFN twice the width.
TINY_WIDTHS = (64, 128)


def _check_width(width: int) -> int:
    if width not in TINY_WIDTHS:
        raise ValueError(f"width must be one of {TINY_WIDTHS}, got {width!r}")
    return width


def _check_kind(kind: str) -> str:
    if kind not in ("vit", "swin"):
        raise ValueError(f"kind must be 'vit' or 'swin', got {kind!r}")
    return kind


def _check_tiny_image_size(kind: str, image_size: int) -> None:
    # ViT: patch 8. Swin: patch 4, then one 2x2 merge over windows of 2 -> multiple of 16.
    step = 8 if kind == "vit" else 16
    if image_size < step or image_size % step:
        raise ValueError(
            f"image_size must be a positive multiple of {step} for the tiny {kind} "
            f"configuration, got {image_size}"
        )


def tiny_vision_config(
    kind: str = "vit", image_size: int = 32, width: int = 64
) -> ViTConfig | SwinConfig:
    """A small random-initialisable transformers vision configuration for CPU runs and tests.

    ``"vit"``: ``ViTConfig`` with patch 8, hidden 64, 2 layers, 2 heads, so
    ``N = (image_size / 8)^2`` patches plus ``[CLS]`` (32 px -> 16 + 1 tokens).
    ``"swin"``: ``SwinConfig`` with patch 4, ``embed_dim`` 32, depths ``(1, 1)``, heads
    ``(2, 2)``, window 2, so ``N = (image_size / 8)^2`` tokens of width 64 and no ``[CLS]``
    (32 px -> 16 tokens). ``image_size`` must be a multiple of 8 (ViT) or 16 (Swin).
    ``width`` 128 (ViT only) doubles the hidden size, heads and FFN.
    """
    _check_tiny_image_size(_check_kind(kind), image_size)
    _check_width(width)
    if kind == "vit":
        return ViTConfig(
            image_size=image_size,
            patch_size=8,
            hidden_size=width,
            num_hidden_layers=2,
            num_attention_heads=width // 32,
            intermediate_size=2 * width,
        )
    if width != 64:
        raise ValueError(f"the tiny swin comes at width 64 only, got {width}")
    return SwinConfig(
        image_size=image_size,
        patch_size=4,
        embed_dim=32,
        depths=[1, 1],
        num_heads=[2, 2],
        window_size=2,
        mlp_ratio=2.0,
    )


def tiny_timm_spec(
    kind: str = "vit", image_size: int = 32, width: int = 64
) -> tuple[str, dict[str, Any]]:
    """The timm model name and keyword overrides of the tiny ViT / Swin (same shapes as
    :func:`tiny_vision_config`): pass as ``timm.create_model(name, img_size=..., **kwargs)``."""
    _check_tiny_image_size(_check_kind(kind), image_size)
    _check_width(width)
    if kind == "vit":
        return "vit_tiny_patch16_224", {
            "patch_size": 8,
            "embed_dim": width,
            "depth": 2,
            "num_heads": width // 32,
            "mlp_ratio": 2.0,
        }
    if width != 64:
        raise ValueError(f"the tiny swin comes at width 64 only, got {width}")
    return "swin_tiny_patch4_window7_224", {
        "patch_size": 4,
        "embed_dim": 32,
        "depths": (1, 1),
        "num_heads": (2, 2),
        "window_size": 2,
        "mlp_ratio": 2.0,
    }


def tiny_bert_config(
    vocab_size: int, *, max_position_embeddings: int = 512, width: int = 64
) -> BertConfig:
    """A small random-initialisable ``BertConfig``: hidden ``width`` (64 or 128), 2 layers,
    one head per 32 channels, FFN twice the width, ``[PAD]`` id 0.
    ``max_position_embeddings`` bounds the caption length (512 as BERT, enough for dense
    captions)."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    _check_width(width)
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=width,
        num_hidden_layers=2,
        num_attention_heads=width // 32,
        intermediate_size=2 * width,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=0,
    )


@contextlib.contextmanager
def _hub_offline_guard() -> Iterator[None]:
    """While active, make ``huggingface_hub`` honour an ``HF_HUB_OFFLINE`` that was set after
    it was imported (it reads the variable once, at import); timm downloads through it and
    has no ``local_files_only`` switch."""
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - timm depends on huggingface_hub
        yield
        return
    old = getattr(constants, "HF_HUB_OFFLINE", False)
    if hub_offline():
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = old


def _local_path(pretrained: PathLike) -> Path:
    path = Path(pretrained).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"pretrained={os.fspath(pretrained)!r}: no such file or folder (expected True, "
            "False or a local path to the weights)"
        )
    return path


def _hf_vision_class(config: PretrainedConfig) -> type[nn.Module]:
    from transformers import SwinModel, ViTModel

    if isinstance(config, SwinConfig) or config.model_type == "swin":
        return SwinModel
    if isinstance(config, ViTConfig) or config.model_type == "vit":
        return ViTModel
    raise ValueError(
        f"backbone: expected a transformers ViT or Swin model, got model_type={config.model_type!r}"
    )


def _hf_from_pretrained(cls: Any, name_or_path: str, what: str, **kwargs: Any) -> Any:
    """``cls.from_pretrained`` that is cache-only offline and explains failures in one line."""
    local = Path(name_or_path).expanduser().exists()
    try:
        return cls.from_pretrained(name_or_path, local_files_only=local or hub_offline(), **kwargs)
    except Exception as exc:  # hub/IO errors differ across library versions
        raise RuntimeError(
            f"{what}={name_or_path!r}: could not load pretrained weights with "
            f"{getattr(cls, '__name__', cls)}.from_pretrained ({type(exc).__name__}: "
            f"{one_line(exc)}). Without internet pass a local folder (save_pretrained output) "
            "or a name that is in the local Hugging Face cache, or use random initialisation"
        ) from exc


def _weight_files(folder: str) -> list[str]:
    """The transformers weight files (``model.safetensors``, ``pytorch_model.bin`` or their
    shard indexes) in ``folder``; empty for a hub name or a folder with a config only."""
    from transformers.utils import (
        SAFE_WEIGHTS_INDEX_NAME,
        SAFE_WEIGHTS_NAME,
        WEIGHTS_INDEX_NAME,
        WEIGHTS_NAME,
    )

    path = Path(folder).expanduser()
    names = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)
    return [n for n in names if (path / n).is_file()] if path.is_dir() else []


class ImageEncoder(nn.Module):
    """Vision backbone plus a linear projection to the joint size ``C``.

    Args:
        backbone: a timm model name (``source="timm"``), a transformers hub name or local
            folder (``source="hf"``), or a ``ViTConfig`` / ``SwinConfig`` (random init,
            transformers).
        embed_size: joint embedding size ``C``.
        image_size: input resolution (square) the encoder is built for; ``num_patches``
            is computed at this size.
        pretrained: ``False`` (random init), ``True`` (download from the hub; fails
            offline with a clear error) or a local path: for timm a state-dict file
            (``.pth``/``.bin``/``.safetensors``, loaded through
            ``pretrained_cfg_overlay=dict(file=path)`` so timm's own key filtering and
            position-embedding resampling apply), for transformers a ``save_pretrained``
            folder. A transformers ``backbone`` folder that holds weights needs
            ``pretrained`` set (its own path or ``True``): random init from such a folder is
            refused, since it would ignore the weights.
        source: ``"timm"`` or ``"hf"`` (ignored when ``backbone`` is a config).
        model_kwargs: extra keyword arguments for ``timm.create_model`` (timm only).

    Attributes:
        visual_encoder: the backbone (official name).
        vision_proj: ``nn.Linear(hidden, C)`` (official name).
        has_cls: whether the output starts with a ``[CLS]`` token.
        hidden_size: width of the backbone tokens.

    Token conventions: timm ViTs keep ``[CLS]`` first and drop any other prefix tokens
    (registers, distillation token); timm Swin's ``(B, H, W, C)`` map is flattened to
    ``(B, H*W, C)``; transformers ``ViTModel`` gives ``[CLS]`` first, ``SwinModel`` no
    ``[CLS]``. A transformers ViT fed a resolution other than its configured one
    interpolates its position embeddings.
    """

    def __init__(
        self,
        backbone: str | PretrainedConfig,
        embed_size: int,
        *,
        image_size: int = 224,
        pretrained: bool | PathLike = False,
        source: Source = "timm",
        model_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if embed_size < 1:
            raise ValueError(f"embed_size must be positive, got {embed_size}")
        if image_size < 1:
            raise ValueError(f"image_size must be positive, got {image_size}")
        if isinstance(backbone, PretrainedConfig):
            source = "hf"
        if source not in ("timm", "hf"):
            raise ValueError(f"source must be 'timm' or 'hf', got {source!r}")
        self.source: str = source
        self.image_size = int(image_size)
        self._num_patches: int | None = None

        if source == "timm":
            if not isinstance(backbone, str):
                raise TypeError(f"backbone: expected a timm model name, got {type(backbone)}")
            self.visual_encoder = self._create_timm(
                backbone, pretrained, image_size, dict(model_kwargs or {})
            )
            model = self.visual_encoder
            self.has_cls = bool(getattr(model, "has_class_token", False)) and (
                getattr(model, "cls_token", None) is not None
            )
            self.hidden_size = int(model.num_features)
        else:
            if model_kwargs:
                raise ValueError("model_kwargs is only supported with source='timm'")
            self.visual_encoder = self._create_hf(backbone, pretrained)
            config = self.visual_encoder.config
            self.has_cls = config.model_type != "swin"
            self.hidden_size = int(config.hidden_size)
        self.vision_proj = nn.Linear(self.hidden_size, embed_size)

    @staticmethod
    def _create_timm(
        name: str, pretrained: bool | PathLike, image_size: int, kwargs: dict[str, Any]
    ) -> nn.Module:
        import timm

        kwargs.setdefault("num_classes", 0)
        kwargs.setdefault("img_size", image_size)
        if pretrained is True:
            try:
                with _hub_offline_guard():
                    return timm.create_model(name, pretrained=True, **kwargs)
            except Exception as exc:  # hub/IO errors differ across library versions
                raise RuntimeError(
                    f"backbone={name!r}, pretrained=True: could not fetch timm weights "
                    f"({type(exc).__name__}: {one_line(exc)}). Without internet pass "
                    "pretrained=<local weights file> or pretrained=False"
                ) from exc
        if pretrained is False or pretrained is None:
            return timm.create_model(name, pretrained=False, **kwargs)
        path = _local_path(pretrained)
        return timm.create_model(
            name, pretrained=True, pretrained_cfg_overlay={"file": str(path)}, **kwargs
        )

    @staticmethod
    def _create_hf(backbone: str | PretrainedConfig, pretrained: bool | PathLike) -> nn.Module:
        if isinstance(backbone, PretrainedConfig):
            cls = _hf_vision_class(backbone)
            if pretrained is True:
                raise ValueError(
                    "pretrained=True needs a hub name or folder as backbone, not a config; "
                    "pass pretrained=<local folder> or pretrained=False"
                )
            if pretrained is False or pretrained is None:
                return cls(backbone, add_pooling_layer=True)
            path = _local_path(pretrained)
            return _hf_from_pretrained(cls, str(path), "pretrained", add_pooling_layer=True)
        if not isinstance(backbone, str):
            raise TypeError(f"backbone: expected a name, folder or config, got {type(backbone)}")
        if pretrained is False or pretrained is None:
            from transformers import AutoConfig

            weights = _weight_files(backbone)
            if weights:
                # Building from config.json alone would drop these weights without a word.
                raise ValueError(
                    f"backbone={backbone!r} holds pretrained weights ({weights[0]}) but "
                    "pretrained is unset, which would build a random-init model from its "
                    f"config.json: pass --pretrained {backbone} (pretrained=<folder>) to load "
                    "them, or a folder holding only config.json for random initialisation"
                )
            config = _hf_from_pretrained(AutoConfig, backbone, "backbone")
            return _hf_vision_class(config)(config, add_pooling_layer=True)
        where, what = (
            (backbone, "backbone")
            if pretrained is True
            else (str(_local_path(pretrained)), "pretrained")
        )
        from transformers import AutoConfig

        config = _hf_from_pretrained(AutoConfig, where, what)
        return _hf_from_pretrained(_hf_vision_class(config), where, what, add_pooling_layer=True)

    def backbone_tokens(self, images: torch.Tensor) -> torch.Tensor:
        """Backbone tokens before the projection: ``(B, 3, H, W)`` -> ``(B, L_v, hidden)``."""
        model = self.visual_encoder
        if self.source == "hf":
            kwargs: dict[str, Any] = {}
            size = model.config.image_size
            size = tuple(size) if isinstance(size, list | tuple) else (size, size)
            if model.config.model_type == "vit" and tuple(images.shape[-2:]) != size:
                kwargs["interpolate_pos_encoding"] = True
            return model(pixel_values=images, **kwargs).last_hidden_state
        feats = model.forward_features(images)
        if feats.ndim == 4:
            fmt = getattr(model, "output_fmt", None)
            nhwc = fmt == "NHWC" or (fmt is None and "swin" in type(model).__name__.lower())
            return feats.flatten(1, 2) if nhwc else feats.flatten(2).transpose(1, 2)
        if feats.ndim != 3:
            raise ValueError(f"unexpected timm feature shape {tuple(feats.shape)}")
        n_prefix = int(getattr(model, "num_prefix_tokens", 0))
        if self.has_cls:
            return torch.cat([feats[:, :1], feats[:, n_prefix:]], dim=1) if n_prefix > 1 else feats
        return feats[:, n_prefix:]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Encode images.

        Args:
            images: ``(B, 3, H, W)``.

        Returns:
            ``(B, L_v, C)`` with ``L_v = N + 1`` (``[CLS]`` first) or ``L_v = N`` (no
            ``[CLS]``), ``N`` a perfect square.

        Raises:
            ValueError: when the spatial grid is not square, because the SEPS head could
                then not tell whether a ``[CLS]`` token is present.
        """
        tokens = self.backbone_tokens(images)
        n = tokens.shape[1] - int(self.has_cls)
        if n < 1 or math.isqrt(n) ** 2 != n:
            raise ValueError(
                f"image encoder produced {n} spatial tokens for input {tuple(images.shape)}; "
                "expected a square grid (the SEPS head detects [CLS] by L_v not being a "
                "perfect square), so use square inputs"
            )
        return self.vision_proj(tokens)

    @property
    def num_patches(self) -> int:
        """Number of spatial tokens ``N`` at ``image_size`` (one dummy forward, cached)."""
        if self._num_patches is None:
            param = next(self.visual_encoder.parameters())
            was_training = self.visual_encoder.training
            self.visual_encoder.eval()
            try:
                with torch.no_grad():
                    dummy = torch.zeros(
                        1,
                        3,
                        self.image_size,
                        self.image_size,
                        device=param.device,
                        dtype=param.dtype,
                    )
                    tokens = self.backbone_tokens(dummy)
            finally:
                self.visual_encoder.train(was_training)
            self._num_patches = int(tokens.shape[1]) - int(self.has_cls)
        return self._num_patches


class TextEncoder(nn.Module):
    """BERT plus a linear projection to the joint size ``C``.

    Args:
        bert: a hub name (e.g. ``"bert-base-uncased"``) or local folder loaded with
            ``BertModel.from_pretrained`` (cache-only when ``HF_HUB_OFFLINE`` is set), or a
            ``BertConfig`` for random initialisation.
        embed_size: joint embedding size ``C``.

    Attributes:
        bert: the ``BertModel`` (official name; its pooler is kept so official
            ``txt_enc.bert.pooler.*`` keys load, but it is unused).
        fc: ``nn.Linear(hidden, C)`` (official name).

    The attention mask is built from ``lens`` (positions ``>= lens[b]`` are padding). The
    official code uses ``ids != 0`` instead; the two agree except when augmentation draws
    ``[PAD]`` as a random replacement token inside a caption, which the official mask
    would hide and this one keeps.
    """

    def __init__(self, bert: PathLike | BertConfig, embed_size: int) -> None:
        super().__init__()
        if embed_size < 1:
            raise ValueError(f"embed_size must be positive, got {embed_size}")
        if isinstance(bert, BertConfig):
            self.bert = BertModel(bert, add_pooling_layer=True)
        elif isinstance(bert, str | os.PathLike):
            self.bert = _hf_from_pretrained(BertModel, os.fspath(bert), "bert")
        else:
            raise TypeError(f"bert: expected a name, folder or BertConfig, got {type(bert)}")
        self.hidden_size = int(self.bert.config.hidden_size)
        self.fc = nn.Linear(self.hidden_size, embed_size)

    @property
    def vocab_size(self) -> int:
        """Size of the word-embedding table."""
        return int(self.bert.config.vocab_size)

    def forward(self, ids: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """Encode padded captions.

        Args:
            ids: ``(B, L)`` token ids (``[CLS] ... [SEP]`` then padding).
            lens: ``(B,)`` real lengths, ``[CLS]`` and ``[SEP]`` included.

        Returns:
            ``(B, L, C)`` word features; rows ``>= lens[b]`` are padding outputs.
        """
        if ids.ndim != 2:
            raise ValueError(f"ids: expected (B, L), got shape {tuple(ids.shape)}")
        lens = torch.as_tensor(lens, device=ids.device)
        if lens.shape != ids.shape[:1]:
            raise ValueError(f"lens: expected shape ({ids.shape[0]},), got {tuple(lens.shape)}")
        positions = torch.arange(ids.shape[1], device=ids.device)
        mask = (positions[None, :] < lens[:, None]).long()
        hidden = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.fc(hidden)


def build_image_encoder(
    backbone: str,
    embed_size: int,
    *,
    image_size: int = 224,
    pretrained: bool | PathLike = False,
    source: Source = "timm",
    model_kwargs: Mapping[str, Any] | None = None,
) -> ImageEncoder:
    """Build an :class:`ImageEncoder` from a backbone name.

    ``"tiny-vit"`` / ``"tiny-swin"`` select the tiny configuration in the implementation
    chosen by ``source`` (timm: :func:`tiny_timm_spec`, transformers:
    :func:`tiny_vision_config`); ``"hf-tiny-vit"`` / ``"hf-tiny-swin"`` always use
    transformers; ``"tiny-vit-128"`` is the ViT at width 128 (:data:`TINY_BACKBONES`).
    Any other name goes to ``timm.create_model`` (``source="timm"``) or to
    transformers (``source="hf"``: hub name or local folder).
    """
    if backbone in TINY_BACKBONES:
        kind, forced, width = TINY_BACKBONES[backbone]
        if (forced or source) == "hf":
            return ImageEncoder(
                tiny_vision_config(kind, image_size, width),
                embed_size,
                image_size=image_size,
                pretrained=pretrained,
            )
        name, kwargs = tiny_timm_spec(kind, image_size, width)
        kwargs.update(model_kwargs or {})
        return ImageEncoder(
            name,
            embed_size,
            image_size=image_size,
            pretrained=pretrained,
            source="timm",
            model_kwargs=kwargs,
        )
    return ImageEncoder(
        backbone,
        embed_size,
        image_size=image_size,
        pretrained=pretrained,
        source=source,
        model_kwargs=model_kwargs,
    )


def build_text_encoder(
    name_or_config: PathLike | BertConfig, embed_size: int, vocab_size: int | None = None
) -> TextEncoder:
    """Build a :class:`TextEncoder`.

    ``"tiny-bert"`` / ``"tiny-bert-128"`` select :func:`tiny_bert_config` at width 64 / 128
    (:data:`TINY_TEXT_BACKBONES`; ``vocab_size`` required, e.g.
    ``len(tokenizer)``); a ``BertConfig`` is used as is, with ``vocab_size`` overriding
    its vocabulary size when given; any other string is a hub name or local folder, and a
    given ``vocab_size`` (the tokenizer size) must then equal the model's vocabulary size: a
    pretrained BERT reads ids of its own vocabulary only (a smaller tokenizer is almost surely
    another vocabulary, such as one trained on the captions).
    """
    if isinstance(name_or_config, str) and name_or_config in TINY_TEXT_BACKBONES:
        if vocab_size is None:
            raise ValueError(f"vocab_size is required for {name_or_config!r} (e.g. len(tokenizer))")
        width = TINY_TEXT_BACKBONES[name_or_config]
        return TextEncoder(tiny_bert_config(vocab_size, width=width), embed_size)
    if isinstance(name_or_config, BertConfig):
        config = name_or_config
        if vocab_size is not None and vocab_size != config.vocab_size:
            config = copy.deepcopy(config)
            config.vocab_size = vocab_size
        return TextEncoder(config, embed_size)
    encoder = TextEncoder(name_or_config, embed_size)
    if vocab_size is not None and vocab_size != encoder.vocab_size:
        raise ValueError(
            f"vocab_size={vocab_size} (the tokenizer's) does not match the "
            f"{encoder.vocab_size} word embeddings of {os.fspath(name_or_config)!r}: pass "
            "--tokenizer <that model's tokenizer folder or hub name> (tokenizer=...)"
        )
    return encoder
