"""The pair bootstrap from clusters × clusters count matrices (medanon.evaluate.attacks.pair_bootstrap) gives the same
draws as weighting every pair in every resample: records standing for two patients (pairs within one cluster),
tied scores, the reverse attacker."""

import json

import numpy as np
import pytest

from medanon.evaluate.attacks import linkability as L
from medanon.evaluate.attacks.bootstrap import cluster_bootstrap
from medanon.evaluate.attacks.pair_bootstrap import verification_draws


def _world(seed=0):
    rng = np.random.default_rng(seed)
    pid = np.repeat(np.arange(15), 3)
    src = np.round(rng.standard_normal((15, 6))[pid] + 0.4 * rng.standard_normal((45, 6)), 1)   # rounded: ties
    members = [(3 * b + i, 3 * b + i + 1) for b in range(5) for i in range(2)]   # two records share a patient
    records = [frozenset(map(str, m)) for m in members]
    rel = np.stack([src[np.isin(pid, m)].mean(0) for m in members])
    own = [2 * (p // 3) + (p % 3 == 2) for p in pid]
    hp = np.repeat(np.arange(12), 2)
    held = np.round(rng.standard_normal((12, 6))[hp] + 0.4 * rng.standard_normal((24, 6)), 1)
    return dict(control_emb=held, control_patients=hp.astype(str), release_emb=rel, record_patients=records,
                source_emb=src, source_patients=pid.astype(str), source_record=own, target_far=0.05)


@pytest.mark.parametrize("seed", [0, 1])
def test_count_matrices_give_the_same_linkability_as_weighting_every_pair(monkeypatch, seed):
    kw = _world(seed)
    fast = L.linkability(**kw)
    monkeypatch.setattr(L, "GATHER", True)
    slow = L.linkability(**kw)
    assert fast["inner"] is not None and fast["outer"] is not None
    for part in ("control", "inner", "outer"):
        for key in ("TAR_ci", "FAR_ci", "AUC_ci", "reverse_TAR_ci", "AUC_p_value", "patients"):
            assert fast[part][key] == pytest.approx(slow[part][key], abs=1e-12), (part, key)
    assert json.dumps(fast, sort_keys=True, default=float) == json.dumps(slow, sort_keys=True, default=float)


def test_the_draws_match_the_gathering_bootstrap_and_refuse_a_genuine_pair_across_clusters():
    rng = np.random.default_rng(2)
    n = 400
    groups = rng.integers(0, 9, (n, 2))
    genuine = groups[:, 0] == groups[:, 1]
    scores = np.round(rng.standard_normal(n) + genuine, 1)
    acc, rev = scores >= 0.8, scores <= -0.8
    draws, g = verification_draws(scores, genuine, acc, rev, groups, n_resamples=50, seed=3)
    ref, g2 = cluster_bootstrap(L._gathered_stat(scores, genuine, acc, rev), L._sorted(scores, genuine, groups),
                                n_resamples=50, seed=3)
    assert g == g2 == 9 and np.allclose(draws, ref, atol=1e-12, equal_nan=True)
    genuine[np.flatnonzero(~genuine)[0]] = True                                      # a genuine pair of two clusters
    assert verification_draws(scores, genuine, acc, rev, groups, n_resamples=50) is None


def test_delong_over_pairs_gives_the_gathering_bootstraps_interval():
    from medanon.evaluate.attacks.auc import delong
    from medanon.evaluate.attacks.bootstrap import cluster_summary, weighted_auc

    rng = np.random.default_rng(4)
    groups = rng.integers(0, 8, (600, 2))
    genuine = groups[:, 0] == groups[:, 1]
    scores = np.round(rng.standard_normal(600) + genuine, 1)
    d = delong(scores[genuine], scores[~genuine], pos_groups=groups[genuine], neg_groups=groups[~genuine], seed=5)
    pos = np.r_[np.ones(genuine.sum(), bool), np.zeros((~genuine).sum(), bool)]
    ref = cluster_summary(weighted_auc(np.r_[scores[genuine], scores[~genuine]], pos),
                          np.r_[groups[genuine], groups[~genuine]], d["auc"], seed=5)
    assert d["ci"] == pytest.approx(ref["ci"], abs=1e-12) and d["patients"] == 8
