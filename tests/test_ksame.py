"""The k-Same family: averages, k-SALSA optimisation, augmentation, and releases through the CLI + audit."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image
from torch import nn

from medanon.anonymize.augment import latent_views, prior_w_std
from medanon.anonymize.averaging import PCA, member_weights, pad_clusters, pca_averages, pixel_averages
from medanon.anonymize.latent_opt import optimize_latents
from medanon.anonymize.salsa import KSalsa, SalsaConfig, reference_average
from medanon.anonymize.style import StyleConfig
from medanon.checkpoint import save_checkpoint
from medanon.cli import cli
from medanon.config import PhantomConfig, to_dict
from medanon.data.layouts import scan
from medanon.errors import ConfigError
from medanon.models.encoder import Encoder
from medanon.models.stylegan import Generator, StyleGANConfig
from medanon.phantoms.generate import generate
from medanon.release import audit_release, read_release

NUM_WS, W_DIM = 4, 8


class TinyDecoder(nn.Module):
    """A stand-in generator: ws (N, 4, 8) -> images (N, 3, 16, 16), nonlinear, random weights."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.fc = nn.Linear(NUM_WS * W_DIM, 8 * 4 * 4)
        self.conv = nn.Conv2d(8, 3, 3, padding=1)
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g) * 0.5
        self.requires_grad_(False)

    def forward(self, ws):
        x = torch.tanh(self.fc(ws.flatten(1))).view(-1, 8, 4, 4)
        return torch.tanh(self.conv(nn.functional.interpolate(x, scale_factor=4, mode="bilinear")))


