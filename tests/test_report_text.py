"""The report's text: privacy statements in words (from the statements the methods really write), table layout."""

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from medanon.anonymize.gmia import GMIAConfig
from medanon.anonymize.gmia_release import gmia_privacy
from medanon.anonymize.ksame import KSameConfig, privacy_statement
from medanon.anonymize.ldp import LaplaceMechanism, calibrate
from medanon.anonymize.privacy import DataDependentRelease
from medanon.anonymize.snow import snow_privacy, vs_snow_privacy
from medanon.evaluate import privacy_text
from medanon.evaluate.report import render_html


def _laplace(eps: float, **kw) -> dict:
    cal = calibrate([torch.randn(20, 16, generator=torch.Generator().manual_seed(0))], space="pixel")
    with pytest.warns(UserWarning, match="no formal protection|NO differential-privacy"):   # weak budgets warn
        warnings.simplefilter("ignore", DataDependentRelease)
        return LaplaceMechanism(cal, epsilon=eps, per_element=True, **kw).privacy(space_description="pixels")


def test_headlines_state_each_claim_with_its_numbers():
    assert privacy_text.headline(privacy_statement(KSameConfig(method="ksalsa", k=5), None)) == \
        "k-anonymity: k = 5 patients per record"
    from medanon.anonymize.ksame_statement import ksame_models_overlap
    from medanon.anonymize.privacy import CalibrationOverlap

    with pytest.warns(CalibrationOverlap):
        plain = privacy_statement(KSameConfig(method="ksalsa", k=5), None, uses_models=True)
        trained = ksame_models_overlap(plain, {"restyle-map-fundus64.pt": (7, {"seed": 0, "patients": 500})})
    assert privacy_text.headline(trained) == \
        "k-anonymity: k = 5 patients per record; its models were trained on 7 of the released patients"
    h = privacy_text.headline(_laplace(100.0))
    assert h == ("ε-local DP per image (δ = 0): ε = 1600 (tight 636.3) (= 100 per element × D = 16; not a per-pixel "
                 "guarantee); n·ε for a patient with n images; vacuous at this ε")
    counted = {**_laplace(100.0), "epsilon_patient_max": 6400.0, "max_images_per_patient": 4}
    assert "; ε ≤ 6400 per patient in this release (4 images at most; n·ε for n images); vacuous" in \
        privacy_text.headline(counted)
    assert privacy_text.headline(_laplace(math.inf, clip=False)) == "no formal guarantee (ε = ∞, no noise)"
    h = privacy_text.headline(snow_privacy(0.3, 8, 8, fill="grey"))
    assert h == ("none for images or patients; for one pixel position, the paper's (0, δ)-DP bound with δ = 0.703 "
                 "(each pixel released unchanged with probability δ)")                        # 1 - 19/64
    assert privacy_text.headline(snow_privacy(0.3, 8, 8, fill="dataset")) == \
        "no formal guarantee (data-derived fill)"
    assert privacy_text.headline(snow_privacy(0.3, 8, 8, seeded=True)) == \
        "no formal guarantee (reproducible randomness, testing only)"
    assert privacy_text.headline(vs_snow_privacy(0.3, {"method": "unet"})) == "no formal guarantee"
    assert privacy_text.headline(gmia_privacy(GMIAConfig(), {})) == "no formal guarantee"
    inverted = privacy_text.headline(privacy_statement(KSameConfig(method="inverted", k=1), None))
    assert inverted.startswith("no formal guarantee (GAN-Inverted releases")
    assert privacy_text.headline({}) == "no privacy statement in the manifest"


def test_prose_keeps_every_recorded_value_and_escapes_html():
    priv = snow_privacy(0.1, 8, 8, fill="grey")
    priv["odd_key"] = "<script>x</script>"
    text = privacy_text.prose_html(priv)
    for heading in ("What is guaranteed", "Protected unit", "Mechanism", "Fill value", "What is not protected",
                    "How the protection is measured", "Other recorded values"):
        assert f"<h4>{heading}</h4>" in text
    for item in priv["not_protected"]:
        assert item.replace("'", "&#x27;") in text
    assert "&lt;script&gt;" in text and "<script>" not in text
    assert "<code>epsilon</code>: 0" in text and "<code>delta</code>: 0.9" in text


