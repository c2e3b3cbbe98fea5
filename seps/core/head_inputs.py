"""What :class:`seps.core.head.SEPSHead` accepts: the shapes and lengths of its inputs,
checked before any work with a one-line error naming the argument."""

from __future__ import annotations

from torch import Tensor

from .config import SEPSConfig
from .selection import has_cls_token

__all__ = ["check_inputs", "check_prior"]


def check_inputs(
    config: SEPSConfig,
    img_embs: Tensor,
    cap_embs: Tensor,
    cap_lens: Tensor,
    long_cap_embs: Tensor | None,
    long_cap_lens: Tensor | None,
    dense_per_image: bool = False,
) -> None:
    """Raise ``ValueError`` naming the first input whose shape or lengths do not fit
    ``config`` (see :meth:`seps.core.head.SEPSHead.forward` for the shapes)."""
    c = config.embed_size
    if img_embs.dim() != 3 or img_embs.shape[-1] != c:
        raise ValueError(f"img_embs: expected shape (B_v, L_v, {c}), got {tuple(img_embs.shape)}")
    if img_embs.shape[1] < 2:
        raise ValueError(f"img_embs: expected at least 2 tokens, got {img_embs.shape[1]}")
    for name, embs, lens in (
        ("cap", cap_embs, cap_lens),
        ("long_cap", long_cap_embs, long_cap_lens),
    ):
        if embs is None:
            continue
        if embs.dim() != 3 or embs.shape[-1] != c:
            raise ValueError(f"{name}_embs: expected shape (B_t, L, {c}), got {tuple(embs.shape)}")
        if lens is None or lens.shape != (embs.shape[0],):
            got = None if lens is None else tuple(lens.shape)
            raise ValueError(f"{name}_lens: expected shape ({embs.shape[0]},), got {got}")
        if len(lens) and (int(lens.min()) < 1 or int(lens.max()) > embs.shape[1]):
            raise ValueError(
                f"{name}_lens: every length must be in [1, {embs.shape[1]}], "
                f"got min {int(lens.min())} max {int(lens.max())}"
            )
    if config.uses_dense:
        if long_cap_embs is None:
            raise ValueError(
                f"config field 'dense_fusion' is {config.dense_fusion!r}, which needs the "
                "dense captions: pass long_cap_embs and long_cap_lens (or use "
                "dense_fusion='none')"
            )
        if dense_per_image and long_cap_embs.shape[0] != img_embs.shape[0]:
            raise ValueError(
                f"long_cap_embs: expected {img_embs.shape[0]} dense captions (one per image "
                f"under dense_per_image=True), got {long_cap_embs.shape[0]}"
            )
        if not dense_per_image and long_cap_embs.shape[0] != cap_embs.shape[0]:
            raise ValueError(
                f"long_cap_embs: expected {cap_embs.shape[0]} texts (one dense caption per "
                f"sparse caption), got {long_cap_embs.shape[0]}"
            )


def check_prior(
    config: SEPSConfig, prior: Tensor | None, img_embs: Tensor, cap_embs: Tensor, reference: bool
) -> None:
    """Raise ``ValueError`` (one line) unless ``prior``, the head's ``selection_prior``,
    fits ``config.selection``; ``reference``: the head runs the ``loop`` kernels."""
    sel = config.selection
    if sel == "learned":
        if prior is not None:
            raise ValueError("selection_prior: given, but config field 'selection' is 'learned'")
        return
    n = img_embs.shape[1] - (1 if has_cls_token(img_embs.shape[1]) else 0)
    want = (img_embs.shape[0], cap_embs.shape[0], n)
    if prior is None or tuple(prior.shape) != want:
        got = None if prior is None else tuple(prior.shape)
        raise ValueError(
            f"config field 'selection' = {sel!r} needs selection_prior of shape {want}, got {got}"
        )
    if reference:
        raise ValueError(
            f"config field 'selection' = {sel!r}: not supported by impl 'loop'; use the "
            "batched kernels"
        )
