"""Tests of caption tokenisation (seps.data.text): offline training, loading, encoding,
augmentation."""

from __future__ import annotations

import inspect
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import huggingface_hub
import pytest
import torch
from transformers import BertTokenizerFast, PreTrainedTokenizerFast

from seps.data.text import (
    SPECIAL_TOKENS,
    augment_caption_ids,
    encode_captions,
    load_tokenizer,
    tokenizer_from_json,
    tokenizer_hash,
    tokenizer_to_json,
    train_wordpiece_tokenizer,
)

CAPTIONS = [
    "A dog runs across the green grass.",
    "Two cats are sleeping on a red sofa.",
    "A man rides a bicycle down the street.",
    "Children play football in the park near a lake.",
    "A woman in a blue dress holds an umbrella.",
    "The red car is parked next to the old building.",
    "A brown dog catches a frisbee in the park.",
    "Two men are playing guitars on the street.",
] * 3


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # huggingface_hub reads the variable once at import; make late setting effective too.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True, raising=False)


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return load_tokenizer(None, captions=CAPTIONS, vocab_size=300)


def test_trained_tokenizer_special_tokens_and_round_trip(tok) -> None:
    vocab = tok.get_vocab()
    assert [vocab[t] for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert tok.pad_token_id == 0 and tok.mask_token_id == 4
    assert len(tok) <= 300
    ids = tok("A dog runs in the park.")["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok.unk_token_id not in ids
    assert tok.decode(ids, skip_special_tokens=True) == "a dog runs in the park."
    # Lower-casing normaliser: case does not change the ids.
    assert tok("A DOG RUNS")["input_ids"] == tok("a dog runs")["input_ids"]
    # Unseen words still split into pieces of the vocabulary (characters are all seen).
    pieces = tok.tokenize("grassy")
    assert len(pieces) >= 2 and pieces[1].startswith("##")


def test_cache_dir_reuses_trained_tokenizer(tmp_path: Path) -> None:
    first = load_tokenizer(None, captions=CAPTIONS, vocab_size=200, cache_dir=tmp_path)
    saved = list(tmp_path.glob("wordpiece-200-*/tokenizer.json"))
    assert len(saved) == 1
    stamp = saved[0].stat().st_mtime_ns
    second = load_tokenizer(None, captions=CAPTIONS, vocab_size=200, cache_dir=tmp_path)
    assert saved[0].stat().st_mtime_ns == stamp  # reused, not retrained
    assert second.get_vocab() == first.get_vocab()
    assert second.mask_token_id == first.mask_token_id
    # Other captions: another cache entry.
    load_tokenizer(None, captions=CAPTIONS[:3], vocab_size=200, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("wordpiece-200-*/tokenizer.json"))) == 2


def test_load_local_bert_folder(tok, tmp_path: Path) -> None:
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("".join(f"{t}\n" for t, _ in vocab), encoding="utf-8")
    folder = tmp_path / "bert"
    if "vocab" in inspect.signature(BertTokenizerFast.__init__).parameters:  # transformers 5
        bert = BertTokenizerFast(vocab=dict(vocab), do_lower_case=True)
    else:  # transformers 4
        bert = BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True)
    bert.save_pretrained(folder)

    loaded = load_tokenizer(str(folder))
    assert loaded.is_fast
    assert loaded.get_vocab() == tok.get_vocab()
    text = ["Two brown dogs play football near the old lake."]
    assert torch.equal(encode_captions(loaded, text, 64)[0], encode_captions(tok, text, 64)[0])
    # A folder holding only vocab.txt (as in official checkpoint folders) works too.
    bare = load_tokenizer(tmp_path)
    assert bare.get_vocab() == tok.get_vocab()


def test_load_errors_and_an_explicit_tokenizer_is_never_replaced(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="name_or_path is None and captions is None"):
        load_tokenizer(None)
    with pytest.raises(ValueError, match="name_or_path='no-such/tokenizer-xyz'"):
        load_tokenizer("no-such/tokenizer-xyz")
    # Captions to train on do not turn an unloadable explicit tokenizer into a trained one.
    with pytest.raises(ValueError, match=r"name_or_path='no-such/tokenizer-xyz'.*pass --tokenizer"):
        load_tokenizer("no-such/tokenizer-xyz", captions=CAPTIONS, vocab_size=150)


