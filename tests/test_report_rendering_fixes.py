"""The report page says what report.json holds: records the attribute attack left out, what top-K membership rests on,
each interval's unit where it is not patients, and only the fidelity distances that were computed (an audit of the
HTML report against report.json; its numbers are those of its evaluations)."""

from medanon.evaluate.report import _fidelity
from medanon.evaluate.report_attacks import _attribute, _explain, _membership, _screening
from medanon.evaluate.report_utility import _on_release, utility_section

PATIENT_BOOT = "patient cluster bootstrap (percentile, 400 resamples, seed 0)"


def _attribute_entry(**extra) -> dict:
    """kpixel k=2 (records of 2 people): 9 of its 14 records have a true sex, 5 hold patients split evenly."""
    return {"attribute": "sex", "accuracy": 0.444, "accuracy_ci": [0.111, 0.778], "baseline": 0.556,
            "auroc": 0.2, "auroc_ci": [0.0, 0.574], "heldout_real_accuracy": 0.6,
            "heldout_real_accuracy_ci": [0.2, 1.0], "n_heldout": 20, "heldout_patients": 5, "heldout_chance": 0.6,
            "n": 9, "assumptions": "x",
            "risk": {"attack": {"rate": 0.444, "ci": [0.111, 0.778], "trials": 9, "patients": 9}}, **extra}


def test_the_attribute_table_says_which_records_it_left_out_and_its_patient_clusters():
    """N records read 9 for a 14-record release, with no word of the 5 whose patients split evenly on sex."""
    rel = {"name": "kpixel2", "records": 14, "attacks": {"attribute": _attribute_entry(tied_records_left_out=5)},
           "utility": {}}
    page = _attribute({"releases": [rel]})
    assert ("9 of 14 records (5 left out: their patients split evenly on sex, no true value)"
            "<span class=ci>; 9 patient clusters</span>") in page
    rel = {"name": "snow", "records": 9, "attacks": {"attribute": _attribute_entry()}, "utility": {}}
    page = _attribute({"releases": [rel]})                         # every record has a true value: no "of"
    assert "<td>9<span class=ci>; 9 patient clusters</span></td>" in page and "left out" not in page


def _membership_entry(**extra) -> dict:
    """kpixel k=5 of the audit: 2 records evaluated, 1 left out, the bootstrap over 2 patient clusters."""
    return {"top_k_accuracy": 0.6, "ci": [0.55, 0.65], "chance": 0.5, "p_value": 1 / 401, "p_value_exact": 0.0597,
            "slots": 40, "records_attacker": 2, "records_evaluated": 2, "records_not_evaluated": 1,
            "views_scored_once": 0, "pools": 2, "pool": 40, "pool_sizes": [40, 40], "n": 2, "assumptions": "x",
            "interval": f"{PATIENT_BOOT}, over the evaluated records' 2 patient clusters and the 5 held-out patients, "
                        "from whom each resample draws the pools' held-out images again",
            "risk": {"attack": {"rate": 0.6, "ci": [0.55, 0.65], "trials": 40, "patients": 2}}, **extra}


def _membership_page(**extra) -> str:
    rel = {"name": "kpixel", "method": "kpixel", "setting": "k=5",
           "attacks": {"membership": _membership_entry(**extra)}}
    return _membership([rel])


def test_a_top_k_cell_gives_its_patient_clusters_left_out_records_views_and_the_exact_p_where_clusters_are_few():
    page = _membership_page()
    assert "n = 40 slots, 2 patient clusters; 2 records in 2 pools of up to 40 images" in page
    assert "; 1 record left out (larger than the held-out set)" in page
    # p ≤ 0.0025 from 2 resampling units is not strong evidence: the exact test (p = 0.06) stands beside it
    assert "p ≤ 0.0025 (patient bootstrap, fewer than 10 clusters: rough; exact test of a random ranking" in page
    assert "p = 0.06)" in page
    assert "e.g." not in page and "each cell gives its records and pools" in page
    assert "the held-out patients (each resample draws the pools' held-out images again)" in page
    assert "views" not in _membership_page().split("<caption>")[0]          # none scored once: nothing said in cells
    page = _membership_page(views_scored_once=3)
    assert "3 records are views of another record's source set, scored once with it" in page
    many = _membership_page(risk={"attack": {"rate": 0.6, "ci": [0.55, 0.65], "trials": 40, "patients": 25}},
                            records_not_evaluated=0)
    assert "exact test of a random ranking, images" not in many and "n = 40 slots, 25 patient clusters" in many
    assert "left out (larger" not in many


