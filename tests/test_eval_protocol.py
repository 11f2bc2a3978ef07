"""Issue 15's protocol, item by item, on small synthetic inputs (fast): exact statistics against scipy /
sklearn, calibrated linkability, two-sided attacks, controls vs baselines, utility intervals, KID's error bar,
near-copy screening."""

import numpy as np
import pytest
import torch
from scipy.stats import hypergeom
from sklearn.metrics import f1_score, roc_auc_score

from medanon.evaluate import utility as util
from medanon.evaluate.attacks import linkability as L
from medanon.evaluate.attacks.auc import delong
from medanon.evaluate.attacks.nearest import nearest_record_membership
from medanon.evaluate.attacks.singling_out import singling_out
from medanon.evaluate.attacks.stats import exact_interval, topk_null, upper_tail
from medanon.evaluate.fidelity import kid_with_error
from medanon.evaluate.metrics import f1
from medanon.evaluate.nearcopy import screen


def test_delong_matches_sklearn_and_a_bootstrap():
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1, 1, 60), rng.normal(0, 1, 80)
    d = delong(pos, neg)
    y = np.r_[np.ones(60), np.zeros(80)]
    assert d["auc"] == pytest.approx(roc_auc_score(y, np.r_[pos, neg]), abs=1e-12)
    boots = [roc_auc_score(y[i], np.r_[pos, neg][i]) for i in
             (np.r_[rng.integers(0, 60, 60), 60 + rng.integers(0, 80, 80)] for _ in range(400))]
    assert d["se"] == pytest.approx(np.std(boots), rel=0.2)                 # DeLong's variance ~ bootstrap's
    flipped = delong(-pos, -neg)                                            # item 4: two-sided
    assert flipped["auc"] == pytest.approx(1 - d["auc"]) and flipped["two_sided_auc"] == pytest.approx(d["auc"])


def test_patient_auc_intervals_keep_their_width_at_1_and_few_patients_prove_nothing():
    """A perfectly separating attack on 10 patients a side got the interval [1, 1] (every patient resample separates
    too), and 2 patients a side a p-value of 0.006; the interval now keeps the score interval's width with one unit
    per patient, and the p-value is at least the smallest an exact permutation test over patients can give."""
    from medanon.evaluate.attacks.auc import newcombe_interval

    rng = np.random.default_rng(1)
    pos = np.repeat(rng.normal(6, 1, 10), 4) + 0.1 * rng.standard_normal(40)
    neg = np.repeat(rng.normal(0, 1, 10), 4) + 0.1 * rng.standard_normal(40)
    gp, gn = np.repeat([f"p{i}" for i in range(10)], 4), np.repeat([f"n{i}" for i in range(10)], 4)
    d = delong(pos, neg, pos_groups=gp, neg_groups=gn)
    assert d["auc"] == 1.0 and d["ci"][0] == pytest.approx(newcombe_interval(1.0, 10, 10)[0]) and d["ci"][0] < 0.85
    assert "widened to the score interval" in d["interval"]
    few = delong([.9, .8, .95, .85], [.1, .2, .15, .3], pos_groups=["a", "a", "b", "b"],
                 neg_groups=["c", "c", "d", "d"])
    assert few["p_value"] >= 2 / 6 and few["ci"][0] < 0.6          # 2 + 2 patients: at best 1 of C(4, 2) = 6 orders
    mid = delong(rng.normal(0.5, 1, 40), rng.normal(0, 1, 40), pos_groups=gp, neg_groups=gn)
    assert "widened" not in mid["interval"]                          # away from 0 and 1: the bootstrap's as before
    people = [f"q{i}" for i in range(6)]                             # pairs: both sides are the same 6 people
    genuine = np.array([[p, p] for p in people])
    impostor = np.array([[a, b] for a in people for b in people if a < b])
    pairs = delong(np.full(6, 0.9), np.full(len(impostor), 0.1), pos_groups=genuine, neg_groups=impostor)
    assert "3 and 3 patients" in pairs["p_value_test"] and pairs["p_value"] >= 2 / 20