class TinyFeatures(nn.Module):
    """A stand-in feature network with the FeatureNetwork call: net(images, layers=[...]) -> dict."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.c1 = nn.Conv2d(3, 6, 3, padding=1)
        self.c2 = nn.Conv2d(6, 12, 3, stride=2, padding=1)
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g) * 0.4
        self.requires_grad_(False)

    def forward(self, x, layers):
        early = torch.relu(self.c1(x))
        out = {"early": early, "deep": torch.relu(self.c2(early)).mean(dim=(2, 3))}
        return {name: out[name] for name in layers}


def cluster_batch(b=3, s=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    latents = torch.randn(b, s, NUM_WS, W_DIM, generator=g)
    with torch.no_grad():
        images = TinyDecoder()(latents.flatten(0, 1)).reshape(b, s, 3, 16, 16)
    return images, latents, torch.ones(b, s, dtype=torch.float64)


def salsa(**kw):
    cfg = SalsaConfig(style_layer="early", content_layer="deep", **kw)
    return KSalsa(TinyDecoder(), TinyFeatures(), cfg)


# ------------------------------------------------------------------------------------------------ averages


def test_member_weights_count_people_not_images():
    w = member_weights(np.array([0, 1, 2, 3]), ["a", "a", "a", "b"])
    np.testing.assert_allclose(w, [1 / 6, 1 / 6, 1 / 6, 1 / 2])
    imgs = torch.arange(4.0)[:, None, None, None].expand(4, 1, 2, 2)
    avg = pixel_averages(imgs, [np.array([0, 1, 2, 3])], [w])
    assert float(avg[0, 0, 0, 0]) == pytest.approx((0 + 1 + 2) / 6 + 3 / 2)


def test_pca_matches_sklearn():
    from sklearn.decomposition import PCA as SkPCA

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((60, 5)) @ rng.standard_normal((5, 48)) + 0.05 * rng.standard_normal((60, 48)))
    images = torch.from_numpy(x.reshape(60, 3, 4, 4))
    ours = PCA(4).fit(images)
    ref = SkPCA(4, svd_solver="full").fit(x)
    np.testing.assert_allclose(ours.explained_variance_ratio_.numpy(), ref.explained_variance_ratio_, rtol=1e-8)
    np.testing.assert_allclose(np.abs(ours.components_.numpy() @ ref.components_.T), np.eye(4), atol=1e-8)
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(images), (3, 4, 4)).reshape(60, -1).numpy(),
                               ref.inverse_transform(ref.transform(x)), atol=1e-8)
    for q in (0.5, 0.95):
        assert PCA(q).fit(images).n_components_ == SkPCA(q, svd_solver="full").fit(x).n_components_
    half = np.zeros((4, 2))                              # variance split exactly 50 / 50: sklearn keeps both
    half[0, 0], half[1, 0], half[2, 1], half[3, 1] = 1, -1, 1, -1
    assert PCA(0.5).fit(torch.from_numpy(half.reshape(4, 1, 1, 2))).n_components_ == \
        SkPCA(0.5, svd_solver="full").fit(half).n_components_ == 2
    with pytest.raises(ConfigError, match="variance fraction"):
        PCA(1.5)


def test_kpca_with_every_component_is_the_pixel_average():
    rng = np.random.default_rng(1)
    images = torch.from_numpy(rng.uniform(-0.5, 0.5, (12, 1, 4, 4)))
    clusters = [np.array([0, 3, 5]), np.array([1, 2, 4, 6]), np.arange(7, 12)]
    weights = [np.full(len(c), 1 / len(c)) for c in clusters]
    full = PCA(11).fit(images)
    torch.testing.assert_close(pca_averages(images, clusters, weights, full), pixel_averages(images, clusters, weights))
    low = pca_averages(images, clusters, weights, PCA(2).fit(images))
    assert not torch.allclose(low, pixel_averages(images, clusters, weights))


def test_pad_clusters_gives_zero_weight_to_padding():
    idx, w = pad_clusters([np.array([4, 5, 6]), np.array([1, 2])], [np.full(3, 1 / 3), np.full(2, 0.5)])
    assert idx.tolist() == [[4, 5, 6], [1, 2, 1]] and w[1].tolist() == [0.5, 0.5, 0.0]


# ------------------------------------------------------------------------------------------------ optimisation


def test_latent_optimiser_items_are_independent():
    target = torch.randn(4, 3)
    loss = lambda w: ((w - target) ** 2).sum(1)                                    # noqa: E731
    together = optimize_latents(torch.zeros(4, 3), loss, steps=20)
    alone = torch.cat([optimize_latents(torch.zeros(1, 3), lambda w, i=i: ((w - target[i]) ** 2).sum(1),
                                        steps=20).latents for i in range(4)])
    torch.testing.assert_close(together.latents, alone)
    assert together.history.shape == (21, 4) and (together.history[-1] < together.history[0]).all()
    with pytest.raises(ValueError, match="one loss per item"):
        optimize_latents(torch.zeros(2, 3), lambda w: w.sum(), steps=1)


def test_ksalsa_lowers_the_local_style_loss_relative_to_the_centroid():
    images, latents, weights = cluster_batch()
    res = salsa(lam=0.1, steps=40).average(images, latents, weights)
    assert (res.style_end < 0.8 * res.style_start).all(), (res.style_start, res.style_end)
    torch.testing.assert_close(res.w0, latents.mean(1).float())
    assert res.history.shape == (41, 3)


def test_batched_clusters_match_one_at_a_time():
    images, latents, weights = cluster_batch(b=3, s=4, seed=3)
    weights[1, 3] = 0                                                              # a padded slot
    k = salsa(lam=0.2, steps=8)
    together = k.average(images, latents, weights).ws
    alone = torch.cat([k.average(images[i:i + 1], latents[i:i + 1], weights[i:i + 1]).ws for i in range(3)])
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-5)
    only3 = k.average(images[1:2, :3], latents[1:2, :3], weights[1:2, :3]).ws      # padding changes nothing
    torch.testing.assert_close(together[1:2], only3, rtol=1e-4, atol=1e-5)


def test_batched_average_matches_the_per_patch_reference():
    images, latents, weights = cluster_batch(b=2, s=4, seed=5)
    weights[0] = torch.tensor([1.0, 1.0, 0.5, 0.5], dtype=torch.float64)        # a patient with two images
    k = salsa(lam=0.3, steps=6)
    batched = k.average(images, latents, weights).ws
    for i in range(2):
        ref = reference_average(k.synthesize, k.features, k.cfg, images[i], latents[i], weights[i])
        torch.testing.assert_close(batched[i], ref, rtol=1e-4, atol=1e-4)


def test_content_only_is_the_centroid_and_ablations_differ():
    images, latents, weights = cluster_batch(b=2, seed=4)
    res = salsa(lam=1.0, steps=30).average(images, latents, weights)
    assert (res.content_end < 1e-3).all()                  # Eq. 6 alone keeps the centroid's content embedding
    base_res = salsa(lam=0.1, steps=30).average(images, latents, weights)
    assert (base_res.style_end < res.style_end).all()
    base = salsa(lam=0.1, steps=5).average(images, latents, weights).ws
    for style in (StyleConfig(align="none"), StyleConfig(align="global"), StyleConfig(match="cos", distance="cos"),
                  StyleConfig(match="mse", distance="mse")):
        other = salsa(lam=0.1, steps=5, style=style).average(images, latents, weights).ws
        assert not torch.allclose(other, base)


def test_latent_views_are_seeded_shifts_of_the_average():
    ws = torch.randn(2, NUM_WS, W_DIM)
    v1 = latent_views(ws, views=3, sigma=0.5, scale=torch.ones(W_DIM), generator=torch.Generator().manual_seed(0))
    v2 = latent_views(ws, views=3, sigma=0.5, scale=torch.ones(W_DIM), generator=torch.Generator().manual_seed(0))
    assert v1.shape == (2, 3, NUM_WS, W_DIM) and torch.equal(v1, v2) and torch.equal(v1[:, 0], ws)
    shift = v1[:, 1] - ws
    assert torch.allclose(shift, shift[:, :1].expand_as(shift)) and shift.abs().max() > 0   # one shift in W
    g = Generator(z_dim=8, w_dim=8, img_resolution=8, img_channels=1, channel_base=64, channel_max=8)
    std = prior_w_std(g, samples=500, seed=0)
    assert std.shape == (8,) and torch.equal(std, prior_w_std(g, samples=500, seed=0)) and (std > 0).all()


# ------------------------------------------------------------------------------------------------ releases


@pytest.fixture(scope="module")
def phantoms(tmp_path_factory) -> Path:
    return generate(PhantomConfig(patients=13, per_patient=2, size=32, workers=1, seed=3),
                    tmp_path_factory.mktemp("src") / "fundus", progress=False)


@pytest.fixture(scope="module")
def codec_ckpt(tmp_path_factory) -> Path:
    """A tiny random ReStyle codec checkpoint in the format `medanon train encoder` writes."""
    torch.manual_seed(0)
    gcfg = StyleGANConfig(resolution=32, channels=3, z_dim=16, w_dim=16, channel_base=128, channel_max=16)
    G = Generator.from_config(gcfg)
    E = Encoder(32, 3, G.num_ws, G.w_dim, iterative=True, channel_base=128, channel_max=16, head_dim=16)
    path = tmp_path_factory.mktemp("ckpt") / "restyle-tiny.pt"
    return save_checkpoint(path, kind="restyle-encoder", state={"G": G.state_dict(), "E": E.state_dict()},
                           config={"generator": to_dict(gcfg), "encoder": dict(E.kwargs), "codec": {"iterations": 2}})


def run_cli(args):
    r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", *map(str, args)])
    assert r.exit_code == 0, r.output + repr(r.exception)
    return r


def audit_ok(out: Path, mapping: Path, data: Path, k: int):
    rep = audit_release(out, mapping=mapping, source_records=scan(data).records)
    assert rep.passed, rep.format()
    assert any(f">= {k} people (mapping)" in c.name for c in rep.checks)
    return rep


@pytest.mark.parametrize("method", ["kpixel", "kpca"])
def test_pixel_methods_release_and_audit(tmp_path, phantoms, method):
    out, mapping = tmp_path / "rel", tmp_path / "private" / "map.json"
    run_cli([method, "--data", phantoms, "--k", 3, "--out", out, "--mapping", mapping, "--release-labels",
             "grade,sex,age"])
    manifest, rows = read_release(out)
    assert len(rows) == 4                                          # 13 patients, k = 3: one cluster of 4
    assert sorted(int(r["n_people"]) for r in rows) == [3, 3, 3, 4]
    assert {int(r["n_sources"]) for r in rows} <= {6, 8}           # every image of each patient
    assert manifest["method"] == method and manifest["params"]["k"] == 3
    assert manifest["params"]["clustering"]["space"] == "pca" and "grade_counts" in rows[0]
    assert manifest["privacy"]["k"] == 3 and manifest["privacy"]["clusters"] == 4
    assert manifest["seeds"] == {"pca_subsample": 0}
    audit_ok(out, mapping, phantoms, 3)


def test_latent_methods_release_audit_and_manifest(tmp_path, phantoms, codec_ckpt):
    for method, extra in [("kcentroid", ["--views", 2]), ("ksalsa", ["--steps", 2, "--lam", 0.3, "--batch", 2])]:
        out, mapping = tmp_path / method, tmp_path / f"{method}-map.json"
        run_cli([method, "--data", phantoms, "--model", codec_ckpt, "--k", 4, "--out", out, "--mapping", mapping,
                 *extra])
        manifest, rows = read_release(out)
        audit_ok(out, mapping, phantoms, 4)
        assert manifest["params"]["clustering"]["space"] == "latent"
        assert any(k.startswith("codec:") for k in manifest["models"])
        assert min(int(r["n_people"]) for r in rows) >= 4
    assert len(read_release(tmp_path / "kcentroid")[1]) == 6                        # 3 clusters x 2 views
    # the augmentation noise is secret; its public scale estimate is seeded, and a resume must keep that seed
    assert read_release(tmp_path / "kcentroid")[0]["seeds"] == {"augmentation_scale": 0}
    assert read_release(tmp_path / "ksalsa")[0]["seeds"] == {}                      # deterministic
    salsa_params = read_release(tmp_path / "ksalsa")[0]["params"]["salsa"]
    assert salsa_params["lambda"] == 0.3 and salsa_params["steps"] == 2
    # the batch size is speed only: batches of 2 + 1 clusters and one batch of 3 give the same summary
    # (a mean over clusters, not over batches) and the same images
    outputs = {}
    for batch in (2, 3):
        r = run_cli(["ksalsa", "--data", phantoms, "--model", codec_ckpt, "--k", 4, "--steps", 2, "--lam", 0.3,
                     "--batch", batch, "--out", tmp_path / f"b{batch}"])
        outputs[batch] = [float(v) for v in re.findall(r"style_loss_(?:start|end) ([0-9.e-]+)", r.output)]
    assert len(outputs[2]) == 2 and np.allclose(outputs[2], outputs[3], rtol=1e-5)
    pixels = [sorted((np.asarray(Image.open(p), np.int16) for p in (tmp_path / f"b{b}").rglob("*.png")),
                     key=lambda a: int(a.sum())) for b in (2, 3)]
    assert len(pixels[0]) == 3
    assert max(int(np.abs(a - b).max()) for a, b in zip(*pixels, strict=True)) <= 2   # float rounding only
    assert salsa_params["style_layer"] == "block1" and "EfficientNet" in salsa_params["feature_network"]["name"]
    assert any(k.startswith("features:") for k in read_release(tmp_path / "ksalsa")[0]["models"])


def test_inverted_is_labelled_not_anonymous(tmp_path, phantoms, codec_ckpt):
    out = tmp_path / "inv"
    r = run_cli(["inverted", "--data", phantoms, "--model", codec_ckpt, "--out", out])
    assert "NOT anonymised" in r.output
    manifest, rows = read_release(out)
    assert len(rows) == 26 and manifest["params"]["k"] == 1 and manifest["privacy"]["guarantee"].startswith("none")


def test_a_model_option_that_the_model_contradicts_is_refused(tmp_path, phantoms, codec_ckpt):
    """--size and --channels must be the model's (or left out): a grey reading of a colour codec's data was
    silently made colour again."""
    for extra, flag, said in ((["--channels", "1"], "--channels", "1 differs from the 3 channel(s) the model"),
                              (["--size", "16"], "--size", "16 differs from the 32 px the model")):
        r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", "inverted", str(phantoms), "--model",
                                     str(codec_ckpt), *extra, "--out", str(tmp_path / "x")])
        assert r.exit_code == 2 and flag in r.output and said in " ".join(r.output.split()), r.output
        assert not (tmp_path / "x").exists()
    run_cli(["inverted", phantoms, "--model", codec_ckpt, "--channels", "3", "--out", tmp_path / "ok"])


def test_a_style_grid_finer_than_the_feature_map_is_refused_before_any_image_is_inverted(tmp_path, phantoms,
                                                                                        codec_ckpt, monkeypatch):
    """--grid 100 on a 32 px image's 16x16 style map failed with a traceback after every image was inverted."""
    import medanon
    from medanon.anonymize import ksame

    def never(*a, **kw):
        raise AssertionError("images were inverted before the grid was checked")

    monkeypatch.setattr(ksame, "encode_all", never)
    r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", "ksalsa", str(phantoms), "--model", str(codec_ckpt),
                                 "--k", "2", "--steps", "1", "--grid", "100", "--out", str(tmp_path / "x")])
    said = " ".join(r.output.split())
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert "--grid 100: the style layer block1 of efficientnet-lite0 gives a 16x16 feature map of a 32 px image" \
        in said and "use --grid of at most 16" in said, said
    assert not (tmp_path / "x").exists()
    with pytest.raises(ConfigError, match="grid=17: the style layer block1"):
        medanon.anonymize.ksalsa(phantoms, k=2, codec=codec_ckpt, grid=17, steps=1)


