"""The generic layout (a CSV described by :class:`GenericOptions`) and the medanon layout
(``dataset.yaml``, medanon's own format, read through the generic reader).

Package-internal (see :mod:`medanon.data.layouts`): names without a leading underscore are shared by
the package's modules; only ``GenericOptions`` is re-exported as public API.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from medanon.data.layouts.collect import Collector, Dirs, encode, expected_path, resolve, where_looked
from medanon.data.layouts.common import GENERIC_FIX, LayoutWarning
from medanon.data.layouts.table import Table, read_table
from medanon.data.records import Scan
from medanon.errors import DataError, user_stacklevel


@dataclass(frozen=True)
class GenericOptions:
    """The generic layout: a labels CSV, its image, label and patient columns, and the images' folder."""

    labels_csv: Path
    image_col: str
    label_cols: tuple[str, ...] = ()   # each "canonical" or "canonical=csv_column": ("grade=level", "sex")
    patient_col: str | None = None     # if None, each image is its own patient (a LayoutWarning says so)
    images_dir: Path | None = None     # default: the CSV's folder; image cells are paths relative to it,
                                       # extension optional
    mask_col: str | None = None


# --------------------------------------------------------------------------------------------
# Generic layout (also behind the medanon layout)


def _locate(root: Path, p: Path | str, what: str, fix: str) -> Path:
    p = Path(p).expanduser()
    for cand in ([p] if p.is_absolute() else [p, root / p]):
        if cand.is_file():
            return cand.absolute()
    raise DataError(f"{what} {p} not found" + ("" if p.is_absolute() else f" (nor under {root})"),
                    files=[str(p)], fix=fix)


def _parse_label_cols(items: Sequence[str], table: Table, fix: str) -> list[tuple[str, str, int]]:
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


def scan_generic(root: Path, opts: GenericOptions, *, layout: str = "generic", modality: str | None = None,
                 all_labels: bool = False) -> Scan:
    """Read a CSV that names one image per row. ``all_labels``: every column other than the
    image / patient / mask columns is a label (medanon's dataset.yaml without ``label_cols``)."""
    def fix(key: str, generic: str) -> str:       # a medanon folder's columns come from its dataset.yaml
        return f"correct {key} in {root / 'dataset.yaml'}" if layout == "medanon" else generic

    csv_path = _locate(root, opts.labels_csv, "labels CSV",
                       fix("labels", "pass labels_csv= the path of the CSV that lists the images"))
    table = read_table(csv_path)
    img_idx = table.require(opts.image_col,
                            fix=fix("image_col", "pass image_col= the column that names the image files"))
    pat_idx = (table.require(opts.patient_col,
                             fix=fix("patient_col", "pass patient_col= the column of patient ids, "
                                                    "or leave it out if every image is its own patient"))
               if opts.patient_col else None)
    mask_idx = (table.require(opts.mask_col, fix=fix("mask_col", "name the column of mask files, or leave it out"))
                if opts.mask_col else None)
    if all_labels:
        used = {img_idx, pat_idx, mask_idx}
        label_cols = [(h, h, i) for i, h in enumerate(table.header) if i not in used and h]
    else:
        label_cols = _parse_label_cols(opts.label_cols, table,
                                       fix("label_cols", "pass label_cols= NAME or NAME=CSV_COLUMN for each label"))
    if opts.images_dir is not None:
        images_dir = Path(opts.images_dir).expanduser()
        if not images_dir.is_absolute() and not images_dir.is_dir() and (root / images_dir).is_dir():
            images_dir = root / images_dir
        images_dir = images_dir.absolute()
        if not images_dir.is_dir():
            raise DataError(f"images folder {opts.images_dir} not found", files=[str(opts.images_dir)],
                            fix="pass images_dir= the folder the image column's paths are relative to")
    else:
        images_dir = csv_path.parent
    if pat_idx is None:
        warnings.warn(f"{csv_path.name}: no patient column given, so every image counts as its own patient; "
                      "patient-level splits and privacy checks cannot see repeat images of one person "
                      "(pass patient_col= if the CSV has patient ids)", LayoutWarning, stacklevel=user_stacklevel())

    col = Collector(root, csv_path.name, scope=[images_dir], patients_known=pat_idx is not None)
    dirs = Dirs()
    bases = [images_dir]
    for line, row in table.rows:
        value = table.cell(row, img_idx)
        if not value:
            col.row_problem(line, f"column {table.header[img_idx]!r} is empty (no image named)")
            continue
        path = resolve(dirs, bases, value)
        if path is None:
            looked = where_looked(value, bases, root)
            if opts.images_dir is None:
                looked += f" (the folder of {csv_path.name}, unless an images folder is given)"
            col.missing(expected_path(bases, value, ""), line, looked=looked)
            continue
        labels: dict[str, float] = {}
        errors: list[str] = []
        for name, column, idx in label_cols:
            encode(labels, errors, name, column, table.cell(row, idx))
        if pat_idx is not None:
            pid = table.cell(row, pat_idx)
            if not pid:
                errors.append(f"column {table.header[pat_idx]!r} is empty (no patient id)")
        else:
            pid = Path(os.path.relpath(path, images_dir)).as_posix()     # a.png and a.jpg: two images, two "patients"
        mask_path = None
        mask_missing = False
        if mask_idx is not None and (mval := table.cell(row, mask_idx)):
            mask_path = resolve(dirs, bases, mval)
            if mask_path is None:
                mask_missing = True
                col.missing(expected_path(bases, mval, ""), line, what=f"mask of {col.rel(path)}",
                            looked=where_looked(mval, bases, root))
        entry = col.add(path, pid, labels, line, errors=errors, mask_path=mask_path)
        if mask_missing:
            entry.bad = True
    col.check_unlabelled(dirs)
    sc = col.scan(layout, modality)
    sc.allowed_roots.append(images_dir)       # the folder the user named, or the labels CSV's folder
    sc.files.append(opts.labels_csv)
    return sc


# --------------------------------------------------------------------------------------------
# medanon (dataset.yaml)

MEDANON_FORMAT = "medanon-dataset"
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
    if not isinstance(meta, dict) or meta.get("format") != MEDANON_FORMAT:
        raise DataError(f"{path.name} does not say 'format: {MEDANON_FORMAT}'", files=[path],
                        fix="this is not a medanon dataset; pass layout= the dataset's layout, or "
                            + GENERIC_FIX)
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


def scan_medanon(root: Path) -> Scan:
    meta = _read_dataset_yaml(root)
    opts = GenericOptions(
        labels_csv=root / meta.get("labels", "labels.csv"),
        image_col=meta.get("image_col", "image"),
        label_cols=tuple(meta.get("label_cols") or ()),
        patient_col=meta.get("patient_col", "patient_id"),
        images_dir=root,
        mask_col=meta.get("mask_col"),
    )
    sc = scan_generic(root, opts, layout="medanon", modality=meta["modality"],
                      all_labels=meta.get("label_cols") is None)
    sc.files.append(root / "dataset.yaml")
    sc.declared.append(opts.labels_csv)       # named by dataset.yaml: read from inside the folder only
    return sc
