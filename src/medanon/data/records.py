"""The record: one image file of one patient, with its labels, as every layout reader returns it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path


def make_record_id(relative_path: str) -> str:
    """Opaque, stable id for an image, derived from its path relative to the dataset root.

    It does not contain the file name, so it can be logged and used as a resume key; it is still
    an identifier of the source and never appears in a release (the release audit checks this).
    """
    digest = hashlib.sha256(("medanon-record:" + relative_path.replace("\\", "/")).encode()).hexdigest()
    return "r" + digest[:16]


@dataclass(frozen=True)
class Record:
    path: Path                                  # absolute path of the image file
    patient_id: str                             # stable patient identifier from the source (never released)
    labels: dict[str, float] = field(default_factory=dict)  # canonical labels, nan = missing
    record_id: str = ""                         # opaque id, see make_record_id
    mask_path: Path | None = None               # optional segmentation mask (phantom vessel / lung masks)
    patient_known: bool = True                  # False: the source has no patient ids, patient_id names the image


@dataclass(frozen=True)
class Problem:
    """Something wrong with one input file, found while scanning a dataset."""

    path: str                                   # the file concerned (or the CSV row)
    kind: str                                   # missing | unlabelled | unreadable | denied | channels | label | size
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.kind}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Scan:
    """What a layout reader found: usable records and per-file problems (not yet raised)."""

    layout: str
    root: Path
    records: list[Record]
    problems: list[Problem] = field(default_factory=list)
    modality: str | None = None                 # "fundus" | "xray" if the layout implies it
    allowed_roots: list[Path] = field(default_factory=list)  # folders besides root the user named (images_dir)
    files: list[Path] = field(default_factory=list)          # the labels and descriptor files read
    declared: list[Path] = field(default_factory=list)       # files a descriptor (dataset.yaml) names: inside only


def records_digest(records) -> str:
    """One sha256 over each record's id, patient id and labels (not its image)."""
    import hashlib
    import json

    h = hashlib.sha256()
    for r in records:
        labels = {k: (None if v != v else v) for k, v in sorted(r.labels.items())}      # nan -> null
        h.update(json.dumps([r.record_id, r.patient_id, labels], default=str).encode() + b"\n")
    return h.hexdigest()
