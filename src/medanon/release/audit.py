"""Auditing a release: does every record stand for at least k people, and does any source
identifier (file name, record id, patient id) appear anywhere in it?

Places searched: every path inside the release folder, ``labels.csv``, ``manifest.json`` and any
other text file, and the metadata of every image (PNG text chunks, EXIF); every PNG is read byte by byte and
may hold only the chunks medanon writes (IHDR, IDAT, IEND) and nothing after IEND. Identifiers are matched
case-insensitively against whole tokens (runs of letters, digits, ``_``, ``-`` and ``.``) and
against their parts split at ``_``, ``-`` and ``.`` (so ``img_P00001.png`` reveals ``P00001``). Purely
numeric identifiers shorter than :data:`MIN_NUMERIC_LEN` digits (EyePACS patient numbers, for
example) cannot be told apart from label values, so they are searched only in file names and
metadata, and the report says so.

Identifiers are compared after Unicode normalisation (NFC, case-folded): ``José`` is a token like
``Jose``; identifiers with spaces (a patient *name* used as id) are also searched as phrases. The names
of the folders that hold a source image are identifiers too when they carry a long number, as
MIMIC-CXR's ``p10000032/s50000320`` (patient and study) do.

The release's own form is checked: only the files a release has, only declared label columns in
``labels.csv`` (an undeclared ``patient_id`` column fails), every image a readable PNG without
metadata, and nothing that orders the files: one timestamp for all of them and, with the mapping and
the source, no rank correlation between the files' inode order and the sources' order.

What the audit does not do: judge whether the *pixels* identify someone. That is what the
attacks of the evaluation (membership, linkability, singling-out) measure.

Exit codes of ``medanon audit``: 0 every check passed, 1 a check failed, 3 the audit could not run.
"""

from __future__ import annotations

import csv
import json
import os
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from medanon.errors import ConfigError, DataError
from medanon.fsutil import read_json_object
from medanon.outputs import MARKER
from medanon.release.audit_budget import check_patient_budget
from medanon.release.audit_clusters import check_clusters
from medanon.release.audit_content import KpixelAverages
from medanon.release.audit_noise import measured
from medanon.release.audit_source import (
    check_copied_files,
    check_preprocessed_copies,
    check_source_counts,
)
from medanon.release.audit_statement import check_statement_numbers, stated_k
from medanon.release.files import FORMAT
from medanon.release.labels import RESERVED_COLUMNS
from medanon.release.mapping import mapping_source_mismatch, read_mapping

MIN_NUMERIC_LEN = 5
NAME_PATTERN = re.compile(r"^[0-9a-f]{16}\.png$")
_TOKEN = re.compile(r"[\w.\-]+")
_PARTS = re.compile(r"[_.\-]")
_LONG_NUMBER = re.compile(rf"\d{{{MIN_NUMERIC_LEN},}}")
_ALLOWED_TOP = {"images", "labels.csv", "manifest.json", "README.md", MARKER}
# inode order vs source order: fail below this Spearman p-value. The writer copies files in a secret random order,
# so for a correct release p is uniform: at 1e-3 one audit in 1,000 failed by chance, and the demo's test
# (about 25 audits a run) failed about once in 40 runs (once seen: vs-snow, rho 0.45, p 4.8e-4, n 56).
# A writer that copies in source order gives rho = 1 (p ~ 1e-173 at the planted-leak test's 24 records); at 1e-6
# the check fails releases with |rho| >= 0.98 at 10 records, 0.82 at 24, 0.61 at 56 (scipy's t approximation).
ORDER_P_VALUE = 1e-6


def _norm(s: str) -> str:
    return unicodedata.normalize("NFC", str(s)).casefold()


@dataclass
class Check:
    name: str
    passed: bool
    detail: str = ""


@dataclass
class AuditReport:
    release: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    complete: bool = True                                # False: the folder could not be audited at all

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def add(self, name: str, passed: bool, detail: str = "") -> None:
        self.checks.append(Check(name, passed, detail))

    def to_dict(self) -> dict[str, Any]:
        return {"release": self.release, "passed": self.passed, "complete": self.complete,
                "checks": [c.__dict__ for c in self.checks], "notes": self.notes}

    def format(self) -> str:
        lines = [f"audit of {self.release}: {'PASSED' if self.passed else 'FAILED'}"]
        for c in self.checks:
            lines.append(f"  [{'ok' if c.passed else 'FAIL'}] {c.name}" + (f": {c.detail}" if c.detail else ""))
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass
class Identifiers:
    """Source identifiers to look for, by kind (lower-cased)."""

    file_names: set[str] = field(default_factory=set)    # names and stems of source image files
    record_ids: set[str] = field(default_factory=set)
    patient_ids: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)       # source folder names that carry a long number

    def kinds(self) -> Iterable[tuple[str, set[str]]]:
        yield "source file name", self.file_names
        yield "record id", self.record_ids
        yield "patient id", self.patient_ids
        yield "source folder name", self.folders


