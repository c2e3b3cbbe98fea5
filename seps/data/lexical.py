"""How much of the answer the dense captions give away, on any dataset: a BM25 matcher.

Under the fair ``candidate`` protocol every gallery image travels with its own dense
caption, so a matcher that never looks at a pixel can rank the gallery by comparing the
query caption with each image's dense caption. How well it does is a property of the
*dataset* (of its captions and of the MLLM that wrote the dense ones), not of a model.
`seps.data.baselines.text_only_sims` measures it on the synthetic benchmark, with knowledge of
that benchmark's closed vocabulary. This module measures it on any dataset in the
official layout, Flickr30K with its LLaVA captions included, with no knowledge of the
vocabulary, so that the synthetic benchmark and the real data can be compared with one
and the same tool (``seps-bench text-only``).

Matcher (Okapi BM25, the Lucene variant):

- *Tokens*: lower-cased alphabetic words, minus a short list of English stop words and
  the MLLM's boilerplate ("image", "features", "scene", "appears" ...), with one plural or
  verb suffix stripped (``-s``, ``-es``, ``-ed``, ``-ing``, when at least three letters
  remain), so "dogs" meets "dog" and "running" meets "runn" in both texts alike.
- Score of image ``i`` for caption ``j``: ``sum over the distinct tokens w of caption j of
  idf(w) * f * (k1 + 1) / (f + k1 * (1 - b + b * L_i / L_avg))``, with ``f`` the count of
  ``w`` in dense caption ``i``, ``L_i`` its length in tokens, ``L_avg`` the mean length,
  and ``idf(w) = log(1 + (N - n_w + 0.5) / (n_w + 0.5))`` over the ``N`` dense captions
  (``n_w`` of which hold ``w``). Defaults ``k1 = 1.2``, ``b = 0.75``.
- Ties: `seps.core.metrics` credits a tie to the positive, and a word matcher ties a lot (every
  image whose dense caption shares no word with the caption scores 0). A fixed
  pseudo-random jitter below 1e-9 (seed 0) breaks exact ties at random instead, so the
  matcher is not credited with ranks it cannot tell apart.

*Decision* (SPEC.md is silent): the tokenisation and stop words are this module's own,
chosen to be generic English; none of them is tuned to either dataset.

Its numbers are not stored in run records, so the module is not part of the code version
(`seps.versioning.version.code_version`: the training path does not import it): changing it cannot
make a record stale.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import sparse

from ..core.metrics import recall_at_k
from .baselines import text_only_sims
from .layout import load_split

__all__ = ["STOP_WORDS", "bm25_sims", "text_only_recalls", "tokens"]

#: Function words and the boilerplate MLLM captions open with; dropped from both texts.
STOP_WORDS = frozenset(
    """a an the and or but of in on at to with without is are was were be been being it its
    this that these those there their they them he she his her him as by for from into onto
    up down out over under while which who whom what where when also can could may might
    some other such very image picture photo features shows appears scene seen possibly
    likely""".split()  # noqa: SIM905  (a list literal of 74 words reads worse)
)
_WORD = re.compile(r"[a-z]+")
_SUFFIXES = ("ing", "es", "ed", "s")
_JITTER = 1e-9


def tokens(text: str) -> list[str]:
    """The matcher's tokens of ``text``: "The dogs are running ." -> ["dog", "runn"]."""
    out = []
    for word in _WORD.findall(text.lower()):
        if word in STOP_WORDS:
            continue
        for suffix in _SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                break
        out.append(word)
    return out


def bm25_sims(
    captions: Sequence[str], documents: Sequence[str], *, k1: float = 1.2, b: float = 0.75
) -> np.ndarray:
    """BM25 score of every document for every caption (see the module docstring).

    Args:
        captions: ``n_caps`` query captions (the sparse captions).
        documents: ``n_docs`` documents (one dense caption per gallery image).
        k1: term-frequency saturation, ``> 0``.
        b: length normalisation, in ``[0, 1]``.

    Returns:
        ``(n_docs, n_caps)`` float64 array, ``sims[i, j]`` = score of document ``i`` for
        caption ``j`` (the layout `seps.core.metrics.recall_at_k` reads), jittered below 1e-9.
    """
    if k1 <= 0:
        raise ValueError(f"k1: expected a positive number, got {k1}")
    if not 0 <= b <= 1:
        raise ValueError(f"b: expected a number in [0, 1], got {b}")
    if not documents:
        raise ValueError("documents: expected at least one document, got none")
    counts = [Counter(tokens(d)) for d in documents]
    vocab: dict[str, int] = {}
    rows, cols, tf = [], [], []
    for i, c in enumerate(counts):
        for word, f in c.items():
            rows.append(i)
            cols.append(vocab.setdefault(word, len(vocab)))
            tf.append(f)
    n_docs = len(documents)
    f = np.asarray(tf, dtype=np.float64)
    rows_a, cols_a = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    df = np.bincount(cols_a, minlength=len(vocab)).astype(np.float64)
    idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
    length = np.asarray([sum(c.values()) for c in counts], dtype=np.float64)
    norm = k1 * (1 - b + b * length / max(length.mean(), 1e-12))
    weight = idf[cols_a] * f * (k1 + 1) / (f + norm[rows_a])
    docs = sparse.csr_matrix((weight, (rows_a, cols_a)), shape=(n_docs, len(vocab)))
    q_rows, q_cols = [], []
    for j, caption in enumerate(captions):
        for word in set(tokens(caption)):
            if word in vocab:
                q_rows.append(j)
                q_cols.append(vocab[word])
    query = sparse.csr_matrix(
        (np.ones(len(q_rows)), (q_rows, q_cols)), shape=(len(captions), len(vocab))
    )
    sims = np.asarray((docs @ query.T).todense(), dtype=np.float64)
    return sims + _JITTER * np.random.default_rng(0).random(sims.shape)


def text_only_recalls(
    data_dir: str | Path,
    split: str = "test",
    *,
    name: str | None = None,
    matcher: str = "bm25",
    k1: float = 1.2,
    b: float = 0.75,
) -> dict[str, float]:
    """Recalls of a pixel-free matcher on one split in the official layout.

    Args:
        data_dir: dataset folder (``{split}_caps.txt``, ``<name>_{split}.jsonl`` ...);
            images are not read.
        split: the split scored, its whole gallery at once (Flickr30K's 1K test).
        name: dataset name of the dense-caption file; inferred when None.
        matcher: ``"bm25"`` (this module, any dataset) or ``"synthetic-vocabulary"``
            (`seps.data.baselines.text_only_sims`, the synthetic benchmark's vocabulary only).
        k1, b: BM25 parameters (``bm25`` only).

    Returns:
        `seps.core.metrics.recall_at_k` of the matcher's scores, plus ``"images"``.
    """
    data = load_split(data_dir, split, name, dense_per="image", check_images=False)
    if matcher == "bm25":
        sims = bm25_sims(data.captions, data.dense, k1=k1, b=b)
    elif matcher == "synthetic-vocabulary":
        sims = text_only_sims(data.captions, data.dense)
    else:
        raise ValueError(f"matcher: expected 'bm25' or 'synthetic-vocabulary', got {matcher!r}")
    return {**recall_at_k(sims), "images": float(data.n_images)}
