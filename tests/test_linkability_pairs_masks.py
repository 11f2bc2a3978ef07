"""medanon.evaluate.attacks.linkability.shared_patients: the sparse masks equal the dense definition."""

from __future__ import annotations

import numpy as np

from medanon.evaluate.attacks.linkability import shared_patients


def test_shared_patient_masks_equal_the_dense_definition():
    rng = np.random.default_rng(0)
    pool = [f"P{i}" for i in range(30)]
    records = [tuple(rng.choice(pool, size=rng.integers(1, 4), replace=False)) for _ in range(50)]
    records.append(("P1", "P1"))                                         # a repeated patient counts once
    sources = [*rng.choice(pool, size=79), "stranger"]                   # the last is in no record
    same_rr, same_sr = shared_patients(records, sources)
    dense_rr = np.array([[bool(set(a) & set(b)) for b in records] for a in records])
    dense_sr = np.array([[p in r for r in records] for p in sources])
    assert np.array_equal(same_rr, dense_rr) and np.array_equal(same_sr, dense_sr)
    assert same_rr.dtype == bool and same_sr.shape == (80, 51) and not same_sr[-1].any()