def identifiers_from_records(records) -> Identifiers:
    ids = Identifiers()
    for r in records:
        ids.file_names.update({_norm(r.path.name), _norm(r.path.stem)})
        ids.record_ids.add(_norm(r.record_id))
        ids.patient_ids.add(_norm(r.patient_id))
        ids.folders.update(_norm(d) for d in r.path.parent.parts[-4:] if _LONG_NUMBER.search(d))
    return ids


def _short_numeric(s: str) -> bool:
    return s.isdigit() and len(s) < MIN_NUMERIC_LEN


def _image_metadata(path: Path) -> dict[str, str]:
    """Metadata of an image; ``{"unreadable": reason}`` for a file that is not a readable image."""
    try:
        with Image.open(path) as im:
            meta = {str(k): str(v) for k, v in (im.info or {}).items()
                    if k not in ("dpi", "gamma", "transparency")}
            exif = im.getexif()
            if exif:
                meta["exif"] = " ".join(str(v) for v in exif.values())
            if im.format != "PNG":
                meta["format"] = str(im.format)
    except (OSError, SyntaxError, ValueError) as e:   # PIL raises these for non-images and corrupt files
        return {"unreadable": f"{type(e).__name__}: {e}"}
    return meta


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_CHUNKS = ("IHDR", "IDAT", "IEND")                  # all the release writer's PNGs hold


def png_problem(path: Path) -> str | None:
    """What, byte by byte, makes ``path`` more than the PNG medanon writes: a chunk other than IHDR, IDAT and
    IEND (a text, EXIF or private chunk can hold anything, e.g. a patient id), a bad CRC, or bytes after IEND.
    None for a clean file.

    >>> import io, tempfile, pathlib, numpy as np
    >>> from PIL import Image
    >>> buf = io.BytesIO(); Image.fromarray(np.zeros((4, 4), np.uint8)).save(buf, format="PNG")
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "a.png"; _ = f.write_bytes(buf.getvalue())
    >>> png_problem(f) is None
    True
    >>> _ = f.write_bytes(buf.getvalue() + b"P00001")
    >>> png_problem(f)
    '6 bytes after IEND'
    """
    import zlib

    data = path.read_bytes()
    if not data.startswith(PNG_SIGNATURE):
        return "not a PNG (no PNG signature)"
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        ctype = data[pos + 4:pos + 8]
        end = pos + 12 + length
        if end > len(data):
            return f"chunk {ctype!r} runs past the end of the file"
        name = ctype.decode("latin-1")
        if name not in PNG_CHUNKS:
            return f"chunk {name!r} (medanon writes only {', '.join(PNG_CHUNKS)})"
        if zlib.crc32(data[pos + 4:pos + 8 + length]) != int.from_bytes(data[end - 4:end], "big"):
            return f"chunk {name!r} has a wrong CRC"
        pos = end
        if name == "IEND":
            return None if pos == len(data) else f"{len(data) - pos} bytes after IEND"
    return "no IEND chunk"


