"""The batched head against a plain per-pair loop of SPEC.md, for every switch combination,
plus the gradient behaviour of the findings."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from reference_impl import reference_sims

from seps import SEPSHead, get_config
from seps.core.config import CHOICES
from seps.core.losses import ratio_loss

C, N, B_V, B_T = 16, 9, 2, 3
SIM_KEYS = ("scoring", "dense_fusion", "aggregation", "hrpa", "similarity_activation", "decision")
COMBOS = list(itertools.product(*(CHOICES[k] for k in SIM_KEYS), (True, False)))


def make_inputs(seed: int, cls: bool, b_v: int = B_V, b_t: int = B_T, n: int = N):
    g = torch.Generator().manual_seed(seed)
    img = torch.randn(b_v, n + int(cls), C, generator=g)
    cap = torch.randn(b_t, 6, C, generator=g)
    cap_lens = torch.tensor([6, 2, 4, 3, 5, 1][:b_t])
    long_cap = torch.randn(b_t, 8, C, generator=g)
    long_lens = torch.tensor([8, 5, 7, 3, 6, 2][:b_t])
    return img, cap, cap_lens, long_cap, long_lens


def make_head(seed: int = 0, **overrides) -> SEPSHead:
    torch.manual_seed(seed)
    base = dict(embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5, top_k=3)
    base.update(overrides)
    head = SEPSHead(get_config("code", **base))
    # Non-trivial values for the learnable scalars so that they are exercised.
    with torch.no_grad():
        if head.aggregation is not None:
            head.aggregation.scale.fill_(1.7)
        for sel in head.selectors.values():
            if sel.keep_bias is not None:
                sel.keep_bias.fill_(0.3)
    return head


def inject_noise(head: SEPSHead, seed: int, b_v: int, b_t: int, n: int) -> dict:
    """Give every selector fixed Gumbel draws and return them for the reference loop."""
    g = torch.Generator().manual_seed(seed)
    draws = {}
    for b, sel in head.selectors.items():
        draws[b] = [
            -torch.log(-torch.log(torch.rand(b_v, b_t, n, generator=g) + 1e-9) + 1e-9)
            for _ in range(2)
        ]
        it = iter(draws[b])
        sel.noise = lambda shape, like, it=it: next(it)
    return draws


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "-".join(map(str, c)))
def test_batched_matches_reference_loop(combo):
    *switches, detach = combo
    overrides = dict(zip(SIM_KEYS, switches, strict=True), detach_selection=detach)
    idx = COMBOS.index(combo)
    cls = idx % 2 == 0  # half the combinations with [CLS], half without
    head = make_head(idx, **overrides)
    inputs = make_inputs(idx, cls)
    # Eval mode.
    head.eval()
    with torch.no_grad():
        got = head(*inputs)
        want, _ = reference_sims(head, *inputs)
    assert got.shape == (B_V, B_T)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # Train mode with the same Gumbel draws in both implementations.
    head.train()
    draws = inject_noise(head, idx, B_V, B_T, N)
    with torch.no_grad():
        got, masks = head(*inputs)
        want, want_masks = reference_sims(head, *inputs, noise=draws)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert set(masks) == set(want_masks)
    for b in masks:
        torch.testing.assert_close(masks[b], want_masks[b], atol=1e-6, rtol=0)


@pytest.mark.parametrize("preset", ["code", "paper", "laps"])
@pytest.mark.parametrize("cls", [True, False])
def test_presets_with_and_without_cls_match_reference(preset, cls):
    torch.manual_seed(3)
    head = SEPSHead(
        get_config(preset, embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5)
    ).eval()
    inputs = make_inputs(11, cls, b_v=4, b_t=5)
    with torch.no_grad():
        torch.testing.assert_close(
            head(*inputs), reference_sims(head, *inputs)[0], atol=1e-5, rtol=1e-5
        )


@pytest.mark.parametrize("preset", ["code", "paper"])
def test_text_chunking_does_not_change_results(preset):
    torch.manual_seed(0)
    cfg = get_config(preset, embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5)
    head = SEPSHead(cfg).eval()
    inputs = make_inputs(5, True, b_v=3, b_t=6)
    with torch.no_grad():
        whole = head(*inputs)
        for chunk in (1, 2, 4):
            head.text_chunk_size = chunk
            torch.testing.assert_close(head(*inputs), whole, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("preset", ["code", "paper"])
def test_texts_ordered_by_length_give_the_loop_results(preset, monkeypatch):
    """Evaluation over several chunks orders the texts by length (less padding per
    chunk) and returns the similarities in the callers' order, also with the official
    loader's repeated dense captions (computed once per run before the ordering)."""
    img, cap, lens, long_cap, long_lens = make_inputs(7, True, b_v=3, b_t=6)
    runs = torch.tensor([0, 0, 0, 3, 3, 5])
    long_cap, long_lens = long_cap[runs], long_lens[runs]
    seen = []
    align = SEPSHead._align_unit

    def spy(self, unit, v, sl, img, sel, texts, *args):
        if "sparse" in texts and v == 0 and sl.start == 0:
            seen.append(texts["sparse"].lens.tolist())
        return align(self, unit, v, sl, img, sel, texts, *args)

    monkeypatch.setattr(SEPSHead, "_align_unit", spy)
    sims = {}
    for impl in ("loop", "batched"):
        torch.manual_seed(0)
        cfg = get_config(preset, embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5)
        head = SEPSHead(cfg, impl=impl, text_chunk_size=2).eval()
        with torch.no_grad():
            sims[impl] = head(img, cap, lens, long_cap, long_lens)
    torch.testing.assert_close(sims["batched"], sims["loop"], atol=1e-5, rtol=1e-5)
    assert sorted(lens.tolist()) in seen  # the sparse captions were aligned by length


