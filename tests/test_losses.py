"""Triplet and ratio losses against numbers worked out by hand from SPEC.md."""

from __future__ import annotations

import pytest
import torch

from seps import SEPSLoss, get_config
from seps.core.losses import ratio_loss, triplet_loss


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


# ------------------------------------------------------------------ loss study (issue 6)
from seps.core.losses import (  # noqa: E402
    alignment_loss,
    distance_weighted_triplet,
    infonce_loss,
    ratio_loss_parts,
    ratio_penalty,
    ratio_target_bin,
)


def _pen(v: float, criterion: str, **kw) -> float:
    return float(ratio_penalty(torch.tensor(v, dtype=torch.float64), 0.5, criterion, **kw))


def test_ratio_penalty_mse_and_l1_by_hand():
    assert _pen(0.48, "mse") == pytest.approx(0.0004)
    assert _pen(0.48, "l1") == pytest.approx(0.02)
    assert _pen(0.9, "l1") == pytest.approx(0.4)


def test_ratio_ce_classes_and_staircase():
    # 10 classes of width 0.1; the target 0.5 sits on a boundary and belongs to [0.5, 0.6).
    assert ratio_target_bin(0.5, 1.0, 10) == 5
    assert ratio_target_bin(0.3, 1.0, 10) == 3  # 0.3 / 0.1 is 2.9999999999999996 in floats
    assert ratio_target_bin(1.0, 1.0, 10) == 9  # clamped into the last class
    assert ratio_target_bin(0.5, 2.0, 10) == 2  # unified: two masks, range [0, 2]
    # Hand value at the class centre 0.55: logits -|0.55 - c| / 0.01 = -10 * |5 - b|,
    # CE = log(sum_b e^{-10|5-b|}) = log(1 + 2e^-10 + 2e^-20 + ...) ~ 2 e^-10.
    assert _pen(0.55, "ce") == pytest.approx(2 * torch.exp(torch.tensor(-10.0)).item(), rel=1e-3)
    # Nearby ratios on either side of the boundary cost very differently, ratios inside
    # the class about the same: the discretisation effect the seeds describe.
    inside = [_pen(v, "ce") for v in (0.53, 0.55, 0.57)]
    assert max(inside) - min(inside) < 0.01
    assert _pen(0.49, "ce") > 10 * _pen(0.51, "ce")
    # Further away costs more, in steps of about one class: 1 / temperature per class.
    assert _pen(0.35, "ce") - _pen(0.45, "ce") == pytest.approx(10.0, abs=0.01)
    # The same for mse is smooth and symmetric about the target.
    assert _pen(0.49, "mse") == pytest.approx(_pen(0.51, "mse"))


def test_ratio_penalty_rejects_unknown_criterion():
    with pytest.raises(ValueError, match="ratio_criterion"):
        ratio_penalty(torch.tensor(0.5), 0.5, "huber")


@pytest.mark.parametrize("criterion", ["mse", "l1", "ce"])
@pytest.mark.parametrize("form", ["unified", "separate", "eq7"])
def test_ratio_loss_parts_sum_to_the_loss(criterion, form):
    masks = {"sparse": torch.rand(2, 3, 10), "dense": torch.rand(2, 3, 10)}
    parts = ratio_loss_parts(masks, 0.5, form, 0.5, 1.0, criterion)
    assert set(parts) == ({"sparse", "dense"} if form == "separate" else {"joint"})
    total = ratio_loss(masks, 0.5, form, 0.5, 1.0, criterion)
    torch.testing.assert_close(sum(parts.values()), total)
    r_s, r_d = masks["sparse"].mean(), masks["dense"].mean()
    if form == "separate":
        want = 0.5 * ratio_penalty(r_s, 0.5, criterion) + ratio_penalty(r_d, 0.5, criterion)
    elif form == "unified":
        want = ratio_penalty(r_s + r_d, 0.5, criterion, upper=2.0)
    else:
        want = ratio_penalty(0.5 * r_s + r_d, 0.5, criterion, upper=1.5)
    torch.testing.assert_close(total, want)
    assert ratio_loss_parts(masks, 0.5, "off") == {}


def test_infonce_single_positive_is_cross_entropy():
    sims = torch.tensor([[0.9, 0.1, 0.3], [0.2, 0.8, 0.4], [0.5, 0.3, 0.7]])
    t = 0.1
    target = torch.arange(3)
    want = torch.nn.functional.cross_entropy(sims / t, target, reduction="sum")
    want = want + torch.nn.functional.cross_entropy(sims.t() / t, target, reduction="sum")
    torch.testing.assert_close(infonce_loss(sims, None, t), want)


