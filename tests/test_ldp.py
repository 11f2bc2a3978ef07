"""The Laplace mechanism of DP-GLOW and its image-domain baseline: Eq. 7, the ε bound, per-sample clipping, CLI."""

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from medanon.anonymize.dpglow import DPGlow, calibrate_latent
from medanon.anonymize.ldp import CENTERS, ClipCalibration, LaplaceMechanism, calibrate, laplace_noise, record_generator
from medanon.anonymize.ldp_image import ImageLDP, calibrate_pixels
from medanon.anonymize.privacy import NoFormalGuarantee
from medanon.cli import cli
from medanon.config import PhantomConfig
from medanon.data.layouts import scan
from medanon.errors import ConfigError
from medanon.fsutil import sha256_file
from medanon.models.glow import Glow, GlowCodec, GlowConfig
from medanon.phantoms.generate import generate
from medanon.release import audit_release, read_release
from medanon.train.flow import save_flow


def quiet(factory, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return factory(*args, **kw)


def make_calibration(d: int = 6, seed: int = 0) -> ClipCalibration:
    g = torch.Generator().manual_seed(seed)
    return calibrate([torch.randn(50, d, generator=g, dtype=torch.float64)], space="glow-eps")


@pytest.fixture(scope="module")
def codec() -> GlowCodec:
    flow = Glow(GlowConfig(resolution=16, channels=1, levels=2, depth=2, hidden=8))
    flow.train()
    flow.log_prob(torch.rand(16, 1, 16, 16, generator=torch.Generator().manual_seed(0)) - 0.5)
    return GlowCodec(flow.eval(), sha256="0" * 64)


# ------------------------------------------------------------------------------------------------ calibration


def test_calibration_matches_numpy_and_eqs_11_12():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(37, 5)) * [1, 2, 3, 4, 0]
    cal = calibrate([torch.from_numpy(a[:20]), torch.from_numpy(a[20:])], space="pixel")
    np.testing.assert_array_equal(cal.lo.numpy(), a.min(0))
    np.testing.assert_array_equal(cal.hi.numpy(), a.max(0))
    mech = quiet(LaplaceMechanism, cal, epsilon=10.0, alpha=0.4)
    w = 0.4 * (a.max(0) - a.min(0))
    c = (a.max(0) + a.min(0)) / 2
    np.testing.assert_allclose(mech.lower.numpy(), c - w / 2)
    np.testing.assert_allclose(mech.upper.numpy(), c + w / 2)
    assert cal.count == 37 and len(cal.checksum()) == 64
    again = ClipCalibration.from_state(cal.to_state())
    assert again.checksum() == cal.checksum()
    moved = ClipCalibration(lo=cal.lo, hi=cal.hi + 1e-12, count=37, space="pixel")
    assert moved.checksum() != cal.checksum()


# ------------------------------------------------------------------------------------------------ Eq. 7


def test_noise_scale_is_eq_7():
    cal = make_calibration(d=8)
    delta = cal.hi - cal.lo
    per_image = quiet(LaplaceMechanism, cal, epsilon=40.0, sampler="float")
    per_elem = quiet(LaplaceMechanism, cal, epsilon=5.0, per_element=True)
    assert torch.allclose(per_image.scale, delta * 8 / 40.0)
    assert torch.allclose(per_elem.scale, delta * 8 / 40.0)            # 5 per element * D = 40 per image
    assert per_elem.epsilon_image == 40.0 and per_elem.epsilon_element == 5.0
    assert per_image.epsilon_image_tight == pytest.approx(0.4 * 40.0)   # Σ w_k / b_k = α ε
    wide = quiet(LaplaceMechanism, cal, epsilon=40.0, alpha=2.0, sampler="float")   # box wider than Δ: scale by it
    assert torch.allclose(wide.scale, 2.0 * delta * 8 / 40.0)
    assert wide.epsilon_image_tight == pytest.approx(40.0)
    exact = quiet(LaplaceMechanism, cal, epsilon=40.0)                  # the exact sampler rounds its scale up
    assert 0.4 * 40.0 * 0.99 < exact.epsilon_image_tight <= 0.4 * 40.0


