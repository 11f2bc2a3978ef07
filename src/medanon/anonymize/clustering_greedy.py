"""The greedy of same-size clustering (k-SALSA §3.4) in memory O(N·d), with the bounds that make it lazy.

The rule of the paper: repeatedly take the remaining point with the largest sum of distances to the
remaining points, group it with its k−1 nearest remaining neighbours and remove the group.
:class:`Greedy` runs it without an N×N matrix:

- the sums of distances are computed once by a symmetric blocked matrix product
  (:func:`medanon.anonymize.clustering_distances.blocked_sums`), then kept lazily. Sums only shrink as
  points leave, so a stale sum is an upper bound: a *hot set* of the largest sums is kept exact after each
  removal (one small product against the removed group), and a pick is certified when it beats every bound
  outside the hot set. When it does not, points are made exact in the order of their bounds, only until no
  bound left could reach the top, and a new hot set is formed;
- nearest neighbours come from cached lists (the ``cache`` nearest points of likely next picks, computed in
  batches), used only when a list provably holds the k−1 nearest remaining points;
- near-ties of the float32 sums and distances are settled on float64 distances
  (:class:`medanon.anonymize.clustering_distances.NearTies`), ties by the lowest index.

Every per-point array (sums, stamps, bounds, the hot set and its sums, the alive mask, the candidate columns)
lives on the data's device and is updated by batched torch ops (about 17 kernels a pick, written in place where
torch allows: on a GPU the loop is bound by launches, not arithmetic); a pick moves three numbers to the host (the
two best hot sums and the best one's position in the hot set) and the k indices of its group back. On CUDA
the pick's kernels run on fixed buffers as one replayed CUDA graph (:mod:`medanon.anonymize.clustering_step`).
The host keeps only what is per group, per cached list or per hot set (an alive mirror, the removal order, the
neighbour lists, the hot set's indices), and a copy of the points for the float64 re-checks of a few pairs.

What it returns (clusters of exactly k, and the N mod k points left over) becomes a
:class:`medanon.anonymize.clustering.Clustering` in :func:`medanon.anonymize.clustering.same_size_clusters`.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
from tqdm.auto import tqdm

from medanon.anonymize import clustering_distances as distances
from medanon.anonymize.clustering_distances import NearTies
from medanon.anonymize.clustering_step import StaticStep, graphs_enabled

NN_MARGIN = 1e-5              # relative: nearest-neighbour distances are float32; bounds must stay bounds
HOT_MIN = 256                 # the smallest hot set
WIDE_MIN = 32 * 4096          # distances in one neighbour search from which it runs on the caller's threads


@contextlib.contextmanager
def torch_threads(device: torch.device, n: int):
    """Run the block with ``n`` torch threads on the CPU (restored afterwards); nothing on other devices."""
    if device.type != "cpu" or n == torch.get_num_threads():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def one_thread(device: torch.device):
    """The greedy loop is thousands of small products: on the CPU, thread start-up and barriers cost more
    than they save (20x slower with 2 threads on a busy 2-core machine), so it runs on one thread; its few
    large products (refreshing many sums, batched neighbour searches) use the caller's threads again
    (:attr:`Greedy.wide`)."""
    return torch_threads(device, 1)


@contextlib.contextmanager
def full_float32():
    """Full float32 products (no TF32) for the block: the tolerances of the bounds and near-ties assume
    float32 rounding (``medanon.runtime.configure_cuda`` turns TF32 on for the rest of the library)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