def test_resume_does_not_redo_written_clusters(tmp_path, phantoms, interrupted_after):
    out = tmp_path / "rel"
    with interrupted_after(3):
        r = CliRunner().invoke(cli, ["anonymize", "kpixel", "--data", str(phantoms), "--k", "2", "--out", str(out),
                                     "--batch", "2"])
    assert r.exit_code != 0 and not out.exists() and (tmp_path / "rel.partial").exists()
    r = run_cli(["kpixel", "--data", phantoms, "--k", 2, "--out", out, "--batch", 2])
    assert "resuming: 2 records" in r.output
    assert len(read_release(out)[1]) == 6
    meta = json.loads((out / "manifest.json").read_text())
    assert meta["counts"]["records"] == 6 and meta["counts"]["people"] == 13


def test_a_resumed_ksalsa_says_its_style_losses_are_of_the_clusters_it_computed(tmp_path, phantoms, codec_ckpt,
                                                                                 interrupted_after):
    """The summary's style_loss_start/end of a resumed run cover only the clusters that run computed, and said
    nothing of it (they differ from an uninterrupted run's)."""
    out = tmp_path / "rel"
    args = ["ksalsa", "--data", phantoms, "--model", codec_ckpt, "--k", 2, "--steps", 1, "--batch", 1, "--out", out]
    with interrupted_after(3):
        r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", *map(str, args)])
    assert r.exit_code != 0 and (tmp_path / "rel.partial").exists()
    r = run_cli(args)
    assert "resuming: 2 records" in r.output and "style_loss_clusters 4" in r.output, r.output


