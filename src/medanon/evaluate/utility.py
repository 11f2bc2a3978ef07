"""Utility: train on the release, test on held-out real images (k-SALSA §4.4, GMIA §3, VS-Snow §2.4).

Tasks, chosen by the labels the release and the real data share:

- ``grade`` (fundus, ICDR 0-4): one 5-class classifier; reported as 5-class accuracy and quadratic-
  weighted Cohen's kappa (k-SALSA Table 2, APTOS), binary normal-vs-DR accuracy, F1 and AUROC
  (k-SALSA's EyePACS setting; score ``1 - p(grade 0)``), and the 3-class healthy / NPDR (1-3) / PDR (4)
  macro F1 of VS-Snow. The binary and 3-class numbers come from the 5-class model's summed
  probabilities; the papers trained separate models for them (a deliberate saving, stated in the report);
- ``pneumonia`` (chest X-ray): AUROC and average precision (DP-GLOW Table 3 reports AUC), accuracy, F1.

Protocol: every seed trains one classifier on the release (its released, aggregated labels) and
one on real images of the source split *subsampled to the release's size* (k-SALSA Table 2: the
"Original" row), both with the same budget of optimiser steps; both are tested on all held-out real
images. Results are mean ± sd over seeds, and a **paired bootstrap over test images**
(:func:`paired_intervals`, ``scipy.stats.bootstrap`` with ``paired=True``, percentile): the seed-averaged
metric of the release's classifiers, of the real baseline's, and their difference, each with its interval
(the sampling error of the test set, which the sd over seeds does not contain; for AUROC this is the
bootstrap alternative to DeLong). A seed whose metric is undefined (NaN) is counted and reported
(``nan_seeds``), never dropped silently. Optional: the full-size real baseline, and the real model
applied to the released images (train on real, test on release: DP-GLOW's direction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from medanon.evaluate import metrics as M


@dataclass(frozen=True)
class Task:
    label: str                                  # label column in the real data and labels.csv
    num_classes: int                            # classes of the trained model
    kind: str                                   # "grade" | "binary" | "multiclass"

    def targets(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mask of usable rows, integer targets) from canonical float labels."""
        v = np.asarray(values, np.float64)
        ok = ~np.isnan(v) & (v >= 0) & (v < self.num_classes)
        return ok, v[ok].astype(np.int64)


KNOWN_TASKS = {
    "grade": Task("grade", 5, "grade"),
    "pneumonia": Task("pneumonia", 2, "binary"),
}

# The headline metric of each task (privacy-utility plots, summaries) and every metric's display name.
HEADLINE = {"grade": "kappa", "binary": "auroc", "multiclass": "f1_macro"}
METRIC_NAMES = {
    "accuracy": "Accuracy (5-class)", "kappa": "Cohen's κ (quadratic)", "binary_accuracy": "Accuracy normal vs DR",
    "binary_f1": "F1 normal vs DR", "binary_auroc": "AUROC normal vs DR", "f1_3class": "F1 healthy/NPDR/PDR (macro)",
    "accuracy_3class": "Accuracy healthy/NPDR/PDR", "auroc": "AUROC", "ap": "Average precision",
    "binary_acc": "Accuracy", "f1": "F1", "f1_macro": "F1 (macro)", "acc": "Accuracy",
}


def choose_tasks(names: Sequence[str], release_labels: Sequence[str], real_labels: Sequence[str]) -> list[Task]:
    """The tasks to run: ``names`` if given (``("none",)``: no utility evaluation), else every known task
    whose label both sides have."""
    if tuple(names) == ("none",):
        return []
    wanted = list(names) or [t for t in KNOWN_TASKS if t in release_labels and t in real_labels]
    return [KNOWN_TASKS.get(n, Task(n, 0, "multiclass")) for n in wanted]


