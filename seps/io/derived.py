"""Derived files checked on read: a content hash is written with each one and compared
whenever it is read again.

The suite reuses what it made before: frozen-backbone feature caches, run checkpoints and
the movement baseline beside them, pretraining builds, tokenizer caches and generated
datasets. A file damaged on disk (cut short, or a few bytes overwritten) must not become a
run's status or metric: it is named in one line (:func:`report`), set aside or replaced,
and made again, so the run's record equals the one a fresh store gives.

Two carriers, one hash (SHA-256):

- a **safetensors file** carries the hash of its tensors in its own header
  (``__metadata__["content_sha256"]``, :func:`save_safetensors` / :func:`load_safetensors`):
  written in the same atomic rename as the data, so there is no second file to lose or to
  get out of step with it (a sidecar ``<file>.sha256`` would need a second rename, and a
  kill between the two would leave a good checkpoint that looks damaged). The hash covers
  each tensor's name, dtype, shape and bytes in name order (:func:`tensors_digest`), so it
  does not depend on how safetensors lays the file out, and any safetensors reader still
  reads the file.
- a **folder** (a dataset, a tokenizer cache entry, a pretraining build) carries
  :data:`MANIFEST`, the SHA-256 of every file in it (:func:`seal_folder` /
  :func:`folder_problem`), as JSON so that a manifest cut short is itself unreadable
  rather than a shorter list. The builders of these folders are hashed into the folders'
  names (:func:`seps.train.pretrain.recipe_key`, :func:`seps.versioning.version.data_version`),
  so the
  manifest is written by the code that asks for the folder, right after it is made
  (:mod:`seps.runs.prebuild`), not by the builder.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from .hub import one_line
from .store import atomic_write_json, quarantine, temp_path

__all__ = [
    "HASH_KEY",
    "MANIFEST",
    "DerivedFileError",
    "folder_problem",
    "is_sealed",
    "load_safetensors",
    "report",
    "safetensors_problem",
    "save_safetensors",
    "seal_folder",
    "set_aside",
    "tensors_digest",
]

#: The ``__metadata__`` entry of a safetensors file that holds its :func:`tensors_digest`.
HASH_KEY = "content_sha256"
#: The file in a derived folder that lists the SHA-256 of each of its files.
MANIFEST = "SHA256SUMS.json"
_MANIFEST_FORMAT = "seps-bench/sha256sums/1"


class DerivedFileError(ValueError):
    """A derived file that is damaged: :attr:`path` and what is wrong with it (one line)."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{os.fspath(path)}: {problem}")


def report(path: str | os.PathLike[str], problem: str, action: str) -> str:
    """Say on stderr, in one line, which derived file is damaged, how, and what is done
    about it; return the line."""
    line = f"warning: {os.fspath(path)}: {problem}; {action}"
    print(line, file=sys.stderr, flush=True)
    return line


def _raw_bytes(t: torch.Tensor) -> memoryview | bytes:
    t = t.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return b""
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def tensors_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 (hex) of each tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256(b"seps-bench/tensors/1\0")
    for name in sorted(tensors):
        t = tensors[name]
        h.update(json.dumps([name, str(t.dtype), list(t.shape)]).encode() + b"\0")
        h.update(_raw_bytes(t))
    return h.hexdigest()