def test_bad_input_is_named(tmp_path, phantoms):
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", "--data", str(phantoms), "--set", "k=1", "--out",
                                 str(tmp_path / "x")])
    assert r.exit_code == 1 and "--k 1" in r.output and "fix:" in r.output
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", "--data", str(phantoms), "--k", "20", "--out",
                                 str(tmp_path / "y")])
    assert r.exit_code == 1 and "--k 20" in r.output and "lower --k or add data" in r.output   # a DataError, reworded
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", "--data", str(phantoms), "--k", "2", "--stratify", "colour",
                                 "--out", str(tmp_path / "z")])
    assert r.exit_code == 1 and "--stratify 'colour'" in r.output
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", "--data", str(phantoms), "--out", str(tmp_path / "w")])
    assert r.exit_code == 2 and "--k" in r.output       # the privacy parameter has no default: the user states it


@pytest.mark.parametrize("leak", ["member-named image", "patient id in manifest", "cluster of too few people"])
def test_audit_catches_leaks_planted_in_a_ksame_release(tmp_path, phantoms, leak):
    """The original k-SALSA code saved each average under a member's file name; the audit must catch it."""
    out, mapping = tmp_path / "rel", tmp_path / "map.json"
    run_cli(["kpixel", "--data", phantoms, "--k", 3, "--out", out, "--mapping", mapping])
    records = scan(phantoms).records
    m = json.loads(mapping.read_text())
    first = sorted(m["records"])[0]
    member = next(r for r in records if r.record_id == m["records"][first]["sources"][0])
    if leak == "member-named image":
        new = f"images/{member.path.stem}.png"
        (out / first).rename(out / new)
        (out / "labels.csv").write_text((out / "labels.csv").read_text().replace(first, new))
        m["records"][new] = m["records"].pop(first)
        mapping.write_text(json.dumps(m))
    elif leak == "patient id in manifest":
        man = json.loads((out / "manifest.json").read_text())
        man["params"]["note"] = f"cluster of {member.patient_id}"
        (out / "manifest.json").write_text(json.dumps(man))
    else:
        keep = [s for s in m["records"][first]["sources"]
                if next(r for r in records if r.record_id == s).patient_id == member.patient_id]
        m["records"][first] = {"sources": keep, "patients": [member.patient_id]}
        mapping.write_text(json.dumps(m))
    rep = audit_release(out, mapping=mapping, source_records=records)
    assert not rep.passed
    failed = " ".join(c.name for c in rep.checks if not c.passed)
    assert {"member-named image": "random file names", "patient id in manifest": "patient id",
            "cluster of too few people": "people (mapping)"}[leak] in failed, rep.format()