def test_topk_null_is_exact_and_calibrated_at_k2():
    """Item 8: the exact null of top-K hits (convolved hypergeometrics) against simulation; under the null the
    p-value rejects at the nominal rate and the exact interval covers chance (the bootstrap did not)."""
    ks, pool = [2] * 12, 40
    pmf, mean = topk_null(ks, pool)
    assert mean == pytest.approx(12 * 2 * 2 / 40) and pmf.sum() == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    sims = hypergeom(pool, 2, 2).rvs(size=(20000, 12), random_state=rng).sum(1)
    assert np.mean(sims >= 3) == pytest.approx(upper_tail(pmf, 3), abs=0.01)
    p = np.array([upper_tail(pmf, h) for h in sims[:2000]])
    assert np.mean(p <= 0.05) <= 0.05
    cover = np.mean([lo <= mean / 24 <= hi for lo, hi in (exact_interval(h, 24) for h in sims[:500])])
    assert cover >= 0.95


def test_linkability_calibrates_on_all_impostor_pairs_and_warns():
    """Item 7: the threshold comes from every impostor pair of the control; realised FAR with its interval;
    a warning below 10 / FAR pairs. Item 4: the reverse attacker finds a release pushed to negative similarity."""
    rng = np.random.default_rng(0)
    d = 16
    pid = np.repeat(np.arange(30), 2)
    centres = rng.standard_normal((30, d))
    emb = centres[pid] + 0.2 * rng.standard_normal((60, d))
    held = rng.standard_normal((20, d))[np.repeat(np.arange(20), 2)] + 0.2 * rng.standard_normal((40, d))
    hp = np.repeat(np.arange(20), 2).astype(str)
    recs = [frozenset([str(p)]) for p in pid]
    kw = dict(control_emb=held, control_patients=hp, record_patients=recs, source_emb=emb,
              source_patients=pid.astype(str), source_record=list(range(60)), target_far=0.01)
    out = L.linkability(release_emb=-emb, **kw)                           # GMIA-like: away from the sources
    cal = out["calibration"]
    assert cal["impostor_pairs"] == 40 * 39 // 2 - 20 and cal["accepted"] <= 0.01 * cal["impostor_pairs"]
    assert cal["realised_far_ci"][0] <= cal["realised_far"] <= cal["realised_far_ci"][1]
    assert "fewer than 10 / FAR" in out["warning"]                         # 760 < 1000
    o = out["outer"]
    assert o["AUC"] < 0.1 and o["AUC_two_sided"] > 0.9 and o["TAR"] == 0.0 and o["reverse_TAR"] > 0.5
    assert o["impostor_pairs"] == 60 * 60 - 120                            # all pairs, not a balanced sample


def test_singling_out_per_individual_reverse_and_both_cloakings():
    """Item 10 / item 4 on hand-made embeddings."""
    src = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0]])
    pats = ["a", "a", "b", "c"]
    rel = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.05]])                 # record 2 stands for c, looks like a
    out = singling_out(source_emb=src, source_record=[0, 0, 1, 2], release_emb=rel, source_patients=pats)
    # a's second image prefers record 2, c's image too: 2 of 4 images hidden, but a is exposed by its first
    assert out["hidden_rate"] == pytest.approx(2 / 4) and out["hidden_rate_individual"] == pytest.approx(1 / 3)
    assert out["reverse_top1"] == 0.0
    flipped = singling_out(source_emb=src, source_record=[0, 0, 1, 2], release_emb=-src[[0, 2, 3]],
                           source_patients=pats)                          # each record pushed away from its source
    assert flipped["hidden_rate"] == 1.0 and flipped["reverse_top1"] >= 0.75 and flipped["two_sided_top1"] >= 0.75
    assert out["risk"]["against"] == "baseline" and out["risk"]["baseline"]["rate"] == pytest.approx(1 / 3)
    assert out["LC_N_R_x"] == 0.0 and out["LC_N_R"] == pytest.approx(0.0)
    for k in ("LC_N_R", "LC_N_R_x", "LC_N_A"):                            # every median with its interval
        assert out[f"{k}_ci"][0] <= out[k] <= out[f"{k}_ci"][1]


