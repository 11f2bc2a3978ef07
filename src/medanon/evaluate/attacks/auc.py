"""The AUC of an attack's scores with its intervals: DeLong's (units independent) and, where patients are known,
the patient cluster bootstrap's (:mod:`.bootstrap`; pairs through :mod:`.pair_bootstrap`), and the two-sided AUC of an
attacker free to flip its score's direction. Tested against sklearn's ``roc_auc_score`` and brute-force resampling
(tests/test_eval_protocol.py)."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import mannwhitneyu, norm, rankdata

from medanon.evaluate.attacks.bootstrap import (
    BOOT_RESAMPLES,
    bootstrap_p,
    cluster_summary,
    summarise_draws,
    weighted_auc,
)
from medanon.evaluate.attacks.stats import scores_without_nan


def delong(pos_scores, neg_scores, *, confidence: float = 0.95, pos_groups=None, neg_groups=None,
           seed: int = 0, n_resamples: int = BOOT_RESAMPLES) -> dict:
    """AUC = P(pos > neg) + P(tie)/2 with DeLong's variance (DeLong et al. 1988), its normal interval, the
    two-sided Mann-Whitney p-value, and the two-sided AUC ``max(AUC, 1 - AUC)`` (an attacker free to flip
    the direction of its score).

    With ``pos_groups`` and ``neg_groups`` (the patient of each score, or of each side of a pair: shape (n, 2)),
    ``ci`` is the patient cluster bootstrap interval instead (``interval`` says which; DeLong's stays in
    ``delong_ci``), and ``p_value`` the bootstrap's (:func:`bootstrap_p`; ``p_value_test`` says which): the
    Mann-Whitney test treats the images of one patient as independent."""
    x = scores_without_nan(pos_scores, "positive scores")
    y = scores_without_nan(neg_scores, "negative scores")
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        nan = float("nan")
        return {"auc": nan, "ci": [nan, nan], "delong_ci": [nan, nan], "se": nan, "p_value": nan,
                "two_sided_auc": nan, "two_sided_ci": [nan, nan], "n_pos": m, "n_neg": n, "direction": "none",
                "interval": "none"}
    # structural components: psi(x_i, y_j) averaged over the other sample, from ranks (ties count 1/2)
    rz = rankdata(np.r_[x, y])
    rx, ry = rankdata(x), rankdata(y)
    v10 = (rz[:m] - rx) / n                        # for each positive: fraction of negatives below it
    v01 = 1.0 - (rz[m:] - ry) / m                  # for each negative: fraction of positives above it
    auc = float(v10.mean())
    if m > 1 and n > 1:
        se = math.sqrt(max(v10.var(ddof=1) / m + v01.var(ddof=1) / n, 0.0))
        z = float(norm.ppf(0.5 + confidence / 2))
        ci = [max(0.0, auc - z * se), min(1.0, auc + z * se)]
    else:                                           # one score on a side has no variance to estimate: no interval
        se, ci = math.nan, [math.nan, math.nan]
    out = {"auc": auc, "ci": ci, "delong_ci": ci, "se": se, "two_sided_auc": max(auc, 1.0 - auc),
           "two_sided_ci": two_sided_interval(ci), "direction": "higher" if auc >= 0.5 else "lower", "n_pos": m,
           "n_neg": n, "interval": "DeLong"}
    if pos_groups is None or neg_groups is None:        # with patients, the bootstrap's p-value replaces it below
        out.update(p_value=float(mannwhitneyu(x, y, alternative="two-sided").pvalue),
                   p_value_test="Mann-Whitney, two-sided (units independent)")
    else:
        groups = np.concatenate([np.asarray(pos_groups), np.asarray(neg_groups)])
        pos = np.r_[np.ones(m, bool), np.zeros(n, bool)]
        fast = None
        if groups.ndim == 2:                            # pairs: from count matrices (.pair_bootstrap), same draws
            from medanon.evaluate.attacks.pair_bootstrap import verification_draws

            fast = verification_draws(np.r_[x, y], pos, pos, pos, groups, n_resamples=n_resamples, seed=seed)
        boot = (summarise_draws(fast[0][2:3], fast[1], {"x": (auc, False)}, confidence=confidence, seed=seed,
                                n_resamples=n_resamples)["x"] if fast is not None else
                cluster_summary(weighted_auc(np.r_[x, y], pos), groups, auc, confidence=confidence, seed=seed,
                                n_resamples=n_resamples))
        ci, how = boot["ci"], boot["interval"]
        units = pair_units(groups) if groups.ndim == 2 else (_units(pos_groups), _units(neg_groups))
        ci, how = widened_at_edges(ci, auc, *units, confidence=confidence, how=how)
        floor = permutation_floor(*units)
        # the image of the AUC's interval, not the percentiles of folded draws: those never reach 0.5, so a null
        # attack would read as above chance
        out.update(ci=ci, two_sided_ci=two_sided_interval(ci),
                   interval=how, patients=boot["clusters"],
                   resamples=boot["resamples"], seed=seed, p_value=max(bootstrap_p(boot["draws"], 0.5), floor),
                   p_value_test=f"patient cluster bootstrap, interval inversion: twice the smaller share of the "
                                f"{boot['resamples']} resampled AUCs on either side of 0.5, and at least "
                                f"{floor:.3g}, the smallest two-sided p-value of an exact permutation test of "
                                f"{units[0]} and {units[1]} patients")
    return out


def widened_at_edges(ci, auc: float, m: int, n: int, *, confidence: float = 0.95, how: str = "") -> tuple[list, str]:
    """A percentile interval of an AUC that reaches 0 or 1 (where it under-covers, or collapses to a point when every
    resample separates) widened to contain :func:`newcombe_interval` with ``m`` and ``n`` units (patients); others
    as they are. Returns the interval and ``how`` with the widening said."""
    lo0, hi0 = (float(v) for v in ci)
    if not (lo0 <= 1e-12 or hi0 >= 1 - 1e-12) or not math.isfinite(auc):
        return [lo0, hi0], how
    lo, hi = newcombe_interval(auc, m, n, confidence=confidence)
    return [min(lo0, lo), max(hi0, hi)], how + (f"; it reaches {'1' if hi0 >= 1 - 1e-12 else '0'}, so widened to "
                                                f"the score interval with one unit per patient ({m} and {n})")


def pair_units(groups) -> tuple[int, int]:
    """The units of an AUC over pairs (``groups`` (n, 2): each pair's two patients): both sides are pairs of the same
    people, taken as two halves of them (not twice as many independent units)."""
    people = _units(groups)
    return max(people // 2, 1), max(people - people // 2, 1)


def permutation_floor(m: int, n: int) -> float:
    """The smallest two-sided p-value an exact permutation test of ``m`` and ``n`` units can give: 2 / C(m + n, m)."""
    return min(1.0, 2.0 / math.comb(m + n, m)) if m and n else 1.0


def _units(groups) -> int:
    """The number of patients on one side (pairs: of either image of a pair)."""
    return len(np.unique(np.asarray(groups).astype(str).ravel()))


def newcombe_interval(auc: float, m: int, n: int, *, confidence: float = 0.95) -> list[float]:
    """The score interval of an AUC from ``m`` positive and ``n`` negative units (Newcombe 2006's approach): the
    values θ with ``(auc - θ)² <= z² V(θ)``, V Hanley and McNeil's (1982) variance with m - 1 and n - 1 replaced by
    their mean. Unlike a Wald or percentile interval it keeps its width at AUC = 0 or 1.

    >>> [round(v, 3) for v in newcombe_interval(1.0, 10, 10)]
    [0.8, 1.0]
    """
    from scipy.optimize import brentq

    if m < 1 or n < 1 or not math.isfinite(auc):
        return [float("nan"), float("nan")]
    z2 = float(norm.ppf(0.5 + confidence / 2)) ** 2
    others = (m + n) / 2 - 1                        # the mean of m - 1 and n - 1

    def gap(t: float) -> float:
        v = t * (1 - t) * (1 + others * ((1 - t) / (2 - t) + t / (1 + t))) / (m * n)
        return (auc - t) ** 2 - z2 * max(v, 0.0)

    eps = 1e-12
    lo = 0.0 if auc <= eps or gap(0.0) <= 0 else brentq(gap, 0.0, auc - eps)
    hi = 1.0 if auc >= 1 - eps or gap(1.0) <= 0 else brentq(gap, auc + eps, 1.0)
    return [float(lo), float(hi)]


def two_sided_interval(ci) -> list[float]:
    """The image of an AUC interval under ``a -> max(a, 1 - a)``: it holds the two-sided AUC whenever ``ci`` holds
    the AUC (so its coverage is at least ``ci``'s).

    >>> two_sided_interval([0.2, 0.4]), two_sided_interval([0.45, 0.7])
    ([0.6, 0.8], [0.5, 0.7])
    """
    lo, hi = (float(v) for v in ci)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [float("nan"), float("nan")]
    a, b = max(lo, 1.0 - lo), max(hi, 1.0 - hi)
    return [0.5 if lo <= 0.5 <= hi else min(a, b), max(a, b)]