def test_the_shipped_codec_is_the_default_for_fundus_and_xray_asks_for_one(tmp_path, phantoms):
    from medanon.fsutil import sha256_file
    from medanon.models_registry import default_model, find_model

    r = CliRunner().invoke(cli, ["anonymize", "kcentroid", "--data", str(phantoms), "--k", "4", "--out",
                                 str(tmp_path / "kc")])
    assert r.exit_code == 0, r.output
    shipped = find_model(default_model("ksame-codec", "fundus"))
    assert "restyle-map-fundus64" in r.output
    assert read_release(tmp_path / "kc")[0]["models"]["codec:restyle"] == sha256_file(shipped)
    xray = generate(PhantomConfig(modality="xray", patients=4, per_patient=1, size=32, workers=1), tmp_path / "xr",
                    progress=False)
    r = CliRunner().invoke(cli, ["anonymize", "kcentroid", "--data", str(xray), "--k", "2", "--out",
                                 str(tmp_path / "kx")])
    assert r.exit_code == 2 and "needs --model" in r.output and not (tmp_path / "kx").exists()


def test_latent_optimisation_runs_inside_a_callers_no_grad():
    """k-SALSA's and GMIA's optimisation take gradients even when the caller holds torch.no_grad() (an evaluation
    loop, a notebook cell): the result is optimised, not an autograd error."""
    from medanon.anonymize.latent_opt import optimize_latents

    with torch.no_grad():
        res = optimize_latents(torch.zeros(2, 3), lambda w: (w - 1).pow(2).sum(1), steps=200, lr=0.05)
    assert torch.allclose(res.latents, torch.ones(2, 3), atol=1e-2)
    assert res.history[-1].max() < res.history[0].min()


