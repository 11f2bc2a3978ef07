"""Classification metrics as pure numpy functions (tested against scikit-learn).

Conventions follow scikit-learn: ``quadratic_kappa`` is ``cohen_kappa_score(weights="quadratic")``,
``f1(average="macro")`` averages the per-class F1 over the classes present in the truth or the
predictions, ``roc_auc`` is the Mann-Whitney statistic (ties count one half), ``average_precision``
is the step-wise sum ``sum_n (R_n - R_{n-1}) P_n`` over distinct score thresholds.
"""

from __future__ import annotations

import numpy as np


def _int(a) -> np.ndarray:
    """Class labels as int64; a ValueError for values that are not whole numbers (casting would truncate 0.9 to
    class 0 and score a wrong prediction as right)."""
    v = np.asarray(a)
    if v.dtype.kind in "fc":
        whole = np.isfinite(v) & (v == np.round(v))
        if not whole.all():
            raise ValueError(f"class labels must be whole numbers; got {v.ravel()[~whole.ravel()][:3].tolist()} "
                             "(probabilities or scores go to roc_auc / average_precision)")
    return v.astype(np.int64).ravel()


def _binary(a) -> np.ndarray:
    """Binary truth as bool (1 positive); a ValueError for any other value ({-1, 1} or {1, 2} would cast to all
    positive and give NaN where scikit-learn gives the AUC)."""
    t = _int(a)
    if not np.isin(t, (0, 1)).all():
        raise ValueError(f"binary truth must be 0 or 1 (1 positive); got the values {sorted(set(t.tolist()))[:5]}")
    return t.astype(bool)


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
    the classes seen). 1 is perfect agreement, 0 chance agreement; ``nan`` when undefined, which includes true
    labels of one class: every prediction then scores exactly 0 (sklearn's value), so the number measures nothing,
    like an AUROC of one class (a patient bootstrap draws such test sets from a few patients)."""
    t, p = _int(y_true), _int(y_pred)
    labels = np.unique(np.concatenate([t, p])) if labels is None else np.asarray(labels)
    k = len(labels)
    if k < 2 or len(np.unique(t)) < 2:
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
    t = _binary(y_true)
    s = np.asarray(score, np.float64).ravel()
    n_pos, n_neg = int(t.sum()), int((~t).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    from scipy.stats import rankdata

    ranks = rankdata(s)                                    # average ranks handle ties
    return float((ranks[t].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def average_precision(y_true, score) -> float:
    """Average precision ``sum_n (R_n - R_{n-1}) P_n`` over decreasing distinct thresholds (NaN where a score is
    NaN, as :func:`roc_auc`: a NaN cannot be ranked)."""
    t = _binary(y_true)
    s = np.asarray(score, np.float64).ravel()
    n_pos = int(t.sum())
    if n_pos == 0 or np.isnan(s).any():
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
#
# ``weights=`` (B, n), non-negative integer counts: row b is scored as the sample in which item i appears
# ``weights[b, i]`` times (the patient cluster bootstrap: every image of a drawn patient, once per draw), exactly
# as the 1-D function on the explicitly duplicated sample (tested). The other inputs may then have one row,
# shared by every weight row. ``None``: every weight one (the unweighted code, unchanged).

def _rows(a, dtype=np.int64) -> np.ndarray:
    return np.atleast_2d(np.asarray(a)).astype(dtype)


def _weights(weights, *arrays) -> tuple[np.ndarray, ...]:
    """``weights`` as float (B, n) and each of ``arrays`` broadcast to it."""
    w = np.atleast_2d(np.asarray(weights, np.float64))
    if w.ndim != 2 or (w < 0).any():
        raise ValueError(f"weights must be a (B, n) array of non-negative counts, got shape {w.shape}")
    shape = np.broadcast_shapes(w.shape, *(a.shape for a in arrays))
    return tuple(np.broadcast_to(a, shape) for a in (w, *arrays))


def _sorted_groups(s: np.ndarray, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per row of scores ``s`` (R, n): the stable sort order, and in that order True at the last item of each run of
    equal scores."""
    order = np.argsort(-s if descending else s, axis=1, kind="mergesort")
    ss = np.take_along_axis(s, order, 1)
    last = np.ones(ss.shape, bool)
    last[:, :-1] = ss[:, 1:] != ss[:, :-1]
    return order, last


def accuracy_rows(y_true, y_pred, *, weights=None) -> np.ndarray:
    t, p = _rows(y_true), _rows(y_pred)
    if weights is not None:
        w, t, p = _weights(weights, t, p)
        n = w.sum(1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(n > 0, (w * (t == p)).sum(1) / n, np.nan)
    return (t == p).mean(1) if t.shape[1] else np.full(len(t), np.nan)


def confusion_rows(y_true, y_pred, labels, *, weights=None) -> np.ndarray:
    """``(B, K, K)`` counts per row, as :func:`confusion` (weighted: float sums of the weights)."""
    t, p = _rows(y_true), _rows(y_pred)
    if weights is not None:
        w, t, p = _weights(weights, t, p)
    k, b = len(np.asarray(labels).ravel()), len(t)
    i, j = _label_index(t, labels), _label_index(p, labels)
    ok = (i >= 0) & (j >= 0)
    cell = (np.arange(b)[:, None] * k * k + i * k + j)[ok]
    return np.bincount(cell, weights=None if weights is None else w[ok], minlength=b * k * k).reshape(b, k, k)


def quadratic_kappa_rows(y_true, y_pred, *, labels, weights=None) -> np.ndarray:
    """:func:`quadratic_kappa` over the fixed class set ``labels``, per row (``nan`` where a row's true labels are
    of one class)."""
    k = len(np.asarray(labels).ravel())
    if k < 2:
        return np.full(len(_rows(y_true if weights is None else weights)), np.nan)
    o = confusion_rows(y_true, y_pred, labels, weights=weights).astype(np.float64)
    t = _rows(y_true)
    present = np.ones(t.shape, bool) if weights is None else _weights(weights, t)[0] > 0
    t = np.broadcast_to(t, present.shape)
    lo = np.where(present, t, np.iinfo(np.int64).max).min(1)            # a row's smallest and largest true label
    hi = np.where(present, t, np.iinfo(np.int64).min).max(1)
    one_class = ~(lo < hi)
    n = o.sum((1, 2))
    i, j = np.indices((k, k))
    w = (i - j) ** 2 / (k - 1) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        e = o.sum(2)[:, :, None] * o.sum(1)[:, None, :] / n[:, None, None]
        den = (w * e).sum((1, 2))
        out = 1.0 - (w * o).sum((1, 2)) / den
    return np.where((den > 0) & ~one_class, out, np.nan)


def f1_rows(y_true, y_pred, *, average: str, positive: int = 1, labels=None, weights=None) -> np.ndarray:
    """:func:`f1` per row: ``average="binary"``, or ``"macro"`` over the fixed class set ``labels``."""
    t, p = _rows(y_true), _rows(y_pred)
    if weights is None:
        def total(mask):
            return mask.sum(1)
    else:
        w, t, p = _weights(weights, t, p)

        def total(mask):
            return (w * mask).sum(1)

    def one(c):
        tp = total((t == c) & (p == c))
        den = total(t == c) + total(p == c)
        return np.where(den > 0, 2 * tp / np.maximum(den, 1), 0.0)

    if average == "binary":
        return one(positive)
    if average == "macro" and labels is not None:
        lab = np.asarray(labels).ravel()
        return np.mean([one(c) for c in lab], 0) if len(lab) else np.full(len(t), np.nan)
    raise ValueError(f"average={average!r} with labels={labels!r}: row-wise F1 is binary, or macro over given labels")


def roc_auc_rows(y_true, score, *, weights=None) -> np.ndarray:
    """:func:`roc_auc` per row (NaN where a row has one class only, or a NaN score)."""
    from scipy.stats import rankdata

    t, s = _rows(y_true).astype(bool), _rows(score, np.float64)
    if np.isnan(s).any():
        return _nan_rows(roc_auc_rows, t, s, weights)
    if weights is not None:
        return _roc_auc_weighted(t, s, weights)
    n_pos, n_neg = t.sum(1), (~t).sum(1)
    ranks = rankdata(s, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = ((ranks * t).sum(1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return np.where((n_pos > 0) & (n_neg > 0), out, np.nan)


def _nan_rows(metric, t: np.ndarray, s: np.ndarray, weights) -> np.ndarray:
    """``metric`` per row, NaN for every row whose scores hold a NaN (a NaN cannot be ranked; with one shared score
    row, every weight row)."""
    out = metric(t, np.where(np.isnan(s), 0.0, s), weights=weights)
    return np.where(np.broadcast_to(np.isnan(s).any(1), out.shape), np.nan, out)


def average_precision_rows(y_true, score, *, weights=None) -> np.ndarray:
    """:func:`average_precision` per row (NaN where a row has no positive, or a NaN score)."""
    t, s = _rows(y_true).astype(bool), _rows(score, np.float64)
    if np.isnan(s).any():
        return _nan_rows(average_precision_rows, t, s, weights)
    if weights is not None:
        return _average_precision_weighted(t, s, weights)
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


def _group_sums(v: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Per row, the sums of ``v`` (B, n) over each run of equal scores (``last`` marks a run's end, broadcast to
    ``v``), at the run's first columns (0, 1, ...; zeros after the row's last run)."""
    b, n = v.shape
    gid = np.broadcast_to(np.cumsum(last, 1) - last, v.shape)         # run number of each item, 0-based
    flat = (np.arange(b)[:, None] * n + gid).ravel()
    return np.bincount(flat, weights=v.ravel(), minlength=b * n).reshape(b, n)


def _roc_auc_weighted(t: np.ndarray, s: np.ndarray, weights) -> np.ndarray:
    """Mann-Whitney AUC with item counts: sum over positives of (negatives below + half the tied negatives)."""
    w, t, s = _weights(weights, t, s)
    s1 = s[:1] if (s == s[:1]).all() else s                           # one shared score row: sort it once
    order, last = _sorted_groups(s1, descending=False)
    wt = np.take_along_axis(w * t, order, 1)
    wf = np.take_along_axis(w * ~t, order, 1)
    pos, neg = _group_sums(wt, last), _group_sums(wf, last)
    below = np.cumsum(neg, 1) - neg                                   # negatives in the runs before
    n_pos, n_neg = pos.sum(1), neg.sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (pos * (below + 0.5 * neg)).sum(1) / (n_pos * n_neg)
    return np.where((n_pos > 0) & (n_neg > 0), out, np.nan)


def _average_precision_weighted(t: np.ndarray, s: np.ndarray, weights) -> np.ndarray:
    """Average precision with item counts: precision and recall at each distinct threshold from weighted counts."""
    w, t, s = _weights(weights, t, s)
    s1 = s[:1] if (s == s[:1]).all() else s
    order, last = _sorted_groups(s1, descending=True)
    tp_run = _group_sums(np.take_along_axis(w * t, order, 1), last)   # positives per distinct score, high first
    all_run = _group_sums(np.take_along_axis(w, order, 1), last)
    tp, seen = np.cumsum(tp_run, 1), np.cumsum(all_run, 1)
    n_pos = tp[:, -1]
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.where(tp_run > 0, tp_run * tp / seen, 0.0)          # (R_n - R_n-1) P_n, times n_pos
        out = step.sum(1) / n_pos
    return np.where(n_pos > 0, out, np.nan)
