"""Coverage of the patient-clustered AUC interval (``medanon.evaluate.attacks.auc.delong`` with patient groups) and
the rejection rate of its p-value, in simulation: each patient has 4 images whose scores share the patient's level
(between-patient spread 1, within 0.2). Under the null (no shift) the interval should cover 0.5 and p < 0.05 should
happen at most 5 % of the time; with a large shift (true AUC about 0.98) the interval should cover the true AUC.

    python benchmarks/auc_coverage.py [--reps 600] [--bootstrap-only]

``--bootstrap-only``: the percentile interval and bootstrap p-value alone, without the widening at 0 or 1 and the
permutation floor (what the report used before them), for comparison.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy.stats import norm

from medanon.evaluate.attacks.auc import delong

IMAGES = 4
WITHIN = 0.2


def _draw(rng, patients: int, shift: float):
    up, un = rng.normal(shift, 1, patients), rng.normal(0, 1, patients)
    pos = (up[:, None] + WITHIN * rng.normal(0, 1, (patients, IMAGES))).ravel()
    neg = (un[:, None] + WITHIN * rng.normal(0, 1, (patients, IMAGES))).ravel()
    return pos, neg, np.repeat([f"p{i}" for i in range(patients)], IMAGES), \
        np.repeat([f"n{i}" for i in range(patients)], IMAGES)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=600)
    ap.add_argument("--bootstrap-only", action="store_true", help="no widening at 0 or 1, no permutation floor")
    args = ap.parse_args()
    if args.bootstrap_only:
        import medanon.evaluate.attacks.auc as auc

        auc.widened_at_edges = lambda ci, est, m, n, confidence=0.95, how="": (list(ci), how)
        auc.permutation_floor = lambda m, n: 0.0
    rng = np.random.default_rng(7)
    t = time.perf_counter()
    out: dict = {"benchmark": "auc_coverage", "reps": args.reps, "images_per_patient": IMAGES,
                 "interval": "bootstrap only" if args.bootstrap_only else "as reported"}
    for patients in (3, 5, 10):
        cover = reject = 0
        for r in range(args.reps):
            pos, neg, gp, gn = _draw(rng, patients, 0.0)
            d = delong(pos, neg, pos_groups=gp, neg_groups=gn, seed=r)
            cover += d["ci"][0] <= 0.5 <= d["ci"][1]
            reject += d["p_value"] < 0.05
        out[f"null_{patients}_per_side"] = {"coverage": cover / args.reps, "p_below_0.05": reject / args.reps}
    shift = 3.0
    true = float(norm.cdf(shift / np.sqrt(2 * (1 + WITHIN ** 2))))
    for patients in (10, 20):
        cover = collapsed = 0
        for r in range(args.reps):
            pos, neg, gp, gn = _draw(rng, patients, shift)
            d = delong(pos, neg, pos_groups=gp, neg_groups=gn, seed=r)
            cover += d["ci"][0] <= true <= d["ci"][1]
            collapsed += d["ci"][0] == d["ci"][1]
        out[f"auc_{true:.3f}_{patients}_per_side"] = {"coverage": cover / args.reps,
                                                      "zero_width": collapsed / args.reps}
    out["seconds"] = round(time.perf_counter() - t, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
