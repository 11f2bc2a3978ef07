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
images. Results are mean ± sd over seeds. Optional: the full-size real baseline, and the real model
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
    y = np.asarray(y_true, np.int64)
    p = np.asarray(proba, np.float64)
    pred = p.argmax(1)
    if task.kind == "grade":
        yb, pb = (y > 0).astype(int), 1.0 - p[:, 0]
        y3 = np.where(y == 0, 0, np.where(y == 4, 2, 1))
        p3 = np.stack([p[:, 0], p[:, 1:4].sum(1), p[:, 4]], 1)
        return {"accuracy": M.accuracy(y, pred), "kappa": M.quadratic_kappa(y, pred, labels=range(5)),
                "binary_accuracy": M.accuracy(yb, (pb >= 0.5).astype(int)),
                "binary_f1": M.f1(yb, (pb >= 0.5).astype(int), average="binary"), "binary_auroc": M.roc_auc(yb, pb),
                "f1_3class": M.f1(y3, p3.argmax(1), average="macro"), "accuracy_3class": M.accuracy(y3, p3.argmax(1))}
    if task.kind == "binary":
        return {"auroc": M.roc_auc(y, p[:, 1]), "ap": M.average_precision(y, p[:, 1]),
                "binary_acc": M.accuracy(y, pred), "f1": M.f1(y, pred, average="binary")}
    return {"acc": M.accuracy(y, pred), "f1_macro": M.f1(y, pred, average="macro")}


def summarize(runs: Sequence[dict[str, float]]) -> dict[str, dict]:
    """mean, sd (ddof 1; 0 for one run) and the values of every metric over seeds."""
    out = {}
    for k in runs[0] if runs else []:
        v = np.asarray([r[k] for r in runs], np.float64)
        good = v[~np.isnan(v)]
        out[k] = {"mean": float(good.mean()) if len(good) else float("nan"),
                  "sd": float(good.std(ddof=1)) if len(good) > 1 else 0.0, "values": v.tolist()}
    return out


def subsample(n_pool: int, n: int, seed: int) -> np.ndarray:
    """Indices of a seeded random subsample of size ``min(n, n_pool)`` (the same-size real baseline)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5AB5]))
    return np.sort(rng.choice(n_pool, min(n, n_pool), replace=False))