def _minimal_report(studies: dict) -> dict:
    rel = {"name": "dpglow-eps1e2", "method": "dpglow", "setting": "eps=1e2", "records": 3, "counts": {},
           "privacy": _laplace(100.0), "mapping": None, "fidelity": {"n": 3}, "utility": {}, "attacks": {}}
    return {"phantom": True, "real": {"path": "x", "images": 10, "patients": 5, "modality": "xray",
                                      "split": "csv", "source_split": "train", "heldout_split": "test",
                                      "source_images": 6, "heldout_images": 4},
            "sample_sizes": {"fid_per_release": 3, "fid_reference": 3, "utility_test": {}}, "tasks": [],
            "networks": {"inception": None, "identity": {}}, "device": "cpu", "seconds": 1.0,
            "config": {"size": 32, "fidelity": {"in_domain": False}}, "controls": {"fidelity": {"n": 3}},
            "releases": [rel], "notes": [], "studies": studies}


def test_report_renders_statements_and_dpglow_table3(tmp_path: Path):
    fig = tmp_path / "fig.png"
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(fig)
    table3 = {"rows": [{"epsilon": "inf (no clip)", "epsilon_image": "inf", "auroc_dpglow": 0.65,
                        "auroc_dpglow_ci95": [0.57, 0.73], "auroc_ldp_image": 0.64, "auroc_ldp_image_ci95": [0.5, 0.7]},
                       {"epsilon": "1e2", "epsilon_image": 409600.0, "auroc_dpglow": 0.6123,
                        "auroc_dpglow_ci95": [0.5, 0.7], "auroc_ldp_image": 0.4987,
                        "auroc_ldp_image_ci95": [0.4, 0.6]}],
              "images": 236, "abnormal": 72, "D": 4096, "alpha": 0.4, "pixel_alpha": 0.4,
              "paper_table3_rsna_512px": {"1e2": {"ldp_image": 0.559, "dpglow": 0.665}},
              "data": {"label": "pneumonia", "test_patients": 59}, "figure": str(fig),
              "interval": "95 % cluster bootstrap over patients (1,000 resamples)"}
    page = render_html(_minimal_report({"dpglow_table3": table3}), {})
    assert "intervals: 95 % cluster bootstrap over patients" in page
    assert "<h2>Privacy statements</h2>" in page and "ε-local DP per image (δ = 0): ε = 1600" in page
    assert "DP-GLOW Table 3" in page and "0.612" in page and "0.499" in page and "0.665" in page
    assert "1e2 per element (× D = 4096 = 4.1e+05 per image)" in page and "per pixel (×" not in page
    assert page.count("data:image/png;base64,") == 1                # the figure, embedded
    assert "{'" not in page and '{"' not in page                    # no raw dict/JSON dumped into the page
    assert "DP-GLOW Table 3" not in render_html(_minimal_report({}), {})


def test_pivot_columns_use_the_papers_parameter_and_fall_back_on_collisions():
    from medanon.evaluate.report import assign_columns, short_setting

    assert short_setting({"k": 5, "weights": "x"}) == "k=5"
    assert short_setting({"p": 0.3, "fill": "dataset"}) == "p=0.3"
    assert short_setting({"epsilon": 100.0, "per_element": True}) == "ε=100/element"
    assert short_setting({"epsilon": 100.0, "per_pixel": True}) == "ε=100/element"       # releases of before
    assert short_setting({"epsilon": "inf", "per_pixel": False}) == "ε=inf/image"
    assert short_setting({"losses": "id+ut", "steps": 10}) == "losses=id+ut"
    assert short_setting({"steps": 10}) is None
    rels = [{"method": "ksalsa", "params": {"k": 5, "steps": 100}, "setting": "k=5, steps=100"},
            {"method": "ksalsa", "params": {"k": 5, "steps": 50}, "setting": "k=5, steps=50"},
            {"method": "kpixel", "params": {"k": 5}, "setting": "k=5"},
            {"method": "other", "params": {"steps": 3}, "setting": "steps=3"}]
    assign_columns(rels)
    assert [r["column"] for r in rels] == ["k=5, steps=100", "k=5, steps=50", "k=5", "steps=3"]
    # alike in every setting (the same k, other released labels): each is named, none left out of a pivot table
    same = [{"method": "kpixel", "params": {"k": 3}, "setting": "k=3", "name": n} for n in ("kpixel-k3", "k3-sex")]
    assign_columns(same)
    assert [r["column"] for r in same] == ["k=3 (kpixel-k3)", "k=3 (k3-sex)"]


