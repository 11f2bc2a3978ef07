"""The one rule every command that writes follows, checked before any expensive work.

1. Never write into, over, or as a parent of an input: a dataset folder, a labels CSV, an image or mask
   folder, a checkpoint being read, a release being evaluated.
2. Never replace an existing file or folder unless the caller passes ``overwrite`` (an empty folder holds
   nothing to lose and is used as it is).
3. Even with ``overwrite``, never replace anything medanon did not write. medanon's outputs carry a marker
   (``.medanon-output.json`` in every folder it writes; a ``format`` field in the files it writes), and the
   outputs of earlier versions are recognised by their manifests.
4. The place must be writable: the error comes now, not after an hour of work.

:func:`check_output` applies rules 1-4 to one output path; :func:`dataset_inputs` lists what a dataset
reads, so that a command can pass it as ``inputs``.

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> (root / "data").mkdir()
>>> check_output(root / "release", inputs=[root / "data"]).name
'release'
>>> check_output(root / "data" / "release", inputs=[root / "data"])
Traceback (most recent call last):
...
medanon.outputs.UnsafeOutputError: out ... is inside the input ...
"""

from __future__ import annotations

import csv
import json
import os
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from medanon.errors import MedanonError, OutputExistsError

MARKER = ".medanon-output.json"
MAPPING_FORMAT = "medanon-mapping"
SPLITS_HEADER = ["record_id", "patient_id", "split"]


class UnsafeOutputError(MedanonError):
    """An output path would write into, over or around an input, or over something medanon did not write."""


def write_marker(folder: str | os.PathLike, kind: str) -> None:
    """Mark ``folder`` as written by medanon (what rule 3 recognises)."""
    from medanon import __version__

    Path(folder, MARKER).write_text(json.dumps({"written_by": "medanon", "kind": kind,
                                                "version": __version__}) + "\n", encoding="utf-8")


def _resolve(p: str | os.PathLike) -> Path:
    return Path(os.path.abspath(Path(p).expanduser())).resolve(strict=False)


def dataset_inputs(ds: Any) -> list[Path]:
    """Everything an opened dataset reads: its root, and every folder holding one of its images or masks."""
    paths: set[Path] = set()
    root = getattr(ds, "root", None)
    if root is not None:
        paths.add(_resolve(root))
    for r in getattr(ds, "records", ()):
        paths.add(_resolve(r.path).parent)
        if getattr(r, "mask_path", None):
            paths.add(_resolve(r.mask_path).parent)
    return sorted(paths)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _medanon_dir(path: Path) -> bool:
    if (path / MARKER).is_file():
        return True
    man = _json(path / "manifest.json")
    if isinstance(man, dict) and (man.get("format") == "medanon-release"
                                  or "medanon" in (man.get("software") or {})):
        return True                                    # a release, run or report of an earlier version
    if (path / "phantom.json").is_file() and isinstance(_json(path / "phantom.json"), dict):
        return True
    return (path / "checkpoint.pt").is_file() and _medanon_file(path / "checkpoint.pt")   # a run folder to resume


def _medanon_file(path: Path) -> bool:
    if path.suffix.lower() == ".json":
        blob = _json(path)
        return isinstance(blob, dict) and (blob.get("format") == MAPPING_FORMAT
                                           or {"release", "method", "records"} <= set(blob))
    if path.suffix.lower() == ".csv":
        try:
            with open(path, encoding="utf-8", newline="") as f:
                return next(csv.reader(f), None) == SPLITS_HEADER
        except (OSError, UnicodeDecodeError, csv.Error):
            return False
    if zipfile.is_zipfile(path):                       # a torch checkpoint: look for medanon's format field
        from medanon.checkpoint import FORMAT

        try:
            import torch

            blob = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception:                              # any unreadable or unsafe file is not ours
            return False
        return isinstance(blob, dict) and blob.get("format") == FORMAT
    return False


def is_medanon_output(path: str | os.PathLike) -> bool:
    """Whether ``path`` is something medanon wrote (or an empty folder, which holds nothing to lose)."""
    p = Path(path)
    if p.is_dir():
        return not any(p.iterdir()) or _medanon_dir(p)
    return p.is_file() and _medanon_file(p)


def _relation(out: Path, inp: Path) -> str | None:
    if out == inp:
        return "is the input"
    if inp in out.parents:
        return "is inside the input"
    if out in inp.parents:
        return "contains the input"
    return None


def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = (),
                 overwrite: bool = False, kind: Literal["dir", "file"] = "dir", name: str = "out",
                 existing_ok: bool = False) -> Path:
    """Check that ``path`` may be written; return it unchanged. Raise before any work is done if not.

    ``inputs`` are the paths the command reads (see :func:`dataset_inputs`); ``kind`` says whether the output
    is a folder or a file; ``name`` is the argument's name for messages. ``existing_ok`` accepts an existing
    medanon output without ``overwrite`` (a run folder being resumed, a report folder with its cache).
    """
    out = Path(path)
    target = _resolve(out)
    for inp in inputs:
        if inp is None:
            continue
        rel = _relation(target, _resolve(inp))
        if rel is not None:
            raise UnsafeOutputError(f"{name} {out} {rel} {inp}: medanon never writes into, over or around "
                                    "what it reads", fix=f"choose a {name} outside the input data")
    if out.exists() or out.is_symlink():
        if kind == "dir" and not out.is_dir():
            raise UnsafeOutputError(f"{name} {out} exists and is not a folder",
                                    fix=f"choose another {name}, or move that file away yourself")
        if kind == "file" and out.is_dir():
            raise UnsafeOutputError(f"{name} {out} is a folder, a file is needed here",
                                    fix=f"give a file path for {name}")
        empty_dir = out.is_dir() and not any(out.iterdir())
        if not empty_dir:
            if not (overwrite or existing_ok):
                raise OutputExistsError(f"{name} {out} already exists",
                                        fix=f"choose another {name}, or pass overwrite=True to replace it")
            if not is_medanon_output(out):
                raise UnsafeOutputError(f"{name} {out} exists and was not written by medanon: it is never replaced, "
                                        "even with overwrite", fix=f"choose another {name}, or remove it yourself")
    _check_writable(target.parent, out, name)
    return out


def _check_writable(folder: Path, out: Path, name: str) -> None:
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UnsafeOutputError(f"{name} {out} cannot be created: {probe} is a file",
                                fix=f"choose a {name} whose parent folders are folders")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UnsafeOutputError(f"{name} {out} cannot be written: no write permission in {probe}",
                                fix=f"choose a {name} in a folder you can write to")
