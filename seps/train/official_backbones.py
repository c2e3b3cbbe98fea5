"""The official backbones, built without downloads: the four vision model types of the
official code (:data:`OFFICIAL_VISION`), ``bert-base-uncased`` (:data:`OFFICIAL_TEXT`),
the official tokenizer, and the transformers library's own tables for renaming and
ignoring backbone weights. :mod:`.official` loads checkpoints onto them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..io.hub import hub_offline, one_line


class CheckpointError(ValueError):
    """A state dict or checkpoint does not fit; the one-line message names the first keys of
    each kind of problem and how many there are."""


# --------------------------------------------------------------- full checkpoints
_VIT_BASE: dict[str, Any] = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-12,
    "qkv_bias": True,
    "patch_size": 16,
}


_SWIN_BASE: dict[str, Any] = {
    "patch_size": 4,
    "embed_dim": 128,
    "depths": [2, 2, 18, 2],
    "num_heads": [4, 8, 16, 32],
    "mlp_ratio": 4.0,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-5,
    "qkv_bias": True,
    "use_absolute_embeddings": False,
}


#: The four image backbones of the official ``lib/encoders.py``: model type -> (the hub model
#: it starts from, transformers model type, architecture). The architectures repeat the fields
#: of those hub configs that shape the weights or the forward (the rest are transformers
#: defaults), so that importing a checkpoint needs no download. ``N``: 196, 576, 49, 144.
OFFICIAL_VISION: dict[str, tuple[str, str, dict[str, Any]]] = {
    "vit_224": ("google/vit-base-patch16-224-in21k", "vit", {**_VIT_BASE, "image_size": 224}),
    "vit_384": ("google/vit-base-patch16-384", "vit", {**_VIT_BASE, "image_size": 384}),
    "swin_224": (
        "microsoft/swin-base-patch4-window7-224",
        "swin",
        {**_SWIN_BASE, "image_size": 224, "window_size": 7},
    ),
    "swin_384": (
        "microsoft/swin-base-patch4-window12-384",
        "swin",
        {**_SWIN_BASE, "image_size": 384, "window_size": 12},
    ),
}


#: The official text encoder and tokenizer: hard-wired to this hub model (the code that would
#: read ``opt.bert_path`` is commented out), so ``opt.bert_path`` is ignored here too.
OFFICIAL_TEXT = "bert-base-uncased"


#: Token features the official evaluation keeps of each encoded caption ([CLS] included):
#: it encodes captions whole and cuts the encoder's output (``--max_word 90`` of LAPS).
OFFICIAL_EVAL_MAX_WORDS = 90


_BERT_BASE: dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
}


def official_model_type(vit_type: Any) -> str:
    """The :data:`OFFICIAL_VISION` entry the official code builds for ``opt.vit_type``.

    As ``lib/encoders.py``: a type containing ``swin`` is ``swin_384`` when it contains
    ``swin_384``, ``swin_224`` when it contains ``swin_224`` or is ``swin``; any other is
    ``vit_384`` when it contains ``vit_384``, ``vit_224`` when it contains ``vit_224`` or is
    ``vit``. The official code builds no encoder for the rest: a :class:`CheckpointError`.
    """
    t = str(vit_type)
    if "swin" in t:
        if "swin_384" in t:
            return "swin_384"
        if "swin_224" in t or t == "swin":
            return "swin_224"
    elif "vit_384" in t:
        return "vit_384"
    elif "vit_224" in t or t == "vit":
        return "vit_224"
    raise CheckpointError(
        f"opt.vit_type={t!r}: the official code builds no image encoder for it (expected vit, "
        f"vit_224, vit_384, swin, swin_224 or swin_384); pass vision=<config, folder or one of "
        f"{', '.join(OFFICIAL_VISION)}> (--vision)"
    )


def official_vision_config(vit_type: Any) -> Any:
    """The transformers ``ViTConfig`` / ``SwinConfig`` of the official backbone for
    ``opt.vit_type`` (see :func:`official_model_type`)."""
    from transformers import SwinConfig, ViTConfig

    _, kind, arch = OFFICIAL_VISION[official_model_type(vit_type)]
    return (ViTConfig if kind == "vit" else SwinConfig)(**arch)


def official_text_config() -> Any:
    """The ``BertConfig`` of :data:`OFFICIAL_TEXT` (``bert-base-uncased``)."""
    from transformers import BertConfig

    return BertConfig(**_BERT_BASE)


def builtin_config(name: str) -> Any:
    """The configuration of a hub backbone the official code uses (the four vision models
    of :data:`OFFICIAL_VISION`, :data:`OFFICIAL_TEXT`), held in this package; ``None`` for
    any other name. Lets offline tools (the dry run's size estimate) know them."""
    if name == OFFICIAL_TEXT:
        return official_text_config()
    for vit_type, (hub, _, _) in OFFICIAL_VISION.items():
        if hub == name:
            return official_vision_config(vit_type)
    return None


def load_official_tokenizer(name_or_path: str | os.PathLike[str] = OFFICIAL_TEXT) -> Any:
    """The official tokenisation, over the vocabulary of ``name_or_path`` (a folder with
    ``vocab.txt`` or ``tokenizer.json``, or a hub name in the local cache).

    The official data loader splits a caption with ``BertTokenizer.basic_tokenizer`` and each
    word with ``wordpiece_tokenizer`` (transformers 5's ``BertTokenizer`` has neither); this is
    the same pipeline (:func:`seps.data.text.bert_tokenizer`, lower-casing as
    ``bert-base-uncased``),
    with a special token's text inside a caption split as ordinary text, as there.
    """
    from ..data.text import SPECIAL_TOKENS, bert_tokenizer, load_tokenizer

    vocab = load_tokenizer(name_or_path).get_vocab()
    lacking = [t for t in SPECIAL_TOKENS if t not in vocab]
    if lacking:
        raise ValueError(
            f"tokenizer {os.fspath(name_or_path)!r}: not a BERT vocabulary (no {lacking}); pass "
            f"--tokenizer <a folder with {OFFICIAL_TEXT}'s vocab.txt or tokenizer.json>"
        )
    return bert_tokenizer(vocab, split_special_tokens=True)


def config_from(spec: Any, what: str) -> Any:
    """A transformers config from a config object, an :data:`OFFICIAL_VISION` type, a local
    folder or a hub name (local cache only when :func:`seps.io.hub.hub_offline`)."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(spec, PretrainedConfig):
        return spec
    if isinstance(spec, str) and spec in OFFICIAL_VISION:
        return official_vision_config(spec)
    name = os.fspath(spec)
    try:
        local = Path(name).expanduser().exists()
        return AutoConfig.from_pretrained(name, local_files_only=local or hub_offline())
    except Exception as exc:
        raise CheckpointError(
            f"{what}={spec!r}: could not load a transformers config ({one_line(exc)}); pass a "
            "config object or a local folder holding config.json"
        ) from exc


def library_renamer(module: Any) -> Callable[[str], str]:
    """The key renaming ``from_pretrained`` applies to checkpoints of ``module`` (a transformers
    model), from the library's own table (transformers 5 ``conversion_mapping``: e.g. ViT's
    ``encoder.layer.0.attention.attention.query`` -> ``layers.0.attention.q_proj``, Swin's
    ``attention.self.query`` -> ``attention.q_proj``). Only renamings apply (ViT, Swin and
    BERT need no tensor conversion). Transformers 4 has no such table and no renamed
    weights: the identity."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming, rename_source_key
    except ImportError:
        return lambda key: key
    renamings = [t for t in get_model_conversion_mapping(module) if isinstance(t, WeightRenaming)]
    return lambda key: rename_source_key(key, renamings, [])[0]


