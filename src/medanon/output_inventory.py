"""What medanon wrote: the kind of an existing output and the files it holds, so that ``overwrite`` replaces only
medanon's own output of the same kind, and only when nothing else was put there.

Every folder medanon finishes carries a marker, ``.medanon-output.json``, with its kind (``release``,
``phantom``, ``samples``, ``demo``, ...) and the list of files it wrote, each with its size and, for tables, texts
and files up to 1 MiB, the sha256 of its content. A folder may be replaced only when its kind is the one being
written (a release replaces a release) and every file in it is one that the marker lists, as listed: a user's
``NOTES.txt`` added to an old release, a file that changed (a label edited in ``labels.csv``, even at the same
size), or a marker copied into a user's folder all mean a refusal that names the file. A marker alone proves
nothing.

Releases of earlier versions carry no marker: their ``manifest.json`` identifies them and their ``labels.csv``
lists their images, which is their inventory. Files medanon writes identify themselves: a mapping and a
checkpoint by their ``format`` field, a splits file by its header.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> (d / "a.txt").write_text("x")
1
>>> write_marker(d, "samples")
>>> folder_kind(d), sorted(written_files(d))
('samples', ['.medanon-output.json', 'a.txt'])
>>> (d / "NOTES.txt").write_text("mine")
4
>>> foreign_files(d)
['NOTES.txt']
"""

from __future__ import annotations

import csv
import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

MARKER = ".medanon-output.json"
MAPPING_FORMAT = "medanon-mapping"
SPLITS_HEADER = ["record_id", "patient_id", "split", "bytes"]
SPLITS_HEADERS = (SPLITS_HEADER, SPLITS_HEADER[:3])       # (earlier versions wrote no file sizes)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _files_under(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (links not followed) as relative path -> size."""
    found: dict[str, int] = {}
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(root, d)))]:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, folder).replace(os.sep, "/")
            found[rel] = os.lstat(p).st_size if not os.path.islink(p) else -1
    return found


HASHED_SIZE = 1 << 20                  # files up to this size (and every table or text file) are listed by content
TEXT_SUFFIXES = (".csv", ".json", ".jsonl", ".yaml", ".yml", ".txt", ".md", ".html")


def _hashed(rel: str, size: int) -> bool:
    """Whether the marker lists ``rel`` by content too: an edit that keeps a file's size (a label changed in
    ``labels.csv``) must not pass as medanon's own file. Large images are listed by size only (cost)."""
    return size >= 0 and (size <= HASHED_SIZE or rel.lower().endswith(TEXT_SUFFIXES))


def write_marker(folder: str | os.PathLike, kind: str) -> None:
    """Mark ``folder`` as medanon's output of ``kind``, listing every file in it now (with its size, and the sha256
    of its content where :func:`_hashed`)."""
    from medanon import __version__
    from medanon.fsutil import sha256_file

    folder = Path(folder)
    files = {rel: size for rel, size in _files_under(folder).items() if rel != MARKER}
    digests = {rel: sha256_file(folder / rel) for rel, size in files.items() if _hashed(rel, size)}
    (folder / MARKER).write_text(json.dumps({"written_by": "medanon", "kind": kind, "version": __version__,
                                             "files": files, "sha256": digests}, sort_keys=True) + "\n",
                                 encoding="utf-8")


