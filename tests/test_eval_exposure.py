"""What the near-copy screen finds without the mapping reaches the verdict: copies of real images (within one grey
level), copies of held-out (control) patients, copies the mapping does not explain; averages are not called copies.
Inference needs the mapping; a top-K p-value below chance is not significant; a residual whose attack draws show no
spread keeps the attack's interval."""

import numpy as np
import pytest
import torch

from medanon.evaluate.attacks.bootstrap import bootstrap_p, no_spread
from medanon.evaluate.attacks.risk import Rate, residual_risk
from medanon.evaluate.calibration import validity, verdict
from medanon.evaluate.nearcopy import screen


@pytest.fixture(scope="module")
def real():
    """40 patients of 2 images each, second images close to the first; rows 0..59 the source split, 60..79 held
    out."""
    g = torch.Generator().manual_seed(0)
    first = torch.rand(40, 3, 8, 8, generator=g) * 2 - 1
    images = torch.stack([first, (first + 0.05 * torch.randn(40, 3, 8, 8, generator=g)).clamp(-1, 1)], 1)
    images = images.flatten(0, 1)                                      # patient p: rows 2p, 2p + 1
    patients = np.repeat(np.arange(40), 2).astype(str)
    emb = torch.randn(80, 16, generator=g).numpy()
    return images, patients, emb, np.arange(60), np.arange(60, 80)


def _screen(real, release, sources):
    images, patients, emb, src, held = real
    return screen(release_images=release, release_emb=torch.randn(len(release), 16).numpy(), real_images=images,
                  real_emb=emb, source_rows=src, heldout_rows=held, heldout_patients=patients[held],
                  real_patients=patients, record_sources=sources)


def test_copies_of_one_patient_among_noise_are_counted_with_their_patient(real):
    images = real[0]
    noise = torch.rand(20, 3, 8, 8, generator=torch.Generator().manual_seed(1)) * 2 - 1
    release = torch.cat([images[[4, 5]], noise])                      # patient 2's two images, then noise
    sources = [[4], [5], *[[i] for i in range(6, 26)]]
    s = _screen(real, release, sources)
    assert (s["copies"], s["copy_patients"]) == (2, 1)
    assert s["copies_not_of_own_source"] == 0 and s["heldout"]["copies"] == 0
    rel = {"name": "R", "utility": {}, "attacks": {}, "screening": s, "validity": {}}
    v = verdict(rel)
    assert v["exposure"]["copies"] == 2
    assert v["sentence"].startswith("R holds 2 images within one grey level (RMS) of a real image of 1 patient ")


def test_mirrored_copies_are_copies(real):
    """A left-right mirror of a real image is a copy of it (the two eyes are mirror images): counted as one, in either
    orientation, by pixels and, given the mirrored embeddings, by identity; the held-out control goes through the
    same two orientations."""
    images, patients, emb, src, held = real
    release = images[list(range(0, 20))].flip(-1)                    # mirrored copies of rows 0..19
    s = _screen(real, release, [[i] for i in range(20)])
    assert (s["copies"], s["copy_patients"], s["mirrored"]) == (20, 10, 20)
    assert s["copies_of_one_source"] == 20 and s["closest"][0]["mirrored"]
    v = verdict({"name": "R", "utility": {}, "attacks": {}, "screening": s, "validity": {}})
    assert v["exposure"]["copies"] == 20 and v["sentence"].startswith("R holds 20 images within one grey level")
    by_id = screen(release_images=release, release_emb=torch.randn(20, 16).numpy(), real_images=images,
                   real_emb=emb, source_rows=src, heldout_rows=held, heldout_patients=patients[held],
                   real_patients=patients, record_sources=[[i] for i in range(20)],
                   release_emb_mirrored=emb[:20],                    # a mirrored copy, mirrored back: the source
                   real_emb_mirrored=torch.randn(80, 16, generator=torch.Generator().manual_seed(3)).numpy())
    assert by_id["near_copies_identity"] == 20
    with pytest.raises(ValueError, match="mirrored embeddings of both"):
        screen(release_images=release, release_emb=emb[:20], real_images=images, real_emb=emb, source_rows=src,
               heldout_rows=held, record_sources=None, release_emb_mirrored=emb[:20])


