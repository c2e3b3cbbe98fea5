"""Official checkpoints across transformers 4 and 5, the official tokenisation, and the options
that used to do something other than asked (issue 19, items 2 and 4).

CPU only, tiny random models written to temp folders, and no network: every test runs with
``HF_HUB_OFFLINE=1`` and sockets that fail on connect (the hub-reachability tests replace
the check, or talk to a server on 127.0.0.1).
"""

from __future__ import annotations

import re
import socket
import threading
import time
from argparse import Namespace
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, PretrainedConfig

import seps.io.hub
import seps.train.official
import seps.train.official_backbones
from seps import SEPSHead, get_config
from seps.cli import build_parser, main
from seps.cli.train import train_config_from_args
from seps.data.text import (
    SPECIAL_TOKENS,
    encode_captions,
    load_tokenizer,
    resolve_tokenizer,
    train_wordpiece_tokenizer,
)
from seps.model.encoders import (
    ImageEncoder,
    TextEncoder,
    build_text_encoder,
    tiny_bert_config,
    tiny_vision_config,
)
from seps.model.seps_model import ModelSpec, SEPSModel, build_model
from seps.train.official import CheckpointError, export_state_dict, load_checkpoint
from seps.train.official_backbones import (
    OFFICIAL_VISION,
    load_official_tokenizer,
    official_model_type,
    official_text_config,
    official_vision_config,
)

C, IMAGE = 16, 32
CAPTIONS = [
    "A dog runs across the green grass.",
    "Two cats are sleeping on a red sofa.",
    "A man rides a bicycle down the street, near the café.",
    "Children play football in the park near a lake!",
]


@pytest.fixture(autouse=True)
def _offline(no_network: list) -> None:
    """Every test here runs offline (conftest ``no_network``)."""


# ------------------------------------------------------------- checkpoint builders
def _tf4_name(key: str) -> str:
    """The transformers-4 name of a backbone key (the names the official code saved), written
    out by hand from transformers 4's ViTModel / SwinModel, independently of the library's
    conversion table. A key that is already a transformers-4 name is returned unchanged."""
    for new, old in (
        (r"^layers\.(\d+)\.", r"encoder.layer.\1."),  # ViT blocks
        (r"\.attention\.relative_position_bias\.", ".attention.self."),  # Swin
        (r"\.attention\.o_proj\.", ".attention.output.dense."),
        (r"\.mlp\.fc1\.", ".intermediate.dense."),
        (r"\.mlp\.fc2\.", ".output.dense."),
    ):
        key = re.sub(new, old, key)
    # q/k/v: ViT kept them under attention.attention, Swin under attention.self
    inner = "attention" if key.startswith("encoder.layer.") else "self"
    for new, old in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")):
        key = key.replace(f".attention.{new}.", f".attention.{inner}.{old}.")
    return key


def _backbone_folders(tmp_path: Path, kind: str, vocab_size: int) -> tuple[Path, Path]:
    vision, text = tmp_path / f"{kind}-config", tmp_path / "bert-config"
    tiny_vision_config(kind, IMAGE).save_pretrained(vision)
    tiny_bert_config(vocab_size).save_pretrained(text)
    return vision, text


def _reference_model(vision: Path, text: Path) -> SEPSModel:
    torch.manual_seed(0)
    vcfg, tcfg = AutoConfig.from_pretrained(vision), AutoConfig.from_pretrained(text)
    img_enc, txt_enc = ImageEncoder(vcfg, C, image_size=IMAGE), TextEncoder(tcfg, C)
    cfg = get_config(
        "code", embed_size=C, num_patches=img_enc.num_patches, sparse_ratio=0.5, aggr_ratio=0.4
    )
    model = SEPSModel(img_enc, txt_enc, SEPSHead(cfg)).eval()
    for p in model.parameters():  # away from the initial values (LayerNorm ones, zero biases)
        p.data.add_(0.05 * torch.randn_like(p))
    return model


