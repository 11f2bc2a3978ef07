"""Layout readers: list the images of a dataset folder with their labels and patient ids.

A *layout* is the way a public dataset (or medanon's own phantom writer) arranges its image files
and label tables on disk. :func:`scan` reads the label tables and the folder listings, never the
pixels, and returns a :class:`~medanon.data.records.Scan`:

* ``records``: the usable images, sorted by their path relative to the dataset root, each with its
  patient id, canonical labels (see :mod:`medanon.data.labels`) and an opaque ``record_id``;
* ``problems``: what is wrong with individual files, for the caller to raise or skip
  (``skip_bad``). An image with a problem is never in ``records``. Kinds used here:

  ``missing``     a CSV row names an image (or mask) that is not on disk;
  ``unlabelled``  an image file in the layout's image folder(s) that no CSV row mentions;
  ``label``       a value that cannot be encoded, rows of the same image that disagree, or an
                  empty image / patient id cell (the detail names CSV, row and column);
  ``unreadable``  a DICOM header that cannot be parsed (RSNA, where sex/age/view come from it).

  ``outside``     a file whose real path (symlinks followed) lies outside the dataset folder (and outside
                  ``images_dir``), e.g. a CSV cell ``../x.png`` or ``/abs/x.png``, or a link out of the folder:
                  refused unless ``allow_outside``. Links that stay inside are followed.

Structural errors (unknown layout, CSV or required column missing, unknown label column, bad
``dataset.yaml``) raise :class:`~medanon.errors.DataError` naming the file and the fix.

Only the standard ``csv`` module is used (``.csv.gz`` through ``gzip``); header cells are stripped of
whitespace and a byte-order mark, and column names match exactly or, failing that, ignoring case.

This package holds the public API (:data:`LAYOUTS`, :func:`detect_layout`, :func:`scan`, re-exporting
``IMAGE_EXTENSIONS``, :class:`GenericOptions` and :class:`LayoutWarning`); the readers live in its
modules, whose names without a leading underscore are package-internal, not public API:

``common``   image extensions, LayoutWarning, fix hints shared by the readers;
``table``    CSV reading and column lookup;
``collect``  folder index, image resolution, record/problem collector, label-cell encoding;
``generic``  the generic layout (GenericOptions) and medanon's dataset.yaml;
``fundus``   APTOS 2019, EyePACS, BRSET;
``chest``    RSNA Pneumonia, MIMIC-CXR-JPG;
``chest_public`` CheXpert, NIH ChestX-ray14.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from medanon.data.layouts.chest import MIMIC_META, scan_mimic, scan_rsna
from medanon.data.layouts.chest_public import NIH_TABLES, is_chexpert, scan_chexpert, scan_nih
from medanon.data.layouts.common import GENERIC_FIX, IMAGE_EXTENSIONS, LayoutWarning
from medanon.data.layouts.fundus import brset_csv, scan_aptos, scan_brset, scan_eyepacs
from medanon.data.layouts.generic import MEDANON_FORMAT, GenericOptions, scan_generic, scan_medanon
from medanon.data.layouts.table import first_existing, has_columns
from medanon.data.records import Problem, Scan
from medanon.errors import DataError

__all__ = [
    "IMAGE_EXTENSIONS", "LAYOUTS", "GenericOptions", "LayoutWarning", "detect_layout", "scan",
]

LAYOUTS: dict[str, str] = {
    "medanon": "medanon's own format (the phantom writer's): dataset.yaml + labels.csv + images/ (+ masks/)",
    "aptos": "APTOS 2019 Blindness Detection: train.csv (id_code, diagnosis) + train_images/<id_code>.png",
    "eyepacs": "Kaggle EyePACS DR: trainLabels.csv (image, level) + train/<patient>_<left|right>.jpeg",
    "brset": "BRSET (PhysioNet): labels.csv with DR_ICDR, patient_sex, exam_eye + fundus_photos/<id>.jpg",
    "rsna": "RSNA Pneumonia stage 2: stage_2_train_labels.csv (patientId, Target) + stage_2_train_images/",
    "mimic": "MIMIC-CXR-JPG 2.x: files/pXX/pNNNNNNNN/sNNNNNNNN/<dicom_id>.jpg + metadata/chexpert CSVs (.gz)",
    "chexpert": "CheXpert v1.0 (-small): train.csv / valid.csv (Path, Sex, Age, findings) + "
                "train|valid/patientNNNNN/studyN/*.jpg",
    "nih": "NIH ChestX-ray14: Data_Entry_2017(_v2020).csv (Image Index, Finding Labels, Patient ID) + "
           "images/ or images_0NN/images/",
    "generic": "any folder described by a labels CSV: labels_csv, image_col [, label_cols] [, patient_col]",
}


# --------------------------------------------------------------------------------------------
# Detection and entry point

_LOOKED_FOR = {
    "medanon": "dataset.yaml with 'format: medanon-dataset'",
    "rsna": "stage_2_train_labels.csv",
    "mimic": "mimic-cxr-2.0.0-metadata.csv(.gz)",
    "chexpert": "train.csv or valid.csv with Path and Frontal/Lateral columns",
    "nih": "Data_Entry_2017_v2020.csv or Data_Entry_2017.csv",
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
    except Exception:  # unreadable/invalid YAML: not detected (layout='medanon' says why)
        return False
    return isinstance(meta, dict) and meta.get("format") == MEDANON_FORMAT


def _detectors() -> list[tuple[str, Callable[[Path], bool]]]:
    return [
        ("medanon", _is_medanon),
        ("rsna", lambda r: (r / "stage_2_train_labels.csv").is_file()),
        ("mimic", lambda r: first_existing(r, MIMIC_META) is not None),
        ("chexpert", is_chexpert),
        ("nih", lambda r: first_existing(r, NIH_TABLES) is not None),
        ("eyepacs", lambda r: (r / "trainLabels.csv").is_file()),
        ("brset", lambda r: brset_csv(r) is not None),
        ("aptos", lambda r: (r / "train.csv").is_file()
                            and has_columns(r / "train.csv", ["id_code", "diagnosis"])),
    ]


def _check_root(root: Path | str) -> Path:
    root = Path(root).expanduser().absolute()
    if not root.exists():
        raise DataError(f"dataset folder {root} does not exist", files=[root],
                        fix="check the path you passed")
    if not root.is_dir():
        raise DataError(f"{root} is not a folder", files=[root],
                        fix="pass the dataset's folder (for a CSV alone: layout='generic', labels_csv=FILE)")
    return root


def detect_layout(root: Path) -> str:
    """The layout of a dataset folder, from the files at its top level."""
    root = _check_root(root)
    found = _identify(root)
    if len(found) > 1:                 # two datasets' tables in one folder: reading one would ignore the other
        raise DataError(f"{root} holds the identifying files of several layouts ({', '.join(found)}): medanon will "
                        "not guess which images and patient ids to read", files=[root],
                        fix=f"pass layout=NAME (one of {', '.join(found)}), or give each dataset its own folder")
    if found:
        return found[0]
    looked = "; ".join(f"{name}: {what}" for name, what in _LOOKED_FOR.items())
    below = _layouts_below(root)
    raise DataError(f"cannot tell the layout of {root}: none of the files that identify a layout are there "
                    f"(looked for {looked})" + (f"; a folder in it holds a dataset ({below})" if below else ""),
                    files=[root], fix=(f"pass that folder instead ({below.split(':')[0]})" if below else
                                       f"pass layout=NAME (one of {', '.join(LAYOUTS)}), or {GENERIC_FIX}"))


def _identify(folder: Path) -> list[str]:
    """The layouts whose identifying files ``folder`` holds; a ``dataset.yaml`` alone (there but unreadable: the
    medanon reader names what is wrong) makes it medanon's."""
    found = [name for name, test in _detectors() if test(folder)]
    return found or (["medanon"] if (folder / "dataset.yaml").is_file() else [])


