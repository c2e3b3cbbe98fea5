"""Tests of the generic BM25 text-only matcher (seps.data.lexical) and `seps-bench text-only`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from seps.cli import main
from seps.data.lexical import bm25_sims, text_only_recalls, tokens

F30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "f30k"


def write_split(root: Path, dense: list[str], captions: list[list[str]]) -> Path:
    """A dataset in the official layout without images (the matcher never reads them)."""
    root.mkdir(parents=True)
    (root / "test_caps.txt").write_text("\n".join(c for caps in captions for c in caps) + "\n")
    (root / "test_ids.txt").write_text("".join(f"{i}\n" * 5 for i in range(len(dense))))
    (root / "toy_test.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in dense))
    (root / "id_mapping.json").write_text(
        json.dumps({str(i): f"{i}.jpg" for i in range(len(dense))})
    )
    return root


def test_tokens_drop_stop_words_and_strip_one_suffix() -> None:
    assert tokens("The image features two dogs running.") == ["two", "dog", "runn"]
    assert tokens("A cat sits on buses") == ["cat", "sit", "bus"]
    assert tokens("is as us") == ["us"]  # too short to strip; "is", "as" are stop words


def test_bm25_matches_the_formula_worked_by_hand() -> None:
    docs = ["red dog", "blue dog dog cat"]
    sims = bm25_sims(["red dog"], docs, k1=1.2, b=0.75)
    # N = 2; "red" in 1 document, "dog" in 2; lengths 2 and 4, mean 3.
    idf_red, idf_dog = math.log1p(1.5 / 1.5), math.log1p(0.5 / 2.5)

    def term(idf: float, f: int, length: int) -> float:
        return idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length / 3))

    expected = [term(idf_red, 1, 2) + term(idf_dog, 1, 2), term(idf_dog, 2, 4)]
    np.testing.assert_allclose(sims[:, 0], expected, atol=2e-9)


def test_bm25_ranks_the_document_with_the_rare_word_first() -> None:
    docs = ["a dog on grass", "a dog on a beach with a ball", "a cat on grass"]
    sims = bm25_sims(["dog with a ball", "cat"], docs)
    assert sims.shape == (3, 2)
    assert int(sims[:, 0].argmax()) == 1
    assert int(sims[:, 1].argmax()) == 2


def test_bm25_breaks_exact_ties_by_a_fixed_jitter() -> None:
    sims = bm25_sims(["zebra"], ["a dog", "a cat", "a bird"])  # no match anywhere: all 0
    assert np.all(sims < 1e-9)
    assert len(set(sims[:, 0].tolist())) == 3  # no exact tie left for the metric to credit
    assert np.array_equal(sims, bm25_sims(["zebra"], ["a dog", "a cat", "a bird"]))


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"k1": 0.0}, "k1"), ({"b": 1.5}, "b"), ({"b": -0.1}, "b")]
)
def test_bm25_rejects_bad_parameters_naming_them(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: expected"):
        bm25_sims(["a dog"], ["a dog"], **kwargs)


def test_text_only_recalls_are_perfect_when_each_dense_caption_has_a_unique_word(
    tmp_path: Path,
) -> None:
    animals = ["zebra", "otter", "falcon", "lizard"]
    root = write_split(
        tmp_path / "d",
        dense=[f"The image shows a {a} standing in a field." for a in animals],
        captions=[
            [f"A {a} .", f"One {a} outside .", "A field .", "An animal .", a] for a in animals
        ],
    )
    out = text_only_recalls(root, "test")
    assert out["images"] == 4
    assert out["i2t_r1"] == 100.0  # each image's best caption names its animal
    assert out["t2i_r5"] == 100.0  # a gallery of 4 is within every top 5
    # 12 of the 20 captions name their animal; "A field ." and "An animal ." fit every
    # image alike, so the jitter ranks their ground truth first about one time in four.
    assert 60.0 <= out["t2i_r1"] < 100.0


def test_text_only_command_prints_the_recalls(tmp_path: Path, capsys) -> None:
    root = write_split(
        tmp_path / "d",
        dense=["a red kite", "a blue boat"],
        captions=[["red kite"] * 5, ["blue boat"] * 5],
    )
    assert main(["text-only", "--data-path", str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rsum"] == 600.0
    assert main(["text-only", "--data-path", str(root)]) == 0
    title, header, _, row, chance, note = capsys.readouterr().out.splitlines()
    assert title.startswith("bm25 text-only matcher") and "2 images" in title
    assert header.split("|")[-2].strip() == "rsum"
    assert row.split("|")[-2].strip() == "600.0"
    # beside it, chance (and no scene oracle: not a synthetic set)
    assert chance.split("|")[1].strip() == "chance" and note.startswith("chance: ")
    assert out["chance_rsum"] == pytest.approx(499.6, abs=0.1) and out["oracle_rsum"] is None


def test_text_only_command_names_a_missing_file_in_one_line(tmp_path: Path, capsys) -> None:
    root = write_split(tmp_path / "d", dense=["a red kite"], captions=[["red kite"] * 5])
    (root / "test_caps.txt").unlink()
    assert main(["text-only", "--data-path", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("seps-bench text-only: error: ")
    assert "test_caps.txt" in err
    assert "\n" not in err


@pytest.mark.skipif(not (F30K / "test_caps.txt").is_file(), reason="../shared/data/f30k absent")
def test_bm25_on_real_flickr30k_llava_captions_is_far_above_chance() -> None:
    """Measured: rSum 373.9 on the 1,000 test images (chance is 3.2), i.e. the LLaVA dense
    captions alone rank most ground truths in the top 5 without a pixel."""
    out = text_only_recalls(F30K, "test")
    assert out["images"] == 1000
    assert 330 < out["rsum"] < 420
    assert out["i2t_r1"] > 40