class Greedy:
    """State of one greedy run on ``x`` (n, d).

    ``s[i]`` is the sum of distances from point i to the points alive when ``stamp[i]`` points had been
    removed, hence an upper bound of its current sum (sums only shrink). A *hot set* of the points
    with the largest bounds is kept exact after every removal (a small product against the removed
    group, into ``hs``); ``t_out`` bounds the sums of every alive point outside it. The pick of an iteration
    is the best hot point when it beats ``t_out``; otherwise the hot set is rebuilt (and grown if needed).
    """

    def __init__(self, x: torch.Tensor, k: int, *, block: int, cache: int, progress: bool, hot_fraction: int = 8,
                 exact: torch.Tensor | None = None, static: bool | None = None):
        self.x = x - x.mean(0, keepdim=True)         # centring keeps the norm trick accurate
        self.sq = (self.x * self.x).sum(1)
        self.dev = x.device
        # near-ties are settled on float64 distances of the points as given
        self.ties = NearTies(exact if exact is not None else x, self.sq, block)
        self.n, self.k = len(x), k
        self.block = block
        self.cache_size = max(cache, 2 * k)
        self.alive = np.ones(self.n, bool)            # host mirror, for the neighbour lists and near-ties
        self.alive_t = torch.ones(self.n, dtype=torch.bool, device=self.dev)
        self.n_alive = self.n
        self.order = np.empty(self.n, np.int64)        # removal order
        self.rx, self.rq = torch.empty_like(self.x), torch.empty_like(self.sq)  # removed rows, in that order
        self.removed = 0
        self.stamp = torch.zeros(self.n, dtype=torch.int64, device=self.dev)
        self.knn: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        self.kid = torch.arange(self.n, device=self.dev)    # candidate columns of neighbour searches (compacted)
        self.kx, self.ksq = self.x, self.sq
        self.progress = progress
        self.merge = self.dev.type != "cpu"          # small stamp groups share products (see _refresh)
        self.wide = torch.get_num_threads()          # the caller's threads, for the loop's large products
        with full_float32():
            self.s, nn = self._initial_sums()
        # nn[i] <= the distance from i to any other point (its nearest neighbour's, less a float margin): a point
        # that leaves takes at least nn of it from every other point's sum, so stale sums fall with the removals
        self.nn = nn * (1.0 - NN_MARGIN)
        self.nn_host = self.nn.cpu().numpy()
        self.taken = np.zeros(self.n + 1)             # taken[r]: sum of nn over the first r removed points
        self.taken_t, self.taken_on_dev = torch.zeros(self.n + 1, dtype=torch.float64, device=self.dev), 0
        self.hot = torch.zeros(0, dtype=torch.int64, device=self.dev)
        # the hot set's exact current sums (-inf once a point leaves) and its indices, each with a last slot for
        # the points outside it (-inf, -1); hpos[i]: i's position in the hot set (that slot when outside)
        self.hs = torch.full((1,), -math.inf, dtype=torch.float64, device=self.dev)
        self.hot_host = np.full(1, -1, np.int64)      # on the host: a pick's position maps to its index there
        self.hpos = torch.zeros(self.n, dtype=torch.int64, device=self.dev)
        self.sum64 = ((lambda d: d.double().sum(1)) if self.dev.type == "cpu"      # 28x faster than dtype= there
                      else (lambda d: d.sum(1, dtype=torch.float64)))              # one kernel
        self.hot_fraction = hot_fraction
        self.t_out, self.t_out_at = math.inf, 0.0
        # on CUDA the pick's device work runs on fixed buffers, replayed as a CUDA graph (medanon.anonymize.
        # clustering_step); ``static`` chooses that layout on any device (the tests run it on the CPU)
        static = self.dev.type == "cuda" if static is None else static
        self.step = StaticStep(self, graphs=graphs_enabled()) if static else None
        self.pending: list[float] | None = None       # the step's [best, second, position], when current

    def _rows(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x.index_select(0, ids), self.sq.index_select(0, ids)   # 1.4-14x faster than x[ids]

    def _dev(self, ids: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(ids, np.int64)).to(self.dev)

    def _columns(self, rows: int) -> int:
        """Columns of one product with ``rows`` rows: 4 ``block``, or more for fewer rows than ``block`` (at most
        4 block² distances a product; a few products instead of many small ones for the small groups)."""
        return max(4 * self.block, 4 * self.block * self.block // max(rows, 1))

    def _initial_sums(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum of distances from each point to all others, and the distance to its nearest other point."""
        return distances.blocked_sums(self.x, self.sq, self.block, self.progress)

    def _bounds(self, ids: torch.Tensor, taken: torch.Tensor) -> torch.Tensor:
        """Upper bounds of the current sums of ``ids``: the sum at each one's stamp, less what the points removed
        since must have taken from it (each at least its own nn, and at least the point's nn)."""
        st = self.stamp[ids]
        fell = torch.maximum(taken[self.removed] - taken[st], (self.removed - st) * self.nn[ids])
        return self.s[ids] - fell

    # -------------------------------------------------------------------------------------- sums upkeep

    def _refresh(self, ids: torch.Tensor) -> None:
        """Make s[ids] exact: subtract distances to the points removed since each one's stamp.

        Rows are grouped by stamp, so every (row, removed point) distance is computed once; with ``merge`` (off
        the CPU), small groups of close stamps share a product, the distances to points removed before a row's
        stamp masked out (at most as many as it needs), so that a refresh is a few large products rather than
        one per stamp. These are the loop's largest products (up to 4 block² distances): they run on the
        caller's threads.
        """
        st = self.stamp[ids]
        stale = st < self.removed
        ids, st = ids[stale], st[stale]
        if not len(ids):
            return
        st, o = torch.sort(st)
        ids = ids[o]
        stamps, counts = torch.unique_consecutive(st, return_counts=True)
        with torch_threads(self.dev, self.wide):
            for start, end, lo, masked in self._chunks(stamps.tolist(), counts.tolist()):
                for c in range(start, end, self.block):
                    part = ids[c:min(c + self.block, end)]
                    xa, qa = self._rows(part)
                    acc = torch.zeros(len(part), dtype=torch.float64, device=self.dev)
                    cols = self._columns(len(part))
                    for r in range(lo, self.removed, cols):
                        hi = min(r + cols, self.removed)
                        d = distances.pairwise(xa, self.rx[r:hi], qa, self.rq[r:hi])
                        if masked:                         # removed before the row's stamp: already subtracted
                            before = torch.arange(r, hi, device=self.dev)[None, :] < st[c:c + len(part), None]
                            d.masked_fill_(before, 0.0)
                        acc += self.sum64(d)
                    self.s[part] -= acc
        self.stamp[ids] = self.removed

    def _chunks(self, stamps: list[int], counts: list[int]) -> list[tuple[int, int, int, bool]]:
        """Row ranges of the stamp-sorted ids that share products: (start, end, lowest stamp, masked). A group joins
        the chunk before it while the chunk stays within ``block`` rows and the columns it would compute for
        nothing (its stamp less the chunk's) are at most those it needs (the removals since its stamp)."""
        out, start = [], 0
        for lo, m in zip(stamps, counts, strict=True):
            if out and self.merge:
                s0, e0, lo0, _ = out[-1]
                if e0 - s0 + m <= self.block and lo - lo0 <= self.removed - lo:
                    out[-1] = (s0, e0 + m, lo0, True)
                    start += m
                    continue
            out.append((start, start + m, lo, False))
            start += m
        return out

    def _rebuild(self) -> None:
        """A new hot set: the largest exact sums, grown until its best beats every bound outside.

        Points are made exact in the order of their (stale) bounds, and only until no bound left
        could reach the hot set: points far from the top are not updated at all.
        """
        if len(self.hot):                                  # the hot sums are exact now
            self.s[self.hot] = self.hs[:len(self.hot)]
            self.stamp[self.hot] = self.removed
        alive = torch.nonzero(self.alive_t).squeeze(1)
        r0 = self.taken_on_dev                             # copy the new part of ``taken`` only
        self.taken_t[r0:self.removed + 1] = torch.from_numpy(self.taken[r0:self.removed + 1]).to(self.dev)
        self.taken_on_dev = self.removed + 1
        taken = self.taken_t
        bound, order = torch.sort(self._bounds(alive, taken), descending=True, stable=True)
        by_bound = alive[order]
        n_alive = len(by_bound)
        size = max(HOT_MIN, n_alive // self.hot_fraction)
        done = 0
        while True:
            size = min(size, n_alive)
            while done < n_alive:
                if done >= size:                           # no bound left can enter the top ``size``
                    kth = torch.kthvalue(self.s[by_bound[:done]], done - size + 1).values
                    if bool(bound[done] < kth):
                        break
                step = max(size, self.block)
                self._refresh(by_bound[done:done + step])
                done = min(done + step, n_alive)
            ready = by_bound[:done]
            exact = self.s[ready]
            rest_bound = float(bound[done]) if done < n_alive else -math.inf
            if size >= len(ready):
                self.hot, self.t_out = ready, rest_bound
            else:
                top = torch.topk(exact, size, sorted=False).indices
                rest = torch.ones(len(ready), dtype=torch.bool, device=self.dev)
                rest[top] = False
                self.hot, self.t_out = ready[top], max(float(exact[rest].max()), rest_bound)
            self.t_out_at = self.taken[self.removed]
            best = float(self.s[self.hot].max())
            if self.t_out == -math.inf or best > self.t_out + self.ties.sum_tol(best):
                break                                      # (a near-tie could hide a lower-index one: grow)
            size *= 2
        self.pending = None
        if self.step is not None:                          # into the step's fixed buffers
            self.step.install(self.hot, self.s[self.hot])
            self.hx, self.hq = self.step.hx, self.step.hq
            return
        h = len(self.hot)
        self.hs = torch.cat([self.s[self.hot], self.hs.new_full((1,), -math.inf)])
        self.hot_host = np.append(self.hot.cpu().numpy(), -1)
        self.hpos.fill_(h)
        self.hpos[self.hot] = torch.arange(h, device=self.dev)
        self.hx, self.hq = self._rows(self.hot)

    def _outside(self) -> float:
        """A bound of the current sums outside the hot set: ``t_out`` less what the removals since took."""
        return self.t_out - (self.taken[self.removed] - self.t_out_at)

    def _best(self, pending: list[float] | None = None) -> tuple[float, np.ndarray, np.ndarray]:
        """The best hot sum, and the hot points within the near-tie tolerance of it with their sums: one host
        transfer (the two best sums and the best one's position in the hot set, or none when the static step
        brought them with its removal: ``pending``), a second only when the two are near-tied."""
        if pending is None:
            top = torch.topk(self.hs, 2)
            pending = torch.cat([top.values, top.indices[:1].double()]).cpu().tolist()
        v0, v1, pos = pending
        p = self.hot_host[int(pos)]
        if v0 == -math.inf or v1 < v0 - self.ties.sum_tol(v0):
            return v0, np.array([int(p)]), np.array([v0])
        near = torch.nonzero(self.hs >= v0 - self.ties.sum_tol(v0)).squeeze(1)
        return v0, self.hot_host[near.cpu().numpy()], self.hs[near].cpu().numpy()

    def _argmax(self) -> int:
        """Index of the alive point with the largest sum (ties: lowest index).

        The best hot point, once it provably beats every point outside the hot set (else the hot set is rebuilt);
        near-ties of the float32-based sums are decided on float64 distances (:meth:`NearTies.pick`)."""
        best = -math.inf
        if len(self.hot):
            best, cands, sums = self._best(self.pending)
        self.pending = None
        if best == -math.inf or best <= self._outside() + self.ties.sum_tol(best):
            self._rebuild()
            best, cands, sums = self._best()
        return self.ties.pick(cands, sums, self.alive)

    def _remove(self, members: np.ndarray) -> None:
        self.alive[members] = False
        self.n_alive -= len(members)
        r, e = self.removed, self.removed + len(members)
        self.order[r:e] = members
        self.taken[r + 1:e + 1] = self.taken[r] + np.cumsum(self.nn_host[members])
        self.removed = e
        if self.step is not None and len(self.hot) and len(members) == self.k:
            self.pending = self.step.remove(members, r)      # the device work, and the next pick's best sums
            return
        m = self._dev(members)
        self.alive_t.index_fill_(0, m, False)
        # the group's rows straight into the removed rows (no temporaries: on a GPU each op is a launch)
        xb = torch.index_select(self.x, 0, m, out=self.rx[r:e])
        qb = torch.index_select(self.sq, 0, m, out=self.rq[r:e])
        if len(self.hot):                             # the hot set stays exact: one (hot x group) product
            self.hs.index_fill_(0, self.hpos.index_select(0, m), -math.inf)
            self.hs[:-1].sub_(self.sum64(distances.pairwise(self.hx, xb, self.hq, qb)))

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
        top = torch.topk(self.hs, min(32, len(self.hs)))
        likely = self.hot_host[top.indices[torch.isfinite(top.values)].cpu().numpy()]
        batch = np.union1d(likely, [p])
        others = self.n_alive - 1
        kk = min(self.cache_size, others)
        complete = kk == others                      # the list holds every other alive point
        if 2 * self.n_alive < len(self.kid):              # compact the candidate columns as points leave
            self.kid = torch.nonzero(self.alive_t).squeeze(1)
            self.kx, self.ksq = self._rows(self.kid)
        bt = self._dev(batch)
        xa, qa = self._rows(bt)
        d = torch.empty((len(batch), len(self.kid)), dtype=self.x.dtype, device=self.dev)
        step = self._columns(len(batch))
        with torch_threads(self.dev, self.wide if len(batch) * len(self.kid) >= WIDE_MIN else 1):
            for r in range(0, len(self.kid), step):
                d[:, r:r + step] = distances.pairwise(xa, self.kx[r:r + step], qa, self.ksq[r:r + step])
            d.masked_fill_(~self.alive_t[self.kid][None, :], math.inf)
            d[torch.arange(len(batch), device=self.dev), torch.searchsorted(self.kid, bt)] = math.inf
            vals, idx = torch.topk(d, kk if complete else kk + 1, dim=1, largest=False)
        vals, kids = vals.cpu().numpy(), self.kid[idx].cpu().numpy()
        for row, q in enumerate(batch):
            v, ids = vals[row], kids[row]
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
        xa, qa = self._rows(self._dev(np.array([p])))
        xb, qb = self._rows(self._dev(alive))
        dist = distances.pairwise(xa, xb, qa, qb)[0].cpu().numpy()
        o = np.lexsort((alive, dist))
        return self.ties.settle(p, alive[o], dist[o], need, math.inf)

    def _from_cache(self, p: int, need: int) -> np.ndarray | None:
        entry = self.knn.pop(p, None)
        if entry is None:
            return None
        ids, dist, limit = entry
        ok = self.alive[ids]
        # points outside the list were at least ``limit`` away when it was made, and the alive set only
        # shrinks, so the list is exact if its need-th distance is below the limit (by more than the tolerance)
        return self.ties.settle(p, ids[ok], dist[ok], need, limit)

    # -------------------------------------------------------------------------------------- loop

    def run(self) -> tuple[list[np.ndarray], np.ndarray]:
        clusters = []
        bar = tqdm(total=self.n // self.k, desc="clustering: groups", disable=not self.progress, unit="cl")
        self.wide = torch.get_num_threads()
        with one_thread(self.dev), full_float32(), bar:
            while self.n_alive >= self.k:
                p = self._argmax()
                members = np.concatenate([[p], self._neighbours(p)]).astype(np.int64)
                self._remove(members)
                clusters.append(np.sort(members))
                bar.update()
        return clusters, np.flatnonzero(self.alive)