def test_padding_beyond_length_is_ignored():
    head = make_head().eval()
    img, cap, lens, long_cap, long_lens = make_inputs(1, True)
    with torch.no_grad():
        base = head(img, cap, lens, long_cap, long_lens)
        cap2, long2 = cap.clone(), long_cap.clone()
        for t in range(B_T):
            cap2[t, int(lens[t]) :] = 1e3
            long2[t, int(long_lens[t]) :] = -1e3
        torch.testing.assert_close(head(img, cap2, lens, long2, long_lens), base)


def _grad_of_images(preset: str, detach: bool, cls: bool = True) -> torch.Tensor:
    torch.manual_seed(0)
    head = SEPSHead(
        get_config(
            preset,
            embed_size=C,
            num_patches=N,
            sparse_ratio=0.5,
            aggr_ratio=0.5,
            detach_selection=detach,
        )
    ).train()
    img, cap, lens, long_cap, long_lens = make_inputs(2, cls)
    img.requires_grad_(True)
    cap.requires_grad_(True)  # so that sims needs a gradient even if the image gets none
    sims, _ = head(img, cap, lens, long_cap, long_lens)
    (grad,) = torch.autograd.grad(sims.sum(), [img], allow_unused=True)
    return torch.zeros_like(img) if grad is None else grad


@pytest.mark.parametrize("preset", ["code", "paper"])
def test_detached_selection_gives_patches_no_gradient(preset):
    grad = _grad_of_images(preset, detach=True)
    assert torch.count_nonzero(grad[:, 1:]) == 0, "spatial tokens must get no gradient"
    assert grad[:, 0].abs().sum() > 0, "[CLS] must still get a gradient"


@pytest.mark.parametrize("preset", ["code", "paper", "laps"])
def test_attached_selection_gives_patches_gradient(preset):
    grad = _grad_of_images(preset, detach=False)
    assert grad[:, 1:].abs().sum(-1).gt(0).sum() >= N, "spatial tokens must get gradients"


def test_detached_selection_without_cls_gives_image_no_gradient():
    grad = _grad_of_images("code", detach=True, cls=False)
    assert torch.count_nonzero(grad) == 0


