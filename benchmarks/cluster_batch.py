"""k-SALSA's clusters per batch on the CPU: seconds per cluster and peak memory for each batch size.

The demo's setting: its ReStyle codec (``checkpoints/restyle-map-fundus64.pt``, 64 px, styles and a spatial map;
``--model`` another), EfficientNet-Lite0
features, clusters of k patients with 4 images each (``S = 4k`` sources a cluster), default k-SALSA settings.
Each (k, batch) runs in a fresh process (so its peak resident memory is its own), times ``--steps`` Adam steps after
one warm-up step and scales to 100 steps. Prints one JSON line per (k, batch), then a summary line with each
batch's speed-up over the smallest one.

    python benchmarks/cluster_batch.py [--k 2 5 10] [--batch 8 16 32 64] [--steps 10] [--threads 2] [--model PT]

The CPU default (:func:`medanon.anonymize.averaging.resolve_batch`) comes from this benchmark's lines.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def one(k: int, batch: int, steps: int, threads: int, model: str) -> dict:
    import torch

    from medanon.anonymize.salsa import KSalsa, SalsaConfig
    from medanon.codecs.stylegan import load_codec
    from medanon.models.features import get_feature_network

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    codec = load_codec(model)
    net = get_feature_network("efficientnet-lite0", input_size=None)
    s = 4 * k
    with torch.no_grad():
        images = torch.rand(batch * s, 3, 64, 64) * 2 - 1
        latents = codec.encode(images)
    images = images.reshape(batch, s, 3, 64, 64)
    latents = latents.reshape(batch, s, *latents.shape[1:])
    weights = torch.ones(batch, s, dtype=torch.float64)

    def run(n: int):
        KSalsa(codec.render, net, SalsaConfig(steps=n), style_rows=codec.generator.num_ws).average(
            images, latents, weights)

    run(1)                                      # warm-up: first calls pick kernels for each shape
    t0, c0 = time.perf_counter(), time.process_time()
    run(steps)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"model": Path(model).name, "k": k, "sources_per_cluster": s, "batch": batch, "threads": threads,
            "steps_timed": steps,
            "s_per_cluster_100_steps": round(wall / batch * 100 / steps, 3),
            "cpu_s_per_cluster_100_steps": round(cpu / batch * 100 / steps, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, nargs="+", default=[2, 5, 10])
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=str(ROOT / "checkpoints" / "restyle-map-fundus64.pt"))
    ap.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)      # internal: k batch, in this process
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(*a.one, a.steps, a.threads, a.model)))
        return
    rows = []
    for k in a.k:
        for b in a.batch:
            out = subprocess.run([sys.executable, __file__, "--one", str(k), str(b), "--steps", str(a.steps),
                                  "--threads", str(a.threads), "--model", a.model],
                                 check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    first = min(a.batch)
    speedup = {f"k{k}": {str(r["batch"]): round(base["s_per_cluster_100_steps"] / r["s_per_cluster_100_steps"], 2)
                         for r in rows if r["k"] == k}
               for k in a.k for base in [next(r for r in rows if r["k"] == k and r["batch"] == first)]}
    print(json.dumps({"benchmark": "cluster_batch", "speedup_over_batch": first, "by_k": speedup}))


if __name__ == "__main__":
    main()