def save_safetensors(path: str | os.PathLike[str], tensors: Mapping[str, torch.Tensor]) -> None:
    """Write ``tensors`` (contiguous, distinct storages) to ``path`` atomically, with their
    :func:`tensors_digest` in the file's metadata."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        save_file(dict(tensors), str(tmp), metadata={HASH_KEY: tensors_digest(tensors)})
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_safetensors(
    path: str | os.PathLike[str], *, require_hash: bool = True
) -> dict[str, torch.Tensor]:
    """The tensors of ``path`` (as ``safetensors.torch.load_file`` gives them), checked
    against the hash written with them.

    ``require_hash=False`` accepts a file without one (written before files carried it):
    it is only read.

    Raises:
        DerivedFileError: the file is missing, unreadable (cut short, a damaged header), has
            no hash although one is required, or its tensors do not match it.
    """
    from safetensors import safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(os.fspath(path), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
        tensors = load_file(os.fspath(path), device="cpu")
    except FileNotFoundError:
        raise DerivedFileError(path, "file not found") from None
    except Exception as exc:
        raise DerivedFileError(
            path,
            f"unreadable ({type(exc).__name__}: {one_line(exc, 160)}); expected a whole "
            "safetensors file",
        ) from None
    want = meta.get(HASH_KEY)
    if want is None:
        if require_hash:
            raise DerivedFileError(
                path, f"carries no content hash (metadata {HASH_KEY!r}); expected one"
            )
        return tensors
    found = tensors_digest(tensors)
    if found != want:
        raise DerivedFileError(
            path,
            f"content does not match the sha256 written with it (expected {want[:16]}..., "
            f"found {found[:16]}...)",
        )
    return tensors


def safetensors_problem(path: str | os.PathLike[str], *, require_hash: bool = True) -> str | None:
    """What :func:`load_safetensors` finds wrong with ``path``, or ``None``."""
    try:
        load_safetensors(path, require_hash=require_hash)
    except DerivedFileError as exc:
        return exc.problem
    return None


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _content(folder: Path, exclude: Iterable[str]) -> list[str]:
    """The files of ``folder`` a manifest lists: every file below it (as a POSIX relative
    path, sorted) except the manifest, hidden names (temporary files) and the top-level
    names in ``exclude``."""
    skip = {MANIFEST, *exclude}
    out = []
    for root, dirs, files in os.walk(folder):
        rel_root = Path(root).relative_to(folder)
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and not (rel_root == Path() and d in skip)
        )
        for name in files:
            if name.startswith(".") or (rel_root == Path() and name in skip):
                continue
            out.append((rel_root / name).as_posix())
    return sorted(out)


def seal_folder(folder: str | os.PathLike[str], *, exclude: Iterable[str] = ()) -> None:
    """Write ``folder``'s :data:`MANIFEST` from its current content (atomically)."""
    folder = Path(folder)
    files = {rel: _sha256_file(folder / rel) for rel in _content(folder, exclude)}
    atomic_write_json(folder / MANIFEST, {"format": _MANIFEST_FORMAT, "files": files})


def is_sealed(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` has a :data:`MANIFEST` (readable or not)."""
    return (Path(folder) / MANIFEST).is_file()


def folder_problem(folder: str | os.PathLike[str]) -> tuple[Path, str] | None:
    """The first file of ``folder`` that does not match its :data:`MANIFEST` and what is
    wrong with it (the manifest itself when it is absent or unreadable); ``None`` when
    every file it lists is there with its hash. Files it does not list are not read."""
    folder = Path(folder)
    manifest = folder / MANIFEST
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
        listed = doc["files"]
        if doc.get("format") != _MANIFEST_FORMAT or not isinstance(listed, dict):
            raise ValueError(f"format {doc.get('format')!r}")
    except FileNotFoundError:
        return manifest, "file not found; expected the folder's list of file hashes"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return manifest, (
            f"unreadable ({type(exc).__name__}: {one_line(exc, 120)}); expected a "
            f"{_MANIFEST_FORMAT} JSON object"
        )
    bad: list[tuple[Path, str]] = []
    for rel, want in sorted(listed.items()):
        path = folder / rel
        try:
            found = _sha256_file(path)
        except FileNotFoundError:
            bad.append((path, f"file not found; {MANIFEST} lists it"))
            continue
        except OSError as exc:
            bad.append((path, f"unreadable ({type(exc).__name__}: {one_line(exc, 120)})"))
            continue
        if found != want:
            bad.append(
                (
                    path,
                    f"content does not match the sha256 in {MANIFEST} (expected "
                    f"{str(want)[:16]}..., found {found[:16]}...)",
                )
            )
    if not bad:
        return None
    path, problem = bad[0]
    if len(bad) > 1:
        more = len(bad) - 1
        problem += f" ({more} more file" + (
            " of the folder differs)" if more == 1 else "s of the folder differ)"
        )
    return path, problem


def set_aside(path: str | os.PathLike[str]) -> Path | None:
    """Move a damaged file or folder aside as ``<name>.corrupt`` (``.corrupt.N`` when that
    exists; :func:`seps.io.store.quarantine`), so that it is made again and can still be
    inspected; ``None`` when another process moved it first."""
    try:
        return quarantine(Path(path))
    except FileNotFoundError:
        return None
