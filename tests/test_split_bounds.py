"""split_bounds: the text-only and headroom figures of a split, computed once per
process and split, never returned for another split."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from seps.train import evaluation


def _split(captions: list[str]) -> SimpleNamespace:
    n = len(captions) // 5
    return SimpleNamespace(
        captions=captions,
        dense=[f"dense {i}" for i in range(n)],
        image_ids=[str(i) for i in range(n)],
        n_captions=len(captions),
        n_images=n,
    )


def test_a_split_is_scored_once_and_another_split_again(tmp_path, monkeypatch):
    calls = []

    def fake_sims(captions, dense):
        calls.append(tuple(captions))
        return torch.eye(len(dense)).repeat_interleave(5, 1)

    monkeypatch.setattr(evaluation, "text_only_sims", fake_sims)
    evaluation._bounds.cache_clear()
    a = _split([f"a {i}" for i in range(10)])
    b = _split([f"b {i}" for i in range(10)])
    first = evaluation.split_bounds(tmp_path, a)
    first["text_only_rsum"] = -1.0  # the caller's copy: the memo keeps its own
    again = evaluation.split_bounds(tmp_path, a)
    assert len(calls) == 1 and again["text_only_rsum"] == 600.0
    assert set(again) == {"text_only_rsum", "chance_rsum", "oracle_rsum"}
    evaluation.split_bounds(tmp_path, b)
    evaluation.split_bounds(tmp_path / "other", a)  # another folder: scored again
    assert calls == [tuple(a.captions), tuple(b.captions), tuple(a.captions)]
