"""Reference statistics of the attacks, on scipy: exact binomial intervals and tests, AUC with its DeLong
interval and Mann-Whitney test (one- and two-sided), the exact null of top-K membership; ranks that give a
tie no credit; patient-level (cluster bootstrap) intervals.

**Ties.** A rank or top-1 statistic never counts a tie for the attacker: a target tied with ``t`` others at
the top gets credit ``1 / (t + 1)``, its expected success under uniform random tie breaking, computed
exactly (:func:`tie_counts`, :func:`top1_credit`, :func:`topk_hits`). Scores within ``TIE_TOL`` (relative,
floor 1) of each other are tied: cosines of identical rows computed by BLAS differ in the last bits.

**Patients.** Images of one patient are not independent. Where patient ids are known, a rate, median or AUC
gets a **cluster bootstrap** interval (:func:`cluster_bootstrap`): patients are resampled with replacement
(``BOOT_RESAMPLES`` multinomial draws from a fixed, recorded seed), each image or pair weighted by how often
its patient was drawn (a pair of two patients by the product), and the percentile interval of the
recomputed statistic is reported, widened to contain the estimate. Units linked through records that
stand for several patients form one cluster (:func:`components`). Where the resampled rates show no spread
at all (every image a success, say) the percentile interval would collapse; the Wilson interval with one
trial per cluster is given instead.

Every function here is tested against scipy / sklearn or a brute-force computation
(tests/test_eval_protocol.py, tests/test_attack_ties_*.py, tests/test_attack_intervals_*.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from scipy.stats import beta, binomtest, hypergeom, mannwhitneyu, norm, rankdata

TIE_TOL = 1e-12                 # relative: scores this close are tied
BOOT_RESAMPLES = 400            # patient bootstrap resamples
_BUDGET = 1 << 22               # weights held at once (resamples x units), 32 MiB


def unit(a) -> np.ndarray:
    """Rows scaled to unit length (cosine similarity is then a dot product)."""
    a = np.asarray(a, np.float64)
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


def threshold_at_far(impostor_scores, far: float) -> float:
    """The lowest threshold ``t`` (accept ``score >= t``) whose FAR on ``impostor_scores`` is at most ``far``: scores
    tied at a candidate threshold are accepted or refused together, so ties never let the realised FAR exceed
    ``far`` (all scores tied: a threshold above them, nothing accepted)."""
    s = np.sort(np.asarray(impostor_scores, np.float64).ravel())
    if len(s) == 0:
        raise ValueError("no impostor scores to fix a threshold on")
    if not 0 <= far <= 1:
        raise ValueError(f"far={far} must be in [0, 1]")
    allowed = int(np.floor(far * len(s) + 1e-9))
    cand = np.unique(s)
    accepted = len(s) - np.searchsorted(s, cand, side="left")         # impostors with score >= candidate
    ok = cand[accepted <= allowed]
    return float(ok[0]) if len(ok) else float(np.nextafter(s[-1], np.inf))


# ---- AUC and top-K nulls ----------------------------------------------------------------------------------

def delong(pos_scores, neg_scores, *, confidence: float = 0.95, pos_groups=None, neg_groups=None,
           seed: int = 0, n_resamples: int = BOOT_RESAMPLES) -> dict:
    """AUC = P(pos > neg) + P(tie)/2 with DeLong's variance (DeLong et al. 1988), its normal interval, the
    two-sided Mann-Whitney p-value, and the two-sided AUC ``max(AUC, 1 - AUC)`` (an attacker free to flip
    the direction of its score).

    With ``pos_groups`` and ``neg_groups`` (the patient of each score, or of each side of a pair: shape (n, 2)),
    ``ci`` is the patient cluster bootstrap interval instead (``interval`` says which; DeLong's stays in
    ``delong_ci``), and ``p_value`` the bootstrap's (:func:`bootstrap_p`; ``p_value_test`` says which): the
    Mann-Whitney test treats the images of one patient as independent."""
    x = np.asarray(pos_scores, np.float64).ravel()
    y = np.asarray(neg_scores, np.float64).ravel()
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
    var = (v10.var(ddof=1) / m if m > 1 else 0.0) + (v01.var(ddof=1) / n if n > 1 else 0.0)
    se = math.sqrt(max(var, 0.0))
    z = float(norm.ppf(0.5 + confidence / 2))
    ci = [max(0.0, auc - z * se), min(1.0, auc + z * se)]
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
        # the image of the AUC's interval, not the percentiles of folded draws: those never reach 0.5, so a null
        # attack would read as above chance
        out.update(ci=boot["ci"], two_sided_ci=two_sided_interval(boot["ci"]),
                   interval=boot["interval"], patients=boot["clusters"],
                   resamples=boot["resamples"], seed=seed, p_value=bootstrap_p(boot["draws"], 0.5),
                   p_value_test=f"patient cluster bootstrap, interval inversion: twice the smaller share of the "
                                f"{boot['resamples']} resampled AUCs on either side of 0.5")
    return out


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


def bootstrap_p(draws, null: float, *, alternative: str = "two-sided") -> float:
    """p-value of ``statistic = null`` by inverting the percentile interval: two-sided, twice the smaller share of
    the finite bootstrap draws at or beyond ``null`` on either side (within ``TIE_TOL`` counts on both), with the
    +1 correction: never below ``2 / (draws + 1)``; ``alternative="greater"`` (an attack better than chance), the
    share at or below ``null``, never below ``1 / (draws + 1)``.

    >>> bootstrap_p(np.linspace(0.6, 0.9, 399), 0.5)
    0.005
    >>> bootstrap_p(np.zeros(399), 0.008, alternative="greater")    # below chance: no evidence of a leak
    1.0
    """
    if alternative not in ("two-sided", "greater"):
        raise ValueError(f"alternative={alternative!r} must be 'two-sided' or 'greater'")
    d = np.asarray(draws, np.float64)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return float("nan")
    tol = TIE_TOL * max(1.0, abs(null))                             # draws equal to the null up to rounding
    below, above = (int((d <= null + tol).sum()) + 1) / (len(d) + 1), (int((d >= null - tol).sum()) + 1) / (len(d) + 1)
    if alternative == "greater":
        return float(min(1.0, below))
    return float(min(1.0, 2 * min(below, above)))


def topk_null(ks, pool: int) -> tuple[np.ndarray, float]:
    """Exact null distribution of the total top-K hits of a random ranking: record ``r`` with ``k_r`` members
    in a pool of ``pool`` images draws ``k_r`` of them at random, so its hits are hypergeometric
    (``M = pool, n = k_r, N = k_r``) and the total is their convolution. Returns (pmf over 0..sum k, mean)."""
    ks = [int(k) for k in ks]
    each = {k: hypergeom.pmf(np.arange(k + 1), pool, k, k) for k in set(ks)}   # records share a few k
    pmf = np.ones(1)
    for k in ks:
        pmf = np.convolve(pmf, each[k])
    return pmf, float(sum(k * k / pool for k in ks))


def upper_tail(pmf: np.ndarray, observed) -> float:
    """P(X >= observed) under ``pmf`` (over 0..len-1). ``observed`` may itself be a pmf (hits under random tie
    breaking): the tail is then averaged over it."""
    obs = np.asarray(observed, np.float64)
    if obs.ndim == 0:
        return float(min(1.0, max(0.0, pmf[int(observed):].sum())))
    tail = np.r_[np.cumsum(pmf[::-1])[::-1], 0.0]                 # tail[h] = P(X >= h)
    h = np.minimum(np.arange(len(obs)), len(pmf))
    return float(min(1.0, max(0.0, (obs * tail[h]).sum())))


# ---- patient clusters and the cluster bootstrap -----------------------------------------------------------

def components(units: Sequence[Iterable]) -> tuple[np.ndarray, dict]:
    """Connected components of units (records, images) linked by the patients they stand for: one label per unit
    and one per patient. A unit with no patient is a cluster of its own.

    >>> components([{"a"}, {"b", "c"}, {"c"}, {"d"}])[0].tolist()
    [0, 1, 1, 2]
    """
    parent: dict = {}

    def find(p):
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    units = [list(u) for u in units]
    for ps in units:
        for p in ps:
            parent.setdefault(p, p)
        for p in ps[1:]:
            ra, rb = find(ps[0]), find(p)
            if ra != rb:
                parent[rb] = ra
    labels: dict = {}
    unit_label = np.empty(len(units), np.int64)
    for i, ps in enumerate(units):
        root = find(ps[0]) if ps else ("__unit__", i)
        unit_label[i] = labels.setdefault(root, len(labels))
    return unit_label, {p: labels[find(p)] for p in parent}


def record_clusters(record_sources: Sequence[Iterable[int]], patients) -> np.ndarray:
    """The resampling unit of each released record: records linked by the patients they share (``patients[i]``:
    the patient of real row ``i``; ``record_sources``: the real rows each record stands for) form one cluster.

    >>> record_clusters([[0, 1], [2], [3]], np.array(["a", "b", "b", "c"])).tolist()
    [0, 0, 1]
    """
    pats = np.asarray(patients)
    return components([set(pats[list(rows)].tolist()) for rows in record_sources])[0]


def patient_clusters(record_patients: Sequence[Iterable], patients) -> np.ndarray:
    """The resampling unit of each of ``patients``: the connected component of patients linked by the released
    records they share (:func:`components`), as a string; a patient in no record is a unit of its own.

    >>> patient_clusters([{"a", "b"}, {"c"}], ["a", "b", "c", "z"]).tolist()
    ['cluster 0', 'cluster 0', 'cluster 1', 'patient z']
    """
    _, label = components(record_patients)
    return np.asarray([f"cluster {label[p]}" if p in label else f"patient {p}" for p in patients])


def _codes(groups) -> tuple[np.ndarray, int]:
    g = np.asarray(groups)
    if (g.ndim == 2 and g.shape[1] != 2) or g.ndim not in (1, 2):
        raise ValueError(f"groups must be (n,) or (n, 2) (a pair's two patients), got shape {g.shape}")
    _, inv = np.unique(g.ravel(), return_inverse=True)
    return inv.reshape(g.shape), int(inv.max()) + 1 if inv.size else 0


def cluster_weights(groups, *, n_resamples: int = BOOT_RESAMPLES, seed: int = 0, stream: int = 0) -> np.ndarray:
    """(n_resamples, n): how often each unit is drawn when whole clusters (``groups``: the cluster of each of n
    units) are drawn with replacement, seeded as :func:`cluster_bootstrap`. For a statistic of two populations
    resampled together (one call per population, each with its own ``stream``)."""
    codes, g = _codes(groups)
    if codes.ndim != 1:
        raise ValueError("cluster_weights takes one cluster per unit, (n,)")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(stream)]))
    counts = rng.multinomial(g, np.full(g, 1.0 / g), size=n_resamples).astype(np.float64) if g else \
        np.zeros((n_resamples, 0))
    return counts[:, codes]


def cluster_bootstrap(statistic: Callable[[np.ndarray], np.ndarray], groups, *, n_resamples: int = BOOT_RESAMPLES,
                      seed: int = 0, stream: int = 0) -> tuple[np.ndarray, int]:
    """Draws of ``statistic(weights)`` over ``n_resamples`` resamples of whole clusters (patients), and the number
    of clusters. ``groups``: the cluster of each unit (n,), or of both sides of each pair (n, 2). ``weights`` is
    (resamples, n): how often each unit's cluster was drawn (a pair across two clusters: the product; within
    one: that cluster's count). ``statistic`` returns (resamples,) or (stats, resamples). Seeded by
    ``SeedSequence([seed, stream])``: two populations resampled independently need different streams."""
    codes, g = _codes(groups)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(stream)]))
    # pairs (up to millions): float32 weights, half the memory traffic; they and their sums are integers, exact
    # below 2**24 (a sum of n pair weights is about n)
    dtype = np.float32 if codes.ndim == 2 else np.float64
    counts = rng.multinomial(g, np.full(g, 1.0 / g), size=n_resamples).astype(dtype) if g else \
        np.zeros((n_resamples, 0), dtype)
    step = max(1, _BUDGET // max(len(codes), 1))
    if codes.ndim == 2:
        first, second = codes[:, 0].copy(), np.where(codes[:, 0] != codes[:, 1], codes[:, 1], g)
    out = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for s in range(0, n_resamples, step):
            c = counts[s:s + step]
            if codes.ndim == 1:
                w = np.take(c, codes, axis=1)
            else:                                                   # a pair across two clusters: the product
                c = np.concatenate([c, np.ones((len(c), 1), dtype)], 1)   # column g: 1, within-cluster pairs
                w = np.take(c, first, axis=1)
                w *= np.take(c, second, axis=1)
            out.append(np.asarray(statistic(w), np.float64))
    return np.concatenate(out, axis=-1), g


def percentile_ci(draws: np.ndarray, estimate: float, confidence: float) -> list[float]:
    """Percentile interval of the finite draws, widened to contain ``estimate``."""
    d = np.asarray(draws, np.float64)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return [float("nan"), float("nan")]
    lo, hi = (float(v) for v in np.quantile(d, [(1 - confidence) / 2, (1 + confidence) / 2]))
    if np.isfinite(estimate):
        lo, hi = min(lo, float(estimate)), max(hi, float(estimate))
    return [lo, hi]


def cluster_summary(statistic, groups, estimate: float, *, confidence: float = 0.95, seed: int = 0, stream: int = 0,
                    n_resamples: int = BOOT_RESAMPLES, rate: bool = False) -> dict:
    """Cluster bootstrap of one statistic: ``{ci, draws, clusters, resamples, seed, interval}``. A ``rate`` whose
    draws show no spread gets the Wilson interval with one trial per cluster instead of a collapsed one."""
    return cluster_summaries(lambda w: statistic(w)[None], groups, {"x": (estimate, rate)}, confidence=confidence,
                             seed=seed, stream=stream, n_resamples=n_resamples)["x"]


def cluster_summaries(statistic, groups, estimates: dict[str, tuple[float, bool]], *, confidence: float = 0.95,
                      seed: int = 0, stream: int = 0, n_resamples: int = BOOT_RESAMPLES) -> dict[str, dict]:
    """Several statistics from one pass of resamples: ``statistic(w)`` returns (len(estimates), resamples), in the
    order of ``estimates`` (name -> (estimate, is a rate))."""
    draws, g = cluster_bootstrap(statistic, groups, n_resamples=n_resamples, seed=seed, stream=stream)
    return summarise_draws(draws, g, estimates, confidence=confidence, seed=seed, n_resamples=n_resamples)


def no_spread(draws: np.ndarray) -> bool:
    """Whether bootstrap draws show no spread: their finite values agree to 1e-12 (float sums of the same rate
    differ in the last bits, so an exact comparison would miss it)."""
    ok = np.asarray(draws, np.float64)
    ok = ok[np.isfinite(ok)]
    return bool(len(ok)) and float(ok.max() - ok.min()) <= 1e-12


def summarise_draws(draws: np.ndarray, g: int, estimates: dict[str, tuple[float, bool]], *, confidence: float,
                    seed: int, n_resamples: int) -> dict[str, dict]:
    """:func:`cluster_summaries` from draws already made: (len(estimates), resamples) over ``g`` clusters."""
    draws = np.asarray(draws, np.float64).reshape(len(estimates), -1)
    out = {}
    for row, (name, (est, is_rate)) in zip(draws, estimates.items(), strict=True):
        ci = percentile_ci(row, est, confidence)
        ok = row[np.isfinite(row)]
        how = f"patient cluster bootstrap (percentile, {n_resamples} resamples, seed {seed})"
        if is_rate and no_spread(ok):
            lo, hi = wilson(est * g, g, confidence=confidence)
            ci = [min(lo, est), max(hi, est)]
            how = (f"Wilson with one trial per patient cluster ({g}): the {n_resamples} bootstrap resamples show "
                   f"no spread")
        out[name] = {"ci": ci, "draws": row, "clusters": g, "resamples": len(ok), "seed": seed, "interval": how}
    return out


def weighted_median(values) -> Callable[[np.ndarray], np.ndarray]:
    """Median with integer weights (the mean of the two middle values, as ``np.median``)."""
    v = np.asarray(values, np.float64)
    order = np.argsort(v, kind="stable")
    vs = v[order]

    def stat(w: np.ndarray) -> np.ndarray:
        c = np.cumsum(w[:, order], 1)
        half = c[:, -1:] / 2
        lo = np.minimum((c < half).sum(1), len(v) - 1)
        hi = np.minimum((c <= half).sum(1), len(v) - 1)
        return np.where(c[:, -1] > 0, (vs[lo] + vs[hi]) / 2, np.nan)
    return stat


def weighted_auc(scores, positive) -> Callable[[np.ndarray], np.ndarray]:
    """AUC = P(pos > neg) + P(tie) / 2 under weights (the Mann-Whitney AUC for weights of one). The negatives'
    weights are summed between consecutive positive scores (one pass), so a resample costs O(units)."""
    s = np.asarray(scores, np.float64)
    pos = np.asarray(positive, bool)
    pi, ni = np.flatnonzero(pos), np.flatnonzero(~pos)
    order = ni[np.argsort(s[ni], kind="stable")]
    sn = s[order]
    lo, hi = np.searchsorted(sn, s[pi], "left"), np.searchsorted(sn, s[pi], "right")
    starts = np.unique(np.r_[0, lo, hi])
    starts = starts[starts < len(sn)]                               # negatives below / tied with each positive
    at = np.searchsorted(np.r_[starts, len(sn)], np.c_[lo, hi])     # where lo and hi fall among the boundaries

    take_p, take_n = _take(pi), _take(order)

    def stat(w: np.ndarray) -> np.ndarray:
        wp = take_p(w)
        seg = np.add.reduceat(take_n(w), starts, axis=1) if len(starts) else np.zeros((len(w), 0))
        c = np.concatenate([np.zeros((len(w), 1)), np.cumsum(seg, 1, dtype=np.float64)], 1)  # negatives below
        below, upto = c[:, at[:, 0]], c[:, at[:, 1]]
        return (wp * (below + 0.5 * (upto - below))).sum(1) / (wp.sum(1) * c[:, -1])
    return stat


def _take(idx: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Columns ``idx`` of a weight matrix: a view where they are a contiguous run (units pre-sorted)."""
    if len(idx) and np.array_equal(idx, np.arange(idx[0], idx[0] + len(idx))):
        lo, hi = int(idx[0]), int(idx[0]) + len(idx)
        return lambda w: w[:, lo:hi]
    return lambda w: w[:, idx]
