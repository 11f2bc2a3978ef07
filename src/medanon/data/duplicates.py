"""Byte-identical image files under more than one patient id: one image counted as two people.

A dataset where the same file was exported twice (two accession numbers, a re-import, a copy under another name)
holds one person's image under two patient ids. Every patient-level statement then goes wrong without a sign:
a k-Same group of k "people" may hold that image twice and average it with fewer than k people (with k = 2, the
release is the image itself), a per-patient ε counts the person once where the image is released twice, and an
evaluation may find the same image among the release's sources and among the held-out people of the control.

:func:`duplicate_problems` finds them cheaply: files are compared by size, then by their first 4 KiB (already read
by the header probe, so in the page cache), and only files agreeing in both are hashed whole. Copies of one
image under one patient id are left alone (they do not change who is protected), and so are blank images (every
pixel one colour: a failed capture shows nobody, and two people may well have one). A hard link is a copy here; a
symbolic link is one image with its target (the layout readers key records by their real path, and name a link
and its target listed under two patient ids themselves).

>>> from pathlib import Path
>>> from tempfile import TemporaryDirectory
>>> from medanon.data.records import Record
>>> with TemporaryDirectory() as d:
...     for name, data in (("a.png", b"x" * 10), ("b.png", b"x" * 10), ("c.png", b"y" * 10)):
...         _ = (Path(d) / name).write_bytes(data)
...     recs = [Record(Path(d) / n, p) for n, p in (("a.png", "P1"), ("b.png", "P2"), ("c.png", "P3"))]
...     [(Path(p.path).name, p.kind) for p in duplicate_problems(recs)]
[('a.png', 'duplicate'), ('b.png', 'duplicate')]
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Sequence

from medanon.data.records import Problem, Record
from medanon.fsutil import sha256_file

PREFIX_BYTES = 4096
FIX = ("the same image file under two patient ids counts one person as two (a k-Same group of k 'people' then holds "
       "it twice, and a per-patient guarantee counts them once): delete the copy, or give both files the patient id "
       "of the person they show")


def _prefix(path) -> bytes:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(PREFIX_BYTES)).digest()


def _groups(records: Sequence[Record]) -> list[list[Record]]:
    """Records whose files hold the same bytes, in groups of two or more (each in the records' order): split by
    file size, then by the first 4 KiB, then by the whole file's sha256, each step only within the groups left."""
    groups = [list(records)]
    for key in (lambda p: os.stat(p).st_size, _prefix, sha256_file):
        groups = [g for group in groups for g in _split(group, key) if len(g) > 1]
    return groups


def _split(records: Sequence[Record], key) -> list[list[Record]]:
    """``records`` grouped by ``key(path)``; a file that cannot be read here is left out, for the reader to name
    with its fix (it was readable when the headers were probed)."""
    by_key: dict = defaultdict(list)
    for r in records:
        try:
            by_key[key(r.path)].append(r)
        except OSError:
            continue
    return list(by_key.values())


def _blank_file(path) -> bool:
    """Whether the image file ``path`` is one colour (False where it cannot be read: the reader says why)."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            extrema = im.getextrema()
    except Exception:
        return False
    bands = extrema if isinstance(extrema[0], tuple) else (extrema,)
    return all(lo == hi for lo, hi in bands)


def duplicate_problems(records: Sequence[Record]) -> list[Problem]:
    """A ``duplicate`` problem for *every* file of a group holding the same bytes under more than one patient id:
    medanon cannot tell which id is the person's, and keeping one (the first, say) could keep the copy under the
    wrong id while that person's other images stay under theirs, one person in two splits. Blank images, and files
    unreadable here, are left alone (the reader reports the latter)."""
    problems = []
    for group in _groups(records):
        ids = sorted({r.patient_id for r in group})
        if len(ids) == 1 or _blank_file(group[0].path):
            continue
        for r in group:
            others = [o for o in group if o is not r]
            shown = ", ".join(f"{o.path} (patient {o.patient_id!r})" for o in others[:3]) \
                + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            problems.append(Problem(str(r.path), "duplicate",
                                    f"the same bytes as {shown}; this file is patient {r.patient_id!r}: one image "
                                    f"under patient ids {', '.join(repr(i) for i in ids)}, so every copy is left "
                                    "out"))
    return problems


def duplicate_images(images, patient_ids: Sequence[str]) -> list[tuple[int, int]]:
    """Pairs ``(i, j)``, ``i < j``, of identical images (an ``(N, C, H, W)`` tensor held in memory) under different
    patient ids, blank images left out: ``j`` repeats the first image ``i`` of its bytes."""
    first: dict[bytes, int] = {}
    pairs = []
    for j in range(len(images)):
        image = images[j]
        if bool((image == image[:, :1, :1]).all()):      # blank: shows nobody
            continue
        key = hashlib.sha256(image.contiguous().cpu().numpy().tobytes()).digest()
        i = first.setdefault(key, j)
        if i != j and patient_ids[i] != patient_ids[j]:
            pairs.append((i, j))
    return pairs
