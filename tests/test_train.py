"""The trainer: determinism and resume, protocols, non-finite steps, checkpoints, CLI."""

from __future__ import annotations

import json

import pytest
import torch

from seps import get_config
from seps.cli import main
from seps.data.synth import generate_synthetic
from seps.train import TrainConfig, load_run_checkpoint, train


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
    assert (
        load_run_checkpoint(tmp_path / "resumed" / "checkpoint_last.safetensors")["state"]["epoch"]
        == 0
    )
    resumed = train(cfg, HEAD, resume=True)
    assert resumed["metrics"] == full["metrics"]
    assert [h["loss"] for h in resumed["history"]] == [h["loss"] for h in full["history"]]
    assert len(resumed["history"]) == 2
    stored = json.loads((tmp_path / "resumed" / "result.json").read_text())
    assert stored["metrics"] == resumed["metrics"]
    assert stored["environment"]["torch"] == torch.__version__
    assert stored["dense_source"] == "candidate"
    for key in ("train_seconds", "eval_pairs_per_second", "parameters", "history"):
        assert key in stored


def test_frozen_protocol_trains_only_projections_and_head(synth, tmp_path):
    cfg = tiny(synth, tmp_path / "frozen", protocol="frozen", epochs=1)
    result = train(cfg, HEAD)
    assert list((tmp_path / "frozen" / "feature_cache").glob("*.safetensors"))
    assert result["trainable_parameters"] < result["parameters"]
    state = load_run_checkpoint(tmp_path / "frozen" / "checkpoint_last.safetensors")["model"]
    # Rebuild the untrained model with the same seed: the backbone must be unchanged.
    from seps.model.seps_model import ModelSpec, build_model
    from seps.train import seed_everything

    seed_everything(cfg.seed)
    fresh = build_model(ModelSpec(**result["model_spec"]), HEAD).state_dict()
    backbone = [k for k in fresh if k.startswith("img_enc.visual_encoder.")]
    assert backbone and all(torch.equal(fresh[k], state[k]) for k in backbone)
    assert not torch.equal(fresh["img_enc.vision_proj.weight"], state["img_enc.vision_proj.weight"])


def test_partial_protocol_freezes_first_blocks(synth, tmp_path):
    from seps.model.seps_model import ModelSpec, build_model, freeze_first_layers

    model = build_model(ModelSpec(image_size=32, vocab_size=100), HEAD)
    n = freeze_first_layers(model.img_enc.visual_encoder, 1)
    blocks = model.img_enc.visual_encoder.blocks
    assert n > 0
    assert not any(p.requires_grad for p in blocks[0].parameters())
    assert all(p.requires_grad for p in blocks[1].parameters())
    assert not model.img_enc.visual_encoder.patch_embed.proj.weight.requires_grad
    result = train(tiny(synth, tmp_path / "partial", protocol="partial", epochs=1), HEAD)
    assert result["trainable_parameters"] < result["parameters"]


def nan_at_second_step(monkeypatch):
    """Make the trainer's loss NaN at its second call, once."""
    import seps.train.loop as st

    class NanOnce(st.SEPSLoss):
        calls = 0

        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            NanOnce.calls += 1
            if NanOnce.calls == 2:
                out.total = out.total * float("nan")
            return out

    monkeypatch.setattr(st, "SEPSLoss", NanOnce)


def test_non_finite_loss_is_skipped_and_counted(synth, tmp_path, monkeypatch):
    nan_at_second_step(monkeypatch)
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
        "head.embed_size=32",
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
                    str(out / "checkpoint_last.safetensors"),
                    "--dense-source",
                    source,
                    "--no-progress",
                ]
            )
            == 0
        )
        rec = json.loads((out / f"eval-test-{source}.json").read_text())
        # The checkpoint keeps its training protocol; --dense-source is the evaluation's.
        assert rec["dense_source"] == "candidate" and rec["eval_dense_source"] == source
        assert 0 <= rec["metrics"]["rsum"] <= 600
    same = json.loads((out / "eval-test-candidate.json").read_text())
    trained = json.loads((out / "result.json").read_text())
    assert same["metrics"] == trained["metrics"]


def test_cli_eval_official_checkpoint(synth, tmp_path, capsys):
    from argparse import Namespace

    from seps.core.head import SEPSHead
    from seps.data.text import load_tokenizer
    from seps.model.encoders import ImageEncoder, TextEncoder, tiny_bert_config, tiny_vision_config
    from seps.train.official import export_state_dict

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


