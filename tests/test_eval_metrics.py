"""Evaluation metrics against references: scikit-learn (κ, F1, AUROC, AP), scipy (FID), closed forms."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import linalg
from sklearn import metrics as skm
from sklearn.metrics.pairwise import polynomial_kernel

from medanon.evaluate import fidelity as F
from medanon.evaluate import metrics as M
from medanon.evaluate import utility as U

labels5 = st.lists(st.integers(0, 4), min_size=2, max_size=60)


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::sklearn.exceptions.UndefinedMetricWarning")
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_kappa_and_f1_match_sklearn(data):
    t = data.draw(labels5)
    p = data.draw(st.lists(st.integers(0, 4), min_size=len(t), max_size=len(t)))
    ref = skm.cohen_kappa_score(t, p, weights="quadratic")
    ours = M.quadratic_kappa(t, p)
    if len(set(t)) < 2:                     # one true class: sklearn's 0 for every prediction, undefined here
        assert math.isnan(ours) and (math.isnan(ref) or ref == 0)
    else:
        assert (math.isnan(ours) and math.isnan(ref)) or ours == pytest.approx(ref, abs=1e-12)
    assert M.f1(t, p, average="macro") == pytest.approx(skm.f1_score(t, p, average="macro", zero_division=0))
    assert M.f1(t, p, average="weighted") == pytest.approx(skm.f1_score(t, p, average="weighted", zero_division=0))
    tb, pb = [int(v > 0) for v in t], [int(v > 0) for v in p]
    assert M.f1(tb, pb, average="binary") == pytest.approx(skm.f1_score(tb, pb, zero_division=0))
    assert M.accuracy(t, p) == pytest.approx(skm.accuracy_score(t, p))


def test_kappa_over_fixed_labels_matches_sklearn():
    t, p = [0, 0, 2, 2, 4], [0, 1, 2, 4, 4]
    assert M.quadratic_kappa(t, p, labels=range(5)) == pytest.approx(
        skm.cohen_kappa_score(t, p, weights="quadratic", labels=list(range(5))))
    assert M.quadratic_kappa([0, 1, 2], [0, 1, 2]) == 1.0


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_auroc_and_ap_match_sklearn(data):
    n = data.draw(st.integers(2, 50))
    y = data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    s = data.draw(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.7, 0.9, 1.0]), min_size=n, max_size=n))  # ties
    if 0 < sum(y) < n:
        assert M.roc_auc(y, s) == pytest.approx(skm.roc_auc_score(y, s))
    if sum(y) > 0:
        assert M.average_precision(y, s) == pytest.approx(skm.average_precision_score(y, s))


def test_a_nan_score_gives_no_auroc_or_ap_in_every_variant():
    """sklearn refuses NaN scores; medanon's rankings give NaN, never a number that ranked the NaN somewhere."""
    y, s = [0, 1, 0, 1], [0.1, np.nan, 0.3, 0.9]
    with pytest.raises(ValueError):
        skm.average_precision_score(y, s)
    w = [[1, 1, 1, 1], [2, 0, 1, 1]]
    for one, rows in ((M.roc_auc, M.roc_auc_rows), (M.average_precision, M.average_precision_rows)):
        assert math.isnan(one(y, s))
        assert np.isnan(rows(y, s)).all() and np.isnan(rows(y, s, weights=w)).all()
        both = rows([y, y], [[0.1, 0.2, 0.3, 0.9], s])
        assert both[0] == pytest.approx(one(y, [0.1, 0.2, 0.3, 0.9])) and np.isnan(both[1])


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_row_wise_metrics_equal_the_one_sample_functions_on_every_row(data):
    """The bootstrap's batched twins: row i of each ``*_rows`` is the 1-D function (tested against sklearn above)
    on row i, including rows of one class only (NaN AUROC/AP, kappa of a constant) and tied scores."""
    b, n = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 30))
    draw = lambda values: np.array(data.draw(st.lists(values, min_size=b * n, max_size=b * n))).reshape(b, n)  # noqa: E731
    t, p = draw(st.integers(0, 4)), draw(st.integers(0, 5))                # 5: a prediction outside the labels
    s = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    t[0] = t[0, 0]                                                         # a row of one class
    tb = (t > 1).astype(int)
    same = lambda rows, one: np.testing.assert_allclose(rows, [one(i) for i in range(b)], rtol=0, atol=1e-12)  # noqa: E731
    same(M.accuracy_rows(t, p), lambda i: M.accuracy(t[i], p[i]))
    same(M.quadratic_kappa_rows(t, p, labels=range(5)), lambda i: M.quadratic_kappa(t[i], p[i], labels=range(5)))
    same(M.f1_rows(t, p, average="macro", labels=[0, 2, 4]),
         lambda i: M.f1(t[i], p[i], average="macro", labels=[0, 2, 4]))
    same(M.f1_rows(tb, p, average="binary"), lambda i: M.f1(tb[i], p[i], average="binary"))
    same(M.roc_auc_rows(tb, s), lambda i: M.roc_auc(tb[i], s[i]))
    same(M.average_precision_rows(tb, s), lambda i: M.average_precision(tb[i], s[i]))
    np.testing.assert_array_equal(M.confusion_rows(t, p, [4, 0, 2]),
                                  [M.confusion(t[i], p[i], [4, 0, 2]) for i in range(b)])


