"""Where medanon finds trained models (checkpoints), and what it finds there.

The search path, in order:

1. ``$MEDANON_MODELS``: one folder, or several separated by ``os.pathsep`` (``:`` on Linux), e.g. a
   folder the shipped ``checkpoints/*.pt`` were copied to next to an installed wheel;
2. ``checkpoints/`` of the source checkout medanon runs from (an editable install, or ``src/`` on
   ``PYTHONPATH``), which is where the shipped 64 px models live (``checkpoints/README.md`` says how
   each was trained and reproduces it).

The checkpoints are not package data: at 26 MB they stay out of the wheel, and a hospital
workstation usually installs from a copy of the source tree. ``medanon models`` lists every
checkpoint on the search path with its kind and sha256 (the checksum a release manifest records
for the models it used).

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> os.environ[ENV] = folder
    >>> search_path()[0] == Path(folder)
    True
    >>> find_model("no-such-model.pt")                 # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    medanon.errors.DataError: model no-such-model.pt is not on medanon's model search path...
    >>> del os.environ[ENV]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from medanon.errors import DataError

ENV = "MEDANON_MODELS"
_ROOT = Path(__file__).resolve().parents[2]     # src/medanon/ -> the repository root, in a source checkout
SOURCE_CHECKPOINTS = _ROOT / "checkpoints"


def search_path() -> list[Path]:
    """The folders searched for checkpoints, in order: ``$MEDANON_MODELS`` entries, then the source checkout's
    (when medanon runs from one: an installed wheel has none)."""
    folders = [Path(p).expanduser() for p in os.environ.get(ENV, "").split(os.pathsep) if p.strip()]
    if (_ROOT / "pyproject.toml").is_file():
        folders.append(SOURCE_CHECKPOINTS)
    return list(dict.fromkeys(folders))


def find_model(name: str | Path) -> Path:
    """The first checkpoint named ``name`` (``.pt`` optional) on the search path; a path to a file is kept.

    Raises :class:`~medanon.errors.DataError` listing the folders searched when none holds it.
    """
    p = Path(name)
    if p.is_file():
        return p
    names = [p.name] if p.suffix == ".pt" else [p.name, p.name + ".pt"]
    for folder in search_path():
        for n in names:
            if (folder / n).is_file():
                return folder / n
    raise DataError(f"model {p.name} is not on medanon's model search path",
                    files=[str(f) for f in search_path()],
                    fix=f"copy the checkpoints (checkpoints/*.pt of the source tree) into a folder and set {ENV} "
                        "to it, or pass the checkpoint's path")


def models_folder() -> Path | None:
    """The first folder of the search path that holds checkpoints (the demo's default), or None."""
    for folder in search_path():
        if folder.is_dir() and any(folder.glob("*.pt")):
            return folder
    return None


@dataclass
class ModelInfo:
    name: str                                   # file name, e.g. glow-xray64.pt
    path: Path
    bytes: int
    sha256: str
    kind: str                                   # the checkpoint's model family (restyle-encoder, glow, ...)
    shadowed: bool = False                      # an earlier folder of the search path has a file of this name


def list_models() -> list[ModelInfo]:
    """Every ``*.pt`` on the search path, in search order, with its sha256 and checkpoint kind."""
    from medanon.checkpoint import load_checkpoint
    from medanon.errors import ConfigError

    out, seen = [], set()
    for folder in search_path():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.pt")):
            try:
                blob = load_checkpoint(path)
                kind, sha = str(blob.get("kind")), blob["sha256"]
            except ConfigError:
                from medanon.fsutil import sha256_file

                kind, sha = "not a medanon checkpoint", sha256_file(path)
            out.append(ModelInfo(path.name, path, path.stat().st_size, sha, kind, shadowed=path.name in seen))
            seen.add(path.name)
    return out
