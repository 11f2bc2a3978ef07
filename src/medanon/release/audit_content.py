"""The audit's recomputation of a k-Same-Pixel release from its sources: a record's image must be the
patient-weighted average of the source images its mapping names (each patient 1/P, shared among their images, as
:func:`medanon.anonymize.averaging.member_weights`), read as the method reads them (the manifest's crop, resized to
the released side). The per-record counts cannot see a record that averages fewer people than it names (an average of
two of its four patients), nor one made of other images; this check recomputes what the statement says the record
is. The other methods' records depend on models or secret noise and cannot be recomputed by the audit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

GREY = 1 / 127.5                # one 8-bit grey level in [-1, 1] units
AVERAGE_RMS = GREY              # the tolerance: rounding the average to 8 bits leaves about 0.29 level RMS


def check_kpixel_averages(rep, release: Path, records: dict, by_id: dict, names: list[str], *, crop: str) -> None:
    """Add to ``rep`` (an :class:`.audit.AuditReport`) whether each of ``names`` (released images, all or a fixed
    sample) is the patient-weighted average of its mapped sources (``records``: the mapping's; ``by_id``: source
    record id -> record with a file), within :data:`AVERAGE_RMS`. Records whose sources are not all readable files
    are counted in a note, not judged."""
    from PIL import Image

    from medanon.anonymize.averaging import member_weights
    from medanon.data.decode import decode
    from medanon.errors import DataError
    from medanon.release.files import png_to_float

    wrong: list[tuple[str, float]] = []
    checked = unreadable = 0
    worst = 0.0
    for img in names:
        sources = [by_id.get(s) for s in records[img]["sources"]]
        try:
            got = png_to_float(release / img)
            if any(s is None for s in sources):
                raise ValueError
            stack = np.stack([np.asarray(decode(s.path, size=got.shape[-1], channels=got.shape[0], crop=crop).image,
                                         np.float64) for s in sources])
        except (OSError, ValueError, DataError, Image.DecompressionBombError):
            unreadable += 1                             # other checks name unreadable images and unknown sources
            continue
        w = member_weights(np.arange(len(sources)), [s.patient_id for s in sources])
        rms = float(np.sqrt(np.mean((np.tensordot(w, stack, axes=1) - got) ** 2)))
        checked += 1
        worst = max(worst, rms)
        if rms > AVERAGE_RMS:
            wrong.append((img, rms))
    if unreadable:
        rep.notes.append(f"{unreadable} kpixel records not recomputed: a source they name is not a readable file of "
                         "the source given")
    if not checked:
        return
    first = wrong[0] if wrong else None
    rep.add("each kpixel record is the patient-weighted average of its mapped sources (recomputed; within one 8-bit "
            "grey level, RMS)", not wrong,
            f"{len(wrong)} of {checked} are not, e.g. {first[0]}: {first[1] / GREY:.1f} grey levels RMS from the "
            "average of the sources its mapping names" if first else
            f"{checked} records recomputed, at most {worst / GREY:.2f} grey levels RMS from their average"
            + (f" ({len(names)} of {len(records)} records, a fixed pseudo-random sample (seed 0))"
               if len(names) < len(records) else ""))
