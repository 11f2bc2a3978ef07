"""CPU seconds of one linkability attack at the demo's size, its pair bootstraps by clusters × clusters count
matrices (``medanon.evaluate.attacks.pair_bootstrap``) against weighting every pair in every resample.

Synthetic identity embeddings shaped like the demo's fundus split: 140 source patients × 4 images released one
record per image (so 311,360 outer and 155,680 inner impostor pairs), 29 held-out patients × 4 images. Alternating
rounds, one thread, process CPU seconds; the two results must be identical (compared as JSON).

    OMP_NUM_THREADS=1 python benchmarks/evaluation_pairs.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from medanon.evaluate.attacks import linkability as L


def world(seed: int = 0, patients: int = 140, held: int = 29, per: int = 4, dim: int = 64) -> dict:
    rng = np.random.default_rng(seed)
    pid = np.repeat(np.arange(patients), per)
    src = rng.standard_normal((patients, dim))[pid] + 0.5 * rng.standard_normal((patients * per, dim))
    hp = np.repeat(np.arange(held), per)
    h = rng.standard_normal((held, dim))[hp] + 0.5 * rng.standard_normal((held * per, dim))
    return dict(control_emb=h, control_patients=[f"h{p}" for p in hp],
                release_emb=src + 0.3 * rng.standard_normal(src.shape),
                record_patients=[frozenset([f"p{p}"]) for p in pid], source_emb=src,
                source_patients=[f"p{p}" for p in pid], source_record=list(range(len(src))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    kw = world()
    seconds: dict[str, list[float]] = {"every pair": [], "count matrices": []}
    results = {}
    for rnd in range(args.rounds):
        arms = (("every pair", True), ("count matrices", False))
        for arm, gather in arms if rnd % 2 == 0 else arms[::-1]:
            L.GATHER = gather
            t0 = time.process_time()
            results[arm] = json.dumps(L.linkability(**kw), sort_keys=True, default=float)
            seconds[arm].append(time.process_time() - t0)
            print(json.dumps({"round": rnd, "arm": arm, "cpu_seconds": round(seconds[arm][-1], 3)}), flush=True)
    L.GATHER = False
    a, b = (statistics.median(seconds[k]) for k in ("every pair", "count matrices"))
    same = results["every pair"] == results["count matrices"]
    print(json.dumps({"benchmark": "evaluation_pairs", "every_pair_cpu_s": round(a, 3),
                      "count_matrices_cpu_s": round(b, 3), "ratio": round(a / b, 2), "identical": same,
                      "rounds": args.rounds}), flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
