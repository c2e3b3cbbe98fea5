"""What a run key knows of a dataset folder: its resolved place and its split files' bytes.

A run on a folder in the official layout (``f30k``, ``coco``) is keyed by the folder's
resolved absolute path and a fingerprint of the text files of the splits it reads
(:func:`data_fingerprint`), not by the ``--data-path`` string: ``rel/dir`` and
``/abs/rel/dir`` give one key, and a corrected caption file gives a new one. The images are
not read (hashing tens of thousands of JPEGs at every plan would cost minutes); a changed
``id_mapping.json`` (which image a caption goes with) does change the fingerprint.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["data_fingerprint", "resolved_path", "split_files"]

#: The file of the layout that every split shares (image id -> image file name).
MAPPING_FILE = "id_mapping.json"


def resolved_path(path: str) -> str:
    """``path`` as an absolute path with ``~`` and symbolic links resolved (the folder
    need not exist)."""
    return str(Path(path).expanduser().resolve())


def split_files(data_dir: Path, splits: Iterable[str]) -> list[Path]:
    """The existing text files of ``splits`` in ``data_dir``, sorted by name:
    ``{split}_caps.txt``, ``{split}_ids.txt``, every ``*_{split}.jsonl`` (dense captions)
    and ``id_mapping.json``. Missing ones are left out (a run without a ``dev`` split
    trains without validation); the fingerprint then differs from a folder that has them."""
    names = {MAPPING_FILE}
    for split in set(splits):
        names |= {f"{split}_caps.txt", f"{split}_ids.txt"}
        names |= {p.name for p in data_dir.glob(f"*_{split}.jsonl")}
    return sorted(data_dir / n for n in names if (data_dir / n).is_file())


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, size: int, mtime_ns: int, inode: int) -> str:
    # Keyed by the file's stat as well as its name, so that a file rewritten in this process
    # is hashed again; a plan of 50 runs x 2 keys reads each file once.
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def data_fingerprint(data_dir: str | os.PathLike[str], splits: Iterable[str]) -> str:
    """sha256 (hex, 16 characters) over the name and bytes of every
    :func:`split_files` file of ``splits`` in ``data_dir`` (an absent folder hashes as
    empty)."""
    folder = Path(data_dir)
    h = hashlib.sha256()
    for path in split_files(folder, splits) if folder.is_dir() else []:
        st = path.stat()
        digest = _file_digest(str(path), st.st_size, st.st_mtime_ns, st.st_ino)
        h.update(f"{path.name}\0{digest}\n".encode())
    return h.hexdigest()[:16]
