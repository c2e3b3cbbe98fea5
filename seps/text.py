"""Caption tokenisation: BERT WordPiece tokenizers, batch encoding and training-time augmentation.

Three entry points:

- :func:`load_tokenizer`: a BERT WordPiece tokenizer from a local folder or a hub name, or
  one trained offline on the captions themselves (for CPU runs without downloads);
- :func:`encode_captions`: ``[CLS] ... [SEP]`` id tensors padded to the longest caption,
  with lengths that count ``[CLS]`` and ``[SEP]`` as the official code does;
- :func:`augment_caption_ids`: the official training-time caption augmentation
  (mask / random token / delete).

Offline mode: when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set, hub names are
resolved from the local cache only (``local_files_only=True``) and nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast

__all__ = [
    "SPECIAL_TOKENS",
    "augment_caption_ids",
    "encode_captions",
    "hub_offline",
    "load_tokenizer",
    "train_wordpiece_tokenizer",
]

#: Special tokens of a BERT vocabulary, in the order a trained vocabulary gets them
#: (so that ``[PAD]`` is id 0, as in ``bert-base-uncased``, where the official text
#: encoder builds its attention mask from ``ids != 0``).
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

_TOKENIZER_FILE = "tokenizer.json"


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set to a true value."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}:
            return True
    return False


def _wrap(tokenizer_object: object) -> PreTrainedTokenizerFast:
    """Wrap a ``tokenizers.Tokenizer`` as a ``PreTrainedTokenizerFast`` with BERT special tokens."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer_object,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )


def train_wordpiece_tokenizer(
    captions: Iterable[str], *, vocab_size: int = 8000
) -> PreTrainedTokenizerFast:
    """Train a lower-casing BERT WordPiece tokenizer on ``captions`` (no download).

    The pipeline mirrors ``bert-base-uncased``: ``BertNormalizer(lowercase=True)``,
    ``BertPreTokenizer``, a WordPiece model with ``##`` continuation pieces and the special
    tokens :data:`SPECIAL_TOKENS` at ids 0-4 (``[PAD]`` = 0). Encoding with special tokens
    gives ``[CLS] ... [SEP]``. The vocabulary holds at most ``vocab_size`` entries (fewer
    when the captions do not need more).
    """
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(
            f"vocab_size must be at least {len(SPECIAL_TOKENS) + 1} "
            f"(the special tokens plus one), got {vocab_size}"
        )
    texts = [c for c in captions if c and c.strip()]
    if not texts:
        raise ValueError("captions: expected at least one non-empty caption to train on")

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return _wrap(tok)


def _caption_digest(texts: Sequence[str], vocab_size: int) -> str:
    """Hash of the training captions and vocabulary size (the cache key of a trained tokenizer)."""
    h = hashlib.sha256(f"wordpiece-v1|{vocab_size}|{len(texts)}".encode())
    for t in texts:
        h.update(b"\x00")
        h.update(t.encode("utf-8"))
    return h.hexdigest()[:16]


