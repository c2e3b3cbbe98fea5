"""The compact aggregation weights of the gram order (seps.core.alignment.KeptWeights) give
the values of the full weights."""

from __future__ import annotations

import pytest
import torch

from seps.core.aggregation import pair_weights
from seps.core.alignment import KeptWeights, patch_word_scores


def _case(b: int = 5, m: int = 4, n: int = 12, c: int = 16, n_c: int = 3, k: int = 6):
    g = torch.Generator().manual_seed(0)
    words = torch.nn.functional.normalize(torch.randn(b, m, c, generator=g), dim=-1)
    x = torch.randn(n, c, generator=g)
    e = torch.rand(n, n_c, generator=g)
    keep = torch.zeros(b, n, dtype=torch.bool)
    keep.scatter_(1, torch.rand(b, n, generator=g).argsort(1)[:, :k], True)
    extra = torch.rand(b, n, generator=g) * ~keep
    return words, x, e, keep, extra


def test_dense_form_equals_pair_weights() -> None:
    _, _, e, keep, _ = _case()
    kept = KeptWeights.from_keep(e, keep)
    assert kept.idx.shape == (5, 6)
    full = pair_weights(e, keep.float(), normalise=False)
    assert torch.equal(kept.dense(12), full)


def test_gram_order_with_compact_weights_matches_full_weights() -> None:
    words, x, e, keep, extra = _case()
    cls_col = torch.rand(5, 4)
    full = pair_weights(e, keep.float(), normalise=False)
    gram = x @ x.t()
    ref = patch_word_scores(words, x, cls_col, full, extra, gram=gram)
    out = patch_word_scores(words, x, cls_col, KeptWeights.from_keep(e, keep), extra, gram=gram)
    direct = patch_word_scores(words, x, cls_col, full, extra)
    for got, want in ((out, ref), (out, direct)):
        torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)
        assert got[2] is None


def test_compact_weights_in_the_direct_order_are_expanded() -> None:
    words, x, e, keep, extra = _case()
    full = pair_weights(e, keep.float(), normalise=False)
    ref = patch_word_scores(words, x, None, full, extra)
    out = patch_word_scores(words, x, None, KeptWeights.from_keep(e, keep), extra)
    torch.testing.assert_close(out[0], ref[0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out[1], ref[1], atol=1e-6, rtol=1e-6)


def test_compact_weights_pass_gradients_to_the_exp_logits() -> None:
    words, x, e, keep, extra = _case()
    gram = x @ x.t()
    grads = []
    for form in ("full", "kept"):
        ee = e.clone().requires_grad_(True)
        w = pair_weights(ee, keep.float(), normalise=False) if form == "full" else None
        agg = w if w is not None else KeptWeights.from_keep(ee, keep)
        s, scale, _ = patch_word_scores(words, x, None, agg, extra, gram=gram)
        ((s * scale.unsqueeze(1)).sum()).backward()
        grads.append(ee.grad)
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-5)


def _direct_order_grads(compact: bool) -> list[torch.Tensor]:
    """Gradients to the words, patches, exp-logits and extra token of the direct order
    (a loss on the scores and their column scale), with compact or full weights."""
    words, x, e, keep, extra = _case()
    ins = [t.clone().requires_grad_(True) for t in (words, x, e, extra)]
    ww, xx, ee, ex = ins
    agg = (
        KeptWeights.from_keep(ee, keep)
        if compact
        else pair_weights(ee, keep.float(), normalise=False)
    )
    s, scale, _ = patch_word_scores(ww, xx, None, agg, ex)
    ((s * scale.unsqueeze(1)).sum() + scale.sum()).backward()
    return [t.grad for t in ins]


def test_compact_weights_in_the_direct_order_pass_the_full_weights_gradients() -> None:
    """The direct order aggregates the K kept tokens only (seps.core.alignment._direct_kept):
    same gradients to the exp-logits, the patches and the words as the full weights."""
    want = _direct_order_grads(compact=False)
    for got, ref in zip(_direct_order_grads(compact=True), want, strict=True):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_kept_tokens_gradcheck_with_patches_kept_by_several_pairs() -> None:
    """The hand-written backward of the compact aggregation: every pair's kept patches
    scatter their gradients back into the image's tokens and exp-logits, including
    patches kept by several pairs."""
    from seps.core.alignment import _KeptTokens

    g = torch.Generator().manual_seed(0)
    e = torch.rand(6, 3, generator=g, dtype=torch.float64)
    x = torch.randn(6, 4, generator=g, dtype=torch.float64)
    idx = torch.tensor([[0, 2, 5], [2, 3, 5]])
    inputs = (e.requires_grad_(True), x.requires_grad_(True), idx)
    assert torch.autograd.gradcheck(_KeptTokens.apply, inputs)


@pytest.mark.parametrize("keep_gathered", [False, True])
def test_compact_direct_order_keeps_the_gathered_tokens_only_where_asked(
    keep_gathered: bool, monkeypatch
) -> None:
    """Where the device policy says so (CUDA), what autograd keeps for the backward of
    the compact direct order is smaller than the gathered ``(B, K, C)`` tokens: they
    are gathered again in the backward, so that a training step's peak memory does not
    grow with ``B K C`` per image (issue 45); elsewhere (the CPU) they are kept. The
    gradients are the same either way."""
    import seps.core.alignment as alignment

    monkeypatch.setattr(alignment, "_keep_gathered", lambda x: keep_gathered)
    _, x, _, keep, _ = _case()
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        grads = _direct_order_grads(compact=True)
    gathered = int(keep.sum()) * x.shape[-1]  # every pair's K kept tokens of C
    assert (gathered in saved) == keep_gathered
    assert (max(saved) < gathered) == (not keep_gathered)
    for got, want in zip(grads, _direct_order_grads(compact=False), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_the_gathered_tokens_are_kept_on_the_cpu_and_gathered_again_on_cuda() -> None:
    from seps.core.alignment import _keep_gathered

    assert _keep_gathered(torch.zeros(2))
    if torch.cuda.is_available():
        assert not _keep_gathered(torch.zeros(2, device="cuda"))


def test_token_scores_gradcheck() -> None:
    """The hand-written backward of the direct order on given tokens, including a zero
    token (whose norm is clamped)."""
    from seps.core.alignment import _TokenScores

    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    a[1, 2] = 0.0
    words = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    inputs = tuple(t.requires_grad_(True) for t in (a, words))
    assert torch.autograd.gradcheck(_TokenScores.apply, inputs)
