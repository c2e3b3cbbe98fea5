"""Mixed precision: every preset trains under autocast (CPU bf16 stands in for CUDA) and
tracks float32; the precision option resolves and validates as documented."""

from __future__ import annotations

import pytest
import torch

from seps import SEPSHead, SEPSLoss, get_config
from seps.runtime.precision import autocast, fp32_apply, grad_scaler, resolve_precision
from seps.train.config import TrainConfig

CPU = torch.device("cpu")

# Paper size: C = 512, N = 196 patches + [CLS], 20-word captions, 120-word dense captions.
C, N, L_SPARSE, L_DENSE, B = 512, 196, 20, 120, 4

#: Tolerances of bf16 against fp32 (bf16 keeps 8 mantissa bits, relative rounding 0.4%):
#: the step's loss within 2%; the gradients sent to the backbones (the image and text
#: features) within a cosine of 0.95; all gradients together within a cosine of 0.8,
#: because selection decisions near a tie flip under bf16 rounding and the score
#: predictor's gradients then differ most (measured at this size: cosine 0.88 for
#: ``paper``, 0.98 for ``code`` and ``laps``; features 0.97 to 0.999).
LOSS_RTOL = 0.02
FEATURE_COS = 0.95
ALL_COS = 0.8


def _inputs(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    img = torch.randn(B, N + 1, C, generator=g)
    cap = torch.randn(B, L_SPARSE, C, generator=g)
    cap_lens = torch.tensor([20, 17, 12, 9])
    dense = torch.randn(B, L_DENSE, C, generator=g)
    dense_lens = torch.tensor([120, 101, 88, 64])
    return img, cap, cap_lens, dense, dense_lens


def _one_step(preset: str, precision: str) -> tuple[float, dict[str, torch.Tensor]]:
    """Loss and gradients (head parameters and input features) of one training step."""
    torch.manual_seed(0)
    cfg = get_config(preset)
    head = SEPSHead(cfg).train()
    img, cap, cap_lens, dense, dense_lens = _inputs(1)
    feats = {"img": img.requires_grad_(), "cap": cap.requires_grad_()}
    torch.manual_seed(1)  # the same selection noise in both precisions
    with autocast(precision, CPU):
        sims, masks = head(feats["img"], feats["cap"], cap_lens, dense, dense_lens)
        loss = SEPSLoss(cfg)(sims, masks, torch.arange(B), max_violation=False)
    loss.total.backward()
    grads = {k: v.grad for k, v in feats.items()}
    grads |= {n: p.grad for n, p in head.named_parameters() if p.grad is not None}
    return float(loss.total.detach()), grads


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["code", "paper", "laps"])
def test_each_preset_trains_one_step_under_bf16_autocast_close_to_fp32(preset):
    loss32, grads32 = _one_step(preset, "fp32")
    loss16, grads16 = _one_step(preset, "bf16")
    assert loss16 == pytest.approx(loss32, rel=LOSS_RTOL)
    assert grads16.keys() == grads32.keys()
    for name, g16 in grads16.items():
        assert g16.dtype == torch.float32, name  # parameters and inputs keep their dtype
        assert torch.isfinite(g16).all(), name
    for name in ("img", "cap"):
        assert _cos(grads16[name], grads32[name]) > FEATURE_COS, name
    names = sorted(grads32)
    assert _cos(*(torch.cat([g[n].flatten() for n in names]) for g in (grads16, grads32))) > ALL_COS


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0))


def test_fp32_apply_is_a_plain_call_outside_autocast():
    x = torch.randn(3, 4)
    seen = []
    fp32_apply(lambda t: seen.append(t), x)
    assert seen[0] is x


def test_fp32_apply_runs_in_float32_with_autocast_off():
    x = torch.randn(3, 4, requires_grad=True)

    def probe(t: torch.Tensor) -> torch.Tensor:
        assert not torch.is_autocast_enabled("cpu")
        return t @ t.t()

    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fp32_apply(probe, x.bfloat16())
    assert out.dtype == torch.float32


@pytest.mark.parametrize(
    ("name", "device", "want"),
    [
        ("auto", "cpu", "fp32"),
        ("auto", "cuda", "bf16"),
        ("fp16", "cpu", "fp16"),
        ("bf16", "cuda", "bf16"),
    ],
)
def test_auto_precision_is_bf16_on_cuda_and_fp32_on_cpu(name, device, want):
    assert resolve_precision(name, torch.device(device)) == want


def test_grad_scaler_is_enabled_for_fp16_only():
    assert grad_scaler("fp16", CPU).is_enabled()
    assert not grad_scaler("bf16", CPU).is_enabled()
    assert not grad_scaler("auto", CPU).is_enabled()


def test_unknown_precision_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"'precision'.*fp32"):
        TrainConfig(precision="fp8")