def test_prose_names_the_new_parts_of_the_statements():
    """Issue 14: the report's words carry the clip box, the per-patient budget, the labels rule and the basis."""
    ldp = privacy_text.prose_html(_laplace(1.0))
    for heading in ("Clip box", "Per patient", "Assumptions", "What is not protected"):
        assert f"<h4>{heading}</h4>" in ldp
    kpca = privacy_text.prose_html(privacy_statement(KSameConfig(method="kpca", k=5, stratify="grade"), None))
    for heading in ("Released labels", "PCA basis", "What is not protected"):
        assert f"<h4>{heading}</h4>" in kpca
    assert "homogeneous in grade" in kpca


def test_kid_error_kind_is_said_once_when_every_row_shares_it():
    from medanon.evaluate.report import _fidelity

    def fid(n, error):
        return {"n": n, "fid": {"value": 40.0, "ci": [35.0, 45.0]}, "kid": {"mean": 0.01, "sd": 0.002, "error": error}}

    rep = _minimal_report({})
    rep["networks"]["inception"] = {"display_name": "Inception"}
    rep["sample_sizes"]["fid_per_release"] = {"dpglow-eps1e2": 3}
    boot = "sd over 20 bootstrap resamples of both sets"
    rep["controls"] = {"fidelity": fid(3, boot), "fidelity_by_n": {"3": fid(3, boot)}}
    rep["releases"][0]["fidelity"] = fid(3, boot)
    page = _fidelity(rep)
    assert page.count(boot) == 1 and f"KID's ± (sets too large for its interval) is the {boot}." in page
    rep["releases"][0]["fidelity"] = fid(3, "sd over subsets")               # two kinds: each row says its own
    page = _fidelity(rep)
    assert page.count(boot) == 1 and page.count("(sd over subsets)") == 1 and "KID's ± (sets" not in page
    rep["releases"][0]["fidelity"]["kid"]["ci"] = [0.008, 0.013]              # its interval, where there is one
    page = _fidelity(rep)
    assert "10.00 <span class=ci>[8.00, 13.00]</span>" in page and page.count("(sd over subsets)") == 0


def test_the_verdict_links_each_method_to_its_papers_reproduced_claims():
    from medanon.evaluate.report_verdict import verdict_section

    verdict = {"risk": 0.1, "ci": [0.0, 0.2], "attack_name": "nearest", "utility_kept": [], "valid_attacks": 1,
               "invalid_attacks": 0, "sentence": "s"}
    rep = {"releases": [{"name": n, "method": m, "verdict": verdict} for n, m in
                        (("a", "ksalsa"), ("b", "ldp-image"), ("c", "gmia"), ("d", "vs-snow"), ("e", "toy"))]}
    html = verdict_section(rep)
    for anchor in ("k-salsa", "dp-glow", "gmia", "vs-snow"):
        assert f"docs/reproduction.md#{anchor}" in html
    assert html.count("docs/reproduction.md") == 4       # a method of no paper links nothing


def test_each_distinct_statement_is_shown_and_a_page_with_source_images_says_so():
    """Two releases of one method at different ε each show their own statement (the page showed the first
    release's for both, so a vacuous ε read like ε = 1); releases with the same statement share one entry. A page
    that embeds source images carries a banner saying it is as sensitive as the source data."""
    rep = _minimal_report({})
    first = rep["releases"][0]
    rep["releases"] = [first, {**first, "name": "dpglow-eps1e5", "privacy": _laplace(1e5)},
                       {**first, "name": "dpglow-eps1e2-again"}]
    page = render_html(rep, {})
    assert page.count("<details class=stmt>") == 2
    assert "(dpglow-eps1e2, dpglow-eps1e2-again):" in page and "(dpglow-eps1e5):" in page
    assert "ε = 1600" in page and "ε = 1.6e+06" in page
    assert "SOURCE IMAGES" not in page
    grid = {"dpglow-eps1e2": [{"sources": ["AAAA"], "n_sources": 1, "released": "AAAA"}]}
    assert "SOURCE IMAGES: this page shows source images" in render_html(_minimal_report({}), grid)


