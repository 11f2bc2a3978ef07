"""Issue 14, items 4-6: what an ε-LDP release claims (seeded noise, ε per image / patient, vacuous budgets,
floating point, the clip box it used, overlap with the flow's training data)."""

import json
import math
import warnings

import numpy as np
import pytest
import torch

from medanon.anonymize.dpglow import DPGlow, training_overlap
from medanon.anonymize.ldp import (
    EXACT_CLAUSE,
    FLOAT_CLAUSE,
    GRID_STEPS,
    PUBLIC_LATENT_BOUND,
    ClipCalibration,
    LaplaceMechanism,
    calibrate,
    calibration_overlap,
    distinguishing_bound,
    release_dataset,
)
from medanon.anonymize.ldp_image import ImageLDP
from medanon.anonymize.privacy import CalibrationOverlap, DataDependentRelease, NoFormalGuarantee, WeakBudget
from medanon.evaluate import privacy_text
from medanon.models.glow import Glow, GlowCodec, GlowConfig


def _quiet(factory, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return factory(*a, **kw)


class _Writer:                                   # the writer interface release_dataset uses
    def __init__(self, privacy):
        self.privacy, self.settings, self.entries = dict(privacy), {"method": "ldp-image"}, {}

    def done(self, key):
        return key in self.entries

    def add(self, key, image, sources):
        self.entries[key] = image


class _DS:
    def __init__(self, n=3):
        from medanon.data.records import Record
        self.records = [Record(path=f"/x/{i}.png", patient_id=f"p{i}", record_id=f"r{i}") for i in range(n)]

    def load(self, i):
        return {"image": torch.zeros(1, 4, 4)}


def test_item4_seeded_noise_withdraws_the_guarantee_and_warns():
    ldp = _quiet(ImageLDP, epsilon=1.0, dims=16)
    writer = _Writer(ldp.privacy())
    assert writer.privacy["guarantee"] == "epsilon-LDP"
    with pytest.warns(NoFormalGuarantee, match="reproducible"):
        release_dataset(_DS(), ldp, writer, noise_seed=7, progress=False)
    assert writer.privacy["guarantee"] == "none: no formal guarantee (reproducible noise, testing only)"
    assert writer.privacy["statement"].startswith("NO FORMAL GUARANTEE")
    assert privacy_text.headline(writer.privacy) == "no formal guarantee (reproducible noise, testing only)"
    secret = _Writer(ldp.privacy())
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoFormalGuarantee)              # secret noise: no such warning
        release_dataset(_DS(), ldp, secret, progress=False)
    assert secret.privacy["guarantee"] == "epsilon-LDP"


def test_item5_statement_gives_epsilon_per_image_per_patient_vacuity_and_float_clause():
    with pytest.warns(WeakBudget):
        weak = ImageLDP(epsilon=100.0, per_element=True, dims=16).privacy()
    assert weak["epsilon_image"] == 1600 and weak["vacuous"] is True
    st = weak["statement"]
    assert "PER IMAGE" in st and "not a guarantee for single pixels" in st and "n * epsilon = n * 1600" in st
    assert "VACUOUS" in st and EXACT_CLAUSE in st and FLOAT_CLAUSE not in st
    floating = _quiet(ImageLDP, epsilon=1.0, dims=16, sampler="float").privacy()
    assert FLOAT_CLAUSE in floating["statement"] and "floating-point gap" in " ".join(floating["not_protected"])
    strong = _quiet(ImageLDP, epsilon=1.0, dims=16).privacy()
    assert strong["vacuous"] is False and "VACUOUS" not in strong["statement"]
    assert strong["distinguishing_bound"] == pytest.approx(math.e / (1 + math.e))
    assert "0.7311" in strong["statement"] and distinguishing_bound(1e6) == 1.0
    h = privacy_text.headline(weak)
    assert "per image" in h and "n·ε for a patient with n images" in h and "vacuous" in h and "/px" not in h
    assert "tight" in privacy_text.headline(_quiet(LaplaceMechanism, ClipCalibration.public_box("glow-eps", 4),
                                                   epsilon=1.0).privacy(space_description="x"))
    cal = ClipCalibration.public_box("glow-eps", 4)
    dp_st = _quiet(LaplaceMechanism, cal, epsilon=8.0).privacy(space_description="eps", flow="GLOW")["statement"]
    assert "one pixel can move every latent element" in dp_st


