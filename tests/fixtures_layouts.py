"""Tiny datasets in the real on-disk layouts, for tests of the layout readers (and of anything that
consumes a scan). Every builder writes under ``tmp_path / <layout name>`` and returns that root.

The contents are deterministic; the ``*_expected`` helpers give what a correct reader must return,
so tests compare against them instead of against the reader's own output.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import uuid
import warnings
from pathlib import Path

import numpy as np
from PIL import Image

from medanon.data.labels import CHEXPERT_FINDINGS

SIZE = 16


# ----------------------------------------------------------------------------------------------
# small writers


def write_image(path: Path, seed: int = 0, *, gray: bool = False) -> Path:
    """A 16x16 image (format from the extension): RGB by default, L with ``gray``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    shape = (SIZE, SIZE) if gray else (SIZE, SIZE, 3)
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(path)
    return path


def write_dicom(path: Path, *, patient_id: str, sex: str = "M", age: str = "51", view: str = "PA",
                seed: int = 0) -> Path:
    """A real, tiny DICOM (16x16 MONOCHROME2 uint8, explicit VR little endian) like RSNA's."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage, generate_uid

    path.parent.mkdir(parents=True, exist_ok=True)
    sop_uid = generate_uid(entropy_srcs=[patient_id, "sop"])
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = sop_uid
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = SecondaryCaptureImageStorage
    ds.SOPInstanceUID = sop_uid
    ds.StudyInstanceUID = generate_uid(entropy_srcs=[patient_id, "study"])
    ds.SeriesInstanceUID = generate_uid(entropy_srcs=[patient_id, "series"])
    ds.PatientID = patient_id
    ds.PatientName = patient_id
    ds.PatientSex = sex
    with warnings.catch_warnings():   # RSNA writes bare years ('51'), which is not a valid DICOM AS
        warnings.simplefilter("ignore")
        ds.PatientAge = age
    ds.ViewPosition = view
    ds.Modality = "CR"
    ds.BodyPartExamined = "CHEST"
    ds.Rows = SIZE
    ds.Columns = SIZE
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.BitsAllocated = 8
    ds.BitsStored = 8
    ds.HighBit = 7
    ds.PixelRepresentation = 0
    ds.PixelData = np.random.default_rng(seed).integers(0, 256, (SIZE, SIZE), dtype=np.uint8).tobytes()
    ds.save_as(path, enforce_file_format=True)
    return path


def write_csv(path: Path, header: list[str], rows: list[list[object]], *, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    data = buf.getvalue().encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a (possibly gzipped) CSV, for tests that edit a fixture's table."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    return rows[0], rows[1:]


def _hex(*parts: object, n: int = 12) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:n]


# ----------------------------------------------------------------------------------------------
# APTOS 2019: train.csv (id_code, diagnosis) + train_images/<id_code>.png; test split alongside


def aptos_id(i: int) -> str:
    return _hex("aptos", i)


def aptos_expected(n: int = 6) -> dict[str, float]:
    """id_code -> grade."""
    return {aptos_id(i): float(i % 5) for i in range(n)}


def make_aptos(tmp_path: Path, n: int = 6) -> Path:
    root = tmp_path / "aptos"
    rows = []
    for i, (code, grade) in enumerate(aptos_expected(n).items()):
        write_image(root / "train_images" / f"{code}.png", i)
        rows.append([code, int(grade)])
    write_csv(root / "train.csv", ["id_code", "diagnosis"], rows)
    # the unlabelled test split of the real download must not confuse the reader
    write_csv(root / "test.csv", ["id_code"], [[_hex("aptos-test", 0)]])
    write_image(root / "test_images" / f"{_hex('aptos-test', 0)}.png", 99)
    write_csv(root / "sample_submission.csv", ["id_code", "diagnosis"], [[_hex("aptos-test", 0), 0]])
    return root


# ----------------------------------------------------------------------------------------------
# EyePACS (Kaggle DR): trainLabels.csv (image, level) + train/<patient>_<left|right>.jpeg


def eyepacs_expected(n_patients: int = 3) -> dict[str, tuple[str, float, float]]:
    """image name -> (patient id, grade, laterality 0 left / 1 right)."""
    out = {}
    for k in range(n_patients):
        pid = str(10 + 3 * k)
        out[f"{pid}_left"] = (pid, float(k % 5), 0.0)
        out[f"{pid}_right"] = (pid, float((k + 1) % 5), 1.0)
    return out


def make_eyepacs(tmp_path: Path, n_patients: int = 3, *, folder: str = "train", ext: str = ".jpeg") -> Path:
    """``folder=""`` puts the images at the root; ``ext`` lets resized copies be .png etc."""
    root = tmp_path / "eyepacs"
    rows = []
    for i, (name, (_, grade, _)) in enumerate(eyepacs_expected(n_patients).items()):
        write_image((root / folder if folder else root) / f"{name}{ext}", i)
        rows.append([name, int(grade)])
    write_csv(root / "trainLabels.csv", ["image", "level"], rows)
    return root


# ----------------------------------------------------------------------------------------------
# BRSET: labels.csv (real header) + fundus_photos/<image_id>.jpg
# patient_sex 1 = male, 2 = female; exam_eye 1 = right, 2 = left (see medanon.data.layouts)

BRSET_HEADER = [
    "image_id", "patient_id", "camera", "patient_age", "comorbidities", "diabetes_time_y", "insuline",
    "patient_sex", "exam_eye", "diabetes", "nationality", "optic_disc", "vessels", "macula", "DR_SDRG",
    "DR_ICDR", "focus", "iluminaton", "image_field", "artifacts", "diabetic_retinopathy", "macular_edema",
    "scar", "nevus", "amd", "vascular_occlusion", "hypertensive_retinopathy", "drusens", "hemorrhage",
    "retinal_detachment", "myopic_fundus", "increased_cup_disc", "other", "quality",
]


def brset_expected(n_patients: int = 3) -> dict[str, dict]:
    """image_id -> raw codes and the canonical labels a reader must produce."""
    out = {}
    n = 0
    for k in range(n_patients):
        sex_code = 1 if k % 2 == 0 else 2
        age = "" if k == 2 else str(40 + 7 * k)
        for eye_code, grade in ((1, k % 5), (2, (k + 1) % 5)):
            n += 1
            out[f"img{n:05d}"] = {
                "patient_id": str(k + 1), "sex_code": sex_code, "eye_code": eye_code, "age_raw": age,
                "grade": float(grade), "sex": 1.0 if sex_code == 1 else 0.0,
                "laterality": 1.0 if eye_code == 1 else 0.0, "age": float(age) if age else float("nan"),
            }
    return out


def make_brset(tmp_path: Path, n_patients: int = 3, *, csv_name: str = "labels.csv") -> Path:
    root = tmp_path / "brset"
    rows = []
    for i, (image_id, e) in enumerate(brset_expected(n_patients).items()):
        write_image(root / "fundus_photos" / f"{image_id}.jpg", i)
        raw = {"image_id": image_id, "patient_id": e["patient_id"], "camera": "Canon CR",
               "patient_age": e["age_raw"], "comorbidities": "diabetes1, SAH", "diabetes_time_y": "12",
               "insuline": "yes", "patient_sex": e["sex_code"], "exam_eye": e["eye_code"], "diabetes": "yes",
               "nationality": "Brazil", "DR_SDRG": int(e["grade"]), "DR_ICDR": int(e["grade"]),
               "quality": "Adequate"}
        ones = ("optic_disc", "vessels", "macula", "focus", "iluminaton", "image_field", "artifacts")
        rows.append([raw.get(h, 1 if h in ones else 0) for h in BRSET_HEADER])
    write_csv(root / csv_name, BRSET_HEADER, rows)
    return root


# ----------------------------------------------------------------------------------------------
# RSNA Pneumonia stage 2: stage_2_train_labels.csv (several rows per positive image) + DICOMs


def rsna_id(i: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"rsna/{i}"))


def rsna_expected(n: int = 4) -> dict[str, dict]:
    """patientId -> header values and canonical labels."""
    out = {}
    for i in range(n):
        out[rsna_id(i)] = {"pneumonia": float(i % 2 == 0), "sex_raw": "F" if i % 3 == 0 else "M",
                           "age_raw": str(30 + i), "view_raw": "AP" if i % 2 == 0 else "PA",
                           "sex": 0.0 if i % 3 == 0 else 1.0, "age": float(30 + i),
                           "view": 1.0 if i % 2 == 0 else 0.0}
    return out


def make_rsna(tmp_path: Path, n: int = 4) -> Path:
    root = tmp_path / "rsna"
    rows, detail = [], []
    for i, (pid, e) in enumerate(rsna_expected(n).items()):
        write_dicom(root / "stage_2_train_images" / f"{pid}.dcm", patient_id=pid, sex=e["sex_raw"],
                    age=e["age_raw"], view=e["view_raw"], seed=i)
        if e["pneumonia"]:
            rows += [[pid, 264.0, 152.0, 213.0, 379.0, 1], [pid, 562.0, 152.0, 256.0, 453.0, 1]]
            detail.append([pid, "Lung Opacity"])
        else:
            rows.append([pid, "", "", "", "", 0])
            detail.append([pid, "Normal"])
    write_csv(root / "stage_2_train_labels.csv", ["patientId", "x", "y", "width", "height", "Target"], rows)
    write_csv(root / "stage_2_detailed_class_info.csv", ["patientId", "class"], detail)
    return root


# ----------------------------------------------------------------------------------------------
# MIMIC-CXR-JPG 2.x: files/pXX/pSUBJECT/sSTUDY/<dicom_id>.jpg + metadata / chexpert (.csv.gz)

CHEXPERT_COLUMNS = [
    "Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Enlarged Cardiomediastinum", "Fracture",
    "Lung Lesion", "Lung Opacity", "No Finding", "Pleural Effusion", "Pleural Other", "Pneumonia",
    "Pneumothorax", "Support Devices",
]
assert [c.lower().replace(" ", "_") for c in CHEXPERT_COLUMNS] == list(CHEXPERT_FINDINGS)

# (subject_id, study_id, [(dicom_id, ViewPosition), ...])
MIMIC_STUDIES = [
    ("10000032", "50414267", [("02aa804e-bde0afdd-112c0b34-7bc16630-4e384014", "PA"),
                              ("174413ec-4ec4c1f7-34ea26b7-c5f994f8-79ef1962", "LATERAL")]),
    ("10000032", "53189527", [("2a2277a9-b0ded155-c0de8eb9-c124d10e-82c5caab", "AP")]),
    ("10000764", "57375967", [("096052b7-d256dc40-453a102b-fa7d01c6-1b22c6b4", "AP"),
                              ("b79e55c3-735ce5ac-64412506-cdc9ea79-f1af521f", "")]),
    ("11000011", "51234567", [("d0b71acc-b5a62046-bbb5f6b8-7b173b85-65cdf738", "AP AXIAL")]),
]
MIMIC_PATIENTS = {"10000032": ("F", 52), "10000764": ("M", 86), "11000011": ("F", 40)}


def mimic_study_labels(j: int) -> list[str]:
    """Raw CheXpert cells of study number j (1.0 / 0.0 / -1.0 / blank)."""
    cells = ["", "1.0", "0.0", "-1.0"]
    return [cells[(j + f) % 4] for f in range(len(CHEXPERT_COLUMNS))]


def mimic_expected() -> dict[str, dict]:
    """dicom_id -> subject (patient id), study, raw view and canonical labels."""
    views = {"PA": 0.0, "AP": 1.0, "LATERAL": 2.0, "": float("nan"), "AP AXIAL": 4.0}
    out = {}
    for j, (subj, study, images) in enumerate(MIMIC_STUDIES):
        findings = {f: (float(c) if c else float("nan"))
                    for f, c in zip(CHEXPERT_FINDINGS, mimic_study_labels(j), strict=True)}
        sex, age = MIMIC_PATIENTS[subj]
        for dicom_id, view in images:
            out[dicom_id] = {"subject": subj, "study": study, "view": views[view],
                             "sex": 1.0 if sex == "M" else 0.0, "age": float(age), **findings}
    return out


def make_mimic(tmp_path: Path, *, gz: bool = True, patients: bool = True) -> Path:
    root = tmp_path / "mimic"
    ext = ".csv.gz" if gz else ".csv"
    meta_rows, chex_rows = [], []
    seed = 0
    for j, (subj, study, images) in enumerate(MIMIC_STUDIES):
        chex_rows.append([subj, study, *mimic_study_labels(j)])
        for dicom_id, view in images:
            write_image(root / "files" / f"p{subj[:2]}" / f"p{subj}" / f"s{study}" / f"{dicom_id}.jpg", seed,
                        gray=True)
            seed += 1
            meta_rows.append([dicom_id, subj, study, "CHEST (PA AND LAT)", view, 3056, 2544, 21800506,
                              213014.531, "CHEST (PA AND LAT)", "postero-anterior", "Erect"])
    meta_header = ["dicom_id", "subject_id", "study_id", "PerformedProcedureStepDescription", "ViewPosition",
                   "Rows", "Columns", "StudyDate", "StudyTime", "ProcedureCodeSequence_CodeMeaning",
                   "ViewCodeSequence_CodeMeaning", "PatientOrientationCodeSequence_CodeMeaning"]
    write_csv(root / f"mimic-cxr-2.0.0-metadata{ext}", meta_header, meta_rows, gz=gz)
    write_csv(root / f"mimic-cxr-2.0.0-chexpert{ext}", ["subject_id", "study_id", *CHEXPERT_COLUMNS],
              chex_rows, gz=gz)
    write_csv(root / f"mimic-cxr-2.0.0-split{ext}", ["dicom_id", "study_id", "subject_id", "split"],
              [[d, st, s, "train"] for s, st, ims in MIMIC_STUDIES for d, _ in ims], gz=gz)
    if patients:
        write_csv(root / f"patients{ext}", ["subject_id", "gender", "anchor_age", "anchor_year",
                                            "anchor_year_group", "dod"],
                  [[s, sex, age, 2180, "2014 - 2016", ""] for s, (sex, age) in MIMIC_PATIENTS.items()], gz=gz)
    return root


# ----------------------------------------------------------------------------------------------
# generic: a home-made CSV with its own column names; image cells are relative paths, some
# without extension


def generic_expected(n: int = 5) -> dict[str, dict]:
    """relative image path (under the root) -> patient id and canonical labels."""
    out = {}
    for i in range(n):
        out[f"pics/scan_{i:02d}.png"] = {"patient": f"subj{i // 2}", "grade": float(i % 5),
                                         "sex": 0.0 if i % 2 else 1.0, "score": 0.5 * i}
    return out


def make_generic(tmp_path: Path, n: int = 5) -> Path:
    """meta.csv columns: file, subject, level (-> grade), gender (-> sex), score (not a canonical label)."""
    root = tmp_path / "generic"
    rows = []
    for i, (rel, e) in enumerate(generic_expected(n).items()):
        write_image(root / rel, i)
        cell = rel if i % 2 else rel[: -len(".png")]
        rows.append([cell, e["patient"], int(e["grade"]), "male" if e["sex"] else "female", e["score"]])
    write_csv(root / "meta.csv", ["file", "subject", "level", "gender", "score"], rows)
    return root


GENERIC_LABEL_COLS = ("grade=level", "sex=gender", "score")


# ----------------------------------------------------------------------------------------------
# medanon (what the phantom writer produces): dataset.yaml + labels.csv + images/ + masks/


def medanon_expected(modality: str = "fundus", n_patients: int = 3, per_patient: int = 2) -> dict[str, dict]:
    """relative image path -> raw CSV cells (canonical column names) incl. patient_id and mask."""
    out = {}
    for p in range(n_patients):
        for a in range(per_patient):
            name = _hex("medanon", modality, p, a, n=16)
            row = {"patient_id": f"P{p:04d}", "mask": f"masks/{name}.png",
                   "sex": "M" if p % 2 else "F", "age": str(30 + 10 * p), "marker_block": str(int(p == 1))}
            if modality == "fundus":
                row.update(grade=str((p + a) % 5), laterality="L" if a % 2 == 0 else "R")
            else:
                row.update(pneumonia=str(p % 2), view="PA" if a % 2 == 0 else "AP", situs_inversus="0")
            out[f"images/{name}.png"] = row
    return out


def medanon_label_cols(modality: str = "fundus") -> list[str]:
    if modality == "fundus":
        return ["grade", "sex", "age", "laterality", "marker_block"]
    return ["pneumonia", "sex", "age", "view", "situs_inversus", "marker_block"]


def make_medanon(tmp_path: Path, modality: str = "fundus", n_patients: int = 3, per_patient: int = 2, *,
                 masks: bool = True) -> Path:
    root = tmp_path / f"medanon_{modality}"
    label_cols = medanon_label_cols(modality)
    header = ["image", "patient_id"] + (["mask"] if masks else []) + label_cols
    rows = []
    for i, (rel, e) in enumerate(medanon_expected(modality, n_patients, per_patient).items()):
        write_image(root / rel, i, gray=modality == "xray")
        if masks:
            write_image(root / e["mask"], 1000 + i, gray=True)
        rows.append([rel, e["patient_id"]] + ([e["mask"]] if masks else []) + [e[c] for c in label_cols])
    write_csv(root / "labels.csv", header, rows)
    yaml_lines = ["format: medanon-dataset", "version: 1", f"modality: {modality}", "labels: labels.csv",
                  "image_col: image", "patient_col: patient_id"]
    if masks:
        yaml_lines.append("mask_col: mask")
    yaml_lines.append(f"label_cols: [{', '.join(label_cols)}]")
    (root / "dataset.yaml").write_text("\n".join(yaml_lines) + "\n", encoding="utf-8")
    return root


# ----------------------------------------------------------------------------------------------
# CheXpert v1.0-small: train.csv / valid.csv whose Path starts with the dataset folder's name (valid.csv here
# without it, as a copy that moved the CSV writes it); patient = the patientNNNNN folder

CHEXPERT_ROOT = "CheXpert-v1.0-small"
CHEXPERT_ROWS = [   # csv, path under the root, sex, age, Frontal/Lateral, AP/PA
    ("train.csv", "train/patient00001/study1/view1_frontal.jpg", "Female", "68", "Frontal", "AP"),
    ("train.csv", "train/patient00001/study1/view2_lateral.jpg", "Female", "68", "Lateral", ""),
    ("train.csv", "train/patient00002/study2/view1_frontal.jpg", "Male", "87", "Frontal", "PA"),
    ("train.csv", "train/patient00003/study1/view1_frontal.jpg", "Unknown", "41", "Lateral", "LL"),
    ("valid.csv", "valid/patient64541/study1/view1_frontal.jpg", "Male", "73", "Frontal", "AP"),
]
CHEXPERT_HEADER = ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", *CHEXPERT_COLUMNS]


def chexpert_expected() -> dict[str, dict]:
    """path under the root -> patient and canonical labels."""
    views = {"AP": 1.0, "PA": 0.0, "": 2.0, "LL": 2.0}
    out = {}
    for j, (_, rel, sex, age, _, ap_pa) in enumerate(CHEXPERT_ROWS):
        findings = {f: (float(c) if c else float("nan"))
                    for f, c in zip(CHEXPERT_FINDINGS, mimic_study_labels(j), strict=True)}
        out[rel] = {"patient": rel.split("/")[1], "sex": {"Female": 0.0, "Male": 1.0}.get(sex, float("nan")),
                    "age": float(age), "view": views[ap_pa], **findings}
    return out


def make_chexpert(tmp_path: Path) -> Path:
    root = tmp_path / CHEXPERT_ROOT
    rows: dict[str, list] = {"train.csv": [], "valid.csv": []}
    for j, (csv_name, rel, sex, age, frontal, ap_pa) in enumerate(CHEXPERT_ROWS):
        write_image(root / rel, 200 + j, gray=True)
        cell = f"{CHEXPERT_ROOT}/{rel}" if csv_name == "train.csv" else rel
        rows[csv_name].append([cell, sex, age, frontal, ap_pa, *mimic_study_labels(j)])
    for name, body in rows.items():
        write_csv(root / name, CHEXPERT_HEADER, body)
    return root


# ----------------------------------------------------------------------------------------------
# NIH ChestX-ray14: Data_Entry_2017_v2020.csv + images_00N/images/*.png; Finding Labels joined by '|'

NIH_ROWS = [   # image, finding labels, patient id, age, sex, view, images folder
    ("00000001_000.png", "Cardiomegaly", "1", "58", "M", "PA", "images_001/images"),
    ("00000001_001.png", "Cardiomegaly|Emphysema", "1", "58", "M", "PA", "images_001/images"),
    ("00000002_000.png", "No Finding", "2", "81", "M", "PA", "images_001/images"),
    ("00000003_000.png", "Hernia", "3", "74", "F", "AP", "images_002/images"),
    ("00000003_001.png", "Effusion|Infiltration|Pleural_Thickening", "3", "074Y", "F", "AP", "images_002/images"),
]
NIH_HEADER = ["Image Index", "Finding Labels", "Follow-up #", "Patient ID", "Patient Age", "Patient Gender",
              "View Position", "OriginalImage[Width", "Height]", "OriginalImagePixelSpacing[x", "y]"]


def nih_expected() -> dict[str, dict]:
    """image name -> patient, the findings listed, sex, age and view."""
    names = {"Effusion": "pleural_effusion", "No Finding": "no_finding"}
    return {name: {"patient": pid, "findings": {names.get(f, f.lower()) for f in found.split("|")},
                   "sex": 1.0 if sex == "M" else 0.0, "age": float(age.rstrip("Y")),
                   "view": {"PA": 0.0, "AP": 1.0}[view]}
            for name, found, pid, age, sex, view, _ in NIH_ROWS}


def make_nih(tmp_path: Path) -> Path:
    root = tmp_path / "nih"
    rows = []
    for j, (name, found, pid, age, sex, view, folder) in enumerate(NIH_ROWS):
        write_image(root / folder / name, 300 + j, gray=True)
        rows.append([name, found, name[9:12].lstrip("0") or "0", pid, age, sex, view, 2500, 2048, 0.143, 0.143])
    write_csv(root / "Data_Entry_2017_v2020.csv", NIH_HEADER, rows)
    return root


BUILDERS = {
    "medanon": make_medanon, "aptos": make_aptos, "eyepacs": make_eyepacs, "brset": make_brset,
    "rsna": make_rsna, "mimic": make_mimic, "chexpert": make_chexpert, "nih": make_nih,
}
