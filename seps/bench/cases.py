"""The benchmarked calls: each returns a no-argument callable for :mod:`seps.bench.timing`.

- :func:`eval_fn`: the whole head in evaluation (no gradient);
- :func:`train_fn`: the whole head in training (forward + backward);
- :func:`topk_fn`: the TopK kernel (the selection: top-K mask, extra-token softmax and
  the extra token);
- :func:`hrpa_fn`: the HRPA kernel (patch-word matrix, maxima, HRPA terms, from given
  alignment tokens).

The kernels per implementation are those of :data:`seps.core.kernels.IMPLEMENTATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..core.config import keep_count
from ..core.head import SEPSHead, has_cls_token
from ..core.kernels import get_kernel
from ..core.reference import hrpa_for_text, select_for_text
from ..core.selection import l2n


def eval_fn(head: SEPSHead, inputs: list[Tensor]) -> Callable[[], Tensor]:
    head.eval()

    def run() -> Tensor:
        with torch.no_grad():
            return head(*inputs)  # type: ignore[return-value]

    return run


def train_fn(head: SEPSHead, inputs: list[Tensor]) -> Callable[[], None]:
    """Forward + backward of one training batch (pairs i <-> i; sum of sims as loss)."""
    head.train()
    img = inputs[0].clone().requires_grad_(True)

    def run() -> None:
        head.zero_grad(set_to_none=True)
        sims, masks = head(img, *inputs[1:])  # type: ignore[misc]
        loss = sims.diagonal().sum() - 0.01 * sims.sum() + sum(m.sum() for m in masks.values())
        loss.backward()

    return run


def topk_fn(head: SEPSHead, inputs: list[Tensor], impl: str) -> Callable[[], Any]:
    """The TopK kernel: scores -> top-K mask, extra-token weights and extra token."""
    img = inputs[0]
    x = img[:, 1:] if has_cls_token(img.shape[1]) else img
    b_v, n, _ = x.shape
    b_t = inputs[1].shape[0]
    g = torch.Generator().manual_seed(1)
    score = torch.randn(b_v, b_t, n, generator=g).to(x.device)
    k = keep_count(n, head.config.sparse_ratio)
    head.eval()
    if impl == "loop":

        def run_loop() -> Any:
            with torch.no_grad():
                return [select_for_text(head, "sparse", x, score[:, t], ()) for t in range(b_t)]

        return run_loop
    ops = get_kernel(impl).ops

    def run() -> Any:
        with torch.no_grad():
            keep = ops.topk_mask(score, k)
            w = ops.extra_weights(score, 1.0 - keep)
            return keep, torch.bmm(w, x)

    return run


def hrpa_fn(head: SEPSHead, inputs: list[Tensor], impl: str, words: str = "sparse") -> Callable:
    """The HRPA kernel: alignment tokens ``(B_v, B_t, L, C)`` + words -> similarities."""
    b_v = inputs[0].shape[0]
    cap, lens = (inputs[1], inputs[2]) if words == "sparse" else (inputs[3], inputs[4])
    b_t, m, c = cap.shape
    n_l = head.config.num_aggregated + 2
    g = torch.Generator().manual_seed(2)
    tokens = l2n(torch.randn(b_v, b_t, n_l, c, generator=g)).to(cap.device)
    u = l2n(cap)
    mask = torch.arange(m, device=cap.device)[None] < lens[:, None]
    if impl == "loop":

        def run_loop() -> Tensor:
            with torch.no_grad():
                per_text = [
                    hrpa_for_text(head, tokens[:, t], None, u[t, : int(lens[t])])
                    for t in range(b_t)
                ]
                return torch.stack(per_text, 1)

        return run_loop
    rowcol = get_kernel(impl).ops.row_col_max

    def run() -> Tensor:
        with torch.no_grad():
            rows = []
            for v in range(b_v):
                s = torch.bmm(u, tokens[v].transpose(1, 2))  # (B_t, M, L)
                rows.append(head.hrpa.reduce(s, None, mask, None, rowcol))
            return torch.stack(rows)

    return run
