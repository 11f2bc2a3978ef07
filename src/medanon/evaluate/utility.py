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
"Original" row; the size is the release's distinct source sets, :mod:`medanon.evaluate.utility_run`), both
with the same budget of optimiser steps; both are tested on all held-out real images. Results are mean ± sd
over seeds, and a **paired bootstrap over the held-out patients** (:func:`paired_intervals` with ``groups``,
``scipy.stats.bootstrap`` with ``paired=True``, percentile; over images without ``groups``): the seed-averaged
metric of the release's classifiers, of the same-N real classifiers', and their difference, each with its interval
(the sampling error of the test set, which the sd over seeds does not contain; for AUROC this is the
bootstrap alternative to DeLong). Two releases tested on the same images compare the same way
(:func:`compare_releases`). A seed whose metric is undefined (NaN) is counted and reported
(``nan_seeds``), never dropped silently. Optional: the full-size real classifier, and the real model
applied to the released images (train on real, test on release: DP-GLOW's direction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from medanon.errors import ConfigError
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
HEADLINE_CHANCE = {"kappa": 0.0, "auroc": 0.5, "f1_macro": 0.0}   # what a learner that learned nothing scores (F1: 0
                                                                   # is its floor, below its chance)


def chance_of(metric: str) -> float:
    """The chance of a metric that does not depend on the classes' frequencies: 0.5 for an AUROC (a constant score
    reaches it), 0 for κ; for the others a floor (their chance is :func:`chance_scores`'s)."""
    return 0.5 if metric == "auroc" or metric.endswith("_auroc") else 0.0


def chance_scores(task: Task, y: np.ndarray, classes: int) -> dict[str, float]:
    """What a learner that learned only the classes' frequencies scores on ``y`` in every metric of ``task``: each
    image predicted with the test classes' prevalence (so always the majority class). 0.5 for an AUROC and 0 for κ
    as :func:`chance_of`; the majority's share for an accuracy, the prevalence for average precision, the
    always-majority value for an F1 (macro-F1 0.25 with classes at 60/30/10 %, where a floor of 0 read a classifier
    that always says the majority as keeping a third of the real images' gain).

    >>> chance_scores(Task("view", 3, "multiclass"), np.array([0] * 6 + [1] * 3 + [2]), 3)
    {'acc': 0.6, 'f1_macro': 0.25}
    """
    y = np.asarray(y, np.int64)
    prior = np.bincount(y, minlength=classes)[:classes] / max(len(y), 1)
    rows = score_rows(task, y[None], np.tile(prior, (len(y), 1))[None])
    out = {k: float(v[0]) for k, v in rows.items()}
    return {k: (chance_of(k) if k == "kappa" or k.endswith("auroc") or not np.isfinite(v) else round(v, 12))
            for k, v in out.items()}

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
    return [KNOWN_TASKS[n] if n in KNOWN_TASKS else task_of(n) for n in wanted]


def task_of(label: str) -> Task:
    """The task of predicting the canonical label ``label`` from its classes (two: binary, scored by AUROC; more:
    multiclass); a ConfigError naming ``utility.tasks`` for a label without classes (age) or unknown.

    >>> task_of("cardiomegaly")
    Task(label='cardiomegaly', num_classes=2, kind='binary')
    """
    from medanon.data.labels import LABELS

    if not has_classes(label):
        raise ConfigError(f"utility.tasks names {label!r}, " + ("a continuous label: a classifier needs classes"
                                                                 if label in LABELS else "not a label medanon reads"),
                          fix=f"name labels with classes: {', '.join(sorted(filter(has_classes, LABELS)))}")
    n = len(LABELS[label].classes)
    return Task(label, n, "binary" if n == 2 else "multiclass")


def has_classes(label: str) -> bool:
    """Whether ``label`` is a canonical label a classifier can predict (two classes or more, not continuous)."""
    from medanon.data.labels import LABELS

    spec = LABELS.get(label)
    return spec is not None and spec.kind != "continuous" and len(spec.classes) >= 2


def kind_of(label: str) -> str:
    """The task kind of a label the evaluation ran (grade, binary or multiclass)."""
    if label in KNOWN_TASKS:
        return KNOWN_TASKS[label].kind
    return task_of(label).kind if has_classes(label) else "multiclass"


def score(task: Task, y_true: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    """Every metric of ``task`` from the true classes and predicted probabilities ``(N, C)``."""
    rows = score_rows(task, np.asarray(y_true)[None], np.asarray(proba)[None])
    return {k: float(v[0]) for k, v in rows.items()}


def score_rows(task: Task, y_true: np.ndarray, proba: np.ndarray, *, weights=None) -> dict[str, np.ndarray]:
    """:func:`score` of a batch of samples at once: ``y_true (B, N)``, ``proba (B, N, C)`` -> each metric ``(B,)``.
    ``weights (B, N)``: integer counts of each image in each sample (``y_true`` / ``proba`` may then have one row
    shared by all), scored as the sample with the images repeated (:mod:`medanon.evaluate.metrics`)."""
    y = np.asarray(y_true, np.int64)
    p = np.asarray(proba, np.float64)
    pred = p.argmax(2)
    w = {"weights": weights}
    if task.kind == "grade":
        yb, pb = (y > 0).astype(int), 1.0 - p[..., 0]
        y3 = np.where(y == 0, 0, np.where(y == 4, 2, 1))
        p3 = np.stack([p[..., 0], p[..., 1:4].sum(2), p[..., 4]], 2).argmax(2)
        return {"accuracy": M.accuracy_rows(y, pred, **w),
                "kappa": M.quadratic_kappa_rows(y, pred, labels=range(5), **w),
                "binary_accuracy": M.accuracy_rows(yb, (pb >= 0.5).astype(int), **w),
                "binary_f1": M.f1_rows(yb, (pb >= 0.5).astype(int), average="binary", **w),
                "binary_auroc": M.roc_auc_rows(yb, pb, **w),
                "f1_3class": M.f1_rows(y3, p3, average="macro", labels=[0, 1, 2], **w),
                "accuracy_3class": M.accuracy_rows(y3, p3, **w)}
    if task.kind == "binary":
        return {"auroc": M.roc_auc_rows(y, p[..., 1], **w), "ap": M.average_precision_rows(y, p[..., 1], **w),
                "binary_acc": M.accuracy_rows(y, pred, **w), "f1": M.f1_rows(y, pred, average="binary", **w)}
    labels = list(range(task.num_classes if task.num_classes else p.shape[2]))
    return {"acc": M.accuracy_rows(y, pred, **w), "f1_macro": M.f1_rows(y, pred, average="macro", labels=labels, **w)}


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


def _seed_mean(task: Task, y: np.ndarray, probs: Sequence[np.ndarray], idx: np.ndarray | None = None,
               weights: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Each metric averaged over seeds (NaN seeds left out; NaN where every seed is), for index rows ``idx (B, N)``
    or image counts ``weights (B, N)``."""
    import warnings

    if weights is not None:
        runs = [score_rows(task, y[None], p[None], weights=weights) for p in probs]
    else:
        runs = [score_rows(task, y[idx], p[idx]) for p in probs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)                 # all-NaN column -> NaN, as wanted
        return {k: np.nanmean(np.stack([r[k] for r in runs]), 0) for k in runs[0]}


def patient_codes(groups, n: int, *, argument: str = "groups") -> tuple[np.ndarray, int]:
    """The patient of each of ``n`` test images as codes 0..G-1, and G."""
    g = np.asarray(groups)
    if g.shape != (n,):
        raise ConfigError(f"{argument} has shape {g.shape} for {n} test images",
                          fix=f"pass {argument}= the patient id of every test image, in the order of y")
    _, codes = np.unique(g, return_inverse=True)
    return codes.ravel(), int(codes.max()) + 1 if n else 0


def _probs(arg: str, probs: Sequence[np.ndarray], n: int) -> list[np.ndarray]:
    out = [np.asarray(p, np.float64) for p in probs]
    if not out or any(p.ndim != 2 or len(p) != n for p in out):
        raise ConfigError(f"{arg} must be a non-empty list of (N, C) probability arrays, one per seed, for the "
                          f"{n} test images; got shapes {[p.shape for p in out]}",
                          fix="pass each seed's predicted probabilities on the test images, in the order of y")
    return out


def _paired(task: Task, y, probs_a, probs_b, *, groups, n_resamples: int, confidence: float, seed: int,
            names: tuple[str, str]) -> tuple[list[str], dict, dict, np.ndarray, np.ndarray, dict]:
    """The paired bootstrap behind :func:`paired_intervals` and :func:`compare_releases`: the seed-averaged metrics
    of ``a`` and ``b`` on the whole test set, and the percentile interval of a, b, a - b and the share
    (a - chance) / (b - chance) (rows in that order, one per metric; :func:`chance_scores`), resampling images, or
    patients when ``groups`` is given."""
    import warnings

    from scipy.stats import bootstrap

    y = np.asarray(y)
    n = len(y)
    a, b = _probs(names[0], probs_a, n), _probs(names[1], probs_b, n)
    full = np.arange(n)
    a0, b0 = _seed_mean(task, y, a, full[None]), _seed_mean(task, y, b, full[None])
    keys = list(a0)
    chance = chance_scores(task, y, np.asarray(a[0]).shape[-1])

    def stacked(ra, rb):
        with np.errstate(divide="ignore", invalid="ignore"):        # no share of a reference at chance (not inf)
            ratio = [np.where(rb[k] > chance[k], (ra[k] - chance[k]) / (rb[k] - chance[k]), np.nan)
                     for k in keys]                     # (real images at or below chance: no gain to share)
        return np.stack([ra[k] for k in keys] + [rb[k] for k in keys] + [ra[k] - rb[k] for k in keys] + ratio)

    if groups is None:
        unit = {"resampled": "images"}
        data = full

        def stat(idx, axis=-1):
            idx = np.asarray(idx, np.int64).reshape(-1, n)
            return stacked(_seed_mean(task, y, a, idx), _seed_mean(task, y, b, idx))
    else:
        codes, g = patient_codes(groups, n)
        unit = {"resampled": "patients", "n_patients": g}
        data = np.arange(g)

        def stat(idx, axis=-1):                         # a resample of patients -> each image's count in it
            idx = np.asarray(idx, np.int64).reshape(-1, g)
            rows = len(idx)
            counts = np.bincount((idx + g * np.arange(rows)[:, None]).ravel(), minlength=rows * g).reshape(rows, g)
            w = counts[:, codes]
            return stacked(_seed_mean(task, y, a, weights=w), _seed_mean(task, y, b, weights=w))

    unit["chance"] = chance
    if len(data) < 2:                                   # nothing to resample: no interval
        nan = np.full(4 * len(keys), np.nan)
        return keys, a0, b0, nan, nan, unit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bootstrap((data,), stat, vectorized=True, paired=True, n_resamples=n_resamples, batch=100,
                        confidence_level=confidence, method="percentile", random_state=seed)
        # scipy's percentiles, over the resamples where the metric is defined (a resample of one class has no
        # AUROC; a NaN would make the whole interval NaN); how many were not is reported
        draws = np.asarray(res.bootstrap_distribution, np.float64).reshape(4 * len(keys), -1)
        alpha = (1 - confidence) / 2
        lo, hi = np.nanpercentile(draws, 100 * alpha, axis=-1), np.nanpercentile(draws, 100 * (1 - alpha), axis=-1)
    unit["undefined"] = np.isnan(draws).sum(-1)
    return keys, a0, b0, lo, hi, unit


def paired_intervals(task: Task, y: np.ndarray, release_probs: Sequence[np.ndarray],
                     real_probs: Sequence[np.ndarray], *, n_resamples: int = 1000, confidence: float = 0.95,
                     seed: int = 0, groups=None) -> dict[str, dict]:
    """Paired percentile bootstrap (``scipy.stats.bootstrap``, ``paired=True``) of every metric, averaged over
    seeds: the release's, the same-N real classifiers' (``real_same_n``; a reference, not a random-guessing
    baseline), the difference release - real and the ratio (release - chance) / (real - chance) (the share of the
    real images' gain over chance the release keeps; chance is what predicting the test classes' prevalence scores,
    :func:`chance_scores`, given as ``chance``: 0.5 for an AUROC, 0 for κ, the majority's share for an accuracy; a
    constant release keeps 0 of an AUROC, not 0.5 / real), each as
    ``{"value", "ci"}``, with ``n`` (test images), ``resampled`` and ``resamples``.

    ``groups``: the patient of each test image. Given, whole patients are resampled with replacement (every image
    of a drawn patient enters once per draw; ``resampled: "patients"``, ``n_patients``): images of one patient are
    not independent, and resampling them one by one makes the interval too narrow. Without, test images are
    resampled one by one (``resampled: "images"``). The resamples are scored a batch at a time
    (:func:`score_rows`; patients as per-image counts, ``weights=``)."""
    keys, r0, b0, lo, hi, unit = _paired(task, y, release_probs, real_probs, groups=groups,
                                         n_resamples=n_resamples, confidence=confidence, seed=seed,
                                         names=("release_probs", "real_probs"))
    out: dict[str, dict] = {}
    n = len(keys)
    for i, k in enumerate(keys):
        rv, bv, c = float(r0[k][0]), float(b0[k][0]), unit["chance"][k]
        out[k] = {"release": {"value": rv, "ci": [float(lo[i]), float(hi[i])]},
                  "real_same_n": {"value": bv, "ci": [float(lo[n + i]), float(hi[n + i])]},
                  "difference": {"value": rv - bv, "ci": [float(lo[2 * n + i]), float(hi[2 * n + i])]},
                  "ratio": {"value": (rv - c) / (bv - c) if bv > c else float("nan"),
                            "ci": [float(lo[3 * n + i]), float(hi[3 * n + i])]}, "chance": c,
                  **_unit(unit, len(y), n_resamples, [i, n + i, 2 * n + i], ratio=3 * n + i)}
    return out


def _unit(unit: dict, n: int, n_resamples: int, rows: list[int], ratio: int | None = None) -> dict:
    """An interval entry's sample description: images, what was resampled, resamples (and undefined ones: of the
    metric, and apart from them those of the ratio, undefined also where the real classifiers' metric is 0)."""
    out = {"n": n, **{k: v for k, v in unit.items() if k not in ("undefined", "chance")}, "resamples": n_resamples}
    bad = int(max(unit["undefined"][rows])) if "undefined" in unit else 0
    if bad:
        out["undefined_resamples"] = bad                # left out of the percentiles (the metric had no value)
    if ratio is not None and "undefined" in unit and int(unit["undefined"][ratio]) > bad:
        out["ratio_undefined_resamples"] = int(unit["undefined"][ratio])
    return out


def compare_releases(task: Task, y: np.ndarray, probs_a: Sequence[np.ndarray], probs_b: Sequence[np.ndarray], *,
                     groups=None, n_resamples: int = 1000, confidence: float = 0.95,
                     seed: int = 0) -> dict[str, dict]:
    """Release a against release b of the same real data, tested on the same held-out images ``y``: every metric of
    ``task`` averaged over each release's seeds (``probs_a`` / ``probs_b``: one ``(N, C)`` array per seed), and the
    difference a - b with a paired percentile bootstrap interval (the same resamples score both), as
    ``{metric: {"a": {value, ci}, "b": {value, ci}, "difference": {value, ci}, "n", "resampled", "resamples"}}``.
    ``groups`` (the patient of each test image) resamples patients, as :func:`paired_intervals`.

    Example:
        >>> task, y = KNOWN_TASKS["pneumonia"], np.array([0, 1, 0, 1, 0, 1])
        >>> p = np.eye(2)[y] * 0.8 + 0.1
        >>> out = compare_releases(task, y, [p], [p], groups=[1, 1, 2, 2, 3, 3], n_resamples=50)
        >>> out["auroc"]["difference"], out["auroc"]["resampled"], out["auroc"]["n_patients"]
        ({'value': 0.0, 'ci': [0.0, 0.0]}, 'patients', 3)
    """
    keys, a0, b0, lo, hi, unit = _paired(task, y, probs_a, probs_b, groups=groups, n_resamples=n_resamples,
                                         confidence=confidence, seed=seed, names=("probs_a", "probs_b"))
    n = len(keys)
    out: dict[str, dict] = {}
    for i, k in enumerate(keys):
        av, bv = float(a0[k][0]), float(b0[k][0])
        out[k] = {"a": {"value": av, "ci": [float(lo[i]), float(hi[i])]},
                  "b": {"value": bv, "ci": [float(lo[n + i]), float(hi[n + i])]},
                  "difference": {"value": av - bv, "ci": [float(lo[2 * n + i]), float(hi[2 * n + i])]},
                  **_unit(unit, len(y), n_resamples, [i, n + i, 2 * n + i])}
    return out


def subsample(n_pool: int, n: int, seed: int) -> np.ndarray:
    """Indices of a seeded random subsample of size ``min(n, n_pool)`` (the same-N real classifier's images)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5AB5]))
    return np.sort(rng.choice(n_pool, min(n, n_pool), replace=False))
