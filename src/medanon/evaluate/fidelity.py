"""Fidelity: Fréchet distance (FID on Inception features, FD on any injected features), KID, bootstrap.

Every function takes *features*, ``(N, D)`` arrays, so any feature extractor can be injected: a
callable ``images (N, C, H, W) in [-1, 1] -> (N, D)``. :func:`extract_features` runs one in batches
with a progress bar; :func:`inception_extractor` wraps the Inception-v3 FID network of
:mod:`medanon.models.features` (the one published FIDs use). Statistics are float64.

- :func:`frechet_distance` — ``|mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1 S2)^{1/2})`` from means and
  covariances (scipy's ``sqrtm``, as pytorch-fid / the TensorFlow reference do);
- :func:`fd_from_features` — the same number computed exactly from samples without a D x D matrix
  square root: the non-zero eigenvalues of ``S1 S2`` are the squared singular values of
  ``X1c X2c^T / sqrt((n1-1)(n2-1))``, so ``tr (S1 S2)^{1/2}`` is that matrix's nuclear norm. It is
  cheap when ``n << D`` (a few hundred images, 2048 Inception features), which makes the bootstrap
  affordable;
- :func:`kid_from_features` — the unbiased MMD^2 with the cubic polynomial kernel
  ``k(x, y) = (x.y / D + 1)^3`` averaged over random subsets (Binkowski et al. 2018); :func:`kid_interval` its
  patient bootstrap interval, from the kernel matrices computed once;
- :func:`bootstrap_fd` — bootstrap interval from resampling both sets with replacement. Resampling
  duplicates vectors, which shrinks the fitted covariances' rank and inflates FD, so the bootstrap
  distribution sits above the estimate; the interval is its percentile interval shifted by that
  resampling bias (mean of the bootstrap values minus the estimate), i.e. centred on the estimate
  with the bootstrap's spread.

FID depends on the sample size (it is biased upwards for small N), so methods are compared at the
same N and the report states N next to each number (docs/design.md §6).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> a, b = rng.normal(0, 1, (2000, 4)), rng.normal(1, 1, (2000, 4))
>>> round(fd_from_features(a, b))          # |mu1 - mu2|^2 = 4 for equal covariances
4
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from medanon.evaluate.attacks.bootstrap import BOOT_RESAMPLES

FeatureExtractor = Callable[[torch.Tensor], torch.Tensor]


def _f64(x) -> np.ndarray:
    a = x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"features must be (N, D), got shape {a.shape}")
    return a


def feature_stats(features) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``(D,)`` and unbiased covariance ``(D, D)`` in float64."""
    f = _f64(features)
    if len(f) < 2:
        raise ValueError("at least two feature vectors are needed for a covariance")
    return f.mean(0), np.cov(f, rowvar=False)


def frechet_distance(mu1, sigma1, mu2, sigma2, *, eps: float = 1e-6) -> float:
    """Fréchet distance between N(mu1, sigma1) and N(mu2, sigma2) with scipy's matrix square root.

    If the product is singular, ``eps`` is added to both diagonals (as the reference FID code does).
    """
    from scipy import linalg

    mu1, mu2 = np.atleast_1d(np.asarray(mu1, np.float64)), np.atleast_1d(np.asarray(mu2, np.float64))
    s1, s2 = np.atleast_2d(np.asarray(sigma1, np.float64)), np.atleast_2d(np.asarray(sigma2, np.float64))
    if mu1.shape != mu2.shape or s1.shape != s2.shape:
        raise ValueError("means and covariances of both sets must have the same shapes")
    covmean = linalg.sqrtm(s1 @ s2)
    if not np.isfinite(covmean).all():
        off = np.eye(len(s1)) * eps
        covmean = linalg.sqrtm((s1 + off) @ (s2 + off))
    covmean = covmean.real
    diff = mu1 - mu2
    return float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * np.trace(covmean))


def _trace_sqrt_product(x1c: np.ndarray, x2c: np.ndarray) -> float:
    """``tr (S1 S2)^{1/2}`` for centred samples, in whichever space (sample or feature) is smaller."""
    n1, n2, d = len(x1c), len(x2c), x1c.shape[1]
    c = np.sqrt((n1 - 1.0) * (n2 - 1.0))
    if min(n1, n2) <= d:
        return float(np.linalg.svd(x1c @ x2c.T, compute_uv=False).sum() / c)
    s1 = x1c.T @ x1c / (n1 - 1.0)
    s2 = x2c.T @ x2c / (n2 - 1.0)
    w, v = np.linalg.eigh(s1)
    r1 = (v * np.sqrt(np.clip(w, 0, None))) @ v.T                        # S1^{1/2}
    ev = np.linalg.eigvalsh(r1 @ s2 @ r1)
    return float(np.sqrt(np.clip(ev, 0, None)).sum())