def audit_release(release: str | Path, *, k: int | None = None, mapping: str | Path | None = None,
                  source_records=None, source_root: Path | None = None, source_modality: str | None = None
                  ) -> AuditReport:
    """Run every check. ``source_records`` (from :func:`medanon.data.layouts.scan`) enables the
    identifier search and the recount of people per record from the mapping; with ``source_root`` and
    ``source_modality`` (the scan's) the mapping's sources are checked to be the release's own (modality and, where
    the mapping digests them by content, their files)."""
    from medanon.locks import refuse_while_written, release_state, writer_of

    release = Path(release)
    refuse_while_written(release)               # a release being written or replaced now: its files change
    if mapping is not None:
        refuse_while_written(mapping, what="mapping")
    state = release_state(release, mapping)     # compared at the end: readers take no lock
    rep = AuditReport(str(release))
    man_path, csv_path = release / "manifest.json", release / "labels.csv"
    if not man_path.is_file() or not csv_path.is_file():
        rep.add("structure", False, "manifest.json or labels.csv is missing: not a medanon release")
        rep.complete = False
        return rep
    manifest = read_json_object(man_path, what="a medanon release manifest",
                                fix="pass a folder written by `medanon anonymize`, unchanged")
    with open(csv_path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    images = sorted(p for p in (release / "images").rglob("*") if p.is_file()) if (release / "images").is_dir() else []
    listed = {r.get("image", "") for r in rows}
    on_disk = {str(p.relative_to(release)) for p in images}
    extra_top = sorted(p.name for p in release.iterdir() if p.name not in _ALLOWED_TOP)
    ok = manifest.get("format") == FORMAT and listed == on_disk and not extra_top
    rep.add("structure", ok, f"{len(rows)} records, {len(images)} images"
            + (f"; unlisted files {sorted(on_disk - listed)[:5]}" if on_disk - listed else "")
            + (f"; missing images {sorted(listed - on_disk)[:5]}" if listed - on_disk else "")
            + (f"; unexpected entries {extra_top[:5]}" if extra_top else ""))

    bad_names = [p.name for p in images if not NAME_PATTERN.match(p.name)]
    rep.add("random file names", not bad_names,
            f"{len(bad_names)} names not of the form <16 hex>.png: {bad_names[:5]}" if bad_names else "")
    _check_columns(rep, manifest, rows)
    _check_timestamps(rep, release)

    # k: from the argument, else the method's own k (the statement's, where it was changed to claim more)
    check_statement_numbers(rep, manifest)
    noise, unmeasured = measured(manifest)      # LDP-image: its noise against the stated epsilon (with the mapping)
    k = k if k is not None else stated_k(manifest, _whole(manifest.get("params", {}).get("k"), f"{man_path}: params.k"))
    people = [_whole(r.get("n_people", 0) or 0, f"{csv_path} row {i + 2}: n_people")
              for i, r in enumerate(rows)]
    if k is not None:
        low = sum(p < k for p in people)
        rep.add(f"every record stands for >= {k} people (labels.csv)", low == 0 and bool(rows),
                f"min {min(people) if people else 0}" + (f", {low} records below k" if low else ""))
    else:
        rep.notes.append("no k given and the method has none: per-record people counts not checked")

    made_from = manifest.get("modality")
    if source_modality is not None and made_from:
        rep.add("the source given is of the release's modality (manifest)", made_from == source_modality,
                "" if made_from == source_modality else f"made from {made_from} images, the source given holds "
                                                       f"{source_modality} images")
        if made_from != source_modality:        # not the release's dataset: nothing compared with it means anything
            rep.complete = False
    elif source_records is not None and made_from:
        rep.notes.append(f"the source's modality is not known from its layout: not compared with the release's "
                         f"({made_from})")
    if mapping is not None:
        _check_mapping(rep, Path(mapping), rows, k, source_records, source_root, source_modality,
                       method=manifest.get("method"), privacy=manifest.get("privacy"),
                       views=_whole(((manifest.get("params") or {}).get("augmentation") or {}).get("views", 1) or 1,
                                    f"{man_path}: params.augmentation.views"))
        if source_records is not None:
            privacy = manifest.get("privacy") or {}
            eps = privacy.get("epsilon_image")
            recs = read_mapping(mapping)["records"]
            # kpixel is the one method whose records the audit can recompute, from the sources the copy check reads
            averages = KpixelAverages(eye_sides=(manifest.get("params") or {}).get("eye_sides") or "off") \
                if manifest.get("method") == "kpixel" else None
            if unmeasured:
                rep.notes.append(unmeasured)
            collector = averages or noise
            check_preprocessed_copies(rep, release, recs, source_records, source_modality or made_from,
                                      people={r.get("image", ""): n for r, n in zip(rows, people, strict=True)},
                                      image_dp=isinstance(eps, int | float) and not privacy.get("vacuous"),
                                      says_vacuous=bool(privacy.get("vacuous")
                                                        or (privacy.get("without_guarantee") or {}).get("vacuous")),
                                      crop=(manifest.get("params") or {}).get("crop"),
                                      each_record=collector.add if collector is not None else None)
            if collector is not None:
                collector.report(rep, records=len(recs))
    elif source_records is not None:
        check_source_counts(rep, manifest, source_records)
    if (mapping is None or source_records is None) and noise is not None:
        rep.notes.append("the LDP noise was not measured against the stated epsilon: that needs the source and the "
                         "mapping (each record's source), so only the statement's own numbers were compared")

    if source_records is not None:
        _check_identifiers(rep, release, identifiers_from_records(source_records))
        check_copied_files(rep, release, images, source_records)
    else:
        rep.notes.append("no source given: the release was not searched for source identifiers")

    metas = {str(p.relative_to(release)): _image_metadata(p) for p in images}
    unreadable = {k: m["unreadable"] for k, m in metas.items() if "unreadable" in m or "format" in m}
    rep.add("every image is a readable PNG", not unreadable,
            f"{len(unreadable)} are not, e.g. {next(iter(unreadable.items()))}" if unreadable else "")
    meta = {k: m for k, m in metas.items() if m and k not in unreadable}
    rep.add("no image metadata", not meta, f"{len(meta)} images carry metadata, e.g. {next(iter(meta.items()))}"
            if meta else "")
    chunks = {str(p.relative_to(release)): why for p in images
              if p.suffix.lower() == ".png" and (why := png_problem(p)) is not None}
    rep.add("every PNG holds only image chunks (IHDR, IDAT, IEND), nothing after IEND", not chunks,
            f"{len(chunks)} do not, e.g. {next(iter(chunks.items()))}" if chunks else "")
    if mapping is not None and source_records is not None:
        _check_order(rep, release, Path(mapping), source_records)
    same = (release_state(release, mapping) == state and writer_of(release) is None
            and (mapping is None or writer_of(mapping) is None))
    rep.add("the release was not changed while it was audited", same,
            "" if same else "another run replaced or rewrote it (or its mapping) meanwhile: these checks read two "
                            "versions of it; audit it again once nothing writes it")
    return rep


def _check_columns(rep: AuditReport, manifest: dict, rows: list[dict[str, str]]) -> None:
    declared = [str(x) for x in manifest.get("labels", [])]
    columns = list(rows[0]) if rows else []
    allowed = set(RESERVED_COLUMNS) | set(declared) | {f"{d}_counts" for d in declared}
    extra = [c for c in columns if c not in allowed]
    rep.add("labels.csv holds only the declared labels", not extra,
            f"undeclared columns {extra}" if extra else f"declared: {declared}")


def _check_timestamps(rep: AuditReport, release: Path) -> None:
    stamps = {int(os.stat(os.path.join(root, f)).st_mtime) for root, _, files in os.walk(release) for f in files}
    rep.add("one timestamp for every file", len(stamps) <= 1,
            f"{len(stamps)} different modification times: sorting by time may reveal the order the records were "
            "made in (the source order)" if len(stamps) > 1 else "")


def _check_order(rep: AuditReport, release: Path, mapping: Path, source_records) -> None:
    """Spearman correlation between the images' inode order and the order of their first source."""
    from scipy.stats import spearmanr

    recs = read_mapping(mapping)["records"]
    position = {r.record_id: i for i, r in enumerate(source_records)}
    pairs = []
    for img, v in recs.items():
        known = [position[s] for s in v.get("sources", []) if s in position]
        if known and (release / img).is_file():
            pairs.append((os.stat(release / img).st_ino, min(known)))
    if len(pairs) < 10:
        rep.notes.append(f"file order not tested: {len(pairs)} records with known sources (need 10)")
        return
    res = spearmanr([a for a, _ in pairs], [b for _, b in pairs])
    rep.add("file order says nothing about source order", not (res.pvalue < ORDER_P_VALUE),
            f"inode order vs source order: Spearman {res.statistic:.2f} (p = {res.pvalue:.2g}, n = {len(pairs)}; "
            f"fails below p = {ORDER_P_VALUE:g})")


def _whole(value, where: str) -> int | None:
    """A whole number of a release's files (``where``: the file and field), None for None; else a DataError that
    names them."""
    if value is None:
        return None
    try:
        if isinstance(value, bool) or float(value) != int(float(value)):
            raise ValueError
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{where} is {value!r}, not a whole number",
                        fix="pass a release folder written by `medanon anonymize`, unchanged") from None


