"""The pretraining's token subsets (seps.train.pretrain: PretrainRecipe.keep_tokens,
token_subset): what each step's late interaction sees, and that the share is part of
what a build is keyed and fingerprinted by."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from tiny_recipe import make_tiny_recipe

import seps.train.pretrain as pretrain
from seps.experiments.provenance import pretrain_fingerprint


def _tokens(b: int, n: int, c: int = 4, cls: bool = True) -> torch.Tensor:
    """Tokens whose first channel names them: [CLS] is -1, patch k is k."""
    x = torch.arange(n, dtype=torch.float32)[None, :, None].expand(b, n, c).clone()
    if cls:
        x = torch.cat([torch.full((b, 1, c), -1.0), x], 1)
    return x


@pytest.mark.parametrize("keep", [0.25, 0.5, 0.9])
def test_a_subset_keeps_cls_first_and_ceil_keep_n_distinct_patches_of_its_own_image(keep):
    b, n = 5, 36
    img = _tokens(b, n)
    img[2] += 100.0  # image 2's tokens are told apart from the others'
    torch.manual_seed(0)
    out = pretrain.token_subset(img, keep)
    k = math.ceil(keep * n)
    assert out.shape == (b, 1 + k, 4)
    assert (out[:, 0] == img[:, 0]).all()  # [CLS] first, untouched
    ids = out[:, 1:, 0]
    ids[2] -= 100.0
    for row in ids.tolist():
        assert len(set(row)) == k and set(row) <= set(range(n))
    # Each image draws its own subset.
    assert len({tuple(sorted(r)) for r in ids.tolist()}) > 1


def test_a_square_grid_without_cls_is_subset_alone():
    torch.manual_seed(0)
    out = pretrain.token_subset(_tokens(3, 16, cls=False), 0.25)
    assert out.shape == (3, 4, 4) and (out[..., 0] >= 0).all()


def test_keeping_every_token_returns_the_input_and_draws_nothing():
    img = _tokens(2, 36)
    torch.manual_seed(0)
    assert pretrain.token_subset(img, 1.0) is img
    after = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(3))  # the generator did not move


def test_subsets_are_drawn_from_the_seeded_global_generator():
    img = _tokens(4, 36)
    torch.manual_seed(7)
    a = pretrain.token_subset(img, 0.25)
    torch.manual_seed(7)
    assert torch.equal(a, pretrain.token_subset(img, 0.25))


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5])
def test_a_share_outside_zero_to_one_is_refused_naming_the_field(bad):
    want = r"recipe field 'keep_tokens': .*expected a share in \(0, 1\]"
    with pytest.raises(ValueError, match=want):
        pretrain.PretrainRecipe(description="x", keep_tokens=bad)


def test_the_standard_recipe_pretrains_on_a_quarter_and_the_share_is_in_its_key(monkeypatch):
    assert pretrain.recipe("synth-48").keep_tokens == 0.25
    base = pretrain.recipe("synth-48")
    monkeypatch.setitem(pretrain.RECIPES, "all-tokens", dataclasses.replace(base, keep_tokens=1.0))
    monkeypatch.setitem(pretrain.RECIPES, "quarter", base)
    assert pretrain.recipe_key("all-tokens") != pretrain.recipe_key("quarter")


def test_a_build_is_deterministic_and_its_weights_depend_on_the_share(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the recipe's synthetic draw goes under ./data
    prints = {}
    for name, keep in (("q1", 0.25), ("q2", 0.25), ("all", 1.0)):
        monkeypatch.setitem(pretrain.RECIPES, name, make_tiny_recipe(keep_tokens=keep))
        folder = tmp_path / name
        pretrain._build(name, folder, progress=False)
        prints[name] = pretrain_fingerprint(folder)
    assert prints["q1"] == prints["q2"] != prints["all"]