@pytest.mark.parametrize("seeded", [True, False])
def test_noise_is_laplace_with_that_scale(seeded: bool):
    scale = torch.tensor([0.5, 2.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0) if seeded else None
    noise = laplace_noise((20000, 2), scale, generator=gen)
    for k in range(2):
        res = stats.kstest(noise[:, k].numpy(), stats.laplace(scale=float(scale[k])).cdf)
        assert res.pvalue > (1e-3 if seeded else 1e-6), res    # secret noise is a new draw each run: looser
    if not seeded:                                                  # secret noise: never the same twice
        assert not torch.equal(noise, laplace_noise((20000, 2), scale))


def test_unclipped_noise_through_the_mechanism_has_eq_7_scale():
    """Inputs at the box centre with a box far wider than the noise: the output is centre + Lap(b_k)."""
    cal = ClipCalibration(lo=-torch.ones(3, dtype=torch.float64) * 50, hi=torch.ones(3, dtype=torch.float64) * 50,
                          count=2, space="pixel")
    mech = quiet(LaplaceMechanism, cal, epsilon=3000.0)                 # b = 100 * 3 / 3000 = 0.1, box ±20
    out = mech(torch.zeros(30000, 3, dtype=torch.float64), generator=torch.Generator().manual_seed(1))
    assert stats.kstest(out[:, 0].numpy(), stats.laplace(scale=0.1).cdf).pvalue > 1e-3
    assert float(out.abs().mean()) == pytest.approx(0.1, rel=0.03)     # E|Lap(b)| = b


# ------------------------------------------------------------------------------------------------ ε bound


finite = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), d=st.integers(1, 6), alpha=st.floats(0.05, 3.0), log_eps=st.floats(-3.0, 4.0),
       per_element=st.booleans(), center=st.sampled_from(CENTERS))
def test_log_ratio_of_output_densities_never_exceeds_epsilon(data, d, alpha, log_eps, per_element, center):
    lo = torch.tensor(data.draw(st.lists(st.floats(-10, 10), min_size=d, max_size=d)), dtype=torch.float64)
    span = torch.tensor(data.draw(st.lists(st.sampled_from([0.0, 1e-3, 0.5, 3.0, 20.0]), min_size=d, max_size=d)),
                        dtype=torch.float64)
    cal = ClipCalibration(lo=lo, hi=lo + span, count=10, space="glow-eps")
    mech = quiet(LaplaceMechanism, cal, epsilon=10.0**log_eps, alpha=alpha, per_element=per_element, center=center,
                 sampler="float")                                  # log_prob is the real-valued mechanism's density
    v = torch.tensor([data.draw(st.lists(finite, min_size=d, max_size=d)) for _ in range(2)], dtype=torch.float64)
    # outputs: anywhere in the box, including exactly on its ends (the point masses of the second clip)
    u = torch.tensor(data.draw(st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), min_size=d, max_size=d)),
                     dtype=torch.float64)
    out = (mech.lower + u * (mech.upper - mech.lower))[None]
    ratio = float(mech.log_prob(out, v[:1]) - mech.log_prob(out, v[1:]))
    assert ratio <= mech.epsilon_image_tight * (1 + 1e-9) + 1e-9
    assert mech.epsilon_image_tight <= mech.epsilon_image * (1 + 1e-12)


def test_zero_centre_box_and_divergence_guard(codec: GlowCodec):
    cal = make_calibration(d=5)
    mech = quiet(LaplaceMechanism, cal, epsilon=3.0, center="zero")
    assert torch.allclose(mech.upper, -mech.lower) and torch.allclose(mech.upper - mech.lower, 0.4 * cal.sensitivity)
    assert quiet(LaplaceMechanism, cal, epsilon=3.0).scale.equal(mech.scale)       # same Eq. 7 noise
    assert "c_k = 0" in mech.privacy(space_description="x")["statement"]
    with pytest.raises(ConfigError, match="center"):
        LaplaceMechanism(cal, epsilon=1.0, center="mean")
    codec.diverged = 0
    out = codec.decode(torch.full((2, codec.dims), 1e30))                           # far off the training latents
    assert codec.diverged == 2 and torch.isfinite(out).all() and out.abs().max() <= 1
    assert torch.allclose(out, codec.decode(torch.zeros(2, codec.dims)))             # shrunk to the mode


def test_the_bound_is_attained():
    """Inputs on opposite ends of the box and an output on one end: log-ratio = Σ w_k / b_k = α ε."""
    cal = make_calibration(d=4)
    mech = quiet(LaplaceMechanism, cal, epsilon=2.0)
    out = mech.upper[None]
    ratio = float(mech.log_prob(out, mech.upper[None]) - mech.log_prob(out, mech.lower[None]))
    assert ratio == pytest.approx(0.4 * 2.0)


