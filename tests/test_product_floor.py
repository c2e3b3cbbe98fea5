"""The product floor (seps.bench.floor): which products a call makes, their FLOPs, and
the report's section that sets each goal's allowed time beside them."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from seps.bench.floor import Product, bare_seconds, product_floor, record_products


def _workload() -> tuple[list[torch.Tensor], callable]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 5, generator=g, requires_grad=True)
    b = torch.randn(5, 4, generator=g)
    c = torch.randn(3, 6, 5, generator=g, requires_grad=True)
    d = torch.randn(3, 5, 2, generator=g)
    bias = torch.randn(4, generator=g)

    def run() -> None:
        out = (a @ b).sum() + torch.bmm(c, d).sum() + torch.addmm(bias, a, b).sum()
        out = out + torch.baddbmm(torch.zeros(3, 6, 2), c, d).sum()
        out.backward()

    return [a, c], run


def test_record_products_lists_forward_and_backward_products_with_shapes() -> None:
    _, run = _workload()
    calls = record_products(run)
    fwd_mm = Product("mm", ((6, 5), (5, 4)), "torch.float32")
    fwd_addmm = Product("addmm", ((4,), (6, 5), (5, 4)), "torch.float32")
    fwd_bmm = Product("bmm", ((3, 6, 5), (3, 5, 2)), "torch.float32")
    assert calls[fwd_mm] >= 1 and calls[fwd_addmm] == 1 and calls[fwd_bmm] >= 1
    # a and c need gradients: the backward adds products beyond the four forward ones
    assert sum(calls.values()) > 4


def test_product_flops_are_those_torch_flop_counter_counts() -> None:
    _, run = _workload()
    calls = record_products(run)
    _, run = _workload()
    with FlopCounterMode(display=False) as fc:
        run()
    assert sum(n * p.flops for p, n in calls.items()) == fc.get_total_flops()


def test_operands_have_the_recorded_shapes_and_dtype() -> None:
    p = Product("baddbmm", ((3, 6, 2), (3, 6, 5), (3, 5, 2)), "torch.float64")
    ops = p.operands("cpu")
    assert [tuple(t.shape) for t in ops] == list(p.shapes)
    assert all(t.dtype == torch.float64 and t.is_contiguous() for t in ops)
    assert p.flops == 2 * 3 * 6 * 5 * 2


def test_product_floor_adds_the_bare_time_of_every_call() -> None:
    _, run = _workload()
    floor = product_floor(run, "cpu", repeats=1)
    calls = record_products(_workload()[1])
    assert floor["calls"] == sum(calls.values()) and floor["distinct"] == len(calls)
    assert floor["gflop"] == pytest.approx(sum(n * p.flops for p, n in calls.items()) / 1e9)
    assert floor["seconds"] > 0 and floor["gflop_s"] > 0
    assert bare_seconds(Product("mm", ((8, 8), (8, 8)), "torch.float32"), "cpu", 1) > 0


def test_floor_section_sets_each_goals_allowed_time_beside_its_floor() -> None:
    from seps.bench.latency import _floor_lines
    from seps.bench.settings import BenchSettings

    s = BenchSettings.quick_settings("cpu")
    s.eval_images, s.eval_texts = 10, 100  # 1,000 pairs
    f = {"seconds": 0.2, "gflop": 1.0, "gflop_s": 5.0, "calls": 7, "distinct": 3,
         "seconds_measured": 0.5}  # fmt: skip
    goal = {
        "eval_repeat1": {"loop": 1000.0},  # 10x: 10,000 pairs/s, 0.1 s for 1,000 pairs
        "eval_repeat5": {"loop": 1000.0},  # 20x: 0.05 s
        "train": {"loop": {"seconds": 2.0}},  # 5x: 0.4 s
    }
    text = "\n".join(_floor_lines({"eval_repeat1": f, "eval_repeat5": f, "train": f}, goal, s))
    assert "| eval, distinct dense captions | 10x | 100 ms | 200 ms (7 products, 3 shapes)" in text
    assert "| 5 | 500 ms | 2.00 |" in text  # floor twice what the goal allows
    assert "| eval, official layout | 20x | 50 ms |" in text and "| 4.00 |" in text
    assert "| training step | 5x | 400 ms |" in text and "| 0.50 |" in text


def test_keyword_arguments_of_a_product_are_recorded_and_replayed() -> None:
    a, b, bias = torch.randn(4, 3), torch.randn(3, 2), torch.randn(2)
    calls = record_products(lambda: torch.addmm(bias, a, b, beta=0.5, alpha=2.0))
    (p,) = calls
    assert p.kwargs == (("alpha", 2.0), ("beta", 0.5))
    assert bare_seconds(p, "cpu", 1) > 0
