"""Whether the Hugging Face hub can be used, decided once per process.

Hub names (``bert-base-uncased``, ``google/vit-base-patch16-224-in21k``) resolve from the
local cache only when :func:`hub_offline` is true, so that no load waits for the hub
client's retries (about a minute for each name when the machine has no internet).
"""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request

__all__ = ["hub_offline", "one_line"]

#: Seconds the one reachability check of the hub may take (DNS included).
_HUB_PROBE_SECONDS = 3.0
_hub_reachable_cache: list[bool] = []  # the check's result, once made
_hub_probe_lock = threading.Lock()


def _hub_endpoint() -> str:
    """The hub address ``huggingface_hub`` uses (``HF_ENDPOINT`` or huggingface.co)."""
    try:
        from huggingface_hub import constants

        return str(constants.ENDPOINT)
    except (ImportError, AttributeError):  # pragma: no cover - transformers needs the hub
        return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def _probe_hub(endpoint: str, timeout: float) -> bool:
    """True when ``endpoint`` answers an HTTP HEAD request (any status) within ``timeout``.

    Runs in a daemon thread joined with ``timeout``, because name resolution is not bound by
    the socket timeout; proxies come from the environment, as for the hub's own requests.
    """
    answer: list[bool] = []

    def head() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout)
            answer.append(True)
        except urllib.error.HTTPError:  # the server answered, with an error status
            answer.append(True)
        except (OSError, ValueError):
            answer.append(False)

    thread = threading.Thread(target=head, daemon=True, name="seps-hub-probe")
    thread.start()
    thread.join(timeout)
    return bool(answer and answer[0])


def hub_offline() -> bool:
    """True when hub names must resolve from the local cache only: ``HF_HUB_OFFLINE`` or
    ``TRANSFORMERS_OFFLINE`` is set to a true value, or the hub did not answer the one quick
    check (at most :data:`_HUB_PROBE_SECONDS`) made the first time this is asked in the process.

    Without the check, every hub name would wait about a minute for the hub client's
    retries before falling back to the cache.
    """
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}:
            return True
    with _hub_probe_lock:
        if not _hub_reachable_cache:
            _hub_reachable_cache.append(_probe_hub(_hub_endpoint(), _HUB_PROBE_SECONDS))
    return not _hub_reachable_cache[0]


def one_line(text: object, limit: int = 300) -> str:
    """``str(text)`` on one line (whitespace runs collapsed), cut to ``limit`` characters: for
    library errors quoted inside this package's one-line messages."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
