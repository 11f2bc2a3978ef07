"""Canonical label names and their encodings, shared by every layout reader.

Every label value in medanon is a float; ``nan`` means "not recorded". Categorical labels
are stored as the index of their class in :data:`LABELS`, so datasets collate into tensors
and downstream classifiers need no per-dataset glue. Layout readers translate their own
column names and codes into these (for example EyePACS ``level`` -> ``grade``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NAN = float("nan")


@dataclass(frozen=True)
class LabelSpec:
    name: str                                   # canonical column name
    kind: str                                   # "ordinal" | "binary" | "categorical" | "continuous"
    classes: tuple[str, ...] = ()               # class names, index = encoded value (not for continuous)
    description: str = ""

    def encode(self, raw: object) -> float:
        """Turn a raw CSV value into the canonical float (``nan`` if missing).

        Raises ``ValueError`` with a message naming the label if the value is not understood.
        """
        if raw is None:
            return NAN
        if isinstance(raw, float) and math.isnan(raw):
            return NAN
        text = str(raw).strip()
        if text == "" or text.lower() in {"nan", "na", "n/a", "none", "null", "unknown", "?"}:
            return NAN
        if self.kind == "continuous":
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"label {self.name!r}: {text!r} is not a number") from None
            if not math.isfinite(value):
                raise ValueError(f"label {self.name!r}: {text!r} is not a finite number "
                                 "(leave the cell empty for a missing value)")
            return in_range(self.name, value, text)
        lowered = [c.lower() for c in self.classes]
        if text.lower() in lowered:
            return float(lowered.index(text.lower()))
        aliases = _ALIASES.get(self.name, {})
        if text.lower() in aliases:
            return float(aliases[text.lower()])
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"label {self.name!r}: {text!r} is not one of {list(self.classes)}") from None
        if self.name in _SIGNED and value in (-1.0, 0.0, 1.0):
            return value
        if value != int(value) or not 0 <= value < len(self.classes):
            raise ValueError(f"label {self.name!r}: {text!r} is outside 0..{len(self.classes) - 1}")
        return value

    def decode(self, value: float) -> str:
        """Human-readable class name (or the number for continuous labels)."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "n/a"
        if self.kind == "continuous":
            return f"{value:g}"
        if self.name in _FINDINGS:
            return {1.0: "positive", 0.0: "negative", -1.0: "uncertain"}.get(float(value), f"{value:g}")
        return self.classes[int(value)]


# CheXpert-style findings (MIMIC-CXR-JPG): 1 positive, 0 negative, -1 uncertain, nan not mentioned.
CHEXPERT_FINDINGS = (
    "atelectasis", "cardiomegaly", "consolidation", "edema", "enlarged_cardiomediastinum", "fracture",
    "lung_lesion", "lung_opacity", "no_finding", "pleural_effusion", "pleural_other", "pneumonia",
    "pneumothorax", "support_devices",
)

# The findings of NIH ChestX-ray14 that CheXpert does not name (its Atelectasis, Cardiomegaly, Consolidation, Edema,
# Effusion, Pneumonia and Pneumothorax are CHEXPERT_FINDINGS'): 1 present, 0 absent (text-mined, none uncertain).
NIH_ONLY_FINDINGS = ("emphysema", "fibrosis", "hernia", "infiltration", "mass", "nodule", "pleural_thickening")
NIH_FINDINGS = ("atelectasis", "cardiomegaly", "consolidation", "edema", "pleural_effusion", "pneumonia",
                "pneumothorax", *NIH_ONLY_FINDINGS)

LABELS: dict[str, LabelSpec] = {
    s.name: s
    for s in [
        LabelSpec("grade", "ordinal", ("0", "1", "2", "3", "4"),
                  "diabetic retinopathy grade, ICDR scale: 0 none, 1 mild, 2 moderate, 3 severe NPDR, 4 PDR"),
        LabelSpec("sex", "binary", ("F", "M"), "0 female, 1 male"),
        LabelSpec("age", "continuous", (), "age in years at acquisition"),
        LabelSpec("laterality", "binary", ("L", "R"), "0 left eye, 1 right eye"),
        LabelSpec("view", "categorical", ("PA", "AP", "LATERAL", "LL", "OTHER"), "chest X-ray view position"),
        LabelSpec("marker_block", "binary", ("0", "1"), "phantom ground truth: a burned-in identifying block"),
        LabelSpec("situs_inversus", "binary", ("0", "1"),
                  "phantom ground truth: mirrored anatomy (heart on the right)"),
        LabelSpec("neovascularisation", "binary", ("0", "1"), "phantom ground truth: new vessels drawn (PDR)"),
        *[LabelSpec(f, "ordinal" if f != "pneumonia" else "binary", ("0", "1"),
                    "finding; MIMIC/CheXpert also uses -1 for uncertain") for f in CHEXPERT_FINDINGS],
        *[LabelSpec(f, "binary", ("0", "1"), "finding (NIH ChestX-ray14)") for f in NIH_ONLY_FINDINGS],
    ]
}

# Plausible ranges of continuous labels: a value outside is an error in the CSV (a row problem naming the cell,
# skipped with skip_bad), never silently kept or turned into nan. Non-finite values (inf, -inf) always are.
_RANGES: dict[str, tuple[float, float]] = {"age": (0.0, 130.0)}

# Labels whose source data legitimately uses -1 (CheXpert "uncertain").
_SIGNED = set(CHEXPERT_FINDINGS)
_FINDINGS = _SIGNED | set(NIH_ONLY_FINDINGS)    # shown as positive / negative (/ uncertain)

_ALIASES: dict[str, dict[str, int]] = {
    "sex": {"female": 0, "f": 0, "woman": 0, "male": 1, "m": 1, "man": 1},
    "laterality": {"left": 0, "l": 0, "os": 0, "right": 1, "r": 1, "od": 1},
    "view": {"postero-anterior": 0, "antero-posterior": 1, "lat": 2},
}


def in_range(name: str, value: float, text: str | None = None) -> float:
    """``value`` if it lies in the plausible range of the continuous label ``name`` (an age of 0-130 years), else a
    ``ValueError`` naming it (``text``: as the source wrote it). Layouts that parse a value their own way (a DICOM
    age string, a top-coded "90+") check it here, as a labels CSV's cell is.

    >>> in_range("age", 51.0)
    51.0
    >>> in_range("age", 148.0)
    Traceback (most recent call last):
    ValueError: label 'age': 148 is outside 0..130
    """
    lo, hi = _RANGES.get(name, (-math.inf, math.inf))
    if not lo <= value <= hi:
        raise ValueError(f"label {name!r}: {text if text is not None else f'{value:g}'} is outside {lo:g}..{hi:g}")
    return value


def spec(name: str) -> LabelSpec:
    """The spec of a canonical label, or a continuous spec for a name medanon does not know."""
    return LABELS.get(name, LabelSpec(name, "continuous", (), "user-defined label"))


def encode_labels(raw: dict[str, object]) -> dict[str, float]:
    """Encode a mapping of canonical label name -> raw value."""
    return {name: spec(name).encode(value) for name, value in raw.items()}
