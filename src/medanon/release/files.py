"""The files of a release folder: one record's image and private journal line, ``labels.csv``, ``manifest.json``
and the private mapping, and reading a finished release back. :mod:`medanon.release.writer` decides when each is
written (resumably, atomically, into ``RELEASE.partial/``); this module decides what each holds.

- ``images/<16 hex>.png``: 8-bit PNG of pixels only (no text chunks, no EXIF) under a secret random name;
- ``labels.csv``: ``image, n_sources, n_people`` and the aggregated labels, rows sorted by the random names;
- ``manifest.json``: format, version, settings, privacy statement, label rule, seeds, models, counts, the
  records' quality where the method records it (DP-GLOW: how many were decoded by its fallback), software, date
  (the release date, never a time);
- the mapping (private, ``0600`` when written by the writer): each record's source record and patient ids.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import math
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from medanon.data.imageio import image_to_uint8
from medanon.data.records import Record
from medanon.errors import ConfigError, DataError
from medanon.fsutil import atomic_write_bytes, read_json_object
from medanon.outputs import MAPPING_FORMAT
from medanon.release.aggregate import RULE, aggregate_labels
from medanon.runtime import software_versions

FORMAT = "medanon-release"
VERSION = 1


def _png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")   # no text chunks, no EXIF: nothing but pixels
    return buf.getvalue()


def png_to_float(path: Path) -> np.ndarray:
    """A release PNG as (C, H, W) float32 in [-1, 1] (a grey image as one channel; any other mode as RGB)."""
    with Image.open(path) as im:
        a = np.asarray(im if im.mode in ("L", "RGB") else im.convert("RGB"), dtype=np.float32) / 127.5 - 1.0
    return a[None] if a.ndim == 2 else np.ascontiguousarray(a.transpose(2, 0, 1))


def write_record(partial: Path, journal: str, key: str, image: torch.Tensor | np.ndarray, sources: Sequence[Record],
                 labels: Sequence[str], *, quality: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write one record into the partial folder ``partial``: its image under a secret random name (atomically),
    then its line in the private journal ``journal`` (with ``quality``, how the record was computed, if given).
    Returns the journal entry."""
    if not sources:
        raise ValueError("a released record must stand for at least one source")
    finite = torch.isfinite(image).all() if isinstance(image, torch.Tensor) else np.isfinite(np.asarray(image)).all()
    if not finite:                                  # cast to 8 bits, NaN would become a black image, silently
        raise ConfigError(f"the image of release record {key!r} holds NaN or infinite values: the method diverged "
                          "(e.g. a learning rate too large), and such an image is not released",
                          fix="rerun with other settings (records written before it, if any, are kept in the "
                              ".partial folder for a resume with the same settings; delete it to start over with "
                              "others)")
    name = secrets.token_hex(8) + ".png"
    atomic_write_bytes(partial / "images" / name, _png(image_to_uint8(image)))
    entry = {
        "key": key, "name": name,
        "sources": [r.record_id for r in sources],
        "patients": sorted({r.patient_id for r in sources}),
        "labels": aggregate_labels(list(sources), list(labels)),                  # per patient
        **({"quality": dict(quality)} if quality is not None else {}),
    }
    with open(partial / journal, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, default=_json_default) + "\n")
        f.flush()
    return entry


def labels_csv(rows: Sequence[dict[str, Any]]) -> str:
    """``labels.csv`` of journal entries ``rows`` (already in the file's order): one line per record."""
    label_cols = list(rows[0]["labels"])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    from medanon.release.labels import RESERVED_COLUMNS

    w.writerow([*RESERVED_COLUMNS, *label_cols])
    for e in rows:
        w.writerow([f"images/{e['name']}", len(e["sources"]), len(e["patients"]),
                    *[_cell(e["labels"][c]) for c in label_cols]])
    return buf.getvalue()


def manifest_json(rows: Sequence[dict[str, Any]], *, settings: dict[str, Any], source: dict[str, Any],
                  privacy: dict[str, Any], seeds: dict[str, Any], models: dict[str, Any], phantom: bool) -> str:
    """``manifest.json`` of a release whose journal entries are ``rows``: its ``settings`` (method, params, labels),
    the source's modality (never its digest: that fingerprints the private data), the privacy statement and the
    counts."""
    people = [len(e["patients"]) for e in rows]
    manifest = {
        "format": FORMAT, "version": VERSION,
        **settings,
        **({"modality": source["modality"]} if source.get("modality") else {}),   # of the source
        "privacy": privacy,
        "label_rule": RULE,
        "seeds": seeds, "models": models,
        "phantom": phantom,
        "counts": {"records": len(rows),
                   "sources": len({s for e in rows for s in e["sources"]}),     # distinct: views repeat them
                   **({"people": len({p for e in rows for p in e["patients"]})} if source.get("patients_known", True)
                      else {"people": None, "people_unknown": "the source has no patient ids: one person may have "
                                                              "several of the images, so the number of people is "
                                                              "not known"}),
                   "min_people_per_record": min(people), "max_people_per_record": max(people)},
        **quality_json(rows),
        "software": software_versions(),
        "created": _dt.datetime.now(_dt.UTC).date().isoformat(),
    }
    return json.dumps(manifest, indent=2, default=_json_default) + "\n"


DIVERGED_WHAT = ("images decoded from a latent shrunk towards the prior's mode because the inverse flow diverged on "
                 "their privatised latent (post-processing of that latent, which leaves the privacy statement as it "
                 "is); they may look averaged")


def quality_json(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The manifest's ``quality``: how many records the journal ``rows`` say were decoded by DP-GLOW's fallback
    (``{"diverged": N, ...}``, 0 when none was), or nothing where no record says (a method without a flow).
    Records of a run that did not say (an interrupted release started by an earlier version) are counted apart."""
    said = [bool(e["quality"]["diverged"]) for e in rows if "diverged" in (e.get("quality") or {})]
    if not said:
        return {}
    quality: dict[str, Any] = {"diverged": sum(said), "diverged_what": DIVERGED_WHAT}
    if len(said) < len(rows):
        quality["diverged_unknown"] = len(rows) - len(said)
    return {"quality": quality}


def mapping_json(rows: Sequence[dict[str, Any]], *, release: str, method: str, source: dict[str, Any]) -> str:
    """The private mapping of release folder ``release``: each record's sources and patients, and the source
    digest (which ties it to the private dataset)."""
    mapping = {"format": MAPPING_FORMAT, "release": release, "method": method, "source": source,
               "records": {f"images/{e['name']}": {"sources": e["sources"], "patients": e["patients"]}
                           for e in rows}}
    return json.dumps(mapping, indent=1, default=_json_default) + "\n"


def _cell(v: object) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:g}"
    return str(v)


def _json_default(o: object) -> object:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_release(path: str | Path) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The manifest and the ``labels.csv`` rows of a release (what evaluation reads)."""
    path = Path(path)
    man = path / "manifest.json"
    if not man.is_file():
        raise DataError(f"{path} is not a medanon release: manifest.json is missing",
                        fix="pass a folder written by `medanon anonymize`")
    manifest = read_json_object(man, what="a medanon release manifest",
                                fix="pass a folder written by `medanon anonymize`, unchanged")
    if manifest.get("format") != FORMAT:
        raise DataError(f"{man} is not a medanon release manifest")
    with open(path / "labels.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return manifest, rows