def fd_from_features(f1, f2) -> float:
    """Fréchet distance between the Gaussians fitted to two feature sets (exact, no ``sqrtm``)."""
    a, b = _f64(f1), _f64(f2)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"feature sizes differ: {a.shape[1]} vs {b.shape[1]}")
    if len(a) < 2 or len(b) < 2:
        raise ValueError("each set needs at least two feature vectors")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):     # (the eigen-solver's "did not converge" otherwise)
        raise ValueError("the feature vectors hold NaN or infinite values (an image with NaN pixels, or a feature "
                         "network that overflowed): no Fréchet distance")
    ma, mb = a.mean(0), b.mean(0)
    ac, bc = a - ma, b - mb
    tr_a = float((ac * ac).sum() / (len(a) - 1.0))
    tr_b = float((bc * bc).sum() / (len(b) - 1.0))
    diff = ma - mb
    return float(diff @ diff + tr_a + tr_b - 2.0 * _trace_sqrt_product(ac, bc))


def kid_from_features(f1, f2, *, subsets: int = 100, subset_size: int = 1000,
                      seed: int = 0) -> tuple[float, float]:
    """Kernel Inception Distance: mean and standard deviation of the unbiased MMD^2 over ``subsets``
    random subsets of ``min(subset_size, n1, n2)`` vectors from each set (drawn without replacement)."""
    a, b = _f64(f1), _f64(f2)
    m = min(subset_size, len(a), len(b))
    if m < 2:
        raise ValueError("KID needs at least two feature vectors in each set")
    d = a.shape[1]
    rng = np.random.default_rng(seed)
    vals = np.empty(subsets)
    for s in range(subsets):
        x = a[rng.choice(len(a), m, replace=False)]
        y = b[rng.choice(len(b), m, replace=False)]
        kxx = (x @ x.T / d + 1.0) ** 3
        kyy = (y @ y.T / d + 1.0) ** 3
        kxy = (x @ y.T / d + 1.0) ** 3
        vals[s] = ((kxx.sum() - np.trace(kxx)) / (m * (m - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
                   - 2.0 * kxy.mean())
    return float(vals.mean()), float(vals.std(ddof=1) if subsets > 1 else 0.0)


def resample_rows(rng: np.random.Generator, n: int, groups=None) -> np.ndarray:
    """Rows of one bootstrap resample of ``n`` rows: rows drawn with replacement, or, with ``groups`` (the patient,
    or patient cluster, of each row), groups drawn with replacement and every row of a drawn group taken."""
    if groups is None:
        return rng.integers(0, n, n)
    _, inv = np.unique(np.asarray(groups), return_inverse=True)
    rows_of = [np.flatnonzero(inv == g) for g in range(inv.max() + 1)]
    return np.concatenate([rows_of[g] for g in rng.integers(0, len(rows_of), len(rows_of))])


def kid_with_error(f1, f2, *, subsets: int = 100, subset_size: int = 1000, n_boot: int = 20,
                   seed: int = 0, groups1=None, groups2=None) -> dict:
    """KID (mean over subsets) with its 95 % interval (``ci``, :func:`kid_interval`, up to
    :data:`KID_KERNEL_ROWS` rows a set) and an error bar that exists at every N. When each set fits in one subset the
    subsets are all the same draw and their sd is 0: the error bar is then the sd of KID
    over ``n_boot`` bootstrap resamples of both sets (with replacement; duplicated rows stay in the unbiased
    estimator's off-diagonal sums, a slight upward bias stated in ``error``), by patient where ``groups1`` /
    ``groups2`` give each row's patient (or patient cluster)."""
    a, b = _f64(f1), _f64(f2)
    m = min(subset_size, len(a), len(b))
    mean, sd = kid_from_features(a, b, subsets=subsets, subset_size=subset_size, seed=seed)
    out = {"mean": mean, "sd": sd, "subset_size": m, "n": [len(a), len(b)], "error": "sd over subsets"}
    ci = kid_interval(a, b, mean, seed=seed, groups1=groups1, groups2=groups2)
    if ci is not None:                                        # the 95 % interval, by patient where groups say
        out.update(ci)
    if m >= min(len(a), len(b)) or subsets < 2:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x4B1D]))
        vals = []
        for _ in range(max(n_boot, 2)):
            x, y = a[resample_rows(rng, len(a), groups1)], b[resample_rows(rng, len(b), groups2)]
            k = min(m, len(x), len(y))
            vals.append(kid_from_features(x, y, subsets=1, subset_size=k, seed=seed)[0])
        unit = resampling_unit(groups1, groups2)
        out.update(sd=float(np.std(vals, ddof=1)), error=f"sd over {len(vals)} bootstrap resamples of both sets "
                                                         f"by {unit} (one subset holds each whole set)")
    return out


