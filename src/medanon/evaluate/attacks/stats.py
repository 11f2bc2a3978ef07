"""Reference statistics of the attacks, on scipy: exact binomial intervals and tests, AUC with its DeLong
interval and Mann-Whitney test (one- and two-sided), the exact null of top-K membership.

Every function here is tested against scipy / sklearn or a brute-force computation (tests/test_eval_stats.py).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binomtest, hypergeom, mannwhitneyu, norm


def unit(a) -> np.ndarray:
    """Rows scaled to unit length (cosine similarity is then a dot product)."""
    a = np.asarray(a, np.float64)
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def exact_interval(successes: int, trials: int, *, confidence: float = 0.95) -> list[float]:
    """Clopper-Pearson interval of a binomial proportion (``scipy.stats.binomtest``)."""
    if trials <= 0:
        return [float("nan"), float("nan")]
    ci = binomtest(int(successes), int(trials)).proportion_ci(confidence_level=confidence, method="exact")
    return [float(ci.low), float(ci.high)]


def binomial_p(successes: int, trials: int, p0: float) -> float:
    """One-sided exact binomial test of ``rate > p0``."""
    if trials <= 0:
        return float("nan")
    return float(binomtest(int(successes), int(trials), float(min(max(p0, 0.0), 1.0)),
                           alternative="greater").pvalue)


def delong(pos_scores, neg_scores, *, confidence: float = 0.95) -> dict:
    """AUC = P(pos > neg) + P(tie)/2 with DeLong's variance (DeLong et al. 1988), its normal interval, the
    two-sided Mann-Whitney p-value, and the two-sided AUC ``max(AUC, 1 - AUC)`` (an attacker free to flip
    the direction of its score)."""
    x = np.asarray(pos_scores, np.float64).ravel()
    y = np.asarray(neg_scores, np.float64).ravel()
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        nan = float("nan")
        return {"auc": nan, "ci": [nan, nan], "se": nan, "p_value": nan, "two_sided_auc": nan, "n_pos": m,
                "n_neg": n, "direction": "none"}
    # structural components: psi(x_i, y_j) averaged over the other sample, from ranks (ties count 1/2)
    from scipy.stats import rankdata

    rz = rankdata(np.r_[x, y])
    rx, ry = rankdata(x), rankdata(y)
    v10 = (rz[:m] - rx) / n                        # for each positive: fraction of negatives below it
    v01 = 1.0 - (rz[m:] - ry) / m                  # for each negative: fraction of positives above it
    auc = float(v10.mean())
    var = (v10.var(ddof=1) / m if m > 1 else 0.0) + (v01.var(ddof=1) / n if n > 1 else 0.0)
    se = math.sqrt(max(var, 0.0))
    z = float(norm.ppf(0.5 + confidence / 2))
    p = float(mannwhitneyu(x, y, alternative="two-sided").pvalue) if m > 0 and n > 0 else float("nan")
    return {"auc": auc, "ci": [max(0.0, auc - z * se), min(1.0, auc + z * se)], "se": se, "p_value": p,
            "two_sided_auc": max(auc, 1.0 - auc), "direction": "higher" if auc >= 0.5 else "lower",
            "n_pos": m, "n_neg": n}


def topk_null(ks, pool: int) -> tuple[np.ndarray, float]:
    """Exact null distribution of the total top-K hits of a random ranking: record ``r`` with ``k_r`` members
    in a pool of ``pool`` images draws ``k_r`` of them at random, so its hits are hypergeometric
    (``M = pool, n = k_r, N = k_r``) and the total is their convolution. Returns (pmf over 0..sum k, mean)."""
    pmf = np.ones(1)
    mean = 0.0
    for k in ks:
        k = int(k)
        h = hypergeom(pool, k, k)
        pmf = np.convolve(pmf, h.pmf(np.arange(k + 1)))
        mean += k * k / pool
    return pmf, mean


def upper_tail(pmf: np.ndarray, observed: int) -> float:
    """P(X >= observed) under ``pmf`` (over 0..len-1)."""
    return float(min(1.0, max(0.0, pmf[int(observed):].sum())))