def test_encode_captions_padding_and_lens(tok) -> None:
    texts = ["a dog", "two cats are sleeping on a red sofa", "a man"]
    ids, lens = encode_captions(tok, texts, max_len=64)
    assert ids.dtype == torch.long and lens.dtype == torch.long
    pieces = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert lens.tolist() == [len(p) + 2 for p in pieces]
    assert ids.shape == (3, max(len(p) for p in pieces) + 2)
    for row, n, p in zip(ids.tolist(), lens.tolist(), pieces, strict=True):
        assert row[:n] == [tok.cls_token_id, *p, tok.sep_token_id]
        assert row[n:] == [tok.pad_token_id] * (ids.shape[1] - n)

    # Truncation keeps [CLS] and [SEP] and never exceeds max_len.
    ids, lens = encode_captions(tok, texts, max_len=5)
    assert ids.shape == (3, 5)
    assert lens.tolist() == [min(len(p) + 2, 5) for p in pieces]
    assert ids[1].tolist() == [tok.cls_token_id, *pieces[1][:3], tok.sep_token_id]

    with pytest.raises(ValueError, match="max_len"):
        encode_captions(tok, texts, max_len=1)
    with pytest.raises(TypeError):
        encode_captions(tok, "a dog", max_len=8)


def test_augmentation_proportions_and_determinism(tok) -> None:
    word = tok.convert_tokens_to_ids("dog")
    n = 20000
    ids = [tok.cls_token_id, *([word] * n), tok.sep_token_id]
    out = augment_caption_ids(ids, tok, random.Random(0), p=0.2)
    assert out[0] == tok.cls_token_id and out[-1] == tok.sep_token_id
    body = out[1:-1]
    deleted = n - len(body)
    masked = sum(t == tok.mask_token_id for t in body)
    replaced = sum(t not in (word, tok.mask_token_id) for t in body)
    # Expected 8% deleted, 10% masked, 2% random (a random draw may hit "dog" or [MASK]:
    # probability 2/len(tok), negligible); bounds are about 6 standard deviations.
    assert abs(deleted / n - 0.08) < 0.012
    assert abs(masked / n - 0.10) < 0.013
    assert abs(replaced / n - 0.02) < 0.006
    assert all(0 <= t < len(tok) for t in body)

    # Deterministic for a seeded rng, different for another seed.
    assert augment_caption_ids(ids, tok, random.Random(0), p=0.2) == out
    assert augment_caption_ids(ids, tok, random.Random(1), p=0.2) != out
    # p = 0 changes nothing; p = 1 leaves no word piece unaltered except by chance.
    assert augment_caption_ids(ids, tok, random.Random(0), p=0.0) == ids
    full = augment_caption_ids([*ids[:201], tok.sep_token_id], tok, random.Random(0), p=1.0)
    assert full[0] == tok.cls_token_id and full[-1] == tok.sep_token_id
    assert sum(t == word for t in full[1:-1]) <= 3
    with pytest.raises(ValueError, match="probability"):
        augment_caption_ids(ids, tok, random.Random(0), p=1.5)


def test_augmentation_whole_word_groups_pieces(tok) -> None:
    pieces = tok("grassy grassy grassy", add_special_tokens=False)["input_ids"]
    assert len(pieces) > 3  # each word is several pieces
    ids = pieces * 200
    per_word = len(pieces) // 3
    out = augment_caption_ids(ids, tok, random.Random(3), p=0.5, whole_word=True)
    # Whole words are deleted together: the length drops by a multiple of the word size.
    assert (len(ids) - len(out)) % per_word == 0 and len(out) < len(ids)
    # Every word leaves 0 or per_word tokens, so the output splits into whole-word chunks.
    # Whole words are masked together: no chunk keeps some pieces and masks others (a
    # run of masks alone may be odd-sized: a random replacement can draw [MASK] too).
    word, mask = pieces[:per_word], tok.mask_token_id
    chunks = [out[i : i + per_word] for i in range(0, len(out), per_word)]
    assert chunks.count([mask] * per_word) > 0
    half_masked = [
        c for c in chunks if mask in c and any(t == w for t, w in zip(c, word, strict=True))
    ]
    assert not half_masked


def test_trained_tokenizer_is_identical_across_four_trainings_in_one_process() -> None:
    # 80 entries cut the vocabulary among words of equal counts (every count of CAPTIONS
    # is a multiple of 3): the tie-breaking decides what is in and at which id.
    trained = [train_wordpiece_tokenizer(CAPTIONS, vocab_size=80) for _ in range(4)]
    vocabs = [t.get_vocab() for t in trained]
    assert all(v == vocabs[0] for v in vocabs[1:])
    assert len({tokenizer_to_json(t) for t in trained}) == 1


