"""Intervals of the numbers the report shows beside the headline rates: the two-sided AUC (an attacker free to flip
its score: the AUC's interval folded at one half), the balanced accuracy and F1 of a verification attacker, and the
better of the forward and reverse singling-out attackers, checked against scikit-learn on every resample of the same
patient bootstrap."""

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, f1_score, roc_auc_score

from medanon.evaluate.attacks.auc import delong, two_sided_interval
from medanon.evaluate.attacks.bootstrap import cluster_bootstrap, percentile_ci
from medanon.evaluate.attacks.linkability import verification_rates
from medanon.evaluate.attacks.singling_out import singling_out


def _scores(seed=0, shift=-1.0, n=60):
    rng = np.random.default_rng(seed)
    pos, neg = rng.standard_normal(n) + shift, rng.standard_normal(n)
    return pos, neg, np.repeat(np.arange(n // 3), 3), np.repeat(np.arange(n // 3, 2 * n // 3), 3)


def test_the_two_sided_auc_interval_is_the_auc_interval_folded_at_one_half():
    pos, neg, pg, ng = _scores()
    d = delong(pos, neg)                                        # DeLong: the image of its interval
    assert d["auc"] < 0.35 and d["two_sided_auc"] == pytest.approx(1 - d["auc"])
    assert d["two_sided_ci"] == pytest.approx([1 - d["ci"][1], 1 - d["ci"][0]])
    b = delong(pos, neg, pos_groups=pg, neg_groups=ng, n_resamples=200)   # bootstrap: its interval folded
    assert b["two_sided_ci"] == pytest.approx([1 - b["ci"][1], 1 - b["ci"][0]], abs=1e-9)
    near = delong(*_scores(shift=-0.1)[:2])
    assert near["ci"][0] < 0.5 < near["ci"][1] and near["two_sided_ci"][0] == 0.5
    assert two_sided_interval([float("nan"), 0.7]) == pytest.approx([float("nan")] * 2, nan_ok=True)


def test_a_null_attack_has_a_two_sided_interval_that_reaches_chance():
    """Scores independent of membership, patient ids known: wherever the AUC's interval holds 0.5, so does the
    two-sided one (percentiles of folded resamples never reach 0.5 and read every null as above chance)."""
    held = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        pos, neg = rng.standard_normal(90), rng.standard_normal(90)
        d = delong(pos, neg, pos_groups=np.repeat(np.arange(30), 3), neg_groups=np.repeat(np.arange(30, 60), 3),
                   n_resamples=200)
        if d["ci"][0] <= 0.5 <= d["ci"][1]:
            held += 1
            assert d["two_sided_ci"][0] == 0.5, (seed, d["ci"], d["two_sided_ci"])
    assert held >= 15


def test_the_balanced_accuracy_f1_and_two_sided_auc_intervals_match_sklearn_on_every_resample():
    rng = np.random.default_rng(3)
    n = 300
    groups = rng.integers(0, 12, (n, 2))
    genuine = groups[:, 0] == groups[:, 1]
    scores = np.round(rng.standard_normal(n) + 1.2 * genuine, 1)
    thr, low = 0.9, -0.9
    out = verification_rates(scores, genuine, thr, low_threshold=low, groups=groups, n_resamples=80, seed=5)
    accept = scores >= thr

    def per_resample(w):
        rows = []
        for wi in w:
            keep = wi > 0
            y, a, s = genuine[keep], accept[keep], scores[keep]
            ww = wi[keep].astype(np.float64)
            prevalence = np.where(y, 1 / ww[y].sum(), 1 / ww[~y].sum())        # equal weight to both classes
            auc = roc_auc_score(y, s, sample_weight=ww)
            rows.append([balanced_accuracy_score(y, a, sample_weight=ww),
                         f1_score(y, a, sample_weight=ww * prevalence, zero_division=0), auc])
        return np.asarray(rows).T

    draws, _ = cluster_bootstrap(per_resample, groups, n_resamples=80, seed=5)
    for row, key in zip(draws, ("accuracy", "F1", "AUC"), strict=True):
        assert out[f"{key}_ci"] == pytest.approx(percentile_ci(row, out[key], 0.95), abs=1e-9), key
    assert out["AUC_two_sided_ci"] == pytest.approx(two_sided_interval(out["AUC_ci"]))
    assert out["accuracy"] == pytest.approx(balanced_accuracy_score(genuine, accept))


def test_the_better_singling_out_attacker_has_the_interval_of_its_resampled_maximum():
    rng = np.random.default_rng(1)
    pid = np.repeat(np.arange(20), 2)
    src = rng.standard_normal((20, 8))[pid] + 0.3 * rng.standard_normal((40, 8))
    own = np.arange(40) // 4                                     # a record of 2 patients (4 images) each
    rel = np.stack([src[own == r].mean(0) for r in range(10)])
    out = singling_out(source_emb=src, source_record=own, release_emb=rel, source_patients=pid.astype(str),
                       n_resamples=100, source_clusters=(pid // 2).astype(str))
    assert out["two_sided_top1"] == pytest.approx(1 - out["hidden_rate"])          # the forward attacker wins
    lo, hi = out["two_sided_top1_ci"]
    assert lo <= out["two_sided_top1"] <= hi and hi - lo > 0
    assert out["reverse_top1_ci"][1] < 1 - out["hidden_rate_ci"][1]   # the forward attacker ahead: its interval
    assert [lo, hi] == pytest.approx([1 - out["hidden_rate_ci"][1], 1 - out["hidden_rate_ci"][0]], abs=1e-12)
    copies = singling_out(source_emb=src, source_record=np.arange(40), release_emb=src,
                          source_patients=pid.astype(str), n_resamples=100)
    assert copies["two_sided_top1"] == 1.0 and copies["two_sided_top1_ci"][1] == 1.0
    assert copies["two_sided_top1_ci"][0] < 1.0                   # no spread in the resamples: Wilson over patients


def test_the_attribute_aurocs_and_the_leak_kept_have_the_accuracy_resamples_intervals(monkeypatch):
    import torch
    from sklearn.metrics import accuracy_score

    from medanon.evaluate.attacks import attribute as A
    from medanon.evaluate.attacks.bootstrap import components

    rng = np.random.default_rng(0)
    n = 40                                                     # records of two patients each, sources 2 per record
    truth = (rng.random(n) < 0.5).astype(float)
    src_truth = np.repeat(truth, 2)
    src_p = np.clip(0.5 + 0.35 * (2 * src_truth - 1) + 0.3 * rng.standard_normal(2 * n), 0.01, 0.99)
    rel_p = np.clip(0.5 + 0.15 * (2 * truth - 1) + 0.3 * rng.standard_normal(n), 0.01, 0.99)
    # the attacker's probability is read off the image's first pixel (no network: the statistics are under test)
    monkeypatch.setattr(A, "scores", lambda model, images, size: images[:, 0, 0, 0].double().numpy())
    images = torch.from_numpy(rel_p).float()[:, None, None, None].expand(n, 1, 4, 4)
    record_patients = [frozenset({f"p{i}", f"p{(i + 1) % n}"}) if i % 4 == 0 else frozenset({f"p{i}"})
                       for i in range(n)]
    out = A.attribute_inference(attacker=None, image_size=4, release_images=images, release_truth=truth,
                                heldout_images=images, heldout_truth=truth, heldout_scores=rel_p,
                                source_images=images, source_scores=src_p,
                                record_sources=[[2 * i, 2 * i + 1] for i in range(n)],
                                record_patients=record_patients, n_resamples=120, seed=2)
    units = components(record_patients)[0]
    orig_p = src_p.reshape(n, 2).mean(1)
    maj = float(np.bincount(truth.astype(int)).argmax())

    def per_resample(w):
        rows = []
        for wi in w.astype(np.float64):
            acc = [accuracy_score(truth, p >= 0.5, sample_weight=wi) for p in (rel_p, orig_p)]
            base = accuracy_score(truth, np.full(n, maj), sample_weight=wi)
            rows.append([roc_auc_score(truth, rel_p, sample_weight=wi), roc_auc_score(truth, orig_p, sample_weight=wi),
                         (acc[0] - base) / (acc[1] - base) if acc[1] > base else np.nan])
        return np.asarray(rows).T

    draws, _ = cluster_bootstrap(per_resample, units, n_resamples=120, seed=2)
    assert out["leak_kept"] == out["leak_kept"]                # defined: the Original beats the baseline
    from medanon.evaluate.attacks.auc import widened_at_edges

    classes = [len(np.unique(units[truth == c])) for c in (1, 0)]     # an AUROC at 0 or 1: widened (auc.py)
    for row, key in zip(draws, ("auroc", "original_auroc", "leak_kept"), strict=True):
        want = percentile_ci(row, out[key], 0.95)
        if key != "leak_kept":
            want = widened_at_edges(want, out[key], *classes)[0]
        assert out[f"{key}_ci"] == pytest.approx(want, abs=1e-9), key