def _check_mapping(rep: AuditReport, mapping: Path, rows, k, source_records, source_root=None,
                   source_modality=None, *, method: str | None = None, views: int = 1,
                   privacy: dict | None = None) -> None:
    data = read_mapping(mapping)
    recs = data["records"]
    listed = {r["image"] for r in rows}
    if listed and not set(recs) & listed:               # another release's mapping: an argument error, not a leak
        raise ConfigError(f"the mapping {mapping} is not this release's: it names none of its {len(listed)} records "
                          f"(it is the mapping of release {data.get('release', '?')!r})",
                          fix="give the mapping written with this release")
    rep.add("mapping covers the release", set(recs) == listed,
            f"{len(set(recs) ^ listed)} records differ" if set(recs) != listed else f"{len(recs)} records")
    counts = {img: len(set(v["patients"])) for img, v in recs.items()}
    by_id, unknown, why = {}, set(), None
    if source_records is not None:
        by_id = {r.record_id: r for r in source_records}
        named_ids = {s for v in recs.values() for s in v["sources"]}
        unknown = {s for s in named_ids if s not in by_id}
        if named_ids and unknown == named_ids:
            raise ConfigError(f"the source dataset given holds none of the {len(named_ids)} source images the mapping "
                              f"{mapping} names: it is not the dataset this release was made from",
                              fix="give the dataset the release was made from (and the same layout options)")
        rep.add("mapping sources exist in the source dataset", not unknown,
                f"{len(unknown)} unknown record ids" if unknown else "")
        if source_root is not None or source_modality is not None:
            why = mapping_source_mismatch(data, [r for r in source_records if r.record_id in named_ids],
                                          root=source_root, modality=source_modality)
            if why is not None:                         # the checks below would compare the release with others
                raise ConfigError(f"the source dataset given is not the one this release was made from: {why}",
                                  fix="give the dataset the release was made from, as it was then (and the same "
                                      "layout options)")
            if unknown:
                why = f"not confirmed: {len(unknown)} of the sources the mapping names are not in it"
            rep.add("the source given is the one the release was made from", why is None, why or "")
        if why is None and not unknown:                 # the people per record, recounted from the source's ids
            counts = {img: len({by_id[s].patient_id for s in v["sources"]}) for img, v in recs.items()}
            claimed = {r.get("image", ""): int(r.get("n_people", 0) or 0) for r in rows}   # read by audit_release
            wrong = [img for img, n in counts.items() if claimed.get(img) != n]
            rep.add("n_people matches the sources' patients", not wrong,
                    f"{len(wrong)} records claim another count" if wrong else "")
        else:
            rep.notes.append("the people per record are counted from the mapping's own patient ids: the source given "
                             "is not confirmed to be the release's")
    confirmed = source_records is not None and why is None and not unknown
    check_clusters(rep, recs, method=method, views=views,
                   patient_of=(lambda s: by_id[s].patient_id) if confirmed else None)
    check_patient_budget(rep, privacy, recs, patient_of=(lambda s: by_id[s].patient_id) if confirmed else None)
    if k is not None and counts:
        low = [img for img, n in counts.items() if n < k]
        rep.add(f"every record stands for >= {k} people (mapping)", not low,
                f"min {min(counts.values())}" + (f", {len(low)} below k" if low else ""))


