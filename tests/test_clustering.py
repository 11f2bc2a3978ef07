"""Same-size clustering: the size invariant, agreement with the naive O(N²) reference, strata, people."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from medanon.anonymize import clustering_distances
from medanon.anonymize.clustering import (
    cluster_people,
    naive_same_size_clusters,
    people_points,
    same_size_clusters,
)
from medanon.errors import DataError


def as_sets(c) -> list[tuple[int, ...]]:
    return sorted(tuple(int(i) for i in m) for m in c.clusters)


def check_partition(c, n: int, k: int, drop: bool) -> None:
    members = np.concatenate([*c.clusters, c.dropped])
    assert sorted(members.tolist()) == list(range(n))                       # disjoint and complete
    assign = c.assignment(n)                                                # as documented: sorted int64 indices
    for ci, m in enumerate(c.clusters):
        assert m.dtype == np.int64 and (np.diff(m) > 0).all() and (assign[m] == ci).all()
    assert (assign[c.dropped] == -1).all() and c.sizes.tolist() == [len(m) for m in c.clusters]
    assert len(c.clusters) == n // k
    r = n % k
    if drop:
        assert all(len(m) == k for m in c.clusters) and len(c.dropped) == r
    else:
        assert len(c.dropped) == 0
        assert all(k <= len(m) <= k + r for m in c.clusters)
        assert sum(len(m) - k for m in c.clusters) == r


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 70), k=st.integers(1, 9), d=st.integers(1, 6), seed=st.integers(0, 2**16),
       dup=st.booleans(), drop=st.booleans())
def test_every_cluster_has_at_least_k(n, k, d, seed, dup, drop):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    if dup:                                     # duplicates and ties must not break the invariant
        x = np.round(x[rng.integers(0, max(1, n // 3), n)])
    if n < k:
        with pytest.raises(DataError, match="cannot form a cluster"):
            same_size_clusters(x, k)
        return
    c = same_size_clusters(x, k, drop_remainder=drop, block=16)
    check_partition(c, n, k, drop)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 160), k=st.integers(2, 8), d=st.integers(1, 40), seed=st.integers(0, 2**16),
       block=st.sampled_from([8, 32, 2048]))
def test_matches_naive_reference(n, k, d, seed, block):
    k = min(k, n)
    x = np.random.default_rng(seed).standard_normal((n, d)) * np.exp(np.linspace(0, 2, d))   # anisotropic
    ref = naive_same_size_clusters(x, k)
    assert as_sets(same_size_clusters(x, k, dtype=torch.float64, block=block, cache=2 * k)) == as_sets(ref)
    assert as_sets(same_size_clusters(x, k, block=block)) == as_sets(ref)                  # float32 products


def test_matches_reference_on_exact_ties():
    line = np.arange(23.0)[:, None]             # symmetric sums and equal distances everywhere
    for k in (2, 3, 5):
        assert as_sets(same_size_clusters(line, k, dtype=torch.float64)) == as_sets(naive_same_size_clusters(line, k))
    same = np.ones((12, 3))
    assert as_sets(same_size_clusters(same, 4)) == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)]


@pytest.mark.parametrize("data", ["duplicates", "integer-grid"])
def test_float32_run_matches_the_float64_greedy_on_ties(data):
    """Exact ties (bit-equal duplicates; equal distances on an integer grid) in float32: near-ties are settled
    on float64 distances and duplicates by the lowest index, as the float64 reference decides them."""
    rng = np.random.default_rng(3)
    if data == "duplicates":                    # 300 distinct points, about 5 copies each, in 64 dimensions
        x = rng.standard_normal((300, 64))[rng.integers(0, 300, 1500)].astype(np.float32)
    else:
        x = rng.integers(0, 3, (1500, 8)).astype(np.float32)
    assert as_sets(same_size_clusters(x, 5, block=256)) == as_sets(naive_same_size_clusters(x, 5))


def test_larger_run_matches_reference_with_hot_set_rebuilds():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal((700, 24)), 4 + 0.5 * rng.standard_normal((300, 24))])
    ref = naive_same_size_clusters(x, 5)
    assert as_sets(same_size_clusters(x, 5, block=64)) == as_sets(ref)


def test_leftovers_join_nearest_clusters_and_drop_remainder():
    x = np.array([[0.0], [0.1], [0.2], [10.0], [10.1], [10.2], [9.0], [0.5]])
    c = same_size_clusters(x, 3)
    # 10.2 is picked first (with 10.1, 10.0); then 9.0, the outlier of the rest, with 0.5 and 0.2;
    # the leftovers 0.0 and 0.1 join the nearer centroid (3.23, not 10.1)
    assert as_sets(c) == [(0, 1, 2, 6, 7), (3, 4, 5)]
    d = same_size_clusters(x, 3, drop_remainder=True)
    assert all(len(m) == 3 for m in d.clusters) and len(d.dropped) == 2
    assert (d.assignment(8)[d.dropped] == -1).all()


def test_no_n_by_n_matrix(monkeypatch):
    """Every distance block is at most block x 4·block (or a few rows against all points)."""
    n, block = 900, 32
    biggest = []
    real = clustering_distances.pairwise

    def spy(a, b, a2, b2):
        biggest.append(len(a) * len(b))
        return real(a, b, a2, b2)

    monkeypatch.setattr(clustering_distances, "pairwise", spy)
    x = np.random.default_rng(0).standard_normal((n, 8))
    same_size_clusters(x, 5, block=block)
    assert max(biggest) <= 4 * block * block < n * n / 100


def test_strata_are_never_mixed():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 3))
    strata = ["a"] * 17 + ["b"] * 23
    c = same_size_clusters(x, 4, strata=strata)
    for m in c.clusters:
        assert len({strata[i] for i in m}) == 1 and len(m) >= 4
    assert sorted(np.concatenate(c.clusters).tolist()) == list(range(40))
    with pytest.raises(DataError, match="fewer than k=4"):
        same_size_clusters(x[:20], 4, strata=["a"] * 18 + ["b"] * 2)
    c = same_size_clusters(x[:20], 4, strata=["a"] * 18 + ["b"] * 2, drop_remainder=True)
    assert set(c.dropped.tolist()) >= {18, 19} and all(len(m) == 4 for m in c.clusters)


def test_people_not_images():
    """Re-acquisitions of one patient are near-duplicates: image-level clustering groups them, which
    would release records of fewer than k people; patient-level clustering never does."""
    rng = np.random.default_rng(0)
    patients = [f"P{i:03d}" for i in range(23)]
    anatomy = rng.standard_normal((23, 16)) * 3
    ids = [p for p in patients for _ in range(3)]
    x = np.stack([anatomy[i] + 0.01 * rng.standard_normal(16) for i in range(23) for _ in range(3)])
    k = 3
    by_image = same_size_clusters(x, k)
    assert min(len({ids[i] for i in m}) for m in by_image.clusters) < k          # the violation
    c = cluster_people(x, ids, k)
    assert sorted(np.concatenate(c.clusters).tolist()) == list(range(len(ids)))
    for m in c.clusters:
        people = {ids[i] for i in m}
        assert len(people) >= k
        assert all(ids.count(p) == sum(ids[i] == p for i in m) for p in people)  # all of a patient's images
    pts, order, rows = people_points(x, ids)
    assert order == patients and torch.allclose(pts[5], torch.from_numpy(x[rows[5]].mean(0)))


def test_people_strata_and_drop():
    rng = np.random.default_rng(2)
    ids = [f"p{i}" for i in range(14) for _ in range(2)]
    x = rng.standard_normal((28, 4))
    strata = {f"p{i}": ("0" if i < 11 else "4") for i in range(14)}
    c = cluster_people(x, ids, 3, strata=strata, drop_remainder=True)
    kept = {ids[i] for m in c.clusters for i in m}
    assert {ids[i] for i in c.dropped} == {f"p{i}" for i in range(14)} - kept
    for m in c.clusters:
        assert len({strata[ids[i]] for i in m}) == 1 and len({ids[i] for i in m}) == 3


def test_thread_count_does_not_change_clusters_and_is_restored():
    """The greedy runs its small products on one thread and its large ones (refreshes, batched neighbour
    searches) on the caller's threads: the clusters are those of the float64 reference either way, and the
    caller's thread count is restored."""
    x = np.random.default_rng(3).standard_normal((700, 12)).astype(np.float32)
    ref = naive_same_size_clusters(x, 4)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            got = same_size_clusters(x, 4, block=64)
            assert torch.get_num_threads() == threads
            assert as_sets(got) == as_sets(ref)
    finally:
        torch.set_num_threads(before)