KID_KERNEL_ROWS = 4000         # above this many rows in a set, its kernel matrix (rows² float64) is not held


def kid_weighted(f1, f2, wa: np.ndarray, wb: np.ndarray) -> np.ndarray:
    """The unbiased MMD² (cubic kernel) of the sets with each row taken as often as its weight says, one value per
    row of ``wa`` (R, n1) and ``wb`` (R, n2); the pairs of a row with its own copies are left out. From the three
    kernel matrices, computed once."""
    a, b = _f64(f1), _f64(f2)
    d = a.shape[1]
    kaa, kbb, kab = ((x @ y.T / d + 1.0) ** 3 for x, y in ((a, a), (b, b), (a, b)))
    wa, wb = np.atleast_2d(np.asarray(wa, np.float64)), np.atleast_2d(np.asarray(wb, np.float64))

    def within(w: np.ndarray, k: np.ndarray) -> np.ndarray:
        pairs = w.sum(1) ** 2 - (w * w).sum(1)              # ordered pairs of distinct source rows
        with np.errstate(invalid="ignore", divide="ignore"):
            return (((w @ k) * w).sum(1) - (w * w) @ np.diag(k)) / pairs

    return within(wa, kaa) + within(wb, kbb) - 2.0 * ((wa @ kab) * wb).sum(1) / (wa.sum(1) * wb.sum(1))


def kid_interval(f1, f2, estimate: float, *, resamples: int = BOOT_RESAMPLES, confidence: float = 0.95, seed: int = 0,
                 groups1=None, groups2=None) -> dict | None:
    """A percentile interval for KID: both sets resampled by patient (``groups1`` / ``groups2``; by image without
    them), and in each resample the unbiased MMD² of the whole resampled sets with the cubic kernel, leaving out the
    pairs of a row with its own copies (duplicates would inflate it). Computed from the three kernel matrices once:
    a resample is a weighted sum. Widened to contain ``estimate``. None above :data:`KID_KERNEL_ROWS` rows.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> a, b = rng.normal(0, 1, (60, 8)), rng.normal(0.5, 1, (60, 8))
    >>> est = kid_from_features(a, b, subsets=1, subset_size=60)[0]
    >>> lo, hi = kid_interval(a, b, est, groups1=np.arange(60) // 2)["ci"]
    >>> bool(0 < lo < est < hi)
    True
    """
    a, b = _f64(f1), _f64(f2)
    if max(len(a), len(b)) > KID_KERNEL_ROWS or min(len(a), len(b)) < 2:
        return None
    from medanon.evaluate.attacks.bootstrap import cluster_weights, percentile_ci

    wa, wb = (cluster_weights(np.arange(len(x)) if g is None else g, n_resamples=resamples, seed=seed, stream=stream)
              for x, g, stream in ((a, groups1, 0x4B1E), (b, groups2, 0x4B1F)))
    draws = kid_weighted(a, b, wa, wb)

    return {"ci": percentile_ci(draws, estimate, confidence), "confidence": confidence,
            "resamples": int(np.isfinite(draws).sum()), "resampled": resampling_unit(groups1, groups2),
            "interval": "percentile of the unbiased MMD² of the whole resampled sets (a row's pairs with its own "
                        "copies left out)"}


@dataclass
class Interval:
    value: float                                # the estimate on the full sets
    low: float                                  # lower percentile bound
    high: float                                 # upper percentile bound
    confidence: float                           # e.g. 0.95
    n: tuple[int, int]                          # sample sizes (reference, evaluated)
    resampled: str = "images"                   # the bootstrap's unit: images, or patients (clusters)
    resamples: int = 0

    def to_dict(self) -> dict:
        return {"value": self.value, "ci": [self.low, self.high], "confidence": self.confidence,
                "n_reference": self.n[0], "n": self.n[1], "resampled": self.resampled, "resamples": self.resamples}