def _check_identifiers(rep: AuditReport, release: Path, ids: Identifiers) -> None:
    texts: dict[str, str] = {}
    for p in sorted(release.rglob("*")):
        texts[f"path {p.relative_to(release)}"] = str(p.relative_to(release))
        if p.is_file() and p.suffix.lower() in (".csv", ".json", ".md", ".txt", ".yaml"):
            texts[f"file {p.relative_to(release)}"] = p.read_text(encoding="utf-8", errors="replace")
            if p.suffix.lower() == ".json":           # JSON escapes non-ASCII (\u00e9): search the decoded text too
                try:
                    texts[f"file {p.relative_to(release)} (decoded)"] = json.dumps(
                        json.loads(texts[f"file {p.relative_to(release)}"]), ensure_ascii=False)
                except ValueError:
                    pass
        elif p.is_file() and p.suffix.lower() in (".png", ".jpg", ".jpeg", ".tif", ".tiff"):
            for key, v in _image_metadata(p).items():
                texts[f"metadata {p.relative_to(release)}:{key}"] = v
    skipped_short = 0
    for kind, values in ids.kinds():
        found: list[str] = []
        loose = [v for v in values if v.strip() and not _TOKEN.fullmatch(v)]   # not one token: match as substrings
        for where, text in texts.items():
            numeric_ok = where.startswith(("path", "metadata"))
            low = _norm(text)
            tokens = set(_TOKEN.findall(low))
            tokens |= {t.rsplit(".", 1)[0] for t in tokens if "." in t}
            tokens |= {part for t in tokens for part in _PARTS.split(t) if part}
            hits = values & tokens
            hits |= {v for v in loose if v in low}                                  # "josé silva"
            for v in sorted(hits):
                if _short_numeric(v) and not numeric_ok:
                    continue
                found.append(f"{v!r} in {where}")
        skipped_short += sum(_short_numeric(v) for v in values)
        rep.add(f"no {kind} in the release", not found,
                f"{len(found)} found: {found[:5]}" if found else f"{len(values)} searched")
    if skipped_short:
        rep.notes.append(f"{skipped_short} short numeric identifiers were searched only in paths and image "
                         f"metadata (they cannot be told apart from label values in CSV/JSON)")