def _official_file(
    tmp_path: Path, model: SEPSModel, *, tf4_names: bool, kind: str, **opt: object
) -> Path:
    """An official ``model_best.pth``: ``{'model', 'opt', 'epoch'}`` with DDP's ``module.``."""
    sd: dict[str, torch.Tensor] = {}
    for k, v in model.img_enc.state_dict().items():
        if tf4_names and k.startswith("visual_encoder."):
            k = "visual_encoder." + _tf4_name(k[len("visual_encoder.") :])
        sd[f"img_enc.{k}"] = v
    sd.update({f"txt_enc.{k}": v for k, v in model.txt_enc.state_dict().items()})
    sd.update(export_state_dict(model.cross_net))
    if tf4_names:
        # Buffers transformers 4 saved and transformers 5 no longer keeps in the state dict.
        if kind == "swin":  # ...attention.self.relative_position_index, one per block
            for name, module in model.img_enc.visual_encoder.named_modules():
                if name.endswith(".attention.relative_position_bias"):
                    block = name.removesuffix(".relative_position_bias")
                    index = module.relative_position_index
                    sd[f"img_enc.visual_encoder.{block}.self.relative_position_index"] = index
        n_pos = model.txt_enc.bert.config.max_position_embeddings
        sd["txt_enc.bert.embeddings.position_ids"] = torch.arange(n_pos)[None]
    path = tmp_path / "model_best.pth"
    defaults = dict(embed_size=C, sparse_ratio=0.5, aggr_ratio=0.4, vit_type=kind, img_res=IMAGE)
    torch.save(
        {
            "model": {f"module.{k}": v for k, v in sd.items()},
            "opt": Namespace(**{**defaults, **opt}),
            "epoch": 3,
        },
        path,
    )
    return path


def _similarities(model: SEPSModel) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    images = torch.randn(3, 3, IMAGE, IMAGE, generator=g)
    ids = torch.randint(5, 40, (4, 7), generator=g)
    lens = torch.tensor([7, 5, 4, 6])
    with torch.no_grad():
        img, cap = model.encode_images(images), model.encode_texts(ids, lens)
        return model(img, cap, lens, cap, lens)


# ------------------------------------------------------------- A: official checkpoints
@pytest.mark.parametrize("kind", ["vit", "swin"])
@pytest.mark.parametrize("tf4_names", [True, False], ids=["tf4-names", "installed-names"])
def test_official_checkpoint_imports_with_the_reference_similarities(
    tmp_path: Path, kind: str, tf4_names: bool
) -> None:
    vision, text = _backbone_folders(tmp_path, kind, vocab_size=40)
    ref = _reference_model(vision, text)
    path = _official_file(tmp_path, ref, tf4_names=tf4_names, kind=kind)
    saved = torch.load(path, weights_only=False)["model"]
    installed = {f"module.img_enc.{k}" for k in ref.img_enc.state_dict()}
    if tf4_names:  # not vacuous: the file's backbone names are not the installed ones
        legacy = "attention.attention.query" if kind == "vit" else "attention.self.query"
        assert any(legacy in k for k in saved)
        if "q_proj" in " ".join(installed):  # transformers 5 is installed
            assert not any(legacy in k for k in installed)
    loaded = load_checkpoint(path, vision=vision, text=text)
    torch.testing.assert_close(_similarities(loaded), _similarities(ref), rtol=0, atol=0)


def test_mismatched_checkpoint_error_is_one_line_with_first_keys_and_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vision, text = _backbone_folders(tmp_path, "vit", vocab_size=40)
    path = _official_file(tmp_path, _reference_model(vision, text), tf4_names=True, kind="vit")
    swin = tmp_path / "swin-config"
    tiny_vision_config("swin", IMAGE).save_pretrained(swin)
    with pytest.raises(CheckpointError) as exc:
        load_checkpoint(path, vision=swin, text=text)
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) < 2000, msg
    assert re.search(r"missing keys: (img_enc\.visual_encoder\.\S+, ){3}\.\.\. \(\d+ in all\)", msg)
    assert re.search(
        r"unexpected keys: (img_enc\.visual_encoder\.\S+, ){3}\.\.\. \(\d+ in all\)", msg
    )
    assert "--vision" in msg
    # Without the library's renaming (transformers 4's view of a transformers 5 file, or the
    # old behaviour) a tf4-named file fails too, still in one short line.
    monkeypatch.setattr(seps.train.official, "library_renamer", lambda module: lambda key: key)
    with pytest.raises(CheckpointError) as exc:
        load_checkpoint(path, vision=vision, text=text)
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) < 2000 and "in all)" in msg


