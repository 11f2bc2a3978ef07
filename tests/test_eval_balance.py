"""Members and controls on equal footing: the control rate reweighted to the members' mix of the label that drives
similarity (medanon.evaluate.attacks.balance), inside the patient bootstrap; and the threshold each risk row
carries, with its realised rate on the controls."""

import numpy as np
import pytest

from medanon.evaluate.attacks.balance import Balance, balanced_rate
from medanon.evaluate.attacks.nearest import membership_from_scores
from medanon.evaluate.attacks.risk import MIN_PATIENTS


def _people(rng, n_patients, p_grade2, per=3, records=15, tag="m"):
    """Scores (images, records) that depend on the patient's grade only (plus noise): nothing of a release."""
    grade = np.where(rng.random(n_patients) < p_grade2, 2.0, 0.0)
    patient = np.repeat(np.arange(n_patients), per)
    level = grade + 0.3 * rng.standard_normal(n_patients)
    scores = level[patient][:, None] + 0.1 * rng.standard_normal((len(patient), records))
    return scores, np.asarray([f"{tag}{p}" for p in patient]), grade[patient]


def test_a_null_release_has_no_residual_once_controls_match_the_members_grades():
    """Members mostly grade 2, controls mostly grade 0, the attack's score depends on grade only: against the plain
    control the null release looks leaky; against the control reweighted to the members' grades it does not."""
    rng = np.random.default_rng(4)
    ms, mg, mgrade = _people(rng, 200, 0.75, tag="m")
    cs, cg, cgrade = _people(rng, 200, 0.25, tag="c")
    ks, kg, _ = _people(rng, 200, 0.5, tag="k")
    out = membership_from_scores(ms, cs, ks, fpr=0.3, member_groups=mg, control_groups=cg, calib_groups=kg,
                                 balance=Balance("grade", mgrade, cgrade))
    r = out["risk"]
    plain, balanced = r["residual_risk_unweighted"], r["residual_risk"]
    assert plain["unclipped"] > 0.2 and plain["ci"][0] > 0.1         # the grade mix alone reads as a leak
    assert abs(balanced["unclipped"]) < 0.1 and balanced["ci"][0] == 0 and balanced["ci"][1] > 0
    info = r["control"]["balanced"]
    assert info["label"] == "grade" and r["control_unweighted"]["rate"] == pytest.approx(info["unweighted_rate"])
    shares = {s["value"]: s for s in info["strata"]}
    assert shares["2"]["member_share"] > 0.6 > shares["2"]["control_share"]
    assert "patient cluster bootstrap" in r["control"]["interval"] and r["control"]["patients"] == 200
    # the threshold: set on 200 calibration patients, its realised rate on the controls with an interval
    t = r["threshold"]
    assert t["enough"] and t["calibration_patients"] == 200 and t["calibration_rate"] <= 0.3
    assert t["realised_fpr"] == pytest.approx(r["control_unweighted"]["rate"])
    assert t["realised_fpr_ci"][0] <= t["realised_fpr"] <= t["realised_fpr_ci"][1]


def test_balanced_rate_is_the_members_mix_of_the_control_strata_rates():
    o = np.array([1, 0, 0, 0, 1, 1, 1, 0], float)
    control = np.array([0, 0, 0, 0, 1, 1, 1, 1], float)                  # stratum rates 1/4 and 3/4
    members = np.array([1, 1, 1, 0, np.nan])                            # 3/5 grade 1, 1/5 grade 0, 1/5 missing
    got = balanced_rate(o, Balance("grade", members, control), seed=1)
    assert got.raw == pytest.approx((1 / 4 * 1 + 3 / 4 * 3) / 4)         # the missing stratum has no control
    assert got.balanced["uncovered_member_share"] == pytest.approx(0.2)
    weights = {s["value"]: s["weight"] for s in got.balanced["strata"]}
    # per control target: member share / control share, renormalised over the covered strata
    assert np.average(o, weights=[weights["0"]] * 4 + [weights["1"]] * 4) * 8 / 8 == pytest.approx(got.raw)
    assert got.ci[0] <= got.raw <= got.ci[1] and got.draws.shape == (400,)
    same = balanced_rate(o, Balance("grade", control, control))         # the same mix: the plain rate
    assert same.raw == pytest.approx(o.mean())
    assert balanced_rate(o, Balance("grade", np.full(3, 5.0), control)) is None     # no member stratum has controls


def test_a_numeric_label_is_cut_at_quintiles_and_missing_values_are_a_stratum():
    b = Balance("age", np.r_[np.arange(30.0), np.nan], np.arange(30.0, 60.0))
    m, c, names = b.codes()
    assert len(names) == 6 and names[-1] == "missing" and m[-1] == 5
    assert set(np.unique(np.r_[m[:-1], c])) == set(range(5))


def test_a_threshold_set_on_too_few_patients_says_so():
    rng = np.random.default_rng(0)
    ms, mg, _ = _people(rng, 12, 0.5, tag="m")
    cs, cg, _ = _people(rng, 12, 0.5, tag="c")
    ks, kg, _ = _people(rng, MIN_PATIENTS - 4, 0.5, tag="k")
    out = membership_from_scores(ms, cs, ks, fpr=0.1, member_groups=mg, control_groups=cg, calib_groups=kg)
    t = out["risk"]["threshold"]
    assert not t["enough"] and str(MIN_PATIENTS) in t["warning"] and out["warning"] == t["warning"]
    assert "control_unweighted" not in out["risk"]                      # no balance given: the plain control


def test_linkability_risks_are_the_same_without_the_verification_tables():
    """The known-answer calibration asks for the residual risks only (no inner / outer pair bootstraps): the same
    entries, balanced controls and thresholds included."""
    from medanon.evaluate.attacks.linkability import linkability

    rng = np.random.default_rng(1)
    pid = np.repeat(np.arange(12), 3)
    src = rng.standard_normal((12, 8))[pid] + 0.3 * rng.standard_normal((36, 8))
    hp = np.repeat(np.arange(12), 3)
    held = rng.standard_normal((12, 8))[hp] + 0.3 * rng.standard_normal((36, 8))
    grade = (pid % 3).astype(float)
    kw = dict(control_emb=held, control_patients=hp.astype(str), release_emb=src + 0.1 * rng.standard_normal(src.shape),
              record_patients=[frozenset([str(p)]) for p in pid], source_emb=src, source_patients=pid.astype(str),
              source_record=list(range(36)), target_far=0.05, balance=Balance("grade", grade, (hp % 2).astype(float)))
    full, lean = linkability(**kw), linkability(**kw, tables=False)
    assert full["outer"] is not None and lean["outer"] is None and lean["inner"] is None
    for key in ("risk", "risk_reverse", "calibration", "threshold", "control"):
        assert lean[key] == full[key], key
    assert full["risk"]["control"]["balanced"]["label"] == "grade" and "threshold" in full["risk"]
