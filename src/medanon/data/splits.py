"""Patient-level train/val/test splits, stratified by a label, so no patient crosses splits."""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from medanon.data.records import Record
from medanon.errors import ConfigError
from medanon.fsutil import atomic_write_text
from medanon.output_inventory import SPLITS_HEADER

SPLITS = ("train", "val", "test")


def patient_strata(records: Sequence[Record], stratify: str) -> dict[str, str]:
    """Stratum of each patient: the highest value of ``stratify`` over their records (the worst DR
    grade, pneumonia if any image shows it), or ``"n/a"`` when the label is missing everywhere."""
    worst: dict[str, float] = {}
    for r in records:
        v = r.labels.get(stratify, math.nan) if stratify else math.nan
        prev = worst.get(r.patient_id, math.nan)
        worst[r.patient_id] = v if math.isnan(prev) else (prev if math.isnan(v) else max(prev, v))
    return {p: ("n/a" if math.isnan(v) else f"{v:g}") for p, v in worst.items()}


def check_stratify(stratify: str) -> None:
    """Refuse a canonical continuous label (age) as ``stratify`` (needs no data: checked before any is read): each value
    would be a stratum of its own, each cut to whole patients, and the splits would miss their fractions."""
    from medanon.data.labels import LABELS

    if stratify in LABELS and LABELS[stratify].kind == "continuous":
        raise ConfigError(f"stratify={stratify!r} is a continuous label: every value "
                          "would be a stratum of its own, each cut to whole patients, and the splits would miss their "
                          "fractions", fix="stratify by a label with classes (grade, sex, pneumonia, ...), or by "
                                           "nothing (stratify='')")


VAL = TEST = 0.15                               # the default shares of patients held out for validation and test


def split_patients(records: Sequence[Record], *, val: float = VAL, test: float = TEST, stratify: str = "",
                   seed: int = 0) -> dict[str, str]:
    """Assign every patient to train, val or test.

    Within each stratum the patients are shuffled (seeded) and cut at the cumulative fractions
    ``test`` and ``test + val`` with a random offset, so every stratum is split in the same
    proportions up to one patient and the totals match the fractions up to one patient per stratum.
    Returns patient_id -> split name.
    """
    if not (0 <= val < 1 and 0 <= test < 1 and val + test < 1):
        raise ConfigError(f"split fractions val={val}, test={test} must be >= 0 and sum below 1",
                          fix="e.g. val=0.15, test=0.15")
    check_stratify(stratify)
    strata = patient_strata(records, stratify)
    groups: dict[str, list[str]] = defaultdict(list)
    for p, s in strata.items():
        groups[s].append(p)
    rng = np.random.default_rng(seed)
    out: dict[str, str] = {}
    for s in sorted(groups):
        patients = sorted(groups[s])
        order = rng.permutation(len(patients))
        offset = rng.random()
        n = len(patients)
        for rank, idx in enumerate(order):
            u = (rank + offset) / n               # stratified systematic sampling in [0, 1)
            out[patients[idx]] = "test" if u < test else "val" if u < test + val else "train"
    return out


def check_train_left(assignment: dict[str, str], *, val: float, test: float) -> None:
    """A split written for use leaves patients to train on (a split file with an empty train part is refused)."""
    if assignment and "train" not in assignment.values():
        raise ConfigError(f"val={val}, test={test} leave no patient of {len(assignment)} for training",
                          fix="lower val= and test= (e.g. 0.15 each), or give more patients")


def split_shortfalls(patients: dict[str, int], fractions: dict[str, float], stratify: str = "") -> list[str]:
    """Where a split of ``patients`` (split -> patient count) misses the asked ``fractions`` by a whole patient
    or more, in words: few patients per stratum can only be cut to the nearest patient in each."""
    n = sum(patients.values())
    out = []
    for name, frac in fractions.items():
        got, want = patients.get(name, 0), frac * n
        if abs(got - want) >= 1 or (frac > 0 and got == 0):
            out.append(f"the {name} split has {got} of {n} patients ({got / n:.0%}) where {name}={frac:g} asked for "
                       f"{want:.1f}: " + (f"each stratum of stratify={stratify!r}" if stratify else "the patients")
                       + (" can only be cut to whole patients, and the cuts' roundings add up over strata; use "
                          "fewer strata (stratify='' to stratify by nothing) or more patients per stratum"
                          if stratify else " can only be cut to whole patients; use more patients")
                       + ", or check the split before using it")
    return out


