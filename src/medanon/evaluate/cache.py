"""A small on-disk cache for the expensive, reusable parts of an evaluation.

Everything computed from the real data alone (Inception features of the reference set, the identity
network, the attribute attacker, train-on-real baselines) is stored under a key that hashes the
real dataset's content digest, the split and the settings that produced it, so a second evaluation
of the same real data (more releases, a re-run after an interruption) reuses it. Per-release results
are cached the same way, under the release's digest: an interrupted evaluation resumes where it
stopped. Files are written atomically; arrays as ``.npy``, results as JSON, models as medanon
checkpoints (``weights_only`` loading).
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from medanon.fsutil import atomic_write_bytes, atomic_write_text


def digest(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class Cache:
    """Key -> file under ``root``; ``None`` root disables caching (everything is recomputed)."""

    def __init__(self, root: str | Path | None):
        self.root = Path(root) if root is not None else None
        self.reused = 0                                  # results read back instead of computed (a resumed run)
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            from medanon.outputs import MARKER, write_marker

            if not (self.root / MARKER).is_file():      # a later run may reuse it (--cache refuses foreign folders)
                write_marker(self.root, "evaluation-cache")

    def path(self, name: str, suffix: str) -> Path | None:
        return None if self.root is None else self.root / f"{name}{suffix}"

    def load_array(self, name: str) -> np.ndarray | None:
        p = self.path(name, ".npy")
        if p is None or not p.is_file():
            return None
        self.reused += 1
        return np.load(p, allow_pickle=False)

    def save_array(self, name: str, value: np.ndarray) -> None:
        p = self.path(name, ".npy")
        if p is not None:
            buf = io.BytesIO()
            np.save(buf, np.asarray(value), allow_pickle=False)
            atomic_write_bytes(p, buf.getvalue())

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
        self.reused += 1
        return json.loads(p.read_text(encoding="utf-8"))

    def save_json(self, name: str, value: Any) -> None:
        p = self.path(name, ".json")
        if p is not None:
            atomic_write_text(p, json.dumps(value, indent=1, sort_keys=True, default=_default) + "\n")


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
