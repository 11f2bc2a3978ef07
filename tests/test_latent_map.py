"""The spatial latent map (issue 12): a co-trained codec whose latent is W+ styles plus a small feature map.

Invariants: an untrained map changes nothing (so a GAN's weights start the codec exactly where the GAN was);
the map's rows round-trip through the latent layout; the map reaches the image; bad map settings are refused;
co-training learns it, resumes it and exports it; ReStyle inverts such a generator; every latent method runs
on the whole latent and latent augmentation leaves the map rows alone."""

import dataclasses

import pytest
import torch
from test_encoders import TINY_AUTOENCODER, _state_equal, fast_encoder_cfg, gan_checkpoint, generated_images

from medanon.anonymize.augment import latent_views
from medanon.checkpoint import load_checkpoint
from medanon.codecs.stylegan import StyleGANCodec, load_codec
from medanon.config import build
from medanon.errors import ConfigError
from medanon.models.encoder import Encoder
from medanon.models.stylegan import Generator, StyleGANConfig
from medanon.train.autoencoder import AutoencoderConfig, train_autoencoder
from medanon.train.encoder import train_restyle

MAP = {"map_resolution": 8, "map_channels": 2}          # 2 x 8 x 8 = 128 values = 4 rows of w_dim 32


def map_generator(seed: int = 0) -> Generator:
    cfg = dataclasses.replace(build(AutoencoderConfig, path=TINY_AUTOENCODER).generator, **MAP)
    torch.manual_seed(seed)
    return Generator.from_config(cfg).eval()


def map_cfg(**kw) -> AutoencoderConfig:
    cfg = build(AutoencoderConfig, path=TINY_AUTOENCODER)
    return dataclasses.replace(cfg, generator=dataclasses.replace(cfg.generator, **MAP),
                               **{"perceptual_weight": 0.0, **kw})


def test_latent_layout_and_an_untrained_map_changes_nothing():
    G = map_generator()
    assert (G.num_ws, G.map_rows, G.num_rows) == (8, 4, 12)
    ws = G.mapping(torch.randn(3, G.z_dim))
    fmap = torch.randn(3, 2, 8, 8)
    latents = torch.cat([ws, fmap.reshape(3, 4, G.w_dim)], dim=1)
    styles, back = G.synthesis.split(latents)
    assert torch.equal(styles, ws) and torch.equal(back, fmap)
    with torch.no_grad():
        plain = G.synthesis(ws, noise_mode="const")
        assert torch.equal(G.synthesis(latents, noise_mode="const"), plain)   # map_in starts at zero
        G.synthesis.map_in.weight.normal_()
        mapped = G.synthesis(latents, noise_mode="const")
        assert not torch.allclose(mapped, plain)                            # a trained map reaches the image
        assert torch.equal(G.synthesis(ws, noise_mode="const"), plain)      # styles alone: a zero map
    with pytest.raises(ValueError, match=r"\(N, 8 or 12, 32\)"):
        G.synthesis(latents[:, :10])


@pytest.mark.parametrize("kw, match", [({"map_resolution": 4, "map_channels": 1}, "not a multiple of w_dim"),
                                       ({"map_resolution": 64, "map_channels": 2}, "between 4 and"),
                                       ({"map_resolution": 6, "map_channels": 8}, "power of two"),
                                       ({"map_resolution": 8, "map_channels": 0}, "not a multiple")])
def test_bad_map_settings_are_refused(kw, match):
    base = build(AutoencoderConfig, path=TINY_AUTOENCODER).generator
    with pytest.raises(ConfigError, match=match):
        dataclasses.replace(base, **kw).validate()


def test_codec_with_a_map_encodes_styles_and_map():
    G = map_generator()
    E = Encoder(32, 3, G.num_ws, G.w_dim, iterative=False, channel_base=512, channel_max=32, head_dim=32, **MAP)
    codec = StyleGANCodec(G, E, 1)
    x = torch.rand(5, 3, 32, 32) * 2 - 1
    z = codec.encode(x)
    assert z.shape == (5, 12, 32) and codec.latent_space == "ws+map"
    assert codec.decode(z).shape == (5, 3, 32, 32)
    d = codec.describe()
    assert d["latent_space"] == "ws+map" and d["map"] == {"resolution": 8, "channels": 2, "rows": 4}
    start, _ = codec.start(2)
    assert torch.equal(start[:, G.num_ws:], torch.zeros(2, 4, 32))           # the map starts at zero
    plain = Encoder(32, 3, G.num_ws, G.w_dim, iterative=False, channel_base=512, channel_max=32, head_dim=32)
    with pytest.raises(ConfigError, match="latent rows"):
        StyleGANCodec(G, plain, 1)
    with pytest.raises(ValueError, match=r"\(N, 12, 32\)"):
        codec.decode(z[:, :8])


