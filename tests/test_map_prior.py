"""k-SALSA's map prior: a codec with a spatial map starts each cluster from its centroid's styles and the map of the
synthetic image nearest to the centroid's map; ``rows="styles"`` would keep that map (docs/ksalsa.md)."""


import pytest
import torch
from test_encoders import gan_checkpoint, tiny_generator
from test_ksame import TinyDecoder, TinyFeatures, cluster_batch, read_release, run_cli
from test_latent_map import map_codec_ckpt  # noqa: F401  (a fixture)

from medanon.anonymize.map_prior import MapPrior, build_map_prior, has_map
from medanon.anonymize.salsa import KSalsa, SalsaConfig, reference_average
from medanon.codecs.stylegan import load_codec
from medanon.config import PhantomConfig
from medanon.errors import ConfigError
from medanon.models_registry import DEFAULTS
from medanon.phantoms.generate import generate


def test_the_start_is_the_centroid_styles_with_the_nearest_synthetic_map(map_codec_ckpt):  # noqa: F811
    codec = load_codec(map_codec_ckpt)
    G, _ = tiny_generator()
    prior = build_map_prior(codec, G, samples=12, seed=4)
    n = codec.generator.num_ws
    assert has_map(codec) and prior.maps.shape == (12, codec.generator.num_rows - n, codec.generator.w_dim)
    again = build_map_prior(codec, G, samples=12, seed=4)                  # seeded: a resumed run draws the same
    assert torch.equal(prior.maps, again.maps)
    w0 = torch.randn(5, codec.generator.num_rows, codec.generator.w_dim)
    idx, start = prior.start(w0)
    brute = torch.stack([((prior.maps - w[n:]) ** 2).sum((1, 2)) for w in w0]).argmin(1)
    assert torch.equal(idx, brute)
    assert torch.equal(start[:, :n], w0[:, :n]) and torch.equal(start[:, n:], prior.maps[idx])
    w0[1, n:] = prior.maps[7] + 1e-3                                         # a centroid on a synthetic map finds it
    assert prior.start(w0)[0][1] == 7


def test_a_codec_without_a_map_or_a_generator_of_another_size_is_refused(map_codec_ckpt):  # noqa: F811
    codec = load_codec(map_codec_ckpt)
    G, _ = tiny_generator()
    G.img_resolution = 64                                                    # as if it drew 64 px images
    with pytest.raises(ConfigError, match="map generator draws"):
        build_map_prior(codec, G, samples=2, seed=0)
    with pytest.raises(ValueError, match="do not fit"):
        MapPrior(torch.zeros(3, 2, 4), 1, {}).start(torch.zeros(1, 4, 4))


def test_rows_styles_from_a_start_keeps_its_map_and_matches_the_reference():
    images, latents, weights = cluster_batch(b=2, seed=8)
    start = latents[:, 0].clone()
    start[:, 2:] = torch.randn_like(start[:, 2:])                          # a "synthetic map" in rows 2..
    cfg = SalsaConfig(style_layer="early", content_layer="deep", lam=0.3, steps=4, lr=0.05, rows="styles")
    k = KSalsa(TinyDecoder(), TinyFeatures(), cfg, style_rows=2)
    res = k.average(images, latents, weights, start=start)
    assert torch.equal(res.w0, start) and torch.equal(res.ws[:, 2:], start[:, 2:])
    assert (res.ws[:, :2] - start[:, :2]).abs().max() > 1e-3
    for i in range(2):
        ref = reference_average(k.synthesize, k.features, cfg, images[i], latents[i], weights[i], style_rows=2,
                                start=start[i])
        torch.testing.assert_close(res.ws[i], ref, rtol=1e-4, atol=1e-4)