def _layouts_below(root: Path, limit: int = 50) -> str:
    """The first of ``root``'s sub-folders (up to ``limit``, by name) whose files identify a layout, as
    "PATH: LAYOUT", or "": a user who passes the folder above a download (chexpert/ holding CheXpert-v1.0-small/)."""
    try:
        subs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))[:limit]
    except OSError:
        return ""
    for sub in subs:
        found = _identify(sub)
        if found:
            return f"{sub}: the {' / '.join(found)} layout"
    return ""


_READERS: dict[str, Callable[[Path], Scan]] = {
    "medanon": scan_medanon, "aptos": scan_aptos, "eyepacs": scan_eyepacs, "brset": scan_brset,
    "rsna": scan_rsna, "mimic": scan_mimic, "chexpert": scan_chexpert, "nih": scan_nih,
}


def scan(root: Path, layout: str = "auto", *, generic: GenericOptions | None = None,
         allow_outside: bool = False) -> Scan:
    """List the images of a dataset folder with labels and patient ids, without decoding pixels.

    The one place where medanon decides which files a dataset may name: a file (or mask) whose real path
    lies outside the dataset folder and outside ``images_dir`` becomes an ``outside`` problem unless
    ``allow_outside``; symlinks, to files or folders, that resolve inside are followed like any file."""
    sc = _scan(root, layout, generic=generic)
    if not allow_outside:
        confine(sc)
    return sc


