"""The head aligns a block of images per call (seps.core.head_steps.align_block): which
units and images take that path, that the memory budget only splits it, and that it
agrees with the per-image path. (Its values against SPEC.md's
loop are pinned by test_head.py and test_kernels.py, whose direct-order cases run
through it.)"""

from __future__ import annotations

import pytest
import torch

from seps.core.config import get_config
from seps.core.head import SEPSHead

C, N, B = 16, 16, 6


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randn(B, N + 1, C, generator=g)
    cap = torch.randn(B, 7, C, generator=g)
    lens = torch.tensor([7, 3, 5, 2, 6, 4])
    dense = torch.randn(B, 11, C, generator=g)
    dlens = torch.tensor([11, 6, 9, 4, 10, 8])
    return img, cap, lens, dense, dlens


def _head(preset: str, **kwargs) -> SEPSHead:
    torch.manual_seed(0)
    cfg = get_config(preset, embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5)
    return SEPSHead(cfg, **kwargs).train()


def _step(head: SEPSHead, per_image: bool = True):
    """Similarities and the gradients of the inputs and parameters of one training call
    (the same Gumbel draws whatever the path)."""
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in _inputs()]
    torch.manual_seed(1)
    sims, _ = head(*leaves, dense_per_image=per_image and head.config.uses_dense)
    (sims * torch.linspace(-1, 2, sims.numel()).view_as(sims)).sum().backward()
    grads = [leaves[i].grad for i in (0, 1, 3)] + [p.grad for p in head.parameters()]
    return sims.detach(), grads


def _count_calls(monkeypatch) -> dict[str, int]:
    calls = {"_align_block": 0, "_align_unit": 0}
    for name in calls:
        original = getattr(SEPSHead, name)

        def spy(self, *a, _name=name, _original=original, **kw):
            calls[_name] += 1
            return _original(self, *a, **kw)

        monkeypatch.setattr(SEPSHead, name, spy)
    return calls


@pytest.mark.parametrize("preset", ["laps", "code", "paper"])
def test_a_training_step_aligns_all_its_images_in_one_call_per_unit(preset, monkeypatch):
    calls = _count_calls(monkeypatch)
    head = _head(preset, alignment_order="direct")
    _step(head)
    units = 2 if preset == "code" else 1  # code: a sparse and a dense branch
    assert calls == {"_align_block": units, "_align_unit": 0}


def test_the_gram_order_aligns_image_by_image(monkeypatch):
    calls = _count_calls(monkeypatch)
    _step(_head("laps", alignment_order="gram"))
    assert calls == {"_align_block": 0, "_align_unit": B}


