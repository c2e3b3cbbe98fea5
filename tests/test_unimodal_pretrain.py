"""The unimodal pretraining (`seps.train.unimodal`) and the builds of a recipe."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tiny_recipe import make_tiny_recipe

from seps.data.scenes import COLOURS, SHAPES, SIZES, sample_scene
from seps.experiments.provenance import pretrain_fingerprint
from seps.train import pretrain
from seps.train.config import TrainConfig
from seps.train.unimodal import N_CLASSES, VisionProbe, patch_cells, scene_targets


def test_scene_targets_name_each_cells_object_and_zero_for_empty_cells():
    seed, gids = 7, [0, 3, 11]
    t = scene_targets(seed, gids)
    for row, gid in enumerate(gids):
        scene = sample_scene(np.random.default_rng([seed, gid]))
        occupied = {o.cell: o for o in scene.objects}
        for cell in range(9):
            obj = occupied.get(cell)
            want = (
                (0, 0, 0)
                if obj is None
                else (
                    1 + SHAPES.index(obj.shape),
                    1 + list(COLOURS).index(obj.colour),
                    1 + SIZES.index(obj.size),
                )
            )
            got = tuple(int(t[k][row, cell]) for k in ("shape", "colour", "size"))
            assert got == want
        assert int(t["count"][row]) == len(scene.objects) - 1


def test_patch_cells_map_a_six_by_six_grid_onto_the_three_by_three_cells():
    cells = patch_cells(6).view(6, 6)
    assert cells[0, 0] == cells[1, 1] == 0 and cells[0, 5] == 2 and cells[5, 0] == 6
    assert cells[2, 2] == cells[3, 3] == 4 and cells[5, 5] == 8
    assert torch.bincount(cells.flatten()).tolist() == [4] * 9


def test_the_vision_probe_reads_cells_from_patches_and_the_image_from_cls():
    probe = VisionProbe(16)
    tokens = torch.randn(2, 1 + 36, 16, requires_grad=True)
    targets = scene_targets(0, [0, 1])
    loss = probe.loss(tokens, targets, patch_cells(6))
    loss.backward()
    assert torch.isfinite(loss) and tokens.grad is not None
    assert tokens.grad[:, 0].abs().sum() > 0 and tokens.grad[:, 1:].abs().sum() > 0
    assert set(N_CLASSES) == {"shape", "colour", "size", "bg_kind", "bg_colour", "count"}


def test_a_unimodal_build_keeps_no_projections_and_is_deterministic(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the recipe's synthetic draw goes under ./data
    prints = {}
    for name in ("u1", "u2"):
        monkeypatch.setitem(
            pretrain.RECIPES, name, make_tiny_recipe(objective="unimodal", keep_tokens=1.0)
        )
        folder = tmp_path / name
        pretrain._build(name, folder, progress=False)
        prints[name] = pretrain_fingerprint(folder)
        assert not (folder / pretrain.PROJECTIONS).exists()
        assert "vision_proj.weight" not in load_file(str(folder / "vision.safetensors"))
    assert prints["u1"] == prints["u2"]


def test_load_projections_leaves_fresh_projections_without_a_projection_file(tmp_path):
    model = torch.nn.Module()
    assert pretrain.load_projections(model, tmp_path) is False


def test_a_build_index_moves_the_seeds_and_the_draw_and_is_in_the_key():
    base = pretrain.recipe("uni-48")
    b2 = pretrain.recipe("uni-48@2")
    assert (b2.seed, b2.synth_seed) == (base.seed + 2, base.synth_seed + 2 * 7919)
    assert pretrain.recipe_key("uni-48") != pretrain.recipe_key("uni-48@2")
    assert pretrain.pretrained_dir("uni-48@2").name.startswith("uni-48@2-")


@pytest.mark.parametrize("bad", ["uni-48@0", "uni-48@x", "nope@1"])
def test_a_bad_build_name_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match="train config field 'pretrain'"):
        pretrain.recipe(bad)


def test_seeds_are_spread_over_the_builds_by_their_remainder():
    names = [
        TrainConfig(pretrain="uni-48", pretrain_builds=3, seed=s).pretrain_build for s in range(5)
    ]
    assert names == ["uni-48", "uni-48@1", "uni-48@2", "uni-48", "uni-48@1"]
    assert TrainConfig(pretrain="uni-48", seed=4).pretrain_build == "uni-48"
    assert TrainConfig(seed=4).pretrain_build is None
    with pytest.raises(ValueError, match="pretrain_builds"):
        TrainConfig(pretrain_builds=0)


def test_an_unknown_objective_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="'objective'"):
        pretrain.PretrainRecipe(description="x", objective="clip")


def test_an_unknown_text_objective_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="'text_objective'"):
        pretrain.PretrainRecipe(description="x", objective="unimodal", text_objective="clm")


def test_the_text_objective_changes_the_text_weights_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folders = {}
    for name, objective in (("plain", "mlm"), ("every", "mlm-all")):
        monkeypatch.setitem(
            pretrain.RECIPES,
            name,
            make_tiny_recipe(objective="unimodal", keep_tokens=1.0, text_objective=objective),
        )
        folders[name] = tmp_path / name
        pretrain._build(name, folders[name], progress=False)
    vision = [load_file(str(f / "vision.safetensors")) for f in folders.values()]
    text = [load_file(str(f / "text" / "model.safetensors")) for f in folders.values()]
    assert all(torch.equal(vision[0][k], vision[1][k]) for k in vision[0])
    assert any(not torch.equal(text[0][k], text[1][k]) for k in text[0])