def confine(sc: Scan) -> None:
    """Move the records of ``sc`` whose image or mask resolves outside its allowed folders to its problems."""
    for f in sc.declared:
        if not _inside(Path(f).resolve(), [Path(sc.root).resolve()]):
            raise DataError(f"{Path(sc.root) / 'dataset.yaml'} names {f}, which resolves to {Path(f).resolve()}, "
                            f"outside the dataset folder {sc.root}", files=[f],
                            fix="move the file into the dataset folder, or pass allow_outside=True if it is meant "
                                "to be read")
    roots = [Path(r).resolve() for r in [sc.root, *sc.allowed_roots]]
    kept = []
    for rec in sc.records:
        bad = [p for p in (rec.path, rec.mask_path) if p is not None and not _inside(p.resolve(), roots)]
        if not bad:
            kept.append(rec)
            continue
        for p in bad:
            real = p.resolve()
            how = "leads through a symlink to " if real != Path(os.path.abspath(p)) else "is "
            sc.problems.append(Problem(_shown(p, sc.root), "outside",
                                       f"{how}{real}, outside the dataset folder {sc.root}"))
    sc.records = kept


def _inside(real: Path, roots: list[Path]) -> bool:
    return any(real == r or real.is_relative_to(r) for r in roots)


def _shown(p: Path, root: Path) -> str:
    return Path(os.path.relpath(os.path.abspath(p), os.path.abspath(root))).as_posix()


def _scan(root: Path, layout: str = "auto", *, generic: GenericOptions | None = None) -> Scan:
    root = _check_root(root)
    name = (layout or "auto").strip().lower()
    if name == "auto":
        name = "generic" if generic is not None else detect_layout(root)
    if name not in LAYOUTS:
        raise DataError(f"unknown layout {layout!r} for {root}", files=[root],
                        fix=f"pass layout='auto' or one of {', '.join(LAYOUTS)}")
    if name == "generic":
        if generic is None:
            raise DataError(f"the generic layout needs a description of {root}", files=[root],
                            fix="pass labels_csv=FILE.csv, image_col=COLUMN [, label_cols=...] "
                                "[, patient_col=COLUMN]")
        return scan_generic(root, generic)
    if generic is not None:
        raise DataError(f"labels_csv and image_col describe a generic layout, but layout={name!r} was asked for "
                        f"({root})", files=[root],
                        fix=f"drop labels_csv, image_col and label_cols to read {name}, "
                            "or pass layout='generic'")
    return _READERS[name](root)
