"""Layout readers: list the images of a dataset folder with their labels and patient ids.

A *layout* is the way a public dataset (or medanon's own phantom writer) arranges its image files
and label tables on disk. :func:`scan` reads the label tables and the folder listings, never the
pixels, and returns a :class:`~medanon.data.records.Scan`:

* ``records``: the usable images, sorted by their path relative to the dataset root, each with its
  patient id, canonical labels (see :mod:`medanon.data.labels`) and an opaque ``record_id``;
* ``problems``: what is wrong with individual files, for the caller to raise or skip
  (``--skip-bad``). An image with a problem is never in ``records``. Kinds used here:

  ``missing``     a CSV row names an image (or mask) that is not on disk;
  ``unlabelled``  an image file in the layout's image folder(s) that no CSV row mentions;
  ``label``       a value that cannot be encoded, rows of the same image that disagree, or an
                  empty image / patient id cell (the detail names CSV, row and column);
  ``unreadable``  a DICOM header that cannot be parsed (RSNA, where sex/age/view come from it).

Structural errors (unknown layout, CSV or required column missing, unknown label column, bad
``dataset.yaml``) raise :class:`~medanon.errors.DataError` naming the file and the fix.

Only the standard ``csv`` module is used (``.csv.gz`` through ``gzip``); header cells are stripped of
whitespace and a byte-order mark, and column names match exactly or, failing that, ignoring case.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from medanon.data.labels import CHEXPERT_FINDINGS, LABELS, NAN, spec
from medanon.data.records import Problem, Record, Scan, make_record_id
from medanon.errors import DataError

__all__ = [
    "IMAGE_EXTENSIONS", "LAYOUTS", "GenericOptions", "LayoutWarning", "detect_layout", "scan",
]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".dcm")


@dataclass(frozen=True)
class GenericOptions:
    """The generic layout: ``--labels CSV --image-col --label-cols --patient-col [--images DIR]``."""

    labels_csv: Path
    image_col: str
    label_cols: tuple[str, ...] = ()   # each "canonical" or "canonical=csv_column": ("grade=level", "sex")
    patient_col: str | None = None     # if None, each image is its own patient (a LayoutWarning says so)
    images_dir: Path | None = None     # default: the CSV's folder; image cells are paths relative to it,
                                       # extension optional
    mask_col: str | None = None


LAYOUTS: dict[str, str] = {
    "medanon": "medanon's own format (the phantom writer's): dataset.yaml + labels.csv + images/ (+ masks/)",
    "aptos": "APTOS 2019 Blindness Detection: train.csv (id_code, diagnosis) + train_images/<id_code>.png",
    "eyepacs": "Kaggle EyePACS DR: trainLabels.csv (image, level) + train/<patient>_<left|right>.jpeg",
    "brset": "BRSET (PhysioNet): labels.csv with DR_ICDR, patient_sex, exam_eye + fundus_photos/<id>.jpg",
    "rsna": "RSNA Pneumonia stage 2: stage_2_train_labels.csv (patientId, Target) + stage_2_train_images/",
    "mimic": "MIMIC-CXR-JPG 2.x: files/pXX/pNNNNNNNN/sNNNNNNNN/<dicom_id>.jpg + metadata/chexpert CSVs (.gz)",
    "generic": "any folder described by --labels CSV --image-col NAME [--label-cols ...] [--patient-col]",
}


class LayoutWarning(UserWarning):
    """Something the user should know about a scan that is not an error (e.g. no patient ids)."""


_GENERIC_FIX = ("describe the folder with --layout generic --labels FILE.csv --image-col COLUMN "
                "[--label-cols grade=COLUMN ...] [--patient-col COLUMN]")


# --------------------------------------------------------------------------------------------
# CSV tables


@dataclass
class _Table:
    path: Path
    header: list[str]
    rows: list[tuple[int, list[str]]]          # (line number in the file, stripped cells)

    def col(self, name: str) -> int | None:
        """Index of a column: exact name first, then a unique case-insensitive match."""
        if name in self.header:
            return self.header.index(name)
        folded = [i for i, h in enumerate(self.header) if h.casefold() == name.casefold()]
        return folded[0] if len(folded) == 1 else None

    def require(self, name: str, *, fix: str) -> int:
        idx = self.col(name)
        if idx is None:
            raise DataError(f"{self.path.name} has no column {name!r}", files=[self.path],
                            fix=f"the CSV has columns {self.header}; {fix}")
        return idx

    @staticmethod
    def cell(row: list[str], idx: int | None) -> str:
        if idx is None or idx >= len(row):
            return ""
        return row[idx]


def _decode_bytes(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path.name} not found in {path.parent}", files=[path],
                        fix="check the dataset folder and --layout, or pass the CSV with --labels") from None
    except OSError as e:
        raise DataError(f"cannot read {path.name}: {e.strerror or e}", files=[path],
                        fix="check that the file exists and is readable") from None
    if path.name.lower().endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise DataError(f"{path.name} is not a valid gzip file ({e})", files=[path],
                            fix="download it again, or decompress it and keep the plain .csv") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Some exports are Latin-1 / Windows-1252; ids and numeric labels survive either way.
        return raw.decode("latin-1")


def _clean_header(cells: Iterable[str]) -> list[str]:
    return [c.replace("\ufeff", "").strip() for c in cells]


def _delimiter(first_line: str) -> str:
    if "," not in first_line:
        for d in (";", "\t"):
            if d in first_line:
                return d
    return ","


def _read_table(path: Path) -> _Table:
    text = _decode_bytes(path)
    delim = _delimiter(text.split("\n", 1)[0])
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delim)
    try:
        header: list[str] | None = None
        rows: list[tuple[int, list[str]]] = []
        for cells in reader:
            if header is None:
                header = _clean_header(cells)
                continue
            values = [c.strip() for c in cells]
            if any(values):
                rows.append((reader.line_num, values))
    except csv.Error as e:
        raise DataError(f"{path.name} is not a readable CSV (line {reader.line_num}: {e})", files=[path],
                        fix="save it as a comma-separated UTF-8 CSV with one header row") from None
    if not header or not any(header):
        raise DataError(f"{path.name} is empty (no header row)", files=[path],
                        fix="the first line of the CSV must name its columns")
    return _Table(path, header, rows)


def _read_header(path: Path) -> list[str]:
    """The header row only (used by layout detection); [] if the file cannot be read."""
    try:
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8-sig", errors="replace", newline="") as f:
            first = f.readline()
    except (OSError, EOFError):
        return []
    cells = next(csv.reader([first], delimiter=_delimiter(first)), [])
    return _clean_header(cells)


def _has_columns(path: Path, names: Iterable[str]) -> bool:
    """Whether a CSV's header has all ``names`` (ignoring case, as :meth:`_Table.col` does)."""
    header = {h.casefold() for h in _read_header(path)}
    return all(n.casefold() in header for n in names)


