"""Every kernel implementation (seps.core.kernels) against the batched default.

- ``loop``: every switch combination (864 = the 432 similarity switch combinations
  x detach_selection), eval and train (with the same Gumbel draws), similarities to
  1e-5 and masks exactly;
- both contraction orders of ``batched`` (``direct``, ``gram``) against ``loop`` on a
  set of combinations that takes every switch value at least once;
- ``compiled``: a set of combinations that takes every switch value at least once;
- ``triton``: the same set in the Triton CPU interpreter (a subprocess with
  ``TRITON_INTERPRET=1``), so that the kernels themselves run, not only the skip;
  on a CUDA machine also on the GPU;
- gradients of every implementation agree with the batched ones.

No test here is timed: the speed goals live in ``benchmarks/`` and ``seps-bench bench``.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seps import SEPSHead, get_config
from seps.core.config import CHOICES
from seps.core.kernels import IMPLEMENTATIONS, get_kernel, unavailable_reason

C, N, B_V, B_T = 16, 9, 2, 3
SIM_KEYS = ("scoring", "dense_fusion", "aggregation", "hrpa", "similarity_activation", "decision")
COMBOS = list(itertools.product(*(CHOICES[k] for k in SIM_KEYS), (True, False)))


def covering_combos() -> list[tuple]:
    """A few combinations in which every value of every switch occurs (for slow impls)."""
    values = [CHOICES[k] for k in SIM_KEYS] + [(True, False)]
    width = max(len(v) for v in values)
    return [tuple(v[(i + j) % len(v)] for j, v in enumerate(values)) for i in range(width)]


def make_head(combo: tuple, seed: int, **kwargs) -> SEPSHead:
    *switches, detach = combo
    overrides = dict(zip(SIM_KEYS, switches, strict=True), detach_selection=detach)
    torch.manual_seed(seed)
    cfg = get_config(
        "code", embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5, top_k=3, **overrides
    )
    head = SEPSHead(cfg, **kwargs)
    with torch.no_grad():
        if head.aggregation is not None:
            head.aggregation.scale.fill_(1.7)
        for sel in head.selectors.values():
            if sel.keep_bias is not None:
                sel.keep_bias.fill_(0.3)
    return head


def make_inputs(seed: int, cls: bool, b_v: int = B_V, b_t: int = B_T):
    g = torch.Generator().manual_seed(seed)
    img = torch.randn(b_v, N + int(cls), C, generator=g)
    cap = torch.randn(b_t, 6, C, generator=g)
    cap_lens = torch.tensor([6, 2, 4, 3, 5, 1, 6, 2][:b_t])
    long_cap = torch.randn(b_t, 8, C, generator=g)
    long_lens = torch.tensor([8, 5, 7, 3, 6, 2, 8, 1][:b_t])
    return img, cap, cap_lens, long_cap, long_lens


def fixed_noise(head: SEPSHead, seed: int, b_v: int = B_V, b_t: int = B_T) -> None:
    """Give every selector the same Gumbel draws whatever implementation asks."""
    for i, sel in enumerate(head.selectors.values()):
        g = torch.Generator().manual_seed(seed * 10 + i)
        draws = [
            -torch.log(-torch.log(torch.rand(b_v, b_t, N, generator=g) + 1e-9) + 1e-9)
            for _ in range(2)
        ]
        calls = iter(range(2 * 10**6))
        sel.noise = lambda shape, like, draws=draws, calls=calls: draws[next(calls) % 2]


def run_both(combo: tuple, seed: int, other: dict, base: dict | None = None):
    """Outputs (eval sims, train sims, train masks) of two configurations of one head."""
    cls = seed % 2 == 0
    inputs = make_inputs(seed, cls)
    outs = []
    for kwargs in (base or {}, other):
        head = make_head(combo, seed, **kwargs)
        with torch.no_grad():
            ev = head.eval()(*inputs)
            head.train()
            fixed_noise(head, seed)
            tr, masks = head(*inputs)
        outs.append((ev, tr, masks))
    return outs


def assert_same(a, b) -> None:
    torch.testing.assert_close(a[0], b[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a[1], b[1], atol=1e-5, rtol=1e-5)
    assert set(a[2]) == set(b[2])
    for k in a[2]:
        torch.testing.assert_close(a[2][k], b[2][k], atol=1e-6, rtol=0)


def test_registry_and_errors() -> None:
    assert IMPLEMENTATIONS == ("loop", "batched", "compiled", "triton")
    for name in ("loop", "batched"):
        assert get_kernel(name).name == name
        assert unavailable_reason(name) is None
    with pytest.raises(ValueError, match="impl"):
        SEPSHead(get_config("code"), impl="fast")
    with pytest.raises(ValueError, match="alignment_order"):
        SEPSHead(get_config("code"), alignment_order="fast")
    head = SEPSHead(get_config("code", embed_size=C, num_patches=N), impl="loop")
    assert head.impl == "loop"
    head.impl = "batched"
    assert head.kernel.name == "batched"


@pytest.mark.skipif(
    "TRITON_INTERPRET" in os.environ or torch.cuda.is_available(), reason="CPU-only check"
)
def test_triton_unavailable_reason_on_cpu() -> None:
    reason = unavailable_reason("triton", "cpu")
    assert reason is not None and ("CUDA" in reason or "triton" in reason)


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "-".join(map(str, c)))
def test_loop_matches_batched(combo: tuple) -> None:
    seed = COMBOS.index(combo)
    base, loop = run_both(combo, seed, {"impl": "loop"})
    assert_same(base, loop)


@pytest.mark.parametrize("order", ["gram", "direct"])
@pytest.mark.parametrize("combo", covering_combos(), ids=lambda c: "-".join(map(str, c)))
def test_contraction_orders_match_loop(combo: tuple, order: str) -> None:
    """Both contraction orders of the batched head (auto picks per caption length)."""
    seed = COMBOS.index(combo)
    base, got = run_both(combo, seed, {"alignment_order": order}, base={"impl": "loop"})
    assert_same(base, got)


def _train_grads(preset: str, **head_kwargs) -> list[torch.Tensor | None]:
    """Gradients of images, words and parameters of one training step (fixed noise)."""
    torch.manual_seed(0)
    cfg = get_config(preset, embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5)
    head = SEPSHead(cfg, **head_kwargs).train()
    fixed_noise(head, 1, b_v=3, b_t=4)
    img, cap, lens, long_cap, long_lens = make_inputs(3, True, b_v=3, b_t=4)
    img.requires_grad_(True)
    cap.requires_grad_(True)
    long_cap.requires_grad_(True)
    sims, _ = head(img, cap, lens, long_cap, long_lens)
    (sims * torch.linspace(-1, 2, sims.numel()).view_as(sims)).sum().backward()
    return [img.grad, cap.grad, long_cap.grad] + [p.grad for p in head.parameters()]


def assert_same_grads(grads_a: list, grads_b: list) -> None:
    for a, b in zip(grads_a, grads_b, strict=True):
        if a is None or b is None:
            assert a is None or a.abs().max() == 0
            assert b is None or b.abs().max() == 0
        else:
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("preset", ["code", "paper", "laps"])
@pytest.mark.parametrize("impl", ["loop", "compiled"])
def test_gradients_match_batched(preset: str, impl: str) -> None:
    """Gradients of the parameters, images and words agree with the batched head."""
    if (reason := unavailable_reason(impl)) is not None:
        pytest.skip(reason)
    assert_same_grads(_train_grads(preset, impl="batched"), _train_grads(preset, impl=impl))


@pytest.mark.parametrize("preset", ["code", "paper"])
@pytest.mark.parametrize("order", ["direct", "gram"])
def test_contraction_order_gradients_match_loop(preset: str, order: str) -> None:
    """Both contraction orders (the direct one has a hand-written backward) give the
    loop's gradients."""
    got = _train_grads(preset, impl="batched", alignment_order=order)
    assert_same_grads(_train_grads(preset, impl="loop"), got)


