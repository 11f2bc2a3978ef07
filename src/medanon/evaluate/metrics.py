"""Classification metrics as pure numpy functions (tested against scikit-learn).

Conventions follow scikit-learn: ``quadratic_kappa`` is ``cohen_kappa_score(weights="quadratic")``,
``f1(average="macro")`` averages the per-class F1 over the classes present in the truth or the
predictions, ``roc_auc`` is the Mann-Whitney statistic (ties count one half), ``average_precision``
is the step-wise sum ``sum_n (R_n - R_{n-1}) P_n`` over distinct score thresholds.
"""

from __future__ import annotations

import numpy as np


def _int(a) -> np.ndarray:
    return np.asarray(a).astype(np.int64).ravel()


def accuracy(y_true, y_pred) -> float:
    t, p = _int(y_true), _int(y_pred)
    return float((t == p).mean()) if len(t) else float("nan")


def _label_index(v: np.ndarray, labels) -> np.ndarray:
    """The position of each value of ``v`` in ``labels`` (any order), or -1 for a value not in it."""
    lab = np.asarray(labels, np.int64).ravel()
    order = np.argsort(lab)
    srt = lab[order]
    pos = np.minimum(np.searchsorted(srt, v), len(lab) - 1)
    return np.where(srt[pos] == v, order[pos], -1)


def confusion(y_true, y_pred, labels) -> np.ndarray:
    """Counts ``C[i, j]`` of truth ``labels[i]`` predicted as ``labels[j]`` (pairs outside ``labels`` ignored)."""
    t, p = _int(y_true), _int(y_pred)
    k = len(np.asarray(labels).ravel())
    if k == 0:
        return np.zeros((0, 0), np.int64)
    i, j = _label_index(t, labels), _label_index(p, labels)
    ok = (i >= 0) & (j >= 0)
    return np.bincount(i[ok] * k + j[ok], minlength=k * k).reshape(k, k).astype(np.int64)


def quadratic_kappa(y_true, y_pred, *, labels=None) -> float:
    """Cohen's kappa with quadratic weights ``w_ij = (i - j)^2 / (K - 1)^2`` over ``labels`` (default:
    the classes seen). 1 is perfect agreement, 0 chance agreement; ``nan`` when undefined."""
    t, p = _int(y_true), _int(y_pred)
    labels = np.unique(np.concatenate([t, p])) if labels is None else np.asarray(labels)
    k = len(labels)
    if k < 2:
        return float("nan")
    o = confusion(t, p, labels).astype(np.float64)
    n = o.sum()
    e = np.outer(o.sum(1), o.sum(0)) / n
    i, j = np.indices((k, k))
    w = (i - j) ** 2 / (k - 1) ** 2
    den = (w * e).sum()
    return float(1.0 - (w * o).sum() / den) if den > 0 else float("nan")


def f1(y_true, y_pred, *, average: str = "macro", positive: int = 1, labels=None) -> float:
    """F1 score. ``average``: ``"macro"`` (unweighted mean over classes), ``"weighted"`` (by support) or
    ``"binary"`` (of class ``positive``). With ``labels`` the class set is fixed (``f1_score(labels=...)``:
    a class with no true and no predicted member scores 0); without, it is the classes seen."""
    t, p = _int(y_true), _int(y_pred)
    if average == "binary":
        tp = int(((t == positive) & (p == positive)).sum())
        den = int((t == positive).sum() + (p == positive).sum())
        return 2 * tp / den if den else 0.0
    labels = np.unique(np.concatenate([t, p])) if labels is None else np.asarray(labels)
    scores, support = [], []
    for c in labels:
        tp = int(((t == c) & (p == c)).sum())
        den = int((t == c).sum() + (p == c).sum())
        scores.append(2 * tp / den if den else 0.0)
        support.append(int((t == c).sum()))
    if average == "macro":
        return float(np.mean(scores)) if scores else float("nan")
    if average == "weighted":
        s = np.asarray(support, np.float64)
        return float((np.asarray(scores) * s).sum() / s.sum()) if s.sum() else float("nan")
    raise ValueError(f"average={average!r} must be macro, weighted or binary")


