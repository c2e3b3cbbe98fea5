"""The full retrieval model: image encoder, text encoder and the SEPS head.

Attribute names follow the official ``lib/vse.py`` (``img_enc``, ``txt_enc``,
``cross_net``) so that an official ``model_best.pth`` maps onto it key by key
(:func:`seps.train.official.load_checkpoint`).

Under the ``frozen`` training protocol the backbones are bypassed: the model is fed
cached backbone tokens and applies only the projections and the head
(:meth:`SEPSModel.project_images`, :meth:`SEPSModel.project_texts`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torch import Tensor, nn

from ..core.config import SEPSConfig, get_config
from ..core.head import SEPSHead
from .encoders import ImageEncoder, TextEncoder, build_image_encoder, build_text_encoder


@dataclass
class ModelSpec:
    """How to build the encoders (everything but the head's switches).

    Attributes:
        backbone: vision backbone name: ``tiny-vit``, ``tiny-vit-128``, ``tiny-swin``,
            ``hf-tiny-vit``, ``hf-tiny-swin``, any timm model name, or a transformers
            name/folder with ``backbone_source="hf"``.
        backbone_source: ``timm`` or ``hf``.
        pretrained: ``None`` (random init), ``"hub"`` (download) or a local path.
        image_size: square input resolution.
        text_backbone: ``tiny-bert``, ``tiny-bert-128`` or a BERT hub name / local folder.
        vocab_size: tokenizer size (needed for the tiny BERTs).
        timm_kwargs: extra ``timm.create_model`` arguments.
    """

    backbone: str = "tiny-vit"
    backbone_source: str = "timm"
    pretrained: str | None = None
    image_size: int = 64
    text_backbone: str = "tiny-bert"
    vocab_size: int | None = None
    timm_kwargs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SEPSModel(nn.Module):
    """``img_enc`` + ``txt_enc`` + ``cross_net`` (the :class:`SEPSHead`)."""

    def __init__(self, img_enc: ImageEncoder, txt_enc: TextEncoder, head: SEPSHead) -> None:
        super().__init__()
        self.img_enc = img_enc
        self.txt_enc = txt_enc
        self.cross_net = head

    @property
    def config(self) -> SEPSConfig:
        return self.cross_net.config

    def encode_images(self, images: Tensor) -> Tensor:
        """``(B, 3, H, W)`` -> ``(B, L_v, C)``."""
        return self.img_enc(images)

    def encode_texts(self, ids: Tensor, lens: Tensor) -> Tensor:
        """``(B, L)`` ids, ``(B,)`` lengths -> ``(B, L, C)`` word features."""
        return self.txt_enc(ids, lens)

    def project_images(self, tokens: Tensor) -> Tensor:
        """Cached backbone tokens ``(B, L_v, hidden)`` -> ``(B, L_v, C)`` (frozen protocol)."""
        return self.img_enc.vision_proj(tokens)

    def project_texts(self, hidden: Tensor) -> Tensor:
        """Cached BERT states ``(B, L, hidden)`` -> ``(B, L, C)`` (frozen protocol)."""
        return self.txt_enc.fc(hidden)

    def forward(
        self,
        img_embs: Tensor,
        cap_embs: Tensor,
        cap_lens: Tensor,
        long_cap_embs: Tensor | None = None,
        long_cap_lens: Tensor | None = None,
        *,
        dense_per_image: bool = False,
        selection_prior: Tensor | None = None,
    ) -> Any:
        """The head on already-encoded embeddings (see :class:`SEPSHead`; with
        ``dense_per_image`` the dense captions are one per image; ``selection_prior``
        for a selection control, :mod:`seps.train.controls`)."""
        kw = {} if selection_prior is None else {"selection_prior": selection_prior}
        return self.cross_net(
            img_embs,
            cap_embs,
            cap_lens,
            long_cap_embs,
            long_cap_lens,
            dense_per_image=dense_per_image,
            **kw,
        )


def build_model(spec: ModelSpec, config: SEPSConfig | None = None) -> SEPSModel:
    """Build the encoders of ``spec`` and a head whose ``num_patches`` is the encoder's N.

    ``config.num_patches`` is replaced by the image encoder's spatial token count so that
    ``N_c = int(N * aggr_ratio * rho)`` is sized for the actual backbone.
    """
    config = config or get_config("code")
    pretrained: bool | str = False
    if spec.pretrained == "hub":
        pretrained = True
    elif spec.pretrained:
        pretrained = spec.pretrained
    img_enc = build_image_encoder(
        spec.backbone,
        config.embed_size,
        image_size=spec.image_size,
        pretrained=pretrained,
        source=spec.backbone_source,  # type: ignore[arg-type]
        model_kwargs=spec.timm_kwargs or None,
    )
    txt_enc = build_text_encoder(spec.text_backbone, config.embed_size, spec.vocab_size)
    config = config.replace(num_patches=img_enc.num_patches)
    return SEPSModel(img_enc, txt_enc, SEPSHead(config))


def parameter_groups(model: SEPSModel, lr: float, backbone_lr_mult: float) -> list[dict[str, Any]]:
    """AdamW groups of the official ``lib/vse.py``: backbones (BERT, vision backbone) at
    ``lr * backbone_lr_mult``, everything else (projections, head) at ``lr``. Frozen
    parameters are left out."""
    backbone_ids = {
        id(p) for m in (model.txt_enc.bert, model.img_enc.visual_encoder) for p in m.parameters()
    }
    backbone, rest = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (backbone if id(p) in backbone_ids else rest).append(p)
    groups = [{"params": rest, "lr": lr, "name": "head+projections"}]
    if backbone:
        groups.append({"params": backbone, "lr": lr * backbone_lr_mult, "name": "backbones"})
    return groups


def _block_list(module: nn.Module) -> nn.ModuleList | nn.Sequential | None:
    """The main list of transformer blocks of a timm / transformers backbone."""
    for path in ("blocks", "layers", "encoder.layer", "encoder.layers"):
        obj: Any = module
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList | nn.Sequential):
            return obj
    return None


def freeze_first_layers(backbone: nn.Module, n: int) -> int:
    """Freeze the embeddings and the first ``n`` blocks of ``backbone`` (``partial``
    protocol). Returns the number of frozen parameters. ``n`` larger than the depth
    freezes every block."""
    if n < 0:
        raise ValueError(f"freeze_layers: expected >= 0, got {n}")
    blocks = _block_list(backbone)
    if blocks is None:
        raise ValueError(
            f"freeze_layers: cannot find the transformer blocks of {type(backbone).__name__} "
            "(looked for .blocks, .layers, .encoder.layer, .encoder.layers)"
        )
    frozen = 0
    if n == 0:
        return 0
    block_params = {id(p) for b in blocks for p in b.parameters()}
    later = {id(p) for b in list(blocks)[n:] for p in b.parameters()}
    for name, p in backbone.named_parameters():
        in_blocks = id(p) in block_params
        # Embeddings (patch/word/position) come before the blocks; norms and poolers after
        # the last block stay trainable.
        is_embedding = not in_blocks and ("embed" in name or name.startswith("cls_token"))
        if (in_blocks and id(p) not in later) or is_embedding:
            p.requires_grad_(False)
            frozen += p.numel()
    return frozen


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


__all__ = [
    "ModelSpec",
    "SEPSModel",
    "build_model",
    "count_parameters",
    "freeze_first_layers",
    "parameter_groups",
]