def test_direct_tokens_gradcheck() -> None:
    """The hand-written backward of the direct order against finite differences,
    including an all-zero weight row (a zero token, whose norm is clamped)."""
    from seps.core.alignment import _DirectTokens

    g = torch.Generator().manual_seed(0)
    w = torch.rand(2, 3, 5, generator=g, dtype=torch.float64)
    w[1, 2] = 0.0
    x = torch.randn(5, 4, generator=g, dtype=torch.float64)
    words = torch.randn(2, 6, 4, generator=g, dtype=torch.float64)
    inputs = tuple(t.requires_grad_(True) for t in (w, x, words))
    assert torch.autograd.gradcheck(_DirectTokens.apply, inputs)


@pytest.mark.parametrize("combo", covering_combos(), ids=lambda c: "-".join(map(str, c)))
def test_compiled_matches_batched(combo: tuple) -> None:
    if (reason := unavailable_reason("compiled")) is not None:
        pytest.skip(reason)
    seed = COMBOS.index(combo)
    base, got = run_both(combo, seed, {"impl": "compiled"})
    assert_same(base, got)


def test_text_chunking_and_orders_agree_at_realistic_size() -> None:
    """ViT-224 geometry at C = 64: chunked, direct and gram orders all agree."""
    torch.manual_seed(0)
    cfg = get_config("code", embed_size=64)
    g = torch.Generator().manual_seed(0)
    img = torch.randn(3, 197, 64, generator=g)
    cap, long_cap = torch.randn(7, 12, 64, generator=g), torch.randn(7, 40, 64, generator=g)
    lens, long_lens = (
        torch.randint(3, 13, (7,), generator=g),
        torch.randint(20, 41, (7,), generator=g),
    )
    outs = []
    for kwargs in (
        {"impl": "loop"},
        {},
        {"text_chunk_size": 2},
        {"alignment_order": "gram"},
        {"alignment_order": "direct"},
    ):
        torch.manual_seed(0)
        head = SEPSHead(cfg, **kwargs).eval()
        with torch.no_grad():
            outs.append(head(img, cap, lens, long_cap, long_lens))
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], atol=1e-5, rtol=1e-5)


