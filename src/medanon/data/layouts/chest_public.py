"""Readers of two public chest X-ray datasets labelled with CheXpert-style findings: CheXpert (Stanford) and NIH
ChestX-ray14.

Package-internal (see :mod:`medanon.data.layouts`): names without a leading underscore are shared by
the package's modules, not public API.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path, PurePosixPath

from medanon.data.labels import CHEXPERT_FINDINGS, NAN, NIH_FINDINGS, in_range
from medanon.data.layouts.chest import dicom_age, finding_name, view_code
from medanon.data.layouts.collect import Collector, Dirs, encode, expected_path, is_blank, resolve, where_looked
from medanon.data.layouts.common import LAYOUT_FIX, LayoutWarning
from medanon.data.layouts.table import first_existing, has_columns, read_table
from medanon.data.records import Scan
from medanon.errors import DataError, user_stacklevel

# --------------------------------------------------------------------------------------------
# CheXpert v1.0 (Stanford ML Group; the "small" and full downloads)
#
# Relied on: the folder the download unpacks to (CheXpert-v1.0-small/ or CheXpert-v1.0/) holds train.csv and
# valid.csv with columns Path, Sex, Age, Frontal/Lateral, AP/PA and the 14 findings ("No Finding", "Enlarged
# Cardiomediastinum", ...; 1.0 / 0.0 / -1.0 / blank). Path names the image from the folder *above* the dataset
# ("CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg"); copies that moved the CSV may name it from
# the dataset folder ("train/patient00001/..."): both are read. The patient is the path's patientNNNNN folder; the
# valid split's patients are not in train's. Sex is Male / Female / Unknown; AP/PA is AP / PA on frontal images, blank
# on laterals (a few rows write LL / RL: lateral decubitus). Every image under the top folders the Paths name (train/,
# valid/) must have a row: a new study or patient folder no row names is reported, not left out.

CHEXPERT_TABLES = ("train.csv", "valid.csv")
CHEXPERT_KEYS = ("Path", "Frontal/Lateral")          # the columns that tell CheXpert's train.csv from APTOS'
_PATIENT_DIR = re.compile(r"(?:^|/)(patient\d+)/")


def is_chexpert(root: Path) -> bool:
    return any((root / n).is_file() and has_columns(root / n, CHEXPERT_KEYS) for n in CHEXPERT_TABLES)


_FRONTAL_POSITIONS = ("AP", "PA")
_LATERAL_POSITIONS = ("LL", "RL")                    # lateral decubitus: left / right side down
_LATERAL_WORDS = ("LAT", "LATERAL", "XTABLE LATERAL")   # what view_code reads as LATERAL


def _chexpert_view(frontal_lateral: str, ap_pa: str, errors: list[str]) -> float:
    """The canonical view of a CheXpert image. Frontal/Lateral decides frontal or lateral: a lateral image is
    LATERAL whether AP/PA is blank, LL or RL; a frontal one is its AP/PA (PA, AP; LL / RL there, a frontal film of a
    patient lying on one side, is OTHER; blank: not recorded, nan). An AP/PA that names the other kind of view than
    Frontal/Lateral does, or a Frontal/Lateral that is neither, is an error of the row (noted in ``errors``)."""
    kind = frontal_lateral.strip().lower()
    position = " ".join(ap_pa.split()).upper()
    if kind == "lateral":
        if position in _FRONTAL_POSITIONS:
            errors.append(f"column 'AP/PA': {ap_pa.strip()!r} is a frontal view, but column 'Frontal/Lateral' says "
                          f"{frontal_lateral.strip()!r} (correct the cell that is wrong, or leave the image out)")
            return NAN
        return view_code("LATERAL")
    if kind == "frontal":
        if position in _LATERAL_WORDS:
            errors.append(f"column 'AP/PA': {ap_pa.strip()!r} is a lateral view, but column 'Frontal/Lateral' says "
                          f"{frontal_lateral.strip()!r} (correct the cell that is wrong, or leave the image out)")
            return NAN
        if position in _LATERAL_POSITIONS:
            return view_code("OTHER")
        return view_code(position) if position else NAN
    if kind:
        errors.append(f"column 'Frontal/Lateral': {frontal_lateral.strip()!r} is neither 'Frontal' nor 'Lateral' "
                      "(write one of the two, or leave the image out)")
        return NAN
    if position in _LATERAL_POSITIONS:                    # Frontal/Lateral blank: AP/PA alone tells what it can
        return view_code("LATERAL")
    return view_code(position) if position else NAN


def scan_chexpert(root: Path) -> Scan:
    tables = [root / n for n in CHEXPERT_TABLES if (root / n).is_file()]
    if not tables:
        raise DataError(f"CheXpert tables missing in {root}: neither train.csv nor valid.csv is there",
                        files=[str(root / n) for n in CHEXPERT_TABLES],
                        fix="pass the folder the CheXpert download unpacks to (CheXpert-v1.0-small/ or "
                            "CheXpert-v1.0/), which holds train.csv and valid.csv")
    fix = LAYOUT_FIX.format(layout="chexpert")
    col = Collector(root, tables[0].name)
    dirs = Dirs()
    zero_age = 0
    for csv_path in tables:
        table = read_table(csv_path)
        col.start_table(csv_path.name)
        p_idx = table.require("Path", fix=fix)
        fl_idx, view_idx = table.require("Frontal/Lateral", fix=fix), table.col("AP/PA")
        columns = [(finding_name(h), h, i) for i, h in enumerate(table.header) if finding_name(h) in CHEXPERT_FINDINGS]
        columns += [(name, table.header[i], i) for name, i in (("sex", table.col("Sex")), ("age", table.col("Age")))
                    if i is not None]
        for line, row in table.rows:
            value = table.cell(row, p_idx).replace("\\", "/")
            if not value:
                col.row_problem(line, "column 'Path' is empty (no image named)")
                continue
            patient = _PATIENT_DIR.search(value)
            if patient is None:
                col.row_problem(line, f"column 'Path': {value!r} has no patientNNNNN folder, so its patient is "
                                      "unknown")
                continue
            parts = PurePosixPath(value).parts
            tried = [value, *(["/".join(parts[1:])] if len(parts) > 1 else [])]
            path = next((p for p in (resolve(dirs, [root], v) for v in tried) if p is not None), None)
            if path is None:
                col.missing(expected_path([root], tried[-1], ""), line,
                            looked=f"looked for {' and '.join(tried)} under {root}")
                continue
            labels: dict[str, float] = {}
            errors: list[str] = []
            for name, column, idx in columns:
                encode(labels, errors, name, column, table.cell(row, idx))
            if labels.get("age") == 0:          # no age: CheXpert's patients are adults, 0 stands for a missing one
                labels["age"] = NAN
                zero_age += 1
            labels["view"] = _chexpert_view(table.cell(row, fl_idx), table.cell(row, view_idx), errors)
            col.add(path, patient[1], labels, line, errors=errors)
    if zero_age:
        warnings.warn(f"{root}: {zero_age} CheXpert row(s) give Age 0, which in this adult dataset stands for an age "
                      "not recorded: read as unknown (not as 0), so age is left out for those images",
                      LayoutWarning, stacklevel=user_stacklevel())
    col.trees.update(_top_folders(root, col.listed))
    col.check_unlabelled(dirs)
    sc = col.scan("chexpert", "xray")
    sc.files = list(tables)
    return sc


def _top_folders(root: Path, listed: set[Path]) -> set[Path]:
    """The folders right under ``root`` that the listed images lie in (train/, valid/): an image anywhere below
    them must have a row, also in a study or patient folder that holds no listed image."""
    tops: set[str] = set()
    for path in listed:
        try:
            rel = path.relative_to(root)
        except ValueError:                # outside the dataset (a ../ path): not its folder to list
            continue
        if len(rel.parts) > 1 and rel.parts[0] not in (".", ".."):
            tops.add(rel.parts[0])
    return {root / t for t in tops}


# --------------------------------------------------------------------------------------------
# NIH ChestX-ray14 (NIH Clinical Center)
#
# Relied on: Data_Entry_2017_v2020.csv (or the older Data_Entry_2017.csv) with columns Image Index
# ("00000001_000.png"), Finding Labels ("Cardiomegaly|Effusion", "No Finding"), Follow-up #, Patient ID (the
# integer the image name starts with), Patient Age (years; "058Y" in early copies), Patient Gender (M / F), View
# Position (PA / AP); images in images/ or in the download's images_001/images/ ... images_012/images/. The 14
# findings are text-mined from reports: a finding not listed is recorded as absent (0), none is uncertain. The CSV
# holds a few ages over 130 (e.g. 412): like every layout's, such a cell is a problem of its image (skip_bad).

NIH_TABLES = ("Data_Entry_2017_v2020.csv", "Data_Entry_2017.csv")
_NIH_NAMES = {"effusion": "pleural_effusion"}       # the others' canonical names are theirs, in lower case


def _nih_bases(root: Path) -> list[Path]:
    parts = sorted(p for p in root.glob("images_*") if p.is_dir())
    found = [root / "images", *(q for p in parts for q in (p / "images", p))]
    return [p for p in found if p.is_dir()] + [root]


def _nih_findings(cell: str) -> tuple[dict[str, float], list[str]]:
    """Finding Labels -> 0 / 1 for every NIH finding and No Finding, with the errors of the cell."""
    names = [n.strip() for n in cell.split("|") if n.strip()]
    labels = {f: 0.0 for f in ("no_finding", *NIH_FINDINGS)}
    errors = []
    for raw in names:
        name = _NIH_NAMES.get(raw.lower(), finding_name(raw))
        if name not in labels:
            errors.append(f"column 'Finding Labels': {raw!r} is not one of the 14 ChestX-ray14 findings "
                          "or 'No Finding'")
            continue
        labels[name] = 1.0
    if not names:
        errors.append("column 'Finding Labels' is empty (write 'No Finding' for an image without one)")
    elif labels["no_finding"] and len(names) > 1:
        errors.append(f"column 'Finding Labels': {cell!r} lists 'No Finding' together with a finding")
    return labels, errors


def _nih_age(raw: str) -> float:
    """Patient Age in years ("58", or "058Y" as early copies of the CSV write it), range-checked; blank -> nan."""
    if is_blank(raw):
        return NAN
    age = dicom_age(raw)
    if math.isnan(age):
        raise ValueError(f"label 'age': {raw.strip()!r} is not an age in years")
    return in_range("age", age, raw.strip())


def scan_nih(root: Path) -> Scan:
    csv_path = first_existing(root, NIH_TABLES)
    if csv_path is None:
        raise DataError(f"NIH ChestX-ray14 table missing in {root}: {NIH_TABLES[0]} (or {NIH_TABLES[1]})",
                        files=[str(root / NIH_TABLES[0])],
                        fix="place the Data_Entry CSV of the download in the dataset folder, next to images/ "
                            "or images_001/ ...")
    fix = LAYOUT_FIX.format(layout="nih")
    present = [n for n in NIH_TABLES if (root / n).is_file()]
    if len(present) > 1:
        warnings.warn(f"{root} holds both {present[0]} and {present[1]}: medanon reads {csv_path.name} (the 2020 "
                      f"revision of the labels) and ignores {present[1]}; move the table you do not mean out of the "
                      "dataset folder to silence this", LayoutWarning, stacklevel=user_stacklevel())
    table = read_table(csv_path)
    img_idx, find_idx, pid_idx = (table.require(c, fix=fix) for c in ("Image Index", "Finding Labels", "Patient ID"))
    age_idx, view_idx = table.col("Patient Age"), table.col("View Position")
    sex_idx = table.col("Patient Gender") if table.col("Patient Gender") is not None else table.col("Patient Sex")
    col = Collector(root, csv_path.name)
    dirs = Dirs()
    bases = _nih_bases(root)
    col.image_dirs.update(b for b in bases if b != root)   # images/, images_0NN/images/: each PNG there needs a row
    for line, row in table.rows:
        name, pid = table.cell(row, img_idx), table.cell(row, pid_idx)
        if not name or not pid:
            col.row_problem(line, "column 'Image Index' or 'Patient ID' is empty")
            continue
        path = resolve(dirs, bases, name, (".png",))
        if path is None:
            col.missing(expected_path(bases, name, ".png"), line, looked=where_looked(name, bases, root))
            continue
        labels, errors = _nih_findings(table.cell(row, find_idx))
        prefix = name.split("_", 1)[0]
        if prefix.isdigit() and pid.isdigit() and int(prefix) != int(pid):
            errors.append(f"column 'Patient ID': {pid} is not the patient the image name {name} starts with")
        if sex_idx is not None:
            encode(labels, errors, "sex", table.header[sex_idx], table.cell(row, sex_idx))
        if age_idx is not None:
            encode(labels, errors, "age", "Patient Age", table.cell(row, age_idx), decoder=_nih_age)
        if view_idx is not None:
            labels["view"] = view_code(table.cell(row, view_idx))
        col.add(path, str(int(pid)) if pid.isdigit() else pid, labels, line, errors=errors)
    col.check_unlabelled(dirs)
    sc = col.scan("nih", "xray")
    sc.files = [csv_path]             # the table read (of the two NIH_TABLES, the first present)
    return sc
