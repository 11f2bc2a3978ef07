"""An attacker compares a target with a released image in both orientations.

A release may mirror its images left-right (a fundus pipeline that turns every left eye into a right one does), and
the identity networks are not mirror-invariant (an eye's laterality is part of what they learn), so a mirrored copy
would read as a stranger to an attack that compared one orientation. Every attack that scores a released image
against a real one therefore scores it as released and mirrored and keeps the higher score, **per pair**: an
image never loses the match it has as released. Thresholds stay set on real pairs as they are; the second
orientation can raise an attack's accept rate on a release, for members and for the control alike (held-out people
scored against the same records the same way), and the residual risk over the control cancels it. The known-answer
calibration includes a mirrored copy of the source split, which a working attack must detect.

>>> import numpy as np
>>> q = np.array([[1.0, 0.0]])
>>> cosines(q, np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]])).tolist()
[[1.0]]
>>> cosines(q, np.array([[0.0, 1.0]])).tolist()
[[0.0]]
"""

from __future__ import annotations

import numpy as np

from medanon.evaluate.attacks.stats import unit


def cosines(query: np.ndarray, keys: np.ndarray, keys_mirrored: np.ndarray | None = None) -> np.ndarray:
    """``(len(query), len(keys))`` cosine similarities (rows need not be unit length); where ``keys_mirrored`` (the
    embeddings of the keys mirrored left-right) is given, each entry is the larger of the two orientations."""
    q = unit(query)
    sim = q @ unit(keys).T
    return sim if keys_mirrored is None else np.maximum(sim, q @ unit(keys_mirrored).T)


def pair_dots(a: np.ndarray, b: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """``(a[i] * b[j]).sum(1)`` without gathering one row pair per pair: each row of ``a[i]`` meets ``b`` in one
    matrix product over the distinct rows, then the pairs are read off (the same numbers; pair sets here are up
    to a million pairs of 128-d rows, i.e. gigabytes gathered)."""
    if len(i) == 0:
        return np.zeros(0)
    ui, inv = np.unique(i, return_inverse=True)
    return np.einsum("pk,pk->p", a[ui][inv], b[j]) if len(ui) > 0.5 * len(i) else (a[ui] @ b.T)[inv, j]


def pair_cosines(a: np.ndarray, b: np.ndarray, i: np.ndarray, j: np.ndarray,
                 b_mirrored: np.ndarray | None = None) -> np.ndarray:
    """Cosine of each pair ``(a[i], b[j])`` of unit rows; the larger of the two orientations of ``b`` where its
    mirrored rows ``b_mirrored`` (unit) are given."""
    s = pair_dots(a, b, i, j)
    return s if b_mirrored is None else np.maximum(s, pair_dots(a, b_mirrored, i, j))


BOTH = "; each released image is compared as released and mirrored left-right, the higher score kept"


def assumptions(text: str, mirrored) -> str:
    """An attack's assumptions, with :data:`BOTH` where it compared both orientations (``mirrored`` given)."""
    return text + (BOTH if mirrored is not None else "")
