"""The controls of the ``controls`` matrix (seps.train.controls): the negative control changes
nothing, the planted noise lowers rSum reproducibly, the selection controls keep the same
count and change which patches, the oracle covers the named object, and bad values are
one-line errors naming the field. (The ``learned`` default leaving the head bit-identical
is pinned by the SPEC equivalence tests of test_head.py, which run with it.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seps import SEPSHead, get_config
from seps.core.config import SEPSConfig
from seps.core.evaluate import evaluate_retrieval, similarity_matrix
from seps.data.scenes import Obj, Scene
from seps.data.synth import generate_synthetic
from seps.experiments.overrides import SetError, parse_set
from seps.train.config import TrainConfig
from seps.train.controls import (
    N_CATEGORIES,
    OracleTable,
    add_sim_noise,
    caption_names,
    category,
    object_cover,
    oracle_prior,
    oracle_table,
    pair_uniform,
    presentation_order,
    selection_prior_fn,
)

C, N = 16, 16


def _head(preset: str, **overrides) -> SEPSHead:
    torch.manual_seed(0)
    base = dict(embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5, top_k=3)
    return SEPSHead(get_config(preset, **{**base, **overrides}))


def _split(n_img: int = 6, cpi: int = 5, seed: int = 1, cls: bool = True):
    g = torch.Generator().manual_seed(seed)
    img = torch.randn(n_img, N + int(cls), C, generator=g)
    n_cap = n_img * cpi
    cap = torch.randn(n_cap, 7, C, generator=g)
    lens = torch.randint(2, 8, (n_cap,), generator=g)
    dense = torch.randn(n_img, 9, C, generator=g)
    dlens = torch.randint(3, 10, (n_img,), generator=g)
    c2i = torch.arange(n_cap) // cpi
    return img, cap, lens, dense, dlens, c2i


# ------------------------------------------------------------------ negative control


@pytest.mark.parametrize(
    "preset,protocol",
    [("laps", "candidate"), ("code", "query"), ("code", "shuffled"), ("paper", "candidate")],
)
def test_negative_control_permuted_presentation_gives_identical_metrics(preset, protocol):
    head = _head(preset)
    img, cap, lens, dense, dlens, c2i = _split()
    kw = dict(caption_to_image=c2i, dense_source=protocol, image_shard=4, text_shard=7, seed=3)
    plain = similarity_matrix(head, img, cap, lens, dense, dlens, **kw)
    order = presentation_order(img.shape[0], cap.shape[0], seed=5)
    assert not torch.equal(order[0], torch.arange(img.shape[0]))
    permuted = similarity_matrix(head, img, cap, lens, dense, dlens, present_order=order, **kw)
    torch.testing.assert_close(permuted, plain, rtol=0, atol=1e-6)
    assert evaluate_retrieval(permuted) == evaluate_retrieval(plain)


def test_negative_control_order_is_seeded():
    a, b = presentation_order(10, 50, seed=0), presentation_order(10, 50, seed=0)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[1], presentation_order(10, 50, seed=1)[1])


def test_bad_presentation_order_is_refused():
    head = _head("laps")
    img, cap, lens, _, _, c2i = _split()
    bad = (torch.zeros(img.shape[0], dtype=torch.long), torch.arange(cap.shape[0]))
    with pytest.raises(ValueError, match="present_order"):
        similarity_matrix(head, img, cap, lens, None, None, caption_to_image=c2i, present_order=bad)


# ------------------------------------------------------------------- planted effect


def _perfect_sims(n_img: int = 40, cpi: int = 5) -> torch.Tensor:
    sims = torch.zeros(n_img, n_img * cpi)
    for i in range(n_img):
        sims[i, cpi * i : cpi * (i + 1)] = 1.0
    return sims


def test_planted_noise_lowers_rsum_on_perfect_sims_and_is_reproducible():
    sims = _perfect_sims()
    assert evaluate_retrieval(sims)["rsum"] == pytest.approx(600.0)
    noisy = add_sim_noise(sims, 1.0, seed=0)
    assert evaluate_retrieval(noisy)["rsum"] < 600.0
    assert torch.equal(noisy, add_sim_noise(sims, 1.0, seed=0))
    assert not torch.equal(noisy, add_sim_noise(sims, 1.0, seed=1))
    assert add_sim_noise(sims, 0.0, seed=0) is sims


def test_planted_noise_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    add_sim_noise(_perfect_sims(4), 0.5, seed=9)
    assert torch.equal(torch.rand(3), expected)


# --------------------------------------------------------------- selection controls


@pytest.mark.parametrize("preset", ["laps", "code", "paper"])
def test_random_selection_keeps_exactly_k_and_differs_from_learned(preset):
    img, cap, lens, dense, dlens, _ = _split(n_img=3, cpi=2)
    dense_t = dense[torch.arange(cap.shape[0]) // 2]
    dlens_t = dlens[torch.arange(cap.shape[0]) // 2]
    learned = _head(preset)
    control = _head(preset, selection="random")
    control.load_state_dict(learned.state_dict())
    prior = pair_uniform(0, torch.arange(3), torch.arange(cap.shape[0]), N)
    k = learned.config.num_keep
    torch.manual_seed(1)
    _, m_learned = learned.train()(img, cap, lens, dense_t, dlens_t)
    torch.manual_seed(1)
    _, m_random = control.train()(img, cap, lens, dense_t, dlens_t, selection_prior=prior)
    for b, m in m_random.items():
        hard = m.detach().round()
        assert bool((hard.sum(-1) == k).all())
        assert not torch.equal(hard, m_learned[b].detach().round())
    with torch.no_grad():
        s_learned = learned.eval()(img, cap, lens, dense_t, dlens_t)
        s_random = control.eval()(img, cap, lens, dense_t, dlens_t, selection_prior=prior)
    assert not torch.allclose(s_learned, s_random)


def test_random_evaluation_prior_is_a_function_of_the_pair():
    full = pair_uniform(7, torch.arange(5), torch.arange(9), N)
    part = pair_uniform(7, torch.tensor([3, 1]), torch.tensor([8, 0, 4]), N)
    assert torch.equal(part, full[[3, 1]][:, [8, 0, 4]])
    assert full.min() >= 0 and full.max() < 1
    assert not torch.equal(full, pair_uniform(8, torch.arange(5), torch.arange(9), N))


def test_selection_control_needs_its_prior_and_learned_refuses_one():
    img, cap, lens, *_ = _split(n_img=2, cpi=2)
    with pytest.raises(ValueError, match=r"'selection'.*selection_prior"):
        _head("laps", selection="random").eval()(img, cap, lens)
    with pytest.raises(ValueError, match="selection_prior"):
        _head("laps").eval()(img, cap, lens, selection_prior=torch.zeros(2, 4, N))


# ------------------------------------------------------------------------- oracle


def _scene() -> Scene:
    # A large red square in the center, a small blue circle in the top left corner.
    objs = (Obj("circle", "blue", "small", 0), Obj("square", "red", "large", 4))
    return Scene(objs, "noisy", "gray", "", ((0.0, 0.0), (0.0, 0.0)))


def test_oracle_mask_of_hand_made_scene_covers_the_named_objects_patches():
    cover = object_cover(_scene(), image_size=64, grid=8)  # (2 objects, 64 patches)
    square = np.zeros((8, 8), dtype=bool)
    square[2:6, 2:6] = True  # centre 64 +- 0.85 * 20.48 px of 128: patches 2..5
    assert np.array_equal(cover[1].reshape(8, 8), square)
    # The circle: centre (21.3, 21.3) px, radius 11.5, so it spans [9.8, 32.9] px: patches
    # 0..2 of 16 px each way, but the disc misses the corners of patch 2 (e.g. the point
    # (32, 16) is 11.9 px from the centre).
    circle = np.zeros((8, 8), dtype=bool)
    circle[:3, :3] = [[1, 1, 0], [1, 1, 1], [0, 1, 0]]
    assert np.array_equal(cover[0].reshape(8, 8), circle)
    table = OracleTable(
        torch.from_numpy(cover[None]),
        torch.tensor([[category("circle", "blue"), category("square", "red")]]),
        torch.from_numpy(
            np.stack(
                [
                    caption_names("A big red square ."),
                    caption_names("A blue square and a circle ."),
                    caption_names("Someone drew a green star ."),
                ]
            )
        ),
    )
    prior = oracle_prior(table, torch.tensor([0]), torch.tensor([0, 1, 2]))  # (1, 3, 64)
    assert torch.equal(prior[0, 0].bool(), torch.from_numpy(square.reshape(-1)))
    assert torch.equal(prior[0, 1].bool(), torch.from_numpy(cover[0]))  # blue square: no
    assert not prior[0, 2].any()


def test_caption_names_bind_a_colour_to_the_next_shape_only():
    names = caption_names("A tiny red star next to a ring on a gray striped background .")
    assert names[category("star", "red")] and not names[category("star", "blue")]
    assert all(names[category("ring", c)] for c in ("red", "blue", "white"))
    assert names.sum() == 1 + 8 and not names[N_CATEGORIES]


def test_oracle_table_reproduces_the_synthetic_scenes(tmp_path):
    root = generate_synthetic(tmp_path / "synth", n_images=12, seed=4, dense_noise=0.0)
    from seps.data.layout import load_split

    data = load_split(root, "train", dense_per="image")
    table = oracle_table(root, data.image_ids, data.captions, 16)
    assert table.cover.shape[::2] == (len(data.image_ids), 16)
    # Every sparse caption names at least one object of its own image (with its colour
    # when it gives one), which holds only if the scenes were drawn again correctly.
    for j in range(len(data.captions)):
        v = int(data.caption_to_image[j])
        prior = oracle_prior(table, torch.tensor([v]), torch.tensor([j]))
        assert prior.any(), data.captions[j]


def test_oracle_on_a_real_dataset_is_one_line_naming_the_field():
    with pytest.raises(ValueError, match=r"config field 'selection'.*synthetic") as exc:
        selection_prior_fn("oracle", 196, 0, dataset="f30k", data_dir=None)
    assert "\n" not in str(exc.value)


# ------------------------------------------------------------------------ bad values


@pytest.mark.parametrize(
    "make,field",
    [
        (lambda: SEPSConfig(selection="best"), "selection"),
        (lambda: get_config("code", selection="random", decision="gumbel_per_patch"), "selection"),
        (lambda: TrainConfig(eval_sim_noise=-0.1), "eval_sim_noise"),
        (lambda: TrainConfig(eval_sim_noise=float("nan")), "eval_sim_noise"),
        (lambda: TrainConfig(eval_permute="yes"), "eval_permute"),
    ],
)
def test_bad_values_give_a_one_line_error_naming_the_field(make, field):
    with pytest.raises(ValueError, match=f"'{field}'") as exc:
        make()
    assert "\n" not in str(exc.value)


def test_controls_are_settable_from_the_command_line():
    assert parse_set("head.selection=oracle").value == "oracle"
    assert parse_set("train.eval_sim_noise=0.05").value == 0.05
    assert parse_set("train.eval_permute=true").value is True
    with pytest.raises(SetError, match="selection"):
        parse_set("head.selection=best")
