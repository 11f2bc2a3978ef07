"""medanon.evaluate.attacks.linkability: the sparse shared-patient masks and the row-by-row pair subsample equal their
dense definitions (held by benchmarks/attack_masks.py)."""

from __future__ import annotations

import numpy as np
from script_module import load_script

from medanon.evaluate.attacks.linkability import shared_patients, sources_in_records


def _bench():
    """benchmarks/attack_masks.py, which holds the dense definitions."""
    return load_script("benchmarks/attack_masks.py")


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
    assert all(np.array_equal(a, b) for a, b in zip(_bench().dense_masks(records, sources), (dense_rr, dense_sr),
                                                      strict=True))      # the benchmark's reference is the same
    assert np.array_equal(sources_in_records(records, sources), dense_sr)
    assert same_rr.dtype == bool and same_sr.shape == (80, 51) and not same_sr[-1].any()


def test_pairs_draw_the_same_seeded_subsample_as_enumerating_every_cell():
    from medanon.evaluate.attacks.linkability import _pairs

    rng = np.random.default_rng(1)
    for shape, upper in (((40, 40), True), ((30, 50), False), ((1, 7), False)):
        same = rng.random(shape) < 0.1
        for caps in ((10**6, 10**6), (37, 5), (3, 2)):
            got = _pairs(same, upper, np.random.default_rng(7), *caps)
            want = _bench().pairs_reference(same, upper, np.random.default_rng(7), *caps)
            assert all(np.array_equal(a, b) for a, b in zip(got[:3], want[:3], strict=True)) and got[3] == want[3]