def test_a_linkability_row_whose_far_is_far_above_the_target_says_its_tar_is_no_risk():
    """A constant release: every impostor pair ties and passes the control's threshold, so TAR = FAR = 1 and F1 0.67
    ranked it above a copy. The row says the threshold does not separate its records; an ordinary row says nothing."""
    from medanon.evaluate.report_attacks import _link_row

    v = {"F1": 0.667, "accuracy": 0.5, "TAR": 1.0, "TAR_ci": [0.9, 1.0], "FAR": 1.0, "FAR_ci": [0.9, 1.0],
         "AUC": 0.5, "AUC_ci": [0.5, 0.5], "genuine_pairs": 10, "impostor_pairs": 90}
    assert "far above the target 0.01" in _link_row("Inner risk — const", v, 0.01)[0]
    ordinary = {**v, "FAR": 0.01, "FAR_ci": [0.0, 0.03]}
    assert _link_row("Inner risk — copy", ordinary, 0.01)[0] == "Inner risk — copy"
    looser = {**v, "FAR": 0.074, "FAR_ci": [0.048, 0.10]}            # 7 times the target, not "far above" it
    assert "FAR 7.4 % is above the target 0.01 beyond its interval" in _link_row("Outer", looser, 0.01)[0]


def test_a_table_2_cell_gives_the_interval_before_the_seeds_sd():
    """A deterministic probe's sd over seeds is 0 and says nothing of the uncertainty: each cell leads with the
    paired patient bootstrap interval, then the sd; without an interval, the sd alone."""
    from medanon.evaluate.report_utility import _seeds_and_ci

    u = {"release": {"kappa": {"mean": 0.306, "sd": 0.0}}, "real_same_n": {"kappa": {"mean": 0.5, "sd": 0.02}},
         "paired_bootstrap": {"kappa": {"release": {"value": 0.306, "ci": [0.2, 0.41]},
                                        "real_same_n": {"value": 0.5, "ci": [0.38, 0.6]}}}}
    assert _seeds_and_ci(u, "kappa", "release") == "0.306 <span class=ci>[0.200, 0.410]</span> " \
                                                   "<span class=ci>± 0.000 sd</span>"
    assert _seeds_and_ci(u, "kappa", "real_same_n").startswith("0.500 <span class=ci>[0.380, 0.600]</span>")
    assert _seeds_and_ci({"release": u["release"]}, "kappa", "release") == "0.306 <span class=ci>± 0.000</span>"


def test_closest_pairs_say_whether_an_average_copies_one_source_or_only_lies_near_it():
    """A k-Same average is near each of its sources by pixels: its grid label says it is one of its sources, not
    that it copies one, unless the screen counted it as a copy of one source; a note explains the flag."""
    from medanon.evaluate.report_attacks import _pair_label, _screening

    base = {"pixel_rmse": 0.05, "cosine": 0.9, "near_copy": True, "real": "", "released": "", "mirrored": False}
    average = base | {"own_source": True, "n_sources": 5, "copy_of_one_source": False}
    copied = base | {"own_source": True, "n_sources": 5, "copy_of_one_source": True}
    single = base | {"own_source": True, "n_sources": 1, "copy_of_one_source": True}
    stranger = base | {"own_source": False, "n_sources": 5, "copy_of_one_source": False, "near_copy": False}
    assert _pair_label(average) == ", near-copy (pixels), one of its 5 sources"
    assert _pair_label(copied) == ", near-copy (pixels), copy of one of its sources"
    assert _pair_label(single) == ", near-copy (pixels), copy of its source"
    assert _pair_label(stranger) == ""
    screen = {"near_copies_pixel_rate": 1.0, "near_copies_pixel_ci": [0.6, 1.0], "near_copies_identity_rate": 0.0,
              "near_copies_identity_ci": [0.0, 0.4], "copies_of_one_source": 0,
              "copies_of_one_source_in_multi_person_records": 0, "median_pixel_distance": 0.05,
              "median_heldout_pixel_distance": 0.1, "n": 4, "quantile": 0.01, "pixel_threshold": 0.06,
              "identity_threshold": 0.95, "control": {"pixel_rate": 0.1, "identity_rate": 0.0}}
    rep = {"releases": [{"name": "kpixel", "screening": screen}]}
    page = _screening(rep, {"closest:kpixel": [average]})
    assert "one of its 5 sources" in page and "flags it near one of them by design" in page
    assert "by design" not in _screening(rep, {"closest:kpixel": [copied]})
    screen["control"] |= {"n": 30, "patients": 10, "identity_n": 15, "identity_patients": 5}   # the control's N
    assert "n=30 (10) / 15 (5) held-out images (patients)" in _screening(rep, {})


