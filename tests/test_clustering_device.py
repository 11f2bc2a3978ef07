"""Same-size clustering on the data's device: state as tensors, a bounded number of ops per pick, full float32
products, the block chosen by free memory, float32 = float64 assignments, and the benchmark's one command."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from medanon.anonymize import clustering_distances, clustering_greedy
from medanon.anonymize.clustering import naive_same_size_clusters, same_size_clusters
from medanon.anonymize.clustering_distances import auto_block

ROOT = Path(__file__).resolve().parents[1]


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def test_per_point_state_is_on_the_data_device():
    """Sums, stamps, the hot set, its sums and positions, the alive mask and the candidate columns are tensors
    on the points' device (no per-point NumPy bookkeeping to copy back and forth)."""
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((300, 8)))
    g = clustering_greedy.Greedy(x, 3, block=64, cache=12, progress=False)
    g.run()
    for name in ("s", "nn", "stamp", "hot", "hs", "hpos", "alive_t", "kid"):
        t = getattr(g, name)
        assert isinstance(t, torch.Tensor) and t.device == x.device, name
    assert g.n_alive < 3 and len(g.hs) == len(g.hot) + 1
    # the one host copy of the hot set (made at each rebuild, read by the picks): the hot indices and the sentinel
    assert g.hot_host.tolist() == [*g.hot.tolist(), -1]


def test_ops_per_pick_do_not_grow_with_n():
    """The greedy loop's torch ops per pick (every kernel and view, hot-set rebuilds and neighbour searches
    included) stay flat from N = 400 to 1,600: no per-point or per-cluster loop of tensor ops (each would be a
    kernel launch, or a host sync, on a GPU)."""
    per_pick = []
    for n in (400, 1600):
        x = torch.from_numpy(np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32))
        g = clustering_greedy.Greedy(x, 4, block=2048, cache=16, progress=False)   # the initial pass: not counted
        with CountOps() as m:
            g.run()
        per_pick.append(sum(m.ops.values()) / (n // 4))
    assert per_pick[1] < 30 and per_pick[1] < 1.2 * per_pick[0], per_pick      # 27.0 and 27.7 today


def test_products_are_full_float32_inside_and_the_setting_is_restored(monkeypatch):
    """The bounds and near-tie tolerances assume float32 rounding: TF32 (``medanon.runtime.configure_cuda``)
    is off while the clustering runs and the caller's setting comes back."""
    seen = set()
    real = clustering_distances.pairwise

    def spy(a, b, a2, b2):
        seen.add(torch.get_float32_matmul_precision())
        return real(a, b, a2, b2)

    monkeypatch.setattr(clustering_distances, "pairwise", spy)
    before = torch.get_float32_matmul_precision()
    x = np.random.default_rng(1).standard_normal((200, 6)).astype(np.float32)
    try:
        torch.set_float32_matmul_precision("high")
        got = same_size_clusters(x, 4, block=32)
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)
    assert seen == {"highest"}
    assert (got.assignment(200) == naive_same_size_clusters(x, 4).assignment(200)).all()


def test_block_follows_free_gpu_memory(monkeypatch):
    assert auto_block(torch.device("cpu")) == 2048
    for free, block in ((80e9, 8192), (5e9, 4096), (1e9, 2048), (1e6, 2048)):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None, f=free: (int(f), int(80e9)))
        assert auto_block(torch.device("cuda")) == block, free


def test_float32_and_float64_give_identical_assignments():
    """Near-ties of the float32 sums (relative 2e-8) and distances (1e-5 of the k-th) are decided on float64
    distances, exact ties by the lowest index: float32 and float64 products give the same clusters, on
    high-dimensional Gaussians, duplicates and an integer grid (exact ties everywhere)."""
    rng = np.random.default_rng(7)
    cases = [rng.standard_normal((900, 512)),
             rng.standard_normal((120, 32))[rng.integers(0, 120, 700)],
             rng.integers(0, 3, (800, 6)).astype(np.float64)]
    for x in cases:
        n = len(x)
        a = same_size_clusters(x, 5, dtype=torch.float32, block=128).assignment(n)
        b = same_size_clusters(x, 5, dtype=torch.float64, block=128).assignment(n)
        assert (a == b).all()
        assert (a == naive_same_size_clusters(x, 5).assignment(n)).all()