@pytest.mark.parametrize("form", ["unified", "separate", "eq7"])
@pytest.mark.parametrize("decision", ["topk", "gumbel_topk"])
def test_ratio_loss_is_constant_with_zero_gradient_under_topk(form, decision):
    rho = 0.5
    values = []
    for seed in range(3):
        head = make_head(
            seed,
            scoring="paper",
            decision=decision,
            detach_selection=False,
            dense_fusion="fused",
            aggregation="dual",
        ).train()
        img, cap, lens, long_cap, long_lens = make_inputs(seed, True)
        img.requires_grad_(True)
        _, masks = head(img, cap, lens, long_cap, long_lens)
        loss = ratio_loss(masks, rho, form)
        if decision == "topk":
            assert not loss.requires_grad  # hard top-K: no graph at all
        else:
            assert loss.requires_grad  # straight-through: a graph whose gradient vanishes
            params = [*head.parameters(), img]
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            assert any(g is not None for g in grads)
            for g in grads:
                assert g is None or g.abs().max() < 1e-6
        values.append(loss.item())
    k = math.ceil(N * rho)
    expected = {
        "unified": (2 * k / N - rho) ** 2,
        "separate": 2 * (k / N - rho) ** 2,
        "eq7": (rho - 2 * k / N) ** 2,
    }[form]
    assert values == pytest.approx([expected] * 3, abs=1e-7)


def test_code_ratio_loss_example_from_spec():
    # SPEC.md: (2K/N - rho)^2 with K/N = rho = 0.5 gives (1.0 - 0.5)^2 = 0.25.
    head = SEPSHead(get_config("code", embed_size=C, num_patches=16)).train()
    img = torch.randn(2, 17, C)
    cap, lens = torch.randn(2, 4, C), torch.tensor([4, 2])
    _, masks = head(img, cap, lens, torch.randn(2, 5, C), torch.tensor([5, 3]))
    assert ratio_loss(masks, 0.5, "unified").item() == pytest.approx(0.25)


def test_ratio_loss_acts_under_gumbel_per_patch():
    head = make_head(0, scoring="paper", decision="gumbel_per_patch", detach_selection=False)
    head.train()
    img, cap, lens, long_cap, long_lens = make_inputs(0, True)
    values, grad_norms = [], []
    for seed in range(4):
        torch.manual_seed(seed)
        head.zero_grad()
        _, masks = head(img, cap, lens, long_cap, long_lens)
        loss = ratio_loss(masks, 0.3, "separate")
        loss.backward()
        values.append(loss.item())
        pred = head.selectors["sparse"].score_predictor
        grad_norms.append(sum(p.grad.norm() for p in pred.parameters()).item())
        assert head.selectors["sparse"].keep_bias.grad.abs() > 0
    assert len({round(v, 8) for v in values}) > 1, "the keep count must vary between draws"
    assert min(grad_norms) > 0


@pytest.mark.parametrize("decision", ["gumbel_topk", "gumbel_per_patch"])
def test_straight_through_mask_equals_hard_mask_forward(decision):
    head = make_head(0, decision=decision, scoring="paper", detach_selection=False).train()
    img, cap, lens, long_cap, long_lens = make_inputs(4, True)
    _, masks = head(img, cap, lens, long_cap, long_lens)
    for d in masks.values():
        assert d.requires_grad, "the straight-through mask must carry a gradient"
        assert torch.equal(d.detach(), (d.detach() > 0.5).float())
        if decision == "gumbel_topk":
            assert torch.equal(d.detach().sum(-1), torch.full(d.shape[:2], float(math.ceil(N / 2))))


def test_gumbel_topk_selection_is_noise_free_at_eval_and_train():
    head = make_head(0, decision="gumbel_topk", scoring="paper")
    inputs = make_inputs(6, True)
    with torch.no_grad():
        ev = head.eval()(*inputs)
        tr, _ = head.train()(*inputs)
    torch.testing.assert_close(ev, tr)


def test_dense_caption_required_error_names_field():
    head = make_head().eval()
    img, cap, lens, _, _ = make_inputs(0, True)
    with pytest.raises(ValueError, match="dense_fusion"):
        head(img, cap, lens)
    laps = SEPSHead(get_config("laps", embed_size=C, num_patches=N, aggr_ratio=0.5)).eval()
    assert laps(img, cap, lens).shape == (B_V, B_T)


def test_bad_shapes_raise():
    head = make_head().eval()
    img, cap, lens, long_cap, long_lens = make_inputs(0, True)
    with pytest.raises(ValueError, match="img_embs"):
        head(img[..., :5], cap, lens, long_cap, long_lens)
    with pytest.raises(ValueError, match="cap_lens"):
        head(img, cap, lens[:2], long_cap, long_lens)
    with pytest.raises(ValueError, match="cap_lens"):
        head(img, cap, lens + 10, long_cap, long_lens)
    with pytest.raises(ValueError, match="text_chunk_size"):
        SEPSHead(head.config, text_chunk_size=0)
