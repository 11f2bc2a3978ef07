"""How often the report's patient bootstrap intervals cover the true value, by the number of patients they rest on.

Images of one patient are not independent, so the report's utility and attack intervals resample whole patients. A
percentile bootstrap over G clusters holds its nominal level only when G is not small. This simulates data with a
known answer and counts how often the 95 % interval covers it:

- **utility** (:func:`medanon.evaluate.utility.paired_intervals`, what the report's utility table uses): a binary
  label per patient (balanced), a classifier score = label shift + patient effect + image noise (patient sd 1.0,
  image sd 0.3, shift 1.0, ``--images`` images per patient); the truth is the population AUROC and accuracy at 0.5,
  from 400,000 simulated patients.
- **attack rate** (:func:`medanon.evaluate.attacks.risk.rate` with patient groups, what every attack's rate and
  residual risk use): each patient's images succeed with the patient's own probability, drawn from Beta(0.6, 1.4)
  (mean 0.3, strong within-patient correlation); the truth is 0.3.

Prints one JSON line per (what, patients): coverage, its Monte Carlo standard error, the mean interval width and, for
AUROC, the share of resamples where it was undefined (one class drawn).

    python benchmarks/interval_coverage.py [--patients 5,10,20,40] [--images 4] [--reps 200] [--resamples 500]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy.special import expit

from medanon.evaluate import utility as util
from medanon.evaluate.attacks.risk import rate

PATIENT_SD, IMAGE_SD, SHIFT = 1.0, 0.3, 1.0
BETA = (0.6, 1.4)


def _scores(rng: np.random.Generator, patients: int, images: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y_patient = rng.permutation(np.arange(patients) % 2)                 # balanced labels, one per patient
    effect = rng.normal(0.0, PATIENT_SD, patients)
    pid = np.repeat(np.arange(patients), images)
    score = SHIFT * (y_patient[pid] - 0.5) + effect[pid] + rng.normal(0.0, IMAGE_SD, len(pid))
    return y_patient[pid], score, pid


def utility_truth(seed: int) -> dict[str, float]:
    """Population AUROC and accuracy at probability 0.5 of the score, by simulation of many patients."""
    from sklearn.metrics import roc_auc_score

    y, s, _ = _scores(np.random.default_rng(seed), 400_000, 1)
    return {"auroc": float(roc_auc_score(y, s)), "binary_acc": float(np.mean((s > 0) == (y == 1)))}


def utility_coverage(patients: int, images: int, reps: int, resamples: int, truth: dict[str, float],
                     seed: int) -> list[dict]:
    task = util.KNOWN_TASKS["pneumonia"]
    rng = np.random.default_rng(seed)
    hit = {k: [] for k in truth}
    width = {k: [] for k in truth}
    undefined = []
    for r in range(reps):
        y, s, pid = _scores(rng, patients, images)
        p1 = expit(s)
        probs = np.stack([1 - p1, p1], 1)
        out = util.paired_intervals(task, y, [probs], [probs], n_resamples=resamples, seed=r, groups=pid)
        for k in truth:
            lo, hi = out[k]["release"]["ci"]
            hit[k].append(lo <= truth[k] <= hi)
            width[k].append(hi - lo)
        undefined.append(out["auroc"].get("undefined_resamples", 0) / resamples)
    rows = []
    for k in truth:
        c = float(np.mean(hit[k]))
        rows.append({"what": f"utility {k}", "patients": patients, "images_per_patient": images,
                     "coverage": round(c, 3), "mc_se": round(float(np.sqrt(c * (1 - c) / reps)), 3),
                     "mean_width": round(float(np.nanmean(width[k])), 3), "truth": round(truth[k], 4),
                     **({"undefined_resamples": round(float(np.mean(undefined)), 3)} if k == "auroc" else {})})
    return rows


def rate_coverage(patients: int, images: int, reps: int, resamples: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    truth = BETA[0] / sum(BETA)
    hit, width = [], []
    for r in range(reps):
        p = rng.beta(*BETA, patients)
        pid = np.repeat(np.arange(patients), images)
        outcomes = rng.random(len(pid)) < p[pid]
        lo, hi = rate(outcomes, groups=pid, seed=r, n_resamples=resamples).ci
        hit.append(lo <= truth <= hi)
        width.append(hi - lo)
    c = float(np.mean(hit))
    return {"what": "attack rate", "patients": patients, "images_per_patient": images, "coverage": round(c, 3),
            "mc_se": round(float(np.sqrt(c * (1 - c) / reps)), 3), "mean_width": round(float(np.mean(width)), 3),
            "truth": truth}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patients", default="5,10,20,40", help="comma-separated numbers of patients")
    ap.add_argument("--images", type=int, default=4, help="images per patient")
    ap.add_argument("--reps", type=int, default=200, help="simulated datasets per setting")
    ap.add_argument("--resamples", type=int, default=500, help="bootstrap resamples per interval")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    truth = utility_truth(args.seed)
    rows = []
    for g in (int(x) for x in args.patients.split(",")):
        t0 = time.perf_counter()
        batch = [*utility_coverage(g, args.images, args.reps, args.resamples, truth, args.seed + g),
                 rate_coverage(g, args.images, args.reps, args.resamples, args.seed + 1000 + g)]
        for row in batch:
            row.update(reps=args.reps, resamples=args.resamples, seconds=round(time.perf_counter() - t0, 1))
            print(json.dumps(row), flush=True)
        rows += batch
    return rows


if __name__ == "__main__":
    main()