def test_item6_public_box_is_the_default_and_data_independent():
    codec = GlowCodec(Glow(GlowConfig(resolution=8, channels=1, levels=2, depth=1, hidden=8)).eval())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dp = DPGlow(codec, epsilon=2.0)
        pix = ImageLDP(epsilon=2.0, dims=64)
    assert not [w for w in caught if issubclass(w.category, DataDependentRelease)]
    for mech, lo in ((dp.mechanism, -PUBLIC_LATENT_BOUND), (pix.mechanism, -1.0)):
        assert mech.calibration.public and float(mech.calibration.lo.min()) == lo
    assert pix.mechanism.alpha == 1.0 and float(pix.mechanism.lower.min()) == -1.0  # the whole pixel range
    assert dp.mechanism.alpha == 0.4
    assert dp.privacy()["clip_box"].startswith("public") and pix.privacy()["calibration"]["box"] == "public"
    # the public box does not move when the private images do; a calibrated one does (the leak of item 6)
    a = torch.randn(30, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    b = a.clone()
    b[0] = 10.0                                                          # one marked calibration image
    with pytest.warns(DataDependentRelease, match="calibrated on 30 private images"):
        ma = LaplaceMechanism(calibrate([a], space="pixel"), epsilon=1.0)
    mb = _quiet(LaplaceMechanism, calibrate([b], space="pixel"), epsilon=1.0)
    assert not torch.equal(ma.upper, mb.upper)
    assert "NOT covered" in ma.privacy(space_description="p")["clip_box"]
    state = ClipCalibration.public_box("pixel", 3).to_state()
    assert ClipCalibration.from_state(state).public


def test_item6_overlap_with_the_flows_training_data_is_warned(tmp_path):
    (tmp_path / "other").mkdir()
    for name, data in (("a1.png", b"one"), ("a2.png", b"two"), ("a3.png", b"three"), ("b1.png", b"six")):
        (tmp_path / name).write_bytes(data)                              # b1 has a2's size, not its content
    (tmp_path / "other" / "copy.png").write_bytes(b"one")
    (tmp_path / "other" / "link.png").symlink_to(tmp_path / "a3.png")
    data = {"source": {"sha256": "ab" * 32}, "subset": "train"}
    with pytest.warns(CalibrationOverlap, match="training data"):
        note = training_overlap(data, {"sha256": "ab" * 32})
    assert "outside the epsilon bound" in note
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationOverlap)
        assert training_overlap(data, {"sha256": "cd" * 32}) is None
        assert training_overlap(None, {"sha256": "cd" * 32}) is None
        assert calibration_overlap([tmp_path / "a1.png", tmp_path / "a2.png"], [tmp_path / "b1.png"]) == 0
    # the same content under another name and folder is the same image; equal sizes alone are not
    with pytest.warns(CalibrationOverlap, match="2 of the 3 images being released"):
        assert calibration_overlap([tmp_path / n for n in ("a1.png", "a2.png", "a3.png")],
                                   [tmp_path / "other" / "copy.png", tmp_path / "other" / "link.png",
                                    tmp_path / "b1.png"]) == 2