def ignored_keys(module: Any, kind: str) -> re.Pattern[str] | None:
    """Keys ``from_pretrained`` itself tolerates as ``kind`` ("unexpected" or "missing") for
    ``module``: its ``_keys_to_ignore_on_load_*`` patterns (e.g. Swin's
    ``relative_position_index``, a buffer transformers 4 saved) and, for unexpected keys of a
    model with a ``position_ids`` buffer, that buffer (saved by older transformers 4)."""
    patterns = list(getattr(module, f"_keys_to_ignore_on_load_{kind}", None) or [])
    if kind == "unexpected" and any(n.endswith("position_ids") for n, _ in module.named_buffers()):
        patterns.append(r"(^|\.)position_ids$")
    return re.compile("|".join(f"({p})" for p in patterns)) if patterns else None


def describe_config(config: Any) -> str:
    """A few words on a transformers config's size (for error messages)."""
    fields = ("image_size", "patch_size", "window_size", "hidden_size", "embed_dim", "vocab_size")
    return " ".join(f"{f}={getattr(config, f)}" for f in fields if hasattr(config, f))


__all__ = [
    "OFFICIAL_EVAL_MAX_WORDS",
    "OFFICIAL_TEXT",
    "OFFICIAL_VISION",
    "CheckpointError",
    "builtin_config",
    "config_from",
    "describe_config",
    "ignored_keys",
    "library_renamer",
    "load_official_tokenizer",
    "official_model_type",
    "official_text_config",
    "official_vision_config",
]