def test_infonce_counts_every_caption_of_an_image_as_positive():
    sims = torch.tensor([[0.9, 0.6, 0.1], [0.9, 0.6, 0.1], [0.2, 0.3, 0.8]])
    ids = torch.tensor([0, 0, 1])
    t = 0.5
    # Row 0: -log((e^{1.8} + e^{1.2}) / (e^{1.8} + e^{1.2} + e^{0.2})) (captions 0 and 1
    # both belong to image 0); a single-positive CE would also push caption 1 down.
    row0 = -torch.log(
        (torch.exp(torch.tensor(1.8)) + torch.exp(torch.tensor(1.2)))
        / (
            torch.exp(torch.tensor(1.8))
            + torch.exp(torch.tensor(1.2))
            + torch.exp(torch.tensor(0.2))
        )
    )
    logits = sims / t
    pos = ids.view(3, 1) == ids.view(1, 3)
    rows = torch.logsumexp(logits, 1) - torch.logsumexp(logits.masked_fill(~pos, -1e9), 1)
    cols = torch.logsumexp(logits, 0) - torch.logsumexp(logits.masked_fill(~pos, -1e9), 0)
    torch.testing.assert_close(rows[0], row0)
    torch.testing.assert_close(infonce_loss(sims, ids, t), rows.sum() + cols.sum())
    # Every caption of one image: nothing to separate, the loss is 0.
    assert infonce_loss(sims[:2, :2], torch.tensor([4, 4]), t).item() == pytest.approx(0.0)


def test_distance_weighted_triplet_by_hand():
    # Similarities above 0.875 clamp to distance 0.5; below -0.445 the distance exceeds 1.7
    # and is never drawn; above 1 there is no distance: never drawn either.
    sims = torch.tensor([[0.8, 1.5, -0.9], [0.7, 0.6, 0.7], [-0.9, 1.2, 0.9]])
    # Row anchors (image i, positive caption i): row 0 can only draw 2? no: -0.9 -> d=1.95
    # > 1.7 and 1.5 > 1 -> no eligible negative, skipped. Row 1 draws 0 or 2 (both 0.7):
    # hinge 0.2 + 0.7 - 0.6 = 0.3 either way. Row 2: -0.9 ineligible, 1.2 > 1: skipped.
    # Column anchors (caption j, positive image j): column 0 draws 1 (0.7; -0.9 ineligible):
    # 0.2 + 0.7 - 0.8 = 0.1. Column 1: 1.5 and 1.2 > 1: skipped. Column 2: draws 1 (0.7,
    # -0.9 ineligible): 0.2 + 0.7 - 0.9 = 0.0.
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        got = distance_weighted_triplet(sims, None, 0.2, dim=16, generator=g)
        assert got.item() == pytest.approx(0.4)
    # Nothing eligible at all: 0, with a gradient path.
    s = torch.full((2, 2), 1.5, requires_grad=True)
    out = distance_weighted_triplet(s, None)
    assert out.item() == 0.0
    out.backward()


def test_distance_weighted_triplet_prefers_close_negatives():
    # Row 0's negatives: 0.6 (d ~ 0.89) and 0.0 (d ~ 1.41); in 512 dimensions 1/q(d)
    # makes the closer one overwhelmingly likely.
    sims = torch.tensor([[0.7, 0.6, 0.0], [0.0, 0.7, 0.0], [0.0, 0.0, 0.7]])
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        row = distance_weighted_triplet(sims[:1, :].expand(3, 3).contiguous(), None, 0.2, 512, g)
        assert row.item() > 0
    single = torch.tensor([[0.7, 0.6], [-1.0, 0.7]])
    # Row 0 draws 1: 0.2 + 0.6 - 0.7 = 0.1; row 1 draws nothing (d = 2); column 0 draws
    # nothing; column 1 draws row 0: 0.2 + 0.6 - 0.7 = 0.1.
    assert distance_weighted_triplet(single, None, 0.2, 512).item() == pytest.approx(0.2)


def test_alignment_loss_dispatch():
    sims = torch.randn(5, 5)
    ids = torch.tensor([0, 0, 1, 2, 3])
    cfg = get_config("code")
    hard = triplet_loss(sims, ids, 0.2, True)
    total = triplet_loss(sims, ids, 0.2, False)
    assert alignment_loss(sims, ids, cfg, max_violation=True) == hard
    assert alignment_loss(sims, ids, cfg, max_violation=False) == total
    fixed = cfg.replace(align_loss="triplet_hardest")
    assert alignment_loss(sims, ids, fixed, max_violation=False) == hard
    fixed = cfg.replace(align_loss="triplet_sum")
    assert alignment_loss(sims, ids, fixed, max_violation=True) == total
    nce = cfg.replace(align_loss="infonce", infonce_temperature=0.2)
    assert alignment_loss(sims, ids, nce) == infonce_loss(sims, ids, 0.2)
    out = SEPSLoss(nce)(sims, {"sparse": torch.ones(5, 5, 4)}, ids)
    torch.testing.assert_close(out.align, infonce_loss(sims, ids, 0.2))


def test_loss_study_config_validation():
    with pytest.raises(ValueError, match="align_loss"):
        get_config("code", align_loss="focal")
    with pytest.raises(ValueError, match="ratio_criterion"):
        get_config("code", ratio_criterion="kl")
    with pytest.raises(ValueError, match="ratio_bins"):
        get_config("code", ratio_bins=1)
    with pytest.raises(ValueError, match="infonce_temperature"):
        get_config("code", infonce_temperature=0.0)