def score(task: Task, y_true: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    """Every metric of ``task`` from the true classes and predicted probabilities ``(N, C)``."""
    rows = score_rows(task, np.asarray(y_true)[None], np.asarray(proba)[None])
    return {k: float(v[0]) for k, v in rows.items()}


def score_rows(task: Task, y_true: np.ndarray, proba: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`score` of a batch of samples at once: ``y_true (B, N)``, ``proba (B, N, C)`` -> each metric ``(B,)``."""
    y = np.asarray(y_true, np.int64)
    p = np.asarray(proba, np.float64)
    pred = p.argmax(2)
    if task.kind == "grade":
        yb, pb = (y > 0).astype(int), 1.0 - p[..., 0]
        y3 = np.where(y == 0, 0, np.where(y == 4, 2, 1))
        p3 = np.stack([p[..., 0], p[..., 1:4].sum(2), p[..., 4]], 2).argmax(2)
        return {"accuracy": M.accuracy_rows(y, pred), "kappa": M.quadratic_kappa_rows(y, pred, labels=range(5)),
                "binary_accuracy": M.accuracy_rows(yb, (pb >= 0.5).astype(int)),
                "binary_f1": M.f1_rows(yb, (pb >= 0.5).astype(int), average="binary"),
                "binary_auroc": M.roc_auc_rows(yb, pb),
                "f1_3class": M.f1_rows(y3, p3, average="macro", labels=[0, 1, 2]),
                "accuracy_3class": M.accuracy_rows(y3, p3)}
    if task.kind == "binary":
        return {"auroc": M.roc_auc_rows(y, p[..., 1]), "ap": M.average_precision_rows(y, p[..., 1]),
                "binary_acc": M.accuracy_rows(y, pred), "f1": M.f1_rows(y, pred, average="binary")}
    labels = list(range(task.num_classes if task.num_classes else p.shape[2]))
    return {"acc": M.accuracy_rows(y, pred), "f1_macro": M.f1_rows(y, pred, average="macro", labels=labels)}


def summarize(runs: Sequence[dict[str, float]]) -> dict[str, dict]:
    """mean, sd (ddof 1; 0 for one run), the values of every metric over seeds, and how many seeds were NaN
    (the mean is over the others; ``nan_seeds`` says so, and the report shows it)."""
    out = {}
    for k in runs[0] if runs else []:
        v = np.asarray([r[k] for r in runs], np.float64)
        good = v[~np.isnan(v)]
        out[k] = {"mean": float(good.mean()) if len(good) else float("nan"),
                  "sd": float(good.std(ddof=1)) if len(good) > 1 else 0.0, "values": v.tolist(),
                  "nan_seeds": int(np.isnan(v).sum()), "n_seeds": len(v)}
    return out


def _seed_mean(task: Task, y: np.ndarray, probs: Sequence[np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    """Each metric averaged over seeds (NaN seeds left out; NaN where every seed is), for index rows ``idx (B, N)``."""
    import warnings

    runs = [score_rows(task, y[idx], p[idx]) for p in probs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)                 # all-NaN column -> NaN, as wanted
        return {k: np.nanmean(np.stack([r[k] for r in runs]), 0) for k in runs[0]}


def paired_intervals(task: Task, y: np.ndarray, release_probs: Sequence[np.ndarray],
                     baseline_probs: Sequence[np.ndarray], *, n_resamples: int = 1000, confidence: float = 0.95,
                     seed: int = 0) -> dict[str, dict]:
    """Paired percentile bootstrap over test images (``scipy.stats.bootstrap``, ``paired=True``) of every metric,
    averaged over seeds: the release's, the baseline's, the difference release - baseline and the ratio
    release / baseline (the share of the real images' value the release keeps), each as
    ``{"value", "ci", "n"}``. The resamples are scored a batch at a time (:func:`score_rows`)."""
    import warnings

    from scipy.stats import bootstrap

    y = np.asarray(y)
    release_probs = [np.asarray(p, np.float64) for p in release_probs]
    baseline_probs = [np.asarray(p, np.float64) for p in baseline_probs]
    full = np.arange(len(y))
    rel0, base0 = _seed_mean(task, y, release_probs, full[None]), _seed_mean(task, y, baseline_probs, full[None])
    keys = list(rel0)

    def stat(idx, axis=-1):
        idx = np.asarray(idx, np.int64).reshape(-1, len(y))
        r, b = _seed_mean(task, y, release_probs, idx), _seed_mean(task, y, baseline_probs, idx)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = [r[k] / b[k] for k in keys]
        return np.stack([r[k] for k in keys] + [b[k] for k in keys] + [r[k] - b[k] for k in keys] + ratio)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bootstrap((full,), stat, vectorized=True, paired=True, n_resamples=n_resamples, batch=100,
                        confidence_level=confidence, method="percentile", random_state=seed)
    lo, hi = res.confidence_interval.low, res.confidence_interval.high
    out: dict[str, dict] = {}
    n = len(keys)
    for i, k in enumerate(keys):
        r0, b0 = float(rel0[k][0]), float(base0[k][0])
        out[k] = {"release": {"value": r0, "ci": [float(lo[i]), float(hi[i])]},
                  "baseline": {"value": b0, "ci": [float(lo[n + i]), float(hi[n + i])]},
                  "difference": {"value": r0 - b0, "ci": [float(lo[2 * n + i]), float(hi[2 * n + i])]},
                  "ratio": {"value": r0 / b0 if b0 else float("nan"),
                            "ci": [float(lo[3 * n + i]), float(hi[3 * n + i])]},
                  "n": len(y), "resamples": n_resamples}
    return out


def subsample(n_pool: int, n: int, seed: int) -> np.ndarray:
    """Indices of a seeded random subsample of size ``min(n, n_pool)`` (the same-size real baseline)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5AB5]))
    return np.sort(rng.choice(n_pool, min(n, n_pool), replace=False))