def test_identity_and_held_out_near_copies_reach_the_sentence(real):
    """Near-copies found only by identity, and near-copies (not copies) of held-out patients, are said when they are
    more than new people's images give."""
    e = {"copies": 0, "n": 20, "mapped": True, "near_copies": 0, "near_copies_beyond_control": False,
         "identity_near_copies": 6, "identity_control_rate": 0.05, "identity_beyond_control": True,
         "heldout_copies": 0, "heldout_near_copies": 7, "heldout_near_beyond_control": True}
    from medanon.evaluate.verdict_text import _exposure_sentences

    said = " ".join(_exposure_sentences("R", e))
    assert "6 of 20 released images of R are near-copies by identity" in said
    assert "near-copies of held-out patients' images, 7 by pixels" in said and "no attack row is valid" in said
    images = real[0]
    g = torch.Generator().manual_seed(5)
    near_held = (images[60:80] + 0.01 * torch.randn(20, 3, 8, 8, generator=g)).clamp(-1, 1)  # held-out, nudged
    s = _screen(real, near_held, [[i] for i in range(20)])
    v = verdict({"name": "R", "utility": {}, "attacks": {}, "screening": s, "validity": {}})
    assert s["heldout"]["copies"] == 0 and v["exposure"]["heldout_near_beyond_control"]
    assert "near-copies of held-out patients' images" in v["sentence"]
    averages = torch.stack([images[[i, i + 1]].mean(0) for i in range(0, 40, 2)])     # of source images only
    sa = _screen(real, averages, [[i, i + 1] for i in range(0, 40, 2)])
    assert sa["heldout"]["near_copies_not_of_sources"] == 0
    assert not verdict({"name": "R", "utility": {}, "attacks": {}, "validity": {},
                        "screening": sa})["exposure"]["heldout_near_beyond_control"]


def test_held_out_near_copies_by_identity_void_every_row(real):
    """Held-out patients' images changed in brightness or compression can pass the pixel screen; to the identity
    network they are still those people: the screen counts them against the held-out images too, the sentence says
    so and every attack row is invalid (they are the controls). Noise with the identity of nobody in particular is
    not flagged."""
    images, patients, emb, src, held = real
    noise = torch.rand(20, 3, 8, 8, generator=torch.Generator().manual_seed(2)) * 2 - 1   # pixels near nobody
    s = screen(release_images=noise, release_emb=emb[held], real_images=images, real_emb=emb, source_rows=src,
               heldout_rows=held, heldout_patients=patients[held], real_patients=patients,
               record_sources=[[i] for i in range(20)])
    assert s["heldout"]["near_copies_identity_not_of_sources"] == 20 and s["heldout"]["near_copies"] == 0
    risk = {"residual_risk": {"risk": 0.0, "ci": [0.0, 0.1]}, "attack": {}, "control_is": "held-out patients"}
    rel = {"name": "R", "utility": {}, "attacks": {"nearest": {"risk": risk}}, "screening": s}
    rel["validity"] = validity(rel, {}, checks={}, trained_on_members={})
    assert not rel["validity"]["nearest"]["valid"]
    assert "near-copies of held-out patients' images" in rel["validity"]["nearest"]["reason"]
    v = verdict(rel)
    assert v["exposure"]["heldout_identity_beyond_control"] and "20 by identity" in v["sentence"]
    other = screen(release_images=noise, release_emb=torch.randn(20, 16, generator=torch.Generator().manual_seed(9))
                   .numpy(), real_images=images, real_emb=emb, source_rows=src, heldout_rows=held,
                   heldout_patients=patients[held], real_patients=patients, record_sources=[[i] for i in range(20)])
    assert other["heldout"]["near_copies_identity_not_of_sources"] <= 1