def test_auto_order_is_chosen_per_chunk_and_agrees(monkeypatch) -> None:
    """Captions whose shortest favours the gram order and longest the direct one: each
    text chunk picks its own order (both are used) and the result equals the loop's."""
    import seps.core.head
    import seps.core.head_steps

    cfg = get_config("code", embed_size=512, dense_fusion="none")
    g = torch.Generator().manual_seed(1)
    img = torch.randn(2, 197, 512, generator=g)
    cap = torch.randn(8, 30, 512, generator=g)
    lens = torch.tensor([2, 3, 30, 28, 2, 25, 3, 30])
    # At C = 512, ViT-224 and K = 98 the gram order is the cheaper one below 20 words.
    assert seps.core.head.use_gram(3, 196, cfg.num_aggregated, 512, 98)
    assert not seps.core.head.use_gram(25, 196, cfg.num_aggregated, 512, 98)
    orders = []
    real = seps.core.head_steps.patch_word_scores

    def spy(*args, **kwargs):
        orders.append(kwargs["gram"] is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(seps.core.head_steps, "patch_word_scores", spy)
    outs = []
    for impl in ("loop", "batched"):
        torch.manual_seed(0)
        head = SEPSHead(cfg, impl=impl, text_chunk_size=4).eval()
        with torch.no_grad():
            outs.append(head(img, cap, lens))
    assert set(orders) == {True, False}
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)


def test_use_gram_counts_the_compact_norms() -> None:
    from seps.core.alignment import use_gram

    # ViT-224, C = 512, N_c = 39: full weights switch near 28 words; compact ones, whose
    # direct order also aggregates the K kept tokens only, near 19.
    assert use_gram(28, 196, 39, 512) and not use_gram(29, 196, 39, 512)
    assert use_gram(19, 196, 39, 512, kept=98) and not use_gram(20, 196, 39, 512, kept=98)


