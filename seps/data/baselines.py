"""Pixel-free baselines: how far the dense captions alone go toward the answer.

Under the fair ``candidate`` protocol a model scores a sparse caption against a gallery
image together with *that image's own* dense caption. Were the dense caption a perfect
description of the image, a model could rank the gallery from the text alone, without
looking at a pixel. :func:`text_only_sims` is such a model: a word matcher a reviewer can
run to check that the dense captions do not give the answer away (its rSum is what the
dense captions alone achieve; `seps.data.noise` is what keeps it well below the ceiling).

Matcher
-------
It knows the closed vocabulary of the synthetic captions (`seps.data.scenes`): shapes,
object colours, sizes and their synonyms, grid positions, background kinds and colours,
object counts. Words are normalised ("little" -> "small", "upper" -> "top", "stripes" ->
"striped", "checkerboard" -> "checkered" ...); the relation words "above"/"below" and all
other words are ignored.

- A sparse caption's *features* are its content words, its *runs* (maximal sequences of
  consecutive content words: "small red star", "top left", "gray dotted") and the unions
  of two consecutive runs ("red star" + "top left"), each taken as a set of words.
- A dense caption *contains* a feature when one of its sentences holds all the feature's
  words, so a run binds attributes to their object: "red star" is not found in "a red
  ring ... a blue star".
- Score of image ``i`` for caption ``j``: the IDF-weighted fraction of caption ``j``'s
  features contained in dense caption ``i`` (IDF ``log((1 + N) / (1 + df)) + 1`` over
  the ``N`` dense captions; a feature no dense caption contains has weight 0), plus two
  tie-breaks: 1e-3 times the IDF-weighted fraction of dense caption ``i``'s content words
  that caption ``j`` names (a caption names one or two objects, so of two images that
  both contain it, the one with less else in it is likelier) and 1e-6 times a fixed
  pseudo-random number (seed 0). The last one matters: `seps.core.metrics` resolves ties in
  favour of the positive, and a word matcher produces many exact ties (every image with
  a red star scores the same for "A red star ."), which would credit it with ranks it
  cannot tell apart.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import torch

from .scenes import BACKGROUND_COLOURS, BACKGROUND_KINDS, COLOURS, SHAPES

__all__ = ["content_words", "text_only_sims"]

_NORMAL: dict[str, str] = {
    **{w: w for w in (*SHAPES, *COLOURS, *BACKGROUND_KINDS, *BACKGROUND_COLOURS)},
    **{w: "small" for w in ("small", "little", "tiny")},
    **{w: "large" for w in ("large", "big")},
    **{w: w for w in ("top", "bottom", "left", "right", "center")},
    **{"upper": "top", "lower": "bottom", "centre": "center"},
    **{"stripes": "striped", "dots": "dotted", "grainy": "noisy", "grass": "grassy"},
    "checkerboard": "checkered",
    **{w: w for w in ("two", "three", "four", "five", "six", "seven", "eight")},
}
_TOKEN = re.compile(r"[a-z]+|[.!?]")
_MAX_SUBSET = 6  # longest feature looked up in a dense sentence (runs are shorter)
_COVERAGE_WEIGHT = 1e-3
_JITTER = 1e-6


def content_words(text: str) -> list[str]:
    """The normalised content words of ``text`` in order ("A tiny red star ." -> small red star)."""
    return [_NORMAL[t] for t in _TOKEN.findall(text.lower()) if t in _NORMAL]


def _runs(text: str) -> list[list[str]]:
    runs: list[list[str]] = [[]]
    for t in _TOKEN.findall(text.lower()):
        if t in _NORMAL:
            runs[-1].append(_NORMAL[t])
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def _caption_features(text: str) -> set[frozenset[str]]:
    runs = [frozenset(r) for r in _runs(text)]
    feats = {frozenset([w]) for r in runs for w in r}
    feats.update(r for r in runs if len(r) > 1)
    feats.update(a | b for a, b in itertools.pairwise(runs))
    return feats


def _sentences(text: str) -> list[frozenset[str]]:
    sents: list[set[str]] = [set()]
    for t in _TOKEN.findall(text.lower()):
        if t in ".!?":
            sents.append(set())
        elif t in _NORMAL:
            sents[-1].add(_NORMAL[t])
    return [frozenset(s) for s in sents if s]


def _idf(present: torch.Tensor) -> torch.Tensor:
    df = present.sum(0)
    idf = torch.log((1.0 + present.shape[0]) / (1.0 + df)) + 1.0
    return torch.where(df > 0, idf, torch.zeros_like(idf))


def _row_normalised(weights: torch.Tensor) -> torch.Tensor:
    return weights / weights.sum(1, keepdim=True).clamp_min(1e-12)


def text_only_sims(captions: Sequence[str], dense: Sequence[str]) -> torch.Tensor:
    """Score every sparse caption against every image's dense caption, from words alone.

    Args:
        captions: ``n_captions`` sparse captions.
        dense: ``n_images`` dense captions, one per image, in image order.

    Returns:
        ``(n_images, n_captions)`` float64 tensor; ``[i, j]`` is the matcher's score of
        image ``i`` for caption ``j`` (module docstring), in ``[0, 1.002)``; higher is a
        better match. With image ``i`` owning captions ``5i .. 5i + 4`` it is the layout of
        `seps.core.metrics.recall_at_k`. A pure function of its arguments.
    """
    cap_feats = [_caption_features(c) for c in captions]
    vocab: dict[frozenset[str], int] = {}
    for feats in cap_feats:
        for f in feats:
            vocab.setdefault(f, len(vocab))
    words = sorted(set(_NORMAL.values()))
    word_id = {w: k for k, w in enumerate(words)}
    n_img, n_cap = len(dense), len(captions)

    present = torch.zeros(n_img, len(vocab), dtype=torch.float64)  # features contained
    dense_words = torch.zeros(n_img, len(words), dtype=torch.float64)
    for i, text in enumerate(dense):
        found: set[int] = set()
        for sent in _sentences(text):
            ordered = sorted(sent)
            for k in range(1, min(len(ordered), _MAX_SUBSET) + 1):
                for sub in itertools.combinations(ordered, k):
                    f = vocab.get(frozenset(sub))
                    if f is not None:
                        found.add(f)
            dense_words[i, [word_id[w] for w in sent]] = 1.0
        present[i, sorted(found)] = 1.0

    feat_w = torch.zeros(n_cap, len(vocab), dtype=torch.float64)
    cap_words = torch.zeros(n_cap, len(words), dtype=torch.float64)
    idf = _idf(present)
    for j, feats in enumerate(cap_feats):
        idx = [vocab[f] for f in feats]
        feat_w[j, idx] = idf[idx]
        cap_words[j, [word_id[w] for w in content_words(captions[j])]] = 1.0

    sims = present @ _row_normalised(feat_w).T
    coverage = _row_normalised(dense_words * _idf(dense_words)) @ cap_words.T
    gen = torch.Generator().manual_seed(0)
    jitter = torch.rand(n_img, n_cap, generator=gen, dtype=torch.float64)
    return sims + _COVERAGE_WEIGHT * coverage + _JITTER * jitter