def _first_existing(root: Path, names: Sequence[str]) -> Path | None:
    for n in names:
        if (root / n).is_file():
            return root / n
    return None


# --------------------------------------------------------------------------------------------
# Folder listings (one os.scandir per folder, cached) and image resolution


def _ext(name: str) -> str:
    _, dot, ext = name.rpartition(".")
    return "." + ext.lower() if dot else ""


class _Dirs:
    def __init__(self) -> None:
        self._cache: dict[Path, tuple[set[str], dict[str, list[str]]]] = {}

    def _get(self, d: Path) -> tuple[set[str], dict[str, list[str]]]:
        got = self._cache.get(d)
        if got is None:
            names: set[str] = set()
            stems: dict[str, list[str]] = {}
            try:
                with os.scandir(d) as it:
                    for e in it:
                        try:
                            if not e.is_file():
                                continue
                        except OSError:
                            continue
                        names.add(e.name)
                        stem = e.name.rpartition(".")[0]
                        if stem and _ext(e.name) in IMAGE_EXTENSIONS:
                            stems.setdefault(stem, []).append(e.name)
            except OSError:
                pass
            got = self._cache[d] = (names, stems)
        return got

    def has(self, path: Path) -> bool:
        return path.name in self._get(path.parent)[0]

    def by_stem(self, d: Path, stem: str) -> list[str]:
        return self._get(d)[1].get(stem, [])

    def images(self, d: Path) -> list[str]:
        return sorted(n for n in self._get(d)[0] if _ext(n) in IMAGE_EXTENSIONS and not n.startswith("."))


def _resolve(dirs: _Dirs, bases: Sequence[Path], value: str,
             prefer: Sequence[str] = IMAGE_EXTENSIONS) -> Path | None:
    """Find the file a CSV cell names: ``base/value`` as is, or, if it has no image extension,
    ``base/value.<ext>`` for any of IMAGE_EXTENSIONS (any case; ``prefer`` orders ties)."""
    value = value.strip().replace("\\", "/")
    if not value:
        return None
    for base in bases:
        target = base / value
        if dirs.has(target):
            return target
        if _ext(target.name) not in IMAGE_EXTENSIONS:
            found = dirs.by_stem(target.parent, target.name)
            if found:
                order = list(prefer) + list(IMAGE_EXTENSIONS)
                return target.parent / min(found, key=lambda n: (order.index(_ext(n)), n))
    return None


# --------------------------------------------------------------------------------------------
# Collecting records and problems


@dataclass
class _Entry:
    path: Path
    rel: str
    patient_id: str
    labels: dict[str, float]
    line: int
    mask_path: Path | None = None
    bad: bool = False


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _show(name: str, v: float) -> str:
    try:
        return spec(name).decode(v)
    except (IndexError, ValueError, TypeError):
        return f"{v:g}"


