"""Reading and writing checkpoints as data only: no file the suite reads can run code.

A pickle (what ``torch.save`` writes) names the functions that rebuild its objects, and
``torch.load(weights_only=False)`` calls them: a ``model_best.pth`` from the internet
could run any command. So:

- :func:`load_torch_data` reads a ``torch.save`` file with ``weights_only=True`` (tensors
  and plain containers only), plus the few plain classes a caller names (the official
  checkpoint's ``argparse.Namespace``); anything else is refused in one line naming the
  file and what it tried to load, before any of it runs.
- :func:`save_tensor_json` / :func:`load_tensor_json` write and read a safetensors file
  whose tensors are the tensors of a nested object and whose other content is JSON (kept
  as one ``uint8`` tensor, so that a long history is not limited by the header size).
  Neither format can name a function. Non-JSON containers are tagged (``$tuple``,
  ``$items`` for a dict whose keys are not all strings, ``$counter``), so an optimizer
  or scheduler state dict comes back with the same keys and types (floats exactly, as
  ``json`` writes their shortest round-trip form).
"""

from __future__ import annotations

import collections
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from .hub import one_line

__all__ = ["UnsafeFileError", "load_tensor_json", "load_torch_data", "save_tensor_json"]

#: The tensor of a :func:`save_tensor_json` file that holds the JSON part.
JSON_TENSOR = "$json"
_TAGS = ("$tensor", "$tuple", "$items", "$counter")


class UnsafeFileError(ValueError):
    """A file needs more than tensors and plain data to load: refused, nothing of it ran."""


def load_torch_data(path: str | os.PathLike[str], allowed: Iterable[type] = ()) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, with the classes in ``allowed``
    also accepted (rebuilt from their state only, never through a function of the file).

    Raises:
        UnsafeFileError: the file names a function or class outside that list.
        ValueError: not a readable torch file.
    """
    import pickle

    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's weights-only unpickler names what the file asked for ("GLOBAL os.system");
        # any other unpickling error is a damaged or foreign file.
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        if found is None:
            raise ValueError(
                f"{os.fspath(path)!r}: not a readable torch file ({one_line(exc, 200)})"
            ) from None
        raise UnsafeFileError(
            f"{os.fspath(path)!r}: refused to load: it asks to run or build "
            f"{found.group(1)!r}, which is not a tensor or plain data (no code from a "
            "checkpoint is run)"
        ) from None
    except Exception as exc:
        raise ValueError(
            f"{os.fspath(path)!r}: not a readable torch file ({one_line(exc)})"
        ) from exc


def _encode(obj: Any, tensors: dict[str, torch.Tensor], seen: set[int]) -> Any:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu()
        # safetensors stores each tensor once: a view or a storage shared with another
        # tensor (tied weights) is written as its own copy.
        whole = t.untyped_storage().nbytes() == t.numel() * t.element_size()
        ptr = t.untyped_storage().data_ptr()
        if not (t.is_contiguous() and whole) or (ptr in seen and t.numel()):
            t = t.clone(memory_format=torch.contiguous_format)
        seen.add(t.untyped_storage().data_ptr())
        key = str(len(tensors))
        tensors[key] = t
        return {"$tensor": key}
    if isinstance(obj, collections.Counter):
        return {"$counter": [[_encode(k, tensors, seen), v] for k, v in obj.items()]}
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) and not k.startswith("$") for k in obj):
            return {k: _encode(v, tensors, seen) for k, v in obj.items()}
        pairs = [[_encode(k, tensors, seen), _encode(v, tensors, seen)] for k, v in obj.items()]
        return {"$items": pairs}
    if isinstance(obj, tuple):
        return {"$tuple": [_encode(v, tensors, seen) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, tensors, seen) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    item = getattr(obj, "item", None)  # a NumPy scalar: its Python value
    if callable(item) and getattr(obj, "shape", None) == ():
        return _encode(item(), tensors, seen)
    raise TypeError(f"cannot store a {type(obj).__name__} as tensors and JSON")


def _decode(obj: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1 and next(iter(obj)) in _TAGS:
        tag, val = next(iter(obj.items()))
        if tag == "$tensor":
            return tensors[val]
        if tag == "$tuple":
            return tuple(_decode(v, tensors) for v in val)
        if tag == "$counter":
            return collections.Counter({_decode(k, tensors): v for k, v in val})
        return {_decode(k, tensors): _decode(v, tensors) for k, v in val}
    return {k: _decode(v, tensors) for k, v in obj.items()}


def save_tensor_json(path: Path, obj: Any) -> None:
    """Write ``obj`` (tensors, dicts, lists, tuples, Counters, JSON scalars) to ``path``
    as safetensors, atomically (``path`` is always whole: old or new), with the hash of
    its tensors in its metadata (:func:`seps.io.derived.save_safetensors`)."""
    from .derived import save_safetensors

    tensors: dict[str, torch.Tensor] = {}
    doc = json.dumps(_encode(obj, tensors, set()), sort_keys=True).encode()
    tensors[JSON_TENSOR] = torch.frombuffer(bytearray(doc), dtype=torch.uint8)
    save_safetensors(path, tensors)


def load_tensor_json(path: str | os.PathLike[str]) -> Any:
    """What :func:`save_tensor_json` wrote to ``path``, checked against the hash of its
    tensors written with it (:mod:`seps.io.derived`; a file written before files carried one
    is only read).

    Raises:
        ValueError: not such a file (unreadable, or without its JSON part), or its content
            does not match its hash.
    """
    from .derived import DerivedFileError, load_safetensors

    try:
        tensors = load_safetensors(path, require_hash=False)
    except DerivedFileError as exc:
        if exc.problem.startswith("content does not match"):  # whole, but not as written
            raise ValueError(f"{os.fspath(path)!r}: {exc.problem}") from None
        raise ValueError(
            f"{os.fspath(path)!r}: not a readable seps-bench safetensors file ({exc.problem})"
        ) from None
    try:
        doc = json.loads(bytes(tensors.pop(JSON_TENSOR).numpy()).decode())
        return _decode(doc, tensors)
    except Exception as exc:
        raise ValueError(
            f"{os.fspath(path)!r}: not a readable seps-bench safetensors file ({one_line(exc)})"
        ) from exc
