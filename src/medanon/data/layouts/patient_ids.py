"""Checks of the patient ids a layout read, before any privacy claim rests on them: one id per person, one person
per id. Every k, every per-patient ε and every patient-level split counts people by these ids, so an id that is a
missing-value placeholder, one person under two spellings of an id, or one id that seems to hold two people is
said, never silently kept.

- a placeholder (``NA``, ``unknown``, ...; as a label cell would be blank) is a problem of its row: it would join
  unrelated people into one "patient";
- two spellings that differ only in case, surrounding zeros of a number or a trailing ``.0`` (``10``, ``010``,
  ``10.0``; ``P1``, ``p1``) are a problem of every row concerned: medanon cannot tell whether they are one person;
- one id whose images carry both sexes, or lie in two split-named folders (``Training/``, ``Validation/``), is a
  :class:`~medanon.data.layouts.common.LayoutWarning`: a likely collision of two people's ids (ids restarting in
  each part, as RFMiD's do), which the user must resolve.

Package-internal (see :mod:`medanon.data.layouts`).
"""

from __future__ import annotations

import math
import re
import warnings
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from medanon.data.layouts.collect import is_blank
from medanon.data.layouts.common import LayoutWarning
from medanon.errors import user_stacklevel

if TYPE_CHECKING:
    from medanon.data.layouts.collect import Collector

_NUMBER = re.compile(r"0*(\d+?)(?:\.0+)?")
_SPLIT_FOLDERS = {"train", "training", "val", "valid", "validation", "test", "testing", "eval", "evaluation"}


def id_key(patient_id: str) -> str:
    """The spelling-free form of a patient id: lower case, and a number without leading zeros or a ``.0``.

    >>> [id_key(s) for s in ("10", "010", "10.0", "P1", "p1", "0")]
    ['10', '10', '10', 'p1', 'p1', '0']
    """
    text = patient_id.strip().lower()
    m = _NUMBER.fullmatch(text)
    return m[1] if m else text


def spelled_apart(ids: Iterable[str]) -> list[set[str]]:
    """The groups of two or more distinct ids that :func:`id_key` makes one: one person or several?

    >>> [sorted(ids) for ids in spelled_apart(["10", "010", "P1", "p1", "P2"])]
    [['010', '10'], ['P1', 'p1']]
    """
    spellings: dict[str, set[str]] = defaultdict(set)
    for i in ids:
        spellings[id_key(i)].add(i)
    return [s for _, s in sorted(spellings.items()) if len(s) > 1]


def both_sexes(pairs: Iterable[tuple[str, float]]) -> list[str]:
    """The ids whose images (``(patient id, sex)`` pairs, sex nan where unknown) carry both sexes, sorted."""
    sexes: dict[str, set[float]] = defaultdict(set)
    for pid, sex in pairs:
        if not math.isnan(sex):
            sexes[pid].add(sex)
    return sorted(p for p, s in sexes.items() if len(s) > 1)


def check_patient_ids(col: Collector) -> None:
    """Mark the rows of ``col`` whose patient id is a placeholder or is spelled two ways (problems, the rows left
    out), and warn of ids that hold images of both sexes. Nothing is checked where the layout has no patient ids
    (each image is its own "patient" and says so)."""
    if not col.patients_known:
        return
    entries = [e for e in col.entries.values() if not e.bad]
    for e in entries:
        if is_blank(e.patient_id):
            col.problem(e.path, "label", f"{col.row_of(e)}: the patient id {e.patient_id!r} is a "
                                         "missing-value placeholder, which would make unrelated people one patient; "
                                         "give the row its patient's id, or leave the image out")
            e.bad = True
    clashing = {i for ids in spelled_apart(e.patient_id for e in entries if not e.bad) for i in ids}
    by_key: dict[str, list] = defaultdict(list)            # spelling-free id -> its rows (one pass, not per clash)
    for e in entries:
        if not e.bad and e.patient_id in clashing:
            by_key[id_key(e.patient_id)].append(e)
    for rows in by_key.values():
        ids = {e.patient_id for e in rows}
        for e in rows:
            col.problem(e.path, "label", f"{col.row_of(e)}: patient id {e.patient_id!r} is also "
                                         f"spelled {' / '.join(repr(i) for i in sorted(ids - {e.patient_id}))} "
                                         "in other rows: one person or several? Write each person's id one way "
                                         "in the labels")
            e.bad = True
    parts: dict[str, set[str]] = defaultdict(set)          # id -> the split-named top folders its images are in
    for e in entries:
        top = e.rel.split("/", 1)[0].lower() if "/" in e.rel else ""
        if not e.bad and top in _SPLIT_FOLDERS:
            parts[e.patient_id].add(top)
    spanning = sorted(p for p, tops in parts.items() if len(tops) > 1)
    if spanning:
        where = ", ".join(sorted(parts[spanning[0]]))
        warnings.warn(f"{len(spanning)} patient id(s) of {_tables(col, entries, spanning)} have images in several "
                      f"split folders (e.g. {spanning[0]!r} in {where}): datasets that number their patients anew in "
                      "each part (RFMiD, for one) give two people one id there; prefix each part's ids if they are "
                      "different people", LayoutWarning, stacklevel=user_stacklevel())
    mixed = both_sexes((e.patient_id, e.labels.get("sex", math.nan)) for e in entries if not e.bad)
    if mixed:
        warnings.warn(f"{len(mixed)} patient id(s) of {_tables(col, entries, mixed)} hold images of both sexes "
                      f"(e.g. {mixed[0]!r}): two people's ids may collide (ids restarting in each sub-folder, for "
                      "instance); every per-patient guarantee counts them as one person. Check the patient column, "
                      "or prefix the ids of each part", LayoutWarning, stacklevel=user_stacklevel())


def _tables(col: Collector, entries: list, ids: list[str]) -> str:
    """The labels tables whose rows give these patient ids ("train.csv", "train.csv and valid.csv")."""
    wanted = set(ids)
    used = {e.table or col.csv_name for e in entries if not e.bad and e.patient_id in wanted}
    order = [*col.tables, col.csv_name]
    ranked = sorted(used, key=lambda t: (order.index(t) if t in order else len(order), t))
    return " and ".join(ranked) or col.csv_name
