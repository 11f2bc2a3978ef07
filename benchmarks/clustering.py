"""Seconds of same-size clustering (``same_size_clusters``) of N random 512-d latents: prints one JSON line per N.

The latents are standard Gaussian (seeded), as the inversions of a dataset roughly are; k = 5 by default.
``--n`` takes several sizes: 35126 is EyePACS's training set, 377110 MIMIC-CXR's images. Each line gives the
seconds, those of the initial pass of distance sums, the greedy's hot-set rebuilds and neighbour searches, the
block size and (on a GPU) the peak memory. ``--check N`` first clusters N points on the device and on the CPU and
says whether the assignments are identical (the GPU path must give the CPU path's clusters). ``--profile R`` runs
the first size under cProfile and writes its R functions of most own time to stderr (that line's seconds then
include the profiler's overhead, and it says ``"profiled": true``): where the greedy's time per group goes. On a GPU
the kernels run asynchronously: their time shows up at the host transfers that wait for them (``tolist``, ``cpu``).
On CUDA each pick's device work is a replayed CUDA graph (``graph_captures`` counts the recordings);
``MEDANON_CUDA_GRAPHS=0`` before the command times the same code without graphs.

    python benchmarks/clustering.py --device cuda --check 3000 --n 35126,377110 --progress [--profile 25]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time

import numpy as np
import torch

from medanon.anonymize import clustering_greedy
from medanon.anonymize.clustering import same_size_clusters


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def counted_run(x: torch.Tensor, k: int, progress: bool = False) -> tuple[object, dict]:
    """Cluster ``x`` with the greedy's phases counted: initial-pass seconds, rebuilds, neighbour searches."""
    G = clustering_greedy.Greedy
    stats = {"initial_s": 0.0, "rebuilds": 0, "neighbour_searches": 0}
    real_init, real_rebuild, real_nb, real_run = G._initial_sums, G._rebuild, G._neighbours, G.run

    def init(self):
        t0 = time.perf_counter()
        out = real_init(self)
        _sync(self.dev)
        stats["initial_s"] = round(time.perf_counter() - t0, 2)
        stats["block"] = self.block
        return out

    def rebuild(self):
        stats["rebuilds"] += 1
        return real_rebuild(self)

    def neighbours(self, p):
        cached = len(self.knn)
        out = real_nb(self, p)
        stats["neighbour_searches"] += len(self.knn) > cached
        return out

    def run(self):
        out = real_run(self)
        stats["static_step"] = self.step is not None
        stats["graph_captures"] = self.step.captures if self.step is not None else 0
        return out

    G._initial_sums, G._rebuild, G._neighbours, G.run = init, rebuild, neighbours, run
    try:
        return same_size_clusters(x, k, progress=progress), stats
    finally:
        G._initial_sums, G._rebuild, G._neighbours, G.run = real_init, real_rebuild, real_nb, real_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n", default="2000,35126")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--check", type=int, default=0, help="first compare device and CPU assignments at this N")
    ap.add_argument("--progress", action="store_true", help="progress bars on stderr (how far a long run got)")
    ap.add_argument("--profile", type=int, default=0, metavar="R",
                    help="run the first size under cProfile; its R costliest functions (own time) go to stderr")
    args = ap.parse_args()
    dev = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                       ("cpu" if args.device == "auto" else args.device))
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    if dev.type == "cuda":                       # context, cuBLAS handles and kernels, outside the timings
        same_size_clusters(torch.randn(64, args.dim, device=dev), args.k)
    if args.check:
        x = torch.randn(args.check, args.dim, generator=torch.Generator().manual_seed(1))
        a = same_size_clusters(x.to(dev), args.k).assignment(args.check)
        b = same_size_clusters(x, args.k).assignment(args.check)
        print(json.dumps({"benchmark": "clustering-check", "n": args.check, "device": name,
                          "identical_to_cpu": bool(np.array_equal(a, b))}), flush=True)
    for i, n in enumerate(int(v) for v in args.n.split(",")):
        x = torch.randn(n, args.dim, generator=torch.Generator().manual_seed(0)).to(dev)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        prof = cProfile.Profile() if args.profile and i == 0 else None
        _sync(dev)
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        c, stats = counted_run(x, args.k, args.progress)
        _sync(dev)
        seconds = time.perf_counter() - t0
        if prof is not None:
            prof.disable()
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(args.profile)
            print(f"clustering N = {n}, cProfile by own time:\n{text.getvalue()}", file=sys.stderr, flush=True)
            stats["profiled"] = True
        out = {"benchmark": "clustering", "n": n, "k": args.k, "dim": args.dim, "device": name,
               "threads": torch.get_num_threads(), "seconds": round(seconds, 2),
               "clusters": len(c.clusters), "min_size": int(c.sizes.min()), **stats}
        if dev.type == "cuda":
            out["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated(dev) / 2**20)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