def test_nearest_record_control_copy_vs_unrelated():
    """Item 5: the same attack on held-out people is the control; a copy release is at maximal risk, a release
    of other people near zero."""
    rng = np.random.default_rng(1)
    members, controls, calib = (rng.standard_normal((n, 32)) for n in (80, 60, 60))
    copy = nearest_record_membership(member_emb=members, control_emb=controls, release_emb=members, calib_emb=calib)
    other = nearest_record_membership(member_emb=members, control_emb=controls,
                                      release_emb=rng.standard_normal((80, 32)), calib_emb=calib)
    assert copy["auc"] == 1.0 and copy["risk"]["residual_risk"]["risk"] > 0.8 and copy["risk"]["against"] == "control"
    assert copy["risk"]["control"]["rate"] < 0.25
    assert other["risk"]["residual_risk"]["ci"][0] == 0.0 and 0.3 < other["auc"] < 0.7


def test_utility_paired_bootstrap_f1_labels_and_nan_seeds():
    """Item 9: paired bootstrap intervals over test images, F1 with a fixed class set (sklearn's labels=),
    NaN seeds counted."""
    y3, p3 = np.array([0, 0, 1, 1, 1]), np.array([0, 1, 1, 1, 0])
    assert f1(y3, p3, average="macro", labels=[0, 1, 2]) == pytest.approx(
        f1_score(y3, p3, average="macro", labels=[0, 1, 2], zero_division=0))
    task = util.KNOWN_TASKS["pneumonia"]
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 80)
    good = np.clip(y + rng.normal(0, 0.4, 80), 0, 1)
    bad = rng.uniform(0, 1, 80)
    probs = lambda s: np.stack([1 - s, s], 1)                             # noqa: E731
    out = util.paired_intervals(task, y, [probs(good)], [probs(bad)], n_resamples=200)
    auc = out["auroc"]
    assert auc["release"]["ci"][0] <= auc["release"]["value"] <= auc["release"]["ci"][1] and auc["n"] == 80
    assert auc["difference"]["ci"][0] > 0                                  # a real difference, measured
    same = util.paired_intervals(task, y, [probs(good)], [probs(good)], n_resamples=50)
    assert same["auroc"]["difference"]["ci"] == [0.0, 0.0]                 # paired: identical models differ by 0
    s = util.summarize([{"m": 0.5}, {"m": float("nan")}])
    assert s["m"]["nan_seeds"] == 1 and s["m"]["mean"] == 0.5 and s["m"]["n_seeds"] == 2


def test_kid_has_an_error_bar_when_a_set_fits_in_one_subset():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((20, 8)), rng.standard_normal((20, 8)) + 0.5
    k = kid_with_error(a, b, subsets=5, subset_size=100, n_boot=10)
    assert k["sd"] > 0 and "bootstrap" in k["error"] and k["subset_size"] == 20


def test_near_copy_of_a_single_source_in_a_k2_record():
    """The issue's example: a k-Same-Pixel record over near-duplicate images of two 'patients' releases the
    original photo; the screen flags it, and ordinary averages of different people are not copies."""
    g = torch.Generator().manual_seed(0)
    real = torch.rand(40, 1, 16, 16, generator=g) * 2 - 1
    real[1] = real[0] + 0.01 * torch.randn(1, 16, 16, generator=g)         # 'patient' 1 is patient 0's photo
    pats = np.repeat(np.arange(20), 2)
    pats[1] = 99
    real[20:] = real[20:] * 0.3 + real[torch.arange(20, 40) - (torch.arange(20, 40) % 2)] * 0.7  # same-patient pairs
    src, held = np.arange(20), np.arange(20, 40)
    rel = torch.stack([(real[0] + real[1]) / 2, (real[2] + real[4]) / 2, (real[6] + real[8]) / 2])
    emb = real.flatten(1).double().numpy()
    out = screen(release_images=rel, release_emb=rel.flatten(1).double().numpy(), real_images=real, real_emb=emb,
                 source_rows=src, heldout_rows=held, heldout_patients=pats[held].astype(str),
                 record_sources=[[0, 1], [2, 4], [6, 8]], quantile=0.05)
    assert out["closest"][0]["record"] == 0 and out["closest"][0]["near_copy"]
    assert out["copies_of_one_source"] == 0 or out["closest"][0]["own_source"]
    assert out["near_copies_pixel"] >= 1 and not out["closest"][-1]["near_copy"]
    assert out["control"]["n"] == 20
    # the identity threshold is set on half the held-out patients and its control read on the other half
    assert out["control"]["identity_n"] == 10 and "half of the held-out patients" in out["identity_threshold_set_on"]
    with_patients = screen(release_images=rel, release_emb=rel.flatten(1).double().numpy(), real_images=real,
                           real_emb=emb, source_rows=src, heldout_rows=held, heldout_patients=pats[held].astype(str),
                           real_patients=pats.astype(str), record_sources=[[0, 1], [2, 4], [6, 8]], quantile=0.05)
    assert with_patients["interval"].startswith("patient cluster bootstrap")
    assert out["interval"].startswith("Clopper-Pearson")