@dataclass
class _Collector:
    root: Path
    csv_name: str
    entries: dict[Path, _Entry] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    image_dirs: set[Path] = field(default_factory=set)   # folders to check for unlabelled images

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return Path(os.path.relpath(path, self.root)).as_posix()

    def problem(self, path: Path | str, kind: str, detail: str) -> None:
        self.problems.append(Problem(self.rel(path) if isinstance(path, Path) else path, kind, detail))

    def row_problem(self, line: int, detail: str) -> None:
        self.problems.append(Problem(f"{self.csv_name}:{line}", "label",
                                     f"{self.csv_name} row {line}: {detail}"))

    def missing(self, expected: Path, line: int, what: str = "image", looked: str = "") -> None:
        self.problem(expected, "missing", f"{what} listed in {self.csv_name} row {line} is not on disk"
                     + (f" ({looked})" if looked else ""))

    def add(self, path: Path, patient_id: str, labels: dict[str, float], line: int, *,
            errors: Sequence[str] = (), mask_path: Path | None = None) -> _Entry:
        """Record one CSV row for ``path``; rows of the same image are merged if they agree."""
        self.image_dirs.add(path.parent)
        rel = self.rel(path)
        for err in errors:
            self.problem(path, "label", f"{self.csv_name} row {line}: {err}")
        old = self.entries.get(path)
        if old is None:
            entry = _Entry(path, rel, patient_id, dict(labels), line, mask_path, bool(errors))
            self.entries[path] = entry
            return entry
        conflicts = []
        if old.patient_id != patient_id:
            conflicts.append("different patient ids")
        if old.mask_path != mask_path:
            conflicts.append("different masks")
        for name, v in labels.items():
            w = old.labels.get(name, NAN)
            if math.isnan(w):
                old.labels[name] = v
            elif not math.isnan(v) and not _same(v, w):
                conflicts.append(f"{name} {_show(name, w)} vs {_show(name, v)}")
        if conflicts:
            self.problem(path, "label", f"{self.csv_name} rows {old.line} and {line} describe the same image "
                                        f"but disagree: {'; '.join(conflicts)}")
        old.bad = old.bad or bool(errors) or bool(conflicts)
        return old

    def check_unlabelled(self, dirs: _Dirs, extra_referenced: Iterable[Path] = ()) -> None:
        referenced = set(self.entries) | {e.mask_path for e in self.entries.values() if e.mask_path}
        referenced |= set(extra_referenced)
        for d in sorted(self.image_dirs):
            for name in dirs.images(d):
                p = d / name
                if p not in referenced:
                    self.problem(p, "unlabelled", f"no row of {self.csv_name} mentions this image")

    def records(self) -> list[Record]:
        good = sorted((e for e in self.entries.values() if not e.bad), key=lambda e: e.rel)
        return [Record(path=e.path, patient_id=e.patient_id, labels=dict(e.labels),
                       record_id=make_record_id(e.rel), mask_path=e.mask_path) for e in good]

    def scan(self, layout: str, modality: str | None) -> Scan:
        return Scan(layout=layout, root=self.root, records=self.records(), problems=list(self.problems),
                    modality=modality)


def _encode(labels: dict[str, float], errors: list[str], name: str, column: str, raw: str,
            decoder: Callable[[str], float] | None = None) -> None:
    """Encode one cell into ``labels[name]``; on failure store nan and note the error."""
    try:
        labels[name] = decoder(raw) if decoder else spec(name).encode(raw)
    except ValueError as e:
        labels[name] = NAN
        errors.append(f"column {column!r}: {e}")


_BLANK = {"", "nan", "na", "n/a", "none", "null", "unknown", "?"}   # as LabelSpec.encode treats them


def _is_blank(raw: str) -> bool:
    return raw.strip().lower() in _BLANK


def _looked(value: str, bases: Sequence[Path], root: Path) -> str:
    where = " or ".join(Path(os.path.relpath(b, root)).as_posix() + "/" for b in bases)
    if _ext(value) in IMAGE_EXTENSIONS:
        return f"looked in {where}"
    return f"looked for {value}.* ({', '.join(IMAGE_EXTENSIONS)}) in {where}"


def _expected(bases: Sequence[Path], value: str, default_ext: str) -> Path:
    value = value.strip().replace("\\", "/")
    return bases[0] / (value if _ext(value) in IMAGE_EXTENSIONS or not default_ext else value + default_ext)


# --------------------------------------------------------------------------------------------
# Generic layout (also behind the medanon layout)


def _locate(root: Path, p: Path | str, what: str, fix: str) -> Path:
    p = Path(p).expanduser()
    for cand in ([p] if p.is_absolute() else [p, root / p]):
        if cand.is_file():
            return cand.absolute()
    raise DataError(f"{what} {p} not found" + ("" if p.is_absolute() else f" (nor under {root})"),
                    files=[str(p)], fix=fix)


