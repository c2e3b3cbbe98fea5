"""Learned aggregation of the selected patches (SPEC.md step 6, row 3).

``logits = MLP(V)`` with ``MLP = LayerNorm(C) -> Linear(C, int(0.2 C)) -> GELU ->
Linear(int(0.2 C), N_c)``; ``W = softmax over the selected tokens of
(logits^T * scale)``; ``A = W V`` of shape ``(N_c, C)``.

The MLP acts on each patch alone, so its logits depend on the image, not on the
text: they are computed once per image (``(B_v, N, N_c)``) and every
(image, text) pair only re-normalises them over its own selection. The official
code instead re-runs the MLP on the K gathered tokens of every pair, which costs
``K * C * 0.2 C`` multiply-adds per pair and branch (5 M for ViT-224, C = 512).

The batched head goes one step further (:meth:`TokenAggregation.exp_logits`):
``exp(scale * logits - shift)`` is also per image, so a pair's weights are
``W[j, n] = keep[n] E[n, j] / Z[j]`` with ``Z[j] = sum_n keep[n] E[n, j]``, and
only the mask multiply (and, where needed, the division by ``Z``) is per pair.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .config import SEPSConfig
from .selection import weighted_softmax


def aggregation_mlp(dim: int, out: int) -> nn.Sequential:
    """``LayerNorm(C) -> Linear(C, int(0.2 C)) -> GELU -> Linear(int(0.2 C), N_c)``."""
    hidden = int(dim * 0.2)
    return nn.Sequential(
        nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, out)
    )


class TokenAggregation(nn.Module):
    """The aggregation network(s) of one head.

    ``aggregation="shared"``: one MLP (``nets["shared"]``) used by every branch.
    ``aggregation="dual"``: one MLP per branch (``nets["sparse"]`` = W_s,
    ``nets["dense"]`` = W_d). Both modes share one learnable ``scale`` (init 1).
    """

    def __init__(self, config: SEPSConfig) -> None:
        super().__init__()
        if config.aggregation == "none":
            raise ValueError("TokenAggregation is not used when aggregation='none'")
        self.config = config
        names = ("shared",) if config.aggregation == "shared" else config.branches
        self.nets = nn.ModuleDict(
            {n: aggregation_mlp(config.embed_size, config.num_aggregated) for n in names}
        )
        self.scale = nn.Parameter(torch.ones(()))

    def net_for(self, branch: str) -> str:
        """Name of the MLP that aggregates ``branch``'s selection."""
        return "shared" if self.config.aggregation == "shared" else branch

    def logits(self, x: Tensor, branch: str) -> Tensor:
        """Per-image aggregation logits ``(B_v, N, N_c)`` for ``branch``."""
        return self.nets[self.net_for(branch)](x)

    def exp_logits(self, logits: Tensor) -> Tensor:
        """``E = exp(scale * logits - shift)`` ``(B_v, N, N_c)``, once per image.

        ``shift`` is the (detached) maximum over all N patches of each column, as in
        :func:`seps.core.selection.weighted_softmax`, so kept entries cannot overflow and
        the per-pair softmax over the kept patches is ``keep * E / sum(keep * E)``.
        """
        scaled = logits * self.scale
        return torch.exp(scaled - scaled.detach().amax(dim=1, keepdim=True))

    def forward(self, x: Tensor, logits: Tensor, weight: Tensor) -> Tensor:
        """Aggregated tokens ``A (B_v, B_t, N_c, C)``.

        x: ``(B_v, N, C)`` patches (detached when the selection is),
        logits: ``(B_v, N, N_c)`` from :meth:`logits`,
        weight: ``(B_v, B_t, N)`` selection weight (1 = selected).
        ``W[v, t, j, :] = softmax over the selected n of logits[v, n, j] * scale``.
        """
        scaled = (logits * self.scale).transpose(1, 2).unsqueeze(1)  # (B_v, 1, N_c, N)
        w = weighted_softmax(scaled, weight.unsqueeze(2))  # (B_v, B_t, N_c, N)
        return torch.einsum("vtjn,vnc->vtjc", w, x)


def pair_weights(e: Tensor, weight: Tensor, normalise: bool = True) -> Tensor:
    """Aggregation weights ``W (B_t, N_c, N)`` of one image for a chunk of texts.

    e: ``(N, N_c)`` from :meth:`TokenAggregation.exp_logits` for this image;
    weight: ``(B_t, N)`` selection weights (1 = kept). ``normalise=False`` skips the
    division by ``Z`` (the softmax denominator): callers that only use the
    aggregated tokens through ``l2n`` (every branch except ``fused``, where two
    aggregations are added first) save one pass, since ``l2n(A / Z) = l2n(A)``.
    Rows whose kept weights are all zero stay zero, like the empty sum of
    :func:`seps.core.selection.weighted_softmax`. A block of images broadcasts: ``e (V, N,
    N_c)`` and ``weight (V, B_t, N)`` give ``(V, B_t, N_c, N)``.
    """
    w = weight.unsqueeze(-2) * e.transpose(-1, -2).unsqueeze(-3)
    if not normalise:
        return w
    z = w.sum(dim=-1, keepdim=True)
    return w / torch.where(z > 0, z, torch.ones_like(z))


__all__ = ["TokenAggregation", "aggregation_mlp", "pair_weights"]