def test_point_mass_matches_sampling():
    cal = make_calibration(d=2)
    mech = quiet(LaplaceMechanism, cal, epsilon=1.0)
    v = ((mech.lower + mech.upper) / 2 + 0.25 * (mech.upper - mech.lower))[None]
    out = mech(v.expand(40000, 2).clone(), generator=torch.Generator().manual_seed(3))
    frac = (out[:, 0] >= mech.upper[0]).double().mean()
    expected = 0.5 * math.exp(-float((mech.upper[0] - v[0, 0]) / mech.scale[0]))
    assert float(frac) == pytest.approx(expected, abs=0.01)


# ------------------------------------------------------------------------------------------------ clipping


def test_clipping_is_per_sample_in_the_mechanism_dpglow_and_baseline(codec: GlowCodec):
    images = torch.rand(4, 1, 16, 16, generator=torch.Generator().manual_seed(0)) * 1.6 - 0.8
    extreme = images.clone()
    extreme[1] = torch.where(torch.arange(256).reshape(1, 16, 16) % 2 == 0, 1.0, -1.0)   # far outside the set
    cal = calibrate_latent(codec, torch.rand(32, 1, 16, 16, generator=torch.Generator().manual_seed(1)) - 0.5)
    dp = quiet(DPGlow, codec, cal, epsilon=1e2, per_element=True)
    ldp = quiet(ImageLDP, calibrate_pixels(images * 0.5), epsilon=1e2, per_element=True)
    for mechanism in (dp, ldp):
        a = mechanism(images, generator=torch.Generator().manual_seed(5))
        b = mechanism(extreme, generator=torch.Generator().manual_seed(5))
        keep = [0, 2, 3]
        assert torch.equal(a[keep], b[keep])
        assert not torch.equal(a[1], b[1])
    # per-record generators: a record's output does not depend on its batch at all
    gens = lambda: [record_generator(7, f"r{i}") for i in range(4)]  # noqa: E731
    whole = dp(images, generator=gens())
    alone = dp(images[2:3], generator=[record_generator(7, "r2")])
    assert torch.equal(whole[2:3], alone)
    assert not torch.equal(dp(images, generator=gens()), dp(images))   # default noise is secret, not seeded


def test_infinite_budget_without_clip_reconstructs(codec: GlowCodec):
    images = torch.rand(3, 1, 16, 16, generator=torch.Generator().manual_seed(0)) * 2 - 1
    cal = calibrate_latent(codec, images)
    with pytest.warns(UserWarning, match="NO differential-privacy"):
        dp = DPGlow(codec, cal, epsilon=math.inf, clip=False)
    assert (dp(images) - images).abs().max() < 1e-4
    assert dp.privacy()["guarantee"] == "none"


def test_bad_settings_are_refused_or_warned(codec: GlowCodec):
    cal = make_calibration()
    for eps in (0.0, -1.0, float("nan")):
        with pytest.raises(ConfigError, match="epsilon"):
            LaplaceMechanism(cal, epsilon=eps)
    with pytest.raises(ConfigError, match="unbounded"):
        LaplaceMechanism(cal, epsilon=1.0, clip=False)
    with pytest.warns(UserWarning, match="alpha=2.0 > 1"):
        LaplaceMechanism(cal, epsilon=0.5, alpha=2.0)
    with pytest.warns(UserWarning, match="no formal"):
        LaplaceMechanism(cal, epsilon=100.0, per_element=True)
    with pytest.raises(ConfigError, match="elements"):
        quiet(DPGlow, codec, cal, epsilon=1.0)
    with pytest.raises(ValueError, match="non-finite"):
        quiet(LaplaceMechanism, cal, epsilon=1.0)(torch.full((1, 6), math.inf))
    with pytest.raises(TypeError):
        LaplaceMechanism(cal, 1.0)                                     # privacy arguments are keyword-only


# ------------------------------------------------------------------------------------------------ CLI


@pytest.fixture(scope="module")
def xray(tmp_path_factory) -> Path:
    return generate(PhantomConfig(modality="xray", patients=6, per_patient=2, size=16, workers=1, seed=3),
                    tmp_path_factory.mktemp("src") / "xray", progress=False)