#: Run in a subprocess with TRITON_INTERPRET=1 (it must be set before triton is imported).
TRITON_CHECK = """
import torch
import test_kernels as tk
from seps.core.alignment import row_col_max as torch_row_col_max
from seps.core.kernels import triton as tr
from seps.core.selection import topk_mask, weighted_softmax

g = torch.Generator().manual_seed(0)
for n, k in ((9, 5), (49, 40), (196, 98), (576, 288)):
    s = torch.randn(3, 4, n, generator=g)
    m = tr.topk_mask(s, k)
    assert torch.equal(m, topk_mask(s, k)), n
    torch.testing.assert_close(tr.dropped_softmax(s, 1 - m), weighted_softmax(s, 1 - m))
ties = torch.tensor([[3.0, 1, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1]])
assert torch.equal(tr.topk_mask(ties, 3), topk_mask(ties, 3))
for m_, l_ in ((6, 5), (120, 41), (20, 198)):
    s = torch.randn(5, m_, l_, generator=g)
    scale = torch.rand(5, l_, generator=g)
    wm = torch.rand(5, m_, generator=g) > 0.3
    wm[:, 0] = True
    tm = torch.rand(5, l_, generator=g) > 0.5
    tm[:, 0] = True
    for args in ((s, scale, wm, tm), (s, None, wm, None)):
        for a, b in zip(tr.row_col_max(*args), torch_row_col_max(*args)):
            assert torch.equal(a, b)
for combo in tk.covering_combos():
    seed = tk.COMBOS.index(combo)
    base, got = tk.run_both(combo, seed, {"impl": "triton"})
    tk.assert_same(base, got)
for preset in ("code", "paper"):
    tk.test_gradients_match_batched(preset, "triton")
print("checked", len(tk.covering_combos()), "combinations")
"""


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("triton") is None, reason="triton is not installed"
)
def test_triton_kernels_in_interpreter() -> None:
    """The Triton kernels run (in the CPU interpreter) and match the torch ops exactly and
    the batched head on every covering combination, eval and train, and in gradients."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-c", TRITON_CHECK],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(Path(__file__).parent),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "checked" in proc.stdout


@pytest.mark.skipif(
    unavailable_reason("triton", "cuda") is not None or not torch.cuda.is_available(),
    reason="needs CUDA and triton",
)
@pytest.mark.parametrize("combo", covering_combos(), ids=lambda c: "-".join(map(str, c)))
def test_triton_matches_batched_on_cuda(combo: tuple) -> None:
    seed = COMBOS.index(combo)
    inputs = [t.cuda() for t in make_inputs(seed, seed % 2 == 0)]
    outs = []
    for impl in ("batched", "triton"):
        head = make_head(combo, seed, impl=impl).cuda().eval()
        with torch.no_grad():
            outs.append(head(*inputs))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("preset", ["code", "paper", "laps"])
@pytest.mark.parametrize("dense_fusion", ["dual_branch", "dense_only"])
def test_repeated_dense_captions_match_loop(preset: str, dense_fusion: str) -> None:
    """Evaluation computes a dense branch once per run of identical dense captions
    (the official loader's layout); the result equals the per-text loop."""
    torch.manual_seed(0)
    cfg = get_config(preset, embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5)
    if cfg.dense_fusion != "none":
        cfg = cfg.replace(dense_fusion=dense_fusion)
    img, cap, lens, long_cap, long_lens = make_inputs(4, True, b_v=3, b_t=8)
    long_cap = long_cap[[0, 0, 0, 3, 3, 5, 6, 6]]
    long_lens = long_lens[[0, 0, 0, 3, 3, 5, 6, 6]]
    outs = []
    for impl in ("loop", "batched"):
        torch.manual_seed(0)
        head = SEPSHead(cfg, impl=impl, text_chunk_size=3).eval()
        with torch.no_grad():
            outs.append(head(img, cap, lens, long_cap, long_lens))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("preset", ["code", "paper"])
def test_exact_ties_select_the_same_patches(preset: str) -> None:
    """Exact float32 score ties (here: repeated patches) are broken the same way by every
    implementation (lower patch index first), so they keep the same patches."""
    torch.manual_seed(0)
    cfg = get_config(preset, embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5)
    img, cap, lens, long_cap, long_lens = make_inputs(7, True, b_v=2, b_t=3)
    img[:, 2:] = img[:, 2:3]  # patches 1..8 identical: K = 5 cuts through a tie
    outs = []
    for impl in ("loop", "batched"):
        torch.manual_seed(0)
        head = SEPSHead(cfg, impl=impl).train()
        fixed_noise(head, 0, b_v=2, b_t=3)
        with torch.no_grad():
            outs.append(head(img, cap, lens, long_cap, long_lens))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-5, rtol=1e-5)
    for b in outs[0][1]:
        torch.testing.assert_close(outs[1][1][b], outs[0][1][b], atol=1e-6, rtol=0)


_HEAP_LOOP = """
import torch
from seps.core.kernels.compiled import compiled_ops
from seps.core.selection import weighted_softmax
torch.set_num_threads(2)
softmax = compiled_ops().extra_weights
g = torch.Generator().manual_seed(0)
for shape in [(4, 4, 36), (64, 64, 35), (64, 64, 36), (8, 3, 36), (1, 7, 36)]:
    for _ in range(40):
        x = torch.randn(shape, generator=g)
        w = (torch.rand(shape, generator=g) > 0.5).float()
        torch.testing.assert_close(softmax(x, w), weighted_softmax(x, w), atol=1e-6, rtol=1e-5)
print("heap intact")
"""


@pytest.mark.parametrize("path", ["native", "portable"])
def test_compiled_weighted_softmax_is_right_on_both_float_paths(path: str) -> None:
    """The compiled selection softmax on 2 CPU threads with symbolic sizes, in a child
    process (a corrupted heap aborts the process that holds it), equals the eager
    function. With Inductor's vectorised C++ (torch 2.14.1) the loop aborted on the
    native path of an AVX-512 machine (glibc: a double free or a corrupted chunk), and
    under ``cpp.dynamic_threads`` it gave wrong weights on the portable (AVX2) path; the
    two cases catch those two settings coming back (on an AVX2-only machine both run the
    same AVX2 code) (:mod:`seps.core.kernels.compiled`)."""
    if (reason := unavailable_reason("compiled")) is not None:
        pytest.skip(reason)
    from seps.experiments.provenance import CPU_ENV_OVERRIDES
    from seps.runtime.float_path import ENV_VAR, FLOAT_PATHS

    env = {k: v for k, v in os.environ.items() if k not in CPU_ENV_OVERRIDES}
    env.update({ENV_VAR: path, **FLOAT_PATHS[path], "OMP_NUM_THREADS": "2"})
    proc = subprocess.run(
        [sys.executable, "-c", _HEAP_LOOP], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "heap intact" in proc.stdout