def test_network_checks_flag_a_network_that_knows_the_members():
    """Item 2: an identity network that verifies members better than controls (as one trained on the members
    does) is flagged; one that treats them alike is not."""
    from types import SimpleNamespace

    from medanon.evaluate.config import EvalConfig
    from medanon.evaluate.network_checks import network_checks

    rng = np.random.default_rng(0)
    pats = np.repeat(np.arange(60), 3).astype(str)
    centres = rng.standard_normal((60, 16))
    noise = np.where(np.arange(180)[:, None] < 120, 0.2, 1.5)            # members (first 40 patients) tight
    emb = centres[np.repeat(np.arange(60), 3)] + noise * rng.standard_normal((180, 16))
    notes = []
    ctx = SimpleNamespace(src=np.arange(120), held=np.arange(120, 180), real=SimpleNamespace(patients=pats),
                          real_emb=emb, real_emb_independent=centres[np.repeat(np.arange(60), 3)] +
                          0.5 * rng.standard_normal((180, 16)), cfg=EvalConfig(), note=notes.append,
                          unit_of=lambda net: "patient", identity_ids=lambda rows, unit: pats[rows])
    out = network_checks(ctx)
    assert out["identity"]["differs"] and out["identity"]["members"]["auc"] > out["identity"]["controls"]["auc"]
    assert not out["independent"]["differs"] and len(notes) == 1 and "trained on the members" in notes[0]
    corr = out["cosine_correlation"]
    assert -1 <= corr["pearson_r"] <= 1 and corr["patients"] == 20 and corr["pairs"] == 60 * 59 // 2
    assert corr["ci"][0] <= corr["pearson_r"] <= corr["ci"][1] and "patient cluster bootstrap" in corr["interval"]
    d = out["identity"]["difference"]                      # the test is on the difference, not on overlap
    assert d["ci"][0] > 0 and d["value"] == out["identity"]["members"]["auc"] - out["identity"]["controls"]["auc"]


def test_the_networks_correlation_agrees_with_scipy_and_its_interval_respects_patients():
    """r is scipy's Pearson r; its interval resamples patients, so pairs that share few patients give a wider one
    than as many independent pairs would."""
    from scipy.stats import pearsonr

    from medanon.evaluate.network_checks import pair_correlation

    rng = np.random.default_rng(1)
    pat_effect = rng.standard_normal(8)                   # 8 patients, every pair within 28 patient pairs
    i, j = np.triu_indices(8, 1)
    groups = np.repeat(np.c_[i, j], 40, axis=0)
    shared = (pat_effect[groups[:, 0]] + pat_effect[groups[:, 1]])
    a = shared + 0.3 * rng.standard_normal(len(groups))
    b = shared + 0.3 * rng.standard_normal(len(groups))
    got = pair_correlation(a, b, groups)
    assert got["pearson_r"] == pytest.approx(pearsonr(a, b)[0], abs=1e-12) and got["patients"] == 8
    independent = pair_correlation(a, b, np.c_[np.arange(len(a)), np.arange(len(a)) + len(a)])
    assert got["ci"][1] - got["ci"][0] > 2 * (independent["ci"][1] - independent["ci"][0])
    assert np.isnan(pair_correlation(np.ones(5), np.arange(5.0), groups[:5])["pearson_r"])


