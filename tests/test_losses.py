"""Triplet and ratio losses against numbers worked out by hand from SPEC.md."""

from __future__ import annotations

import pytest
import torch

from seps import SEPSLoss, get_config
from seps.losses import ratio_loss, triplet_loss


def test_triplet_sum_over_negatives_by_hand():
    sims = torch.tensor([[0.5, 0.6], [0.2, 0.4]])
    # cost_s[0,1] = 0.2 + 0.6 - 0.5 = 0.3; cost_s[1,0] = 0.2 + 0.2 - 0.4 = 0
    # cost_im[0,1] = 0.2 + 0.6 - 0.4 = 0.4; cost_im[1,0] = 0.2 + 0.2 - 0.5 < 0 -> 0
    assert triplet_loss(sims).item() == pytest.approx(0.7)


def test_triplet_max_violation_and_shared_images_by_hand():
    sims = torch.tensor([[0.9, 0.8, 0.1], [0.7, 0.6, 0.5], [0.3, 0.2, 0.4]])
    ids = torch.tensor([0, 0, 1])  # pairs 0 and 1 show the same image
    # Positives: (0,0) (0,1) (1,0) (1,1) (2,2). Negatives and their hinge costs:
    # cost_s (row i, diag d_i = 0.9, 0.6, 0.4): (0,2) 0.2+0.1-0.9<0; (1,2) 0.2+0.5-0.6=0.1;
    #   (2,0) 0.2+0.3-0.4=0.1; (2,1) 0.2+0.2-0.4=0.0
    # cost_im (column j, d_j): (0,2) 0.2+0.1-0.4<0; (1,2) 0.2+0.5-0.4=0.3;
    #   (2,0) 0.2+0.3-0.9<0; (2,1) 0.2+0.2-0.6<0
    assert triplet_loss(sims, ids).item() == pytest.approx(0.1 + 0.1 + 0.3)
    # Max violation: row maxima of cost_s = [0, 0.1, 0.1]; column maxima of cost_im = [0, 0, 0.3].
    assert triplet_loss(sims, ids, max_violation=True).item() == pytest.approx(0.5)
    # Without ids only the diagonal is positive: (0,1) and (1,0) become negatives too.
    # cost_s (0,1) 0.2+0.8-0.9=0.1, (1,0) 0.2+0.7-0.6=0.3; cost_im (0,1) 0.2+0.8-0.6=0.4,
    # (1,0) 0.2+0.7-0.9=0.0
    assert triplet_loss(sims).item() == pytest.approx(0.5 + 0.1 + 0.3 + 0.4)


def test_triplet_rejects_bad_shapes():
    with pytest.raises(ValueError, match="square"):
        triplet_loss(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="img_ids"):
        triplet_loss(torch.zeros(2, 2), torch.zeros(3))


MASKS = {
    "sparse": torch.tensor([[[1.0, 0.0, 0.0, 0.0]]]),  # mean 0.25
    "dense": torch.tensor([[[1.0, 1.0, 1.0, 0.0]]]),  # mean 0.75
}


@pytest.mark.parametrize(
    ("form", "l1", "l2", "want"),
    [
        ("unified", 1.0, 1.0, (0.25 + 0.75 - 0.5) ** 2),
        ("separate", 1.0, 1.0, (0.25 - 0.5) ** 2 + (0.75 - 0.5) ** 2),
        ("separate", 0.5, 2.0, 0.5 * 0.0625 + 2.0 * 0.0625),
        ("eq7", 1.0, 1.0, (0.5 - 0.25 - 0.75) ** 2),
        ("eq7", 0.5, 0.25, (0.5 - 0.125 - 0.1875) ** 2),
        ("off", 1.0, 1.0, 0.0),
    ],
)
def test_ratio_loss_forms_by_hand(form, l1, l2, want):
    assert ratio_loss(MASKS, 0.5, form, l1, l2).item() == pytest.approx(want)


def test_ratio_loss_single_branch_and_errors():
    only = {"sparse": MASKS["sparse"]}
    assert ratio_loss(only, 0.5, "unified").item() == pytest.approx(0.0625)
    assert ratio_loss(only, 0.5, "eq7", 2.0).item() == pytest.approx(0.0)
    with pytest.raises(ValueError, match="ratio_loss"):
        ratio_loss(only, 0.5, "mse")
    with pytest.raises(ValueError, match="branch"):
        ratio_loss({"other": MASKS["sparse"]}, 0.5)


def test_combined_loss_parts():
    cfg = get_config("code", ratio_weight=2.0)
    sims = torch.tensor([[0.5, 0.6], [0.2, 0.4]])
    out = SEPSLoss(cfg)(sims, MASKS, torch.tensor([0, 1]), warmup_alpha=0.5)
    assert out.align.item() == pytest.approx(0.35)
    assert out.ratio.item() == pytest.approx(0.25)
    assert out.total.item() == pytest.approx(0.35 + 2.0 * 0.25)