def test_a_top_k_cell_without_patient_ids_names_its_interval_unit():
    page = _membership_page(risk={"attack": {"rate": 0.6, "ci": [0.43, 0.75], "trials": 40}},
                            interval="Clopper-Pearson over the K slots of the evaluated records")
    assert "(Clopper-Pearson over the K slots of the evaluated records, not by patient: too narrow" in page
    assert "patient clusters;" not in page.split("<caption>")[0]


def _screen(interval: str) -> dict:
    return {"near_copies_pixel_rate": 0.0, "near_copies_pixel_ci": [0.0, 0.0324], "near_copies_identity_rate": 0.0,
            "near_copies_identity_ci": [0.0, 0.0324], "copies_of_one_source": 0,
            "copies_of_one_source_in_multi_person_records": 0, "median_pixel_distance": 0.35,
            "median_heldout_pixel_distance": 0.074, "n": 112, "quantile": 0.01, "pixel_threshold": 0.074,
            "identity_threshold": 0.943, "interval": interval,
            "control": {"pixel_rate": 0.55, "pixel_rate_ci": [0.35, 0.75], "identity_rate": 0.0,
                        "identity_rate_ci": [0.0, 0.66], "n": 20, "patients": 5, "interval": PATIENT_BOOT}}


def test_the_near_copy_screen_says_where_its_interval_is_over_records_not_patients():
    """An unmapped release's 0.0 [0.0, 3.2] (records one by one) stood beside a mapped one's [0.0, 12.1]."""
    page = _screening({"releases": [{"name": "snownomap", "screening": _screen("Clopper-Pearson over the records")},
                                    {"name": "snow", "screening": _screen("patient cluster bootstrap over the "
                                                                          "records' patients")}]}, {})
    nomap = page.split("<td>snownomap</td>")[1].split("</tr>")[0]
    mapped = page.split("<td>snow</td>")[1].split("</tr>")[0]
    assert nomap.count("(Clopper-Pearson over the records, not by patient: too narrow where one patient has "
                       "several)") == 2
    assert "not by patient" not in mapped


def test_the_real_model_on_the_release_names_an_interval_over_images():
    u = {"real_model_on_release": {"kappa": -0.05}, "real_model_on_release_n": 112,
         "real_model_on_release_ci": {"kappa": {"value": -0.05, "ci": [-0.15, 0.07], "resampled": "images"}}}
    assert _on_release(u, "kappa").endswith("n=112 records</span> <span class=ci>(interval resamples images one by "
                                            "one, not patients: too narrow where one patient has several)</span>")
    u["real_model_on_release_ci"]["kappa"].update(resampled="patients", n_patients=28)
    assert _on_release(u, "kappa").endswith("n=112 records, 28 patient clusters</span>")


def _fd(value: float, n: int, resampled: str = "patients") -> dict:
    return {"value": value, "ci": [value - 0.05, value + 0.05], "n": n, "n_reference": 100, "resampled": resampled,
            "resamples": 5}


def _fidelity_report(release_resampled: str, inception: bool = False) -> dict:
    """ev3 of the audit: --no-inception, FD only; snownomap has no mapping, so its own images resample one by one."""
    control = {"n": 20, "n_reference": 100, "fd_identity": _fd(0.388, 20)}         # fewer than the release's 50
    small = {"n": 5, "n_reference": 100, "fd_identity": _fd(0.889, 5)}
    rel = {"name": "snownomap", "method": "snow", "setting": "p=0.3", "fidelity": {"n": 50, "n_reference": 100,
                                                                                  "fd_identity": _fd(1.341, 50,
                                                                                                     release_resampled)}}
    return {"releases": [rel], "networks": {"inception": None}, "sample_sizes": {"fid_reference": 100},
            "config": {"size": 32, "fidelity": {"in_domain": True, "inception": inception}},
            "controls": {"fidelity": control, "fidelity_by_n": {"5": small, "50": control}}}


