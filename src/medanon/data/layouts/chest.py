"""Readers of the public chest X-ray datasets: RSNA Pneumonia (DICOM headers) and MIMIC-CXR-JPG,
with the DICOM sex / age / view-position decoders they share.

Package-internal (see :mod:`medanon.data.layouts`): names without a leading underscore are shared by
the package's modules, not public API.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import replace
from pathlib import Path

from medanon.data.labels import CHEXPERT_FINDINGS, LABELS, NAN, in_range, spec
from medanon.data.layouts.collect import Collector, Dirs, Entry, encode, expected_path, resolve, same, where_looked
from medanon.data.layouts.common import GENERIC_FIX, LAYOUT_FIX, LayoutWarning
from medanon.data.layouts.table import first_existing, read_table
from medanon.data.records import Scan
from medanon.errors import DataError, user_stacklevel

# --------------------------------------------------------------------------------------------
# Chest X-ray helpers


def view_code(raw: object) -> float:
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


def dicom_age(raw: object) -> float:
    """DICOM Age String ('051Y', '006M', '010W', '003D') or a bare number of years ('51', as in RSNA)."""
    m = re.fullmatch(r"0*(\d+(?:\.\d+)?)\s*([YMWD]?)", str(raw or "").strip().upper())
    if not m:
        return NAN
    return float(m[1]) / {"": 1.0, "Y": 1.0, "M": 12.0, "W": 365.25 / 7, "D": 365.25}[m[2]]


def dicom_sex(raw: object) -> float:
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


def scan_rsna(root: Path) -> Scan:
    import pydicom

    csv_path = root / "stage_2_train_labels.csv"
    table = read_table(csv_path)
    fix = LAYOUT_FIX.format(layout="rsna")
    id_idx = table.require("patientId", fix=fix)
    t_idx = table.require("Target", fix=fix)
    col = Collector(root, csv_path.name)
    dirs = Dirs()
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
        path = resolve(dirs, bases, pid, (".dcm",))
        if path is None:
            col.missing(expected_path(bases, pid, ".dcm"), first_line, looked=where_looked(pid, bases, root))
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
        if len(set(targets)) > 1:                 # boxes (1) and "no pneumonia" (0) for one image: which is it?
            errors.append(f"rows {', '.join(str(line) for line, _ in rows)}, column 'Target': the rows of "
                          f"{pid} disagree (0 and 1)")
        labels: dict[str, float] = {"pneumonia": max(targets) if targets else NAN}
        try:
            ds = pydicom.dcmread(path, stop_before_pixels=True,
                                 specific_tags=["PatientSex", "PatientAge", "ViewPosition"])
        except Exception as e:  # pydicom raises InvalidDicomError, OSError, struct.error...
            col.image_dirs.add(path.parent)
            col.entries[path] = Entry(path, col.rel(path), pid, labels, first_line, bad=True)
            col.problem(path, "unreadable", f"DICOM header cannot be read: {type(e).__name__}: {e}")
            continue
        labels["sex"] = dicom_sex(ds.get("PatientSex", ""))
        age = dicom_age(ds.get("PatientAge", ""))
        try:
            labels["age"] = age if math.isnan(age) else in_range("age", age)
        except ValueError as e:
            labels["age"] = NAN
            errors.append(f"(the DICOM header's PatientAge of {path.name}): {e}")
        labels["view"] = view_code(ds.get("ViewPosition", ""))
        entry = col.add(path, pid, labels, first_line)
        for err in errors:
            col.problem(path, "label", f"{csv_path.name} {err}")
            entry.bad = True
    if (root / "stage_2_train_images").is_dir():
        col.image_dirs.add(root / "stage_2_train_images")
    col.check_unlabelled(dirs)
    result = col.scan("rsna", "xray")
    # RSNA's patientId names one image (the NIH source's patients were split across ids), so it is not a person:
    # one person may hold several ids, and a guarantee that counts people cannot rest on it.
    warnings.warn("RSNA Pneumonia's patientId is one per image, not one per person: every image counts as its own "
                  "patient, so one person's images may land in different splits", LayoutWarning,
                  stacklevel=user_stacklevel())
    result.records = [replace(r, patient_known=False) for r in result.records]
    return result


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

MIMIC_META = ("mimic-cxr-2.0.0-metadata.csv.gz", "mimic-cxr-2.0.0-metadata.csv")
_MIMIC_CHEX = ("mimic-cxr-2.0.0-chexpert.csv.gz", "mimic-cxr-2.0.0-chexpert.csv")
_MIMIC_PATIENTS = ("patients.csv.gz", "patients.csv", "hosp/patients.csv.gz", "hosp/patients.csv")


def finding_name(column: str) -> str:
    return re.sub(r"[\s\-]+", "_", column.strip().lower())


def _id(text: str) -> str:
    """MIMIC ids are integers; tolerate '10000032.0' from spreadsheet round trips."""
    t = text.strip()
    return t[:-2] if t.endswith(".0") and t[:-2].isdigit() else t


def scan_mimic(root: Path) -> Scan:
    meta_path = first_existing(root, MIMIC_META)
    chex_path = first_existing(root, _MIMIC_CHEX)
    if meta_path is None or chex_path is None:
        absent = [n for n, p in ((MIMIC_META[0], meta_path), (_MIMIC_CHEX[0], chex_path)) if p is None]
        raise DataError(f"MIMIC-CXR-JPG tables missing in {root}: {', '.join(absent)} (or the plain .csv)",
                        files=[str(root / n) for n in absent],
                        fix="download them from the MIMIC-CXR-JPG PhysioNet page into the dataset root, or "
                            + GENERIC_FIX)
    fix = LAYOUT_FIX.format(layout="mimic")
    meta = read_table(meta_path)
    m_dicom, m_subj, m_study = (meta.require(c, fix=fix) for c in ("dicom_id", "subject_id", "study_id"))
    m_view = meta.col("ViewPosition")

    chex = read_table(chex_path)
    c_subj, c_study = chex.require("subject_id", fix=fix), chex.require("study_id", fix=fix)
    findings = [(finding_name(h), h, i) for i, h in enumerate(chex.header)
                if finding_name(h) in CHEXPERT_FINDINGS]
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
            encode(labels, errors, name, column, chex.cell(row, idx))
        errors = [f"{chex_path.name} row {line}: {e}" for e in errors]
        if key in study_labels:
            old_line, old, _ = study_labels[key]
            if any(not same(old.get(k, NAN), v) for k, v in labels.items()):
                study_conflicts[key] = (f"{chex_path.name} rows {old_line} and {line} give different labels "
                                        "for this study")
            continue
        study_labels[key] = (line, labels, errors)

    patients: dict[str, tuple[float, float, int, list[str]]] = {}     # subject -> sex, age, row, problems
    patients_path = first_existing(root, _MIMIC_PATIENTS)
    if patients_path is not None:
        pt = read_table(patients_path)
        p_subj = pt.require("subject_id", fix="use MIMIC-IV's hosp/patients.csv.gz, or remove the file")
        p_sex, p_age = pt.col("gender"), pt.col("anchor_age")
        for line, row in pt.rows:
            subject = _id(pt.cell(row, p_subj))
            bad: list[str] = []
            got = {}
            for name, idx in (("sex", p_sex), ("age", p_age)):
                try:
                    got[name] = spec(name).encode(pt.cell(row, idx)) if idx is not None else NAN
                except ValueError as e:                    # a gender or age the file should not hold
                    got[name], bad = NAN, [*bad, f"{patients_path.name} row {line}: {e}"]
            earlier = patients.get(subject)
            if earlier is not None and not all(a == b or (math.isnan(a) and math.isnan(b))
                                               for a, b in zip(earlier[:2], (got["sex"], got["age"]), strict=True)):
                bad.append(f"{patients_path.name} lists subject {subject} twice with different sex or age "
                           f"(rows {earlier[2]} and {line})")
            patients[subject] = (got["sex"], got["age"], line, [*(earlier[3] if earlier else []), *bad])
    else:
        warnings.warn(f"no patients.csv(.gz) in {root}: MIMIC records get no sex/age labels "
                      "(copy MIMIC-IV hosp/patients.csv.gz there to add them)", LayoutWarning,
                      stacklevel=user_stacklevel())

    col = Collector(root, meta_path.name)
    dirs = Dirs()
    finding_names = [f[0] for f in findings]
    for line, row in meta.rows:
        dicom_id, subj, study = (_id(meta.cell(row, i)) for i in (m_dicom, m_subj, m_study))
        if not (dicom_id and subj and study):
            col.row_problem(line, "dicom_id, subject_id or study_id is empty")
            continue
        study_dir = root / "files" / f"p{subj[:2]}" / f"p{subj}" / f"s{study}"
        path = resolve(dirs, [study_dir], dicom_id, (".jpg",))
        if path is None:
            col.missing(study_dir / f"{dicom_id}.jpg", line)
            continue
        labels: dict[str, float] = {}
        errors: list[str] = []
        _, found, chex_errors = study_labels.get((subj, study), (0, {}, []))
        for name in finding_names:
            labels[name] = found.get(name, NAN)
        patient_problems: list[str] = []
        if patients_path is not None:
            labels["sex"], labels["age"], _, patient_problems = patients.get(subj, (NAN, NAN, 0, []))
        labels["view"] = view_code(meta.cell(row, m_view))
        entry = col.add(path, subj, labels, line)
        conflict = study_conflicts.get((subj, study))
        for err in chex_errors + ([conflict] if conflict else []) + patient_problems:
            col.problem(path, "label", err)
            entry.bad = True
    col.check_unlabelled(dirs)
    return col.scan("mimic", "xray")