def _official_layout(folder):
    """A folder in the official layout that the user owns (no synthetic meta.json)."""
    folder.mkdir()
    files = {
        "train_caps.txt": "a dog runs .\n" * 5,
        "train_ids.txt": "7\n" * 5,
        "f30k_train.jsonl": '{"text": "a brown dog runs on grass ."}\n',
        "id_mapping.json": '{"7": "7.jpg"}\n',
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    return files


def test_synthetic_generation_never_overwrites_a_users_folder(tmp_path, capsys):
    files = _official_layout(tmp_path / "f30k")
    code = main(["train", "--data-path", str(tmp_path / "f30k"), "--epochs", "1",
                 "--no-progress", "--out", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "f30k" in err and "--dataset f30k" in err and "Traceback" not in err
    assert {n: (tmp_path / "f30k" / n).read_text() for n in files} == files
    assert sorted(p.name for p in (tmp_path / "f30k").iterdir()) == sorted(files)
    with pytest.raises(ValueError, match="new or empty folder"):
        generate_synthetic(tmp_path / "f30k", n_images=10)


def test_killed_generation_leaves_no_partial_dataset(tmp_path, monkeypatch):
    import seps.data.synth as synth_mod

    def die(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(synth_mod, "dense_caption", die)
    with pytest.raises(KeyboardInterrupt):
        generate_synthetic(tmp_path / "s", n_images=10)
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_carries_its_tokenizer_and_eval_uses_it(synth, tmp_path, monkeypatch):
    import shutil

    import seps.train.data as train_data
    from seps.data.text import tokenizer_from_json, tokenizer_hash

    out = tmp_path / "run"
    result = train(tiny(synth, out, epochs=1, val_images=0), HEAD)
    ckpt = load_run_checkpoint(out / "checkpoint_last.safetensors")
    assert tokenizer_hash(tokenizer_from_json(ckpt["tokenizer"])) == result["tokenizer_hash"]
    # A byte-identical copy of the data without the tokenizer cache, and no way to build
    # a tokenizer: the evaluation must use the checkpoint's and score exactly the same.
    copy = tmp_path / "copy"
    shutil.copytree(synth, copy, ignore=shutil.ignore_patterns("tokenizer-cache"))

    def no_building(*args, **kwargs):
        raise AssertionError("eval --checkpoint must not build a tokenizer")

    monkeypatch.setattr(train_data, "load_tokenizer", no_building)
    args = ["eval", "--checkpoint", str(out / "checkpoint_last.safetensors"), "--no-progress"]
    assert main([*args, "--data-path", str(copy), "--output", str(tmp_path / "c.json")]) == 0
    assert main([*args, "--output", str(tmp_path / "o.json")]) == 0
    copy_metrics = json.loads((tmp_path / "c.json").read_text())["metrics"]
    assert copy_metrics == json.loads((tmp_path / "o.json").read_text())["metrics"]
    assert copy_metrics == result["metrics"]


def test_same_run_on_a_fresh_identical_dataset_gives_identical_results(tmp_path):
    runs = []
    for name in ("a", "b"):
        data = generate_synthetic(tmp_path / f"data-{name}", n_images=60, seed=0, image_size=32)
        runs.append(train(tiny(data, tmp_path / f"out-{name}", epochs=1, val_images=0), HEAD))
    assert runs[0]["tokenizer_hash"] == runs[1]["tokenizer_hash"]
    assert runs[0]["metrics"] == runs[1]["metrics"]


def test_diverging_training_is_recorded_not_lost(synth, tmp_path, capsys):
    code = main(["train", "--data-path", str(synth), "--image-size", "32", "--epochs", "2",
                 "--batch-size", "8", "--max-steps-per-epoch", "3", "--val-images", "0",
                 "--lr", "1e30", "--no-progress", "--out", str(tmp_path / "hot")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and "diverged" in err and "Traceback" not in err
    stored = json.loads((tmp_path / "hot" / "result.json").read_text())
    assert stored["status"] == "diverged"
    assert stored["divergence"]["nonfinite_steps"] >= 1
    assert stored["divergence"]["first_nonfinite"]["epoch"] == 0


def test_stop_policy_ends_the_run_at_the_first_nonfinite_step(synth, tmp_path, monkeypatch):
    import seps.train as st

    nan_at_second_step(monkeypatch)
    with pytest.raises(st.DivergedError, match="on_nonfinite=stop") as exc:
        train(tiny(synth, tmp_path / "stop", on_nonfinite="stop"), HEAD)
    assert exc.value.info["first_nonfinite"] == {"epoch": 0, "step": 1}
    assert exc.value.info["steps_done"] == 1 and exc.value.info["nonfinite_steps"] == 1


def test_train_config_coerces_numeric_strings_and_names_wrong_types():
    assert TrainConfig(lr="1e-3").lr == 0.001  # YAML 1.1 reads 1e-3 as a string
    assert TrainConfig(epochs=3.0).epochs == 3
    assert TrainConfig(lr_milestones=[2, "4"]).lr_milestones == (2, 4)
    with pytest.raises(ValueError, match=r"'epochs': expected an integer, got the string 'two'"):
        TrainConfig(epochs="two")
    with pytest.raises(ValueError, match=r"'augment': expected true or false"):
        TrainConfig(augment="yes")
    with pytest.raises(ValueError, match=r"'on_nonfinite'.*skip, stop"):
        TrainConfig(on_nonfinite="ignore")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["train", "eval"])
def test_missing_cuda_is_one_line(tmp_path, capsys, command):
    own = {"train": ["--out", str(tmp_path / "o")], "eval": ["--checkpoint", str(tmp_path)]}
    assert main([command, *own[command], "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "--device" in err and "CUDA is not available" in err and "Traceback" not in err


def _truncate_one_image(data):
    """Overwrite one test image with a JPEG cut short: PIL's verify() passes, load fails."""
    import io

    import numpy as np
    from PIL import Image

    mapping = json.loads((data / "id_mapping.json").read_text())
    image_id = (data / "test_ids.txt").read_text().split()[0]
    path = data / "images" / mapping[image_id]
    buf = io.BytesIO()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(buf, "JPEG")
    path.write_bytes(buf.getvalue()[: int(len(buf.getvalue()) * 0.65)])
    with Image.open(path) as im:
        im.verify()
    return path


def test_truncated_image_names_its_file_and_can_be_skipped(synth, tmp_path, capsys):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(synth, data)
    bad = _truncate_one_image(data)
    base = ["train", "--data-path", str(data), "--image-size", "32", "--epochs", "1",
            "--batch-size", "8", "--max-steps-per-epoch", "2", "--val-images", "0",
            "--no-progress", "--set", "head.embed_size=32"]  # fmt: skip
    assert main([*base, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "truncated" in err and "--skip-bad-images" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main([*base, "--out", str(tmp_path / "b"), "--skip-bad-images"]) == 0
    stored = json.loads((tmp_path / "b" / "result.json").read_text())
    assert stored["eval_images"] == 5


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_training_under_cpu_autocast_completes_with_finite_weights(synth, tmp_path, precision):
    """The trainer's autocast and loss-scaling path, on the CPU stand-in for CUDA."""
    cfg = tiny(synth, tmp_path / precision, epochs=1, precision=precision)
    result = train(cfg, HEAD)
    assert result["history"][0]["steps"] >= 1
    state = load_run_checkpoint(tmp_path / precision / "checkpoint_last.safetensors")["model"]
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    assert result["train_config"]["precision"] == precision


def test_kernel_option_selects_the_head_implementation_and_refuses_unusable_ones(
    synth, tmp_path, monkeypatch
):
    """The literal loop gives the batched head's metrics; triton without CUDA stops first."""
    batched = train(tiny(synth, tmp_path / "batched", epochs=1), HEAD)
    loop = train(tiny(synth, tmp_path / "loop", epochs=1, kernel="loop"), HEAD)
    for k, v in batched["metrics"].items():
        assert loop["metrics"][k] == pytest.approx(v, abs=1e-6), k
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="field 'kernel': 'triton' cannot run here"):
        train(tiny(synth, tmp_path / "triton", epochs=1, kernel="triton"), HEAD)
    with pytest.raises(ValueError, match="field 'kernel': invalid value 'fast'"):
        train(tiny(synth, tmp_path / "fast", epochs=1, kernel="fast"), HEAD)
    assert not (tmp_path / "fast").exists()  # refused before any work
