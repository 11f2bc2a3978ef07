"""A small on-disk cache for the expensive, reusable parts of an evaluation.

Everything computed from the real data alone (Inception features of the reference set, the identity
network, the attribute attacker, train-on-real classifiers) is stored under a key that hashes the
real dataset's content digest, the split and the settings that produced it, so a second evaluation
of the same real data (more releases, a re-run after an interruption) reuses it. Per-release results
are cached the same way, under the release's digest: an interrupted evaluation resumes where it
stopped. Files are written atomically; arrays as ``.npy``, results as JSON, models as medanon
checkpoints (``weights_only`` loading). Every evaluation using a cache holds a shared lock on it; one that finds
no other user removes the temporary files a killed evaluation left there.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from medanon.fsutil import atomic_write_bytes, atomic_write_text, remove_torn_writes

try:
    import fcntl
except ImportError:                                   # pragma: no cover - Windows: no sweeping of leftovers
    fcntl = None

LOCK = ".cache.lock"


def digest(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class Cache:
    """Key -> file under ``root``; ``None`` root disables caching (everything is recomputed)."""

    def __init__(self, root: str | Path | None):
        self.root = Path(root) if root is not None else None
        self.reused = 0                                  # results read back instead of computed (a resumed run)
        self._written: set[Path] = set()                 # what this evaluation saved: read back, it is not reused
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            from medanon.outputs import MARKER, write_marker

            if not (self.root / MARKER).is_file():      # a later run may reuse it (--cache refuses foreign folders)
                write_marker(self.root, "evaluation-cache")
        self._fd: int | None = None
        self.swept = 0                                   # temporary files of killed evaluations removed
        if self.root is not None and fcntl is not None:
            self._hold()

    def _hold(self) -> None:
        """Hold the cache shared for as long as this evaluation uses it. An evaluation that gets it exclusively first
        has no other user, so every ``.NAME.XXXXXXXX.tmp`` there is an atomic write a killed run left: removed.
        A live writer's temporary file is never removed: its evaluation holds the lock from start to end."""
        fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:                          # another evaluation uses it now: leave its files be
            pass
        except OSError:                                  # no locks on this file system: sweep nothing, hold nothing
            os.close(fd)
            return
        else:
            self.swept = remove_torn_writes(self.root)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            os.close(fd)
            return
        self._fd = fd

    def close(self) -> None:
        """Give the cache back (the process's end does too)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def path(self, name: str, suffix: str) -> Path | None:
        return None if self.root is None else self.root / f"{name}{suffix}"

    def load_array(self, name: str) -> np.ndarray | None:
        p = self.path(name, ".npy")
        if p is None or not p.is_file():
            return None
        self.reused += p not in self._written
        return np.load(p, allow_pickle=False)

    def save_array(self, name: str, value: np.ndarray) -> None:
        p = self.path(name, ".npy")
        if p is not None:
            buf = io.BytesIO()
            np.save(buf, np.asarray(value), allow_pickle=False)
            atomic_write_bytes(p, buf.getvalue())
            self._written.add(p)

    def array(self, name: str, compute) -> np.ndarray:
        got = self.load_array(name)
        if got is None:
            got = np.asarray(compute())
            self.save_array(name, got)
        return got

    def load_json(self, name: str) -> Any | None:
        p = self.path(name, ".json")
        if p is None or not p.is_file():
            return None
        self.reused += p not in self._written
        return json.loads(p.read_text(encoding="utf-8"))

    def save_json(self, name: str, value: Any) -> Any:
        """Store ``value`` and return it as a later :meth:`load_json` will (keys sorted, arrays as lists): a result
        computed now and one read back from the cache are the same object, down to the order of their keys, so a
        rerun reports (and breaks ties) exactly as the first run did."""
        text = json.dumps(value, indent=1, sort_keys=True, default=_default) + "\n"
        p = self.path(name, ".json")
        if p is not None:
            atomic_write_text(p, text)
            self._written.add(p)
        return json.loads(text)


def _default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def check_cache_apart(cache_dir: str | Path, out: str | Path) -> None:
    """An evaluation cache given apart from the report folder is not that folder nor above it: the folder would be
    marked a cache, and the same command refused the next time."""
    from medanon.errors import ConfigError
    from medanon.outputs import _resolve

    c, o = _resolve(cache_dir), _resolve(out)
    if c == o or c in o.parents:
        raise ConfigError(f"the cache {cache_dir} is the report folder {out} or holds it",
                          fix="leave the cache out (it is kept in the report folder's cache/) or give a folder "
                              "outside the report folder")
