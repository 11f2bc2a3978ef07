"""Reference statistics of the attacks, on scipy: exact binomial intervals and tests, ranks that give a tie no
credit, the threshold at a false-accept rate and the exact null of top-K membership. The patient-level intervals
are in :mod:`.bootstrap`, the AUC with its intervals in :mod:`.auc`.

**Ties.** A rank or top-1 statistic never counts a tie for the attacker: a target tied with ``t`` others at
the top gets credit ``1 / (t + 1)``, its expected success under uniform random tie breaking, computed
exactly (:func:`tie_counts`, :func:`top1_credit`, :func:`topk_hits`). Scores within ``TIE_TOL`` (relative,
floor 1) of each other are tied: cosines of identical rows computed by BLAS differ in the last bits.

Every function here is tested against scipy / sklearn or a brute-force computation
(tests/test_eval_protocol.py, tests/test_attack_ties_*.py, tests/test_attack_intervals_*.py).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import beta, binomtest, hypergeom, norm

TIE_TOL = 1e-12                 # relative: scores this close are tied


def unit(a) -> np.ndarray:
    """Rows scaled to unit length (cosine similarity is then a dot product); a ValueError where a row is not finite:
    its cosines would be NaN, which one attack counts as a match (no record scores above it) and another as none."""
    a = np.asarray(a, np.float64)
    bad = ~np.isfinite(a).all(axis=-1) if a.ndim else ~np.isfinite(a)
    if np.any(bad):
        raise ValueError(f"{int(np.sum(bad))} of the {len(a)} embeddings hold NaN or infinite values (e.g. a network "
                         "that diverged, or an image that is not finite); an attack cannot be scored on them")
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def wilson_estimate(successes: float, trials: float, *, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score centre ``(s + z²/2) / (n + z²)`` and half-width ``z / (n + z²) · sqrt(s (n − s) / n + z²/4)``
    (``successes`` may be fractional: tie credit)."""
    s, n = float(successes), float(trials)
    z = float(norm.ppf(0.5 * (1.0 + confidence)))
    z2 = z * z
    return (s + 0.5 * z2) / (n + z2), z / (n + z2) * math.sqrt(max(s * (n - s) / n, 0.0) + 0.25 * z2)


def wilson(successes: float, trials: float, *, confidence: float = 0.95) -> list[float]:
    """Wilson score interval, clipped to [0, 1] (exactly 0 / 1 at the ends)."""
    s, n = float(successes), float(trials)
    if n <= 0:
        return [float("nan"), float("nan")]
    c, h = wilson_estimate(s, n, confidence=confidence)
    return [0.0 if s <= 0 else max(0.0, c - h), 1.0 if s >= n else min(1.0, c + h)]


def exact_interval(successes: float, trials: int, *, confidence: float = 0.95) -> list[float]:
    """Clopper-Pearson interval of a binomial proportion (``scipy.stats.binomtest``); a fractional count (tie
    credit) uses the same beta quantiles, continuous in ``successes``."""
    if trials <= 0:
        return [float("nan"), float("nan")]
    s, n = float(successes), int(trials)
    if s == round(s):
        ci = binomtest(round(s), n).proportion_ci(confidence_level=confidence, method="exact")
        return [float(ci.low), float(ci.high)]
    a = 1.0 - confidence
    return [float(beta.ppf(a / 2, s, n - s + 1)), float(beta.ppf(1 - a / 2, s + 1, n - s))]


def binomial_p(successes: int, trials: int, p0: float) -> float:
    """One-sided exact binomial test of ``rate > p0``."""
    if trials <= 0:
        return float("nan")
    return float(binomtest(int(successes), int(trials), float(min(max(p0, 0.0), 1.0)),
                           alternative="greater").pvalue)


# ---- ties -------------------------------------------------------------------------------------------------