def resampling_unit(groups_ref, groups_eval) -> str:
    """What a two-set bootstrap resamples: ``patients`` (both sets by patient), ``images`` (neither), or which set by
    which (a release without its mapping: its records one by one, the real reference still by patient)."""
    if groups_ref is not None and groups_eval is not None:
        return "patients"
    if groups_ref is None and groups_eval is None:
        return "images"
    return ("patients (reference), images (evaluated set)" if groups_ref is not None else
            "images (reference), patients (evaluated set)")


def bootstrap_fd(f_ref, f_eval, *, n_boot: int = 50, confidence: float = 0.95, seed: int = 0,
                 groups_ref=None, groups_eval=None) -> Interval:
    """FD with a bias-shifted bootstrap percentile interval (both sets resampled ``n_boot`` times; ``n_boot=0``:
    the interval is NaN, none was computed): by patient
    where ``groups_ref`` / ``groups_eval`` give each row's patient (or cluster of patients sharing released
    records; images of one patient are not independent), else by image."""
    a, b = _f64(f_ref), _f64(f_eval)
    value = max(fd_from_features(a, b), 0.0)     # a distance: rounding puts a set's FD to itself just below 0
    rng = np.random.default_rng(seed)
    unit = resampling_unit(groups_ref, groups_eval)
    one = [g is not None and len(np.unique(np.asarray(g).astype(str))) < 2 for g in (groups_ref, groups_eval)]
    boots = [fd_from_features(a[resample_rows(rng, len(a), groups_ref)], b[resample_rows(rng, len(b), groups_eval)])
             for _ in range(n_boot)] if not any(one) else []
    if not boots:                               # no resamples (or one cluster: every resample is the set itself):
        #                                         no interval, not a point posing as one
        return Interval(value, math.nan, math.nan, confidence, (len(a), len(b)), unit, 0)
    q = (1.0 - confidence) / 2.0
    shift = float(np.mean(boots)) - value                       # resampling bias (duplicates inflate FD)
    lo, hi = float(np.quantile(boots, q)) - shift, float(np.quantile(boots, 1 - q)) - shift
    return Interval(value, max(lo, 0.0), hi, confidence, (len(a), len(b)), unit, len(boots))


@torch.no_grad()
def extract_features(extractor: FeatureExtractor, images: torch.Tensor, *, batch: int = 64,
                     progress: bool = False, desc: str = "features") -> np.ndarray:
    """Run ``extractor`` over ``images`` in batches; returns float64 ``(N, D)``."""
    out = []
    for i in tqdm(range(0, len(images), batch), desc=desc, disable=not progress, unit="batch", leave=False):
        out.append(_f64(extractor(images[i:i + batch])))
    return np.concatenate(out) if out else np.empty((0, 0))


def inception_extractor(*, device: torch.device | str | None = None) -> tuple[FeatureExtractor, dict]:
    """The Inception-v3 FID network as an extractor, and its provenance (``describe()``)."""
    from medanon.models.features import get_feature_network

    net = get_feature_network("inception", device=device)
    dev = next(net.parameters()).device

    def run(images: torch.Tensor) -> torch.Tensor:
        return net.embed(images.to(dev, torch.float32)).cpu()

    return run, net.describe()


class FrechetDistance:
    """Streaming FD in the torchmetrics style: ``update(images, real=...)``, ``compute()``, ``reset()``.

    >>> fd = FrechetDistance(lambda x: x.flatten(1))
    >>> fd.update(torch.zeros(4, 1, 2, 2).normal_(), real=True)
    >>> fd.update(torch.zeros(4, 1, 2, 2).normal_(), real=False)
    >>> fd.compute() >= 0
    True
    """

    def __init__(self, extractor: FeatureExtractor):
        self.extractor = extractor
        self.reset()

    def reset(self) -> None:
        self.real: list[np.ndarray] = []
        self.fake: list[np.ndarray] = []

    @torch.no_grad()
    def update(self, images: torch.Tensor, *, real: bool) -> None:
        (self.real if real else self.fake).append(_f64(self.extractor(images)))

    def compute(self) -> float:
        if not self.real or not self.fake:
            raise RuntimeError("update() both the real and the evaluated set before compute()")
        return fd_from_features(np.concatenate(self.real), np.concatenate(self.fake))