def test_copies_the_mapping_does_not_explain_are_named(real):
    images = real[0]
    release = images[list(range(0, 20))]                             # exact copies of rows 0..19
    wrong = [[(i + 2) % 60] for i in range(20)]                      # the mapping names another patient
    s = _screen(real, release, wrong)
    assert s["copies_not_of_own_source"] == 20
    assert "the mapping does not name as their source" in verdict({"name": "R", "utility": {}, "attacks": {},
                                                           "screening": s, "validity": {}})["sentence"]
    risk = {"residual_risk": {"risk": 0.03, "ci": [0.0, 0.07]}, "attack": {}, "control_is": "held-out patients"}
    rel = {"name": "R", "utility": {}, "attacks": {"linkability": {"risk": risk}}, "screening": s}
    row = validity(rel, {}, checks={}, trained_on_members={})["linkability"]
    assert not row["valid"] and "the mapping does not describe this release" in row["reason"]
    assert _screen(real, release, [[i] for i in range(20)])["copies_not_of_own_source"] == 0


def test_copies_of_the_attackers_split_make_every_row_invalid(real):
    """Known answer: a release holding copies of people of neither the source nor the held-out split (the
    attacker's split), under a mapping that names source patients, is caught by the screen and voids every row; an
    honest release of the source split copies none of them."""
    images, patients, emb, _, held = real
    src, other = np.arange(40), np.arange(40, 60)

    def run(release, sources):
        return screen(release_images=release, release_emb=torch.randn(len(release), 16).numpy(), real_images=images,
                      real_emb=emb, source_rows=src, heldout_rows=held, heldout_patients=patients[held],
                      real_patients=patients, record_sources=sources, other_rows=other)

    s = run(images[40:50], [[i] for i in range(10)])                 # the attacker's split, named as sources
    assert s["other"]["copies"] == 10 and s["copies"] == 0 and s["copies_not_of_own_source"] == 0
    risk = {"residual_risk": {"risk": 0.6, "ci": [0.2, 1.0]}, "attack": {}, "control_is": "held-out patients"}
    rel = {"name": "R", "utility": {}, "attacks": {"linkability": {"risk": risk}}, "screening": s}
    row = validity(rel, {}, checks={}, trained_on_members={})["linkability"]
    assert not row["valid"] and "outside the source and held-out splits" in row["reason"]
    sentence = verdict({**rel, "validity": {"linkability": row}})["sentence"]
    assert "copies of real images outside its source split" in sentence
    assert run(images[:10], [[i] for i in range(10)])["other"]["copies"] == 0


def test_copies_of_held_out_patients_make_every_row_invalid(real):
    images = real[0]
    release = images[60:70]                                          # held-out patients' images
    s = _screen(real, release, [[i] for i in range(10)])             # the mapping claims members
    assert s["heldout"]["copies"] == 10
    rel = {"name": "R", "utility": {}, "screening": s,
           "attacks": {"nearest": {"risk": {"residual_risk": {"risk": 0.05, "ci": [0.0, 0.15]}, "attack": {},
                                            "control_is": "held-out patients"}}}}
    copy = {"nearest": {"risk": {"residual_risk": {"risk": 0.9, "ci": [0.7, 1.0]}}}}
    null = {"nearest": {"risk": {"residual_risk": {"risk": 0.0, "ci": [0.0, 0.1]}}}}
    from medanon.evaluate.calibration import calibration_table

    table = calibration_table({"copy": copy, "jpeg": copy, "shift": copy, "mirror": copy, "constant": null,
                               "noise": null})
    rel["validity"] = validity(rel, table, checks={}, trained_on_members={})
    assert not rel["validity"]["nearest"]["valid"]
    assert "copies of held-out patients' images" in rel["validity"]["nearest"]["reason"]
    assert "risk" not in verdict(rel)