def test_cli_releases_with_the_privacy_record(tmp_path: Path, xray: Path, codec: GlowCodec):
    cal = calibrate_latent(codec, torch.rand(20, 1, 16, 16, generator=torch.Generator().manual_seed(2)) * 2 - 1)
    flow_path = save_flow(tmp_path / "flow.pt", codec.flow, calibration=cal)
    runner = CliRunner()
    res = runner.invoke(cli, ["--device", "cpu", "anonymize", "dpglow", str(xray), "--flow", str(flow_path),
                              "--epsilon", "100", "--per-pixel", "--clip-box", "calibrated",
                              "--out", str(tmp_path / "rel")])
    assert res.exit_code == 0, res.output
    assert "WARNING" in res.output and "no formal protection" in res.output.replace("\n", " ")
    manifest, rows = read_release(tmp_path / "rel")
    priv = manifest["privacy"]
    assert priv["epsilon_image"] == 100 * 256 and priv["epsilon_element"] == 100 and priv["D"] == 256
    assert priv["alpha"] == 0.4 and priv["calibration"]["sha256"] == cal.checksum()
    assert priv["clip_box"].startswith("calibrated") and priv["vacuous"] is True
    assert "for ANY two inputs" in priv["statement"] and "does NOT cover" in priv["statement"]
    assert manifest["labels"] == ["pneumonia"] and len(rows) == 12 and manifest["phantom"] is True
    assert manifest["seeds"] == {} and "urandom" in priv["noise_source"]
    assert manifest["models"]["glow"] == sha256_file(flow_path)
    rep = audit_release(tmp_path / "rel", source_records=scan(xray).records)
    assert rep.passed, rep.format()

    res = runner.invoke(cli, ["anonymize", "dpglow", str(xray), "--flow", str(flow_path), "--epsilon", "5",
                              "--out", str(tmp_path / "public")])                  # the default box is public
    assert res.exit_code == 0, res.output
    priv = read_release(tmp_path / "public")[0]["privacy"]
    assert priv["clip_box"].startswith("public") and priv["calibration"]["samples"] == 0
    assert priv["guarantee"] == "epsilon-LDP" and priv["vacuous"] is False and priv["epsilon_image"] == 5

    with pytest.warns(NoFormalGuarantee, match="reproducible"):
        res = runner.invoke(cli, ["anonymize", "ldp-image", str(xray), "--epsilon", "10", "--per-element",
                                  "--clip-box", "calibrated", "--calibrate-on", str(xray), "--seed", "1",
                                  "--release-labels", "pneumonia,sex", "--out", str(tmp_path / "rel2")])
    assert res.exit_code == 0, res.output
    assert "TESTING ONLY" in res.output.replace("\n", " ").upper() or "testing only" in res.output
    manifest, rows = read_release(tmp_path / "rel2")
    assert manifest["method"] == "ldp-image" and manifest["labels"] == ["pneumonia", "sex"]
    assert manifest["privacy"]["space"].startswith("pixel") and "1" not in manifest["seeds"].values()
    assert manifest["privacy"]["guarantee"] == "none: no formal guarantee (reproducible noise, testing only)"

    res = runner.invoke(cli, ["anonymize", "ldp-image", str(xray), "--epsilon", "10", "--no-clip",
                              "--out", str(tmp_path / "rel3")])
    assert res.exit_code != 0 and "--no-clip" in res.output


def _checks(rep, word: str) -> dict[str, bool]:
    return {c.name: c.passed for c in rep.checks if word in c.name}


