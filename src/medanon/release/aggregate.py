"""How the labels of the sources behind one released record become that record's labels.

Labels are aggregated **per patient**, not per image: each patient first gets one value (their
worst ordinal grade, 1 if any of their images is positive for a binary label, their most frequent
categorical value, their mean continuous value), then every patient counts once. A patient with
ten images does not outvote four patients with one image each. Pass the source
:class:`~medanon.data.records.Record` objects (or label dicts with ``patients=``); plain label dicts
without patient ids are treated as one patient each.

Rule across the patients of a record (documented in the release manifest):

- ordinal labels (DR ``grade``): the most frequent class; a tie goes to the **higher** class, so
  an average of mild and moderate eyes is not released as healthier than its members;
- binary labels (``pneumonia``, ``sex``, findings): the most frequent class; a tie goes to 1;
- other categorical labels: the most frequent class; a tie goes to the lowest class index;
- continuous labels (``age``): the mean, rounded to 0.1.

A label of the eye rather than the person (``laterality``, :data:`PER_EYE`) is not reduced to one value per
patient: a patient photographed in both eyes counts once for each side they have (two such patients count
``0:2;1:2``, which says that both have both eyes photographed), and the record's value is the side most of its
patients have, a tie to 1 (right).

Missing values (``nan``) are left out; a label missing in every source stays ``nan``. The class
counts of *patients* are released next to the value (``grade_counts`` = ``"0:3;2:2"``), so a user can
train on soft labels instead of the majority.

Homogeneity: when every patient of a record has the same value (always so for the stratified label
of a ``stratify=`` release), the value and its counts disclose each member's value to anyone who
knows a patient is in the record. :func:`homogeneous_labels` finds such records and
:func:`warn_homogeneity` raises :class:`~medanon.anonymize.privacy.LabelHomogeneity`.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from medanon.anonymize.privacy import LabelHomogeneity
from medanon.data.labels import spec
from medanon.errors import user_stacklevel

PER_EYE = frozenset({"laterality"})    # labels of an eye, not of a person: a patient can have both values

RULE = ("per patient first (ordinal: the patient's worst value; binary: 1 if any image is 1; categorical: the "
        "patient's most frequent; continuous: the patient's mean; laterality: each side the patient has, so a patient "
        "with both eyes counts once for each), then over the record's patients, each once: "
        "ordinal: majority, ties to the higher class; binary: majority, ties to 1; categorical: majority, "
        "ties to the lowest index; continuous: mean (0.1); missing values ignored; counts of patients released as "
        "<label>_counts")


def _split(sources: Sequence[Any], patients: Sequence[str] | None) -> tuple[list[Mapping[str, float]], list[str]]:
    """Label dicts and patient ids of ``sources`` (Records, or label dicts with ``patients`` or one patient each)."""
    values = [s.labels if hasattr(s, "labels") else s for s in sources]
    if patients is None:
        patients = [str(s.patient_id) if hasattr(s, "patient_id") else f"#{i}" for i, s in enumerate(sources)]
    if len(patients) != len(values):
        raise ValueError(f"{len(patients)} patient ids for {len(values)} label sets")
    return values, list(patients)


def _patient_value(kind: str, vals: list[float]) -> float:
    if kind == "continuous":
        return sum(vals) / len(vals)
    if kind in ("ordinal", "binary"):
        return max(vals)
    counts = Counter(vals)
    top = max(counts.values())
    return min(c for c, n in counts.items() if n == top)


def patient_values(sources: Sequence[Any], name: str, *, patients: Sequence[str] | None = None
                   ) -> dict[str, tuple[float, ...]]:
    """The values of label ``name`` each patient of ``sources`` has (patients with no value left out): one value by
    the per-patient rule, or for a :data:`PER_EYE` label each distinct value, sorted."""
    values, pids = _split(sources, patients)
    kind = spec(name).kind
    per: dict[str, list[float]] = {}
    for v, pid in zip(values, pids, strict=True):
        if name in v and not math.isnan(float(v[name])):
            per.setdefault(pid, []).append(float(v[name]))
    if name in PER_EYE:
        return {pid: tuple(sorted(set(vals))) for pid, vals in per.items()}
    return {pid: (_patient_value(kind, vals),) for pid, vals in per.items()}


def aggregate_labels(values: Sequence[Any], names: Sequence[str], *,
                     patients: Sequence[str] | None = None) -> dict[str, object]:
    """Aggregate ``names`` over the sources, per patient (see the module docstring). Returns the value and
    ``<name>_counts`` (counts of patients) for each name.

    ``values``: the source :class:`~medanon.data.records.Record` objects, or their label dicts with the
    matching ``patients`` ids (label dicts without ids count as one patient each).
    """
    out: dict[str, object] = {}
    for name in names:
        sp = spec(name)
        present = [v for vals in patient_values(values, name, patients=patients).values() for v in vals]
        if sp.kind == "continuous":
            out[name] = round(sum(present) / len(present), 1) if present else math.nan
            continue
        counts = Counter(present)
        if not counts:
            out[name], out[f"{name}_counts"] = math.nan, ""
            continue
        top = max(counts.values())
        tied = sorted(c for c, n in counts.items() if n == top)
        out[name] = tied[-1] if sp.kind in ("ordinal", "binary") else tied[0]
        out[f"{name}_counts"] = ";".join(f"{c:g}:{n}" for c, n in sorted(counts.items()))
    return out


def homogeneous_labels(sources: Sequence[Any], names: Sequence[str], *,
                       patients: Sequence[str] | None = None) -> list[str]:
    """The non-continuous labels among ``names`` on which every patient of ``sources`` (at least two) agrees:
    released with the record, such a label discloses each member's value. For a :data:`PER_EYE` label: a side every
    patient has (its count is the number of patients: every member has that eye photographed)."""
    out = []
    for name in names:
        if spec(name).kind == "continuous":
            continue
        per = list(patient_values(sources, name, patients=patients).values())
        if len(per) >= 2 and set(per[0]).intersection(*per[1:]):
            out.append(name)
    return out


def warn_homogeneity(records: Sequence[Sequence[Any]], names: Sequence[str]) -> dict[str, int]:
    """Count the records (each a list of source Records) whose released label is uniform over their patients,
    per label; warn :class:`~medanon.anonymize.privacy.LabelHomogeneity` when any is. Returns the counts."""
    counts = {name: 0 for name in names}
    for sources in records:
        for name in homogeneous_labels(sources, names):
            counts[name] += 1
    hit = {n: c for n, c in counts.items() if c}
    if hit:
        said = ", ".join(f"{n} in {c} of {len(records)} records" for n, c in hit.items())
        warnings.warn(f"homogeneous released labels: {said}. Every patient of such a record has the same value, so "
                      "the released label and its counts disclose each member's value to anyone who knows a patient "
                      "is in the record (k-anonymity does not prevent this; with stratify= it holds for every "
                      "record). Release fewer labels, or do not stratify on a sensitive one",
                      LabelHomogeneity, stacklevel=user_stacklevel())
    return counts
