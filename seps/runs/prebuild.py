"""Build a run's pretrained backbones before the run starts, never inside it.

Why this exists: the training loop seeds every random generator with the run's seed
and only then asks for its backbones (:func:`seps.train.pretrain.pretrained_parts`).
When the recipe's cache is absent, that call builds it in-process, and the build
re-seeds and consumes the same global generators, so the model the run then
initialises differs from the one it gets when the cache exists: the run's numbers would
depend on whether it happened to be the first run on a machine. (Found on a fresh
checkout: `loss-study` `ratio/topk/mse/unified` seed 1 gave rSum 174.6 where the cached
path gives 177.7, the value of every bit-identical top-K cell.) Every entry point that
trains (the runner, ``seps-bench train``, ``seps-bench ratio-scale``) calls
:func:`prebuild_pretraining` first, outside the run's clock.

The training modules are hashed into every record's code version, so the cure inside
the loop (isolating the build's generators) waits for the next change that has to touch
them; this module is orchestration and is not hashed.

It also checks the run's other derived inputs before the run (:func:`check_inputs`): the
generated synthetic dataset and the WordPiece tokenizer cache, each a folder sealed with
the SHA-256 of its files (:mod:`seps.io.derived`) right after it is made here. The code that
makes them (``seps.data.synth``, ``seps.data.text``, ``seps.train.data``) is hashed into the
names of the generated datasets and of the pretraining builds, so the seal is written
here rather than there, which leaves every existing folder's name, and so its weights and
data, where they are. A damaged folder is named in one line, moved aside as
``<name>.corrupt`` and made again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..experiments.provenance import cpu_identity, cpu_label, float_path_key
from ..io.derived import (
    folder_problem,
    is_sealed,
    report,
    safetensors_problem,
    seal_folder,
    set_aside,
)
from ..io.store import RunLock, atomic_write_json
from ..train.config import TrainConfig
from ..train.pretrain import _data_config, ensure_pretrained, is_complete, pretrained_dir, recipe

__all__ = [
    "BUILT_ON",
    "TOKENIZER_CACHE",
    "build_checked",
    "check_dataset",
    "check_inputs",
    "distinct_inputs",
    "prebuild_pretraining",
]

#: The file beside a pretraining build that names the CPU float path it was built on.
BUILT_ON = "built_on.json"
#: The folder of a dataset where its trained tokenizers are cached (``seps.train.data``).
TOKENIZER_CACHE = "tokenizer-cache"


def prebuild_pretraining(cfg: TrainConfig, *, progress: bool = True) -> None:
    """Build ``cfg.pretrain``'s backbones if they are not cached (no-op when the run has
    no pretraining recipe), with :func:`build_checked`; then check, and make if absent,
    the run's dataset and tokenizer cache (:func:`check_inputs`)."""
    if cfg.pretrain is not None:
        build_checked(cfg.pretrain_build, progress=progress)
    check_inputs(cfg)


def inputs_key(cfg: TrainConfig) -> tuple[Any, ...]:
    """What decides the derived inputs :func:`prebuild_pretraining` checks for ``cfg``."""
    from ..train.data import synthetic_path

    data = str(synthetic_path(cfg)) if cfg.dataset == "synthetic" else cfg.data_path
    return (
        cfg.pretrain_build,
        cfg.dataset,
        data,
        cfg.image_dir,
        cfg.train_split,
        cfg.skip_bad_images,
        cfg.vocab_size,
        cfg.tokenizer,
        cfg.text_backbone,
    )


def distinct_inputs(cfgs: Iterable[TrainConfig]) -> list[TrainConfig]:
    """One config of ``cfgs`` per distinct :func:`inputs_key` (the first), in order."""
    out: dict[tuple[Any, ...], TrainConfig] = {}
    for cfg in cfgs:
        out.setdefault(inputs_key(cfg), cfg)
    return list(out.values())