def test_item5_exact_sampler_is_discrete_laplace_and_keeps_the_bound():
    """The default secret noise is exact discrete Laplace (integer arithmetic on OS bits): its frequencies match
    the pmf, outputs lie on the grid of the box, and the bound D * GRID_STEPS / t is at most min(1, alpha) eps."""
    from scipy import stats

    from medanon.anonymize.discrete_laplace import discrete_laplace

    t = 3
    x = discrete_laplace(t, 60000)
    r = math.exp(-1 / t)
    values = list(range(-8, 9))
    expected = [(1 - r) / (1 + r) * r ** abs(v) for v in values]
    observed = [int((x == v).sum()) for v in values]
    tail = len(x) - sum(observed)
    res = stats.chisquare([*observed, tail], [*(e * len(x) for e in expected), len(x) * (1 - sum(expected))])
    assert res.pvalue > 1e-6, res
    big = discrete_laplace(10**9, 20000)
    assert abs(float(np.abs(big).mean()) / 1e9 - 1.0) < 0.05                  # E|X| ~ t for large t

    cal = ClipCalibration.public_box("pixel", 64)
    mech = _quiet(LaplaceMechanism, cal, epsilon=2.0)                        # alpha = 1: the whole range
    out = mech(torch.rand(5, 64, dtype=torch.float64) * 2 - 1)
    steps = (out - mech.lower) / (mech.width / GRID_STEPS)
    assert torch.allclose(steps, steps.round(), atol=1e-6) and bool((out.abs() <= 1).all())
    assert mech.epsilon_image_tight <= 2.0 and mech.epsilon_image_tight > 1.99
    latent = _quiet(LaplaceMechanism, ClipCalibration.public_box("glow-eps", 64), epsilon=2.0)
    assert latent.epsilon_image_tight <= 0.4 * 2.0 + 1e-12
    assert "exact discrete Laplace" in mech.privacy(space_description="p")["noise_source"]


def test_the_statement_gives_the_clip_interval_delta_and_this_releases_patient_budget(tmp_path):
    """The clip box names the interval elements are clipped to (α of the public range), δ = 0, and the release
    gives the budget of its patient with the most images, not only the rule n · ε."""
    import medanon

    codec = GlowCodec(Glow(GlowConfig(resolution=8, channels=1, levels=2, depth=1, hidden=8)).eval())
    dp = DPGlow(codec, epsilon=2.0)
    p = dp.privacy()
    assert "[-4, 4]" in p["clip_box"] and "alpha = 0.4" in p["clip_box"] and p["clip_box"].endswith("[-1.6, 1.6]")
    assert p["delta"] == 0
    root = medanon.make_phantom(tmp_path / "x", modality="xray", patients=3, per_patient=2, size=16)
    rel = _quiet(medanon.anonymize.ldp_image, root, epsilon=1e4)
    assert rel.privacy["max_images_per_patient"] == 2 and rel.privacy["epsilon_patient_max"] == 2e4


