"""The device work of one pick of the same-size greedy, on fixed buffers a CUDA graph can replay.

Each pick of :class:`medanon.anonymize.clustering_greedy.Greedy` removes a group of k points and keeps the hot
set's sums exact: mark the group dead, copy its rows to the removed rows, subtract its distances from the hot sums,
then find the two best hot sums. On a GPU those are about twenty small kernels whose time is their launches
(0.8 ms a pick on an H100 as separate launches), so with ``static`` the step works on buffers whose addresses
never change between rebuilds of the hot set and, on CUDA, is recorded once as a CUDA graph and replayed:

- the hot set lives in capacity buffers (``cap`` rows, the power of two at or above the hot set's size): rows
  past the hot set are zeros and their sums ``-inf`` (they never win and stay ``-inf`` under subtraction); the
  last slot is the sentinel of the points outside the hot set, as in the eager layout. Every pick reads all
  ``cap`` rows, so the capacity follows the hot set down;
- the group's indices and its positions in the removed rows arrive in one small buffer (copied from pinned host
  memory without waiting), so the same recorded kernels serve every pick;
- a new capacity (the hot set grew past it or shrank below a quarter of it: hot sets shrink with the points
  left, so a few times a run) drops the graph; it is recorded again at the next pick, after one eager pick on the
  recording stream. Recording skips ``torch.cuda.graph``'s garbage collection and cache flush, so that a hot set
  that grows for a near-tie costs one more recording, not a pause.

The step's arithmetic is the eager step's up to float32 rounding (a product over more rows may sum in another
order), which the greedy's float64 re-checks of near-ties absorb: the clusters are the float64 greedy's either way.
``tests/test_clustering_device.py`` runs the static layout on the CPU against the exact reference. A graph that
cannot be recorded (a driver or build without support) is reported once by a warning and the run continues
without graphs. ``MEDANON_CUDA_GRAPHS=0`` turns them off.
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import torch

from medanon.anonymize import clustering_distances as distances
from medanon.errors import user_stacklevel


def graphs_enabled() -> bool:
    """CUDA graphs for the greedy's picks unless ``MEDANON_CUDA_GRAPHS=0``."""
    return os.environ.get("MEDANON_CUDA_GRAPHS", "1") != "0"


class StaticStep:
    """The hot set of a :class:`~medanon.anonymize.clustering_greedy.Greedy` in capacity buffers, and its pick step.

    :meth:`install` writes a new hot set (at each rebuild) into the buffers and sets the greedy's ``hs``,
    ``hot_host`` and ``hpos``; :meth:`remove` runs one pick's device work and returns the two best hot sums and the
    best one's position, as :meth:`Greedy._best` reads them."""

    def __init__(self, greedy, *, graphs: bool):
        self.g = greedy
        self.dev = greedy.dev
        self.graphs = graphs and self.dev.type == "cuda"
        self.k = greedy.k
        self.cap = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.warm = False                       # the body has run once on the side stream for these buffers
        self.stream = torch.cuda.Stream(self.dev) if self.graphs else None
        pin = self.graphs
        self.host = torch.zeros(2 * self.k, dtype=torch.int64, pin_memory=pin)   # the group, then its positions
        self.host_np = self.host.numpy()
        self.buf = torch.zeros(2 * self.k, dtype=torch.int64, device=self.dev)
        self.out = torch.zeros(3, dtype=torch.float64, device=self.dev)
        self.captures = 0

    # ------------------------------------------------------------------------------------------ hot set

    def install(self, hot: torch.Tensor, sums: torch.Tensor) -> None:
        """Put the hot set ``hot`` (indices) with its exact ``sums`` into the buffers."""
        g, h = self.g, len(hot)
        if h > self.cap or 4 * h < self.cap:
            self._allocate(1 << max(h - 1, 1).bit_length())
        self.hs[:h] = sums
        self.hs[h:] = -math.inf
        torch.index_select(g.x, 0, hot, out=self.hx[:h])
        torch.index_select(g.sq, 0, hot, out=self.hq[:h])
        self.hx[h:] = 0.0
        self.hq[h:] = 0.0
        g.hpos.fill_(self.cap)
        g.hpos[hot] = torch.arange(h, device=self.dev)
        g.hot_host = np.full(self.cap + 1, -1, np.int64)
        g.hot_host[:h] = hot.cpu().numpy()
        g.hs = self.hs

    def _allocate(self, cap: int) -> None:
        g = self.g
        self.cap = cap
        self.hs = torch.full((cap + 1,), -math.inf, dtype=torch.float64, device=self.dev)
        self.hx = torch.zeros((cap, g.x.shape[1]), dtype=g.x.dtype, device=self.dev)
        self.hq = torch.zeros(cap, dtype=g.sq.dtype, device=self.dev)
        self.graph, self.warm = None, False     # recorded again on the new buffers

    # ------------------------------------------------------------------------------------------ the step

    def _body(self) -> None:
        g, k = self.g, self.k
        m, pos = self.buf[:k], self.buf[k:]
        g.alive_t.index_fill_(0, m, False)
        xb, qb = g.x.index_select(0, m), g.sq.index_select(0, m)
        g.rx.index_copy_(0, pos, xb)
        g.rq.index_copy_(0, pos, qb)
        self.hs.index_fill_(0, g.hpos.index_select(0, m), -math.inf)
        self.hs[:-1].sub_(g.sum64(distances.pairwise(self.hx, xb, self.hq, qb)))
        top = torch.topk(self.hs, 2)
        torch.cat([top.values, top.indices[:1].double()], out=self.out)

    def remove(self, members: np.ndarray, first: int) -> list[float]:
        """Remove the group ``members`` (k indices), whose rows go to removed rows ``first`` ... ``first + k - 1``;
        returns [best hot sum, second best, the best one's position in the hot set]."""
        self.host_np[:self.k] = members
        self.host_np[self.k:] = np.arange(first, first + self.k)
        self.buf.copy_(self.host, non_blocking=self.graphs)
        if not self.graphs:
            self._body()
        elif self.graph is not None:
            self.graph.replay()
        elif not self.warm:
            self._warm_up()
        else:
            self._record_and_replay()
        return self.out.cpu().tolist()

    def _warm_up(self) -> None:
        """This pick, run on the side stream the graph will be recorded on (first-use work happens outside it)."""
        current = torch.cuda.current_stream(self.dev)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            self._body()
        current.wait_stream(self.stream)
        self.warm = True

    def _record_and_replay(self) -> None:
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.dev)
        try:
            with torch.cuda.stream(self.stream):                 # records; nothing runs
                graph.capture_begin()
                try:
                    self._body()
                finally:
                    graph.capture_end()
        except RuntimeError as e:
            torch.cuda.synchronize(self.dev)
            warnings.warn(f"same-size clustering: a CUDA graph of the greedy's step could not be recorded ({e}); "
                          "it continues without graphs (same clusters, more time per pick)", RuntimeWarning,
                          stacklevel=user_stacklevel())
            self.graphs = False
            self._body()
            return
        self.graph = graph
        self.captures += 1
        graph.replay()