def check_inputs(cfg: TrainConfig) -> Path | None:
    """Check the generated dataset of ``cfg`` and its tokenizer cache entry against their
    seals (:mod:`seps.io.derived`), moving a damaged one aside (named in one line) and making
    it again; make them (sealed) when absent. Returns the data folder, or ``None`` when
    the run's own checks are to speak (a folder the generator may not write into, data it
    cannot read): those stay the run's errors, as before.

    A synthetic set without a seal (made before sets were sealed) is sealed as it is when
    it is in its default place (``data/synth-...``, the suite's own), and only read, as
    before, at an explicit ``--data-path`` (it may be a copy a user changed on purpose).
    Making the set and the tokenizer here rather than in the run changes no number: both
    are pure functions of their arguments and draw from no global generator.
    """
    data_dir = check_dataset(cfg)
    if data_dir is not None:
        _checked_tokenizer_cache(cfg, data_dir)
    return data_dir


def check_dataset(cfg: TrainConfig) -> Path | None:
    """The dataset half of :func:`check_inputs` (``seps-bench eval`` reads no tokenizer
    cache): the data folder, or ``None`` when the run's own checks are to speak."""
    from ..data.synth import is_synthetic_dir
    from ..train.data import prepare_data_dir, synthetic_path

    if cfg.dataset != "synthetic":  # a user's data: not derived, only its tokenizer cache
        path = Path(cfg.data_path) if cfg.data_path else None
        return path if path is not None and path.is_dir() else None
    path = synthetic_path(cfg)
    if is_sealed(path):
        found = folder_problem(path)
        if found is not None:
            moved = set_aside(path)
            report(found[0], found[1], f"{_moved(moved)}; generating the dataset again")
    elif is_synthetic_dir(path) and cfg.data_path is None:
        seal_folder(path, exclude=(TOKENIZER_CACHE,))  # made before sets were sealed
    if not is_synthetic_dir(path):
        try:
            prepare_data_dir(cfg)
        except (ValueError, OSError):  # e.g. a user's folder: refused by the run, by name
            return None
        seal_folder(path, exclude=(TOKENIZER_CACHE,))
    return path


def _moved(moved: Path | None) -> str:
    return f"moved aside as {moved.name}" if moved is not None else "moved aside by another process"


def _checked_tokenizer_cache(cfg: TrainConfig, data_dir: Path) -> None:
    """The cache entry :func:`seps.train.data.build_tokenizer` reads for ``cfg`` (a
    WordPiece tokenizer trained on the training captions), checked or made and sealed."""
    from ..data.text import _caption_digest, load_tokenizer, resolve_tokenizer
    from ..train.data import load

    try:
        if cfg.pretrain is not None or resolve_tokenizer(cfg.tokenizer, cfg.text_backbone):
            return  # the build's or a named tokenizer: no cache entry
        train = load(cfg, data_dir, cfg.train_split)
    except (ValueError, OSError):  # the run names the problem
        return
    texts = train.captions + train.dense
    cache = data_dir / TOKENIZER_CACHE
    entry = cache / f"wordpiece-{cfg.vocab_size}-{_caption_digest(texts, cfg.vocab_size)}"
    if entry.is_dir():
        if is_sealed(entry):
            found = folder_problem(entry)
        else:  # made before entries were sealed: compared with the tokenizer trained anew
            found = _unsealed_tokenizer_problem(entry, texts, cfg.vocab_size)
        if found is None:
            if not is_sealed(entry):
                seal_folder(entry)
            return
        moved = set_aside(entry)
        report(found[0], found[1], f"{_moved(moved)}; training the tokenizer again")
    load_tokenizer(None, captions=texts, vocab_size=cfg.vocab_size, cache_dir=cache)
    seal_folder(entry)


def _unsealed_tokenizer_problem(
    entry: Path, texts: list[str], vocab_size: int
) -> tuple[Path, str] | None:
    from ..data.text import tokenizer_from_json, tokenizer_hash, train_wordpiece_tokenizer
    from ..io.hub import one_line

    file = entry / "tokenizer.json"
    try:
        stored = tokenizer_hash(tokenizer_from_json(file.read_text(encoding="utf-8")))
    except Exception as exc:
        return file, f"unreadable ({type(exc).__name__}: {one_line(exc, 120)})"
    fresh = tokenizer_hash(train_wordpiece_tokenizer(texts, vocab_size=vocab_size))
    if stored != fresh:
        return file, f"holds tokenizer {stored}, but its captions give {fresh}"
    return None


