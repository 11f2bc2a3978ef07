"""Writing a release folder, resumably and atomically.

::

    RELEASE/
      images/3f9c0a6d1b2e4f57.png   random names: nothing links a file to its sources
      labels.csv                     image, n_sources, n_people, labels (aggregated), <label>_counts
      manifest.json                  method, params, privacy statement, seeds, models, counts, label rule

While a release is being written it lives in ``RELEASE.partial/`` next to its final place, with a
private journal (``.journal.jsonl``) of what each record stands for. A run that is interrupted
resumes from the journal (records already written are not redone); when the writer closes, the
journal is turned into the optional private mapping file and removed, and the folder is renamed
into place. Rows of ``labels.csv`` are sorted by the random names, so their order says nothing
about clusters or sources either.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import math
import secrets
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from medanon.data.records import Record
from medanon.errors import ConfigError, DataError, OutputExistsError
from medanon.fsutil import atomic_write_bytes, atomic_write_text
from medanon.release.aggregate import RULE, aggregate_labels
from medanon.runtime import software_versions

FORMAT = "medanon-release"
VERSION = 1
JOURNAL = ".journal.jsonl"


def image_to_uint8(image: torch.Tensor | np.ndarray) -> np.ndarray:
    """(C, H, W) float in [-1, 1] -> (H, W) or (H, W, 3) uint8, as written to PNG."""
    a = image.detach().cpu().float().numpy() if isinstance(image, torch.Tensor) else np.asarray(image, np.float32)
    if a.ndim != 3 or a.shape[0] not in (1, 3):
        raise ValueError(f"release images must be (C, H, W) with C = 1 or 3, got shape {a.shape}")
    a = np.clip(np.rint((a + 1.0) * 127.5), 0, 255).astype(np.uint8)
    return a[0] if a.shape[0] == 1 else np.transpose(a, (1, 2, 0))


def _png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")   # no text chunks, no EXIF: nothing but pixels
    return buf.getvalue()


class ReleaseWriter:
    """Collects released records and writes the release folder.

    Use as a context manager; on a clean exit the release is finalised, on an exception the
    partial folder is kept so that the next run with ``resume=True`` continues where it stopped.

    ``labels`` names the labels released (aggregated over each record's sources); anything not
    named stays private. ``mapping`` is a path *outside* the release for the private
    record -> sources mapping (written only if given).
    """

    def __init__(self, out: str | Path, *,
                 method: str,                                    # e.g. "ksalsa", "dpglow", "snow"
                 params: Mapping[str, Any],                      # method parameters (k, lambda, epsilon, p, ...)
                 privacy: Mapping[str, Any],                     # exact privacy statement (see each method)
                 labels: Sequence[str],                          # labels to release
                 seeds: Mapping[str, int] | None = None,         # every seed used
                 models: Mapping[str, str] | None = None,        # model name -> checkpoint sha256
                 source: Mapping[str, Any] | None = None,        # source digest (files, sha256), never paths
                 phantom: bool = False,                          # the source is a medanon phantom
                 mapping: str | Path | None = None,              # private mapping file (outside the release)
                 overwrite: bool = False,
                 resume: bool = True):
        self.out = Path(out)
        self.partial = self.out.with_name(self.out.name + ".partial")
        self.mapping = Path(mapping) if mapping else None
        if self.mapping is not None:
            m, o = self.mapping.resolve(), self.out.resolve()
            if m == o or o in m.parents:
                raise ConfigError(f"the mapping file {self.mapping} would be inside the release {self.out}",
                                  fix="write the private mapping outside the release folder")
        if self.out.exists() and not overwrite:
            raise OutputExistsError(f"release {self.out} already exists",
                                    fix="choose another --out, or pass --overwrite to replace it")
        self.settings = {"method": method, "params": dict(params), "labels": list(labels)}
        self.privacy = dict(privacy)
        self.seeds = dict(seeds or {})
        self.models = dict(models or {})
        self.source = dict(source or {})
        self.phantom = phantom
        self.entries: dict[str, dict[str, Any]] = {}
        if self.partial.exists() and resume:
            self._load_journal()
        else:
            if self.partial.exists():
                shutil.rmtree(self.partial)
            (self.partial / "images").mkdir(parents=True)
            atomic_write_text(self.partial / JOURNAL, json.dumps({"settings": self.settings}) + "\n")

    # ------------------------------------------------------------------------------------------------ resume

    def _load_journal(self) -> None:
        lines = (self.partial / JOURNAL).read_text(encoding="utf-8").splitlines()
        head = json.loads(lines[0]) if lines else {}
        if head.get("settings") != json.loads(json.dumps(self.settings)):
            raise ConfigError(f"{self.partial} holds an interrupted release with other settings "
                              f"({head.get('settings')})",
                              fix=f"rerun with the same settings to resume, or delete {self.partial}")
        for line in lines[1:]:
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                break                                    # a torn last line: that record is redone
            if (self.partial / "images" / e["name"]).exists():
                self.entries[e["key"]] = e

    def done(self, key: str) -> bool:
        """Whether the record ``key`` was already written (by this or an interrupted run)."""
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    # ------------------------------------------------------------------------------------------------ write

    def add(self, key: str, image: torch.Tensor | np.ndarray, sources: Sequence[Record]) -> str:
        """Write one released image standing for ``sources``; returns its random file name.

        ``key`` identifies the record for resuming (e.g. a cluster index); it is kept only in the
        private journal.
        """
        if key in self.entries:
            raise ValueError(f"release record {key!r} was already written")
        if not sources:
            raise ValueError("a released record must stand for at least one source")
        name = secrets.token_hex(8) + ".png"
        atomic_write_bytes(self.partial / "images" / name, _png(image_to_uint8(image)))
        entry = {
            "key": key, "name": name,
            "sources": [r.record_id for r in sources],
            "patients": sorted({r.patient_id for r in sources}),
            "labels": aggregate_labels([r.labels for r in sources], self.settings["labels"]),
        }
        with open(self.partial / JOURNAL, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, default=_json_default) + "\n")
            f.flush()
        self.entries[key] = entry
        return name

    def close(self) -> Path:
        """Write ``labels.csv`` and ``manifest.json``, the mapping if asked, and move into place."""
        if not self.entries:
            raise DataError(f"release {self.out} has no records", fix="check the input data and method settings")
        rows = sorted(self.entries.values(), key=lambda e: e["name"])
        label_cols = [c for c in rows[0]["labels"]]
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["image", "n_sources", "n_people", *label_cols])
        for e in rows:
            w.writerow([f"images/{e['name']}", len(e["sources"]), len(e["patients"]),
                        *[_cell(e["labels"][c]) for c in label_cols]])
        atomic_write_text(self.partial / "labels.csv", buf.getvalue())
        people = [len(e["patients"]) for e in rows]
        manifest = {
            "format": FORMAT, "version": VERSION,
            **self.settings,
            "privacy": self.privacy,
            "label_rule": RULE,
            "seeds": self.seeds, "models": self.models, "source": self.source,
            "phantom": self.phantom,
            "counts": {"records": len(rows), "sources": sum(len(e["sources"]) for e in rows),
                       "people": len({p for e in rows for p in e["patients"]}),
                       "min_people_per_record": min(people), "max_people_per_record": max(people)},
            "software": software_versions(),
            "created": _dt.datetime.now(_dt.UTC).date().isoformat(),
        }
        atomic_write_text(self.partial / "manifest.json", json.dumps(manifest, indent=2, default=_json_default) + "\n")
        if self.mapping is not None:
            mapping = {"release": self.out.name, "method": self.settings["method"],
                       "records": {f"images/{e['name']}": {"sources": e["sources"], "patients": e["patients"]}
                                   for e in rows}}
            atomic_write_text(self.mapping, json.dumps(mapping, indent=1) + "\n")
        (self.partial / JOURNAL).unlink()
        if self.out.exists():
            shutil.rmtree(self.out)
        self.partial.rename(self.out)
        return self.out

    def __enter__(self) -> ReleaseWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()


def _cell(v: object) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:g}"
    return str(v)


def _json_default(o: object) -> object:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_release(path: str | Path) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The manifest and the ``labels.csv`` rows of a release (what evaluation reads)."""
    path = Path(path)
    man = path / "manifest.json"
    if not man.is_file():
        raise DataError(f"{path} is not a medanon release: manifest.json is missing",
                        fix="pass a folder written by `medanon anonymize`")
    manifest = json.loads(man.read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT:
        raise DataError(f"{man} is not a medanon release manifest")
    with open(path / "labels.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return manifest, rows