def _trained_tokenizer(
    captions: Iterable[str], vocab_size: int, cache_dir: str | os.PathLike[str] | None
) -> PreTrainedTokenizerFast:
    """Train (or reuse from ``cache_dir``) a WordPiece tokenizer on ``captions``."""
    from tokenizers import Tokenizer

    texts = list(captions)
    if cache_dir is None:
        return train_wordpiece_tokenizer(texts, vocab_size=vocab_size)
    folder = Path(cache_dir) / f"wordpiece-{vocab_size}-{_caption_digest(texts, vocab_size)}"
    file = folder / _TOKENIZER_FILE
    if file.is_file():
        return _wrap(Tokenizer.from_file(str(file)))
    tokenizer = train_wordpiece_tokenizer(texts, vocab_size=vocab_size)
    folder.parent.mkdir(parents=True, exist_ok=True)
    # Write into a private folder first, then move it into place, so that concurrent runs
    # never see a half-written tokenizer.
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-wordpiece-", dir=folder.parent))
    try:
        tokenizer.save_pretrained(str(tmp))
        with contextlib.suppress(OSError):  # another run got there first: keep its copy
            tmp.rename(folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def _bert_from_vocab_file(vocab_file: Path) -> PreTrainedTokenizerFast:
    """A lower-casing BERT WordPiece tokenizer from a ``vocab.txt`` (one token a line, id =
    line number), built with ``tokenizers`` directly (independent of the transformers
    version's ``BertTokenizerFast`` constructor)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    lines = vocab_file.read_text(encoding="utf-8").splitlines()
    vocab = {tok: i for i, tok in enumerate(line.rstrip("\r") for line in lines) if tok}
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise ValueError(f"{vocab_file}: BERT vocabulary lacks the special tokens {missing}")
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return _wrap(tok)


def _load_pretrained_tokenizer(name_or_path: str) -> PreTrainedTokenizerFast:
    """Load a fast BERT tokenizer from a local folder or a hub name (cache only when offline)."""
    from transformers import AutoTokenizer

    path = Path(name_or_path).expanduser()
    local = path.is_dir()
    bare_vocab = local and not any(
        (path / f).is_file() for f in (_TOKENIZER_FILE, "tokenizer_config.json")
    )
    if bare_vocab and (path / "vocab.txt").is_file():
        # A bare BERT vocabulary (e.g. copied from an official checkpoint folder).
        return _bert_from_vocab_file(path / "vocab.txt")
    tok = AutoTokenizer.from_pretrained(
        str(path) if local else name_or_path,
        use_fast=True,
        local_files_only=local or hub_offline(),
    )
    if not getattr(tok, "is_fast", False):
        raise ValueError(
            f"name_or_path={name_or_path!r}: expected a fast (tokenizers-backed) tokenizer, "
            f"got {type(tok).__name__}"
        )
    return tok


def load_tokenizer(
    name_or_path: str | os.PathLike[str] | None,
    *,
    captions: Iterable[str] | None = None,
    vocab_size: int = 8000,
    cache_dir: str | os.PathLike[str] | None = None,
) -> PreTrainedTokenizerFast:
    """Return a BERT WordPiece tokenizer.

    Args:
        name_or_path: a local folder (``save_pretrained`` output, or a folder holding a
            BERT ``vocab.txt``) or a hub name such as ``"bert-base-uncased"``. With
            ``HF_HUB_OFFLINE`` set, hub names are looked up in the local cache only.
            ``None`` trains a tokenizer on ``captions``.
        captions: training captions for the offline tokenizer; used when
            ``name_or_path`` is None, or as a fallback when loading ``name_or_path`` fails
            while offline (a warning says so).
        vocab_size: maximum vocabulary size of a trained tokenizer.
        cache_dir: folder where a trained tokenizer is saved, keyed by a hash of the
            captions and ``vocab_size``, so that later runs on the same captions reuse it.

    Raises:
        ValueError: when neither a loadable ``name_or_path`` nor ``captions`` is given.
    """
    if name_or_path is not None:
        try:
            return _load_pretrained_tokenizer(os.fspath(name_or_path))
        except Exception as exc:  # hub/IO/parse errors differ across library versions
            if captions is not None and hub_offline():
                warnings.warn(
                    f"could not load tokenizer {os.fspath(name_or_path)!r} offline ({exc}); "
                    "training a WordPiece tokenizer on the given captions instead",
                    stacklevel=2,
                )
                return _trained_tokenizer(captions, vocab_size, cache_dir)
            raise ValueError(
                f"name_or_path={os.fspath(name_or_path)!r}: could not load a tokenizer "
                f"({type(exc).__name__}: {exc}). Expected a local folder with a saved "
                "tokenizer (tokenizer.json or vocab.txt) or a hub name available in the local "
                "cache; without internet set HF_HUB_OFFLINE=1 and pass captions=... to fall "
                "back to a tokenizer trained on the captions, or pass name_or_path=None"
            ) from exc
    if captions is None:
        raise ValueError(
            "load_tokenizer: name_or_path is None and captions is None; expected either "
            "name_or_path=<local folder or hub name such as 'bert-base-uncased'> or "
            "captions=<iterable of training captions> to train a WordPiece tokenizer offline"
        )
    return _trained_tokenizer(captions, vocab_size, cache_dir)


def _special_id(tokenizer: PreTrainedTokenizerFast, name: str) -> int:
    """The id of the special token ``name`` ("cls", "sep", "pad", "mask"), or a ValueError."""
    value = getattr(tokenizer, f"{name}_token_id", None)
    if value is None:
        raise ValueError(f"tokenizer: expected a [{name.upper()}] token, the tokenizer has none")
    return int(value)


def encode_captions(
    tokenizer: PreTrainedTokenizerFast, texts: Sequence[str], max_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenise a batch of captions as ``[CLS] w_1 ... w_n [SEP]``, padded with ``[PAD]``.

    Word pieces beyond ``max_len - 2`` are cut so that every row, ``[CLS]`` and ``[SEP]``
    included, has at most ``max_len`` tokens; the batch is padded to its longest row only.

    Args:
        tokenizer: a BERT-style tokenizer with ``[CLS]``, ``[SEP]`` and ``[PAD]``.
        texts: ``B`` captions.
        max_len: maximum row length including ``[CLS]`` and ``[SEP]`` (at least 2).

    Returns:
        ``ids`` LongTensor ``(B, L)`` with ``L = max(lens) <= max_len``, and ``lens``
        LongTensor ``(B,)``: the number of real tokens of each row, counting ``[CLS]`` and
        ``[SEP]`` (as the official collate function does).
    """
    if isinstance(texts, str):
        raise TypeError("texts: expected a sequence of captions, got a single string")
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2 (room for [CLS] and [SEP]), got {max_len}")
    if len(texts) == 0:
        raise ValueError("texts: expected at least one caption")
    cls_id, sep_id = _special_id(tokenizer, "cls"), _special_id(tokenizer, "sep")
    pad_id = _special_id(tokenizer, "pad")
    pieces = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    rows = [[cls_id, *p[: max_len - 2], sep_id] for p in pieces]
    lens = torch.tensor([len(r) for r in rows], dtype=torch.long)
    ids = torch.full((len(rows), int(lens.max())), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return ids, lens


def augment_caption_ids(
    ids: Sequence[int],
    tokenizer: PreTrainedTokenizerFast,
    rng: random.Random,
    p: float = 0.2,
    *,
    whole_word: bool = False,
) -> list[int]:
    """The official training-time caption augmentation, on token ids.

    Each word piece is altered with probability ``p``; an altered piece is

    - replaced by ``[MASK]`` with probability 0.5,
    - replaced by a token drawn uniformly from the whole vocabulary (special tokens
      included, as the official ``random.choice(list(tokenizer.vocab))``) with
      probability 0.1,
    - deleted with probability 0.4.

    So with ``p = 0.2``: 10% masked, 2% random, 8% deleted, 80% unchanged. ``[CLS]``,
    ``[SEP]`` and ``[PAD]`` are never altered, so ``ids`` may be given with or without
    them. One ``rng.random()`` draw decides each unit (plus one ``rng.randrange`` per
    piece of a randomly replaced unit), so the result is deterministic for a seeded
    ``rng``.

    The official code decides per whole word (a word's pieces share one decision);
    ``whole_word=True`` reproduces that by grouping each piece with the ``##``
    continuation pieces after it. The default decides per word piece.

    Args:
        ids: token ids of one caption, ``(n,)``.
        tokenizer: gives ``[MASK]``, the special ids and the vocabulary size.
        rng: the random source (e.g. ``random.Random(seed)``).
        p: probability that a unit is altered, in ``[0, 1]``.
        whole_word: decide per word instead of per word piece.

    Returns:
        The augmented ids, ``(n - deleted,)``.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    ids = [int(i) for i in ids]
    mask_id = _special_id(tokenizer, "mask")
    keep = {
        int(v)
        for v in (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)
        if v is not None
    }
    vocab_size = len(tokenizer)

    # Units: runs of positions that share one decision.
    units: list[list[int]] = []
    if whole_word:
        tokens = tokenizer.convert_ids_to_tokens(ids)
        for i, (tid, tok) in enumerate(zip(ids, tokens, strict=True)):
            continuation = isinstance(tok, str) and tok.startswith("##")
            if continuation and units and ids[units[-1][-1]] not in keep and tid not in keep:
                units[-1].append(i)
            else:
                units.append([i])
    else:
        units = [[i] for i in range(len(ids))]

    out: list[int] = []
    for unit in units:
        if ids[unit[0]] in keep:
            out.extend(ids[i] for i in unit)
            continue
        r = rng.random()
        if r < p:
            r /= p
            if r < 0.5:
                out.extend(mask_id for _ in unit)
            elif r < 0.6:
                out.extend(rng.randrange(vocab_size) for _ in unit)
            # else: deleted
        else:
            out.extend(ids[i] for i in unit)
    return out