def test_an_honest_release_shows_no_exposure(real):
    noise = torch.rand(20, 3, 8, 8, generator=torch.Generator().manual_seed(2)) * 2 - 1
    s = _screen(real, noise, [[i] for i in range(20)])
    e = verdict({"name": "R", "utility": {}, "attacks": {}, "screening": s, "validity": {}})["exposure"]
    assert e["copies"] == 0 and not e["near_copies_beyond_control"] and e["heldout_copies"] == 0
    assert not e["copies_not_of_own_source"]
    from medanon.evaluate.report_verdict import _exposure

    said = _exposure(e)                                  # "none found" is a claim about a sample: it carries its N
    assert said.startswith("none found") and f"n={len(noise)} released images against " in said
    assert f"{e['n_source_images']} source and {e['n_heldout_images']} held-out images" in said


def test_the_no_valid_attack_sentence_gives_the_actual_reasons():
    rel = {"name": "R", "utility": {}, "attacks": {"inference": {"skipped": "no mapping: it says whose"},
                                                   "nearest": {"risk": {"residual_risk": {"risk": 0.1, "ci": [0, .2]},
                                                                        "attack": {"patients": 3}}}},
           "validity": {"nearest": {"valid": False, "reason": "its targets are 3 patient clusters"}}}
    sentence = verdict(rel)["sentence"]
    assert "its targets are 3 patient clusters" in sentence and "inference: no mapping" in sentence


def test_a_top_k_hit_rate_below_chance_is_not_significant():
    assert bootstrap_p(np.zeros(400), 0.008, alternative="greater") == 1.0
    assert bootstrap_p(np.full(400, 0.9), 0.008, alternative="greater") == pytest.approx(1 / 401)
    with pytest.raises(ValueError):
        bootstrap_p(np.zeros(3), 0.5, alternative="less")


def test_draws_equal_up_to_rounding_show_no_spread_and_keep_the_attacks_interval():
    draws = np.full(400, 0.0085) + np.arange(400) * 1e-19                # sums of one rate, last bits apart
    assert no_spread(draws) and not no_spread(np.r_[draws, 0.1])
    attack = Rate(value=0.0085, error=0.05, successes=1, trials=117, interval=(0.0006, 0.105), draws=draws,
                  method="Wilson with one trial per patient cluster")
    control = Rate(value=0.0085, error=0.0, successes=1, trials=117, exact=0.0085)
    r = residual_risk(attack, control)
    assert r.ci[1] > 0.09                                            # not collapsed to [0, 0]


def test_a_control_that_always_succeeds_leaves_the_residual_undefined_and_says_why():
    attack = Rate(value=0.8, error=0.1, successes=4, trials=5)
    r = residual_risk(attack, Rate(value=1.0, error=0.0, successes=5, trials=5, exact=1.0))
    assert np.isnan(r.value) and all(np.isnan(r.ci)) and r.method.startswith("undefined: the control succeeds")


def test_a_siamese_network_at_chance_on_held_out_pairs_is_not_valid():
    from medanon.evaluate.calibration import calibration_table

    risk = {"residual_risk": {"risk": 0.2, "ci": [0.05, 0.4]}, "attack": {}, "control_is": "held-out patients"}
    copy = {"siamese": {"risk": {"residual_risk": {"risk": 0.9, "ci": [0.7, 1.0]}}}}
    null = {"siamese": {"risk": {"residual_risk": {"risk": 0.0, "ci": [0.0, 0.1]}}}}
    table = calibration_table({"copy": copy, "jpeg": copy, "shift": copy, "mirror": copy, "constant": null,
                               "noise": null})
    for ci, valid in (([0.45, 0.6], False), ([0.7, 0.9], True)):
        rel = {"name": "R", "utility": {},
               "attacks": {"siamese": {"risk": risk, "reference": {"AUC": sum(ci) / 2, "AUC_ci": ci}}}}
        row = validity(rel, table, checks={}, trained_on_members={})["siamese"]
        assert row["valid"] is valid and (valid or "Siamese network does not tell" in row["reason"])


