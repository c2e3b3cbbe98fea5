"""The trainer: determinism and resume, protocols, non-finite steps, checkpoints, CLI."""

from __future__ import annotations

import json

import pytest
import torch

from seps import get_config
from seps.cli import main
from seps.data.synth import generate_synthetic
from seps.train import TrainConfig, load_run_checkpoint, train


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    path = tmp_path_factory.mktemp("synth")
    generate_synthetic(path, n_images=60, seed=0, image_size=32)
    return path


def tiny(synth, out, **kw) -> TrainConfig:
    values = dict(
        data_path=str(synth),
        image_size=32,
        epochs=2,
        batch_size=8,
        max_steps_per_epoch=3,
        val_images=4,
        progress=False,
        out_dir=str(out),
        vocab_size=300,
        max_dense_words=48,
        backbone_lr_mult=1.0,
    )
    values.update(kw)
    return TrainConfig(**values)


HEAD = get_config("code", embed_size=32)


def test_resume_reproduces_uninterrupted_run(synth, tmp_path):
    full = train(tiny(synth, tmp_path / "full"), HEAD)
    cfg = tiny(synth, tmp_path / "resumed")
    partial = train(cfg, HEAD, stop_after_epoch=0)
    assert partial == {"interrupted_after_epoch": 0}
    assert load_run_checkpoint(tmp_path / "resumed" / "checkpoint_last.pt")["state"]["epoch"] == 0
    resumed = train(cfg, HEAD, resume=True)
    assert resumed["metrics"] == full["metrics"]
    assert [h["loss"] for h in resumed["history"]] == [h["loss"] for h in full["history"]]
    assert len(resumed["history"]) == 2
    stored = json.loads((tmp_path / "resumed" / "result.json").read_text())
    assert stored["metrics"] == resumed["metrics"]
    assert stored["environment"]["torch"] == torch.__version__
    assert stored["dense_source"] == "query"
    for key in ("train_seconds", "eval_pairs_per_second", "parameters", "history"):
        assert key in stored


def test_frozen_protocol_trains_only_projections_and_head(synth, tmp_path):
    cfg = tiny(synth, tmp_path / "frozen", protocol="frozen", epochs=1)
    result = train(cfg, HEAD)
    assert list((tmp_path / "frozen" / "feature_cache").glob("*.safetensors"))
    assert result["trainable_parameters"] < result["parameters"]
    state = load_run_checkpoint(tmp_path / "frozen" / "checkpoint_last.pt")["model"]
    # Rebuild the untrained model with the same seed: the backbone must be unchanged.
    from seps.model import ModelSpec, build_model
    from seps.train import seed_everything

    seed_everything(cfg.seed)
    fresh = build_model(ModelSpec(**result["model_spec"]), HEAD).state_dict()
    backbone = [k for k in fresh if k.startswith("img_enc.visual_encoder.")]
    assert backbone and all(torch.equal(fresh[k], state[k]) for k in backbone)
    assert not torch.equal(fresh["img_enc.vision_proj.weight"], state["img_enc.vision_proj.weight"])


def test_partial_protocol_freezes_first_blocks(synth, tmp_path):
    from seps.model import ModelSpec, build_model, freeze_first_layers

    model = build_model(ModelSpec(image_size=32, vocab_size=100), HEAD)
    n = freeze_first_layers(model.img_enc.visual_encoder, 1)
    blocks = model.img_enc.visual_encoder.blocks
    assert n > 0
    assert not any(p.requires_grad for p in blocks[0].parameters())
    assert all(p.requires_grad for p in blocks[1].parameters())
    assert not model.img_enc.visual_encoder.patch_embed.proj.weight.requires_grad
    result = train(tiny(synth, tmp_path / "partial", protocol="partial", epochs=1), HEAD)
    assert result["trainable_parameters"] < result["parameters"]


def test_non_finite_loss_is_skipped_and_counted(synth, tmp_path, monkeypatch):
    import seps.train as st

    class NanOnce(st.SEPSLoss):
        calls = 0

        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            NanOnce.calls += 1
            if NanOnce.calls == 2:
                out.total = out.total * float("nan")
            return out

    monkeypatch.setattr(st, "SEPSLoss", NanOnce)
    result = train(tiny(synth, tmp_path / "nan", epochs=1), HEAD)
    assert result["nonfinite_steps"] == 1
    assert result["history"][0]["steps"] == 2


def test_train_config_errors():
    with pytest.raises(ValueError, match=r"'protocol'.*'half'"):
        TrainConfig(protocol="half")
    with pytest.raises(ValueError, match=r"'dense_source'"):
        TrainConfig(dense_source="answer")
    with pytest.raises(ValueError, match=r"'data_path'.*required"):
        TrainConfig(dataset="f30k")
    with pytest.raises(ValueError, match=r"'batch_size'"):
        TrainConfig(batch_size=1)


def test_bad_run_checkpoints(tmp_path):
    with pytest.raises(ValueError, match="file not found"):
        load_run_checkpoint(tmp_path / "nope.pt")
    bad = tmp_path / "bad.pt"
    torch.save({"model": {}}, bad)
    with pytest.raises(ValueError, match=r"bad.pt.*'format'"):
        load_run_checkpoint(bad)