@pytest.mark.parametrize(
    ("vit_type", "model_type", "image_size", "window_size", "n_patches"),
    [
        ("vit_224", "vit", 224, None, 196),
        ("vit_384", "vit", 384, None, 576),
        ("swin_224", "swin", 224, 7, 49),
        ("swin_384", "swin", 384, 12, 144),
    ],
)
def test_each_official_model_type_gets_its_own_backbone_config(
    vit_type: str, model_type: str, image_size: int, window_size: int | None, n_patches: int
) -> None:
    cfg = official_vision_config(vit_type)
    assert cfg.model_type == model_type and cfg.image_size == image_size
    side = image_size // cfg.patch_size
    if model_type == "swin":
        assert cfg.window_size == window_size and cfg.embed_dim == 128
        assert list(cfg.depths) == [2, 2, 18, 2] and list(cfg.num_heads) == [4, 8, 16, 32]
        side //= 2 ** (len(cfg.depths) - 1)  # one 2x2 merge between stages
    else:
        assert cfg.patch_size == 16 and cfg.hidden_size == 768 and cfg.num_hidden_layers == 12
    assert side * side == n_patches
    # --vision <type> names the same configuration.
    assert seps.train.official_backbones.config_from(vit_type, "vision").to_dict() == cfg.to_dict()
    hub = OFFICIAL_VISION[vit_type][0]
    assert str(image_size) in hub and (("swin" in hub) == (model_type == "swin"))


def test_official_model_type_follows_the_official_branching() -> None:
    assert official_model_type("vit") == "vit_224" and official_model_type("swin") == "swin_224"
    assert official_model_type("f30k_vit_384") == "vit_384"
    assert official_model_type("swin_384_x") == "swin_384"
    with pytest.raises(CheckpointError, match=r"opt.vit_type='clip'.*--vision"):
        official_model_type("clip")


def test_default_backbones_follow_opt_vit_type_and_ignore_opt_bert_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vision, text = _backbone_folders(tmp_path, "swin", vocab_size=40)
    ref = _reference_model(vision, text)
    path = _official_file(
        tmp_path,
        ref,
        tf4_names=True,
        kind="swin",
        vit_type="swin_384",
        bert_path=str(tmp_path / "no-such-bert"),
    )
    bert_base = official_text_config()
    assert (bert_base.vocab_size, bert_base.hidden_size, bert_base.num_hidden_layers) == (
        30522,
        768,
        12,
    )
    asked: list[str] = []

    def tiny_vision(vit_type: str) -> PretrainedConfig:
        asked.append(vit_type)
        return ref.img_enc.visual_encoder.config

    # Stand-ins for the ViT/Swin-Base and BERT-base configs (too large for a unit test).
    monkeypatch.setattr(seps.train.official, "official_vision_config", tiny_vision)
    monkeypatch.setattr(
        seps.train.official, "official_text_config", lambda: ref.txt_enc.bert.config
    )
    loaded = load_checkpoint(path)  # opt.bert_path does not exist: it must not be read
    assert asked == ["swin_384"]
    torch.testing.assert_close(_similarities(loaded), _similarities(ref), rtol=0, atol=0)


# ------------------------------------------------------------- official tokenisation
def _legacy_reference(vocab: dict[str, int], texts: list[str]) -> list[list[int]]:
    """transformers 4's ``basic_tokenizer.tokenize`` then ``wordpiece_tokenizer.tokenize`` per
    word, as the official data loader calls them (the classes survive in transformers 5)."""
    try:
        from transformers.models.bert.tokenization_bert_legacy import (
            BasicTokenizer,
            WordpieceTokenizer,
        )
    except ImportError:  # transformers 4
        from transformers.models.bert.tokenization_bert import BasicTokenizer, WordpieceTokenizer
    basic = BasicTokenizer(do_lower_case=True)
    pieces = WordpieceTokenizer(vocab=vocab, unk_token="[UNK]")
    return [[vocab[p] for w in basic.tokenize(t) for p in pieces.tokenize(w)] for t in texts]