def test_benchmark_command_checks_the_device_against_the_cpu():
    """The GPU command of benchmarks/clustering.py, in its CPU form: the check line and one timing line per size,
    the first profiled (its costliest functions on stderr: 60 of them, so that which five cost most at this size,
    often numpy builtins, cannot hide the clustering code), the second not."""
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "clustering.py"), "--device", "cpu",
                        "--check", "120", "--n", "150,100", "--dim", "16", "--profile", "60"],
                       capture_output=True, text=True, timeout=120, check=True)
    lines = [json.loads(s) for s in p.stdout.splitlines()]
    assert lines[0] == {"benchmark": "clustering-check", "n": 120, "device": "cpu", "identical_to_cpu": True}
    assert lines[1]["n"] == 150 and lines[1]["clusters"] == 30 and lines[1]["min_size"] == 5
    assert lines[1]["rebuilds"] >= 1 and lines[1]["block"] == 2048
    assert lines[1]["profiled"] is True and "profiled" not in lines[2] and lines[2]["clusters"] == 20
    assert p.stderr.count("cProfile by own time") == 1 and "clustering_greedy.py" in p.stderr


def test_merged_stamp_groups_give_the_same_clusters():
    """Off the CPU, small groups of stale sums share products with the distances before each row's stamp masked
    out; forced on here, the clusters are still the float64 reference's, and merged chunks did occur."""
    x = np.random.default_rng(1).standard_normal((2000, 16))
    g = clustering_greedy.Greedy(torch.from_numpy(x).float(), 5, block=256, cache=20, progress=False,
                                 exact=torch.from_numpy(x))
    g.merge = True
    merged = []
    real = g._chunks
    g._chunks = lambda stamps, counts: merged.extend(c[3] for c in real(stamps, counts)) or real(stamps, counts)
    clusters, left = g.run()
    assert any(merged) and not len(left)
    ref = naive_same_size_clusters(x, 5)
    assert sorted(map(tuple, clusters)) == sorted(tuple(m) for m in ref.clusters)


def test_duplicate_groups_are_bit_equal_rows(monkeypatch):
    """Duplicates are found by a row hash checked word by word; a collision falls back to sorting whole rows;
    either way the groups are exactly the bit-equal rows (float32, float64, and float16 rows of odd width)."""
    rng = np.random.default_rng(5)

    def partition(labels):
        return sorted(tuple(np.flatnonzero(labels == v)) for v in np.unique(labels))

    for dtype, d in ((np.float32, 64), (np.float64, 8), (np.float16, 5)):
        rows = rng.standard_normal((40, d)).astype(dtype)[rng.integers(0, 40, 300)]
        rows[7] = rows[8]
        rows[7, 0], rows[8, 0] = -0.0, 0.0                                    # equal values, different bits
        _, ref, ref_counts = np.unique(rows.view(np.dtype((np.void, rows.itemsize * d))).ravel(),
                                       return_inverse=True, return_counts=True)
        label, counts = clustering_distances.duplicate_groups(np.ascontiguousarray(rows))
        assert partition(label) == partition(ref.ravel()) and sorted(counts) == sorted(ref_counts)
        assert label[7] != label[8]
        monkeypatch.setattr(clustering_distances, "_row_hash", lambda w: np.zeros(len(w), np.uint64))
        label, _ = clustering_distances.duplicate_groups(np.ascontiguousarray(rows))   # every row collides
        assert partition(label) == partition(ref.ravel())
        monkeypatch.undo()


def test_static_step_layout_gives_the_reference_clusters(monkeypatch):
    """The layout CUDA graphs replay (hot set in power-of-two capacity buffers padded with -inf sums, the group and
    its removed-row positions in one index buffer, the next pick's best sums returned by the removal), run on the
    CPU: the float64 reference's clusters on Gaussians, duplicates and an integer grid, with the capacity both
    grown and shrunk along the way, and the same removal order as the eager layout."""
    monkeypatch.setattr(clustering_greedy, "HOT_MIN", 8)                   # hot sets small enough to shrink
    rng = np.random.default_rng(11)
    cases = [rng.standard_normal((700, 64)),
             rng.standard_normal((90, 16))[rng.integers(0, 90, 500)],
             rng.integers(0, 3, (600, 5)).astype(np.float64)]
    for x in cases:
        t = torch.from_numpy(x)
        g = clustering_greedy.Greedy(t.float(), 5, block=128, cache=20, progress=False, exact=t, static=True,
                                     hot_fraction=2)
        caps = []
        real = g.step._allocate
        g.step._allocate = lambda cap, caps=caps, real=real: caps.append(cap) or real(cap)
        clusters, left = g.run()
        assert g.step.graph is None and g.step.captures == 0            # no graphs off CUDA
        assert len(caps) >= 2 and caps[0] > min(caps), caps              # the capacity followed the hot set
        ref = naive_same_size_clusters(x, 5)
        assert sorted(map(tuple, clusters)) == sorted(tuple(m) for m in ref.clusters) and not len(left)
        eager = clustering_greedy.Greedy(t.float(), 5, block=128, cache=20, progress=False, exact=t, static=False,
                                         hot_fraction=2)
        eager.run()
        assert (eager.order == g.order).all()
        assert torch.equal(eager.rx, g.rx) and torch.equal(eager.rq, g.rq)   # the removed rows, written by position