def test_members_without_a_control_in_their_stratum_are_left_out_of_the_attack_rate():
    from medanon.evaluate.attacks.balance import Balance
    from medanon.evaluate.attacks.nearest import membership_from_scores

    rng = np.random.default_rng(0)
    members, controls = rng.random((40, 5)), rng.random((40, 5))
    members[30:] += 5.0                                              # grade 3 members: always claimed
    grade_m = np.r_[np.zeros(30), np.full(10, 3.0)]                  # no control patient has grade 3
    b = Balance("grade", grade_m, np.zeros(40))
    out = membership_from_scores(members, controls, None, member_groups=np.arange(40).astype(str),
                                 control_groups=(np.arange(40) + 100).astype(str), balance=b)
    assert out["members_left_out"] == 10 and out["n_members"] == 30
    # said where the rate is shown: on the risk row and in the reweighting's record (it read 0: computed after)
    assert out["risk"]["members_left_out"] == 10
    assert out["risk"]["control"]["balanced"]["uncovered_member_share"] == pytest.approx(0.25)
    from medanon.evaluate.report_risks import _risks

    html = _risks({"releases": [{"name": "R", "attacks": {"nearest": out}, "validity": {}}]})
    assert "10 member images left out: no control patient shares their grade" in html
    plain = membership_from_scores(members, controls, None, member_groups=np.arange(40).astype(str),
                                   control_groups=(np.arange(40) + 100).astype(str))
    assert plain["members_left_out"] == 0 and plain["n_members"] == 40
    assert out["risk"]["attack"]["rate"] < plain["risk"]["attack"]["rate"]   # the uncompared stratum is out


def test_a_rate_whose_interval_counts_records_as_independent_is_not_valid():
    """Without a mapping the attribute attack's records reach it without patients: a Wilson interval over records
    treats one patient's several records as independent."""
    from medanon.evaluate.calibration import calibration_table

    copy = {"attribute": {"risk": {"residual_risk": {"risk": 0.9, "ci": [0.7, 1.0]}}}}
    null = {"attribute": {"risk": {"residual_risk": {"risk": 0.0, "ci": [0.0, 0.1]}}}}
    table = calibration_table({"copy": copy, "jpeg": copy, "shift": copy, "mirror": copy, "constant": null,
                               "noise": null})
    for attack, valid in (({"rate": 0.7, "ci": [0.6, 0.8], "trials": 117, "interval": "Wilson"}, False),
                          ({"rate": 0.7, "ci": [0.5, 0.85], "trials": 117, "patients": 39,
                            "interval": "patient cluster bootstrap"}, True)):
        risk = {"residual_risk": {"risk": 0.3, "ci": [0.1, 0.5]}, "attack": attack, "control_is": "none",
                "against": "baseline"}
        rel = {"name": "R", "utility": {}, "attacks": {"attribute": {"risk": risk}}}
        row = validity(rel, table, checks={}, trained_on_members={})["attribute"]
        assert row["valid"] is valid and (valid or "records as independent" in row["reason"])


def test_averages_of_two_people_are_not_called_copies(real):
    """A k = 2 average lies between its sources: pixel-near to real images, but a copy of no one; with the mapping
    the verdict says nothing of it (the demo's k-Same-Pixel read "copying 33 patients")."""
    images = real[0]
    pairs = [[2 * i, 2 * i + 2] for i in range(10)]                  # two patients per record
    release = torch.stack([images[a].add(images[b]).div(2) for a, b in pairs])
    s = _screen(real, release, pairs)
    assert s["copies"] == 0 and s["copies_of_one_source"] == 0
    v = verdict({"name": "R", "utility": {}, "attacks": {}, "screening": s, "validity": {}})
    assert not v["exposure"]["near_copies_beyond_control"] and v["sentence"].startswith("No attack on R is valid")