def test_cotraining_learns_resumes_and_exports_the_map(tmp_path):
    ckpt, G = gan_checkpoint(tmp_path / "gan.pt")
    images = generated_images(G, 16, seed=5)
    cfg = map_cfg(r1_interval=2)
    full = train_autoencoder(images, cfg, tmp_path / "full", steps=4, init_ckpt=ckpt, progress=False)
    train_autoencoder(images, cfg, tmp_path / "cut", steps=2, init_ckpt=ckpt, progress=False)
    cut = train_autoencoder(images, map_cfg(r1_interval=2), tmp_path / "cut", steps=4, resume=True, progress=False)
    a, b = load_checkpoint(full), load_checkpoint(cut)
    for k in ("E", "G", "D"):
        assert _state_equal(a["state"][k], b["state"][k]), k
    assert a["config"]["generator"]["map_resolution"] == 8 and a["config"]["encoder"]["map_channels"] == 2
    assert float(a["state"]["G"]["synthesis.map_in.weight"].abs().sum()) > 0      # learned away from zero
    codec = load_codec(full)
    assert codec.latent_space == "ws+map" and codec.encode(images[:3]).shape == (3, 12, 32)
    # the GAN's own weights were the start: everything but the map's input layer came from it
    with torch.no_grad():
        assert torch.equal(codec.generator.mapping.w_avg, G.mapping.w_avg)


def test_restyle_inverts_a_generator_with_a_map(tmp_path):
    ckpt, G = gan_checkpoint(tmp_path / "gan.pt")
    images = generated_images(G, 8, seed=6)
    cotrained = train_autoencoder(images, map_cfg(), tmp_path / "ae", steps=2, init_ckpt=ckpt, progress=False)
    restyle = load_codec(train_restyle(images, cotrained, fast_encoder_cfg(), tmp_path / "rs", steps=2,
                                       progress=False))
    assert restyle.name == "restyle" and restyle.latent_space == "ws+map"
    assert restyle.encode(images[:2]).shape == (2, 12, 32)


def test_augmentation_shifts_only_the_style_rows():
    ws = torch.randn(3, 12, 32)
    out = latent_views(ws, views=4, sigma=0.5, scale=torch.ones(32), generator=torch.Generator().manual_seed(0),
                       style_rows=8)
    assert out.shape == (3, 4, 12, 32)
    assert torch.equal(out[:, :, 8:], ws[:, None, 8:].expand(-1, 4, -1, -1))   # the map rows: untouched
    assert torch.equal(out[:, 0], ws)                                           # view 0: the average itself
    shift = out[:, 1:, :8] - ws[:, None, :8]
    assert float(shift.abs().min()) > 0                                         # every style row moved
    assert torch.allclose(shift, shift[:, :, :1].expand_as(shift), atol=1e-5)  # by one shift in W


def test_a_gan_state_that_does_not_fit_is_refused(tmp_path):
    from medanon.train.autoencoder_init import load_init_generator
    G = map_generator()
    state = {k: v for k, v in map_generator(seed=1).state_dict().items() if not k.startswith("synthesis.map_in")}
    load_init_generator(G, state)                                           # a GAN's state: fits, map_in kept
    state["synthesis.extra.weight"] = torch.zeros(1)
    with pytest.raises(ConfigError, match=r"synthesis\.extra\.weight"):
        load_init_generator(G, state)
    del state["synthesis.extra.weight"], state["synthesis.blocks.0.const"]
    with pytest.raises(ConfigError, match=r"blocks\.0\.const"):
        load_init_generator(G, state)


@pytest.fixture(scope="module")
def map_codec_ckpt(tmp_path_factory):
    """A tiny co-trained checkpoint with a map whose input layer is not zero (so the map shapes the images)."""
    from medanon.checkpoint import save_checkpoint
    from medanon.config import to_dict

    torch.manual_seed(0)
    gcfg = StyleGANConfig(resolution=32, channels=3, z_dim=16, w_dim=16, channel_base=128, channel_max=16,
                          map_resolution=8, map_channels=1)       # 64 values = 4 rows of 16
    G = Generator.from_config(gcfg)
    with torch.no_grad():
        G.synthesis.map_in.weight.normal_()
    E = Encoder(32, 3, G.num_ws, G.w_dim, iterative=False, channel_base=128, channel_max=16, head_dim=16,
                map_resolution=8, map_channels=1)
    path = tmp_path_factory.mktemp("ckpt") / "cotrained-map.pt"
    return save_checkpoint(path, kind="cotrained-autoencoder", state={"G": G.state_dict(), "E": E.state_dict()},
                           config={"generator": to_dict(gcfg), "encoder": dict(E.kwargs), "codec": {"iterations": 1}})


