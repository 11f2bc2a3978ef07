"""The residual-risk arithmetic of one row, by hand: which reference a row is measured against, how the control's
sampling error widens the interval, the attribute attacker's majority baseline, and rows whose threshold rests on
too few patients."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from medanon.evaluate.attacks.risk import exact_rate, residual_risk, risk_entry, success_rate


def _wilson(s: int, n: int, z: float = norm.ppf(0.975)) -> tuple[float, float]:
    """Wilson score centre and half-width, written out from the formula (not the library's code)."""
    return (s + z * z / 2) / (n + z * z), z / (n + z * z) * math.sqrt(s * (n - s) / n + z * z / 4)


def test_a_row_with_a_control_and_a_baseline_is_measured_against_the_control():
    """(attack − control) / (1 − control) = (0.8 − 0.5) / 0.5 = 0.6; against the baseline 0.2 it would be 0.75."""
    e = risk_entry(exact_rate(0.8, 100), exact_rate(0.5, 100), what="x", control_is="held-out patients",
                   baseline=exact_rate(0.2, 100), baseline_is="guessing")
    assert e["residual_risk"]["risk"] == pytest.approx(0.6) and e["against"] == "control"
    only_baseline = risk_entry(exact_rate(0.8, 100), None, what="x", control_is="none",
                               baseline=exact_rate(0.2, 100), baseline_is="guessing")
    assert only_baseline["residual_risk"]["risk"] == pytest.approx(0.75) and only_baseline["against"] == "baseline"


def test_the_mover_interval_carries_the_controls_sampling_error():
    """Without bootstrap draws the residual's bounds combine both Wilson intervals (scipy's) about the observed rates
    a and c (MOVER): d -/+ sqrt((a - a_lo)² + (c_hi - c)²) and sqrt((a_hi - a)² + (c - c_lo)²), d = a - c, over
    1 - c; wider than the attack's interval alone mapped through the formula (the control's own error counts), and
    the point estimate is (a − c) / (1 − c) = 3/7 of the observed rates, not of the Wilson centres."""
    from scipy.stats import binomtest

    a_lo, a_hi = binomtest(60, 100).proportion_ci(method="wilson")
    c_lo, c_hi = binomtest(30, 100).proportion_ci(method="wilson")
    a, c = 0.6, 0.3
    want = ((a - c - math.hypot(a - a_lo, c_hi - c)) / (1 - c), (a - c + math.hypot(a_hi - a, c - c_lo)) / (1 - c))
    r = residual_risk(success_rate(60, 100), success_rate(30, 100))
    assert r.unclipped == pytest.approx(3 / 7, rel=1e-12)
    assert r.ci == pytest.approx(want, rel=1e-9)
    assert want[0] < (a_lo - c) / (1 - c) and want[1] > (a_hi - c) / (1 - c)


def test_few_members_found_against_none_of_a_small_control_is_a_positive_risk():
    """3 of 140 members recovered against 0 of 29 controls read 0.00: the Wilson centres (0.037 and 0.057) were
    subtracted, and the small control's is pulled up the most."""
    r = residual_risk(success_rate(3, 140), success_rate(0, 29))
    assert r.value == pytest.approx(3 / 140) and r.ci[0] == 0.0 < r.value < r.ci[1]
    zero = residual_risk(success_rate(0, 140), success_rate(0, 29))
    assert zero.unclipped == 0.0 and zero.value == 0.0


@pytest.mark.parametrize("n", [1, 2, 3, 10, 50])
def test_wilson_ends_are_exactly_0_and_1(n):
    from medanon.evaluate.attacks.stats import wilson

    assert wilson(0, n)[0] == 0.0 and wilson(n, n)[1] == 1.0


def test_the_attribute_baseline_guesses_the_most_frequent_class():
    """45 of 60 released records are class 1: guessing it is right 0.75 of the time (the least frequent, 0.25)."""
    import torch

    from medanon.evaluate.attacks.attribute import attribute_inference
    from medanon.models.classifier import ResNet, ResNetConfig

    torch.manual_seed(0)
    net = ResNet(ResNetConfig.preset("small", in_channels=1, num_classes=2)).eval()
    truth = np.r_[np.ones(45), np.zeros(15)]
    out = attribute_inference(attacker=net, image_size=16, release_images=torch.rand(60, 1, 16, 16) * 2 - 1,
                              release_truth=truth, heldout_images=torch.rand(20, 1, 16, 16) * 2 - 1,
                              heldout_truth=np.arange(20) % 2.0, n_resamples=50)
    assert out["chance"] == 0.75 and out["risk"]["baseline"]["rate"] == 0.75


def test_a_threshold_set_on_too_few_patients_makes_its_row_invalid():
    from medanon.evaluate.calibration import COPIES, KNOWN, calibration_table, validity

    def row(r, lo, hi):
        return {"residual_risk": {"risk": r, "ci": [lo, hi]}, "attack": {}, "control_is": "held-out patients"}

    table = calibration_table({k: {"nearest": {"risk": row(0.9, 0.7, 1.0) if k in COPIES else row(0.0, 0.0, 0.1)}}
                               for k in KNOWN})
    ok = row(0.3, 0.1, 0.5) | {"threshold": {"enough": True, "calibration_patients": 40, "minimum_patients": 10}}
    thin = row(0.3, 0.1, 0.5) | {"threshold": {"enough": False, "calibration_patients": 4, "minimum_patients": 10}}
    for risk, valid in ((ok, True), (thin, False)):
        v = validity({"name": "R", "attacks": {"nearest": {"risk": risk}}}, table, checks={}, trained_on_members={})
        assert v["nearest"]["valid"] is valid
    assert "its threshold is set on 4 patients (fewer than 10)" in v["nearest"]["reason"]


def test_linkability_says_its_threshold_rests_on_too_few_patients():
    """4 held-out patients of 2 images (24 impostor pairs) cannot set a 1 % FAR threshold: the calibration says it
    is not enough and warns; 12 patients of 10 images (6,600 impostor pairs, over 10 / FAR) can."""
    from medanon.evaluate.attacks import linkability as L

    rng = np.random.default_rng(0)

    def people(n, per, tag):
        centres = rng.standard_normal((n, 16))
        emb = np.repeat(centres, per, 0) + 0.1 * rng.standard_normal((n * per, 16))
        return emb, [f"{tag}{i}" for i in range(n) for _ in range(per)]

    src, sp = people(6, 2, "s")
    for n_held, per, enough in ((4, 2, False), (12, 10, True)):
        hel, hp = people(n_held, per, "h")
        out = L.linkability(control_emb=hel, control_patients=hp, release_emb=src,
                            record_patients=[frozenset([p]) for p in sp], source_emb=src, source_patients=sp,
                            source_record=list(range(len(src))), n_resamples=50)
        assert out["calibration"]["enough"] is enough and ("warning" in out) is (not enough)


def test_local_cloaking_counts_a_tied_outsider_as_half():
    """N_R centred on r(x): real images not among r(x)'s sources closer to r(x) than x is, a tie counting 1/2. Two
    identical source images of different people, released in different records, tie: N_R = [0.5, 0.5, 0], median
    0.5 (0 if ties counted nothing)."""
    from medanon.evaluate.attacks.singling_out import singling_out

    src = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    rel = np.array([[1.0, 0.0], [0.6, 0.8]])
    out = singling_out(source_emb=src, source_record=[0, 1, 1], release_emb=rel, source_patients=["a", "b", "c"],
                       n_resamples=50)
    assert out["LC_N_R"] == pytest.approx(0.5)


def test_a_residual_clipped_to_a_point_shows_its_unclipped_interval():
    """An attack that succeeds on 5 % of 40 patients' images against a control at 60 %: every resample is below the
    control, the clipped interval is [0, 0], and the report shows the unclipped estimate and interval beside it."""
    from medanon.evaluate.attacks.risk import rate
    from medanon.evaluate.report_risks import _residual

    groups = np.repeat(np.arange(40), 2)
    attack = rate(np.arange(80) % 20 == 0, groups=groups, n_resamples=200)
    control = rate(np.arange(80) % 5 < 3, groups=groups + 100, stream=1, n_resamples=200)
    rr = residual_risk(attack, control).to_dict()
    assert rr["risk"] == 0.0 and rr["ci"] == [0.0, 0.0]
    lo, hi = rr["unclipped_ci"]
    assert lo < rr["unclipped"] < hi < 0 and rr["unclipped"] == pytest.approx((0.05 - 0.6) / 0.4)
    cell = _residual(rr)
    assert "before clipping to [0, 1]: -1.375" in cell and f"{lo:.3f}" in cell
    open_rr = residual_risk(rate(np.arange(80) % 2 == 0, groups=groups, n_resamples=200), control).to_dict()
    assert open_rr["ci"][0] < open_rr["ci"][1] and "before clipping" not in _residual(open_rr)