def test_official_tokenizer_matches_transformers_4_basic_and_wordpiece(tmp_path: Path) -> None:
    vocab = train_wordpiece_tokenizer(CAPTIONS * 3, vocab_size=120).get_vocab()
    for extra in ("mask", "[", "]", "cafe", "狗"):
        vocab.setdefault(extra, len(vocab))
    folder = tmp_path / "vocab"
    folder.mkdir()
    ordered = sorted(vocab, key=vocab.get)
    (folder / "vocab.txt").write_text("".join(f"{t}\n" for t in ordered), encoding="utf-8")
    texts = [
        *CAPTIONS,
        "A [MASK] in the CAFÉ\twith\u00a0Ünïcödé and 狗狗, (brackets) and a-dash.",
        "x" * 120 + " is one long word",
        "control\x00char and  double  spaces",
    ]
    tok = load_official_tokenizer(folder)
    want = _legacy_reference(vocab, texts)
    assert tok(texts, add_special_tokens=False)["input_ids"] == want
    ids, lens = encode_captions(tok, texts[:1], 512)
    assert ids[0].tolist() == [vocab["[CLS]"], *want[0], vocab["[SEP]"]]
    assert int(lens[0]) == len(want[0]) + 2


# ------------------------------------------------------------- B: no silent footguns
def test_hf_backbone_folder_with_weights_is_loaded_or_refused(tmp_path: Path) -> None:
    torch.manual_seed(0)
    src = ImageEncoder(tiny_vision_config("vit", IMAGE), C, image_size=IMAGE)
    folder = tmp_path / "vit"
    src.visual_encoder.save_pretrained(folder)
    with pytest.raises(ValueError, match=r"holds pretrained weights .*pass --pretrained") as exc:
        ImageEncoder(str(folder), C, image_size=IMAGE, source="hf")
    assert "\n" not in str(exc.value)
    with pytest.raises(ValueError, match="pass --pretrained"):
        build_model(
            ModelSpec(backbone=str(folder), backbone_source="hf", image_size=IMAGE, vocab_size=30)
        )
    loaded = ImageEncoder(str(folder), C, image_size=IMAGE, source="hf", pretrained=folder)
    for k, v in src.visual_encoder.state_dict().items():
        assert torch.equal(loaded.visual_encoder.state_dict()[k], v), k
    # A folder with config.json only is still the way to a random-init backbone.
    config_only = tmp_path / "vit-config"
    src.visual_encoder.config.save_pretrained(config_only)
    assert ImageEncoder(str(config_only), C, image_size=IMAGE, source="hf").has_cls


def test_pretrained_text_backbone_takes_its_own_tokenizer_or_stops(tmp_path: Path) -> None:
    trained = train_wordpiece_tokenizer(CAPTIONS, vocab_size=90)
    bert = tmp_path / "bert"
    TextEncoder(tiny_bert_config(len(trained)), C).bert.save_pretrained(bert)
    bare = tmp_path / "bert-no-tokenizer"
    TextEncoder(tiny_bert_config(len(trained)), C).bert.save_pretrained(bare)
    trained.save_pretrained(bert)

    parser = build_parser()
    cfg = train_config_from_args(parser.parse_args(["train", "--text-backbone", str(bert)]))
    assert cfg.tokenizer == str(bert)
    assert load_tokenizer(cfg.tokenizer).get_vocab() == trained.get_vocab()
    with pytest.raises(ValueError, match=r"holds no tokenizer.*pass --tokenizer") as exc:
        train_config_from_args(parser.parse_args(["train", "--text-backbone", str(bare)]))
    assert "\n" not in str(exc.value)
    explicit = ["train", "--text-backbone", str(bare), "--tokenizer", str(bert)]
    assert train_config_from_args(parser.parse_args(explicit)).tokenizer == str(bert)
    assert train_config_from_args(parser.parse_args(["train"])).tokenizer is None  # tiny-bert
    assert resolve_tokenizer(None, "bert-base-uncased") == "bert-base-uncased"
    # The encoder refuses another vocabulary (the API path, where no option handling runs).
    other = train_wordpiece_tokenizer(CAPTIONS, vocab_size=60)
    with pytest.raises(ValueError, match=r"does not match the \d+ word embeddings.*--tokenizer"):
        build_text_encoder(str(bare), C, vocab_size=len(other))


