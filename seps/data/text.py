"""Caption tokenisation: BERT WordPiece tokenizers, batch encoding and training-time augmentation.

Three entry points:

- :func:`load_tokenizer`: a BERT WordPiece tokenizer from a local folder or a hub name, or
  one built offline, deterministically, from the captions themselves (for CPU runs without
  downloads); :func:`tokenizer_to_json` / :func:`tokenizer_from_json` /
  :func:`tokenizer_hash` store a tokenizer with a checkpoint and identify it in results;
- :func:`encode_captions`: ``[CLS] ... [SEP]`` id tensors padded to the longest caption,
  with lengths that count ``[CLS]`` and ``[SEP]`` as the official code does;
- :func:`augment_caption_ids`: the official training-time caption augmentation
  (mask / random token / delete).

Offline mode (:func:`hub_offline`): when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is
set, or when the hub does not answer one quick check made once per process, hub names are
resolved from the local cache only (``local_files_only=True``): nothing is downloaded and no
load waits for the hub's retries. An explicit tokenizer is never replaced by another one.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import os
import random
import shutil
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast

from ..io.hub import hub_offline, one_line

__all__ = [
    "SPECIAL_TOKENS",
    "TOKENIZER_FILES",
    "augment_caption_ids",
    "bert_tokenizer",
    "encode_captions",
    "hub_offline",
    "load_tokenizer",
    "resolve_tokenizer",
    "tokenizer_from_json",
    "tokenizer_hash",
    "tokenizer_to_json",
    "train_wordpiece_tokenizer",
]

#: Special tokens of a BERT vocabulary, in the order a trained vocabulary gets them
#: (so that ``[PAD]`` is id 0, as in ``bert-base-uncased``, where the official text
#: encoder builds its attention mask from ``ids != 0``).
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

_TOKENIZER_FILE = "tokenizer.json"

#: Files that make a folder a saved tokenizer (``save_pretrained`` output or a bare BERT
#: vocabulary).
TOKENIZER_FILES = (_TOKENIZER_FILE, "tokenizer_config.json", "vocab.txt")


def _wrap(
    tokenizer_object: object, *, split_special_tokens: bool = False
) -> PreTrainedTokenizerFast:
    """Wrap a ``tokenizers.Tokenizer`` as a ``PreTrainedTokenizerFast`` with BERT special tokens
    (``split_special_tokens``: a special token's text inside a caption is ordinary text)."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer_object,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
        split_special_tokens=split_special_tokens,
    )


#: Longest word a WordPiece model splits into pieces (``bert-base-uncased``'s limit); longer
#: words become a single ``[UNK]``, so they never earn vocabulary entries.
_MAX_WORD_CHARS = 100

#: Share of the free vocabulary (after special tokens and characters) kept for subword
#: pieces when the captions have more distinct words than fit. In a trial on Flickr30K test
#: captions (vocabulary from 80%, measured on the other 20%, 1000-4800 entries) a tenth cut
#: the pieces per word from 1.11-1.52 (whole words only) to 1.06-1.33 and cost 0.2-0.6
#: points of word occurrences that are one token; larger shares gained little more.
_PIECE_SHARE = 0.1


def _bert_normalizer() -> object:
    """The ``bert-base-uncased`` normaliser: clean-up, accent stripping, lower-casing."""
    from tokenizers import normalizers

    return normalizers.BertNormalizer(lowercase=True)


