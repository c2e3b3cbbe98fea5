"""Dense captions given per image (``SEPSHead(..., dense_per_image=True)``, the
``candidate`` protocol): one call equals one call per image with its caption expanded
over the texts (seps.core.reference.per_image_calls), in evaluation and in training."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from switch_flips import random_inputs, single_flips

from seps.core.chunking import TextBatch, order_by_length, texts_per_image
from seps.core.config import get_config
from seps.core.evaluate import similarity_matrix
from seps.core.head import SEPSHead
from seps.core.reference import per_image_calls

C = 32
TOL = 1e-5  # SPEC.md's float32 tolerance: the images are batched, not called one by one


@pytest.fixture(scope="module")
def inputs():
    return random_inputs(5, 24, C)


def _args(x):
    return x["img_embs"], x["cap_embs"], x["cap_lens"], x["dense_embs"], x["dense_lens"]


@pytest.mark.parametrize("cfg", single_flips())
def test_one_call_with_per_image_dense_captions_equals_one_call_per_image(cfg, inputs):
    torch.manual_seed(0)
    head = SEPSHead(cfg, text_chunk_size=8).eval()  # several chunks: texts get ordered
    with torch.no_grad():
        batched = head(*_args(inputs), dense_per_image=True)
        oracle = per_image_calls(head, *_args(inputs))
    assert batched.shape == oracle.shape == (5, 24)
    torch.testing.assert_close(batched, oracle, rtol=0, atol=TOL)


@pytest.mark.parametrize("cfg", single_flips())
def test_training_with_per_image_dense_captions_draws_and_selects_as_one_call_per_image(
    cfg, inputs
):
    torch.manual_seed(0)
    head = SEPSHead(cfg, text_chunk_size=8).train()
    grads = []
    outs = []
    for call in (
        lambda *a: head(*a, dense_per_image=True),
        lambda *a: per_image_calls(head, *a),
    ):
        leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in _args(inputs)]
        torch.manual_seed(1)  # the same Gumbel draws, image by image
        sims, masks = call(*leaves)
        (sims.sum() + sum(m.sum() for m in masks.values())).backward()
        grads.append([leaves[i].grad for i in (0, 1, 3)])
        outs.append((sims, masks))
    (s_a, m_a), (s_b, m_b) = outs
    torch.testing.assert_close(s_a, s_b, rtol=0, atol=TOL)
    assert m_a.keys() == m_b.keys()
    for k in m_a:
        assert m_a[k].shape == m_b[k].shape == (5, 24, 36)
        torch.testing.assert_close(m_a[k], m_b[k], rtol=0, atol=TOL)
    for g_a, g_b in zip(*grads, strict=True):
        if g_b is None:  # e.g. the dense caption of a head without one
            assert g_a is None or not g_a.any()
            continue
        torch.testing.assert_close(g_a, g_b, rtol=1e-4, atol=TOL)


@pytest.mark.parametrize("preset", ["code", "paper"])
def test_the_reference_loop_takes_per_image_dense_captions_too(preset, inputs):
    cfg = dataclasses.replace(get_config(preset), embed_size=C, num_patches=36)
    torch.manual_seed(0)
    head = SEPSHead(cfg).eval()
    with torch.no_grad():
        batched = head(*_args(inputs), dense_per_image=True)
        head.impl = "loop"
        loop = head(*_args(inputs), dense_per_image=True)
    torch.testing.assert_close(batched, loop, rtol=0, atol=TOL)


@pytest.mark.parametrize("preset", ["code", "paper"])
def test_candidate_similarities_do_not_depend_on_the_image_shard(preset, inputs):
    cfg = dataclasses.replace(get_config(preset), embed_size=C, num_patches=36)
    torch.manual_seed(0)
    head = SEPSHead(cfg, text_chunk_size=8)
    kw = dict(inputs, dense_source="candidate", text_shard=10)
    one_by_one = similarity_matrix(head, image_shard=1, **kw)
    sharded = similarity_matrix(head, image_shard=2, **kw)  # 2 + 2 + 1 images
    torch.testing.assert_close(sharded, one_by_one, rtol=0, atol=TOL)
    with torch.no_grad():
        oracle = per_image_calls(head.eval(), *_args(inputs))
    torch.testing.assert_close(sharded, oracle, rtol=0, atol=TOL)


def test_a_dense_caption_count_other_than_the_images_is_refused(inputs):
    head = SEPSHead(dataclasses.replace(get_config("code"), embed_size=C, num_patches=36))
    img, cap, lens, dense, dlens = _args(inputs)
    with pytest.raises(ValueError, match=r"^long_cap_embs: expected 5 dense captions"):
        head(img, cap, lens, dense[:4], dlens[:4], dense_per_image=True)


def test_per_image_captions_count_one_text_and_leave_the_text_order_alone():
    g = torch.Generator().manual_seed(0)
    sparse = TextBatch(torch.randn(6, 9, 4, generator=g), torch.tensor([5, 2, 9, 1, 3, 4]))
    dense = TextBatch(torch.randn(3, 7, 4, generator=g), torch.tensor([7, 1, 4]), per_image=True)
    assert texts_per_image({"sparse": sparse, "dense": dense}) == 6
    assert texts_per_image({"dense": dense}) == 1
    ordered = order_by_length({"sparse": sparse, "dense": dense}, {"sparse", "dense"})
    assert ordered is not None
    texts, inv = ordered
    assert texts["dense"] is dense
    assert texts["sparse"].lens.tolist() == [1, 2, 3, 4, 5, 9]
    assert torch.equal(texts["sparse"].lens[inv], sparse.lens)
    assert order_by_length({"dense": dense}, {"dense"}) is None