def tie_counts(scores, ref, *, tol: float = TIE_TOL) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``scores`` (n, m): how many entries are above ``ref[row]`` and how many are tied with it."""
    s = np.asarray(scores, np.float64)
    r = np.asarray(ref, np.float64).reshape(-1, 1)
    t = tol * np.maximum(1.0, np.abs(r))
    return (s > r + t).sum(1), (np.abs(s - r) <= t).sum(1)


def top1_credit(scores, own) -> np.ndarray:
    """Per row of ``scores`` (targets, candidates): the chance that candidate ``own[row]`` ranks first under uniform
    random tie breaking, ``[nothing above it] / (candidates tied with it, itself included)``.

    >>> top1_credit([[0.9, 0.5], [0.7, 0.7], [0.1, 0.3]], [0, 0, 0]).tolist()
    [1.0, 0.5, 0.0]
    """
    s = np.asarray(scores, np.float64)
    own = np.asarray(own, np.int64)
    above, tied = tie_counts(s, s[np.arange(len(s)), own])
    return (above == 0) / np.maximum(tied, 1)


def mid_rank(scores, own) -> np.ndarray:
    """Candidates ranked before ``own`` under random tie breaking, on average: ``above + (tied - 1) / 2``."""
    s = np.asarray(scores, np.float64)
    above, tied = tie_counts(s, s[np.arange(len(s)), np.asarray(own, np.int64)])
    return above + (tied - 1) / 2.0


def topk_hits(scores, member, k: int, *, tol: float = TIE_TOL) -> tuple[float, np.ndarray]:
    """Member hits among the ``k`` best ``scores`` under uniform random tie breaking: the expected number and its
    pmf over 0..k (the candidates tied at the k-th place share the slots left: hypergeometric)."""
    s = np.asarray(scores, np.float64)
    m = np.asarray(member, bool)
    k = int(min(k, len(s)))
    pmf = np.zeros(k + 1)
    if k <= 0:
        pmf[0] = 1.0
        return 0.0, pmf
    kth = float(np.partition(s, len(s) - k)[len(s) - k])
    t = tol * max(1.0, abs(kth))
    above, tied = s > kth + t, np.abs(s - kth) <= t
    slots = k - int(above.sum())
    fixed, n_t, m_t = int((above & m).sum()), int(tied.sum()), int((tied & m).sum())
    # scipy's functions without freezing a distribution (a frozen one costs about 1 ms; this runs per record)
    pmf[fixed:fixed + slots + 1] = hypergeom.pmf(np.arange(slots + 1), n_t, m_t, slots)
    return fixed + slots * m_t / n_t, pmf


def scores_without_nan(values, what: str) -> np.ndarray:
    """``values`` as a flat float array, or a ValueError naming ``what`` where any is NaN: a NaN score compares false
    with every threshold, so an attacker fed one would silently accept nothing and read as no risk (infinite scores
    order like any others)."""
    v = np.asarray(values, np.float64).ravel()
    bad = np.isnan(v)
    if bad.any():
        raise ValueError(f"{int(bad.sum())} of the {len(v)} {what} are NaN (e.g. a network that diverged); an attack "
                         "cannot be scored on them")
    return v


def threshold_at_far(impostor_scores, far: float) -> float:
    """The lowest threshold ``t`` (accept ``score >= t``) whose FAR on ``impostor_scores`` is at most ``far``: scores
    tied at a candidate threshold are accepted or refused together, so ties never let the realised FAR exceed
    ``far`` (all scores tied: a threshold above them, nothing accepted)."""
    s = np.sort(scores_without_nan(impostor_scores, "impostor scores"))
    if len(s) == 0:
        raise ValueError("no impostor scores to fix a threshold on")
    if not 0 <= far <= 1:
        raise ValueError(f"far={far} must be in [0, 1]")
    allowed = int(np.floor(far * len(s) + 1e-9))
    cand = np.unique(s)
    accepted = len(s) - np.searchsorted(s, cand, side="left")         # impostors with score >= candidate
    ok = cand[accepted <= allowed]
    return float(ok[0]) if len(ok) else float(np.nextafter(s[-1], np.inf))


# ---- top-K nulls ----------------------------------------------------------------------------------------

def topk_null(ks, pool) -> tuple[np.ndarray, float]:
    """Exact null distribution of the total top-K hits of a random ranking: record ``r`` with ``k_r`` members
    in a pool of ``pool`` images (one size for all, or one per record) draws ``k_r`` of them at random, so its hits
    are hypergeometric (``M = pool_r, n = k_r, N = k_r``) and the total is their convolution. Returns (pmf over
    0..sum k, mean)."""
    ks = [int(k) for k in ks]
    pools = [int(pool)] * len(ks) if np.ndim(pool) == 0 else [int(p) for p in pool]
    if len(pools) != len(ks):
        raise ValueError(f"{len(pools)} pool sizes for {len(ks)} records")
    each = {kp: hypergeom.pmf(np.arange(kp[0] + 1), kp[1], kp[0], kp[0]) for kp in set(zip(ks, pools, strict=True))}
    pmf = np.ones(1)
    for kp in zip(ks, pools, strict=True):
        pmf = np.convolve(pmf, each[kp])
    return pmf, float(sum(k * k / p for k, p in zip(ks, pools, strict=True)))


def upper_tail(pmf: np.ndarray, observed) -> float:
    """P(X >= observed) under ``pmf`` (over 0..len-1). ``observed`` may itself be a pmf (hits under random tie
    breaking): the tail is then averaged over it."""
    obs = np.asarray(observed, np.float64)
    if obs.ndim == 0:
        return float(min(1.0, max(0.0, pmf[int(observed):].sum())))
    tail = np.r_[np.cumsum(pmf[::-1])[::-1], 0.0]                 # tail[h] = P(X >= h)
    h = np.minimum(np.arange(len(obs)), len(pmf))
    return float(min(1.0, max(0.0, (obs * tail[h]).sum())))
