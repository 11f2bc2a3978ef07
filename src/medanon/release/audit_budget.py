"""The audit's check of a differentially private release's per-patient budget, from its private mapping.

An ε-LDP release (DP-GLOW, LDP-image) protects each image at ``epsilon_image`` and a patient with ``n`` released
images at ``n × epsilon_image`` (basic composition); its statement gives the most images one patient has
(``max_images_per_patient``) and that patient's budget (``epsilon_patient_max``). Both are recounted here from the
mapping: a statement that understates them (a patient with more images than it says, e.g. both eyes photographed
twice) claims more protection than the release gives.

>>> from types import SimpleNamespace
>>> rep = SimpleNamespace(checks=[], add=lambda name, ok, detail="": rep.checks.append((name, ok, detail)))
>>> recs = {f"images/{i}.png": {"sources": [f"s{i}"], "patients": ["p1" if i < 4 else "p2"]} for i in range(6)}
>>> check_patient_budget(rep, {"epsilon_image": 2.0, "max_images_per_patient": 2, "epsilon_patient_max": 4.0}, recs)
>>> rep.checks[-1][1], rep.checks[-1][2]
(False, 'a patient has 4 released images (the statement: 2), so epsilon per patient is up to 8 (the statement: 4)')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

CHECK = "the per-patient budget covers the most images one patient has (mapping)"


def check_patient_budget(rep, privacy: Mapping[str, Any] | None, records: Mapping[str, Mapping[str, Any]], *,
                         patient_of: Callable[[str], str] | None = None) -> None:
    """Add the per-patient budget check to ``rep`` (an :class:`.audit.AuditReport`) where ``privacy`` states a
    numeric ``max_images_per_patient`` and ``epsilon_image``: the most source images of one patient among the
    records (``{image: {"sources": [...], "patients": [...]}}``), each source's patient from ``patient_of`` (the
    source dataset) or the record's own single patient, against the statement. Other releases: nothing is checked."""
    privacy = privacy or {}
    stated, eps = privacy.get("max_images_per_patient"), privacy.get("epsilon_image")
    if _number(eps) and stated is not None and not _number(stated) and patient_of is not None and records:
        most = _most_images(records, patient_of)        # "unknown: no patient ids", yet the source given has them
        rep.notes.append(f"the statement gives no number of images per patient ({stated}); by the patient ids of "
                         f"the source given, one patient has up to {most} released images, so epsilon per patient "
                         f"is up to {most * eps:g}")
    if not (_number(stated) and _number(eps)) or not records:
        return                          # no numeric statement (a non-DP release, or "unknown: no patient ids")
    most = _most_images(records, patient_of)
    if most is None:
        rep.notes.append(f"{CHECK}: not checked (a record of several patients, and no source dataset to tell whose "
                         "each source image is)")
        return
    if not most:
        return
    budget = privacy.get("epsilon_patient_max")
    ok = most <= stated and (not isinstance(budget, int | float) or budget >= most * eps * (1 - 1e-9))
    rep.add(CHECK, ok, f"{most} images at most" if ok else
            f"a patient has {most} released images (the statement: {stated}), so epsilon per patient is up to "
            f"{most * eps:g} (the statement: {budget:g})" if isinstance(budget, int | float) else
            f"a patient has {most} released images (the statement: {stated})")


def _most_images(records: Mapping[str, Mapping[str, Any]], patient_of: Callable[[str], str] | None) -> int | None:
    """The most source images of one patient among ``records``: each source's patient from ``patient_of``, else the
    record's own single patient; None where a record of several patients leaves a source's patient unknown."""
    images: dict[str, set[str]] = {}
    for v in records.values():
        patients = set(v.get("patients") or ())
        for s in v.get("sources") or ():
            who = patient_of(s) if patient_of is not None else (next(iter(patients)) if len(patients) == 1 else None)
            if who is None:
                return None
            images.setdefault(str(who), set()).add(str(s))
    return max((len(s) for s in images.values()), default=0)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)
