"""The SEPS cross-modal head: every switch of SPEC.md in one batched module.

``SEPSHead(config)(img_embs, cap_embs, cap_lens, long_cap_embs, long_cap_lens)``
returns ``sims (B_v, B_t)`` in eval mode and ``(sims, masks)`` in train mode,
where ``masks`` maps each selection branch (``"sparse"``, ``"dense"``) to its
decision matrix D of shape ``(B_v, B_t, N)``.

The head is batched over texts: all texts of a chunk are processed with tensor
operations, and ``text_chunk_size`` only bounds the memory (the result does not
depend on it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .aggregation import TokenAggregation
from .alignment import HRPA
from .config import SEPSConfig, get_config
from .selection import (
    PatchSelector,
    Selection,
    image_self_attention,
    l2n,
    length_mask,
    text_guided_attention,
)


def has_cls_token(num_tokens: int) -> bool:
    """SPEC.md: ``L_v`` not a perfect square means the first token is ``[CLS]``."""
    root = math.isqrt(num_tokens)
    return root * root != num_tokens


@dataclass
class _Text:
    """One caption kind of a chunk of texts."""

    raw: Tensor  # (B_t, L, C) unnormalised words
    lens: Tensor  # (B_t,)
    norm: Tensor  # (B_t, L, C) l2-normalised words
    mask: Tensor  # (B_t, L) bool


class SEPSHead(nn.Module):
    """Cross-modal head (SPEC.md "Shared steps" + the seven differences + findings).

    Args:
        config: the switches; see :class:`seps.config.SEPSConfig`.
        text_chunk_size: texts processed per step; ``None`` picks a size that keeps
            the per-step working set near ``memory_budget_mb``.
        memory_budget_mb: target size of the per-chunk intermediates when
            ``text_chunk_size`` is ``None``.
    """

    def __init__(
        self,
        config: SEPSConfig | None = None,
        *,
        text_chunk_size: int | None = None,
        memory_budget_mb: float = 512.0,
    ) -> None:
        super().__init__()
        self.config = config or get_config("code")
        if text_chunk_size is not None and text_chunk_size < 1:
            raise ValueError(f"text_chunk_size: invalid value {text_chunk_size!r}; allowed: >= 1")
        self.text_chunk_size = text_chunk_size
        self.memory_budget_mb = memory_budget_mb
        self.selectors = nn.ModuleDict(
            {b: PatchSelector(self.config) for b in self.config.branches}
        )
        self.aggregation: TokenAggregation | None = (
            None if self.config.aggregation == "none" else TokenAggregation(self.config)
        )
        self.hrpa = HRPA(self.config)

    # ------------------------------------------------------------------ checks
    def _check_inputs(
        self,
        img_embs: Tensor,
        cap_embs: Tensor,
        cap_lens: Tensor,
        long_cap_embs: Tensor | None,
        long_cap_lens: Tensor | None,
    ) -> None:
        c = self.config.embed_size
        if img_embs.dim() != 3 or img_embs.shape[-1] != c:
            raise ValueError(
                f"img_embs: expected shape (B_v, L_v, {c}), got {tuple(img_embs.shape)}"
            )
        if img_embs.shape[1] < 2:
            raise ValueError(f"img_embs: expected at least 2 tokens, got {img_embs.shape[1]}")
        for name, embs, lens in (
            ("cap", cap_embs, cap_lens),
            ("long_cap", long_cap_embs, long_cap_lens),
        ):
            if embs is None:
                continue
            if embs.dim() != 3 or embs.shape[-1] != c:
                raise ValueError(
                    f"{name}_embs: expected shape (B_t, L, {c}), got {tuple(embs.shape)}"
                )
            if lens is None or lens.shape != (embs.shape[0],):
                got = None if lens is None else tuple(lens.shape)
                raise ValueError(f"{name}_lens: expected shape ({embs.shape[0]},), got {got}")
            if len(lens) and (int(lens.min()) < 1 or int(lens.max()) > embs.shape[1]):
                raise ValueError(
                    f"{name}_lens: every length must be in [1, {embs.shape[1]}], "
                    f"got min {int(lens.min())} max {int(lens.max())}"
                )
        if self.config.uses_dense:
            if long_cap_embs is None:
                raise ValueError(
                    f"config field 'dense_fusion' is {self.config.dense_fusion!r}, which needs the "
                    "dense captions: pass long_cap_embs and long_cap_lens (or use "
                    "dense_fusion='none')"
                )
            if long_cap_embs.shape[0] != cap_embs.shape[0]:
                raise ValueError(
                    f"long_cap_embs: expected {cap_embs.shape[0]} texts (one dense caption per "
                    f"sparse caption), got {long_cap_embs.shape[0]}"
                )

    # ----------------------------------------------------------------- forward
    def forward(
        self,
        img_embs: Tensor,
        cap_embs: Tensor,
        cap_lens: Tensor,
        long_cap_embs: Tensor | None = None,
        long_cap_lens: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Similarities of every image with every text.

        img_embs: ``(B_v, L_v, C)``, ``[CLS]`` first when ``L_v`` is not a square;
        cap_embs ``(B_t, L_s, C)`` with ``cap_lens (B_t,)``;
        long_cap_embs ``(B_t, L_d, C)`` with ``long_cap_lens (B_t,)``: the dense
        caption paired with each text (needed unless ``dense_fusion='none'``).
        """
        self._check_inputs(img_embs, cap_embs, cap_lens, long_cap_embs, long_cap_lens)
        cfg = self.config
        cls = img_embs[:, 0] if has_cls_token(img_embs.shape[1]) else None
        x = img_embs[:, 1:] if cls is not None else img_embs  # (B_v, N, C)
        with torch.no_grad():
            xn = l2n(x)
            s_im = image_self_attention(x)
        # Per-image work, shared by every text: score predictor and aggregation logits.
        x_sel = x.detach() if cfg.detach_selection else x
        s_p = {}
        with torch.set_grad_enabled(torch.is_grad_enabled() and not cfg.detach_selection):
            for b, selector in self.selectors.items():
                s_p[b] = selector.predict(x_sel)
        logits = {}
        if self.aggregation is not None:
            for b in cfg.branches:
                logits[b] = self.aggregation.logits(x_sel, b)

        b_t = cap_embs.shape[0]
        chunk = self.text_chunk_size or self._auto_chunk(x, cap_embs, long_cap_embs)
        sims, masks = [], []
        for start in range(0, b_t, chunk):
            end = min(start + chunk, b_t)
            texts = {"sparse": self._text(cap_embs[start:end], cap_lens[start:end])}
            if long_cap_embs is not None and long_cap_lens is not None and cfg.uses_dense:
                texts["dense"] = self._text(long_cap_embs[start:end], long_cap_lens[start:end])
            s, m = self._forward_chunk(xn, x_sel, cls, s_im, s_p, logits, texts)
            sims.append(s)
            masks.append(m)
        out = torch.cat(sims, dim=1)
        if not self.training:
            return out
        return out, {b: torch.cat([m[b] for m in masks], dim=1) for b in cfg.branches}

    def _auto_chunk(self, x: Tensor, cap: Tensor, long_cap: Tensor | None) -> int:
        """Texts per chunk so that the largest per-chunk tensors fit the memory budget."""
        b_v, n, c = x.shape
        n_c = max(self.config.num_aggregated, 1)
        words = cap.shape[1] + (long_cap.shape[1] if long_cap is not None else 0)
        tokens = n if self.config.aggregation == "none" else n_c + 2
        per_text = b_v * (n_c * n + tokens * c + words * tokens + 4 * n) * 2  # 2 branches
        budget = self.memory_budget_mb * 2**20 / x.element_size()
        return max(1, min(cap.shape[0], int(budget // max(per_text, 1))))

    @staticmethod
    def _text(embs: Tensor, lens: Tensor) -> _Text:
        return _Text(embs, lens, l2n(embs), length_mask(lens, embs.shape[1]))

    def _select(
        self,
        branch: str,
        x_sel: Tensor,
        xn: Tensor,
        s_im: Tensor,
        s_p: dict[str, Tensor | None],
        texts: dict[str, _Text],
    ) -> Selection:
        """Run the ``branch`` selector for every (image, text) pair of the chunk."""
        other = "dense" if branch == "sparse" else "sparse"
        with torch.no_grad():
            s_guide = text_guided_attention(xn, texts[branch].raw, texts[branch].lens)
            s_other = None
            # The other caption enters the paper score only when both captions enter the head.
            if self.config.dense_fusion in ("dual_branch", "fused") and other in texts:
                s_other = text_guided_attention(xn, texts[other].raw, texts[other].lens)
        # SEPS code finding: the selection runs in the no-gradient block.
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.config.detach_selection):
            return self.selectors[branch](x_sel, s_im, s_guide, s_other, s_p[branch])

    def _tokens(
        self,
        cls: Tensor | None,
        body: Tensor,
        extra: Tensor,
        body_mask: Tensor | None,
    ) -> tuple[Tensor, Tensor | None]:
        """``T = l2n([cls, body..., e])`` ``(B_v, B_t, L, C)`` and its validity mask (step 7)."""
        b_v, b_t = extra.shape[:2]
        parts = [body, extra.unsqueeze(2)]
        if cls is not None:
            parts.insert(0, cls[:, None, None, :].expand(b_v, b_t, 1, -1))
        tokens = l2n(torch.cat(parts, dim=2))
        if body_mask is None:
            return tokens, None
        ones = body_mask.new_ones(b_v, b_t, 1)
        mparts = [body_mask, ones] if cls is None else [ones, body_mask, ones]
        return tokens, torch.cat(mparts, dim=2)

    def _body(
        self, branch: str, x_sel: Tensor, logits: dict[str, Tensor], sel: Selection
    ) -> tuple[Tensor, Tensor | None]:
        """Aggregated tokens ``(B_v, B_t, N_c, C)``; or, with ``aggregation='none'``,
        the selected patches themselves as ``(B_v, B_t, N, C)`` plus their keep mask."""
        if self.aggregation is None:
            b_t = sel.keep.shape[1]
            return x_sel.unsqueeze(1).expand(-1, b_t, -1, -1), sel.keep
        return self.aggregation(x_sel, logits[branch], sel.weight), None

    def _forward_chunk(
        self,
        xn: Tensor,
        x_sel: Tensor,
        cls: Tensor | None,
        s_im: Tensor,
        s_p: dict[str, Tensor | None],
        logits: dict[str, Tensor],
        texts: dict[str, _Text],
    ) -> tuple[Tensor, dict[str, Tensor]]:
        cfg = self.config
        sel = {b: self._select(b, x_sel, xn, s_im, s_p, texts) for b in cfg.branches}
        masks = {b: s.decision for b, s in sel.items()}
        if cfg.dense_fusion == "fused":
            # Row 2 (paper): joint aggregation of both selections, mean extra token,
            # alignment against the sparse words only.
            body_s, mask_s = self._body("sparse", x_sel, logits, sel["sparse"])
            body_d, mask_d = self._body("dense", x_sel, logits, sel["dense"])
            extra = 0.5 * (sel["sparse"].extra + sel["dense"].extra)
            if self.aggregation is None:
                # Without aggregation the two selections are concatenated.
                body = torch.cat([body_s, body_d], dim=2)
                body_mask = torch.cat([mask_s, mask_d], dim=2)  # type: ignore[list-item]
            else:
                body, body_mask = body_s + body_d, None
            tokens, tmask = self._tokens(cls, body, extra, body_mask)
            words = texts["sparse"]
            return self.hrpa(tokens, words.norm, words.mask, tmask), masks
        # dual_branch / none / dense_only: every branch aligns against its own words.
        sims = None
        for b in cfg.branches:
            body, body_mask = self._body(b, x_sel, logits, sel[b])
            tokens, tmask = self._tokens(cls, body, sel[b].extra, body_mask)
            s = self.hrpa(tokens, texts[b].norm, texts[b].mask, tmask)
            sims = s if sims is None else sims + s
        assert sims is not None
        return sims, masks


__all__ = ["SEPSHead", "has_cls_token"]