_HASH_SCRIPT = """
import json, sys
from seps.data.text import tokenizer_hash, train_wordpiece_tokenizer
captions = json.loads(open(sys.argv[1], encoding="utf-8").read())
print(tokenizer_hash(train_wordpiece_tokenizer(captions, vocab_size=80)))
"""


def test_trained_tokenizer_is_identical_across_processes(tmp_path: Path) -> None:
    captions = tmp_path / "captions.json"
    captions.write_text(json.dumps(CAPTIONS), encoding="utf-8")
    root = str(Path(__file__).resolve().parents[1])
    runs = []
    for seed in ("1", "2"):  # different str hashes, so different set / dict orders
        env = {**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, "-c", _HASH_SCRIPT, str(captions)]
        runs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    here = tokenizer_hash(train_wordpiece_tokenizer(CAPTIONS, vocab_size=80))
    hashes = [run.communicate(timeout=120)[0].strip() for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert hashes[0] == hashes[1] == here


def test_tokenizer_json_round_trip_keeps_ids_and_hash(tok, tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_text(
        "".join(f"{t}\n" for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])),
        encoding="utf-8",
    )
    from_vocab_file = load_tokenizer(tmp_path)
    texts = ["A brown dog runs near the lake.", "Two GRASSY parks, one zebra!", "", "a  man"]
    for original in (tok, from_vocab_file):
        text = tokenizer_to_json(original)
        restored = tokenizer_from_json(text)
        assert tokenizer_to_json(restored) == text
        assert tokenizer_hash(restored) == tokenizer_hash(original)
        assert restored(texts)["input_ids"] == original(texts)["input_ids"]
        assert restored.get_vocab() == original.get_vocab()
        assert (restored.pad_token_id, restored.mask_token_id) == (0, 4)
    # Padding left in the backend by an earlier call is not part of the tokenizer's identity.
    before = tokenizer_hash(tok)
    tok(texts, padding=True)
    assert tokenizer_hash(tok) == before
    assert tokenizer_hash(load_tokenizer(None, captions=CAPTIONS[:3], vocab_size=300)) != before


@pytest.mark.parametrize("vocab_size", [70, 100, 150, 1000])
def test_trained_vocabulary_respects_vocab_size(vocab_size: int) -> None:
    trained = train_wordpiece_tokenizer(CAPTIONS, vocab_size=vocab_size)
    vocab = trained.get_vocab()
    assert len(trained) == len(vocab) <= vocab_size
    assert sorted(vocab.values()) == list(range(len(vocab)))  # ids 0..n-1, no gaps
    assert [vocab[t] for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    # Every caption still tokenises without [UNK]: all characters are in, both as a word
    # start and as a continuation piece.
    for ids in trained(CAPTIONS)["input_ids"]:
        assert trained.unk_token_id not in ids
        assert ids[0] == trained.cls_token_id and ids[-1] == trained.sep_token_id


def test_trained_vocabulary_holds_frequent_words_whole_and_splits_the_rest() -> None:
    # CAPTIONS need 94 entries for every word to be one token.
    assert len(train_wordpiece_tokenizer(CAPTIONS, vocab_size=1000)) == 94
    small = train_wordpiece_tokenizer(CAPTIONS, vocab_size=80)
    assert len(small) == 80  # words left out: the rest of the budget goes to pieces
    vocab = small.get_vocab()
    # Most frequent words first, ties by the word: "the" (21 times), then "dog", "park".
    assert {"the", "park", "dog", "street"} <= set(vocab)
    assert vocab["the"] < vocab["dog"] < vocab["park"] < vocab["street"]
    # A left-out word splits into pieces, never into [UNK].
    assert small.tokenize("umbrella")[1:] and small.tokenize("umbrella")[1].startswith("##")


def test_too_small_vocab_size_names_the_minimum() -> None:
    captions = ["ab ba", "a b"]  # characters a, b: 5 special tokens + a b ##a ##b = 9
    assert len(train_wordpiece_tokenizer(captions, vocab_size=9)) == 9
    with pytest.raises(ValueError, match=r"vocab_size=8 .*at least 9"):
        train_wordpiece_tokenizer(captions, vocab_size=8)
    with pytest.raises(ValueError, match="non-empty caption"):
        train_wordpiece_tokenizer(["", "  "], vocab_size=100)