def test_static_step_is_the_default_on_cuda_only(monkeypatch):
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32))
    assert clustering_greedy.Greedy(x, 5, block=64, cache=20, progress=False).step is None
    monkeypatch.setenv("MEDANON_CUDA_GRAPHS", "0")
    from medanon.anonymize.clustering_step import graphs_enabled
    assert not graphs_enabled()
    monkeypatch.setenv("MEDANON_CUDA_GRAPHS", "1")
    assert graphs_enabled()


class _FakeStream:
    def wait_stream(self, other):
        pass


def _fake_cuda(monkeypatch, graph_cls):
    """Stand-ins for the CUDA calls of the graph path, so that its bookkeeping runs on the CPU."""
    import contextlib

    monkeypatch.setattr(torch.cuda, "CUDAGraph", graph_cls)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _FakeStream())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)


def _graph_greedy(x):
    t = torch.from_numpy(x)
    g = clustering_greedy.Greedy(t.float(), 5, block=128, cache=20, progress=False, exact=t, static=True,
                                 hot_fraction=2)
    g.step.graphs, g.step.stream = True, _FakeStream()
    return g


def test_graph_path_replays_on_the_live_buffers(monkeypatch):
    """The graph path's bookkeeping with a stand-in graph: the first pick on new buffers runs eagerly (warm-up), the
    next is recorded (here: run once) and every later pick replays. Each replay checks that the buffers the graph was
    recorded on are still the ones the greedy reads and writes (a graph on stale buffers would silently compute on
    old data); new capacities re-record. The clusters are the float64 reference's."""
    monkeypatch.setattr(clustering_greedy, "HOT_MIN", 8)
    holder = {}

    class RecordingGraph:
        def capture_begin(self):
            self.fresh = True

        def capture_end(self):
            self.bound = holder["live"]()

        def replay(self):
            if self.fresh:                        # recording ran the pick once already (a real one runs nothing)
                self.fresh = False
                return
            assert all(a is b for a, b in zip(self.bound, holder["live"](), strict=True)), "replay on stale buffers"
            holder["replays"] = holder.get("replays", 0) + 1
            holder["step"]._body()

    _fake_cuda(monkeypatch, RecordingGraph)
    x = np.random.default_rng(3).standard_normal((600, 24))
    g = _graph_greedy(x)
    s = g.step
    holder["step"] = s
    holder["live"] = lambda: (s.hs, s.hx, s.hq, s.buf, s.out, g.alive_t, g.rx, g.rq, g.hpos, g.x, g.sq)
    clusters, left = g.run()
    ref = naive_same_size_clusters(x, 5)
    assert sorted(map(tuple, clusters)) == sorted(tuple(m) for m in ref.clusters) and not len(left)
    assert s.captures >= 2 and holder["replays"] > 50


def test_graph_that_cannot_be_recorded_warns_and_runs_eagerly(monkeypatch):
    class FailingGraph:
        def capture_begin(self):
            raise RuntimeError("operation not permitted when stream is capturing")

    _fake_cuda(monkeypatch, FailingGraph)
    x = np.random.default_rng(4).standard_normal((300, 8))
    g = _graph_greedy(x)
    with pytest.warns(RuntimeWarning, match="could not be recorded"):
        clusters, _ = g.run()
    assert not g.step.graphs and g.step.captures == 0
    ref = naive_same_size_clusters(x, 5)
    assert sorted(map(tuple, clusters)) == sorted(tuple(m) for m in ref.clusters)