@pytest.mark.parametrize("preset", ["laps", "code", "paper"])
def test_evaluation_blocks_images_of_few_patches_only_with_the_same_similarities(
    preset, monkeypatch
):
    calls = _count_calls(monkeypatch)
    head = _head(preset, alignment_order="direct").eval()
    inputs = _inputs()
    per_image = head.config.uses_dense
    with torch.no_grad():
        blocked = head(*inputs, dense_per_image=per_image)
        units = dict(calls)
        head.block_patches = N - 1  # these images are now too large to block
        one_by_one = head(*inputs, dense_per_image=per_image)
    assert units["_align_block"] >= 1 and units["_align_unit"] == 0
    assert calls["_align_block"] == units["_align_block"] and calls["_align_unit"] >= B
    torch.testing.assert_close(blocked, one_by_one, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("preset", ["laps", "code", "paper"])
def test_a_small_memory_budget_splits_the_block_without_changing_the_result(preset, monkeypatch):
    calls = _count_calls(monkeypatch)
    whole = _step(_head(preset, alignment_order="direct"))
    one_call = calls["_align_block"]
    # A budget this small leaves one image and one text (the text chunk) per call.
    split = _step(_head(preset, alignment_order="direct", memory_budget_mb=1e-3))
    assert calls["_align_block"] - one_call == B * B * one_call
    torch.testing.assert_close(split[0], whole[0], rtol=0, atol=1e-6)
    for a, b in zip(split[1], whole[1], strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("preset", ["laps", "code", "paper"])
@pytest.mark.parametrize("per_image", [True, False])
def test_the_block_gives_the_per_image_similarities_and_gradients(preset, per_image):
    """The per-image path is what the gram order runs; both orders compute the same
    products in another order, so they agree within float32 rounding."""
    blocked = _step(_head(preset, alignment_order="direct"), per_image)
    per_image_path = _step(_head(preset, alignment_order="gram"), per_image)
    torch.testing.assert_close(blocked[0], per_image_path[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(blocked[1], per_image_path[1], strict=True):
        assert (a is None) == (b is None) or not (a if a is not None else b).any()
        if a is not None and b is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_cpu_training_on_large_images_blocks_only_the_units_already_in_the_direct_order(
    monkeypatch,
):
    """``code`` with images above block_patches on the CPU: the dense unit, whose captions
    all take the direct order, aligns in blocks; the sparse one, whose order is decided
    per chunk, image by image. Sims and gradients are those of the per-image path."""
    import seps.core.head as head_module

    per_image_path = _step(_head("code", alignment_order="gram"))
    calls = _count_calls(monkeypatch)
    # sparse lengths 2..7: gram for the shortest only (decided per chunk); dense 4..11: direct
    monkeypatch.setattr(head_module, "use_gram", lambda words, *a: words < 4)
    head = _head("code")
    head.block_patches = N - 1
    mixed = _step(head)
    assert calls == {"_align_block": 1, "_align_unit": B}
    torch.testing.assert_close(mixed[0], per_image_path[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(mixed[1], per_image_path[1], strict=True):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_small_images_align_image_by_image_unless_every_unit_takes_the_direct_order(
    monkeypatch,
):
    """At most block_patches patches (the ``standard`` regime's sizes): all units in
    blocks or none, as before the CPU training step blocked its direct units alone (the
    records' bits depend on it)."""
    import seps.core.head as head_module

    calls = _count_calls(monkeypatch)
    # sparse lengths 2..7: gram for the shortest only (decided per chunk); dense 4..11: direct
    monkeypatch.setattr(head_module, "use_gram", lambda words, *a: words < 4)
    _step(_head("code"))
    assert calls == {"_align_block": 0, "_align_unit": 2 * B}  # both units, every image


def test_training_on_large_images_with_the_triton_or_compiled_kernels_aligns_image_by_image(
    monkeypatch,
):
    calls = _count_calls(monkeypatch)
    head = _head("laps", alignment_order="direct", impl="compiled")
    head.block_patches = N - 1
    _step(head)
    assert calls == {"_align_block": 0, "_align_unit": B}


@pytest.mark.parametrize("preset", ["laps", "code", "paper"])
def test_uneven_blocks_of_images_and_text_chunks_give_the_per_image_result(preset):
    """5 images x 7 texts, 3 texts a chunk and a budget of a few images a call: the
    last image block and the last text chunk are short."""
    g = torch.Generator().manual_seed(4)
    img = torch.randn(5, N + 1, C, generator=g)
    cap = torch.randn(7, 7, C, generator=g)
    lens = torch.tensor([7, 3, 5, 2, 6, 4, 1])
    dense = torch.randn(5, 11, C, generator=g)
    dlens = torch.tensor([11, 6, 9, 4, 10])
    outs = []
    for order, budget in (("direct", 0.05), ("gram", 512.0)):
        head = _head(preset, alignment_order=order, text_chunk_size=3, memory_budget_mb=budget)
        leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in (img, cap, dense)]
        torch.manual_seed(1)
        sims, _ = head(leaves[0], leaves[1], lens, leaves[2], dlens, dense_per_image=True)
        (sims * torch.linspace(-1, 2, sims.numel()).view_as(sims)).sum().backward()
        outs.append((sims.detach(), [t.grad for t in leaves]))
    (s_a, g_a), (s_b, g_b) = outs
    assert s_a.shape == (5, 7)
    torch.testing.assert_close(s_a, s_b, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_a, g_b, strict=True):
        if a is not None and b is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("n", "device", "impl", "on_device", "training", "expected"),
    [
        (36, "cpu", "batched", True, False, "every"),  # small images: all units or none
        (36, "cpu", "triton", True, True, "every"),
        (36, "cpu", "batched", True, True, "every"),
        (196, "cpu", "batched", True, False, "none"),  # a CPU evaluation: per image
        (196, "cpu", "batched", True, True, "direct"),  # a CPU training step: direct units
        (196, "cpu", "compiled", True, True, "none"),
        (196, "cuda", "batched", True, False, "all"),  # a GPU: launch-bound otherwise
        (36, "cuda", "batched", True, True, "all"),
        (196, "cuda", "triton", True, True, "none"),  # its own per-image kernels
        (196, "cuda", "compiled", True, False, "none"),
        (196, "cuda", "batched", False, True, "none"),  # SEPSHead.device_blocks off
        (36, "cuda", "batched", False, False, "every"),
    ],
)
def test_which_units_align_in_blocks_depends_on_size_device_kernels_and_mode(
    n, device, impl, on_device, training, expected
):
    from seps.core.head_steps import block_mode

    assert block_mode(n, torch.device(device), impl, 64, on_device, training) == expected


@pytest.mark.parametrize("preset", ["laps", "code", "paper"])
def test_large_images_blocked_as_on_a_gpu_take_the_direct_order_with_the_same_results(
    preset, monkeypatch
):
    """What a GPU runs (block_mode ``all``), forced on the CPU: under ``auto`` every unit
    takes the direct order and one call per unit aligns the step; sims and gradients
    equal the per-image path's."""
    import seps.core.head as head_module

    per_image_path = _step(_head(preset, alignment_order="gram"))
    calls = _count_calls(monkeypatch)
    monkeypatch.setattr(SEPSHead, "_block_mode", lambda self, n, device: "all")
    # auto would pick the gram order for every caption, as at ViT-224 for short ones
    monkeypatch.setattr(head_module, "use_gram", lambda *a: True)
    head = _head(preset)  # alignment_order auto
    head.block_patches = N - 1  # these images count as large
    blocked = _step(head)
    units = 2 if preset == "code" else 1
    assert calls == {"_align_block": units, "_align_unit": 0}
    torch.testing.assert_close(blocked[0], per_image_path[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(blocked[1], per_image_path[1], strict=True):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("preset", ["laps", "code", "paper"])
def test_on_cuda_large_images_align_in_blocks_with_the_per_image_results(preset, monkeypatch):
    """ViT-224's 196 patches + [CLS] on a GPU: one call per unit, and the similarities
    and gradients of the head with device_blocks off (one call per image)."""
    n, b = 196, 6
    g = torch.Generator().manual_seed(5)
    inputs = [
        torch.randn(b, n + 1, C, generator=g),
        torch.randn(b, 7, C, generator=g),
        torch.tensor([7, 3, 5, 2, 6, 4]),
        torch.randn(b, 11, C, generator=g),
        torch.tensor([11, 6, 9, 4, 10, 8]),
    ]
    cfg = get_config(preset, embed_size=C, num_patches=n, sparse_ratio=0.5, aggr_ratio=0.5)
    calls = _count_calls(monkeypatch)
    results = []
    for blocks in (True, False):
        torch.manual_seed(0)
        head = SEPSHead(cfg).cuda().train()
        head.device_blocks = blocks
        leaves = [t.cuda().requires_grad_(t.is_floating_point()) for t in inputs]
        torch.manual_seed(1)
        sims, _ = head(*leaves, dense_per_image=cfg.uses_dense)
        (sims * torch.linspace(-1, 2, sims.numel(), device="cuda").view_as(sims)).sum().backward()
        grads = [leaves[i].grad for i in (0, 1, 3)] + [p.grad for p in head.parameters()]
        results.append((sims.detach().cpu(), [None if x is None else x.cpu() for x in grads]))
        if blocks:
            assert calls["_align_block"] == (2 if preset == "code" else 1)
            assert calls["_align_unit"] == 0
    assert calls["_align_unit"] >= b
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    for x, y in zip(results[0][1], results[1][1], strict=True):
        assert (x is None) == (y is None)
        if x is not None and y is not None:
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
