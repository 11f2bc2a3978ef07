"""The audit's check of a k-Same release's clusters, from its private mapping: the privacy statement of ksalsa,
kcentroid, kpixel and kpca says that every cluster holds all images of at least k patients and that each patient is
in exactly one cluster. A patient in two clusters could be differenced out of them (docs/ksalsa.md); the per-record
count of people (``audit.py``) cannot see it.

A cluster is a set of source images: the records that stand for the same set are one cluster's ``views`` (latent
augmentation releases several records of one average), so views are not mistaken for overlaps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

CLUSTERED = ("ksalsa", "kcentroid", "kpixel", "kpca")   # the methods whose statement promises disjoint clusters


def check_clusters(rep, records: Mapping[str, Mapping[str, Any]], *, method: str | None, views: int = 1,
                   patient_of: Callable[[str], str] | None = None) -> None:
    """Add the cluster checks of a k-Same release to ``rep`` (an :class:`.audit.AuditReport`): each source image in
    one cluster, each cluster released as ``views`` records, each patient in exactly one cluster. ``records``: the
    mapping's records (``{image: {"sources": [...], "patients": [...]}}``); ``patient_of``: a source image's patient
    id from the source dataset (else the mapping's own patient ids are used). Other methods: nothing is checked."""
    if method not in CLUSTERED or not records:
        return
    clusters: dict[frozenset, list[str]] = {}
    patients: dict[frozenset, set] = {}
    for img, v in records.items():
        key = frozenset(v.get("sources") or ())
        clusters.setdefault(key, []).append(img)
        who = {patient_of(s) for s in key} if patient_of is not None else set(v.get("patients") or ())
        patients.setdefault(key, set()).update(who)
    in_two = sorted(s for s, n in Counter(s for key in clusters for s in key).items() if n > 1)
    rep.add("each source image is in one cluster (mapping)", not in_two,
            f"{len(in_two)} source images in more than one cluster" if in_two
            else f"{len(clusters)} clusters")
    wrong = {len(imgs) for imgs in clusters.values() if len(imgs) != views}
    rep.add(f"each cluster is released as {views} record{'s' if views != 1 else ''} (mapping)", not wrong,
            f"{sum(len(i) != views for i in clusters.values())} clusters give "
            f"{', '.join(str(n) for n in sorted(wrong))} records" if wrong else "")
    split = sorted(p for p, n in Counter(p for who in patients.values() for p in who).items() if n > 1)
    rep.add("each patient is in exactly one cluster (mapping)", not split,
            f"{len(split)} patients in more than one cluster: they could be differenced out of them" if split
            else f"{len({p for who in patients.values() for p in who})} patients")