def test_explicit_tokenizer_is_never_replaced_offline(synth: Path) -> None:
    from seps.train.config import TrainConfig
    from seps.train.data import build_tokenizer

    with pytest.raises(
        ValueError, match=r"name_or_path='bert-base-uncased'.*pass --tokenizer"
    ) as exc:
        load_tokenizer("bert-base-uncased", captions=CAPTIONS)
    assert "\n" not in str(exc.value) and "offline or unreachable" in str(exc.value)
    cfg = TrainConfig(data_path=str(synth), tokenizer="bert-base-uncased")
    with pytest.raises(ValueError, match="name_or_path='bert-base-uncased'"):
        build_tokenizer(cfg, synth)


def test_unreachable_hub_is_detected_once_and_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE")
    calls: list[str] = []

    def unreachable(endpoint: str, timeout: float) -> bool:
        calls.append(endpoint)
        return False

    monkeypatch.setattr(seps.io.hub, "_probe_hub", unreachable)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="offline or unreachable"):
        load_tokenizer("no-such-org/no-such-tokenizer")
    with pytest.raises(RuntimeError, match="could not load pretrained weights"):
        ImageEncoder("no-such-org/no-such-vit", C, pretrained=True, source="hf")
    with pytest.raises(RuntimeError, match="bert="):
        TextEncoder("no-such-org/no-such-bert", C)
    assert seps.io.hub.hub_offline()
    assert len(calls) == 1 and time.perf_counter() - t0 < 30


def test_hub_check_answers_within_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # real sockets, on 127.0.0.1 only
    import http.server

    class Head(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Head)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never answers
    try:
        assert seps.io.hub._probe_hub(f"http://127.0.0.1:{server.server_port}", 3.0)
        t0 = time.perf_counter()
        assert not seps.io.hub._probe_hub(f"http://127.0.0.1:{silent.getsockname()[1]}", 0.5)
        assert time.perf_counter() - t0 < 2.0
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            closed = free.getsockname()[1]
        assert not seps.io.hub._probe_hub(f"http://127.0.0.1:{closed}", 1.0)
    finally:
        server.shutdown()
        silent.close()


def test_eval_official_without_text_option_uses_the_official_text_encoder(
    tmp_path: Path, synth: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vocab_dir = tmp_path / "vocab"
    vocab_dir.mkdir()
    tok = train_wordpiece_tokenizer(CAPTIONS, vocab_size=90)
    ordered = sorted(tok.get_vocab(), key=tok.get_vocab().get)
    assert tuple(ordered[: len(SPECIAL_TOKENS)]) == SPECIAL_TOKENS
    (vocab_dir / "vocab.txt").write_text("".join(f"{t}\n" for t in ordered), encoding="utf-8")
    vision, text = _backbone_folders(tmp_path, "vit", vocab_size=len(ordered))
    ref = _reference_model(vision, text)
    path = _official_file(tmp_path, ref, tf4_names=True, kind="vit", bert_path="/no/such/bert")
    # BERT-base stand-in: the tiny config; opt.bert_path must not be read.
    monkeypatch.setattr(
        seps.train.official, "official_text_config", lambda: ref.txt_enc.bert.config
    )
    out = tmp_path / "eval.json"
    argv = ["eval", "--official", "--checkpoint", str(path), "--data-path", str(synth)]
    argv += ["--dataset", "synthetic", "--vision", str(vision), "--tokenizer", str(vocab_dir)]
    argv += ["--device", "cpu", "--no-progress", "--output", str(out)]
    assert main(argv) == 0
    assert out.is_file()
