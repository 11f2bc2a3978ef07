"""A release's private mapping file (record -> sources and patients), as the audit and the evaluation read it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medanon.errors import DataError
from medanon.fsutil import read_json_object


def read_mapping(path: str | Path) -> dict[str, Any]:
    """A release's private mapping file (what ``mapping=`` of ``Release.save`` writes): its object, with a
    ``records`` object (record -> sources and patients), or a DataError naming the file."""
    fix = "pass the private mapping file written together with this release"
    data = read_json_object(path, what="a medanon release mapping", fix=fix)
    if not isinstance(data.get("records"), dict):
        raise DataError(f"{path} is not a medanon release mapping: it has no records", fix=fix)
    for name, rec in data["records"].items():
        ok = isinstance(rec, dict) and all(isinstance(rec.get(k), list) and all(isinstance(v, str) for v in rec[k])
                                           for k in ("sources", "patients"))
        if not ok:
            raise DataError(f"{path}: record {name} is not what a mapping holds (each record needs lists of source "
                            f"ids and patient ids, 'sources' and 'patients'; it has {str(rec)[:120]})",
                            files=[str(path)], fix=fix + ", unedited")
    return data


def mapping_source_mismatch(mapping: dict[str, Any], records: Sequence[Any], *, root: Path | None,
                            modality: str | None) -> str | None:
    """Why the source images a mapping names (``records``: the dataset's records it names as sources, in the
    dataset's order) are not those the release was made from, or None: another modality, or, where the mapping
    names all of its sources, other file contents (when it digests them by content) or other patient ids or labels
    (a ``labels.csv`` edited since: the release's labels and people counts were aggregated from the old one)."""
    from medanon.data.records import records_digest
    from medanon.runtime import files_digest

    src = mapping.get("source") or {}
    if src.get("modality") and modality and src["modality"] != modality:
        return f"the release was made from {src['modality']} images, the dataset given holds {modality} images"
    if src.get("mode") == "content" and src.get("sha256") and src.get("files") == len(records) and root is not None:
        now = files_digest([r.path for r in records], root=root)
        if now["mode"] == "content" and now["sha256"] != src["sha256"]:
            return ("the source images it names differ from those the release was made from (content sha256 "
                    f"{now['sha256'][:12]}, made from {src['sha256'][:12]})")
    if src.get("records_sha256") and src.get("files") == len(records) and \
            records_digest(records) != src["records_sha256"]:
        return ("the patient ids or labels of the source images it names differ from those the release was made "
                "from (their labels file was edited since, or the dataset is read with other label columns): the "
                "release's labels and people counts were computed from the old ones")
    return None

