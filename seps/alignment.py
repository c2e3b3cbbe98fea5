"""Highly-relevant patch-word alignment, HRPA (SPEC.md step 8, rows 4 and 5).

For one (image, text) pair with alignment tokens ``T_i`` and normalised words
``u_j`` the patch-word matrix is ``S_pw[j, i] = act(<u_j, T_i>)`` where ``act`` is
LeakyReLU(0.1) (code) or the identity (paper). With ``row_j = max_i S_pw[j, i]``
and ``col_i = max_j S_pw[j, i]``:

- ``mean``:      ``S = mean_j row_j + mean_i col_i``
- ``mean_topk``: ``S = mean(row) + R(topk_k(row)) + mean(col) + R(topk_k(col))`` (eq. 5)
- ``topk_only``: ``S = R(topk_k(row)) + R(topk_k(col))``

``R = Linear(k, 2k) -> GELU -> Linear(2k, 1)`` is shared by both directions;
top-k lists with fewer than k real values are zero-padded, as in the reference
re-implementation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import SEPSConfig


def _masked_max(s: Tensor, mask: Tensor | None, dim: int) -> Tensor:
    if mask is None:
        return s.amax(dim=dim)
    return s.masked_fill(~mask, float("-inf")).amax(dim=dim)


def _masked_mean(s: Tensor, mask: Tensor | None) -> Tensor:
    if mask is None:
        return s.mean(dim=-1)
    m = mask.to(s.dtype)
    return (s * m).sum(-1) / m.sum(-1).clamp(min=1.0)


def _topk_padded(s: Tensor, mask: Tensor | None, k: int) -> Tensor:
    """The k largest valid values of the last axis, zero-padded: ``(..., k)``."""
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    n = s.shape[-1]
    vals = s.topk(min(k, n), dim=-1).values
    if n < k:
        vals = F.pad(vals, (0, k - n), value=float("-inf"))
    return torch.where(torch.isfinite(vals), vals, torch.zeros_like(vals))


class HRPA(nn.Module):
    """Similarity ``S(I, T)`` of every pair from its tokens and words."""

    def __init__(self, config: SEPSConfig) -> None:
        super().__init__()
        self.config = config
        self.relevance_mlp: nn.Module | None = None
        if config.hrpa != "mean":
            k = config.top_k
            self.relevance_mlp = nn.Sequential(nn.Linear(k, 2 * k), nn.GELU(), nn.Linear(2 * k, 1))

    def patch_word(self, tokens: Tensor, words: Tensor) -> Tensor:
        """``S_pw (B_v, B_t, M, L)`` from tokens ``(B_v, B_t, L, C)`` and words ``(B_t, M, C)``.

        Both inputs must already be L2-normalised.
        """
        s = torch.einsum("vtlc,tmc->vtml", tokens, words)
        if self.config.similarity_activation == "leaky_relu":
            s = F.leaky_relu(s, negative_slope=0.1)
        return s

    def forward(
        self,
        tokens: Tensor,
        words: Tensor,
        word_mask: Tensor,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        """Similarities ``(B_v, B_t)``.

        tokens: ``(B_v, B_t, L, C)`` normalised alignment tokens;
        words: ``(B_t, M, C)`` normalised words, ``word_mask (B_t, M)`` True for real words;
        token_mask: optional ``(B_v, B_t, L)`` True for valid tokens.
        """
        s = self.patch_word(tokens, words)  # (B_v, B_t, M, L)
        wm = word_mask.unsqueeze(0).expand(s.shape[0], -1, -1)  # (B_v, B_t, M)
        row = _masked_max(s, None if token_mask is None else token_mask.unsqueeze(2), dim=3)
        col = _masked_max(s, wm.unsqueeze(3), dim=2)  # (B_v, B_t, L)
        out = torch.zeros(s.shape[:2], dtype=s.dtype, device=s.device)
        if self.config.hrpa in ("mean", "mean_topk"):
            out = out + _masked_mean(row, wm) + _masked_mean(col, token_mask)
        if self.relevance_mlp is not None:
            k = self.config.top_k
            top = torch.stack([_topk_padded(row, wm, k), _topk_padded(col, token_mask, k)])
            out = out + self.relevance_mlp(top).squeeze(-1).sum(0)
        return out


__all__ = ["HRPA"]
