"""Patient-level intervals: the cluster bootstrap.

Images of one patient are not independent. Where patient ids are known, a rate, median or AUC gets a **cluster
bootstrap** interval (:func:`cluster_bootstrap`): patients are resampled with replacement (``BOOT_RESAMPLES``
multinomial draws from a fixed, recorded seed), each image or pair weighted by how often its patient was drawn (a
pair of two patients by the product), and the percentile interval of the recomputed statistic is reported, widened
to contain the estimate. Units linked through records that stand for several patients form one cluster
(:func:`components`). Where the resampled rates show no spread at all (every image a success, say) the percentile
interval would collapse; the Wilson interval with one trial per cluster is given instead. A p-value comes from
inverting the percentile interval (:func:`bootstrap_p`).

Tested against brute-force resampling (tests/test_attack_intervals_*.py, tests/test_eval_pair_bootstrap.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from medanon.evaluate.attacks.stats import TIE_TOL, wilson

BOOT_RESAMPLES = 400            # patient bootstrap resamples
_BUDGET = 1 << 22               # weights held at once (resamples x units), 32 MiB


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