def test_members_kept_in_covered_strata_stay_covered_for_a_numeric_label():
    """Dropping members must not move a numeric label's quintile bins (re-binning left some uncovered again)."""
    from medanon.evaluate.attacks.balance import Balance, covered

    for seed in range(300):
        rng = np.random.default_rng(seed)
        b = Balance("age", rng.integers(20, 90, 40).astype(float), rng.integers(20, 60, 12).astype(float))
        keep = covered(b)
        if keep.any():
            assert covered(b.keep_members(keep)).all(), seed


def test_a_k_the_mapping_does_not_bear_out_leads_the_sentence():
    """A release claiming k = 5 whose mapping shows records of one person: the claim is false for them, and the
    sentence says so first, counted from the mapping; a release whose records all stand for 5 people says nothing."""
    from pathlib import Path

    from medanon.evaluate.cautions import k_claim
    from medanon.evaluate.inputs import ReleaseData

    patients = np.repeat([f"P{i}" for i in range(12)], 2)             # rows 2p, 2p + 1: patient p
    sources = [list(range(0, 10)), list(range(10, 20)), [20, 21], [22]]
    rel = ReleaseData(path=Path("R"), name="R", manifest={"privacy": {"k": 5}}, rows=[], images=torch.zeros(4, 1, 2, 2),
                      digest="d", sources=sources)
    kc = k_claim(rel, patients)
    assert (kc["k"], kc["records"], kc["below_k"], kc["smallest"]) == (5, 4, 2, 1)
    v = verdict({"name": "R", "utility": {}, "attacks": {}, "validity": {}, "k_claim": kc})
    assert v["sentence"].startswith("R's mapping shows 2 of its 4 records standing for fewer than the k = 5 people")
    rel.sources = sources[:2]
    assert k_claim(rel, patients)["below_k"] == 0
    assert "mapping shows" not in verdict({"name": "R", "utility": {}, "attacks": {}, "validity": {},
                                          "k_claim": k_claim(rel, patients)})["sentence"]
    rel.manifest = {"privacy": {"k": None}}
    assert k_claim(rel, patients) is None


def test_a_screen_whose_thresholds_rest_on_few_patients_says_so(real):
    """10 held-out patients set the pixel threshold and 5 the identity one: a 1 % tail of so few is not resolved
    (the identity control came out at 6 % in a run), which the report did not say."""
    from medanon.evaluate.report_attacks import _screening

    images = real[0]
    s = _screen(real, images[:4], [[0], [1], [2], [3]])
    assert s["threshold_patients"] == {"pixels": 10, "identity": 5} and "fewer than 10" in s["warning"]
    page = _screening({"releases": [{"name": "R", "screening": s}]}, {})
    assert "<b>Few patients</b>: the thresholds rest on 10 held-out patients (pixels) and 5 (identity)" in page


def test_utility_on_one_held_out_patient_is_said_to_have_no_interval():
    """One held-out patient: no patient bootstrap (the values carry no interval), and the note says that rather
    than that the intervals are rough; 2 to 19 patients: rough; 20 or more: nothing to say."""
    from types import SimpleNamespace

    import numpy as np

    from medanon.evaluate.cautions import few_test_patients

    def notes(patients, labelled=None):
        held = np.arange(len(patients))
        ctx = SimpleNamespace(cfg=SimpleNamespace(utility=SimpleNamespace(bootstrap=True)),
                              real=SimpleNamespace(patients=np.asarray(patients)), held=held,
                              test_set=lambda task: (held[:labelled], None))
        return few_test_patients(ctx, [SimpleNamespace(label="grade")])

    one = notes(["a", "a", "a"])
    assert len(one) == 1 and "no interval" in one[0] and "rough" not in one[0]
    assert "rough" in notes(["a", "a", "b"])[0] and "have no grade value" not in notes(["a", "a", "b"])[0]
    assert notes([str(i) for i in range(20)]) == []
    # blank or uncertain labels leave fewer test images than held-out ones: the note says why
    few = notes([str(i) for i in range(20)], labelled=3)
    assert len(few) == 1 and "tested on 3 images of 3 held-out patient(s) (17 of the 20 held-out images have no " \
        "grade value: blank or uncertain)" in few[0], few
