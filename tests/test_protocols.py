"""Which dense caption each pair (image v, text t) is scored with, in training and in
evaluation, under every ``dense_source`` protocol (README "Dense-caption protocol")."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from seps.core.evaluate import shuffle_permutation, similarity_matrix
from seps.train.config import TrainConfig
from seps.train.distributed import TrainStep
from seps.train.loop import dense_rows


class ProbeHead(nn.Module):
    """``sims[v, t]`` = the marker of the dense caption paired with text ``t`` in the
    call (its first feature), plus 1000 x the marker of image ``v``: a pair's score says
    which dense caption and which image it was computed from."""

    def __init__(self) -> None:
        super().__init__()
        self.config = type("Cfg", (), {"dense_fusion": "fused"})()
        self.p = nn.Parameter(torch.zeros(()))

    def forward(self, img, cap, cap_lens, dense, dense_lens, *, dense_per_image=False):
        # One dense caption per image (SEPSHead's dense_per_image): row v uses its own.
        marker = dense[:, 0, 0][:, None] if dense_per_image else dense[:, 0, 0][None, :]
        return 1000 * img[:, 0, 0][:, None] + marker.expand(img.shape[0], cap.shape[0]) + 0 * self.p


class ProbeModel(nn.Module):
    """Frozen-features stand-in for SEPSModel: projections are the identity."""

    def __init__(self) -> None:
        super().__init__()
        self.head = ProbeHead()

    def project_images(self, x):
        return x

    def project_texts(self, x):
        return x

    def forward(self, *args, **kwargs):
        return self.head(*args, **kwargs)


def _marked(values: list[int], length: int) -> torch.Tensor:
    x = torch.zeros(len(values), length, 4)
    x[:, 0, 0] = torch.tensor(values, dtype=torch.float32)
    return x


def _train_sims(dense_source: str, imgs: list[int], n_images: int) -> torch.Tensor:
    """Scores of a training batch whose k-th pair is (image imgs[k], its caption k),
    with the dense rows fetched as the trainer does under ``dense_source``."""
    cfg = TrainConfig(dense_source=dense_source, seed=3)
    rows = dense_rows(cfg, n_images)
    step = TrainStep(ProbeModel(), 1, frozen=True, per_image_dense=dense_source == "candidate")
    b = len(imgs)
    img = _marked(imgs, 2)
    cap = _marked([100 + k for k in range(b)], 3)
    lens = torch.full((b,), 3)
    if rows is None:  # none: the sparse caption stands in
        dense, dlens = cap, lens
    else:
        dense, dlens = _marked(rows[imgs].tolist(), 5), torch.full((b,), 5)
    return step(img, cap, lens, lens, dense, dlens, dlens)


IMGS = [4, 7, 1]  # the training images of a batch of three pairs


def test_training_query_pairs_every_image_with_the_texts_own_image_caption() -> None:
    sims = _train_sims("query", IMGS, 10)
    want = torch.tensor([[1000 * v + IMGS[t] for t in range(3)] for v in IMGS], dtype=sims.dtype)
    assert torch.equal(sims, want)


def test_training_candidate_pairs_each_image_with_its_own_caption() -> None:
    sims = _train_sims("candidate", IMGS, 10)
    want = torch.tensor([[1000 * v + v for _ in range(3)] for v in IMGS], dtype=sims.dtype)
    assert torch.equal(sims, want)


def test_training_none_uses_the_sparse_caption_itself() -> None:
    sims = _train_sims("none", IMGS, 10)
    want = torch.tensor([[1000 * v + 100 + t for t in range(3)] for v in IMGS], dtype=sims.dtype)
    assert torch.equal(sims, want)


def test_training_shuffled_uses_a_fixed_other_image_caption() -> None:
    sims = _train_sims("shuffled", IMGS, 10)
    perm = shuffle_permutation(10, 3)
    want = torch.tensor(
        [[1000 * v + int(perm[IMGS[t]]) for t in range(3)] for v in IMGS], dtype=sims.dtype
    )
    assert torch.equal(sims, want)
    assert all(int(perm[i]) != i for i in IMGS)
    assert torch.equal(_train_sims("shuffled", IMGS, 10), sims)  # fixed per run seed


def test_dense_rows_by_protocol() -> None:
    assert dense_rows(TrainConfig(dense_source="none"), 5) is None
    for src in ("query", "candidate"):
        assert torch.equal(dense_rows(TrainConfig(dense_source=src), 5), torch.arange(5))


@pytest.mark.parametrize("src", ["query", "candidate", "none", "shuffled"])
def test_evaluation_pairs_match_the_training_pairing(src: str) -> None:
    """The evaluation matrix of 3 images x 6 captions (2 per image) uses, pair by pair,
    the dense caption the protocol's table in the README names."""
    n_img, c2i = 3, torch.tensor([0, 0, 1, 1, 2, 2])
    img = _marked([10, 20, 30], 2)
    cap = _marked([100 + t for t in range(6)], 3)
    dense = _marked([1, 2, 3], 5)
    sims = similarity_matrix(
        ProbeHead(),
        img,
        cap,
        torch.full((6,), 3),
        dense,
        torch.full((3,), 5),
        caption_to_image=c2i,
        dense_source=src,
        seed=5,
    )
    perm = shuffle_permutation(n_img, 5)
    for v in range(n_img):
        for t in range(6):
            marker = {
                "query": 1 + int(c2i[t]),
                "candidate": 1 + v,
                "none": 100 + t,
                "shuffled": 1 + int(perm[c2i[t]]),
            }[src]
            assert float(sims[v, t]) == 1000 * (10 * (v + 1)) + marker


def test_eval_dense_source_defaults_to_the_training_protocol() -> None:
    assert TrainConfig(dense_source="query").eval_protocol == "query"
    cfg = TrainConfig(dense_source="query", eval_dense_source="candidate")
    assert cfg.eval_protocol == "candidate"
    with pytest.raises(ValueError, match="eval_dense_source"):
        TrainConfig(eval_dense_source="answer")