def _release_inventory(folder: Path) -> dict[str, int] | None:
    """A release's own files from its manifest and ``labels.csv`` (releases of earlier versions have no marker)."""
    files: dict[str, int] = {"manifest.json": -1, "labels.csv": -1}
    try:
        with open(folder / "labels.csv", encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                files[str(row.get("image", ""))] = -1
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return files


def folder_kind(folder: str | os.PathLike) -> str | None:
    """The kind of medanon output ``folder`` is (``release``, ``phantom``, ``run``, ``report``, ...), or None."""
    folder = Path(folder)
    marker = _json(folder / MARKER)
    if isinstance(marker, dict) and marker.get("written_by") == "medanon":
        return str(marker.get("kind") or "folder")
    man = _json(folder / "manifest.json")
    if isinstance(man, dict) and man.get("format") == "medanon-release":
        return "release"
    if isinstance(man, dict) and "medanon" in (man.get("software") or {}):
        return "run" if (folder / "config.yaml").is_file() else "report"
    if isinstance(_json(folder / "phantom.json"), dict):
        return "phantom"
    if (folder / "checkpoint.pt").is_file() and file_kind(folder / "checkpoint.pt") == "checkpoint":
        return "run"
    return None


def written_files(folder: str | os.PathLike) -> dict[str, int] | None:
    """The files medanon wrote in ``folder`` (relative path -> size, -1 where the size was not recorded), or None
    where it cannot say (not medanon's, or an output of an earlier version that did not list its files)."""
    folder = Path(folder)
    marker = _json(folder / MARKER)
    if isinstance(marker, dict) and isinstance(marker.get("files"), dict):
        return {MARKER: -1, **{str(k): int(v) for k, v in marker["files"].items()}}
    if folder_kind(folder) == "release":
        inv = _release_inventory(folder)
        return None if inv is None else ({MARKER: -1, **inv} if (folder / MARKER).exists() else inv)
    return None


def foreign_files(folder: str | os.PathLike) -> list[str] | None:
    """Files in ``folder`` that medanon did not write there (or that changed size since), sorted; None when
    medanon cannot say what it wrote there."""
    from medanon.fsutil import sha256_file

    listed = written_files(folder)
    if listed is None:
        return None
    marker = _json(Path(folder) / MARKER)
    digests = marker.get("sha256") if isinstance(marker, dict) and isinstance(marker.get("sha256"), dict) else {}
    return sorted(rel for rel, size in _files_under(Path(folder)).items()
                  if rel not in listed or (listed[rel] >= 0 and size != listed[rel])
                  or (rel in digests and sha256_file(Path(folder) / rel) != digests[rel]))


def checkpoint_kind(path: str | os.PathLike) -> str | None:
    """The ``kind`` a medanon checkpoint file records (``classifier``, ``identity``, ``stylegan2``, ...), or None."""
    path = Path(path)
    if not path.is_file() or not zipfile.is_zipfile(path):
        return None
    from medanon.checkpoint import FORMAT

    try:
        import torch

        blob = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:                                  # any unreadable or unsafe file is not ours
        return None
    ok = isinstance(blob, dict) and blob.get("format") == FORMAT
    return str(blob.get("kind")) if ok else None


def run_command(folder: str | os.PathLike) -> str | None:
    """The command whose run wrote ``folder`` (its manifest's ``command``, without a leading ``medanon``), or None."""
    man = _json(Path(folder) / "manifest.json")
    command = man.get("command") if isinstance(man, dict) else None
    return normalise_command(command) if isinstance(command, str) else None


def normalise_command(command: str) -> str:
    """``medanon train gan`` and ``train gan`` name one command."""
    words = command.split()
    return " ".join(words[1:] if words[:1] == ["medanon"] else words)


def file_kind(path: str | os.PathLike) -> str | None:
    """``mapping``, ``splits`` or ``checkpoint`` for a file medanon wrote, None for anything else."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        blob = _json(path)
        ok = isinstance(blob, dict) and (blob.get("format") == MAPPING_FORMAT
                                         or {"release", "method", "records"} <= set(blob))
        return "mapping" if ok else None
    if path.suffix.lower() == ".csv":
        return "splits" if _splits_header(path) else None
    if checkpoint_kind(path) is not None:
        return "checkpoint"
    return "splits" if _splits_header(path) else None      # a splits file written under another name (--out sp.txt)


def _splits_header(path: Path) -> bool:
    """Whether the file's first line is a splits file's header (read from at most its first 4 KiB)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", errors="replace").split("\n", 1)[0]   # a cut character: later
        return next(csv.reader(io.StringIO(head)), None) in SPLITS_HEADERS
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
