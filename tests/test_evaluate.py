"""seps.core.evaluate: every dense_source protocol against a plain per-pair loop of the head."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import Tensor

from seps import SEPSHead, get_config
from seps.core import evaluate as ev
from seps.core.evaluate import (
    DENSE_SOURCES,
    evaluate_retrieval,
    shuffle_permutation,
    similarity_matrix,
)
from seps.core.metrics import METRIC_KEYS, coco_1k_folds, recall_at_k

C, N, CPI = 16, 9, 5
N_IMG, N_CAP = 4, 20
SHARDS = [(1, 1), (3, 3), (1000, 1000), (2, 7)]


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Hundreds of tiny head calls: one intra-op thread avoids spin-wait oversubscription
    on a loaded machine (48 s instead of 5 s on 2 busy cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_head(preset: str, seed: int = 0) -> SEPSHead:
    torch.manual_seed(seed)
    cfg = get_config(preset, embed_size=C, num_patches=N, sparse_ratio=0.5, aggr_ratio=0.5)
    return SEPSHead(cfg)


def make_data(seed: int, n_img: int = N_IMG, n_cap: int = N_CAP) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "img": torch.randn(n_img, N + 1, C, generator=g),  # [CLS] + 9 patches
        "cap": torch.randn(n_cap, 7, C, generator=g),
        "cap_lens": torch.randint(1, 8, (n_cap,), generator=g),
        "dense": torch.randn(n_img, 11, C, generator=g),
        "dense_lens": torch.randint(1, 12, (n_img,), generator=g),
        "c2i": torch.arange(n_cap) // CPI,
    }


def loop_sims(head: SEPSHead, d: dict[str, Tensor], source: str, seed: int = 0) -> Tensor:
    """One head call per (image, text) pair, with the dense caption chosen by hand."""
    head.eval()
    n_img, n_cap = d["img"].shape[0], d["cap"].shape[0]
    perm = shuffle_permutation(n_img, seed) if source == "shuffled" else None
    out = torch.empty(n_img, n_cap)
    with torch.no_grad():
        for v in range(n_img):
            for t in range(n_cap):
                cap, lens = d["cap"][t : t + 1], d["cap_lens"][t : t + 1]
                if source == "none":
                    dense, dlens = cap, lens
                else:
                    gt = int(d["c2i"][t])
                    j = {"query": gt, "candidate": v}.get(source)
                    j = int(perm[gt]) if perm is not None else j
                    dense, dlens = d["dense"][j : j + 1], d["dense_lens"][j : j + 1]
                out[v, t] = head(d["img"][v : v + 1], cap, lens, dense, dlens)[0, 0]
    return out


def run(head: SEPSHead, d: dict[str, Tensor], source: str, **kw) -> Tensor:
    return similarity_matrix(
        head,
        d["img"],
        d["cap"],
        d["cap_lens"],
        d.get("dense"),
        d.get("dense_lens"),
        caption_to_image=d["c2i"],
        dense_source=source,
        **kw,
    )


# --------------------------------------------------------------- (a) against the loop
@pytest.mark.parametrize("preset", ["code", "paper"])
@pytest.mark.parametrize("source", DENSE_SOURCES)
def test_matches_per_pair_loop(preset: str, source: str) -> None:
    head = make_head(preset)
    d = make_data(1)
    want = loop_sims(head, d, source)
    assert want.std() > 1e-3  # the matrix is not constant
    for image_shard, text_shard in SHARDS:
        got = run(head, d, source, image_shard=image_shard, text_shard=text_shard)
        assert got.shape == (N_IMG, N_CAP)
        assert got.dtype == torch.float32 and got.device.type == "cpu"
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_none_is_twice_sparse_for_code() -> None:
    """Documented decision: dense input = sparse caption, so code sims = 2 x sparse branch."""
    head = make_head("code")
    d = make_data(2)
    got = run(head, d, "none", text_shard=6)
    sparse_only = SEPSHead(head.config.replace(dense_fusion="none"))
    sparse_only.load_state_dict(head.state_dict(), strict=False)
    want = run(sparse_only, {k: v for k, v in d.items() if "dense" not in k}, "query")
    torch.testing.assert_close(got, 2 * want, atol=1e-5, rtol=0)


def test_dense_source_none_needs_no_dense_inputs() -> None:
    head = make_head("paper")
    d = make_data(3)
    want = run(head, d, "none")
    got = run(head, {k: v for k, v in d.items() if "dense" not in k}, "none")
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    with pytest.raises(ValueError, match="dense_embs"):
        run(head, {k: v for k, v in d.items() if "dense" not in k}, "query")


# ------------------------------------------------- (b) query vs candidate, shuffled
def test_query_and_candidate_agree_only_on_ground_truth_pairs() -> None:
    head = make_head("code")
    d = make_data(4)
    q, c = run(head, d, "query"), run(head, d, "candidate")
    gt = d["c2i"][None, :] == torch.arange(N_IMG)[:, None]  # (n_img, n_cap)
    torch.testing.assert_close(q[gt], c[gt], atol=1e-5, rtol=0)
    assert ((q - c).abs()[~gt] > 1e-3).all()


def test_query_protocol_leaks_the_answer() -> None:
    """Sparse captions carry no information; each dense caption describes its image.

    Under ``query`` every column is scored with the ground truth's description, so
    text-to-image retrieval becomes near perfect; under ``candidate`` each image is
    paired with its own description, which says nothing about the text, and ``none``
    and ``shuffled`` see no useful signal either.
    """
    n_img, n_cap = 20, 100
    g = torch.Generator().manual_seed(5)
    base = torch.randn(n_img, C, generator=g)
    d = {
        "img": base[:, None, :] + 0.3 * torch.randn(n_img, N + 1, C, generator=g),
        "cap": torch.randn(n_cap, 7, C, generator=g),
        "cap_lens": torch.full((n_cap,), 7),
        "dense": base[:, None, :] + 0.3 * torch.randn(n_img, 11, C, generator=g),
        "dense_lens": torch.full((n_img,), 11),
        "c2i": torch.arange(n_cap) // CPI,
    }
    head = make_head("code")
    r = {s: evaluate_retrieval(run(head, d, s)) for s in DENSE_SOURCES}
    assert r["query"]["t2i_r1"] > 90.0
    for s in ("candidate", "none", "shuffled"):
        assert r[s]["t2i_r1"] < 30.0, (s, r[s]["t2i_r1"])
        assert r["query"]["rsum"] > r[s]["rsum"] + 150.0


def test_shuffle_permutation_is_a_deterministic_derangement() -> None:
    for n in (2, 3, 5, 50, 1000):
        for seed in range(5):
            p = shuffle_permutation(n, seed)
            assert p.dtype == torch.int64
            assert sorted(p.tolist()) == list(range(n))
            assert not (p == torch.arange(n)).any()
            assert torch.equal(p, shuffle_permutation(n, seed))
    assert not torch.equal(shuffle_permutation(50, 0), shuffle_permutation(50, 1))
    assert shuffle_permutation(0, 0).numel() == 0
    with pytest.raises(ValueError):
        shuffle_permutation(1, 0)


def test_shuffled_uses_no_own_dense_caption() -> None:
    head = make_head("code")
    d = make_data(6)
    perm = shuffle_permutation(N_IMG, 3)
    got = run(head, d, "shuffled", seed=3)
    # same as "query" on a dataset whose dense captions were permuted by hand
    moved = dict(d, dense=d["dense"][perm], dense_lens=d["dense_lens"][perm])
    torch.testing.assert_close(got, run(head, moved, "query"), atol=1e-5, rtol=0)
    assert not torch.allclose(got, run(head, d, "query"), atol=1e-3)
    assert torch.equal(got, run(head, d, "shuffled", seed=3))
    assert not torch.allclose(got, run(head, d, "shuffled", seed=4), atol=1e-3)


# ------------------------------------------------------- (c) head without dense input
def test_laps_head_needs_no_dense_inputs() -> None:
    head = make_head("laps")
    assert head.config.dense_fusion == "none"
    d = make_data(7)
    no_dense = {k: v for k, v in d.items() if "dense" not in k}
    head.eval()
    with torch.no_grad():
        want = torch.stack(
            [
                torch.cat(
                    [
                        head(d["img"][v : v + 1], d["cap"][t : t + 1], d["cap_lens"][t : t + 1])[0]
                        for t in range(N_CAP)
                    ]
                )
                for v in range(N_IMG)
            ]
        )
    for source in DENSE_SOURCES:
        got = run(head, no_dense, source, image_shard=3, text_shard=7)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


# --------------------------------------------------------------- (d) training flag
@pytest.mark.parametrize("source", ["query", "candidate"])
def test_training_flag_is_restored(source: str) -> None:
    head = make_head("paper")
    d = make_data(8)
    head.train()
    head.hrpa.eval()  # mixed flags survive too
    before = {name: m.training for name, m in head.named_modules()}
    got = run(head, d, source, text_shard=8)
    assert {name: m.training for name, m in head.named_modules()} == before
    assert head.training and not head.hrpa.training
    # the matrix was computed in eval mode (a plain tensor, deterministic)
    torch.testing.assert_close(got, loop_sims(head, d, source), atol=1e-5, rtol=0)
    head.eval()
    run(head, d, source)
    assert not any(m.training for m in head.modules())


def test_invalid_arguments() -> None:
    head = make_head("code")
    d = make_data(9)
    with pytest.raises(ValueError, match="dense_source"):
        run(head, d, "oracle")
    with pytest.raises(ValueError, match="shard"):
        run(head, d, "query", text_shard=0)
    with pytest.raises(ValueError, match="caption_to_image"):
        run(head, dict(d, c2i=d["c2i"] + 1), "query")


# ------------------------------------------------------------ (e) evaluate_retrieval
def test_evaluate_retrieval_keys() -> None:
    rng = np.random.default_rng(0)
    s = rng.standard_normal((30, 150))
    out = evaluate_retrieval(s)
    assert list(out) == list(METRIC_KEYS)
    assert out == recall_at_k(s)
    # coco_folds on a matrix that is not COCO 5K: no 1K keys
    assert evaluate_retrieval(s, coco_folds=True) == out
    # torch input works as well
    assert evaluate_retrieval(torch.from_numpy(s)) == out


def test_evaluate_retrieval_coco_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 1K keys on a scaled-down COCO (5 folds of 6 images), then a real 5K shape."""
    rng = np.random.default_rng(1)
    s = rng.standard_normal((30, 150))
    for i in range(30):
        s[i, 5 * i : 5 * i + 5] += 1.0
    monkeypatch.setattr(ev, "COCO_FOLD_SIZE", 6)
    out = evaluate_retrieval(s, coco_folds=True)
    assert list(out) == list(METRIC_KEYS) + [f"1k_{k}" for k in METRIC_KEYS]
    assert {k: out[k] for k in METRIC_KEYS} == recall_at_k(s)
    assert {k[3:]: out[k] for k in out if k.startswith("1k_")} == coco_1k_folds(s, fold_size=6)
    assert out["1k_rsum"] != out["rsum"]  # folds are easier than the full set
    assert list(evaluate_retrieval(s, coco_folds=False)) == list(METRIC_KEYS)

    monkeypatch.setattr(ev, "COCO_FOLD_SIZE", 1000)
    big = np.zeros((5000, 25000), dtype=np.int8)
    big[np.arange(5000), 5 * np.arange(5000)] = 1
    out = evaluate_retrieval(big, coco_folds=True)
    assert out["1k_i2t_r1"] == 100.0 and out["i2t_r1"] == 100.0