def test_a_latent_release_of_the_shipped_codecs_training_people_says_so(tmp_path):
    """The shipped fundus codec was trained on the 500-patient seed-0 phantom: a seed-0 phantom's patients are among
    them, so its k-Centroid records also depend on them through the codec's weights. The statement says so (with a
    count, never ids) and warns; a phantom of another seed keeps the plain statement."""
    import warnings

    import medanon
    from medanon.anonymize.privacy import CalibrationOverlap

    seed0 = medanon.make_phantom(tmp_path / "seed0", patients=4, per_patient=1, size=64)
    with pytest.warns(CalibrationOverlap, match="trained on a phantom \\(seed 0\\) that holds 4 of the released"):
        rel = medanon.anonymize.kcentroid(seed0, k=2)
    privacy = rel.privacy
    assert "restyle-map-fundus64.pt" in privacy["models_trained_on_released"]["files"]
    assert "weights of models trained on 4 of the released patients" in privacy["guarantee"]
    assert "computed only from the images of one cluster" not in privacy["guarantee"] and privacy["k"] == 2
    assert any("memorised of the 4 released patients" in item for item in privacy["not_protected"])
    assert not any("were not trained on the released" in a for a in privacy["assumptions"])    # known to fail
    assert any(a.startswith("what the models memorised of the released patients they were trained on is accepted")
               for a in privacy["assumptions"])
    assert "P0000" not in json.dumps(privacy)                                 # public: a count, never an id
    other = medanon.make_phantom(tmp_path / "seed5", patients=4, per_patient=1, size=64, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationOverlap)
        kept = medanon.anonymize.kcentroid(other, k=2).privacy
    assert "computed only from the images of one cluster" in kept["guarantee"]
    assert "models_trained_on_released" not in kept
    assert any("were not trained on the released" in a for a in kept["assumptions"])