def _bert_pre_tokenizer() -> object:
    """The BERT pre-tokeniser: words split at whitespace and around each punctuation mark."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.BertPreTokenizer()


def bert_tokenizer(
    vocab: dict[str, int], *, split_special_tokens: bool = False
) -> PreTrainedTokenizerFast:
    """A lower-casing BERT WordPiece tokenizer over ``vocab`` (token -> id, with the
    :data:`SPECIAL_TOKENS`), encoding single texts as ``[CLS] ... [SEP]``.

    The one place that assembles the pipeline, so that trained tokenizers and ones loaded from
    a ``vocab.txt`` tokenise identically; built with ``tokenizers`` directly, independent of
    the transformers version's ``BertTokenizerFast`` constructor. The pipeline is the
    ``bert-base-uncased`` one: clean-up, CJK characters split, lower-casing, accents stripped,
    words split at whitespace and punctuation (transformers 4's ``BasicTokenizer``), then
    greedy longest-match word pieces, a word over 100 characters being ``[UNK]``
    (``WordpieceTokenizer``). With ``split_special_tokens`` the text of a special token
    inside a caption (``"[MASK]"``) is split as ordinary text, as ``BasicTokenizer.tokenize``
    does when called directly (the official data loader); by default it is the special token.
    """
    from tokenizers import Tokenizer, decoders, models, processors

    model = models.WordPiece(
        vocab,
        unk_token="[UNK]",
        continuing_subword_prefix="##",
        max_input_chars_per_word=_MAX_WORD_CHARS,
    )
    tok = Tokenizer(model)
    tok.normalizer = _bert_normalizer()
    tok.pre_tokenizer = _bert_pre_tokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return _wrap(tok, split_special_tokens=split_special_tokens)


def _word_counts(texts: Iterable[str]) -> Counter[str]:
    """How often each word occurs in ``texts``, words as the BERT pipeline sees them
    (normalised, then pre-tokenised).

    Speed: the pre-tokeniser runs once per distinct space-separated chunk rather than once
    per caption, which halves the time on caption sets. This is exact: after normalisation
    every whitespace character is a plain space, and a space always ends a word and never
    belongs to one.
    """
    normalizer, pre_tokenizer = _bert_normalizer(), _bert_pre_tokenizer()
    chunks: Counter[str] = Counter()
    for text in texts:
        chunks.update(normalizer.normalize_str(text).split(" "))
    counts: Counter[str] = Counter()
    for chunk, n in chunks.items():
        for word, _ in pre_tokenizer.pre_tokenize_str(chunk):
            counts[word] += n
    return counts


def _merge_pieces(counts: dict[str, int], known: set[str], budget: int) -> list[str]:
    """Up to ``budget`` new subword pieces for the words of ``counts`` (word -> count), by
    byte-pair-style merging: each word starts as its characters (``c ##c ##c ...``) and the
    adjacent pair with the largest summed count is merged into one piece, again and again.

    Ties go to the pair whose left, then right, piece sorts first, so the result depends on
    the counts only (not on set or dict order). A merge whose piece is already ``known``
    still applies but takes no budget. Returns the new pieces in the order they were made.
    """
    words = sorted(counts)
    symbols = [[w[0], *(f"##{c}" for c in w[1:])] for w in words]
    freq = [counts[w] for w in words]
    pair_count: defaultdict[tuple[str, str], int] = defaultdict(int)
    # Words that hold (or once held) each pair, so that a merge only visits those.
    pair_words: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for i, s in enumerate(symbols):
        for pair in pairwise(s):
            pair_count[pair] += freq[i]
            pair_words[pair].add(i)
    # A heap of (-count, left, right) with lazy deletion: an entry whose count is no longer
    # current is skipped, its pair having been pushed again with the new count. The keys
    # are totally ordered, so the pops (hence the result) do not depend on push order.
    heap = [(-n, a, b) for (a, b), n in pair_count.items()]
    heapq.heapify(heap)
    known, new_pieces = set(known), []
    while heap and len(new_pieces) < budget:
        neg, a, b = heapq.heappop(heap)
        if pair_count.get((a, b)) != -neg:
            continue
        merged = a + b[2:]  # b is always a "##" continuation piece
        if merged not in known:
            known.add(merged)
            new_pieces.append(merged)
        delta: defaultdict[tuple[str, str], int] = defaultdict(int)
        for i in pair_words.pop((a, b)):
            old, new, j = symbols[i], [], 0
            while j < len(old):
                if j + 1 < len(old) and old[j] == a and old[j + 1] == b:
                    new.append(merged)
                    j += 2
                else:
                    new.append(old[j])
                    j += 1
            if len(new) == len(old):  # an earlier merge already took the pair apart
                continue
            symbols[i], f = new, freq[i]
            for pair in pairwise(old):
                delta[pair] -= f
            for pair in pairwise(new):
                delta[pair] += f
                if merged in pair:
                    pair_words[pair].add(i)
        for pair, d in delta.items():
            if d:  # only pairs next to a merge change; the rest of each word cancels out
                n = pair_count[pair] + d
                if n > 0:
                    pair_count[pair] = n
                    heapq.heappush(heap, (-n, *pair))
                else:
                    del pair_count[pair]
    return new_pieces


def train_wordpiece_tokenizer(
    captions: Iterable[str], *, vocab_size: int = 8000
) -> PreTrainedTokenizerFast:
    """Build a lower-casing BERT WordPiece tokenizer from ``captions`` (no download).

    A pure function of ``(captions, vocab_size)``: the same captions give the same
    vocabulary, ids and :func:`tokenizer_hash` in every process. (The ``tokenizers``
    WordPiece trainer used before broke ties between equal counts in hash-map order, so
    repeated trainings disagreed and benchmark results changed between runs.)

    Words are counted after the ``bert-base-uncased`` normaliser and pre-tokeniser. The
    vocabulary, in id order, is:

    1. :data:`SPECIAL_TOKENS` at ids 0-4 (``[PAD]`` = 0, as the official text encoder's
       attention mask ``ids != 0`` expects);
    2. every character seen, sorted, as a word start ``c``, then as a continuation ``##c``
       (except punctuation and CJK characters, which the pipeline always cuts into words of
       their own), so that any word of seen characters tokenises without ``[UNK]``;
    3. whole words (two or more characters) by count, most frequent first, ties by the word;
    4. only when not all words fit: pieces for the words left out, made by
       :func:`_merge_pieces` on those words' counts, in a share ``_PIECE_SHARE`` of the free
       entries (never more entries than words left out), so that rare and unseen words split
       into a few meaningful pieces instead of single characters.

    The model tokenises each word by greedy longest match (first piece, then ``##``
    pieces), so frequent words are one token. Encoding gives ``[CLS] ... [SEP]``. The
    vocabulary holds at most ``vocab_size`` entries (fewer when every word fits).

    Raises:
        ValueError: no non-empty caption, or ``vocab_size`` below the special tokens plus
            the character entries of step 2 (the message names that minimum).
    """
    texts = [c for c in captions if c and c.strip()]
    if not texts:
        raise ValueError("captions: expected at least one non-empty caption to train on")
    counts = _word_counts(texts)
    chars = sorted({c for word in counts for c in word})
    # Punctuation (and CJK) characters are always words on their own, so never continuations.
    inner = [c for c in chars if len(_word_counts([f"a{c}"])) == 1]
    vocab = [*SPECIAL_TOKENS, *chars, *(f"##{c}" for c in inner)]
    if vocab_size < len(vocab):
        raise ValueError(
            f"vocab_size={vocab_size} is too small for these captions: the "
            f"{len(SPECIAL_TOKENS)} special tokens and the {len(chars)} characters seen (as "
            f"word starts, and as ## continuations where a character can continue a word) "
            f"need at least {len(vocab)} entries"
        )
    ranked = sorted(
        (w for w in counts if 1 < len(w) <= _MAX_WORD_CHARS), key=lambda w: (-counts[w], w)
    )
    free = vocab_size - len(vocab)
    if len(ranked) <= free:
        vocab += ranked
    else:
        n_words = free - min(int(free * _PIECE_SHARE), len(ranked) - free)
        vocab += ranked[:n_words]
        left_out = {w: counts[w] for w in ranked[n_words:]}
        vocab += _merge_pieces(left_out, set(vocab), vocab_size - len(vocab))
    return bert_tokenizer({tok: i for i, tok in enumerate(vocab)})


def tokenizer_to_json(tokenizer: PreTrainedTokenizerFast) -> str:
    """The canonical ``tokenizers`` JSON of ``tokenizer``'s backend (what a checkpoint stores).

    Canonical means: equal tokenizers give equal strings, whatever was done with them before.
    The backend keeps the padding / truncation of the last ``tokenizer(..., padding=True)``
    call in its state, so those two transient settings are dropped (the wrapper sets them
    per call anyway), and keys are sorted so that the text does not depend on the field
    order of the installed ``tokenizers`` version.
    """
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    data["truncation"] = None
    data["padding"] = None
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def tokenizer_from_json(text: str) -> PreTrainedTokenizerFast:
    """The tokenizer saved by :func:`tokenizer_to_json` (BERT special tokens, as the
    tokenizers this module builds or loads), giving the same ids as the original."""
    from tokenizers import Tokenizer

    return _wrap(Tokenizer.from_str(text))


def tokenizer_hash(tokenizer: PreTrainedTokenizerFast) -> str:
    """A short fingerprint of ``tokenizer`` (first 16 hex digits of the sha256 of its
    canonical JSON), to record in result files which tokenizer produced them."""
    return hashlib.sha256(tokenizer_to_json(tokenizer).encode("utf-8")).hexdigest()[:16]


def _caption_digest(texts: Sequence[str], vocab_size: int) -> str:
    """Hash of the training captions and vocabulary size (the cache key of a trained tokenizer)."""
    h = hashlib.sha256(f"wordpiece-v2|{vocab_size}|{len(texts)}".encode())
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
    line number)."""
    lines = vocab_file.read_text(encoding="utf-8").splitlines()
    vocab = {tok: i for i, tok in enumerate(line.rstrip("\r") for line in lines) if tok}
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise ValueError(f"{vocab_file}: BERT vocabulary lacks the special tokens {missing}")
    return bert_tokenizer(vocab)


def _load_pretrained_tokenizer(name_or_path: str) -> PreTrainedTokenizerFast:
    """Load a fast BERT tokenizer from a local folder or a hub name (cache only when offline)."""
    from transformers import AutoTokenizer

    path = Path(name_or_path).expanduser()
    local = path.is_dir()
    bare_vocab = local and not any((path / f).is_file() for f in TOKENIZER_FILES[:2])
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
            BERT ``vocab.txt``) or a hub name such as ``"bert-base-uncased"``, looked up in
            the local cache only when :func:`hub_offline`. ``None`` trains a tokenizer on
            ``captions``. A given ``name_or_path`` that cannot be loaded is an error, never
            replaced by a trained tokenizer.
        captions: training captions, used only when ``name_or_path`` is None.
        vocab_size: maximum vocabulary size of a trained tokenizer.
        cache_dir: folder where a trained tokenizer is saved, keyed by a hash of the
            captions and ``vocab_size``, so that later runs on the same captions reuse it.

    Raises:
        ValueError: ``name_or_path`` cannot be loaded (one line saying what to pass), or
            neither ``name_or_path`` nor ``captions`` is given.
    """
    if name_or_path is not None:
        name = os.fspath(name_or_path)
        try:
            return _load_pretrained_tokenizer(name)
        except Exception as exc:  # hub/IO/parse errors differ across library versions
            where = (
                "the local Hugging Face cache (the hub is offline or unreachable)"
                if hub_offline()
                else "the Hugging Face hub"
            )
            raise ValueError(
                f"name_or_path={name!r}: could not load a tokenizer from a local folder or {where} "
                f"({type(exc).__name__}: {one_line(exc)}); pass --tokenizer <local folder "
                "holding tokenizer.json or vocab.txt> (tokenizer=...)"
            ) from exc
    if captions is None:
        raise ValueError(
            "load_tokenizer: name_or_path is None and captions is None; expected either "
            "name_or_path=<local folder or hub name such as 'bert-base-uncased'> or "
            "captions=<iterable of training captions> to train a WordPiece tokenizer offline"
        )
    return _trained_tokenizer(captions, vocab_size, cache_dir)


def resolve_tokenizer(tokenizer: str | None, text_backbone: str) -> str | None:
    """The tokenizer a run with ``text_backbone`` must use: ``tokenizer`` when given; ``None``
    (a WordPiece vocabulary trained on the captions) for the random-init ``tiny-bert`` and
    ``tiny-bert-128``;
    otherwise the pretrained text backbone's own tokenizer (its folder when that holds one of
    :data:`TOKENIZER_FILES`, its hub name for a hub model).

    A pretrained BERT fed the ids of a vocabulary trained on the captions would read
    every word as some unrelated token of its own vocabulary, so that never happens silently.

    Raises:
        ValueError: ``text_backbone`` is a local folder without a tokenizer (the message says
            to pass ``--tokenizer``).
    """
    from ..model.encoders import TINY_TEXT_BACKBONES  # here: the encoders import the models

    if tokenizer is not None or text_backbone in TINY_TEXT_BACKBONES:
        return tokenizer
    path = Path(text_backbone).expanduser()
    if not path.exists():  # a hub name: the model's repository carries its tokenizer
        return text_backbone
    if path.is_dir() and any((path / f).is_file() for f in TOKENIZER_FILES):
        return str(path)
    raise ValueError(
        f"text_backbone={text_backbone!r} is a pretrained BERT but tokenizer is unset and the "
        f"folder holds no tokenizer ({', '.join(TOKENIZER_FILES)}): pass --tokenizer <the "
        "model's tokenizer folder or hub name> (tokenizer=...); a vocabulary trained on the "
        "captions would feed the model ids it never learned"
    )


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
