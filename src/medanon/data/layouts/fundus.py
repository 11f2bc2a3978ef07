"""Readers of the public fundus datasets: APTOS 2019, Kaggle EyePACS and BRSET (one image per CSV row).

Package-internal (see :mod:`medanon.data.layouts`): names without a leading underscore are shared by
the package's modules, not public API.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from medanon.data.labels import NAN, in_range, spec
from medanon.data.layouts.collect import (
    Collector,
    Dirs,
    encode,
    expected_path,
    file_ext,
    is_blank,
    resolve,
    where_looked,
)
from medanon.data.layouts.common import GENERIC_FIX, IMAGE_EXTENSIONS, LAYOUT_FIX, LayoutWarning
from medanon.data.layouts.table import Table, first_existing, has_columns, read_table
from medanon.data.records import Scan
from medanon.errors import DataError, user_stacklevel

# --------------------------------------------------------------------------------------------
# APTOS 2019 and EyePACS (Kaggle)


def _scan_one_per_row(root: Path, layout: str, csv_path: Path, *, image_col: str, bases: Sequence[Path],
                      default_ext: str, primary: Path,
                      describe: Callable[[Table, list[str], str], tuple[str, dict[str, float], list[str]]],
                      required: Sequence[str] = (), modality: str = "fundus") -> Scan:
    table = read_table(csv_path)
    fix = LAYOUT_FIX.format(layout=layout)
    img_idx = table.require(image_col, fix=fix)
    for name in required:
        table.require(name, fix=fix)
    col = Collector(root, csv_path.name)
    dirs = Dirs()
    prefer = (default_ext, *(e for e in IMAGE_EXTENSIONS if e != default_ext))
    for line, row in table.rows:
        value = table.cell(row, img_idx)
        if not value:
            col.row_problem(line, f"column {table.header[img_idx]!r} is empty (no image named)")
            continue
        path = resolve(dirs, bases, value, prefer)
        if path is None:
            col.missing(expected_path(bases, value, default_ext), line,
                        looked=where_looked(value, bases, root))
            continue
        pid, labels, errors = describe(table, row, value)
        col.add(path, pid, labels, line, errors=errors)
    if primary.is_dir():
        col.image_dirs.add(primary)
    col.check_unlabelled(dirs)
    return col.scan(layout, modality)


def scan_aptos(root: Path) -> Scan:
    # APTOS 2019 Blindness Detection (Kaggle): train.csv with columns id_code, diagnosis (ICDR 0-4),
    # images train_images/<id_code>.png. No patient ids are published, so each image is its own patient.
    def describe(table: Table, row: list[str], value: str):
        labels: dict[str, float] = {}
        errors: list[str] = []
        encode(labels, errors, "grade", "diagnosis", table.cell(row, table.col("diagnosis")))
        return value, labels, errors

    result = _scan_one_per_row(root, "aptos", root / "train.csv", image_col="id_code",
                               bases=[root / "train_images", root], default_ext=".png",
                               primary=root / "train_images", describe=describe, required=["diagnosis"])
    warnings.warn("APTOS 2019 has no patient ids: every image counts as its own patient, so both eyes of one "
                  "person may land in different splits", LayoutWarning, stacklevel=user_stacklevel())
    result.records = [replace(r, patient_known=False) for r in result.records]
    return result


_EYEPACS_NAME = re.compile(r"^(?P<patient>.+?)_(?P<side>left|right)$", re.IGNORECASE)


def scan_eyepacs(root: Path) -> Scan:
    # Kaggle "Diabetic Retinopathy Detection" (EyePACS): trainLabels.csv with columns image, level (0-4);
    # images train/<image>.jpeg named "<patient id>_left" / "<patient id>_right" (competition data page:
    # "1_left.jpeg is the left eye of patient id 1"). Resized copies are often .png/.jpg or unpacked at the
    # root, so any image extension in train/ or the root is accepted.
    def describe(table: Table, row: list[str], value: str):
        labels: dict[str, float] = {}
        errors: list[str] = []
        encode(labels, errors, "grade", "level", table.cell(row, table.col("level")))
        name = value.rsplit("/", 1)[-1]
        if file_ext(name) in IMAGE_EXTENSIONS:
            name = name.rpartition(".")[0]
        m = _EYEPACS_NAME.match(name)
        if m:
            labels["laterality"] = spec("laterality").encode(m["side"])
            return m["patient"], labels, errors
        labels["laterality"] = NAN
        errors.append(f"image name {name!r} is not '<patient id>_left' or '<patient id>_right', so its patient "
                      "cannot be told (EyePACS names each image so); rename it, or read the folder with the generic "
                      "layout and a patient column")
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
        if is_blank(text):
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
    if is_blank(text):
        return NAN
    m = re.fullmatch(r"(?:>=?|≥)?\s*(\d+(?:[.,]\d+)?)\s*\+?", text)
    if not m:
        raise ValueError(f"label 'age': {text!r} is not a number")
    return in_range("age", float(m[1].replace(",", ".")))


def brset_csv(root: Path) -> Path | None:
    for name in _BRSET_CSVS:
        p = root / name
        if p.is_file() and has_columns(p, ["DR_ICDR"]):
            return p
    return None


def scan_brset(root: Path) -> Scan:
    csv_path = brset_csv(root) or first_existing(root, _BRSET_CSVS)
    if csv_path is None:
        raise DataError(f"no BRSET labels table in {root}", files=[str(root / n) for n in _BRSET_CSVS],
                        fix="put BRSET's labels.csv (or labels_brset.csv) in the dataset folder, or "
                            + GENERIC_FIX)
    optional = (("age", "patient_age", _lenient_age), ("sex", "patient_sex", _BRSET_SEX),
                ("laterality", "exam_eye", _BRSET_EYE))

    def describe(table: Table, row: list[str], value: str):
        labels: dict[str, float] = {}
        errors: list[str] = []
        encode(labels, errors, "grade", "DR_ICDR", table.cell(row, table.col("DR_ICDR")))
        for name, column, decoder in optional:
            if (idx := table.col(column)) is not None:
                encode(labels, errors, name, column, table.cell(row, idx), decoder)
        pid = table.cell(row, table.col("patient_id"))
        if not pid:
            errors.append("column 'patient_id' is empty (no patient id)")
        return pid, labels, errors

    return _scan_one_per_row(root, "brset", csv_path, image_col="image_id",
                             bases=[root / "fundus_photos", root], default_ext=".jpg",
                             primary=root / "fundus_photos", describe=describe,
                             required=["patient_id", "DR_ICDR"])