def test_latent_methods_run_on_a_map_latent(tmp_path, map_codec_ckpt):
    """k-Centroid with views, k-SALSA and GMIA release through the whole (styles + map) latent; the manifest says
    which latent space they averaged or optimised in."""
    import json

    from test_ksame import audit_ok, read_release, run_cli

    from medanon.anonymize.gmia import GMIA, GMIAConfig, IdentityEncoder, UtilityEncoder
    from medanon.config import PhantomConfig
    from medanon.models.classifier import ResNet, ResNetConfig
    from medanon.models.identity import IdentityConfig, IdentityNet
    from medanon.phantoms.generate import generate

    data = generate(PhantomConfig(patients=9, per_patient=2, size=32, workers=1, seed=3), tmp_path / "src",
                    progress=False)
    gan, _ = gan_checkpoint(tmp_path / "gan.pt")                     # k-SALSA's map prior at the codec's 32 px
    for method, extra in [("kcentroid", ["--views", 2]),
                          ("ksalsa", ["--steps", 2, "--batch", 2, "--map-init", "synthetic", "--map-generator", gan,
                                     "--map-samples", 8])]:
        out, mapping = tmp_path / method, tmp_path / f"{method}-map.json"
        run_cli([method, "--data", data, "--model", map_codec_ckpt, "--k", 3, "--out", out, "--mapping", mapping,
                 *extra])
        manifest, rows = read_release(out)
        audit_ok(out, mapping, data, 3)
        assert min(int(r["n_people"]) for r in rows) >= 3
        assert "ws+map" in json.dumps(manifest["params"])
    codec = load_codec(map_codec_ckpt)
    small = ResNetConfig(in_channels=3, widths=(8, 16), blocks=(1, 1))
    gmia = GMIA(codec, identity=IdentityEncoder(IdentityNet(IdentityConfig(small, embed_dim=8, image_size=32))),
                utility=UtilityEncoder(ResNet(small), image_size=32), cfg=GMIAConfig(steps=3))
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    res = gmia.anonymise(x)
    assert res.ws.shape == (2, codec.generator.num_rows, 16) and res.images.shape == (2, 3, 32, 32)
    start, n = codec.encode(x).cpu(), codec.generator.num_ws
    assert not torch.equal(res.ws[:, n:], start[:, n:])                       # the map is optimised
    shift = res.ws[:, :n] - start[:, :n]                                        # the paper's W: one offset shared
    assert float(shift.abs().max()) > 0 and torch.allclose(shift, shift[:, :1].expand_as(shift), atol=1e-5)
    assert not torch.allclose(res.ws[:, n:] - start[:, n:], shift[:, :1].expand(-1, 4, -1), atol=1e-5)


def test_a_map_can_be_added_to_a_trained_codec(tmp_path):
    """Co-training may start from a co-trained codec (its E and G; an export has no D): with a map config the codec
    starts exactly where the old one was (the new map's layers are zero / fresh), and then learns the map."""
    ckpt, G = gan_checkpoint(tmp_path / "gan.pt")
    images = generated_images(G, 8, seed=7)
    plain_cfg = dataclasses.replace(map_cfg(), generator=build(AutoencoderConfig, path=TINY_AUTOENCODER).generator)
    old = train_autoencoder(images, plain_cfg, tmp_path / "old", steps=2, init_ckpt=ckpt, progress=False)
    from medanon.checkpoint import save_checkpoint
    blob = load_checkpoint(old)
    export = save_checkpoint(tmp_path / "old.pt", kind=blob["kind"], config=blob["config"], step=blob["step"],
                             state={"E": blob["state"]["E"], "G": blob["state"]["G"]}, extra=blob["extra"])
    from medanon.train.autoencoder import ARCHITECTURE, _CotrainTrainer, with_generator
    from medanon.train.autoencoder_init import init_from
    init = init_from(export, torch.device("cpu"))
    assert init["D"] is None and init["E"] is not None
    cfg = with_generator(map_cfg(), init["config"], ARCHITECTURE)
    trainer = _CotrainTrainer(cfg, (images * 127.5 + 127.5).to(torch.uint8), torch.device("cpu"), init)
    before = load_codec(old)
    x = images[:4]
    with torch.no_grad():
        z = trainer.codec.encode(x)
        assert z.shape[1] == before.generator.num_ws + trainer.G.map_rows
        assert torch.allclose(trainer.codec.decode(z), before.reconstruct(x), atol=1e-6)   # the map adds nothing yet
    new = train_autoencoder(images, cfg, tmp_path / "new", steps=2, init_ckpt=export, progress=False)
    assert load_codec(new).latent_space == "ws+map"
    assert load_checkpoint(new)["extra"]["generator_checkpoint"]["kind"] == "cotrained-autoencoder"
    wide = dataclasses.replace(cfg, channel_base=1024)              # another encoder width: refused, named
    with pytest.raises(ConfigError, match="encoder's weights do not fit"):
        train_autoencoder(images, wide, tmp_path / "wide", steps=1, init_ckpt=export, progress=False)