def roc_auc(y_true, score) -> float:
    """Area under the ROC curve for binary truth (1 positive): P(score_pos > score_neg) + 0.5 P(tie)."""
    t = _int(y_true).astype(bool)
    s = np.asarray(score, np.float64).ravel()
    n_pos, n_neg = int(t.sum()), int((~t).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    from scipy.stats import rankdata

    ranks = rankdata(s)                                    # average ranks handle ties
    return float((ranks[t].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def average_precision(y_true, score) -> float:
    """Average precision ``sum_n (R_n - R_{n-1}) P_n`` over decreasing distinct thresholds."""
    t = _int(y_true).astype(bool)
    s = np.asarray(score, np.float64).ravel()
    n_pos = int(t.sum())
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    s, t = s[order], t[order]
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]   # last index of each distinct score
    tp = np.cumsum(t)[last]
    fp = (last + 1) - tp
    precision = tp / (tp + fp)
    recall = tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


# ------------------------------------------------------------------------------------------------ row-wise
# Twins of the functions above for a batch of samples of equal size: each row of a 2-D ``(B, n)`` input is
# one sample and the result is ``(B,)``. The bootstrap (``utility.paired_intervals``) scores a thousand
# resamples at once with them; each row equals the 1-D function on that row (tested).

def _rows(a, dtype=np.int64) -> np.ndarray:
    return np.atleast_2d(np.asarray(a)).astype(dtype)


def accuracy_rows(y_true, y_pred) -> np.ndarray:
    t, p = _rows(y_true), _rows(y_pred)
    return (t == p).mean(1) if t.shape[1] else np.full(len(t), np.nan)


def confusion_rows(y_true, y_pred, labels) -> np.ndarray:
    """``(B, K, K)`` counts per row, as :func:`confusion`."""
    t, p = _rows(y_true), _rows(y_pred)
    k, b = len(np.asarray(labels).ravel()), len(t)
    i, j = _label_index(t, labels), _label_index(p, labels)
    ok = (i >= 0) & (j >= 0)
    cell = (np.arange(b)[:, None] * k * k + i * k + j)[ok]
    return np.bincount(cell, minlength=b * k * k).reshape(b, k, k)


def quadratic_kappa_rows(y_true, y_pred, *, labels) -> np.ndarray:
    """:func:`quadratic_kappa` over the fixed class set ``labels``, per row."""
    k = len(np.asarray(labels).ravel())
    if k < 2:
        return np.full(len(_rows(y_true)), np.nan)
    o = confusion_rows(y_true, y_pred, labels).astype(np.float64)
    n = o.sum((1, 2))
    i, j = np.indices((k, k))
    w = (i - j) ** 2 / (k - 1) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        e = o.sum(2)[:, :, None] * o.sum(1)[:, None, :] / n[:, None, None]
        den = (w * e).sum((1, 2))
        out = 1.0 - (w * o).sum((1, 2)) / den
    return np.where(den > 0, out, np.nan)


def f1_rows(y_true, y_pred, *, average: str, positive: int = 1, labels=None) -> np.ndarray:
    """:func:`f1` per row: ``average="binary"``, or ``"macro"`` over the fixed class set ``labels``."""
    t, p = _rows(y_true), _rows(y_pred)

    def one(c):
        tp = ((t == c) & (p == c)).sum(1)
        den = (t == c).sum(1) + (p == c).sum(1)
        return np.where(den > 0, 2 * tp / np.maximum(den, 1), 0.0)

    if average == "binary":
        return one(positive)
    if average == "macro" and labels is not None:
        lab = np.asarray(labels).ravel()
        return np.mean([one(c) for c in lab], 0) if len(lab) else np.full(len(t), np.nan)
    raise ValueError(f"average={average!r} with labels={labels!r}: row-wise F1 is binary, or macro over given labels")


def roc_auc_rows(y_true, score) -> np.ndarray:
    """:func:`roc_auc` per row (NaN where a row has one class only)."""
    from scipy.stats import rankdata

    t, s = _rows(y_true).astype(bool), _rows(score, np.float64)
    n_pos, n_neg = t.sum(1), (~t).sum(1)
    ranks = rankdata(s, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = ((ranks * t).sum(1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return np.where((n_pos > 0) & (n_neg > 0), out, np.nan)


def average_precision_rows(y_true, score) -> np.ndarray:
    """:func:`average_precision` per row (NaN where a row has no positive)."""
    t, s = _rows(y_true).astype(bool), _rows(score, np.float64)
    order = np.argsort(-s, axis=1, kind="mergesort")
    s, t = np.take_along_axis(s, order, 1), np.take_along_axis(t, order, 1)
    n_pos = t.sum(1)
    last = np.ones_like(t)                                    # last position of each distinct score
    last[:, :-1] = s[:, 1:] != s[:, :-1]
    tp = np.cumsum(t, 1)
    prev = np.zeros_like(tp)                                  # tp at the previous distinct threshold
    prev[:, 1:] = np.maximum.accumulate(np.where(last, tp, 0), 1)[:, :-1]
    precision = tp / np.arange(1, t.shape[1] + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (last * (tp - prev) * precision).sum(1) / n_pos
    return np.where(n_pos > 0, out, np.nan)
