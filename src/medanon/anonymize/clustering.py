"""Same-size clustering (k-SALSA §3.4) without an N×N matrix, and the people-level wrapper.

The greedy rule of the paper: repeatedly take the remaining point with the largest mean
distance to the remaining points, group it with its k−1 nearest remaining neighbours and
remove the group. Beyond the paper:

- **every cluster has at least k members** for any N ≥ k: the r = N mod k leftovers each join
  the cluster with the nearest centroid (so a cluster holds at most k + r < 2k points), unless
  ``drop_remainder`` asks to leave them out as the paper does;
- **memory O(N·d)**, no N×N matrix: the sums of distances are computed once by a symmetric
  blocked matrix product, then kept lazily. Sums only shrink as points leave, so a stale sum is
  an upper bound: a *hot set* of the largest sums is kept exact after each removal (one small
  product against the removed group), and a pick is certified when it beats every bound outside
  the hot set. When it does not, points are made exact in the order of their bounds, only until
  no bound left could reach the top, and a new hot set is formed. Nearest neighbours come from
  cached lists (the ``cache`` nearest points of likely next picks, computed in batches), used only
  when a list provably holds the k−1 nearest remaining points;
- **people, not images**: :func:`cluster_people` clusters one point per patient (the mean of the
  patient's latents), so each cluster holds ≥ k distinct patients and every image of a patient
  lands in the same cluster. Clustering images directly would put a patient's near-identical
  re-acquisitions together and release a record of fewer than k people.

Ties (equal sums or equal distances) go to the lower index, in both this implementation and the
naive reference :func:`naive_same_size_clusters`, which keeps the full distance matrix (O(N²)
memory) and serves the tests and the benchmark. The clustering is deterministic: no seed.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from medanon.errors import ConfigError, DataError

log = logging.getLogger(__name__)
NN_MARGIN = 1e-5              # relative: nearest-neighbour distances are float32; bounds must stay bounds
TIE_SUM = 2e-8                # relative: picks whose float32-based sums are this close are compared in float64
TIE_DIST = 1e-5               # relative: neighbours this close to the k-th distance are compared in float64


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


# ------------------------------------------------------------------------------------------------ distances


def _pairwise(a: torch.Tensor, b: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    """Euclidean distances (len(a), len(b)) from squared norms and one matrix product."""
    d = torch.addmm(a2[:, None], a, b.T, alpha=-2.0)
    return d.add_(b2[None, :]).clamp_min_(0.0).sqrt_()


@contextlib.contextmanager
def _one_thread(device: torch.device):
    """The greedy loop is thousands of small products: on the CPU, thread start-up and barriers cost more
    than they save (20x slower with 2 threads on a busy 2-core machine), so it runs on one thread."""
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Greedy:
    """State of one greedy run on ``x`` (n, d).

    ``s[i]`` is the sum of distances from point i to the points alive when ``stamp[i]`` points had been
    removed, hence an upper bound of its current sum (sums only shrink). A *hot set* of the points
    with the largest bounds is kept exact after every removal (a small product against the removed
    group); ``t_out`` bounds the sums of every alive point outside it. The pick of an iteration is the
    best hot point when it beats ``t_out``; otherwise the hot set is rebuilt (and grown if needed).
    """

    def __init__(self, x: torch.Tensor, k: int, *, block: int, cache: int, progress: bool, hot_fraction: int = 8,
                 exact: torch.Tensor | None = None):
        self.exact = exact if exact is not None else x  # the points as given: near-ties are settled on them
        self.x = x - x.mean(0, keepdim=True)         # centring keeps the norm trick accurate
        self.sq = (self.x * self.x).sum(1)
        # the norm trick's error in a float32 distance near 0 (duplicates): sqrt of its error in the square
        self.d_floor = math.sqrt(64 * torch.finfo(x.dtype).eps * float(self.sq.max())) if len(x) else 0.0
        # exact duplicates (bit-equal rows) have equal sums: a float64 greedy takes the lowest index of them
        rows = np.ascontiguousarray(self.exact.cpu().numpy())
        _, self.dup, counts = np.unique(rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel(),
                                        return_inverse=True, return_counts=True)
        self.dup = self.dup.ravel()
        self.has_dup = counts[self.dup] > 1
        # a sum holds up to (copies - 1) float32 distances of duplicates, each off by up to d_floor
        self.sum_floor = self.d_floor * (int(counts.max()) - 1) if len(counts) else 0.0
        self.n, self.k = len(x), k
        self.block = block
        self.cache_size = max(cache, 2 * k)
        self.alive = np.ones(self.n, bool)
        self.alive_t = torch.ones(self.n, dtype=torch.bool, device=x.device)
        self.n_alive = self.n
        self.order = np.empty(self.n, np.int64)        # removal order
        self.rx, self.rq = torch.empty_like(self.x), torch.empty_like(self.sq)  # removed rows, in that order
        self.removed = 0
        self.stamp = np.zeros(self.n, np.int64)
        self.knn: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        self.kid = np.arange(self.n)                  # candidate columns of neighbour searches (compacted)
        self.kx, self.ksq = self.x, self.sq
        self.progress = progress
        self.s, nn = self._initial_sums()
        # nn[i] <= the distance from i to any other point (its nearest neighbour's, less a float margin): a point
        # that leaves takes at least nn of it from every other point's sum, so stale sums fall with the removals
        self.nn = nn * (1.0 - NN_MARGIN)
        self.taken = np.zeros(self.n + 1)             # taken[r]: sum of nn over the first r removed points
        self.hot = np.zeros(0, np.int64)
        self.hot_fraction = hot_fraction
        self.t_out, self.t_out_at = math.inf, 0.0

    def _rows(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.from_numpy(ids).to(self.x.device)   # index_select: the same rows, 1.4-14x faster than x[t]
        return self.x.index_select(0, t), self.sq.index_select(0, t)

    def _initial_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """Sum of distances from each point to all others, and the distance to its nearest other point:
        upper-triangular blocks, each used twice."""
        n, b = self.n, self.block
        s = torch.zeros(n, dtype=torch.float64, device=self.x.device)
        nn = torch.full((n,), math.inf, dtype=self.x.dtype, device=self.x.device)
        starts = range(0, n, b)
        total = len(starts) * (len(starts) + 1) // 2
        with tqdm(total=total, desc="clustering: distance sums", disable=not self.progress, unit="block") as bar:
            for i in starts:
                xi, qi = self.x[i:i + b], self.sq[i:i + b]
                for j in range(i, n, b):
                    d = _pairwise(xi, self.x[j:j + b], qi, self.sq[j:j + b])
                    if j == i:
                        d.fill_diagonal_(math.inf)
                    torch.minimum(nn[i:i + b], d.amin(1), out=nn[i:i + b])
                    if j > i:
                        torch.minimum(nn[j:j + b], d.amin(0), out=nn[j:j + b])
                    else:
                        d.fill_diagonal_(0.0)
                    d = d.double()               # then sum: the same float64 sums as sum(dtype=float64), faster
                    s[i:i + b] += d.sum(1)
                    if j > i:
                        s[j:j + b] += d.sum(0)
                    bar.update()
        nn = nn.double().cpu().numpy()
        return s.cpu().numpy(), np.where(np.isfinite(nn), nn, 0.0)

    def _bounds(self, ids: np.ndarray) -> np.ndarray:
        """Upper bounds of the current sums of ``ids``: the sum at each one's stamp, less what the points removed
        since must have taken from it (each at least its own nn, and at least the point's nn)."""
        since = self.removed - self.stamp[ids]
        fell = np.maximum(self.taken[self.removed] - self.taken[self.stamp[ids]], since * self.nn[ids])
        return self.s[ids] - fell

    # -------------------------------------------------------------------------------------- sums upkeep

    def _refresh(self, ids: np.ndarray) -> None:
        """Make s[ids] exact: subtract distances to the points removed since each one's stamp.

        Rows are grouped by stamp, so every (row, removed point) distance is computed once.
        """
        ids = ids[self.stamp[ids] < self.removed]
        for lo in np.unique(self.stamp[ids]):
            group = ids[self.stamp[ids] == lo]
            for c in range(0, len(group), self.block):
                part = group[c:c + self.block]
                xa, qa = self._rows(part)
                acc = np.zeros(len(part))
                for r in range(int(lo), self.removed, 4 * self.block):
                    hi = min(r + 4 * self.block, self.removed)
                    acc += _pairwise(xa, self.rx[r:hi], qa, self.rq[r:hi]).double().sum(1).cpu().numpy()
                self.s[part] -= acc
        self.stamp[ids] = self.removed

    def _rebuild(self) -> None:
        """A new hot set: the largest exact sums, grown until its best beats every bound outside.

        Points are made exact in the order of their (stale) bounds, and only until no bound left
        could reach the hot set: points far from the top are not updated at all.
        """
        alive = np.flatnonzero(self.alive)
        bound = self._bounds(alive)
        order = np.argsort(-bound, kind="stable")
        by_bound, bound = alive[order], bound[order]
        size = max(256, len(alive) // self.hot_fraction)
        done = 0
        while True:
            size = min(size, len(alive))
            while done < len(by_bound):
                if done >= size:
                    exact = self.s[by_bound[:done]]
                    if bound[done] < np.partition(exact, done - size)[done - size]:
                        break                              # no bound left can enter the top ``size``
                step = max(size, self.block)
                self._refresh(by_bound[done:done + step])
                done = min(done + step, len(by_bound))
            ready = by_bound[:done]
            exact = self.s[ready]
            rest_bound = bound[done] if done < len(by_bound) else -math.inf
            if size >= len(ready):
                self.hot, self.t_out = ready, rest_bound
            else:
                top = np.argpartition(-exact, size)[:size]
                rest = np.ones(len(ready), bool)
                rest[top] = False
                self.hot, self.t_out = ready[top], max(float(exact[rest].max()), rest_bound)
            self.t_out_at = self.taken[self.removed]
            best = self.s[self.hot].max()
            if self.t_out == -math.inf or best > self.t_out + self._tie(best):
                break                                      # (a near-tie could hide a lower-index one: grow)
            size *= 2
        self.hx, self.hq = self._rows(self.hot)

    def _outside(self) -> float:
        """A bound of the current sums outside the hot set: ``t_out`` less what the removals since took."""
        return self.t_out - (self.taken[self.removed] - self.t_out_at)

    def _tie(self, value: float) -> float:
        return TIE_SUM * abs(value) + self.sum_floor + 1e-9

    def _argmax(self) -> int:
        """Index of the alive point with the largest sum (ties: lowest index).

        The sums come from float32 distances; candidates within ``TIE_SUM`` (relative) of the best are
        compared again on float64 distances computed from the points as given, so near-ties are decided
        as a float64 greedy decides them (exact ties, e.g. duplicate points: the lowest index)."""
        hot = self.hot[self.alive[self.hot]]
        if not len(hot) or self.s[hot].max() <= self._outside() + self._tie(self.s[hot].max()):
            self._rebuild()
            hot = self.hot
        vals = self.s[hot]
        near = hot[vals >= vals.max() - self._tie(vals.max())]
        if len(near) > 1:
            sums = self._distances64(near, np.flatnonzero(self.alive)).sum(1)
            near = near[np.lexsort((near, -sums))[:1]]
        p = int(near[0])
        if self.has_dup[p]:                          # its alive duplicates have the same sum: the lowest index
            p = int(np.flatnonzero((self.dup == self.dup[p]) & self.alive)[0])
        return p

    def _distances64(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Float64 distances (len(rows), len(cols)) from the points as given (differences, no norm trick)."""
        dev = self.exact.device
        a = self.exact.index_select(0, torch.from_numpy(rows).to(dev)).double()
        out = np.empty((len(rows), len(cols)))
        for c in range(0, len(cols), 4 * self.block):
            b = self.exact.index_select(0, torch.from_numpy(cols[c:c + 4 * self.block]).to(dev)).double()
            out[:, c:c + len(b)] = torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist").cpu().numpy()
        return out

    def _settle(self, p: int, ids: np.ndarray, dist: np.ndarray, need: int, limit: float) -> np.ndarray | None:
        """The ``need`` nearest of ``p`` from alive candidates ``ids`` sorted by float32 distance ``dist`` (every
        other alive point at least ``limit`` away); ties within ``TIE_DIST`` of the edge go by float64 distance,
        then index. None when the list cannot decide (its edge is within the tolerance of ``limit``)."""
        if len(ids) < need:
            return None
        edge = float(dist[need - 1])
        tol = TIE_DIST * edge + self.d_floor
        if not edge + tol < limit:
            return None
        sure = dist < edge - tol
        maybe = ~sure & (dist <= edge + tol)
        if sure.sum() + maybe.sum() == need:
            return ids[:need]
        cand = ids[maybe]
        d64 = self._distances64(np.array([p]), cand)[0]
        return np.concatenate([ids[sure], cand[np.lexsort((cand, d64))[:need - int(sure.sum())]]])

    def _remove(self, members: np.ndarray) -> None:
        self.alive[members] = False
        self.alive_t[torch.from_numpy(members).to(self.x.device)] = False
        self.n_alive -= len(members)
        xb, qb = self._rows(members)
        self.order[self.removed:self.removed + len(members)] = members
        self.rx[self.removed:self.removed + len(members)] = xb
        self.rq[self.removed:self.removed + len(members)] = qb
        r = self.removed
        self.taken[r + 1:r + len(members) + 1] = self.taken[r] + np.cumsum(self.nn[members])
        self.removed += len(members)
        if len(self.hot):                             # the hot set stays exact: one (hot x group) product
            d = _pairwise(self.hx, xb, self.hq, qb).double().sum(1).cpu().numpy()   # 28x faster than dtype= here
            live = self.alive[self.hot]
            self.s[self.hot[live]] -= d[live]
            self.stamp[self.hot[live]] = self.removed

    # -------------------------------------------------------------------------------------- neighbours

    def _neighbours(self, p: int) -> np.ndarray:
        """The k−1 nearest alive points of p (ties: lowest index), from the cache when it is provably right."""
        need = self.k - 1
        if need == 0:
            return np.zeros(0, np.int64)
        hit = self._from_cache(p, need)
        if hit is not None:
            return hit
        # p and the likely next picks (best exact sums of the hot set), against every alive point
        hot = self.hot[self.alive[self.hot]]
        m = min(32, len(hot))
        batch = np.union1d(hot[np.argpartition(-self.s[hot], m - 1)[:m]] if m else hot, [p])
        others = self.n_alive - 1
        kk = min(self.cache_size, others)
        complete = kk == others                      # the list holds every other alive point
        if 2 * self.n_alive < len(self.kid):              # compact the candidate columns as points leave
            self.kid = np.flatnonzero(self.alive)
            self.kx, self.ksq = self._rows(self.kid)
        xa, qa = self._rows(batch)
        d = torch.empty((len(batch), len(self.kid)), dtype=self.x.dtype, device=self.x.device)
        step = 4 * self.block
        for r in range(0, len(self.kid), step):
            d[:, r:r + step] = _pairwise(xa, self.kx[r:r + step], qa, self.ksq[r:r + step])
        d.masked_fill_(~self.alive_t[torch.from_numpy(self.kid).to(d.device)][None, :], math.inf)
        d[torch.arange(len(batch)), torch.from_numpy(np.searchsorted(self.kid, batch)).to(d.device)] = math.inf
        vals, idx = torch.topk(d, kk if complete else kk + 1, dim=1, largest=False)
        vals, idx = vals.cpu().numpy(), idx.cpu().numpy()
        for row, q in enumerate(batch):
            v, ids = vals[row], self.kid[idx[row]]
            o = np.lexsort((ids, v))
            v, ids = v[o], ids[o]
            limit = math.inf if complete else float(v[-1])
            keep = np.ones(len(v), bool) if complete else v < limit
            self.knn[int(q)] = (ids[keep], v[keep], limit)
        hit = self._from_cache(p, need)
        if hit is not None:
            return hit
        # ties at the edge of the cached list (duplicates): sort every alive point by (distance, index)
        alive = np.flatnonzero(self.alive & (np.arange(self.n) != p))
        xa, qa = self._rows(np.array([p]))
        xb, qb = self._rows(alive)
        dist = _pairwise(xa, xb, qa, qb)[0].cpu().numpy()
        o = np.lexsort((alive, dist))
        return self._settle(p, alive[o], dist[o], need, math.inf)

    def _from_cache(self, p: int, need: int) -> np.ndarray | None:
        entry = self.knn.pop(p, None)
        if entry is None:
            return None
        ids, dist, limit = entry
        ok = self.alive[ids]
        # points outside the list were at least ``limit`` away when it was made, and the alive set only
        # shrinks, so the list is exact if its need-th distance is below the limit (by more than the tolerance)
        return self._settle(p, ids[ok], dist[ok], need, limit)

    # -------------------------------------------------------------------------------------- loop

    def run(self) -> tuple[list[np.ndarray], np.ndarray]:
        clusters = []
        bar = tqdm(total=self.n // self.k, desc="clustering: groups", disable=not self.progress, unit="cl")
        with _one_thread(self.x.device), bar:
            while self.n_alive >= self.k:
                p = self._argmax()
                members = np.concatenate([[p], self._neighbours(p)]).astype(np.int64)
                self._remove(members)
                clusters.append(np.sort(members))
                bar.update()
        return clusters, np.flatnonzero(self.alive)


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


def _finish(points: np.ndarray, clusters, leftovers, k: int, drop_remainder: bool) -> Clustering:
    if drop_remainder:
        if len(leftovers):
            log.warning("dropping %d leftover point(s) (--drop-remainder): they are not released", len(leftovers))
        return Clustering(clusters, k, np.asarray(leftovers, np.int64))
    return Clustering(_attach_leftovers(points, clusters, leftovers), k)


# ------------------------------------------------------------------------------------------------ public API


def same_size_clusters(points: np.ndarray | torch.Tensor, k: int, *,
                       strata: Sequence[object] | None = None,     # one stratum per point: cluster within each
                       drop_remainder: bool = False,               # leave the N mod k leftovers out (the paper)
                       block: int = 2048,                          # rows per distance block (memory ~ block² floats)
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
        clusters, left = _Greedy(x, k, block=block, cache=cache or 4 * k, progress=progress, exact=given).run()
        return _finish(x.cpu().double().numpy(), clusters, left, k, drop_remainder)
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
            log.warning("stratum %r has %d point(s) < k=%d: dropped (--drop-remainder)", g, len(ix), k)
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
