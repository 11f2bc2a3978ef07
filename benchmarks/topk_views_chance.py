"""Top-K membership on releases that carry nothing, with augmentation views: does its chance match what the attack
reaches, and how often does its residual risk read as a leak? Pure-noise records of 16 clusters of k = 10 members,
each written ``views`` times (k-SALSA's ``--views``), ranked against 1,000 held-out images; one JSON line per
``views``: the mean top-K accuracy and reported chance over the runs, and the runs whose residual-risk interval lies
above 0 (nominal: at most 2.5 % of them).

    python benchmarks/topk_views_chance.py [--runs 100]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from medanon.evaluate.attacks.membership import top_k_membership


def run(views: int, runs: int, *, clusters: int = 16, k: int = 10, dim: int = 24) -> dict:
    acc, chance, flagged = [], [], 0
    pats = [f"p{i}" for i in range(clusters * k)]
    sources = [list(range(c * k, c * k + k)) for c in range(clusters) for _ in range(views)]
    for seed in range(runs):
        rng = np.random.default_rng(1000 + seed)
        out = top_k_membership(release_desc=rng.normal(size=(len(sources), dim)), record_sources=sources,
                               source_desc=rng.normal(size=(clusters * k, dim)),
                               heldout_desc=rng.normal(size=(1000, dim)), seed=seed, source_patients=pats,
                               n_resamples=200)
        acc.append(out["top_k_accuracy"])
        chance.append(out["chance"])
        flagged += out["risk"]["residual_risk"]["ci"][0] > 0
    return {"benchmark": "topk_views_chance", "views": views, "runs": runs, "clusters": clusters, "k": k,
            "mean_top_k": round(float(np.mean(acc)), 4), "mean_chance": round(float(np.mean(chance)), 4),
            "flagged_runs": int(flagged)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    for views in (1, 2, 3):
        print(json.dumps(run(views, args.runs)), flush=True)


if __name__ == "__main__":
    main()
