"""Text-only work reused across head calls on the same texts (SEPSHead.reusing_texts,
seps.core.chunking.TextReuse): the evaluation's similarities stay the same to the bit."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch
from switch_flips import random_inputs, single_flips

from seps.core.chunking import TextReuse
from seps.core.config import get_config
from seps.core.evaluate import DENSE_SOURCES, similarity_matrix
from seps.core.head import SEPSHead

C = 32


#: The switches that change which texts the head reads and orders by (the others act
#: on the image side only; all 63 single flips were checked once, the same bits).
TEXT_SIDE = ("scoring", "dense_fusion")


@pytest.fixture(scope="module")
def inputs():
    return random_inputs(4, 40, C)


@pytest.mark.parametrize("cfg", single_flips(TEXT_SIDE))
def test_reusing_text_work_gives_the_same_bits_under_every_protocol(cfg, inputs, monkeypatch):
    torch.manual_seed(0)
    head = SEPSHead(cfg, text_chunk_size=8)  # several chunks: the texts get ordered
    kw = dict(inputs, text_shard=20, image_shard=2)
    lookups, computed = [], []  # the memo is used: the second image shard hits it
    real_get = TextReuse.get

    def counting_get(self, tag, sources, compute):
        lookups.append(tag)
        return real_get(self, tag, sources, lambda: computed.append(tag) or compute())

    monkeypatch.setattr(TextReuse, "get", counting_get)
    reused = {src: similarity_matrix(head, dense_source=src, **kw) for src in DENSE_SOURCES}
    assert 0 < len(computed) < len(lookups)
    monkeypatch.setattr(head, "reusing_texts", contextlib.nullcontext)
    for src in DENSE_SOURCES:
        assert torch.equal(reused[src], similarity_matrix(head, dense_source=src, **kw)), src


def test_a_text_tensor_changed_in_place_is_computed_anew(inputs):
    head = SEPSHead(dataclasses.replace(get_config("code"), embed_size=C, num_patches=36))
    head.eval()
    img, cap, lens = inputs["img_embs"][:2], inputs["cap_embs"].clone(), inputs["cap_lens"]
    dense = inputs["dense_embs"][0].expand(cap.shape[0], -1, -1)
    dlens = inputs["dense_lens"][0].expand(cap.shape[0])
    with torch.no_grad(), head.reusing_texts():
        head(img, cap, lens, dense, dlens)
        cap.mul_(-1.0)
        after = head(img, cap, lens, dense, dlens)
    with torch.no_grad():
        assert torch.equal(after, head(img, cap, lens, dense, dlens))


def test_training_and_gradient_calls_do_not_reuse():
    head = SEPSHead(get_config("code"))
    with head.reusing_texts():
        head.train()
        assert head._reusing() is None
        head.eval()
        assert head._reusing() is None  # gradients on
        with torch.no_grad():
            assert isinstance(head._reusing(), TextReuse)
    with torch.no_grad():
        assert head._reusing() is None  # outside the block


def test_the_memo_returns_the_first_result_and_holds_its_sources():
    memo = TextReuse()
    calls = []
    t = torch.zeros(3)
    first = memo.get("x", (t,), lambda: calls.append(1) or torch.ones(2))
    assert memo.get("x", (t,), lambda: calls.append(1) or torch.ones(2)) is first
    assert calls == [1]
    t.add_(1.0)  # a new version: computed again
    memo.get("x", (t,), lambda: calls.append(1) or torch.ones(2))
    assert calls == [1, 1]
