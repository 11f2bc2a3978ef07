"""Which labels a release publishes next to its images, for every method alike.

By default only the modality's utility label (DR ``grade`` for fundus, ``pneumonia`` for chest
X-rays), the one the downstream task needs. Anything else is released only when the user names it
(``--release-labels``); a label that is not in the dataset is an error, and a sensitive one (sex,
age: the very attributes the attacks of ``medanon evaluate`` try to infer) is released with a
warning, because no method protects a label it publishes as it is.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from medanon.anonymize.privacy import LabelDisclosure
from medanon.errors import ConfigError, user_stacklevel

UTILITY_LABELS = {"fundus": ("grade",), "xray": ("pneumonia",)}
SENSITIVE_LABELS = ("sex", "age")


def default_labels(dataset) -> list[str]:
    """The utility label of the dataset's modality, if the dataset has it."""
    return [n for n in UTILITY_LABELS.get(dataset.modality or "", ()) if n in dataset.label_names]


def parse_label_list(text: str | None) -> list[str] | None:
    """``"grade, sex"`` -> ``["grade", "sex"]``; None (option not given) stays None."""
    if text is None:
        return None
    return [s.strip() for s in text.split(",") if s.strip()]


RESERVED_COLUMNS = ("image", "n_sources", "n_people")   # labels.csv's own columns, before the released labels


def release_labels(dataset, labels: str | Sequence[str] | None) -> list[str]:
    """The labels to release: ``labels`` (a list or a comma-separated string) checked against the dataset,
    or the default; warns for each sensitive label the user asked to release."""
    chosen = parse_label_list(labels) if isinstance(labels, str) else labels
    if chosen is None:
        return default_labels(dataset)
    if not isinstance(chosen, Sequence) or any(not isinstance(n, str) for n in chosen):
        raise ConfigError(f"release_labels={labels!r}: it takes label names (a list of strings or one "
                          "comma-separated string)", fix="pass e.g. release_labels=['grade'] or release_labels=[]")
    reserved = [n for n in chosen if n in RESERVED_COLUMNS or n.endswith("_counts") or not n.strip()
                or any(not c.isprintable() for c in n)]
    if reserved:
        raise ConfigError(f"release_labels={reserved!r}: a released label becomes a column of labels.csv, which "
                          f"has its own {', '.join(RESERVED_COLUMNS)} and <label>_counts columns (and a name must be "
                          "printable and not empty)", fix="rename the label in the labels= or labels CSV you give")
    unknown = [n for n in chosen if n not in dataset.label_names]
    if unknown:
        from medanon.data.inputs import data_name

        raise ConfigError(f"release_labels={','.join(unknown)}: not label(s) of {data_name(dataset)}",
                          fix=f"choose from {', '.join(dataset.label_names) or '(the dataset has no labels)'}")
    ids = [n for n in chosen if _is_patient_id(dataset, n)]
    if ids:
        raise ConfigError(f"release_labels={','.join(ids)}: the label equals the patient id on every image, so "
                          "releasing it would name each record's patients", fix="leave it out of release_labels")
    leaked = [n for n in chosen if n in SENSITIVE_LABELS]
    if leaked:
        them = "it" if len(leaked) == 1 else "them"
        warnings.warn(f"releasing {', '.join(leaked)} next to the images hands {them} to any attacker as is: no "
                      "method protects a label it publishes (the attribute-inference attack of `medanon evaluate` "
                      "uses sex as its target); the default is the utility label only", LabelDisclosure,
                      stacklevel=user_stacklevel())
    return list(dict.fromkeys(chosen))


def _is_patient_id(dataset, name: str) -> bool:
    """Whether label ``name`` is the patient id itself (e.g. a medical record number declared both as the patient
    column and as a label): equal to it, as a number, on every image that has it."""
    seen = False
    for r in getattr(dataset, "records", ()):
        v = r.labels.get(name)
        if v is None or v != v:                          # missing (nan)
            continue
        try:
            if float(str(r.patient_id).strip()) != float(v):
                return False
        except ValueError:                               # a non-numeric patient id is no number label
            return False
        seen = True
    return seen
