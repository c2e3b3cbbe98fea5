"""The top-K mask of the selection (SPEC.md step 4): the K highest scores, ties at the
K-th value broken towards the lower patch index (a stable descending sort's order)."""

from __future__ import annotations

import pytest
import torch

from seps.core.selection import topk_mask


def sorted_mask(score: torch.Tensor, k: int) -> torch.Tensor:
    """The reference: the first K of a stable descending sort."""
    idx = torch.sort(score, dim=-1, descending=True, stable=True).indices[..., :k]
    return torch.zeros_like(score).scatter(-1, idx, 1.0)


@pytest.mark.parametrize("k", [1, 3, 5, 8])
def test_distinct_scores_keep_the_k_highest(k: int) -> None:
    score = torch.randn(4, 6, 8, generator=torch.Generator().manual_seed(k))
    mask = topk_mask(score, k)
    assert torch.equal(mask, sorted_mask(score, k))
    assert torch.equal(mask.sum(-1), torch.full((4, 6), float(k)))


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_ties_at_the_kth_value_keep_the_lower_indices(k: int) -> None:
    # Scores from {0, 1, 2}: most rows have ties straddling the K-th value.
    score = torch.randint(0, 3, (50, 9), generator=torch.Generator().manual_seed(k)).float()
    mask = topk_mask(score, k)
    assert torch.equal(mask, sorted_mask(score, k))


def test_one_tied_row_among_distinct_rows() -> None:
    score = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    score[1] = torch.tensor([0.0, 2.0, 1.0, 1.0, 1.0, -1.0])  # K = 3 cuts through the 1.0s
    mask = topk_mask(score, 3)
    assert mask[1].tolist() == [0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert torch.equal(mask, sorted_mask(score, 3))


def test_all_patches_kept_when_k_is_n() -> None:
    score = torch.randn(2, 5)
    assert torch.equal(topk_mask(score, 5), torch.ones(2, 5))
