"""The audit's recomputation of a k-Same-Pixel release from its sources: a record's image must be the
patient-weighted average of the source images its mapping names (each patient 1/P, shared among their images, as
:func:`medanon.anonymize.averaging.member_weights`), read as the method reads them (the manifest's crop, resized to
the released side). The per-record counts cannot see a record that averages fewer people than it names (an average of
two of its four patients), nor one made of other images; this check recomputes what the statement says the record
is. The other methods' records depend on models or secret noise and cannot be recomputed by the audit.

A fundus release made with ``eye_sides`` (the manifest's ``params.eye_sides``, :mod:`medanon.anonymize.eye_sides`)
averages its left eyes mirrored and shows a record mirrored back when most of its patients' eyes are left ones: the
recomputation takes each source's side as the method did (its laterality label, else, with ``auto``, its optic
disc in the decoded image).

The sources are the ones :func:`.audit_source.check_preprocessed_copies` decodes for its own check (its
``each_record``): nothing is read twice.
"""

from __future__ import annotations

import math

import numpy as np

from medanon.anonymize.eye_sides import LEFT, UNKNOWN, EyeSides, label_sides

GREY = 1 / 127.5                # one 8-bit grey level in [-1, 1] units
AVERAGE_RMS = GREY              # the tolerance: rounding the average to 8 bits leaves about 0.29 level RMS


class KpixelAverages:
    """Collects, record by record, how far each released kpixel image is from the patient-weighted average of its
    decoded sources (:meth:`add`, the ``each_record`` of the copy check), then adds the check to the report
    (:meth:`report`)."""

    def __init__(self, *, eye_sides: str = "off") -> None:
        self.wrong: list[tuple[str, float]] = []
        self.checked = self.unreadable = 0
        self.worst = 0.0
        self.eye_sides = eye_sides                      # the manifest's params.eye_sides (off where absent)

    def add(self, img: str, got, sources: list, decoded: list | None) -> None:
        """Released image ``img`` (pixels ``got``), its source records and their decoded images (None where not
        all could be read, or the copy check stopped at a copy)."""
        from medanon.anonymize.averaging import member_weights

        if decoded is None or any(s is None for s in sources):
            self.unreadable += 1                        # other checks name unreadable images and unknown sources
            return
        pids = [s.patient_id for s in sources]
        w = member_weights(np.arange(len(sources)), pids)
        stack = np.stack([np.asarray(image, np.float64) for image, _ in decoded])
        left = False
        if self.eye_sides != "off":                     # as the method averaged them: left eyes mirrored
            sides = _source_sides(self.eye_sides, sources, decoded)
            stack[sides.sides == LEFT] = stack[sides.sides == LEFT][..., ::-1]
            left = sides.record_side(range(len(sources)), pids) == LEFT
        average = np.tensordot(w, stack, axes=1)
        rms = float(np.sqrt(np.mean(((average[..., ::-1] if left else average) - got) ** 2)))
        self.checked += 1
        self.worst = max(self.worst, rms)
        if rms > AVERAGE_RMS:
            self.wrong.append((img, rms))

    def report(self, rep, *, records: int) -> None:
        """Add the check to ``rep`` (an :class:`.audit.AuditReport`) of a release of ``records`` records (the copy
        check reads all of them, or a fixed sample)."""
        compared = self.checked + self.unreadable
        if self.unreadable:
            rep.notes.append(f"{self.unreadable} kpixel records not recomputed: a source they name is not a readable "
                             "file of the source given, or the record is a copy of one (the copy check names it)")
        if not self.checked:
            return
        first = self.wrong[0] if self.wrong else None
        sample = (f" ({compared} of {records} records, a fixed pseudo-random sample (seed 0))"
                  if compared < records else "")
        rep.add("each kpixel record is the patient-weighted average of its mapped sources (recomputed; within one "
                "8-bit grey level, RMS)", not self.wrong,
                f"{len(self.wrong)} of {self.checked} are not, e.g. {first[0]}: {first[1] / GREY:.1f} grey levels RMS "
                "from the average of the sources its mapping names" if first else
                f"{self.checked} records recomputed, at most {self.worst / GREY:.2f} grey levels RMS from their "
                f"average{sample}")


def _source_sides(mode: str, sources: list, decoded: list) -> EyeSides:
    """The sides of a record's sources as :func:`medanon.anonymize.eye_sides.find_sides` took them."""
    import torch

    from medanon.anonymize.eye_sides import disc_side

    sides = label_sides([src.labels.get("laterality", math.nan) for src in sources])
    todo = np.flatnonzero(sides == UNKNOWN) if mode == "auto" else []
    if len(todo):
        sides[todo] = disc_side(torch.stack([torch.from_numpy(np.asarray(decoded[i][0], np.float32)) for i in todo]),
                                torch.stack([torch.from_numpy(np.asarray(decoded[i][1]))[None] for i in todo]))
    return EyeSides(mode, sides)