def _build_problem(folder: Path) -> tuple[Path, str] | None:
    """What is wrong with a complete build: against its seal, or (a build made before
    builds were sealed) whether each weight file and JSON file reads."""
    if is_sealed(folder):
        return folder_problem(folder)
    for path in sorted(folder.rglob("*")):
        if path.name == BUILT_ON or not path.is_file():
            continue
        if path.suffix == ".safetensors":
            problem = safetensors_problem(path, require_hash=False)
            if problem is not None:
                return path, problem
        elif path.suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                return path, f"unreadable ({type(exc).__name__}); expected JSON"
    return None


def build_checked(name: str, root: str | Path | None = None, *, progress: bool = True) -> Path:
    """:func:`_build_checked` under a lock beside the build (``.<folder>.check.lock``): one
    process at a time checks, builds, stamps and seals it. Without it, a second process
    (another job on a shared data folder) could find the build complete in the moment
    between its builder's rename and its :data:`BUILT_ON` stamp, and refuse it as a build
    of unknown float path."""
    folder = pretrained_dir(name, root)
    lock = RunLock(folder.parent / f".{folder.name}.check.lock")
    for _ in lock.wait():
        pass
    try:
        return _build_checked(name, root, progress=progress)
    finally:
        lock.release()


def _build_checked(name: str, root: str | Path | None = None, *, progress: bool = True) -> Path:
    """Recipe ``name``'s folder, built first if absent, checked for its float path.

    A build made here gets :data:`BUILT_ON` (the float path in force,
    :func:`seps.experiments.provenance.cpu_identity`). A cached build whose file names another float
    path is refused: its weights come from that path, so a run pinned to this one
    (``SEPS_FLOAT_PATH``) would start from weights no other machine on this path makes.
    A build without the file (made before it existed, natively as far as anyone knows)
    is used as it is by a native run and refused by a pinned one.

    A build is sealed (:data:`seps.io.derived.MANIFEST`: the SHA-256 of each of its files but
    :data:`BUILT_ON`, which is read as JSON, and moved aside with the build to be built
    again when it cannot be) when it is made here, and checked
    against its seal each time: a damaged build is named in one line, moved aside as
    ``<folder>.corrupt`` and built again (before that, the synthetic draw and tokenizer it
    reads are checked too, :func:`check_inputs`). A build made before builds were sealed
    is sealed as it is once each of its weight and JSON files reads.

    Raises:
        ValueError: the cached build's float path differs from this one's.
    """
    folder = pretrained_dir(name, root)
    found = _build_problem(folder) if is_complete(folder) else None
    if found is not None:
        moved = set_aside(folder)
        report(found[0], found[1], f"{_moved(moved)}; building it again")
    fresh = not is_complete(folder)
    if fresh:  # the build reads its own synthetic draw and tokenizer: checked first
        check_inputs(_data_config(recipe(name)))
    ensure_pretrained(name, root, progress=progress)
    stamp_file = folder / BUILT_ON
    here = cpu_identity()
    if fresh:
        atomic_write_json(stamp_file, {"cpu": here})
        seal_folder(folder, exclude=(BUILT_ON,))
        return folder
    if not stamp_file.is_file():
        if float_path_key(here)[0] == "pinned":  # type: ignore[index]
            # Made before builds named their path: natively, as far as anyone knows.
            raise ValueError(
                f"{folder}: built before pretraining builds named their float path (no "
                f"{BUILT_ON}), so not known to be on this pinned one; move the folder aside "
                "to build it here (SEPS_FLOAT_PATH: docs/across-machines.md)"
            )
        _seal_build(folder)
        return folder
    try:
        there = json.loads(stamp_file.read_text()).get("cpu")
    except (OSError, ValueError, AttributeError) as exc:  # damaged: the path is unknown
        moved = set_aside(folder)
        problem = f"unreadable ({type(exc).__name__}); expected a JSON object"
        report(stamp_file, problem, f"{_moved(moved)}; building it again")
        return _build_checked(name, root, progress=progress)
    if float_path_key(there) != float_path_key(here):
        raise ValueError(
            f"{folder}: built on another float path ({cpu_label(there)}), this run is on "
            f"{cpu_label(here)}; move the folder aside to build it here (SEPS_FLOAT_PATH: "
            "docs/across-machines.md)"
        )
    _seal_build(folder)
    return folder


def _seal_build(folder: Path) -> None:
    """Seal a build made before builds were sealed (each of its files read: see
    :func:`_build_problem`), as it is."""
    if not is_sealed(folder):
        seal_folder(folder, exclude=(BUILT_ON,))