def test_texture_from_noise_leaves_the_noise_strengths_to_the_discriminator():
    """With ``texture_from_noise`` the pixel losses see the noise-free rendering: without an adversarial term the
    per-pixel noise strengths get no gradient at all; with one, they learn (from D alone). Without the split, the
    pixel losses train them through the constant noise."""
    images = ((torch.rand(8, 3, 32, 32)) * 255).to(torch.uint8)

    def strengths_moved(**kw) -> bool:
        from medanon.train.autoencoder import _CotrainTrainer
        trainer = _CotrainTrainer(map_cfg(**kw), images, torch.device("cpu"), None)
        for layer in trainer.G.synthesis.modules():          # start the strengths away from 0
            if hasattr(layer, "noise_strength"):
                layer.noise_strength.data.fill_(0.1)
        before = [float(m.noise_strength) for m in trainer.G.synthesis.modules() if hasattr(m, "noise_strength")]
        trainer.step()
        after = [float(m.noise_strength) for m in trainer.G.synthesis.modules() if hasattr(m, "noise_strength")]
        return before != after

    assert not strengths_moved(texture_from_noise=True, adversarial_weight=0.0)
    assert strengths_moved(texture_from_noise=True, adversarial_weight=0.05)
    assert strengths_moved(texture_from_noise=False, adversarial_weight=0.0)


def test_a_run_from_before_a_new_config_field_resumes(tmp_path):
    """A checkpoint written before ``texture_from_noise`` existed resumes: the missing field is its default."""
    images = ((torch.rand(8, 3, 32, 32)) * 255).to(torch.uint8)
    cfg = map_cfg()
    ckpt = train_autoencoder(images, cfg, tmp_path / "run", steps=1, progress=False)
    blob = torch.load(ckpt, weights_only=False)
    del blob["config"]["train"]["texture_from_noise"]
    torch.save(blob, ckpt)
    assert load_checkpoint(train_autoencoder(images, cfg, tmp_path / "run", steps=2, resume=True,
                                             progress=False))["step"] == 2
    with pytest.raises(ConfigError, match="texture_from_noise"):
        train_autoencoder(images, map_cfg(texture_from_noise=True), tmp_path / "run", steps=3, resume=True,
                          progress=False)


def test_a_discriminator_export_refuses_a_run_without_one(tmp_path):
    """``export_codec(discriminator=True)`` of a ReStyle run (frozen generator, no D) is refused by name, not
    written without the D it promises."""
    from medanon.train.encoder import export_codec
    ckpt, G = gan_checkpoint(tmp_path / "gan.pt")
    run = train_restyle(generated_images(G, 8, seed=8), ckpt, fast_encoder_cfg(), tmp_path / "re", steps=1,
                        progress=False)
    with pytest.raises(ConfigError, match="holds no discriminator"):
        export_codec(run, tmp_path / "re.pt", discriminator=True)
    assert not (tmp_path / "re.pt").exists()
    small = export_codec(run, tmp_path / "re16.pt", float16=True)
    tensors = [t for part in load_checkpoint(small)["state"].values() for t in part.values()]
    assert all(t.dtype == torch.float16 for t in tensors if t.is_floating_point())
    x = generated_images(G, 4, seed=9)
    a, b = load_codec(run), load_codec(small)
    assert b.generator.w_avg.dtype == torch.float32                      # loads as float32
    assert (a.reconstruct(x) - b.reconstruct(x)).abs().max() < 0.05       # float16 rounding of the weights only