def test_cli_train_then_eval_each_dense_source(synth, tmp_path, capsys):
    out = tmp_path / "cli"
    args = [
        "train",
        "--data-path",
        str(synth),
        "--image-size",
        "32",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--max-steps-per-epoch",
        "2",
        "--val-images",
        "0",
        "--set",
        "embed_size=32",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(args) == 0
    assert "rsum=" in capsys.readouterr().out
    for source in ("query", "candidate", "none", "shuffled"):
        assert (
            main(
                [
                    "eval",
                    "--checkpoint",
                    str(out / "checkpoint_last.pt"),
                    "--dense-source",
                    source,
                    "--no-progress",
                ]
            )
            == 0
        )
        rec = json.loads((out / f"eval-test-{source}.json").read_text())
        assert rec["dense_source"] == source and 0 <= rec["metrics"]["rsum"] <= 600
    query = json.loads((out / "eval-test-query.json").read_text())
    trained = json.loads((out / "result.json").read_text())
    assert query["metrics"] == trained["metrics"]


def test_cli_eval_official_checkpoint(synth, tmp_path, capsys):
    from argparse import Namespace

    from seps.encoders import ImageEncoder, TextEncoder, tiny_bert_config, tiny_vision_config
    from seps.head import SEPSHead
    from seps.official import export_state_dict
    from seps.text import load_tokenizer

    tok = load_tokenizer(
        None, captions=(synth / "train_caps.txt").read_text().splitlines(), vocab_size=200
    )
    tok.save_pretrained(tmp_path / "tok")
    vcfg, tcfg = tiny_vision_config("vit", 32), tiny_bert_config(len(tok))
    vcfg.save_pretrained(tmp_path / "vision")
    tcfg.save_pretrained(tmp_path / "text")
    img_enc, txt_enc = ImageEncoder(vcfg, 32, image_size=32), TextEncoder(tcfg, 32)
    head = SEPSHead(get_config("code", embed_size=32, num_patches=img_enc.num_patches))
    sd = {f"img_enc.{k}": v for k, v in img_enc.state_dict().items()}
    sd |= {f"txt_enc.{k}": v for k, v in txt_enc.state_dict().items()}
    sd |= export_state_dict(head)
    ckpt = tmp_path / "model_best.pth"
    torch.save({"model": sd, "opt": Namespace(sparse_ratio=0.5, aggr_ratio=0.4)}, ckpt)
    args = [
        "eval",
        "--official",
        "--checkpoint",
        str(ckpt),
        "--data-path",
        str(synth),
        "--vision",
        str(tmp_path / "vision"),
        "--text",
        str(tmp_path / "text"),
        "--tokenizer",
        str(tmp_path / "tok"),
        "--dense-source",
        "candidate",
        "--device",
        "cpu",
        "--no-progress",
    ]
    assert main(args) == 0
    rec = json.loads((tmp_path / "eval-test-candidate.json").read_text())
    assert rec["official"] is True and set(rec["metrics"]) >= {"rsum", "i2t_r1", "t2i_r10"}
    assert main([*args[:4], "--no-progress"]) == 2  # --official without --data-path
    assert "--data-path" in capsys.readouterr().err


@pytest.mark.parametrize("decision", ["topk", "gumbel_topk", "gumbel_per_patch"])
def test_step_log_records_ratio_and_score_predictor_gradients(synth, tmp_path, decision):
    """Per-step records of the loss study: keep ratios, loss parts, gradient norms. The
    ratio loss is a constant with no gradient to the score predictor under topk (no
    graph) and gumbel_topk (a softmax sums to 1), and acts under gumbel_per_patch."""
    head = get_config("paper", embed_size=32, decision=decision)
    cfg = tiny(synth, tmp_path / decision, epochs=1, max_steps_per_epoch=4, val_images=0)
    result = train(cfg, head)
    log = result["history"][0]["steps_log"]
    assert len(log) == 4
    for rec in log:
        assert set(rec["keep_ratio"]) == {"sparse", "dense"}
        assert set(rec["ratio_parts"]) == {"sparse", "dense"}  # paper: separate form
        assert rec["ratio"] == pytest.approx(sum(rec["ratio_parts"].values()))
        assert rec["loss"] == pytest.approx(rec["align"] + 2.0 * rec["ratio"], rel=1e-5)
    # The alignment loss reaches the predictor (step 0 has warm-up factor 0: no gradient).
    assert all(rec["selector_grad_norm"] > 0 for rec in log[1:])
    ratios = [r["ratio"] for r in log]
    grads = [r["ratio_grad_norm"] for r in log]
    if decision == "topk":
        assert all(g == 0.0 for g in grads)
    if decision in ("topk", "gumbel_topk"):
        assert max(ratios) == min(ratios)
        assert max(grads) < 1e-5
    else:
        assert max(ratios) > min(ratios)
        assert max(grads) > 1e-3


def test_step_log_without_a_score_predictor(synth, tmp_path):
    # The code preset has no learnable selection parameter: nothing to measure.
    cfg = tiny(synth, tmp_path / "code", epochs=1, max_steps_per_epoch=2, val_images=0)
    log = train(cfg, HEAD)["history"][0]["steps_log"]
    assert all(r["selector_grad_norm"] is None and r["ratio_grad_norm"] is None for r in log)
    # Hard top-K of an even N keeps half of each mask: (0.5 + 0.5 - 0.5)^2 at every step.
    assert all(r["ratio"] == pytest.approx(0.25) for r in log)
