"""Seconds of same-size clustering (``same_size_clusters``) of N random 512-d latents: prints one JSON line per N.

The latents are standard Gaussian (seeded), as the inversions of a dataset roughly are; k = 5 by default.
``--n`` takes several sizes: 35126 is EyePACS's training set, 377110 MIMIC-CXR's images.

    python benchmarks/clustering.py --device cuda --n 35126,377110
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from medanon.anonymize.clustering import same_size_clusters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n", default="2000,35126")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--dim", type=int, default=512)
    args = ap.parse_args()
    dev = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                       ("cpu" if args.device == "auto" else args.device))
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    for n in (int(v) for v in args.n.split(",")):
        x = torch.randn(n, args.dim, generator=torch.Generator().manual_seed(0)).to(dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        c = same_size_clusters(x, args.k)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        print(json.dumps({"benchmark": "clustering", "n": n, "k": args.k, "dim": args.dim, "device": name,
                          "threads": torch.get_num_threads(), "seconds": round(time.perf_counter() - t0, 2),
                          "clusters": len(c.clusters)}), flush=True)


if __name__ == "__main__":
    main()
