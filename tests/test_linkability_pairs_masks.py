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


def _pairs_reference(same, upper, rng, max_impostors, max_genuine):
    """The definition: every genuine and impostor cell enumerated, then each side subsampled (seeded)."""
    mask = np.triu(np.ones(same.shape, bool), 1) if upper else np.ones(same.shape, bool)
    gi, gj = np.nonzero(mask & same)
    ii, ij = np.nonzero(mask & ~same)
    sub = False
    if len(gi) > max_genuine:
        k = np.sort(rng.choice(len(gi), max_genuine, replace=False))
        gi, gj, sub = gi[k], gj[k], True
    if len(ii) > max_impostors:
        k = np.sort(rng.choice(len(ii), max_impostors, replace=False))
        ii, ij, sub = ii[k], ij[k], True
    return np.r_[gi, ii], np.r_[gj, ij], np.r_[np.ones(len(gi), bool), np.zeros(len(ii), bool)], sub


def test_pairs_draw_the_same_seeded_subsample_as_enumerating_every_cell():
    from medanon.evaluate.attacks.linkability import _pairs

    rng = np.random.default_rng(1)
    for shape, upper in (((40, 40), True), ((30, 50), False), ((1, 7), False)):
        same = rng.random(shape) < 0.1
        for caps in ((10**6, 10**6), (37, 5), (3, 2)):
            got = _pairs(same, upper, np.random.default_rng(7), *caps)
            want = _pairs_reference(same, upper, np.random.default_rng(7), *caps)
            assert all(np.array_equal(a, b) for a, b in zip(got[:3], want[:3], strict=True)) and got[3] == want[3]