def test_the_report_says_what_the_helper_audit_found_unsaid():
    """A null guarantee printed "None"; one row's several reasons were repeated per row; the verdict's utility share
    and a pair of releases that recover nobody were shown without their N."""
    from medanon.evaluate.calibration import verdict
    from medanon.evaluate.report_differencing import differencing_section
    from medanon.evaluate.verdict_text import why_invalid

    assert privacy_text.headline({"guarantee": None}) == "no formal guarantee"
    rel = {"validity": {"a": {"reason": "copies; few controls", "reasons": ["copies", "few controls"]},
                        "b": {"reason": "copies; trained on members", "reasons": ["copies", "trained on members"]}}}
    assert why_invalid(rel) == ["copies", "few controls", "trained on members"]
    # a reason that holds "; " itself (the at-chance one: "(accuracy ..., interval ...; majority class ...)") stays
    # whole: the reasons are read as listed, not cut at every "; "
    inner = "its attacker is at chance (accuracy 0.55, interval from 0.40; majority class 0.68)"
    rel = {"validity": {"a": {"reason": f"copies; {inner}", "reasons": ["copies", inner]}}}
    assert why_invalid(rel) == ["copies", inner]
    risk = {"residual_risk": {"risk": 0.4, "ci": [0.2, 0.6]}, "n": 148, "attack": {"patients": 37}}
    rel = {"name": "R", "attacks": {"linkability": {"risk": risk}},
           "validity": {"linkability": {"valid": True, "catches_copies": True}},
           "utility": {"grade": {"n_test": 63, "n_test_patients": 21, "release": {"kappa": {"mean": 0.5}},
                                 "real_same_n": {"kappa": {"mean": 0.6}}}}}
    assert "(N 63 test images, 21 patients) of the gain over chance" in verdict(rel)["sentence"]
    pair = {"releases": ["a", "b"], "space": "pixels", "assumptions": "x",
            "members": {"patients": 35, "recovered": 0, "shown_alone": 0, "recovered_beyond": 0},
            "controls": {"patients": 21, "recovered": 0},
            "risk": {"attack": {"ci": [0.0, 0.099]}, "control": {"ci": [0.0, 0.155]},
                     "residual_risk": {"risk": 0.0, "ci": [0.0, 0.07]}}}
    text = differencing_section({"differencing": [pair]})
    assert ("0 of 35 member patients [0.00, 0.10], 0 of 21 control patients [0.00, 0.15]; residual risk 0.00 "
            "[0.00, 0.07]") in text
    from medanon.evaluate.verdict_text import _exposure_sentences

    said = _exposure_sentences("R", {"near_copies_beyond_control": True, "mapped": True, "near_copies": 88, "n": 102,
                                     "control_rate": 0.0, "control_ci": [0.0, 0.155], "control_n": 63})
    assert "(new people's images: 0% [0%, 16%] of 63 images)" in said[0]
    from medanon.evaluate.report import _resamples_said

    entries = [("control", {"fid": {"resamples": 20}, "kid": {"resamples": 400}, "n": 50})]
    assert _resamples_said(entries) == (" Bootstrap resamples behind the intervals: FID: 20; KID: 400 (few: an "
                                        "interval's ends move between runs by more than its digits suggest).")


