"""Same-size clustering (k-SALSA §3.4) without an N×N matrix, and the people-level wrapper.

The greedy rule of the paper: repeatedly take the remaining point with the largest mean
distance to the remaining points, group it with its k−1 nearest remaining neighbours and
remove the group. Beyond the paper:

- **every cluster has at least k members** for any N ≥ k: the r = N mod k leftovers each join
  the cluster with the nearest centroid (so a cluster holds at most k + r < 2k points), unless
  ``drop_remainder`` asks to leave them out as the paper does;
- **memory O(N·d)**, no N×N matrix: blocked products and lazily kept sums of distances
  (:mod:`medanon.anonymize.clustering_greedy`, on the distances of
  :mod:`medanon.anonymize.clustering_distances`);
- **strata**: with ``strata``, each stratum is clustered on its own;
- **people, not images**: :func:`cluster_people` clusters one point per patient (the mean of the
  patient's latents), so each cluster holds ≥ k distinct patients and every image of a patient
  lands in the same cluster. Clustering images directly would put a patient's near-identical
  re-acquisitions together and release a record of fewer than k people.

Ties (equal sums or equal distances) go to the lower index, in both this implementation and the
naive reference :func:`naive_same_size_clusters`, which keeps the full distance matrix (O(N²)
memory) and serves the tests and the benchmark. The clustering is deterministic: no seed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from medanon.anonymize.clustering_distances import TIE_DIST, TIE_SUM, auto_block
from medanon.anonymize.clustering_greedy import NN_MARGIN, Greedy
from medanon.errors import ConfigError, DataError

__all__ = ["NN_MARGIN", "TIE_DIST", "TIE_SUM", "Clustering", "cluster_people", "naive_same_size_clusters",
           "people_points", "same_size_clusters"]

log = logging.getLogger(__name__)


@dataclass
class Clustering:
    """The result: disjoint clusters of point indices, and the points left out."""

    clusters: list[np.ndarray]                  # each an int64 array of indices, sorted, size >= k
    k: int                                      # the minimum cluster size asked for
    dropped: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # left out (drop_remainder)

    def assignment(self, n: int) -> np.ndarray:
        """Cluster index of each of the ``n`` points (-1 for dropped points)."""
        out = np.full(n, -1, np.int64)
        for c, members in enumerate(self.clusters):
            out[members] = c
        return out

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(c) for c in self.clusters], np.int64)


# ------------------------------------------------------------------------------------------------ leftovers


def _attach_leftovers(points: np.ndarray, clusters: list[np.ndarray], leftovers: np.ndarray) -> list[np.ndarray]:
    """Each leftover joins the cluster with the nearest centroid (ties: the lower cluster index)."""
    if not len(leftovers):
        return clusters
    cents = np.stack([points[c].mean(0) for c in clusters])
    extra: list[list[int]] = [[] for _ in clusters]
    for i in leftovers:
        extra[int(np.argmin(((cents - points[i]) ** 2).sum(1)))].append(int(i))
    return [np.sort(np.concatenate([c, np.array(e, np.int64)])) if e else c
            for c, e in zip(clusters, extra, strict=True)]


def _check(n: int, k: int) -> None:
    if k < 1:
        raise ConfigError(f"k={k} must be at least 1")
    if n < k:
        raise DataError(f"cannot form a cluster of k={k} from {n} points",
                        fix="lower k= or add data (k-anonymity needs at least k people per record)")


def _finish(points: np.ndarray | torch.Tensor, clusters, leftovers, k: int, drop_remainder: bool) -> Clustering:
    if drop_remainder:
        if len(leftovers):
            log.warning("dropping %d leftover point(s) (drop_remainder=True): they are not released", len(leftovers))
        return Clustering(clusters, k, np.asarray(leftovers, np.int64))
    if not len(leftovers):
        return Clustering(clusters, k)
    if isinstance(points, torch.Tensor):                 # to the host only when there are leftovers to attach
        points = points.cpu().double().numpy()
    return Clustering(_attach_leftovers(points, clusters, leftovers), k)


# ------------------------------------------------------------------------------------------------ public API


def same_size_clusters(points: np.ndarray | torch.Tensor, k: int, *,
                       strata: Sequence[object] | None = None,     # one stratum per point: cluster within each
                       drop_remainder: bool = False,               # leave the N mod k leftovers out (the paper)
                       block: int | None = None,                   # rows per distance block (None: by device)
                       cache: int = 0,                             # neighbours cached per likely pick (0 = 4k)
                       dtype: torch.dtype = torch.float32,         # arithmetic of the distance products
                       progress: bool = False) -> Clustering:
    """Greedy same-size clustering of ``points`` (N, d) into clusters of at least ``k`` (see module doc).

    ``points`` may live on any device; the work follows it. With ``strata``, each stratum is clustered
    on its own; a stratum with fewer than k points is an error unless ``drop_remainder`` is set.

    >>> c = same_size_clusters(np.arange(10.0)[:, None], 3)
    >>> [m.tolist() for m in c.clusters]
    [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    """
    given = torch.as_tensor(points)
    if given.ndim != 2:
        given = given.reshape(len(given), -1)
    x = given.to(dtype)
    n = len(x)
    if strata is None:
        _check(n, k)
        clusters, left = Greedy(x, k, block=block or auto_block(x.device), cache=cache or 4 * k, progress=progress,
                                exact=given).run()
        return _finish(x, clusters, left, k, drop_remainder)
    strata = list(strata)
    if len(strata) != n:
        raise ConfigError(f"strata has {len(strata)} entries for {n} points")
    groups: dict[str, np.ndarray] = {}
    for key in sorted({str(s) for s in strata}):
        groups[key] = np.flatnonzero(np.array([str(s) == key for s in strata]))
    small = {g: len(ix) for g, ix in groups.items() if len(ix) < k}
    if small and not drop_remainder:
        raise DataError(f"strata with fewer than k={k} points cannot form a cluster: "
                        + ", ".join(f"{g!r} ({m})" for g, m in small.items()),
                        fix="pass drop_remainder=True to leave them out, lower k=, or cluster without stratify=")
    out, dropped = [], []
    for g, ix in groups.items():
        if len(ix) < k:
            log.warning("stratum %r has %d point(s) < k=%d: dropped (drop_remainder=True)", g, len(ix), k)
            dropped.append(ix)
            continue
        sub = same_size_clusters(given[torch.from_numpy(ix).to(given.device)], k, drop_remainder=drop_remainder,
                                 block=block, cache=cache, dtype=dtype, progress=progress)
        out += [ix[c] for c in sub.clusters]
        dropped.append(ix[sub.dropped])
    return Clustering(out, k, np.sort(np.concatenate(dropped)) if dropped else np.zeros(0, np.int64))


def naive_same_size_clusters(points: np.ndarray, k: int, *, drop_remainder: bool = False) -> Clustering:
    """The reference: the paper's loop on the full N×N float64 distance matrix (O(N²) memory).

    Row sums over the remaining points are kept up to date by subtracting the removed columns, so
    the time is O(N²) as well. Only for tests and the benchmark.
    """
    from scipy.spatial.distance import cdist

    pts = np.asarray(points, np.float64).reshape(len(points), -1)
    n = len(pts)
    _check(n, k)
    dist = cdist(pts, pts)
    np.fill_diagonal(dist, 0.0)
    sums = dist.sum(1)
    alive = np.ones(n, bool)
    clusters = []
    while alive.sum() >= k:
        cand = np.flatnonzero(alive)
        p = cand[np.lexsort((cand, -sums[cand]))[0]]
        others = cand[cand != p]
        near = others[np.lexsort((others, dist[p, others]))[: k - 1]]
        members = np.sort(np.concatenate([[p], near]))
        alive[members] = False
        sums -= dist[:, members].sum(1)
        clusters.append(members.astype(np.int64))
    return _finish(pts, clusters, np.flatnonzero(alive), k, drop_remainder)


# ------------------------------------------------------------------------------------------------ people


def people_points(values: np.ndarray | torch.Tensor, patient_ids: Sequence[str]
                  ) -> tuple[torch.Tensor, list[str], list[np.ndarray]]:
    """One point per patient: the mean of the patient's rows of ``values`` (N, ...).

    Returns the points (P, d), the patient ids (sorted) and each patient's row indices.
    """
    v = torch.as_tensor(values)
    v = v.reshape(len(v), -1)
    if len(patient_ids) != len(v):
        raise ConfigError(f"{len(patient_ids)} patient ids for {len(v)} rows")
    rows: dict[str, list[int]] = {}
    for i, p in enumerate(patient_ids):
        rows.setdefault(str(p), []).append(i)
    patients = sorted(rows)
    members = [np.array(rows[p], np.int64) for p in patients]
    pts = torch.stack([v[torch.from_numpy(m).to(v.device)].mean(0) for m in members])
    return pts, patients, members


def cluster_people(values: np.ndarray | torch.Tensor, patient_ids: Sequence[str], k: int, *,
                   strata: dict[str, object] | None = None,       # patient id -> stratum (e.g. worst grade)
                   drop_remainder: bool = False,
                   progress: bool = False, **kwargs) -> Clustering:
    """Cluster patients (not images) so that each cluster holds at least ``k`` distinct patients.

    Each patient is represented by the mean of their rows of ``values``; the returned clusters hold
    *row* indices (every row of each patient in the cluster), ``dropped`` the rows left out.
    """
    pts, patients, members = people_points(values, patient_ids)
    if len(patients) < k:
        raise DataError(f"cannot form a cluster of k={k} people: the data hold {len(patients)} patient(s)",
                        fix="lower k= or add data (every record must stand for at least k people)")
    st = None if strata is None else [strata[p] for p in patients]
    pc = same_size_clusters(pts, k, strata=st, drop_remainder=drop_remainder, progress=progress, **kwargs)
    clusters = [np.sort(np.concatenate([members[p] for p in c])) for c in pc.clusters]
    dropped = (np.sort(np.concatenate([members[p] for p in pc.dropped])) if len(pc.dropped)
               else np.zeros(0, np.int64))
    return Clustering(clusters, k, dropped)