def test_the_patient_budget_names_its_assumptions_and_warns_when_only_it_is_vacuous(tmp_path):
    """ε = 4 per image is not vacuous, but a patient with 3 images is protected at 12: the release said neither that
    (no flag, no warning) nor that the number rests on one id per person and on this being the only release."""
    import medanon

    root = medanon.make_phantom(tmp_path / "x", modality="xray", patients=2, per_patient=3, size=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("always", WeakBudget)
        with pytest.warns(WeakBudget, match="a patient with 3 images is protected at 12"):
            rel = medanon.anonymize.ldp_image(root, epsilon=4.0)
    p = rel.privacy
    assert p["vacuous"] is False and p["vacuous_patient"] is True and p["epsilon_patient_max"] == 12.0
    said = " ".join(p["assumptions"])
    assert "one id per person" in said and "the only release of these patients' images" in said
    assert any("other releases of the same images or patients" in n for n in p["not_protected"])
    from medanon.evaluate.privacy_text import headline

    assert headline(p).endswith("vacuous for the patient with the most images")
    quiet = _quiet(medanon.anonymize.ldp_image, torch.zeros(4, 1, 8, 8), epsilon=4.0, value_range=(0, 1))
    assert "vacuous_patient" not in quiet.privacy                         # one image each: no patient above 4
    assert not any("one id per person" in a for a in quiet.privacy["assumptions"])   # no ids: nothing assumed of them


def test_epsilon_inf_states_no_protection_without_noise_clauses(tmp_path):
    import medanon

    root = medanon.make_phantom(tmp_path / "x", modality="xray", patients=2, per_patient=1, size=16)
    p = _quiet(medanon.anonymize.ldp_image, root, epsilon=math.inf).privacy
    assert (p["guarantee"], p["unit"], p["epsilon_patient"], p["assumptions"]) == \
        ("none", "none: no noise is added", None, [])                      # no guarantee: no epsilon in its keys
    assert p["without_guarantee"]["epsilon_patient"] == "inf" and p["epsilon_image"] is None
    assert p["not_protected"] == ["everything: no noise is added; the released images are the inputs, clipped"]
    assert "epsilon_patient_max" not in p and "secret" not in str(p)


def test_without_patient_ids_the_patient_budget_is_unknown_not_epsilon():
    """Images in memory without patient_ids each get an id of their own: one person may still have several, so the
    release does not claim that its patients are protected at one image's epsilon."""
    import medanon

    rel = _quiet(medanon.anonymize.ldp_image, torch.zeros(4, 1, 8, 8), epsilon=100.0, value_range=(0, 1))
    assert str(rel.privacy["epsilon_patient_max"]).startswith("unknown")
    rel = _quiet(medanon.anonymize.ldp_image, torch.zeros(4, 1, 8, 8), epsilon=100.0, patient_ids=["a", "a", "b", "c"],
                 value_range=(0, 1))
    assert rel.privacy["max_images_per_patient"] == 2 and rel.privacy["epsilon_patient_max"] == 200.0


def test_a_seeded_release_states_no_protection_for_images_or_patients(tmp_path):
    """The guarantee was withdrawn while the unit still said "a patient with n images: n * epsilon" and
    epsilon_patient_max held a number, as if a seeded release protected patients at that budget."""
    import medanon

    x = torch.rand(4, 1, 16, 16) * 2 - 1
    with pytest.warns(NoFormalGuarantee):
        rel = medanon.anonymize.ldp_image(x, epsilon=1.0, patient_ids=["a", "a", "b", "c"], noise_seed=3,
                                          value_range=(-1, 1))
    p = rel.privacy
    assert p["guarantee"].startswith("none") and p["delta"] is None
    assert p["unit"].startswith("none") and p["epsilon_patient"] is None
    assert p["without_guarantee"]["epsilon_patient"].startswith("none")
    assert p["epsilon_patient_max"] == "none (with secret noise it would be 2)"
    assert p["not_protected"][0].startswith("everything")
    assert not any(n.startswith("a patient's other released images") for n in p["not_protected"])
    secret = medanon.anonymize.ldp_image(x, epsilon=1.0, patient_ids=["a", "a", "b", "c"], value_range=(-1, 1)).privacy
    assert secret["epsilon_patient_max"] == 2.0 and secret["delta"] == 0
    # the numbers that read as this release's bound moved under without_guarantee too (they stayed at the top, and
    # the saved statement said an observer tells two inputs apart "with probability at most 0.73")
    for key in ("distinguishing_bound", "vacuous", "epsilon_element", "epsilon_image_tight"):
        assert key in secret and key not in p and key in p["without_guarantee"], key
    assert "neither holds for this release" in p["statement"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel.save(tmp_path / "r", progress=False)
    saved = json.loads((tmp_path / "r" / "manifest.json").read_text())["privacy"]
    assert "distinguishing_bound" not in saved and saved["without_guarantee"]["distinguishing_bound"] > 0.7


def test_uniform_below_rejects_the_draws_that_would_bias_it(monkeypatch):
    """63 random bits reduced modulo n favour small values unless draws at or above the largest multiple of n below
    2**63 are drawn again: 2**63 - 1 is such a draw for n = 3 (the limit is 2**63 - 2), so the sampler draws again
    and returns the second draw's value, 2 % 3."""
    from medanon.anonymize import discrete_laplace as dl

    draws = [((2**63 - 1) << 1).to_bytes(8, "little"), (2 << 1).to_bytes(8, "little")]
    calls = []

    def urandom(n):
        calls.append(n)
        return draws[len(calls) - 1]

    monkeypatch.setattr(dl.os, "urandom", urandom)
    assert dl.uniform_below(np.array([3])).tolist() == [2] and calls == [8, 8]


def test_a_public_box_statement_claims_no_leak_it_does_not_have():
    """Image LDP with the public box: nothing is computed from images, so the statement does not warn of what
    calibration statistics reveal, names the centre as the public range's midpoint (not the paper's data-derived
    Eq. 12), and states no 'tighter' epsilon equal to epsilon."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = ImageLDP(epsilon=1.0, dims=64).privacy()
    assert "public constant, computed from no image" in p["statement"]
    assert "if released images were among them" not in p["statement"] and "tighter" not in p["statement"]
    assert p["clip_center"].startswith("c_k = (max_k + min_k) / 2 of the public range") and "Eq. 12" not in \
        p["clip_center"]