def test_the_fidelity_table_marks_an_interval_over_images_and_its_caption_is_true_for_both():
    page = _fidelity(_fidelity_report("patients (reference), images (evaluated set)"))
    row = page.split("<td>snownomap</td>")[1].split("</tr>")[0]
    assert "(interval resamples the reference by patient but these images one by one: too narrow" in row
    assert "resample patients (bias-shifted" not in page                # the caption no longer claims patients alone
    assert "resample patients where a release has its mapping, and otherwise what the row's mark says" in page
    page = _fidelity(_fidelity_report("patients"))
    assert "The intervals of FD (bias-shifted bootstrap) resample patients;" in page and "by patient but" not in page


def test_without_inception_the_captions_speak_of_fd_only():
    """--no-inception: the captions still spoke of FID and KID, which were not computed."""
    rep = _fidelity_report("patients")
    page = _fidelity(rep)
    caption = page.split("<caption>")[1].split("</caption>")[0]
    assert "FID" not in caption and "KID" not in caption and "FD is biased by N" in caption
    assert "FD is biased by N, so it is not comparable" in page            # the short control's label
    assert "FID and KID were not computed: Inception was turned off" in page
    assert "<td>FD</td>" in _explain(rep) and "FID / KID / FD" not in _explain(rep)
    rep["releases"][0]["fidelity"]["fid"] = {"value": 40.0, "ci": [35.0, 45.0], "resampled": "patients"}
    assert "FID / KID / FD" in _explain(rep)


def test_the_utility_caption_says_seed_in_the_singular_and_its_unit():
    """"the mean over 1 seeds"."""
    pb = {"release": {"value": -0.29, "ci": [-0.66, 0.0]}, "real_same_n": {"value": 0.39, "ci": [0.05, 0.71]},
          "difference": {"value": -0.68, "ci": [-1.02, -0.05]}, "n": 20, "n_patients": 5, "resampled": "patients"}
    u = {"n_train": 112, "seeds": [0], "release": {"kappa": {"mean": -0.29, "sd": 0.0}},
         "real_same_n": {"kappa": {"mean": 0.39, "sd": 0.0}}, "paired_bootstrap": {"kappa": pb}}
    rep = {"releases": [{"name": "snow", "method": "snow", "setting": "p=0.3", "utility": {"grade": u}}],
           "tasks": ["grade"], "sample_sizes": {"utility_test": {"grade": 20}}, "controls": {}, "networks": {},
           "config": {}}
    page = utility_section(rep)
    assert "the mean over 1 seed with its 95 % paired bootstrap interval over the 5 held-out patients" in page
    u["seeds"] = [0, 1, 2]
    assert "the mean over 3 seeds" in utility_section(rep)


def test_the_residual_risk_row_of_the_attribute_attack_says_which_records_it_left_out():
    from medanon.evaluate.report_risks import _risks

    entry = _attribute_entry(tied_records_left_out=5)
    entry["risk"] = {"attack": {"rate": 0.444, "ci": [0.111, 0.778], "trials": 9, "successes": 4, "patients": 9},
                     "control": None, "baseline": {"rate": 0.556, "ci": [0.556, 0.556], "trials": 9, "exact": True},
                     "residual_risk": {"risk": 0.0, "ci": [0.0, 0.3]}, "against": "baseline",
                     "control_is": "none", "n": 9}
    rel = {"name": "kpixel2", "attacks": {"attribute": entry}, "validity": {"attribute": {"valid": True}}}
    page = _risks({"releases": [rel]})
    assert "(5 records left out: their patients split evenly on the attribute, no true value)" in page