def split_records(records: Sequence[Record], **kwargs) -> dict[str, list[Record]]:
    """Records grouped by split (every record of a patient lands in the patient's split)."""
    assignment = split_patients(records, **kwargs)
    out: dict[str, list[Record]] = {s: [] for s in SPLITS}
    for r in records:
        out[assignment[r.patient_id]].append(r)
    return out


def file_bytes(record: Record) -> str:
    """The size of ``record``'s image file in bytes ('' for an image held in memory): a splits CSV records it, so
    that the CSV of another dataset whose files have the same names is refused when it is read."""
    import os

    try:
        return str(os.stat(record.path).st_size)
    except (OSError, TypeError, ValueError):
        return ""


def write_splits_csv(path, records: Sequence[Record], assignment: dict[str, str]) -> None:
    """``record_id,patient_id,split,bytes`` for every record (a private file: it holds patient ids); ``bytes`` is
    the image file's size (:func:`file_bytes`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(SPLITS_HEADER)
    for r in records:
        w.writerow([r.record_id, r.patient_id, assignment[r.patient_id], file_bytes(r)])
    atomic_write_text(path, buf.getvalue())


SPLIT_CHOICES = ("all", "train", "val", "test")


def select_split(ds, split: str, *, splits_csv=None, seed: int = 0):
    """The records of ``ds`` in the patient-level ``split`` (``all``: ``ds`` itself), from the splits CSV
    ``splits_csv`` (``record_id, patient_id, split``, as `medanon data split` writes) or recomputed as the
    evaluation recomputes it (stratified by the modality's utility label, ``seed``). A release of one split
    is then evaluated against the same CSV (or seed), its other patients held out."""
    import numpy as np

    from medanon.data.dataset import subset
    from medanon.errors import ConfigError

    if split not in SPLIT_CHOICES:
        raise ConfigError(f"split={split!r} is not one of {', '.join(SPLIT_CHOICES)}")
    if split == "all":
        if splits_csv is not None:
            raise ConfigError("splits= is only used with split='train', 'val' or 'test'",
                              fix="pass split= the part to release, e.g. split='train'")
        return ds
    if splits_csv is not None:
        from medanon.evaluate.inputs import _read_splits_csv

        names = _read_splits_csv(splits_csv, ds.records)
        made = {"split": split, "from": "splits file"}
    else:
        from medanon.release.labels import default_labels

        stratify = (default_labels(ds) or [""])[0]                # the utility label
        a = split_patients(ds.records, stratify=stratify, seed=seed)
        names = np.array([a[r.patient_id] for r in ds.records])
        made = split_made(split, seed=seed, val=VAL, test=TEST, stratify=stratify)
    rows = np.flatnonzero(names == split)
    if len(rows) == 0:
        from medanon.data.inputs import data_name

        raise ConfigError(f"the {split!r} split of {data_name(ds)} is empty",
                          fix="check the splits CSV, or release split='all'")
    part = subset(ds, rows.tolist())
    part.split_of = {r.record_id: str(n) for r, n in zip(ds.records, names, strict=True)}   # every record's split
    part.split_made = made
    return part


def split_made(split: str, *, seed: int, val: float, test: float, stratify: str) -> dict:
    """How the part ``split`` of a recomputed patient split was made (public settings, no patient): a release records
    it (``params.split``) so that an evaluation recomputing the split otherwise is refused even without the
    mapping."""
    return {"split": split, "seed": int(seed), "val": float(val), "test": float(test), "stratify": stratify}