def test_network_checks_do_not_compare_eye_pairs_with_patient_pairs():
    """An eye-trained network, members photographed twice per eye, controls once per eye: the controls have no pair of
    one eye, so they are verified on their patients' two eyes (pairs the network learned to tell apart), and the two
    groups are not compared: no "trained on the members?" note from pairs of different kinds."""
    from types import SimpleNamespace

    from medanon.evaluate.config import EvalConfig
    from medanon.evaluate.context import RealContext
    from medanon.evaluate.network_checks import network_checks

    rng = np.random.default_rng(0)
    pats, sides, emb, centres = [], [], [], {}
    for who, shots in (("m", (0.0, 0.0, 1.0, 1.0)), ("c", (0.0, 1.0))):
        for p in range(30):
            for s in shots:
                c = centres.setdefault((who, p, s), rng.normal(size=32))
                pats.append(f"{who}{p}")
                sides.append(s)
                emb.append(c + 0.3 * rng.normal(size=32))
    pats, sides, emb = np.asarray(pats), np.asarray(sides), np.asarray(emb)
    notes = []
    ctx = SimpleNamespace(cfg=EvalConfig(), real=SimpleNamespace(patients=pats, label_names=["laterality"],
                                                                  label=lambda name: sides),
                          src=np.flatnonzero(np.char.startswith(pats, "m")),
                          held=np.flatnonzero(np.char.startswith(pats, "c")), real_emb=emb,
                          real_emb_independent=None, unit_of=lambda net: "eye", note=notes.append)
    ctx.identity_ids = lambda rows, unit: RealContext.identity_ids(ctx, rows, unit)
    row = network_checks(ctx)["identity"]
    assert row["members"]["auc"] > 0.95 and row["members"]["genuine_pairs"] == 60     # same-eye pairs
    assert row["verified_on_patients"] == ["controls"] and row["controls"]["genuine_pairs"] == 30
    assert not row["differs"] and "not compared" in row["not_compared"] and not notes


def test_the_attribute_attacks_auroc_interval_keeps_its_width_at_1():
    """The attribute attack's AUROC on held-out images read [1.0, 1.0] on 12 patients (every resample separates)."""
    from medanon.evaluate.attacks.attribute import _auc_ci

    truth = np.repeat([0, 1], 12)
    prob = np.r_[np.linspace(0.1, 0.3, 12), np.linspace(0.7, 0.9, 12)]
    ci = _auc_ci(truth, prob, 1.0, np.repeat(np.arange(12), 2), stream=0, seed=0, n_resamples=200)
    assert ci[1] == 1.0 and 0.5 < ci[0] < 0.95


def test_linkability_pair_auc_keeps_its_width_at_1():
    """10 people, 2 images each, every genuine pair above every impostor: the pair bootstrap's AUC interval read
    [1.0, 1.0] with p = 0.005 (only delong's AUCs were widened and floored)."""
    from medanon.evaluate.attacks.linkability import verification_rates

    rng = np.random.default_rng(0)
    images = [(p, k) for p in range(10) for k in range(2)]
    pairs = [(a, b) for i, a in enumerate(images) for b in images[i + 1:]]
    genuine = np.array([a[0] == b[0] for a, b in pairs])
    scores = np.where(genuine, 0.9, 0.1) + 0.01 * rng.random(len(pairs))
    groups = np.array([[f"q{a[0]}", f"q{b[0]}"] for a, b in pairs])
    r = verification_rates(scores, genuine, 0.5, groups=groups)
    assert r["AUC"] == 1.0 and r["AUC_ci"][1] == 1.0 and r["AUC_ci"][0] < 0.9 and "widened" in r["interval"]
    assert r["AUC_p_value"] >= 2 / 252                                # 5 + 5 people: 2 / C(10, 5)
