"""Known-answer calibration: which attacks pass, which risk rows are valid, and the verdict per release."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from medanon.evaluate.calibration import COPIES, KNOWN, calibration_table, validity, verdict


def _risk(r, lo, hi):
    return {"residual_risk": {"risk": r, "ci": [lo, hi]}, "attack": {}, "control_is": "held-out patients"}


def _attacks(forward, reverse=None):
    a = {"nearest": {"risk": forward}}
    if reverse is not None:
        a["nearest"]["risk_reverse"] = reverse
    return a


def test_an_attack_passes_only_when_it_sees_the_copy_and_not_the_nulls():
    seen = _attacks(_risk(0.9, 0.7, 1.0))
    good = {"copy": seen, "jpeg": seen, "shift": seen, "mirror": seen, "constant": _attacks(_risk(0.0, 0.0, 0.1)),
            "noise": _attacks(_risk(0.05, 0.0, 0.2))}
    assert calibration_table(good)["nearest"]["passes"]
    weak = {**good, "copy": _attacks(_risk(0.3, 0.1, 0.5))}
    assert "misses an exact copy" in calibration_table(weak)["nearest"]["reason"]
    brittle = {**good, "shift": _attacks(_risk(0.2, 0.05, 0.4))}
    assert "misses the shift copy" in calibration_table(brittle)["nearest"]["reason"]
    one_way = {**good, "mirror": _attacks(_risk(0.1, 0.0, 0.3))}      # compares one orientation only
    assert "misses the mirror copy" in calibration_table(one_way)["nearest"]["reason"]
    fooled = {**good, "constant": _attacks(_risk(0.2, 0.05, 0.4))}
    t = calibration_table(fooled)["nearest"]
    assert not t["passes"] and "flags the constant release" in t["reason"]


def test_a_reverse_attacker_has_no_copy_check_but_must_pass_the_nulls():
    copy = _attacks(_risk(0.9, 0.7, 1.0), _risk(0.0, 0.0, 0.0))
    calib = {"copy": copy, "jpeg": copy, "shift": copy, "mirror": copy,
             "constant": _attacks(_risk(0.0, 0.0, 0.1), _risk(0.0, 0.0, 0.1)),
             "noise": _attacks(_risk(0.0, 0.0, 0.1), _risk(0.1, 0.02, 0.2))}
    rev = calibration_table(calib)["nearest (reverse)"]
    assert rev["copy_check"] is None and not rev["passes"] and "noise" in rev["reason"]


def test_the_verdict_takes_the_largest_valid_risk_only():
    copy = {"nearest": {"risk": _risk(0.9, 0.7, 1.0)}, "singling_out": {"risk": _risk(0.2, 0.0, 0.4)}}
    calib = {"copy": copy, "jpeg": copy, "shift": copy, "mirror": copy,
             "constant": {"nearest": {"risk": _risk(0.0, 0.0, 0.1)}, "singling_out": {"risk": _risk(0.0, 0.0, 0.1)}},
             "noise": {"nearest": {"risk": _risk(0.0, 0.0, 0.1)}, "singling_out": {"risk": _risk(0.0, 0.0, 0.1)}}}
    table = calibration_table(calib)
    rel = {"name": "R", "utility": {}, "attacks": {"nearest": {"risk": _risk(0.3, 0.1, 0.5)},
                                                   "singling_out": {"risk": _risk(0.8, 0.6, 0.9)}}}
    rel["validity"] = rows = validity(rel, table, checks={}, trained_on_members={})
    assert rows["nearest"]["valid"] and not rows["singling_out"]["valid"]
    assert "misses an exact copy" in rows["singling_out"]["reason"]
    v = verdict(rel)
    assert v["attack"] == "nearest" and v["risk"] == 0.3 and v["valid_attacks"] == 1
    assert "0.30" in v["sentence"]


def test_a_tie_goes_to_an_attack_shown_to_catch_copies_not_to_a_reverse_one():
    """Every valid row at 0 [0, 0.06]: the verdict named the reverse linkability attacker (by its name, in a tie),
    which no copy could ever show working."""
    copy = {"nearest": {"risk": _risk(0.9, 0.7, 1.0), "risk_reverse": _risk(0.0, 0.0, 0.0)}}
    null = {"nearest": {"risk": _risk(0.0, 0.0, 0.06), "risk_reverse": _risk(0.0, 0.0, 0.06)}}
    table = calibration_table({"copy": copy, "jpeg": copy, "shift": copy, "mirror": copy, "constant": null,
                               "noise": null})
    rel = {"name": "R", "utility": {}, "attacks": {"nearest": {"risk": _risk(0.0, 0.0, 0.06),
                                                               "risk_reverse": _risk(0.0, 0.0, 0.06)}}}
    rel["validity"] = validity(rel, table, checks={}, trained_on_members={})
    assert rel["validity"]["nearest (reverse)"]["valid"] and rel["validity"]["nearest"]["valid"]
    assert verdict(rel)["attack"] == "nearest"


def test_a_valid_row_without_a_defined_risk_does_not_hide_the_others():
    """A row whose reference succeeds on every target has a NaN residual; compared with NaN nothing is larger, so
    listed first it took the verdict and the 1.00 of the next row went unsaid."""
    nan = float("nan")
    copy = {"attribute": {"risk": _risk(0.9, 0.7, 1.0)}, "nearest": {"risk": _risk(0.9, 0.7, 1.0)}}
    null = {"attribute": {"risk": _risk(0.0, 0.0, 0.1)}, "nearest": {"risk": _risk(0.0, 0.0, 0.1)}}
    table = calibration_table({"copy": copy, "jpeg": copy, "shift": copy, "mirror": copy, "constant": null,
                               "noise": null})
    undefined = {"risk": nan, "ci": [nan, nan], "interval": "undefined: the control succeeds on every target (rate 1)"}
    for order in (["attribute", "nearest"], ["nearest", "attribute"]):
        risks = {"attribute": {"residual_risk": undefined, "attack": {}}, "nearest": _risk(1.0, 0.94, 1.0)}
        rel = {"name": "R", "utility": {}, "attacks": {row: {"risk": risks[row]} for row in order}}
        rel["validity"] = validity(rel, table, checks={}, trained_on_members={})
        v = verdict(rel)
        assert v["attack"] == "nearest" and v["risk"] == 1.0 and "nan" not in v["sentence"]
        assert "no defined residual risk: Attribute (classifier) (the control succeeds on every target" in v["sentence"]
        assert v["valid_attacks"] == 1 and "largest of" not in v["sentence"]    # the undefined row is apart
    rel["attacks"] = {"attribute": {"risk": {"residual_risk": undefined, "attack": {}}}}
    rel["validity"] = validity(rel, table, checks={}, trained_on_members={})
    v = verdict(rel)
    assert "risk" not in v and "No valid attack on R has a defined residual risk" in v["sentence"]
    assert v["valid_attacks"] == 0 and len(v["undefined_attacks"]) == 1


def test_a_known_answer_without_a_defined_risk_is_not_measured_not_missed_nor_passed():
    """A cell whose reference succeeds on every target (every target of one sex, say) has no residual risk: on a
    copy it read "misses an exact copy (residual nan [nan, nan])", and on a null it passed, as NaN > 0 is false."""
    nan = float("nan")
    undefined = {"residual_risk": {"risk": nan, "ci": [nan, nan],
                                   "interval": "undefined: the control succeeds on every target (rate 1)"},
                 "attack": {}, "n": 12}
    copy, null = _attacks(_risk(0.9, 0.7, 1.0)), _attacks(_risk(0.0, 0.0, 0.1))
    on_copy = calibration_table({"copy": _attacks(undefined), "jpeg": copy, "shift": copy, "mirror": copy,
                                 "constant": null, "noise": null})["nearest"]
    assert not on_copy["passes"] and "nan" not in on_copy["reason"] and "misses" not in on_copy["reason"]
    assert on_copy["reason"] == ("not measurable on the copy release (the control succeeds on every target "
                                 "(rate 1), n=12)")
    on_null = calibration_table({"copy": copy, "jpeg": copy, "shift": copy, "mirror": copy,
                                 "constant": _attacks(undefined), "noise": null})["nearest"]
    assert not on_null["passes"] and on_null["reason"].startswith("not measurable on the constant release")


def test_the_verdict_names_each_undefined_row_with_its_own_reason():
    from medanon.evaluate.report_verdict import _counts
    from medanon.evaluate.verdict_text import _undefined

    v = {"valid_attacks": 3, "invalid_attacks": 12,
         "undefined_attacks": {"a": {"name": "Inference", "why": "undefined: the control succeeds on every target"},
                               "b": {"name": "Singling out", "why": "undefined: the baseline is 1"}}}
    text = _undefined(v)
    assert "Inference (the control succeeds on every target)" in text and "Singling out (the baseline is 1)" in text
    assert _counts(v) == "3 (+2 undefined) / 17"


def test_attackers_trained_on_members_or_at_chance_are_not_valid():
    calib = {k: {"nearest": {"risk": _risk(0.9, 0.7, 1.0) if k in COPIES else _risk(0.0, 0.0, 0.1)}}
             for k in KNOWN}
    table = calibration_table(calib)
    rel = {"name": "R", "utility": {}, "attacks": {"nearest": {"risk": _risk(0.3, 0.1, 0.5)}}}
    v = validity(rel, table, checks={}, trained_on_members={"identity": True})
    assert "was trained on people of this evaluation (the release's members" in v["nearest"]["reason"]
    chance = {"identity": {"controls": {"auc": 0.52, "ci": [0.45, 0.6]}}}
    rel["validity"] = validity(rel, table, checks=chance, trained_on_members={})
    assert "does not tell held-out patients apart" in rel["validity"]["nearest"]["reason"]
    assert "risk" not in verdict(rel) and "say nothing of its privacy" in verdict(rel)["sentence"]
    # real data without patient ids: a held-out "patient" may be a member's other eye, so no control is a control
    rel["validity"] = validity(rel, table, checks={}, trained_on_members={}, ids_known=False)
    assert not rel["validity"]["nearest"]["valid"] and "has no patient ids" in rel["validity"]["nearest"]["reason"]
    assert "risk" not in verdict(rel)


def test_plots_draw_only_valid_risks_on_round_ticks():
    import numpy as np

    from medanon.evaluate.report_plots import _valid_risk, nice_ticks

    t = nice_ticks(0.03, 0.87)
    assert t[0] <= 0.03 and t[-1] >= 0.87 and np.allclose(np.diff(t), 0.2)
    rel = {"attacks": {"nearest": {"risk": _risk(0.4, 0.2, 0.6)}}, "validity": {"nearest": {"valid": False}}}
    assert np.isnan(_valid_risk(rel, "nearest")[0])
    rel["validity"]["nearest"]["valid"] = True
    assert _valid_risk(rel, "nearest") == (0.4, (0.2, 0.6))


def test_known_answer_images_and_the_judge():
    import torch

    from medanon.evaluate.known_answers import judge, known_images

    ramp = torch.linspace(-0.8, 0.8, 16)
    x = (ramp[None, None, :, None] * ramp[None, None, None, :]).expand(3, 3, 16, 16).clone()   # smooth images
    assert torch.equal(known_images("copy", x), x)
    s = known_images("shift", x)
    assert torch.equal(s[:, :, 1:, 1:], x[:, :, :-1, :-1]) and torch.equal(s[:, :, 0, 1:], x[:, :, 0, :-1])
    j = known_images("jpeg", x)
    assert j.shape == x.shape and 0 < (j - x).abs().mean() < 0.05
    assert torch.equal(known_images("noise", x, seed=3), known_images("noise", x, seed=3))
    assert judge("copy", "nearest", {"risk": 0.9, "ci": [0.7, 1.0]}, True)
    assert not judge("constant", "nearest", {"risk": 0.2, "ci": [0.05, 0.3]}, True)
    assert judge("copy", "nearest (reverse)", {"risk": 0.0, "ci": [0.0, 0.0]}, True) is None
    assert judge("noise", "nearest", {"risk": 0.9, "ci": [0.7, 1.0]}, False) is None
    # the attribute attack on a copy: judged against half its ceiling (0.195 here), not against 0.5
    rr = {"risk": 0.17, "ci": [0.13, 0.20]}
    assert judge("copy", "attribute", rr, True, ceiling=0.195) and not judge("copy", "attribute", rr, True)


def test_a_control_of_too_few_patients_makes_a_row_invalid():
    calib = {k: {"nearest": {"risk": _risk(0.9, 0.7, 1.0) if k in COPIES else _risk(0.0, 0.0, 0.1)}}
             for k in KNOWN}
    table = calibration_table(calib)
    risk = _risk(0.3, 0.1, 0.5)
    rel = {"name": "R", "utility": {}, "attacks": {"nearest": {"risk": risk}}}
    risk["control"] = {"rate": 0.1, "ci": [0.0, 0.4], "trials": 15, "patients": 5}
    assert "its control has 5 patients" in validity(rel, table, checks={}, trained_on_members={})["nearest"]["reason"]
    risk["control"]["patients"] = 12
    assert validity(rel, table, checks={}, trained_on_members={})["nearest"]["valid"]


def _attribute(r, lo, hi, heldout=0.604, chance=0.508):
    return {"attribute": {"risk": _risk(r, lo, hi), "heldout_real_accuracy": heldout, "heldout_chance": chance}}


def test_the_attribute_attack_is_held_to_what_real_images_allow_it():
    """A copy of real images tells a sex classifier no more than real images of people it never saw: at 60.4 %
    on held-out images (majority 50.8 %) its ceiling is a residual of 0.195, so a copy at 0.17 (the VS-Snow
    paper-scale phantom's) is caught, and the attack is not declared invalid for missing a bar of 0.5 that no copy
    could reach. A copy it reads at baseline is still missed, and a strong attacker is held to half its own
    ceiling."""
    nulls = {"constant": _attribute(0.0, -0.02, 0.02), "noise": _attribute(0.01, -0.01, 0.03)}
    seen = _attribute(0.17, 0.13, 0.20)
    row = calibration_table({"copy": seen, "jpeg": seen, "shift": seen, "mirror": seen, **nulls})["attribute"]
    assert row["passes"] and row["copy_check"]
    blind = _attribute(0.01, -0.02, 0.04)
    row = calibration_table({"copy": blind, "jpeg": seen, "shift": seen, "mirror": seen, **nulls})["attribute"]
    assert not row["passes"] and "misses an exact copy" in row["reason"] and "needs 0.10" in row["reason"]
    blind_attacker = _attribute(0.0, 0.0, 0.24, heldout=0.528, chance=0.556)   # below the majority: ceiling 0
    row = calibration_table({"copy": blind_attacker, "jpeg": blind_attacker, "shift": blind_attacker,
                             "mirror": blind_attacker, **nulls})
    assert not row["attribute"]["passes"] and "at chance on held-out real images" in row["attribute"]["reason"]
    strong = _attribute(0.3, 0.25, 0.35, heldout=0.95, chance=0.5)       # ceiling 0.9: needs 0.45
    row = calibration_table({"copy": strong, "jpeg": strong, "shift": strong, "mirror": strong, **nulls})["attribute"]
    assert not row["passes"] and "half its 0.90" in row["reason"]
    # every other attack keeps the absolute bar: a copy must be found with a residual of at least 0.5
    copy = _attacks(_risk(0.17, 0.13, 0.20))
    near = calibration_table({"copy": copy, "jpeg": copy, "shift": copy, "mirror": copy,
                              "constant": _attacks(_risk(0.0, 0.0, 0.1)),
                              "noise": _attacks(_risk(0.0, 0.0, 0.1))})["nearest"]
    assert not near["passes"] and "needs" not in near["reason"]


def test_the_verdict_says_whether_its_reference_is_a_control_or_a_baseline_and_gives_its_n():
    rel = {"name": "R", "utility": {}, "attacks": {"singling_out": {"risk": {**_risk(0.4, 0.2, 0.6),
                                                                             "against": "baseline", "n": 56}}}}
    rel["validity"] = {"singling_out": {"valid": True, "catches_copies": True}}
    sentence = verdict(rel)["sentence"]
    assert "(N 56 source images)" in sentence and "measured against a baseline, random guessing" in sentence
    assert "people not in the release" not in sentence
    rel["attacks"]["singling_out"]["risk"]["against"] = "control"
    assert "measured against a control, the same attack on people not in the release" in verdict(rel)["sentence"]


def test_a_residual_risk_is_never_surer_than_its_attack_when_no_target_is_found():
    """All bootstrap draws 0 (no target found): the attack's interval is Wilson's over patient clusters, and the
    residual's must not collapse to [0, 0] below it."""
    import numpy as np

    from medanon.evaluate.attacks.risk import exact_rate, rate, residual_risk

    attack = rate(np.zeros(12), groups=np.repeat(np.arange(3), 4), seed=0)       # 3 patients, nothing found
    assert attack.ci[1] > 0.5
    risk = residual_risk(attack, exact_rate(1 / 3, 12))
    assert risk.value == 0 and risk.ci[1] >= (attack.ci[1] - 1 / 3) / (1 - 1 / 3) - 1e-12


def test_a_reverse_attacker_that_flags_a_copy_is_not_trusted():
    """A copy pushes nobody away: a reverse attacker whose residual on a (JPEG) copy is above 0 reacts to something
    else, and fails its calibration; one that reads 0 on the copies and the nulls passes."""
    quiet = _risk(0.0, 0.0, 0.1)
    copy = _attacks(_risk(0.9, 0.7, 1.0), quiet)
    calib = {"copy": copy, "jpeg": _attacks(_risk(0.9, 0.7, 1.0), _risk(0.17, 0.03, 0.28)), "shift": copy,
             "mirror": copy,
             "constant": _attacks(quiet, quiet), "noise": _attacks(quiet, quiet)}
    rev = calibration_table(calib)["nearest (reverse)"]
    assert not rev["passes"] and "flags the jpeg copy, which pushes nobody away" in rev["reason"]
    calib["jpeg"] = copy
    assert calibration_table(calib)["nearest (reverse)"]["passes"]


def test_a_row_whose_attack_rests_on_few_patients_is_not_valid():
    """Rows against a baseline have no control to be too small: their own targets must reach the same floor."""
    quiet = _risk(0.0, 0.0, 0.1)
    calib = {k: {"membership": {"risk": _risk(0.9, 0.7, 1.0) if k in COPIES else quiet}} for k in KNOWN}
    table = calibration_table(calib)
    few = {**_risk(0.3, 0.0, 0.8), "attack": {"patients": 7}, "against": "baseline"}
    rel = {"name": "R", "utility": {}, "attacks": {"membership": {"risk": few}}}
    v = validity(rel, table, checks={}, trained_on_members={})
    assert not v["membership"]["valid"] and "7 patient clusters" in v["membership"]["reason"]
    rel["attacks"]["membership"]["risk"]["attack"]["patients"] = 14
    assert validity(rel, table, checks={}, trained_on_members={})["membership"]["valid"]


def _utility(release: float, real: float, base_ci, ratio_ci) -> dict:
    return {"grade": {"release": {"kappa": {"mean": release}}, "real_same_n": {"kappa": {"mean": real}},
                      "paired_bootstrap": {"kappa": {"real_same_n": {"ci": base_ci}, "ratio": {"ci": ratio_ci}}}}}


def test_a_share_of_a_real_baseline_at_chance_is_not_stated():
    """κ kept = release / real is stated only where real images of the same N do better than chance: a ratio to a
    κ near 0 gave "3.86 [-6.31, nan]"."""
    from medanon.evaluate.calibration import _utility_kept
    from medanon.evaluate.verdict_text import sentence

    ok = _utility_kept({"utility": _utility(0.4, 0.5, [0.3, 0.7], [0.6, 1.0])})[0]
    assert ok["kept"] == pytest.approx(0.8) and ok["ci"] == [0.6, 1.0] and "undefined" not in ok
    noise = _utility_kept({"utility": _utility(0.19, 0.05, [-0.12, 0.21], [-6.31, float("nan")])})[0]
    assert noise["kept"] != noise["kept"] and noise["ci"] is None
    assert "not above chance (0)" in noise["undefined"] and "0.05 [-0.12, 0.21]" in noise["undefined"]
    v = {"utility_kept": [noise], "valid_attacks": 0}
    assert "utility share is not stated: real images of the same number reach" in sentence("R", v)
    said = sentence("R", {"utility_kept": [ok], "valid_attacks": 0})
    assert "it keeps 0.80 [0.60, 1.00] of the gain over chance in the Cohen's κ (quadratic) of grade" in said
    # held-out images in the release: the test set is contaminated, and no utility figure follows
    held = {"utility_kept": [ok], "valid_attacks": 0, "exposure": {"heldout_copies": 5, "n": 20, "copies": 0}}
    assert "keeps" not in sentence("R", held) and "copies of held-out patients' images" in sentence("R", held)


@pytest.mark.parametrize("seed, expected", [(1, True), (3, False)])
def test_a_shipped_attacker_trained_on_the_evaluated_phantom_people_is_not_trusted(tmp_path, seed, expected):
    """The shipped attackers were trained on the seed-1 phantom (``extra.phantom``): evaluating a seed-1 phantom with
    one, its members and controls are people it was trained on, so its rows are invalid; a seed-3 phantom shares
    none of them. An attacker trained here on an attacker split is trusted as before."""
    from types import SimpleNamespace

    import medanon
    from medanon.evaluate.calibration import _member_trained, trained_on_members
    from medanon.evaluate.config import EvalConfig

    root = medanon.make_phantom(tmp_path / "ph", patients=4, per_patient=1, size=16, seed=seed)
    cfg = EvalConfig()
    ckpt = str(Path(__file__).parents[1] / "checkpoints" / "attacker-siamese-fundus64.pt")
    cfg = replace(cfg, attacks=replace(cfg.attacks, siamese_checkpoint=ckpt))
    real = SimpleNamespace(root=root, patients=np.array([f"P{i:05d}" for i in (1, 2, 3, 4)]))
    ctx = SimpleNamespace(cfg=cfg, attacker_from="attacker", member_fallbacks=set(), real=real,
                          src=np.array([0, 1]), held=np.array([2, 3]))
    members = trained_on_members(ctx)
    assert members == {"identity": False, "independent": False, "siamese": expected, "attribute": False}
    said = _member_trained("siamese", members)
    assert (said is not None) == expected and (not expected or "trained on people of this evaluation" in said)


def test_a_sentence_keeps_the_release_name_as_written():
    """A sentence that opens with the release's name keeps it as the user wrote it ("f-copy holds", not
    "F-copy holds"); the others open with a capital."""
    from medanon.evaluate.verdict_text import sentence

    v = {"valid_attacks": 0, "utility_kept": [], "exposure": {"copies": 3, "copy_patients": 2}}
    text = sentence("f-copy", v, ["its control has 6 patients"])
    assert text.startswith("f-copy holds 3 images within one grey level") and ". No attack on f-copy is valid" in text


def test_the_verdict_names_what_its_n_counts():
    """"N 148" of what? The sentence names the unit of the row's N: source images for linkability."""
    from medanon.evaluate.calibration import row_unit

    calib = {k: {"linkability": {"risk": _risk(0.9, 0.7, 1.0) if k in COPIES else _risk(0.0, 0.0, 0.1)}}
             for k in KNOWN}
    table = calibration_table(calib)
    risk = {**_risk(0.4, 0.2, 0.6), "n": 148, "attack": {"patients": 37}}
    rel = {"name": "R", "utility": {}, "attacks": {"linkability": {"risk": risk}}}
    rel["validity"] = validity(rel, table, checks={}, trained_on_members={})
    assert "(N 148 source images, 37 patient clusters)" in verdict(rel)["sentence"]
    assert row_unit("independent membership (reverse)") == "ranked slots" and row_unit("unknown") == ""
    assert row_unit("inference") == "member images"        # its targets: the member patients' real images


def test_a_verdict_from_attacks_that_never_caught_a_copy_states_no_risk():
    """With the tiny preset every forward row missed the JPEG or shifted copy, and the verdict of an exact copy was
    "residual risk 0.00", read off reverse rows, which pass the calibration by reading 0 on all seven releases."""
    missed = _attacks(_risk(0.45, 0.28, 0.6), _risk(0.0, 0.0, 0.05))       # forward misses; reverse reads 0
    null = _attacks(_risk(0.0, 0.0, 0.1), _risk(0.0, 0.0, 0.05))
    table = calibration_table({k: missed if k in COPIES else null for k in KNOWN})
    assert not table["nearest"]["passes"] and table["nearest (reverse)"]["passes"]
    copy = {"name": "C", "utility": {}, "attacks": _attacks(_risk(1.0, 0.9, 1.0), _risk(0.0, 0.0, 0.11))}
    copy["validity"] = validity(copy, table, checks={}, trained_on_members={})
    reverse = copy["validity"]["nearest (reverse)"]
    assert reverse["valid"] and not reverse["catches_copies"]
    v = verdict(copy)
    assert "risk" not in v and v["no_copy_detector"]
    assert "No attack on C that caught the known copies is valid" in v["sentence"]
    pushed = {"name": "G", "utility": {}, "attacks": _attacks(_risk(0.0, 0.0, 0.1), _risk(0.4, 0.2, 0.6))}
    pushed["validity"] = validity(pushed, table, checks={}, trained_on_members={})
    v = verdict(pushed)                                   # found even so: stated, as a lower bound
    assert v["risk"] == 0.4 and "this is a lower bound" in v["sentence"]


def test_an_attacker_trained_here_on_a_phantom_records_whom_it_saw(tmp_path):
    """`medanon train identity|classifier` on a phantom records the phantom and the very patients it trained on; the
    evaluation then distrusts it only for evaluations of those people (its val-split attacker is trusted for the
    train split's members and controls of the test split), and real data records no patient ids at all."""
    import csv
    import json
    from types import SimpleNamespace

    from click.testing import CliRunner

    import medanon
    from medanon.checkpoint import load_checkpoint
    from medanon.cli import cli
    from medanon.evaluate.calibration import trained_on_members
    from medanon.evaluate.config import EvalConfig

    root = medanon.make_phantom(tmp_path / "ph", patients=12, per_patient=2, size=16, seed=5)
    splits = tmp_path / "splits.csv"
    r = CliRunner().invoke(cli, ["data", "split", str(root), "--out", str(splits), "--val", "0.25", "--test", "0.25"])
    assert r.exit_code == 0, r.output
    split_of = {row["patient_id"]: row["split"] for row in csv.DictReader(splits.open())}
    val = sorted(p for p, s in split_of.items() if s == "val")
    common = ["--split", "val", "--splits", str(splits), "--size", "16", "--steps", "2"]
    for cmd, extra in (("identity", ["--embed-dim", "8"]), ("classifier", ["--label", "sex"])):
        r = CliRunner().invoke(cli, ["--device", "cpu", "train", cmd, str(root), *common, *extra,
                                     "--out", str(tmp_path / f"{cmd}.pt")])
        assert r.exit_code == 0, r.output
        seen = load_checkpoint(tmp_path / f"{cmd}.pt")["extra"]["phantom"]
        assert seen["seed"] == 5 and seen["patient_ids"] == val, cmd
    ids = np.array(sorted(split_of))
    cfg = EvalConfig()
    cfg = replace(cfg, attacks=replace(cfg.attacks, identity_checkpoint=str(tmp_path / "identity.pt"),
                                       attribute_checkpoint=str(tmp_path / "classifier.pt")))

    def members(src_split: str) -> dict:
        src = np.flatnonzero([split_of[p] == src_split for p in ids])
        held = np.flatnonzero([split_of[p] == "test" for p in ids])
        ctx = SimpleNamespace(cfg=cfg, attacker_from="val", member_fallbacks=set(),
                              real=SimpleNamespace(root=root, patients=ids), src=src, held=held)
        return trained_on_members(ctx)

    assert not members("train")["identity"] and not members("train")["attribute"]     # people it never saw
    assert members("val")["identity"] and members("val")["attribute"]                 # its own training people
    json_path = root / "phantom.json"
    json_path.write_text(json.dumps({"phantom": False}))                              # the same folder, as real data
    r = CliRunner().invoke(cli, ["--device", "cpu", "train", "identity", str(root), *common, "--embed-dim", "8",
                                 "--out", str(tmp_path / "real.pt")])
    assert r.exit_code == 0, r.output
    assert "phantom" not in load_checkpoint(tmp_path / "real.pt")["extra"]


def test_the_summary_keeps_the_verdicts_n():
    """EvaluationResult.summary() gave the verdict's residual risk and utility share n = None."""
    from medanon.api.result import _summary

    calib = {k: {"linkability": {"risk": _risk(0.9, 0.7, 1.0) if k in COPIES else _risk(0.0, 0.0, 0.1)}}
             for k in KNOWN}
    risk = {**_risk(0.4, 0.2, 0.6), "n": 148, "attack": {"patients": 37}}
    rel = {"name": "R", "attacks": {"linkability": {"risk": risk}},
           "utility": {"grade": {"n_test": 63, "n_test_patients": 21, "release": {"kappa": {"mean": 0.5}},
                                 "real_same_n": {"kappa": {"mean": 0.6}}}}}
    rel["validity"] = validity(rel, calibration_table(calib), checks={}, trained_on_members={})
    rel["verdict"] = verdict(rel)
    got = {r["metric"]: r for r in _summary(rel) if r["attack"] == "verdict"}
    assert got["residual_risk"]["n"] == 148 and got["residual_risk"]["value"] == 0.4
    assert got["utility_kept grade kappa"]["n"] == 63 and abs(got["utility_kept grade kappa"]["value"] - 5 / 6) < 1e-9


def test_each_calibration_cell_carries_its_n_into_the_report():
    from medanon.evaluate.report_verdict import calibration_section

    def risk(r, lo, hi):
        return {**_risk(r, lo, hi), "n": 40, "attack": {"trials": 40, "patients": 14},
                "control": {"trials": 16, "patients": 4}}
    seen = _attacks(risk(0.9, 0.7, 1.0))
    null = _attacks(risk(0.0, 0.0, 0.1))
    table = calibration_table({"copy": seen, "jpeg": seen, "shift": seen, "mirror": seen, "constant": null,
                               "noise": null})
    assert table["nearest"]["copy"]["n"] == 40 and table["nearest"]["noise"]["patients"] == 14
    html = calibration_section({"calibration": {"table": table, "releases": {}}})
    assert html.count("n=40 member images, 14 patients; control n=16, 4 patients") == 6
    # a reason quotes a known-answer release's residual as such, with its N (not as the release's own risk)
    weak = calibration_table({"copy": _attacks(risk(0.3, 0.1, 0.5)), "jpeg": seen, "shift": seen, "mirror": seen,
                              "constant": null, "noise": null})["nearest"]["reason"]
    assert "misses an exact copy (on that known-answer release: residual 0.30 [0.10, 0.50], n=40, 14 patients" in weak


def test_a_tie_at_the_top_goes_to_the_surer_row_whatever_the_order_the_attacks_were_stored_in(tmp_path):
    """Two valid rows at risk 1.00: the verdict named whichever came first in the results, and results read back
    from the cache (keys sorted) came in another order than freshly computed ones, so a rerun named another attack."""
    from medanon.evaluate.cache import Cache

    sure, loose = _risk(1.0, 0.9, 1.0), _risk(1.0, 0.6, 1.0)
    calib = {k: {a: {"risk": _risk(0.9, 0.7, 1.0) if k in COPIES else _risk(0.0, 0.0, 0.1)}
                 for a in ("nearest", "linkability")} for k in KNOWN}
    table = calibration_table(calib)
    for order in (("linkability", "nearest"), ("nearest", "linkability")):
        attacks = {a: {"risk": sure if a == "linkability" else loose} for a in order}
        rel = {"name": "R", "utility": {}, "attacks": attacks}
        rel["validity"] = validity(rel, table, checks={}, trained_on_members={})
        assert verdict(rel)["attack"] == "linkability"
    cache = Cache(tmp_path / "c")
    fresh = cache.save_json("x", {"b": (1, 2), "a": np.float64(0.5)})
    assert list(fresh) == ["a", "b"] and fresh == cache.load_json("x") and fresh["b"] == [1, 2]


def test_a_calibration_cell_against_a_baseline_names_that_baseline():
    """Every baseline cell read "against random guessing", also for the attribute attack (the most frequent class)
    and membership top-K (the exact chance of a draw)."""
    from medanon.evaluate.report_verdict import _n

    cell = {"n": 60, "patients": 20, "against": "baseline", "baseline_is": "the most frequent class (0.75)"}
    assert "against a baseline: the most frequent class (0.75)" in _n(cell, "attribute")
    assert "against a baseline: random guessing" in _n({**cell, "baseline_is": None}, "attribute")


def test_the_others_null_is_another_person_of_the_same_grade():
    """An attack that takes a shared grade for identity must fail the others release; one of random other people
    would pass it on the grade mix alone."""
    from medanon.evaluate.known_answers import matched_others

    nan = float("nan")
    source = np.array([0.0, 0.0, 2.0, 4.0, nan, 2.0, 2.0])
    other = np.array([2.0, 0.0, 1.0, 2.0, 0.0, nan])
    pick = matched_others(source, other, seed=0)
    assert [other[i] for i in pick[[0, 1, 2, 5, 6]]] == [0.0, 0.0, 2.0, 2.0, 2.0]
    assert pick[0] != pick[1] and pick[2] != pick[5] and pick[2] == pick[6]     # cycling through those of its grade
    assert 0 <= pick[3] < len(other) and 0 <= pick[4] < len(other)             # no one of grade 4, or no grade
    assert (matched_others(source, other, seed=0) == pick).all()


def test_an_attacker_checkpoint_trained_on_the_members_is_recognised_by_its_recorded_patients(tmp_path):
    """``medanon train identity`` records its dataset (the files' digest) and the digest of its training patients;
    trained on this dataset's members (its default split, train), the evaluation says so and counts the network as
    trained on the members. The same ids of another dataset (every phantom numbers its people P00001, ...) or ids
    alone (no dataset recorded) are no evidence."""
    from types import SimpleNamespace

    import torch

    from medanon.checkpoint import save_checkpoint
    from medanon.evaluate.calibration import _checkpoint_people
    from medanon.evaluate.context import checkpoint_trained_on
    from medanon.train.identity import patients_digest

    patients = np.array(["a", "a", "b", "b", "c", "c", "d", "d"])
    split = np.array(["train"] * 4 + ["test"] * 4)
    real = SimpleNamespace(patients=patients, split=split, root=tmp_path / "real", files_sha256="f" * 64)
    ctx = SimpleNamespace(cfg=SimpleNamespace(source_split="train", heldout_split="test"), real=real,
                          src=np.flatnonzero(split == "train"), held=np.flatnonzero(split == "test"))
    state = {"model": {"w": torch.zeros(1)}}

    def ckpt(name, extra):
        return str(save_checkpoint(tmp_path / name, kind="identity", config={}, state=state, extra=extra))

    def data(ids, source="f" * 64, split="train"):
        return {"data": {"split": split, "images": 2 * len(ids), "source": {"sha256": source},
                         "patients_digest": patients_digest(ids)}}

    members = ckpt("m.pt", data(["b", "a"]))
    assert "exactly the release's members (the 'train' split)" in checkpoint_trained_on(members, ctx)
    assert "'train' split of its dataset (4 images)" in checkpoint_trained_on(members)
    assert _checkpoint_people(members, ctx) == ["a", "b"]
    assert "the members and the controls" in checkpoint_trained_on(ckpt("b.pt", data(list("abcd"), split="all")),
                                                                    ctx)
    elsewhere = ckpt("e.pt", data(["a", "b"], source="0" * 64))                    # the same ids, another dataset
    assert _checkpoint_people(elsewhere, ctx) == [] and "exactly" not in checkpoint_trained_on(elsewhere, ctx)
    ids_only = ckpt("i.pt", {"patients_digest": patients_digest(["a", "b"])})       # an API run: no dataset
    assert _checkpoint_people(ids_only, ctx) == [] and "exactly" not in checkpoint_trained_on(ids_only, ctx)
    others = ckpt("o.pt", data(["x", "y"], split="val"))
    assert _checkpoint_people(others, ctx) == [] and "exactly" not in checkpoint_trained_on(others, ctx)
    assert _checkpoint_people(ckpt("n.pt", {}), ctx) == []
    assert "not known here" in checkpoint_trained_on(str(tmp_path / "n.pt"), ctx)


def test_near_copies_by_identity_are_a_finding_only_beyond_new_peoples_rate_with_their_own_interval():
    """5 of 9 released images over the identity threshold against new people's 17 % [0 %, 50 %] read as "near-copies
    by identity": the count was compared with the control's bound alone, on a threshold set on 3 patients."""
    from medanon.evaluate.verdict_text import exposure

    def screen(k: int, n: int, hi: float) -> dict:
        return {"copies": 0, "n": n, "near_copies_pixel": 0, "near_copies_identity": k,
                "control": {"identity_rate": hi / 3, "identity_rate_ci": [0.0, hi], "identity_n": 6,
                            "pixel_rate_ci": [0.0, 0.1]}}

    assert not exposure(screen(5, 9, 0.5))["identity_beyond_control"]
    assert exposure(screen(18, 20, 0.2))["identity_beyond_control"]
    over_patients = {**screen(5, 9, 0.25), "near_copies_identity_ci": [0.212, 0.863]}   # the screen's own interval
    assert not exposure(over_patients)["identity_beyond_control"]                       # (Wilson's: [0.27, 0.81])