def test_the_audit_measures_an_ldp_release_s_noise_against_its_stated_epsilon(tmp_path: Path, xray: Path):
    """An LDP-image release whose statement claims ten times less epsilon than its noise gives is caught by the
    noise it holds (its values between black and white, against its sources), even when every number of the statement
    was edited consistently; the release as written passes. An edit of one number is caught by the statement's own
    arithmetic, without the source."""
    import json

    runner = CliRunner()
    res = runner.invoke(cli, ["anonymize", "ldp-image", str(xray), "--epsilon", "100", "--out", str(tmp_path / "r"),
                              "--mapping", str(tmp_path / "m.json")])
    assert res.exit_code == 0, res.output
    records = scan(xray).records
    rep = audit_release(tmp_path / "r", mapping=tmp_path / "m.json", source_records=records)
    noise = _checks(rep, "noise the stated epsilon needs")
    assert rep.passed and list(noise.values()) == [True], rep.format()
    assert _checks(rep, "statement's numbers") == {"the statement's numbers are those of the method's settings "
                                                   "(manifest)": True}
    path = tmp_path / "r" / "manifest.json"
    manifest = json.loads(path.read_text())
    p = manifest["privacy"]
    d = p["D"]
    manifest["params"]["epsilon"] = 10.0                 # ten times the protection, every number made to agree
    p.update(epsilon_image=10.0, epsilon_element=10.0 / d, noise_scale_mean=2 * d / 10.0,
             epsilon_patient_max=10.0 * p["max_images_per_patient"])
    path.write_text(json.dumps(manifest))
    rep = audit_release(tmp_path / "r", mapping=tmp_path / "m.json", source_records=records)
    assert list(_checks(rep, "statement's numbers").values()) == [True]
    assert list(_checks(rep, "noise the stated epsilon needs").values()) == [False], rep.format()
    p["noise_scale_mean"] = 2 * d / 100.0                # one number left as the release's: the arithmetic fails
    path.write_text(json.dumps(manifest))
    rep = audit_release(tmp_path / "r")
    assert list(_checks(rep, "statement's numbers").values()) == [False], rep.format()
    assert any("LDP noise was not measured" in n for n in rep.notes)      # without the mapping: said, not passed


def test_the_audit_counts_people_against_the_k_the_statement_claims(tmp_path: Path, xray: Path):
    """A k-Same statement edited to claim k = 4 over records of 2 people: the audit took k from the settings (2) and
    passed it."""
    import json

    res = CliRunner().invoke(cli, ["anonymize", "kpixel", str(xray), "--k", "2", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    path = tmp_path / "r" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["privacy"]["k"] = 4
    path.write_text(json.dumps(manifest))
    rep = audit_release(tmp_path / "r")
    assert not rep.passed
    assert _checks(rep, "people") == {"every record stands for >= 4 people (labels.csv)": False}
    assert list(_checks(rep, "statement's numbers").values()) == [False]


def test_the_audit_finds_copies_of_16_bit_sources(tmp_path: Path, xray: Path):
    """The pixel-for-pixel copy check converted 16-bit sources with Pillow's convert("L"), which makes every pixel
    white: a release of exact copies of 16-bit X-rays (epsilon = inf, no clipping) passed it."""
    import shutil

    from PIL import Image

    src = tmp_path / "x16"
    shutil.copytree(xray, src)
    for png in src.rglob("*.png"):
        with Image.open(png) as im:
            a = np.asarray(im.convert("L"), dtype=np.uint16) * 257
        Image.fromarray(a).save(png)                      # 16-bit grey, the same picture
    res = CliRunner().invoke(cli, ["anonymize", "ldp-image", str(src), "--epsilon", "inf", "--no-clip", "--size",
                                   "16", "--out", str(tmp_path / "r"), "--mapping", str(tmp_path / "m.json")])
    assert res.exit_code == 0, res.output
    rep = audit_release(tmp_path / "r", mapping=tmp_path / "m.json", source_records=scan(src).records)
    copies = {c.name: c for c in rep.checks if "pixel for pixel" in c.name}
    assert [c.passed for c in copies.values()] == [False] and "12 are" in next(iter(copies.values())).detail


def test_dpglow_refuses_a_flow_of_another_modality_or_size(tmp_path: Path):
    """A fundus dataset through the X-ray flow would be converted to grey and released as X-rays: refused, as the
    codec methods refuse; so is a --size the flow does not work at (it was silently replaced by the flow's)."""
    fundus = generate(PhantomConfig(modality="fundus", patients=2, per_patient=1, size=32, workers=1),
                      tmp_path / "fundus", progress=False)
    xray = generate(PhantomConfig(modality="xray", patients=2, per_patient=1, size=32, workers=1),
                    tmp_path / "xray", progress=False)
    flow = str(Path(__file__).resolve().parents[1] / "checkpoints" / "glow-xray64.pt")
    base = ["--device", "cpu", "anonymize", "dpglow", "--flow", flow, "--epsilon", "100", "--per-element"]
    r = CliRunner().invoke(cli, [*base, "--data", str(fundus), "--out", str(tmp_path / "a")])
    assert r.exit_code != 0 and "trained on xray images" in r.output and not (tmp_path / "a").exists(), r.output
    r = CliRunner().invoke(cli, [*base, "--data", str(xray), "--size", "32", "--out", str(tmp_path / "b")])
    assert r.exit_code != 0 and "works on 1-channel 64 px images" in r.output and not (tmp_path / "b").exists()