def _parse_label_cols(items: Sequence[str], table: _Table, fix: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    for item in items:
        canonical, sep, column = str(item).partition("=")
        canonical, column = canonical.strip(), (column.strip() if sep else canonical.strip())
        if not canonical or not column:
            raise DataError(f"label column {item!r} is malformed", files=[table.path],
                            fix="write each label column as NAME or NAME=CSV_COLUMN, e.g. grade=level")
        if canonical in seen:
            raise DataError(f"label {canonical!r} is given twice in the label columns", files=[table.path],
                            fix="name each canonical label once")
        idx = table.col(column)
        if idx is None:
            raise DataError(f"{table.path.name} has no label column {column!r} (asked for by {item!r})",
                            files=[table.path],
                            fix=f"the CSV has columns {table.header}; {fix}")
        seen.add(canonical)
        out.append((canonical, table.header[idx], idx))
    return out


def _scan_generic(root: Path, opts: GenericOptions, *, layout: str = "generic", modality: str | None = None,
                  all_labels: bool = False) -> Scan:
    """Read a CSV that names one image per row. ``all_labels``: every column other than the
    image / patient / mask columns is a label (medanon's dataset.yaml without ``label_cols``)."""
    csv_path = _locate(root, opts.labels_csv, "labels CSV",
                       "pass --labels with the path of the CSV that lists the images")
    table = _read_table(csv_path)
    img_idx = table.require(opts.image_col, fix="pass --image-col with the column that names the image files")
    pat_idx = (table.require(opts.patient_col, fix="pass --patient-col with the column of patient ids, "
                                                   "or leave it out if every image is its own patient")
               if opts.patient_col else None)
    mask_idx = (table.require(opts.mask_col, fix="name the column of mask files, or leave it out")
                if opts.mask_col else None)
    if all_labels:
        used = {img_idx, pat_idx, mask_idx}
        label_cols = [(h, h, i) for i, h in enumerate(table.header) if i not in used and h]
    else:
        label_cols = _parse_label_cols(opts.label_cols, table,
                                       "pass --label-cols with NAME or NAME=CSV_COLUMN for each label")
    if opts.images_dir is not None:
        images_dir = Path(opts.images_dir).expanduser()
        if not images_dir.is_absolute() and not images_dir.is_dir() and (root / images_dir).is_dir():
            images_dir = root / images_dir
        images_dir = images_dir.absolute()
        if not images_dir.is_dir():
            raise DataError(f"images folder {opts.images_dir} not found", files=[str(opts.images_dir)],
                            fix="pass --images with the folder the image column's paths are relative to")
    else:
        images_dir = csv_path.parent
    if pat_idx is None:
        warnings.warn(f"{csv_path.name}: no patient column given, so every image counts as its own patient; "
                      "patient-level splits and privacy checks cannot see repeat images of one person "
                      "(pass --patient-col if the CSV has patient ids)", LayoutWarning, stacklevel=3)

    col = _Collector(root, csv_path.name)
    dirs = _Dirs()
    bases = [images_dir]
    for line, row in table.rows:
        value = table.cell(row, img_idx)
        if not value:
            col.row_problem(line, f"column {table.header[img_idx]!r} is empty (no image named)")
            continue
        path = _resolve(dirs, bases, value)
        if path is None:
            col.missing(_expected(bases, value, ""), line, looked=_looked(value, bases, root))
            continue
        labels: dict[str, float] = {}
        errors: list[str] = []
        for name, column, idx in label_cols:
            _encode(labels, errors, name, column, table.cell(row, idx))
        if pat_idx is not None:
            pid = table.cell(row, pat_idx)
            if not pid:
                errors.append(f"column {table.header[pat_idx]!r} is empty (no patient id)")
        else:
            pid = Path(os.path.relpath(path, images_dir)).with_suffix("").as_posix()
        mask_path = None
        mask_missing = False
        if mask_idx is not None and (mval := table.cell(row, mask_idx)):
            mask_path = _resolve(dirs, bases, mval)
            if mask_path is None:
                mask_missing = True
                col.missing(_expected(bases, mval, ""), line, what=f"mask of {col.rel(path)}",
                            looked=_looked(mval, bases, root))
        entry = col.add(path, pid, labels, line, errors=errors, mask_path=mask_path)
        if mask_missing:
            entry.bad = True
    col.check_unlabelled(dirs)
    return col.scan(layout, modality)


# --------------------------------------------------------------------------------------------
# medanon (dataset.yaml)

_MEDANON_FORMAT = "medanon-dataset"
_MEDANON_VERSIONS = (1,)


def _read_dataset_yaml(root: Path) -> dict:
    import yaml

    path = root / "dataset.yaml"
    try:
        meta = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DataError(f"cannot read {path.name}: {e.strerror or e}", files=[path],
                        fix="check that the file exists and is readable") from None
    except yaml.YAMLError as e:
        raise DataError(f"{path.name} is not valid YAML ({e})", files=[path],
                        fix="regenerate the dataset with medanon, or fix the YAML syntax") from None
    if not isinstance(meta, dict) or meta.get("format") != _MEDANON_FORMAT:
        raise DataError(f"{path.name} does not say 'format: {_MEDANON_FORMAT}'", files=[path],
                        fix="this is not a medanon dataset; pass --layout with the dataset's layout, or "
                            + _GENERIC_FIX)
    if meta.get("version") not in _MEDANON_VERSIONS:
        raise DataError(f"{path.name} has version {meta.get('version')!r}; this medanon reads version(s) "
                        f"{list(_MEDANON_VERSIONS)}", files=[path],
                        fix="upgrade medanon, or regenerate the dataset with this version")
    if meta.get("modality") not in ("fundus", "xray"):
        raise DataError(f"{path.name}: modality must be 'fundus' or 'xray', not {meta.get('modality')!r}",
                        files=[path], fix="set 'modality: fundus' or 'modality: xray' in dataset.yaml")
    for key in ("labels", "image_col", "patient_col", "mask_col"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise DataError(f"{path.name}: {key} must be a string, not {meta[key]!r}", files=[path],
                            fix=f"write {key} as a column or file name in dataset.yaml")
    lc = meta.get("label_cols")
    if lc is not None and not (isinstance(lc, list) and all(isinstance(x, str) for x in lc)):
        raise DataError(f"{path.name}: label_cols must be a list of column names", files=[path],
                        fix="write label_cols: [grade, sex, age, ...] in dataset.yaml")
    return meta


def _scan_medanon(root: Path) -> Scan:
    meta = _read_dataset_yaml(root)
    opts = GenericOptions(
        labels_csv=root / meta.get("labels", "labels.csv"),
        image_col=meta.get("image_col", "image"),
        label_cols=tuple(meta.get("label_cols") or ()),
        patient_col=meta.get("patient_col", "patient_id"),
        images_dir=root,
        mask_col=meta.get("mask_col"),
    )
    return _scan_generic(root, opts, layout="medanon", modality=meta["modality"],
                         all_labels=meta.get("label_cols") is None)


# --------------------------------------------------------------------------------------------
# APTOS 2019 and EyePACS (Kaggle)

_LAYOUT_FIX = "check that this is the {layout} labels file, or " + _GENERIC_FIX


def _scan_one_per_row(root: Path, layout: str, csv_path: Path, *, image_col: str, bases: Sequence[Path],
                      default_ext: str, primary: Path,
                      describe: Callable[[_Table, list[str], str], tuple[str, dict[str, float], list[str]]],
                      required: Sequence[str] = (), modality: str = "fundus") -> Scan:
    table = _read_table(csv_path)
    fix = _LAYOUT_FIX.format(layout=layout)
    img_idx = table.require(image_col, fix=fix)
    for name in required:
        table.require(name, fix=fix)
    col = _Collector(root, csv_path.name)
    dirs = _Dirs()
    prefer = (default_ext,) + tuple(e for e in IMAGE_EXTENSIONS if e != default_ext)
    for line, row in table.rows:
        value = table.cell(row, img_idx)
        if not value:
            col.row_problem(line, f"column {table.header[img_idx]!r} is empty (no image named)")
            continue
        path = _resolve(dirs, bases, value, prefer)
        if path is None:
            col.missing(_expected(bases, value, default_ext), line, looked=_looked(value, bases, root))
            continue
        pid, labels, errors = describe(table, row, value)
        col.add(path, pid, labels, line, errors=errors)
    if primary.is_dir():
        col.image_dirs.add(primary)
    col.check_unlabelled(dirs)
    return col.scan(layout, modality)


def _scan_aptos(root: Path) -> Scan:
    # APTOS 2019 Blindness Detection (Kaggle): train.csv with columns id_code, diagnosis (ICDR 0-4),
    # images train_images/<id_code>.png. No patient ids are published, so each image is its own patient.
    def describe(table: _Table, row: list[str], value: str):
        labels: dict[str, float] = {}
        errors: list[str] = []
        _encode(labels, errors, "grade", "diagnosis", table.cell(row, table.col("diagnosis")))
        return value, labels, errors

    result = _scan_one_per_row(root, "aptos", root / "train.csv", image_col="id_code",
                               bases=[root / "train_images", root], default_ext=".png",
                               primary=root / "train_images", describe=describe, required=["diagnosis"])
    warnings.warn("APTOS 2019 has no patient ids: every image counts as its own patient, so both eyes of one "
                  "person may land in different splits", LayoutWarning, stacklevel=3)
    return result


_EYEPACS_NAME = re.compile(r"^(?P<patient>.+?)_(?P<side>left|right)$", re.IGNORECASE)


def _scan_eyepacs(root: Path) -> Scan:
    # Kaggle "Diabetic Retinopathy Detection" (EyePACS): trainLabels.csv with columns image, level (0-4);
    # images train/<image>.jpeg named "<patient id>_left" / "<patient id>_right" (competition data page:
    # "1_left.jpeg is the left eye of patient id 1"). Resized copies are often .png/.jpg or unpacked at the
    # root, so any image extension in train/ or the root is accepted.
    def describe(table: _Table, row: list[str], value: str):
        labels: dict[str, float] = {}
        errors: list[str] = []
        _encode(labels, errors, "grade", "level", table.cell(row, table.col("level")))
        name = value.rsplit("/", 1)[-1]
        if _ext(name) in IMAGE_EXTENSIONS:
            name = name.rpartition(".")[0]
        m = _EYEPACS_NAME.match(name)
        if m:
            labels["laterality"] = spec("laterality").encode(m["side"])
            return m["patient"], labels, errors
        labels["laterality"] = NAN
        return name, labels, errors

    return _scan_one_per_row(root, "eyepacs", root / "trainLabels.csv", image_col="image",
                             bases=[root / "train", root], default_ext=".jpeg", primary=root / "train",
                             describe=describe, required=["level"])


# --------------------------------------------------------------------------------------------
# BRSET (PhysioNet "A Brazilian Multilabel Ophthalmological Dataset")
#
# Relied on: the dataset authors' repository (github.com/luisnakayama/BRSET, labels.csv header
# image_id, patient_id, camera, patient_age, ..., patient_sex, exam_eye, ..., DR_SDRG, DR_ICDR, ...),
# and the BRSET authors' preprocessing code (brset_preprocessing: convert_sex "male if sex == 1 else
# female if sex == 2", convert_eye "right if eye == 1 else left if eye == 2"). The paper reports 61.8 %
# female patients. PhysioNet v1.0.1 names the table labels_brset.csv; both names are accepted.
# Images are fundus_photos/<image_id>.jpg.

_BRSET_CSVS = ("labels.csv", "labels_brset.csv")


def _brset_code(mapping: dict[int, float], what: str) -> Callable[[str], float]:
    def decode(raw: str) -> float:
        text = raw.strip()
        if _is_blank(text):
            return NAN
        try:
            v = float(text)
        except ValueError:
            v = NAN
        if v in mapping:
            return mapping[int(v)]
        codes = ", ".join(f"{k} = {spec(what).decode(c)}" for k, c in mapping.items())
        raise ValueError(f"BRSET {what} code {text!r} is not one of {codes}")
    return decode


_BRSET_SEX = _brset_code({1: 1.0, 2: 0.0}, "sex")             # 1 male, 2 female -> canonical M = 1, F = 0
_BRSET_EYE = _brset_code({1: 1.0, 2: 0.0}, "laterality")      # 1 right, 2 left -> canonical R = 1, L = 0


def _lenient_age(raw: str) -> float:
    """Age in years; accepts decimal commas and top-coded values such as '>= 90' or '90+'."""
    text = raw.strip()
    if _is_blank(text):
        return NAN
    m = re.fullmatch(r"(?:>=?|≥)?\s*(\d+(?:[.,]\d+)?)\s*\+?", text)
    if not m:
        raise ValueError(f"label 'age': {text!r} is not a number")
    return float(m[1].replace(",", "."))


def _brset_csv(root: Path) -> Path | None:
    for name in _BRSET_CSVS:
        p = root / name
        if p.is_file() and _has_columns(p, ["DR_ICDR"]):
            return p
    return None


def _scan_brset(root: Path) -> Scan:
    csv_path = _brset_csv(root) or _first_existing(root, _BRSET_CSVS)
    if csv_path is None:
        raise DataError(f"no BRSET labels table in {root}", files=[str(root / n) for n in _BRSET_CSVS],
                        fix="put BRSET's labels.csv (or labels_brset.csv) in the dataset folder, or "
                            + _GENERIC_FIX)
    optional = (("age", "patient_age", _lenient_age), ("sex", "patient_sex", _BRSET_SEX),
                ("laterality", "exam_eye", _BRSET_EYE))

    def describe(table: _Table, row: list[str], value: str):
        labels: dict[str, float] = {}
        errors: list[str] = []
        _encode(labels, errors, "grade", "DR_ICDR", table.cell(row, table.col("DR_ICDR")))
        for name, column, decoder in optional:
            if (idx := table.col(column)) is not None:
                _encode(labels, errors, name, column, table.cell(row, idx), decoder)
        pid = table.cell(row, table.col("patient_id"))
        if not pid:
            errors.append("column 'patient_id' is empty (no patient id)")
        return pid, labels, errors

    return _scan_one_per_row(root, "brset", csv_path, image_col="image_id",
                             bases=[root / "fundus_photos", root], default_ext=".jpg",
                             primary=root / "fundus_photos", describe=describe,
                             required=["patient_id", "DR_ICDR"])


# --------------------------------------------------------------------------------------------
# Chest X-ray helpers


def _view(raw: object) -> float:
    """DICOM ViewPosition (PA, AP, LATERAL, LL, 'AP AXIAL', ...) -> canonical view; '' -> nan."""
    text = str(raw or "").strip().upper()
    if not text:
        return NAN
    classes = LABELS["view"].classes
    if text in classes:
        return float(classes.index(text))
    if text in ("LAT", "LATERAL", "XTABLE LATERAL"):
        return float(classes.index("LATERAL"))
    return float(classes.index("OTHER"))


def _dicom_age(raw: object) -> float:
    """DICOM Age String ('051Y', '006M', '010W', '003D') or a bare number of years ('51', as in RSNA)."""
    m = re.fullmatch(r"0*(\d+(?:\.\d+)?)\s*([YMWD]?)", str(raw or "").strip().upper())
    if not m:
        return NAN
    return float(m[1]) / {"": 1.0, "Y": 1.0, "M": 12.0, "W": 365.25 / 7, "D": 365.25}[m[2]]


def _dicom_sex(raw: object) -> float:
    text = str(raw or "").strip().upper()
    return spec("sex").encode(text) if text in ("M", "F") else NAN   # 'O' (other) / blank -> nan


# --------------------------------------------------------------------------------------------
# RSNA Pneumonia Detection Challenge (stage 2)
#
# Relied on: the Kaggle competition data (stage_2_train_labels.csv with patientId, x, y, width, height,
# Target, one row per box and a single row with empty box and Target 0 for negatives; images
# stage_2_train_images/<patientId>.dcm). patientId is per image (one image per id), and the DICOM
# header carries PatientSex ('M'/'F'), PatientAge (years as a bare number, e.g. '51') and ViewPosition
# ('PA'/'AP'). Unparseable sex/age/view header values become nan rather than problems.


def _scan_rsna(root: Path) -> Scan:
    import pydicom

    csv_path = root / "stage_2_train_labels.csv"
    table = _read_table(csv_path)
    fix = _LAYOUT_FIX.format(layout="rsna")
    id_idx = table.require("patientId", fix=fix)
    t_idx = table.require("Target", fix=fix)
    col = _Collector(root, csv_path.name)
    dirs = _Dirs()
    bases = [root / "stage_2_train_images", root]

    groups: dict[str, list[tuple[int, str]]] = {}
    for line, row in table.rows:
        pid = table.cell(row, id_idx)
        if not pid:
            col.row_problem(line, "column 'patientId' is empty (no image named)")
            continue
        groups.setdefault(pid, []).append((line, table.cell(row, t_idx)))

    for pid, rows in groups.items():
        first_line = rows[0][0]
        path = _resolve(dirs, bases, pid, (".dcm",))
        if path is None:
            col.missing(_expected(bases, pid, ".dcm"), first_line, looked=_looked(pid, bases, root))
            continue
        errors: list[str] = []
        targets: list[float] = []
        for line, raw in rows:
            try:
                v = float(raw)
            except ValueError:
                v = NAN
            if v in (0.0, 1.0):
                targets.append(v)
            else:
                errors.append(f"row {line}, column 'Target': {raw!r} is not 0 or 1")
        labels: dict[str, float] = {"pneumonia": max(targets) if targets else NAN}
        try:
            ds = pydicom.dcmread(path, stop_before_pixels=True,
                                 specific_tags=["PatientSex", "PatientAge", "ViewPosition"])
        except Exception as e:  # noqa: BLE001 - pydicom raises InvalidDicomError, OSError, struct.error...
            col.image_dirs.add(path.parent)
            col.entries[path] = _Entry(path, col.rel(path), pid, labels, first_line, bad=True)
            col.problem(path, "unreadable", f"DICOM header cannot be read: {type(e).__name__}: {e}")
            continue
        labels["sex"] = _dicom_sex(ds.get("PatientSex", ""))
        labels["age"] = _dicom_age(ds.get("PatientAge", ""))
        labels["view"] = _view(ds.get("ViewPosition", ""))
        entry = col.add(path, pid, labels, first_line)
        for err in errors:
            col.problem(path, "label", f"{csv_path.name} {err}")
            entry.bad = True
    if (root / "stage_2_train_images").is_dir():
        col.image_dirs.add(root / "stage_2_train_images")
    col.check_unlabelled(dirs)
    return col.scan("rsna", "xray")


# --------------------------------------------------------------------------------------------
# MIMIC-CXR-JPG 2.x (PhysioNet)
#
# Relied on: the MIMIC-CXR-JPG file layout files/p<first 2 digits of subject>/p<subject_id>/s<study_id>/
# <dicom_id>.jpg; mimic-cxr-2.0.0-metadata.csv.gz (dicom_id, subject_id, study_id,
# PerformedProcedureStepDescription, ViewPosition, Rows, Columns, StudyDate, ...); and
# mimic-cxr-2.0.0-chexpert.csv.gz (subject_id, study_id, then the 14 CheXpert findings named like
# "Enlarged Cardiomediastinum", "No Finding", valued 1.0 / 0.0 / -1.0 / blank), labels per *study*.
# Sex and age come from MIMIC-IV's patients.csv(.gz) (subject_id, gender, anchor_age) if it is placed in
# the root (or a hosp/ subfolder); anchor_age is the age in the patient's anchor year, an approximation.

_MIMIC_META = ("mimic-cxr-2.0.0-metadata.csv.gz", "mimic-cxr-2.0.0-metadata.csv")
_MIMIC_CHEX = ("mimic-cxr-2.0.0-chexpert.csv.gz", "mimic-cxr-2.0.0-chexpert.csv")
_MIMIC_PATIENTS = ("patients.csv.gz", "patients.csv", "hosp/patients.csv.gz", "hosp/patients.csv")


def _finding_name(column: str) -> str:
    return re.sub(r"[\s\-]+", "_", column.strip().lower())


def _id(text: str) -> str:
    """MIMIC ids are integers; tolerate '10000032.0' from spreadsheet round trips."""
    t = text.strip()
    return t[:-2] if t.endswith(".0") and t[:-2].isdigit() else t


def _scan_mimic(root: Path) -> Scan:
    meta_path = _first_existing(root, _MIMIC_META)
    chex_path = _first_existing(root, _MIMIC_CHEX)
    if meta_path is None or chex_path is None:
        absent = [n for n, p in ((_MIMIC_META[0], meta_path), (_MIMIC_CHEX[0], chex_path)) if p is None]
        raise DataError(f"MIMIC-CXR-JPG tables missing in {root}: {', '.join(absent)} (or the plain .csv)",
                        files=[str(root / n) for n in absent],
                        fix="download them from the MIMIC-CXR-JPG PhysioNet page into the dataset root, or "
                            + _GENERIC_FIX)
    fix = _LAYOUT_FIX.format(layout="mimic")
    meta = _read_table(meta_path)
    m_dicom, m_subj, m_study = (meta.require(c, fix=fix) for c in ("dicom_id", "subject_id", "study_id"))
    m_view = meta.col("ViewPosition")

    chex = _read_table(chex_path)
    c_subj, c_study = chex.require("subject_id", fix=fix), chex.require("study_id", fix=fix)
    findings = [(_finding_name(h), h, i) for i, h in enumerate(chex.header)
                if _finding_name(h) in CHEXPERT_FINDINGS]
    if not findings:
        raise DataError(f"{chex_path.name} has none of the 14 CheXpert finding columns", files=[chex_path],
                        fix=f"the CSV has columns {chex.header}; use mimic-cxr-2.0.0-chexpert.csv(.gz) "
                            "from MIMIC-CXR-JPG")
    study_labels: dict[tuple[str, str], tuple[int, dict[str, float], list[str]]] = {}
    study_conflicts: dict[tuple[str, str], str] = {}
    for line, row in chex.rows:
        key = (_id(chex.cell(row, c_subj)), _id(chex.cell(row, c_study)))
        labels: dict[str, float] = {}
        errors: list[str] = []
        for name, column, idx in findings:
            _encode(labels, errors, name, column, chex.cell(row, idx))
        errors = [f"{chex_path.name} row {line}: {e}" for e in errors]
        if key in study_labels:
            old_line, old, _ = study_labels[key]
            if any(not _same(old.get(k, NAN), v) for k, v in labels.items()):
                study_conflicts[key] = (f"{chex_path.name} rows {old_line} and {line} give different labels "
                                        "for this study")
            continue
        study_labels[key] = (line, labels, errors)

    patients: dict[str, tuple[float, float]] = {}
    patients_path = _first_existing(root, _MIMIC_PATIENTS)
    if patients_path is not None:
        pt = _read_table(patients_path)
        p_subj = pt.require("subject_id", fix="use MIMIC-IV's hosp/patients.csv.gz, or remove the file")
        p_sex, p_age = pt.col("gender"), pt.col("anchor_age")
        for _, row in pt.rows:
            sex_raw = pt.cell(row, p_sex).upper()
            sex = spec("sex").encode(sex_raw) if sex_raw in ("M", "F") else NAN
            try:
                age = float(pt.cell(row, p_age)) if pt.cell(row, p_age) else NAN
            except ValueError:
                age = NAN
            patients[_id(pt.cell(row, p_subj))] = (sex, age)
    else:
        warnings.warn(f"no patients.csv(.gz) in {root}: MIMIC records get no sex/age labels "
                      "(copy MIMIC-IV hosp/patients.csv.gz there to add them)", LayoutWarning, stacklevel=3)

    col = _Collector(root, meta_path.name)
    dirs = _Dirs()
    finding_names = [f[0] for f in findings]
    for line, row in meta.rows:
        dicom_id, subj, study = (_id(meta.cell(row, i)) for i in (m_dicom, m_subj, m_study))
        if not (dicom_id and subj and study):
            col.row_problem(line, "dicom_id, subject_id or study_id is empty")
            continue
        study_dir = root / "files" / f"p{subj[:2]}" / f"p{subj}" / f"s{study}"
        path = _resolve(dirs, [study_dir], dicom_id, (".jpg",))
        if path is None:
            col.missing(study_dir / f"{dicom_id}.jpg", line)
            continue
        labels: dict[str, float] = {}
        errors: list[str] = []
        _, found, chex_errors = study_labels.get((subj, study), (0, {}, []))
        for name in finding_names:
            labels[name] = found.get(name, NAN)
        if patients_path is not None:
            labels["sex"], labels["age"] = patients.get(subj, (NAN, NAN))
        labels["view"] = _view(meta.cell(row, m_view))
        entry = col.add(path, subj, labels, line)
        conflict = study_conflicts.get((subj, study))
        for err in chex_errors + ([conflict] if conflict else []):
            col.problem(path, "label", err)
            entry.bad = True
    col.check_unlabelled(dirs)
    return col.scan("mimic", "xray")


# --------------------------------------------------------------------------------------------
# Detection and entry point

_LOOKED_FOR = {
    "medanon": "dataset.yaml with 'format: medanon-dataset'",
    "rsna": "stage_2_train_labels.csv",
    "mimic": "mimic-cxr-2.0.0-metadata.csv(.gz)",
    "eyepacs": "trainLabels.csv",
    "brset": "labels.csv or labels_brset.csv with a DR_ICDR column",
    "aptos": "train.csv with id_code and diagnosis columns",
}


def _is_medanon(root: Path) -> bool:
    p = root / "dataset.yaml"
    if not p.is_file():
        return False
    try:
        import yaml

        meta = yaml.safe_load(p.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - unreadable/invalid YAML: not detected (--layout medanon says why)
        return False
    return isinstance(meta, dict) and meta.get("format") == _MEDANON_FORMAT


def _detectors() -> list[tuple[str, Callable[[Path], bool]]]:
    return [
        ("medanon", _is_medanon),
        ("rsna", lambda r: (r / "stage_2_train_labels.csv").is_file()),
        ("mimic", lambda r: _first_existing(r, _MIMIC_META) is not None),
        ("eyepacs", lambda r: (r / "trainLabels.csv").is_file()),
        ("brset", lambda r: _brset_csv(r) is not None),
        ("aptos", lambda r: (r / "train.csv").is_file()
                            and _has_columns(r / "train.csv", ["id_code", "diagnosis"])),
    ]


def _check_root(root: Path | str) -> Path:
    root = Path(root).expanduser().absolute()
    if not root.exists():
        raise DataError(f"dataset folder {root} does not exist", files=[root],
                        fix="check the path you passed")
    if not root.is_dir():
        raise DataError(f"{root} is not a folder", files=[root],
                        fix="pass the dataset's folder (for a CSV alone use --layout generic --labels FILE)")
    return root


def detect_layout(root: Path) -> str:
    """The layout of a dataset folder, from the files at its top level."""
    root = _check_root(root)
    for name, test in _detectors():
        if test(root):
            return name
    looked = "; ".join(f"{name}: {what}" for name, what in _LOOKED_FOR.items())
    raise DataError(f"cannot tell the layout of {root}: none of the files that identify a layout are there "
                    f"(looked for {looked})", files=[root],
                    fix=f"pass --layout NAME (one of {', '.join(LAYOUTS)}), or {_GENERIC_FIX}")


_READERS: dict[str, Callable[[Path], Scan]] = {
    "medanon": _scan_medanon, "aptos": _scan_aptos, "eyepacs": _scan_eyepacs, "brset": _scan_brset,
    "rsna": _scan_rsna, "mimic": _scan_mimic,
}


def scan(root: Path, layout: str = "auto", *, generic: GenericOptions | None = None) -> Scan:
    """List the images of a dataset folder with labels and patient ids, without decoding pixels."""
    root = _check_root(root)
    name = (layout or "auto").strip().lower()
    if name == "auto":
        name = "generic" if generic is not None else detect_layout(root)
    if name not in LAYOUTS:
        raise DataError(f"unknown layout {layout!r} for {root}", files=[root],
                        fix=f"pass --layout auto or one of {', '.join(LAYOUTS)}")
    if name == "generic":
        if generic is None:
            raise DataError(f"the generic layout needs a description of {root}", files=[root],
                            fix="pass --labels FILE.csv --image-col COLUMN [--label-cols ...] "
                                "[--patient-col COLUMN]")
        return _scan_generic(root, generic)
    if generic is not None:
        raise DataError(f"--labels/--image-col describe a generic layout, but --layout {name} was asked for "
                        f"({root})", files=[root],
                        fix=f"drop --labels/--image-col/--label-cols to read {name}, "
                            "or pass --layout generic")
    return _READERS[name](root)