def test_cli_records_the_map_prior_and_the_library_explains_a_missing_generator(tmp_path, monkeypatch,
                                                                                 map_codec_ckpt):  # noqa: F811
    import numpy as np

    import medanon

    data = generate(PhantomConfig(patients=6, per_patient=1, size=32, workers=1, seed=5), tmp_path / "src",
                    progress=False)
    gan, _ = gan_checkpoint(tmp_path / "gan.pt")
    out = tmp_path / "rel"
    run_cli(["ksalsa", "--data", data, "--model", map_codec_ckpt, "--k", 3, "--out", out, "--mapping",
             tmp_path / "m.json", "--steps", 1, "--map-init", "synthetic", "--map-generator", gan, "--map-samples", 8])
    manifest, rows = read_release(out)
    prior = manifest["params"]["salsa"]["map_prior"]
    assert prior["generator"] == "gan.pt" and prior["candidates"] == 8 and len(prior["sha256"]) == 64
    assert manifest["params"]["model_files"]["map_generator"] == {"file": "gan.pt", "chosen": "given"}
    assert manifest["params"]["salsa"]["rows"] == "all" and len(rows) == 2
    assert any("map generator (gan.pt)" in a for a in manifest["privacy"]["assumptions"])
    out2 = tmp_path / "rel-centroid"
    run_cli(["ksalsa", "--data", data, "--model", map_codec_ckpt, "--k", 3, "--out", out2, "--mapping",
             tmp_path / "m2.json", "--steps", 1])                         # the default: the members' mean map
    assert "map_init='centroid'" in read_release(out2)[0]["params"]["salsa"]["map_prior"]
    monkeypatch.delitem(DEFAULTS["ksalsa-map-generator"], "fundus")        # a modality with no shipped generator
    x = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (6, 3, 32, 32)).astype("float32"))
    with pytest.raises(ConfigError, match="no map generator ships for fundus") as err:
        medanon.anonymize.ksalsa(x, patient_ids=[0, 1, 2, 3, 4, 5], modality="fundus", k=3, codec=map_codec_ckpt,
                                 map_init="synthetic", value_range=(-1, 1))
    assert "map_init='centroid'" in str(err.value.fix) and "map_generator=" in str(err.value.fix)
    from medanon.cli.anonymize_ksame import FLAGS
    from medanon.cli.library import translate
    assert "--map-init centroid" in translate(str(err.value.fix), FLAGS) and "--map-generator" in translate(
        str(err.value.fix), FLAGS)


def test_a_map_prior_is_refused_where_the_config_starts_from_the_centroid():
    from medanon.anonymize.ksame import ClusterAverager, KSameConfig

    prior = MapPrior(torch.zeros(3, 2, 4), 1, {})
    cfg = KSameConfig(method="ksalsa", k=2)                                 # map_init="centroid", the default
    with pytest.raises(ValueError, match="map_init='synthetic'"):
        ClusterAverager(cfg, None, codec=None, features=None, latents=None, pca=None, device="cpu", map_prior=prior)


def test_a_map_generator_that_nothing_would_read_is_refused(map_codec_ckpt):  # noqa: F811
    """With map_init='centroid' (the default) no map prior is built: a given generator was silently not used."""
    import medanon

    x = torch.rand(4, 3, 32, 32) * 2 - 1
    with pytest.raises(ConfigError, match="map_generator='nope' is not used: map_init='centroid'") as err:
        medanon.anonymize.ksalsa(x, patient_ids=[0, 1, 2, 3], modality="fundus", k=2, codec=map_codec_ckpt,
                                 map_generator="nope", value_range=(-1, 1))
    assert "leave map_generator= out" in str(err.value.fix)


def test_a_map_generator_trained_on_the_released_patients_is_stated(tmp_path, map_codec_ckpt):  # noqa: F811
    """A map generator whose checkpoint records its training patients (as `medanon train gan` writes them) is compared
    with the released patients like the codec: trained on them, the statement names it and drops its assumption
    (known to fail); its training people stay out of the public params."""
    import warnings

    import medanon
    from medanon.checkpoint import load_checkpoint, save_checkpoint
    from medanon.data.training_people import training_people

    data = generate(PhantomConfig(patients=6, per_patient=1, size=32, workers=1, seed=5), tmp_path / "src",
                    progress=False)
    ds = medanon.open_dataset(data, size=32)
    gan, _ = gan_checkpoint(tmp_path / "gan.pt")
    blob = load_checkpoint(gan)
    save_checkpoint(gan, kind=blob["kind"], config=blob["config"], state=blob["state"],
                    extra={"training_images": {"people": [training_people(ds, ds.records)]}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = medanon.anonymize.ksalsa(ds, k=3, codec=map_codec_ckpt, map_init="synthetic", map_generator=gan,
                                       map_samples=4, steps=1)
    privacy = rel.privacy
    assert "gan.pt" in privacy["models_trained_on_released"]["files"]
    assert privacy["models_trained_on_released"]["released_patients"] == 6
    assert not any(a.startswith("the map generator (gan.pt)") for a in privacy["assumptions"])
    prior = rel.params["salsa"]["map_prior"]
    assert "_trained_people" not in prior and sorted(prior["trained_people"][0]) == [
        "dataset_key", "images", "model", "people_key", "split"]                 # keyed: what evaluate reads