def test_paired_bootstrap_equals_scoring_each_resample_alone():
    """The batched bootstrap is scipy's percentile bootstrap of the seed-averaged metrics, resample by resample."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(0)
    task, n = U.KNOWN_TASKS["grade"], 40
    y = rng.integers(0, 5, n)
    rel, base = ([rng.dirichlet(np.ones(5), n) for _ in range(2)] for _ in range(2))
    out = U.paired_intervals(task, y, rel, base, n_resamples=60, seed=3)

    def kappa_diff(idx):
        mean = lambda ps: np.nanmean([U.score(task, y[idx], p[idx])["kappa"] for p in ps])  # noqa: E731
        return mean(rel) - mean(base)

    ref = bootstrap((np.arange(n),), kappa_diff, vectorized=False, paired=True, n_resamples=60,
                    method="percentile", random_state=3).confidence_interval
    assert out["kappa"]["difference"]["ci"] == pytest.approx([ref.low, ref.high], abs=1e-12)
    assert out["kappa"]["difference"]["value"] == pytest.approx(kappa_diff(np.arange(n)), abs=1e-12)


def test_utility_share_counts_from_chance_so_a_constant_release_keeps_nothing():
    """The share a release keeps is (release - chance) / (real - chance): a constant score has AUROC 0.5 and keeps 0
    of the AUROC (it read 0.5 / real, e.g. 0.66 of the real images' 0.756); κ counts from 0, AP from the prevalence,
    a macro-F1 from always saying the majority (a floor of 0 read that as keeping a third of the real images' gain).
    Every resample's share is the same formula (checked on the interval against scipy's bootstrap of it)."""
    from scipy.stats import bootstrap
    from sklearn.metrics import average_precision_score, roc_auc_score

    rng = np.random.default_rng(1)
    task, n = U.KNOWN_TASKS["pneumonia"], 60
    y = np.tile([0, 1], n // 2)
    real = np.clip(0.5 + 0.3 * (y - 0.5) + rng.normal(0, 0.25, n), 0, 1)
    two = lambda p1: np.stack([1 - p1, p1], 1)  # noqa: E731
    out = U.paired_intervals(task, y, [two(np.full(n, 0.3))], [two(real)], n_resamples=80, seed=2)
    assert out["auroc"]["release"]["value"] == 0.5 and out["auroc"]["ratio"]["value"] == 0.0
    assert out["auroc"]["ratio"]["ci"] == [0.0, 0.0]
    assert out["ap"]["chance"] == average_precision_score(y, np.full(n, 0.3)) == 0.5
    assert out["ap"]["ratio"]["value"] == 0.0
    three = U.Task("view", 3, "multiclass")
    y3 = np.repeat([0, 1, 2], [36, 18, 6])
    good = np.eye(3)[y3] * 0.7 + 0.1                          # right on every image
    majority = np.tile([0.8, 0.1, 0.1], (60, 1))              # always the majority: macro-F1 0.25
    out = U.paired_intervals(three, y3, [majority], [good], n_resamples=40, seed=2)
    assert out["f1_macro"]["chance"] == pytest.approx(0.25) and out["f1_macro"]["ratio"]["value"] == pytest.approx(0)
    assert out["acc"]["chance"] == pytest.approx(0.6) and out["acc"]["ratio"]["value"] == pytest.approx(0)
    half = np.where(rng.random(n) < 0.5, real, 0.5)          # part of the real signal
    out = U.paired_intervals(task, y, [two(half)], [two(real)], n_resamples=80, seed=2)
    share = lambda idx: (roc_auc_score(y[idx], half[idx]) - 0.5) / (roc_auc_score(y[idx], real[idx]) - 0.5)  # noqa: E731
    assert out["auroc"]["ratio"]["value"] == pytest.approx(share(np.arange(n)))
    ref = bootstrap((np.arange(n),), share, vectorized=False, paired=True, n_resamples=80, method="percentile",
                    random_state=2).confidence_interval
    assert out["auroc"]["ratio"]["ci"] == pytest.approx([ref.low, ref.high], abs=1e-9)


def test_grade_task_scores_derived_tasks():
    y = np.array([0, 1, 2, 3, 4, 0])
    p = np.eye(5)[[0, 1, 2, 3, 4, 2]]                  # the last image (grade 0) called moderate
    s = U.score(U.KNOWN_TASKS["grade"], y, p)
    assert s["accuracy"] == pytest.approx(5 / 6)
    assert s["binary_accuracy"] == pytest.approx(5 / 6)              # 0 vs >0: one mistake
    y3, p3 = [0, 1, 1, 1, 2, 0], [0, 1, 1, 1, 2, 1]
    assert s["f1_3class"] == pytest.approx(skm.f1_score(y3, p3, average="macro"))
    ref = skm.cohen_kappa_score(y, p.argmax(1), weights="quadratic", labels=list(range(5)))
    assert s["kappa"] == pytest.approx(ref)


# --------------------------------------------------------------------------------------------- fidelity


def test_fid_known_answer_on_gaussians():
    """Diagonal Gaussians: FD = |mu1 - mu2|^2 + sum (sqrt(v1) - sqrt(v2))^2, estimated from samples."""
    rng = np.random.default_rng(0)
    d, n = 8, 20000
    mu1, mu2 = np.zeros(d), np.linspace(0, 1, d)
    v1, v2 = np.ones(d), np.linspace(0.5, 2.0, d)
    a = mu1 + rng.standard_normal((n, d)) * np.sqrt(v1)
    b = mu2 + rng.standard_normal((n, d)) * np.sqrt(v2)
    truth = float(((mu1 - mu2) ** 2).sum() + ((np.sqrt(v1) - np.sqrt(v2)) ** 2).sum())
    assert F.fd_from_features(a, b) == pytest.approx(truth, rel=0.03)
    assert F.frechet_distance(mu1, np.diag(v1), mu2, np.diag(v2)) == pytest.approx(truth, rel=1e-9)


@pytest.mark.parametrize("n1,n2,d", [(30, 40, 64), (200, 150, 16)])      # sample space and feature space
def test_fd_from_features_equals_scipy_sqrtm(n1, n2, d):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n1, d)) @ rng.standard_normal((d, d))
    b = rng.standard_normal((n2, d)) + 0.3
    mu1, s1 = a.mean(0), np.cov(a, rowvar=False)
    mu2, s2 = b.mean(0), np.cov(b, rowvar=False)
    ref = float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(linalg.sqrtm(s1 @ s2).real))
    assert F.fd_from_features(a, b) == pytest.approx(ref, rel=1e-6, abs=1e-6)
    assert F.frechet_distance(*F.feature_stats(a), *F.feature_stats(b)) == pytest.approx(ref, rel=1e-6, abs=1e-6)


def test_fd_zero_for_identical_sets_and_interval_contains_value():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((100, 10))
    assert F.fd_from_features(a, a) == pytest.approx(0.0, abs=1e-8)
    iv = F.bootstrap_fd(a, rng.standard_normal((100, 10)) + 1.0, n_boot=30, seed=0)
    assert iv.low <= iv.value <= iv.high and iv.n == (100, 100)
    assert 8.0 < iv.value < 13.0                                     # |mu diff|^2 = 10
    same = F.bootstrap_fd(a, a, n_boot=0)                             # no resamples: no interval, not [v, v]
    assert same.value >= 0.0 and np.isnan(same.low) and np.isnan(same.high) and same.resamples == 0


def test_kid_matches_sklearn_polynomial_kernel():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((40, 6)), rng.standard_normal((40, 6)) + 0.5
    kxx = polynomial_kernel(a, a, degree=3, gamma=1 / 6, coef0=1)
    kyy = polynomial_kernel(b, b, degree=3, gamma=1 / 6, coef0=1)
    kxy = polynomial_kernel(a, b, degree=3, gamma=1 / 6, coef0=1)
    m = 40
    ref = ((kxx.sum() - np.trace(kxx)) + (kyy.sum() - np.trace(kyy))) / (m * (m - 1)) - 2 * kxy.mean()
    mean, sd = F.kid_from_features(a, b, subsets=3, subset_size=40)  # subsets = whole sets: all equal
    assert mean == pytest.approx(ref) and sd == pytest.approx(0.0, abs=1e-12)
    same, _ = F.kid_from_features(a, rng.standard_normal((40, 6)), subsets=20, subset_size=20)
    assert abs(same) < mean


def test_kid_of_a_resample_is_the_unbiased_mmd_of_its_rows_without_a_row_paired_with_its_copies():
    """KID's interval weights the kernel matrices computed once: each resample equals the MMD² written out on the
    resampled rows with sklearn's kernel, over the pairs of rows from different source rows; with every weight 1 it
    is KID of the whole sets."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((12, 5)), rng.standard_normal((12, 5)) + 0.3
    assert F.kid_weighted(a, b, np.ones(12), np.ones(12))[0] == pytest.approx(
        F.kid_from_features(a, b, subsets=1, subset_size=12)[0])
    b = b[:9]
    for _ in range(5):
        ia, ib = rng.integers(0, 12, 12), rng.integers(0, 9, 9)
        wa, wb = np.bincount(ia, minlength=12), np.bincount(ib, minlength=9)
        assert F.kid_weighted(a, b, wa[None], wb[None])[0] == pytest.approx(_mmd_rows(a, b, ia, ib))
    groups = np.arange(60) // 3                          # patients of three images each: resampled whole
    x, y = rng.standard_normal((60, 5)), rng.standard_normal((60, 5)) + 0.4
    est = F.kid_from_features(x, y, subsets=1, subset_size=60)[0]
    by_patient = F.kid_interval(x, y, est, groups1=groups, groups2=groups)
    assert by_patient["ci"][0] < est < by_patient["ci"][1] and by_patient["resampled"] == "patients"
    twin = rng.standard_normal((60, 5))                   # another sample of x's distribution: 0 is inside
    same = F.kid_interval(x, twin, F.kid_from_features(x, twin, subsets=1, subset_size=60)[0], groups1=groups)
    assert same["ci"][0] < 0 < same["ci"][1] and same["resampled"].startswith("patients (reference)")


def _mmd_rows(a, b, ia, ib) -> float:
    """Unbiased MMD² of the rows ``a[ia]`` and ``b[ib]``, a pair counted only when its rows have different sources."""
    def mean_pairs(k, i, j, distinct):
        keep = (i[:, None] != j[None, :]) if distinct else np.ones((len(i), len(j)), bool)
        return float(k[np.ix_(i, j)][keep].mean())

    kaa, kbb, kab = (polynomial_kernel(x, y, degree=3, gamma=1 / 5, coef0=1) for x, y in ((a, a), (b, b), (a, b)))
    return mean_pairs(kaa, ia, ia, True) + mean_pairs(kbb, ib, ib, True) - 2 * mean_pairs(kab, ia, ib, False)


def test_injectable_extractor_random_projection():
    """Any callable images -> (N, D) works; a random projection separates shifted image sets."""
    g = torch.Generator().manual_seed(0)
    proj = torch.randn(3 * 8 * 8, 16, generator=g)
    ext = lambda x: x.flatten(1) @ proj                                # noqa: E731
    real = torch.rand(50, 3, 8, 8, generator=g) * 2 - 1
    fd = F.FrechetDistance(ext)
    fd.update(real, real=True)
    fd.update((torch.rand(50, 3, 8, 8, generator=g) * 2 - 1).clamp(-1, 1), real=False)
    near = fd.compute()
    fd.reset()
    fd.update(real, real=True)
    fd.update((real * 0.2 + 0.7), real=False)
    assert fd.compute() > 5 * near
    assert F.extract_features(ext, real, batch=7).shape == (50, 16)


def test_confusion_matches_sklearn_for_any_label_order():
    from sklearn.metrics import confusion_matrix

    from medanon.evaluate.metrics import confusion

    rng = np.random.default_rng(0)
    for labels in ([0, 1, 2, 3, 4], [4, 2, 0], [1]):
        t, p = rng.integers(0, 6, 100), rng.integers(0, 6, 100)
        keep = np.isin(t, labels) & np.isin(p, labels)
        assert (confusion(t, p, labels) == confusion_matrix(t[keep], p[keep], labels=labels)).all()


def test_fd_intervals_resample_patients_when_they_are_known():
    """Images of one patient are not independent: with each row's patient the FD bootstrap draws patients, and on
    data with strong patient effects its interval is wider than the image bootstrap's."""
    import numpy as np

    from medanon.evaluate.fidelity import bootstrap_fd

    def patients(n, seed):
        g = np.random.default_rng(seed)
        centre = g.normal(size=(n, 4))
        return np.repeat(centre, 5, 0) + 0.1 * g.normal(size=(5 * n, 4)), np.repeat(np.arange(n), 5)

    ref, g_ref = patients(20, 1)
    ev, g_ev = patients(20, 2)
    by_image = bootstrap_fd(ref, ev, n_boot=200, seed=0)
    by_patient = bootstrap_fd(ref, ev, n_boot=200, seed=0, groups_ref=g_ref, groups_eval=g_ev)
    assert by_image.to_dict()["resampled"] == "images" and by_patient.to_dict()["resampled"] == "patients"
    assert by_patient.value == by_image.value
    assert by_patient.high - by_patient.low > 1.5 * (by_image.high - by_image.low)


def test_resamples_without_a_ratio_are_not_counted_as_resamples_without_the_metric():
    """A baseline whose accuracy is 0 in some resamples leaves the ratio undefined there, not the accuracy."""
    task = U.KNOWN_TASKS["pneumonia"]
    y = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    right, wrong = np.eye(2)[y] * 0.8 + 0.1, np.eye(2)[1 - y] * 0.8 + 0.1
    wrong[:2] = right[:2]                                       # the baseline is right on patient 0's images only
    out = U.paired_intervals(task, y, [right], [wrong], n_resamples=200, groups=np.repeat(np.arange(4), 2))
    acc = out["binary_acc"]
    assert "undefined_resamples" not in acc and acc["ratio_undefined_resamples"] > 0


def test_labels_that_are_not_classes_are_refused_not_truncated():
    """accuracy([0.9], [0]) read 1.0 (0.9 truncated to class 0); roc_auc of {-1, 1} or {1, 2} truth read NaN where
    scikit-learn gives the AUC (every label cast to positive). Whole-number floats are classes as before."""
    with pytest.raises(ValueError, match="whole numbers"):
        M.accuracy([0.9], [0])
    for truth in ([-1, 1, -1, 1], [1, 2, 1, 2]):
        with pytest.raises(ValueError, match="0 or 1"):
            M.roc_auc(truth, [0.1, 0.9, 0.2, 0.8])
        with pytest.raises(ValueError, match="0 or 1"):
            M.average_precision(truth, [0.1, 0.9, 0.2, 0.8])
    assert M.accuracy(np.array([1.0, 0.0]), [1, 1]) == 0.5
    assert M.roc_auc([0.0, 1.0, 0.0, 1.0], [0.1, 0.9, 0.2, 0.8]) == skm.roc_auc_score([0, 1, 0, 1],
                                                                                      [0.1, 0.9, 0.2, 0.8])


def test_fd_gives_no_interval_from_one_cluster_and_names_nan_features():
    """Every image in one patient cluster: each resample was the set itself, and the interval [6.31, 6.31] posed as
    certainty; NaN features gave numpy's "Eigenvalues did not converge"."""
    from medanon.evaluate.fidelity import bootstrap_fd, fd_from_features

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(12, 4)), rng.normal(size=(12, 4)) + 1
    one = bootstrap_fd(a, b, n_boot=20, groups_ref=[0] * 12, groups_eval=[0] * 12)
    assert np.isnan(one.low) and np.isnan(one.high) and one.resamples == 0 and one.value > 0
    two = bootstrap_fd(a, b, n_boot=20, groups_ref=[0] * 6 + [1] * 6, groups_eval=[0] * 6 + [1] * 6)
    assert two.low < two.value < two.high
    a[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        fd_from_features(a, b)