def test_the_independent_attacker_table_gives_each_cells_n_and_the_correlations_interval():
    from medanon.evaluate.report_attacks import _independent

    def attacks(n):
        return {"linkability": {"outer": {"AUC_two_sided": 0.6, "AUC_two_sided_ci": [0.5, 0.7]}, "risk": {"n": n}},
                "singling_out": {"two_sided_top1": 0.1, "two_sided_top1_ci": [0.0, 0.2], "risk": {"n": n}},
                "nearest": {"two_sided_auc": 0.55, "two_sided_auc_ci": [0.45, 0.65], "risk": {"n": 12}}}
    rep = {"releases": [{"name": "R", "attacks": {**attacks(48), "independent": attacks(40)}}],
           "networks": {"independent": {"config": {}}, "checks": {"cosine_correlation": {
               "pearson_r": 0.617, "ci": [0.52, 0.70], "pairs": 1953, "patients": 21}}}}
    page = _independent(rep)
    assert "n=48 / 40 source images" in page and "n=12 member images" in page
    assert "r = 0.617 [0.520, 0.700] (n = 1953 pairs, 21 patients)" in page


def test_attacks_not_run_are_listed_with_their_reason():
    """The inference attack skipped on a release without its attribute left no trace on the page."""
    from medanon.evaluate.report_attacks import _not_run

    rels = [{"name": "R", "attacks": {"inference": {"skipped": "the release publishes no 'sex' label to infer from"},
                                      "nearest": {"risk": {}}}}]
    page = _not_run(rels)
    assert "Attacks not run" in page and "<b>R</b>: Inference" in page and "no &#x27;sex&#x27; label" in page
    assert _not_run([{"name": "R", "attacks": {"nearest": {}}}]) == ""


def test_a_reweighted_control_says_which_share_of_members_it_cannot_stand_for():
    """Linkability's control was reweighted to the members' grades, 14 % of members having a grade no control patient
    had: the table did not say so (the nearest-record rows did)."""
    from medanon.evaluate.report_risks import _rate

    ctrl = {"rate": 0.04, "ci": [0.0, 0.1], "trials": 16, "patients": 4,
            "balanced": {"label": "grade", "unweighted_rate": 0.05, "uncovered_member_share": 0.143}}
    assert "14.3 % of members have a grade no control patient has" in _rate(ctrl)
    assert "no control patient" not in _rate({**ctrl, "balanced": {**ctrl["balanced"], "uncovered_member_share": 0}})


def test_the_header_gives_the_utility_tests_patients_not_a_raw_dict():
    from medanon.evaluate.report import _utility_sizes

    rep = {"sample_sizes": {"utility_test": {"grade": 32}},
           "releases": [{"utility": {"grade": {"n_test": 32, "n_test_patients": 8}}}]}
    assert _utility_sizes(rep) == "grade: 32 images of 8 patients"
    assert _utility_sizes({"sample_sizes": {"utility_test": {}}, "releases": []}).startswith("none")


def test_the_attribute_attackers_held_out_accuracy_gives_its_patients_and_the_majority_class():
    """34.4 % (n = 32 images) was shown without its 8 patients, below a 75 % majority class that it did not name."""
    from medanon.evaluate.report_attacks import _attribute

    at = {"attribute": "sex", "accuracy": 0.5, "accuracy_ci": [0.3, 0.7], "baseline": 0.5, "auroc": 0.5,
          "heldout_real_accuracy": 0.344, "heldout_real_accuracy_ci": [0.2, 0.5], "n_heldout": 32,
          "heldout_patients": 8, "heldout_chance": 0.75, "n": 14, "assumptions": []}
    page = _attribute({"releases": [{"name": "R", "attacks": {"attribute": at}, "utility": {}}]})
    assert "(n = 32 images, 8 patients; majority class 75.0 %): no better than naming the majority class" in page


def test_a_value_without_an_interval_says_so_instead_of_brackets_of_dashes():
    from medanon.evaluate.report_format import _ci

    assert _ci({"value": 3.0, "ci": [float("nan"), float("nan")]}) == "3.00 <span class=ci>(no interval)</span>"
    assert _ci({"value": 3.0, "ci": [2.0, 4.0]}) == "3.00 <span class=ci>[2.00, 4.00]</span>"
