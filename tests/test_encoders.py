"""The two inversion encoders (ReStyle, GMIA co-training) behind the LatentCodec protocol: shapes, a briefly
trained encoder against the mean latent, save/load, resume, the co-training step, the CLI."""

import dataclasses
import doctest
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import medanon.codecs.stylegan as codec_module
import medanon.models.encoder as encoder_module
from medanon.checkpoint import load_checkpoint, save_checkpoint
from medanon.cli import cli
from medanon.codecs import LatentCodec
from medanon.codecs.stylegan import StyleGANCodec, load_codec
from medanon.config import PhantomConfig, build, to_dict
from medanon.errors import ConfigError
from medanon.models.encoder import Encoder, style_groups, style_resolutions
from medanon.models.stylegan import Discriminator, Generator, StyleGANConfig
from medanon.phantoms.generate import generate
from medanon.train.autoencoder import AutoencoderConfig, _CotrainTrainer, train_autoencoder
from medanon.train.encoder import EncoderConfig, export_codec, train_restyle

ROOT = Path(__file__).resolve().parents[1]
TINY_GAN = ROOT / "configs" / "stylegan" / "tiny32.yaml"
TINY_ENCODER = ROOT / "configs" / "encoder" / "tiny32.yaml"
TINY_AUTOENCODER = ROOT / "configs" / "autoencoder" / "tiny32.yaml"


def tiny_generator(channels: int = 3, seed: int = 0) -> tuple[Generator, StyleGANConfig]:
    cfg = dataclasses.replace(build(StyleGANConfig, path=TINY_GAN), channels=channels)
    torch.manual_seed(seed)
    return Generator.from_config(cfg).eval(), cfg


def gan_checkpoint(path: Path, channels: int = 3) -> tuple[Path, Generator]:
    """A ``stylegan2`` checkpoint holding an untrained tiny generator (as ``medanon train gan`` exports it)."""
    G, cfg = tiny_generator(channels)
    D = Discriminator.from_config(cfg)
    save_checkpoint(path, kind="stylegan2", config=to_dict(cfg), state={"G_ema": G.state_dict(), "D": D.state_dict()})
    return path, G


@torch.no_grad()
def generated_images(G: Generator, n: int, seed: int) -> torch.Tensor:
    """Images the generator can render exactly (so a good encoder can find them)."""
    z = torch.randn(n, G.z_dim, generator=torch.Generator().manual_seed(seed))
    return G.synthesis(G.mapping(z), noise_mode="const").clamp(-1, 1)


def fast_encoder_cfg(**kw) -> EncoderConfig:
    """The tiny config without the perceptual term (faster), unless asked."""
    return dataclasses.replace(build(EncoderConfig, path=TINY_ENCODER), **{"perceptual_weight": 0.0, **kw})


def fast_autoencoder_cfg(**kw) -> AutoencoderConfig:
    return dataclasses.replace(build(AutoencoderConfig, path=TINY_AUTOENCODER), **{"perceptual_weight": 0.0, **kw})


# -- shapes ---------------------------------------------------------------------------------------

def test_style_groups_follow_the_synthesis_layers():
    G, _ = tiny_generator()
    res = [4]                                   # which resolution each style drives, read off the network
    for block in G.synthesis.blocks[1:]:
        res += [block.resolution, block.resolution]
    res.append(G.img_resolution)
    assert style_resolutions(G.num_ws) == res
    assert style_groups(10) == {"coarse": [0, 1, 2], "middle": [3, 4, 5, 6], "fine": [7, 8, 9]}


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("iterative", [True, False])
def test_shapes_through_both_encoders(channels, iterative):
    G, _ = tiny_generator(channels)
    E = Encoder(32, channels, G.num_ws, G.w_dim, iterative=iterative, channel_base=512, channel_max=32, head_dim=32)
    assert E.in_channels == channels * (2 if iterative else 1)
    codec = StyleGANCodec(G, E, 3 if iterative else 1)
    assert isinstance(codec, LatentCodec)
    x = torch.rand(5, channels, 32, 32) * 2 - 1
    ws = codec.encode(x)
    assert ws.shape == (5, G.num_ws, G.w_dim) and ws.dtype == torch.float32
    y = codec.decode(ws)
    assert y.shape == x.shape and y.dtype == torch.float32 and y.abs().max() <= 1
    assert codec.describe()["name"] == ("restyle" if iterative else "cotrained")
    assert not any(p.grad is not None for p in codec.parameters())
    with pytest.raises(ValueError, match="size=32"):
        codec.encode(torch.zeros(1, channels, 16, 16))


@pytest.mark.parametrize("module", [encoder_module, codec_module])
def test_docstring_examples(module):
    assert doctest.testmod(module).failed == 0


def test_mismatched_parts_are_refused():
    G, _ = tiny_generator(3)
    E1 = Encoder(32, 1, G.num_ws, G.w_dim, channel_base=512, channel_max=32, head_dim=32)
    with pytest.raises(ConfigError, match="pair an encoder with its generator"):
        StyleGANCodec(G, E1)
    E = Encoder(32, 3, G.num_ws, G.w_dim, iterative=False, channel_base=512, channel_max=32, head_dim=32)
    with pytest.raises(ConfigError, match="does not refine"):
        StyleGANCodec(G, E, iterations=3)


# -- training -------------------------------------------------------------------------------------

def test_briefly_trained_restyle_beats_the_mean_latent(tmp_path):
    ckpt, G = gan_checkpoint(tmp_path / "gan.pt")
    train = generated_images(G, 64, seed=1)
    held_out = generated_images(G, 16, seed=2)
    cfg = fast_encoder_cfg(batch=8, lr=0.002)
    path = train_restyle(train, ckpt, cfg, tmp_path / "run", steps=40, progress=False, checkpoint_every=1000,
                         sample_every=1000)
    codec = load_codec(path)
    assert codec.iterations == 2
    with torch.no_grad():
        mean_image = G.synthesis(G.w_avg[None, None].expand(1, G.num_ws, -1), noise_mode="const").clamp(-1, 1)
    err_mean = (mean_image - held_out).square().mean()
    err = (codec.reconstruct(held_out) - held_out).square().mean()
    assert err < 0.8 * err_mean, (float(err), float(err_mean))      # measured: 0.32 vs 0.57
    assert (tmp_path / "run" / "samples" / "step-0000040.png").is_file()


def test_save_load_identical_outputs(tmp_path):
    ckpt, G = gan_checkpoint(tmp_path / "gan.pt", channels=1)
    images = generated_images(G, 8, seed=3)
    path = train_restyle(images, ckpt, fast_encoder_cfg(), tmp_path / "run", steps=2, progress=False)
    a = load_codec(path)
    export_codec(path, tmp_path / "small.pt")
    b = load_codec(tmp_path / "small.pt")
    assert "opt_E" not in load_checkpoint(tmp_path / "small.pt")["state"]
    ws = a.encode(images)
    assert torch.equal(ws, b.encode(images)) and torch.equal(a.decode(ws), b.decode(ws))
    assert b.describe()["generator_checkpoint"]["sha256"] == load_checkpoint(ckpt)["sha256"]


def _state_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_restyle_resume_continues_at_the_same_step(tmp_path):
    ckpt, G = gan_checkpoint(tmp_path / "gan.pt")
    images = generated_images(G, 16, seed=4)
    cfg = fast_encoder_cfg()
    full = train_restyle(images, ckpt, cfg, tmp_path / "full", steps=4, progress=False)
    train_restyle(images, ckpt, cfg, tmp_path / "cut", steps=2, progress=False)
    with pytest.raises(ConfigError, match="resume=True"):          # the library's words (the CLI says --resume)
        train_restyle(images, ckpt, cfg, tmp_path / "cut", steps=4, progress=False)
    with pytest.raises(ConfigError, match="differs"):
        train_restyle(images, None, dataclasses.replace(cfg, lr=0.01), tmp_path / "cut", steps=4, resume=True,
                      progress=False)
    with pytest.raises(ConfigError, match=r"(?s)other images .*start a new run"):     # resume notices other data
        train_restyle(images.flip(-1), None, cfg, tmp_path / "cut", steps=4, resume=True, progress=False)
    cut = train_restyle(images, None, cfg, tmp_path / "cut", steps=4, resume=True, progress=False)
    a, b = load_checkpoint(full), load_checkpoint(cut)
    assert a["step"] == b["step"] == 4
    assert _state_equal(a["state"]["E"], b["state"]["E"])
    assert torch.equal(a["state"]["opt_E"]["state"][0]["exp_avg"], b["state"]["opt_E"]["state"][0]["exp_avg"])


def test_cotraining_step_updates_encoder_generator_and_discriminator():
    cfg = fast_autoencoder_cfg(perceptual_weight=0.8)       # the full loss, perceptual term included
    images = ((torch.rand(8, 3, 32, 32)) * 255).to(torch.uint8)
    trainer = _CotrainTrainer(cfg, images, torch.device("cpu"), None)
    before = {name: {k: v.clone() for k, v in m.state_dict().items()}
              for name, m in [("E", trainer.E), ("G", trainer.G.synthesis), ("D", trainer.D),
                              ("mapping", trainer.G.mapping)]}
    losses = trainer.step()
    assert {"loss", "pixel", "perceptual", "loss_adv", "loss_D", "r1"} <= losses.keys()
    for name, m in [("E", trainer.E), ("G", trainer.G.synthesis), ("D", trainer.D)]:
        assert not _state_equal(before[name], m.state_dict()), f"{name} was not updated"
    assert _state_equal(before["mapping"], trainer.G.mapping.state_dict())  # replaced by the encoder


def test_cotraining_uses_the_generator_configs_adversarial_loss(tmp_path, monkeypatch):
    """``generator.loss: hinge`` reaches both of the co-training step's adversarial terms and the manifest (it was
    once accepted and ignored); the default stays StyleGAN2's non-saturating loss."""
    import json

    import medanon.train.autoencoder as ae

    seen = []
    for name in ("generator_loss", "discriminator_step"):
        real = getattr(ae, name)
        monkeypatch.setattr(ae, name, lambda *a, _real=real, _name=name, **k: seen.append((_name, k["loss"])) or
                            _real(*a, **k))
    images = ((torch.rand(8, 3, 32, 32)) * 255).to(torch.uint8)
    for loss in ("nonsaturating", "hinge"):
        cfg = fast_autoencoder_cfg(generator=dataclasses.replace(fast_autoencoder_cfg().generator, loss=loss))
        train_autoencoder(images, cfg, tmp_path / loss, steps=1, progress=False)
        kind = json.loads((tmp_path / loss / "manifest.json").read_text())["losses"]["adversarial"]["kind"]
        assert kind.startswith("hinge" if loss == "hinge" else "non-saturating")
    assert seen == [("generator_loss", "nonsaturating"), ("discriminator_step", "nonsaturating"),
                    ("generator_loss", "hinge"), ("discriminator_step", "hinge")]


def test_cotraining_from_a_gan_checkpoint_resumes_exactly(tmp_path):
    ckpt, G = gan_checkpoint(tmp_path / "gan.pt")
    images = generated_images(G, 16, seed=5)
    cfg = fast_autoencoder_cfg(r1_interval=2)
    full = train_autoencoder(images, cfg, tmp_path / "full", steps=4, init_ckpt=ckpt, progress=False)
    train_autoencoder(images, cfg, tmp_path / "cut", steps=2, init_ckpt=ckpt, progress=False)
    cut = train_autoencoder(images, cfg, tmp_path / "cut", steps=4, resume=True, progress=False)
    a, b = load_checkpoint(full), load_checkpoint(cut)
    assert a["step"] == b["step"] == 4
    for k in ("E", "G", "D"):
        assert _state_equal(a["state"][k], b["state"][k]), k
    assert a["extra"]["ada_state"] == b["extra"]["ada_state"]
    codec = load_codec(cut)
    assert codec.name == "cotrained" and codec.describe()["generator_checkpoint"]["path"] == str(ckpt)
    with torch.no_grad():                       # the generator started from the checkpoint's weights, then moved
        assert not torch.equal(codec.generator.synthesis.blocks[0].const, G.synthesis.blocks[0].const)
        assert torch.equal(codec.generator.mapping.w_avg, G.mapping.w_avg)
    # a run written on a GPU (its augmentation generator's state is a CUDA one, 16 bytes) resumes on the CPU with a
    # warning and a fixed new stream, instead of failing in Generator.set_state
    gpu = load_checkpoint(cut)
    gpu["state"]["rng"]["generators"][0] = torch.zeros(16, dtype=torch.uint8)
    save_checkpoint(tmp_path / "gpu" / "checkpoint.pt", kind=gpu["kind"], config=gpu["config"], state=gpu["state"],
                    step=gpu["step"], extra=gpu["extra"])
    with pytest.warns(UserWarning, match="another kind of device"):
        moved = train_autoencoder(images, cfg, tmp_path / "gpu", steps=5, resume=True, progress=False)
    assert load_checkpoint(moved)["step"] == 5


def test_restyle_inverts_a_cotrained_codecs_generator(tmp_path):
    """ReStyle may be trained against the generator co-training produced (issue 12): that generator, frozen."""
    ckpt, G = gan_checkpoint(tmp_path / "gan.pt")
    images = generated_images(G, 8, seed=6)
    cotrained = train_autoencoder(images, fast_autoencoder_cfg(), tmp_path / "ae", steps=2, init_ckpt=ckpt,
                                  progress=False)
    restyle = load_codec(train_restyle(images, cotrained, fast_encoder_cfg(), tmp_path / "rs", steps=2,
                                       progress=False))
    decoder = load_codec(cotrained).generator
    assert restyle.name == "restyle"
    assert restyle.describe()["generator_checkpoint"]["sha256"] == load_checkpoint(cotrained)["sha256"]
    for (name, a), (_, b) in zip(restyle.generator.state_dict().items(), decoder.state_dict().items(), strict=True):
        assert torch.equal(a, b), name           # frozen: exactly the co-trained weights
    with torch.no_grad():
        assert not torch.equal(restyle.generator.synthesis.blocks[0].const, G.synthesis.blocks[0].const)


# -- command line ---------------------------------------------------------------------------------

def test_cli_trains_exports_and_resumes_both(tmp_path):
    data = generate(PhantomConfig(patients=4, per_patient=2, size=32, workers=1), tmp_path / "fundus", progress=False)
    ckpt, _ = gan_checkpoint(tmp_path / "gan.pt")
    runner = CliRunner()
    common = ["--data", str(data), "--checkpoint-every", "1", "--sample-every", "2", "--log-every", "1",
              "--threads", "1"]
    res = runner.invoke(cli, ["--device", "cpu", "train", "encoder", *common, "--generator", str(ckpt),
                              "--config", str(TINY_ENCODER), "--set", "iterations=1", "--out", str(tmp_path / "re"),
                              "--steps", "2", "--export", str(tmp_path / "re.pt")])
    assert res.exit_code == 0, res.output
    assert load_codec(tmp_path / "re.pt").iterations == 1
    assert (tmp_path / "re" / "samples" / "step-0000002.png").is_file()
    heldout = generate(PhantomConfig(patients=4, per_patient=2, size=32, workers=1, seed=1), tmp_path / "heldout",
                       progress=False)                        # other patients: --eval-data is never the training data
    res = runner.invoke(cli, ["train", "encoder", *common, "--out", str(tmp_path / "re"), "--steps", "3", "--resume",
                              "--eval-data", str(heldout)])   # the run's own config.yaml
    assert res.exit_code == 0, res.output
    assert load_checkpoint(tmp_path / "re" / "checkpoint.pt")["step"] == 3
    assert load_checkpoint(tmp_path / "re" / "checkpoint.pt")["extra"]["training_images"]["modality"] == "fundus"
    report = json.loads((tmp_path / "re" / "heldout.json").read_text())
    assert report["phantom_results"] and report["reports"][0]["labels"]["iw_ssim"] == "IW-SSIM (2 scales)"
    assert set(report["reports"][0]["codec"]) == {"psnr", "ssim", "iw_ssim", "feature_distance"}
    assert "held-out (8 images, 1 iteration(s)): PSNR" in res.output
    inputs = json.loads((tmp_path / "re" / "manifest.json").read_text())["inputs"]   # the generator of the start too
    assert inputs["generator"]["path"] == str(ckpt) and inputs["data"]["images"] == 8
    assert inputs["eval_data"]["path"] == str(heldout), inputs
    res = runner.invoke(cli, ["train", "encoder", *common, "--out", str(tmp_path / "re"), "--steps", "4", "--resume",
                              "--set", "iterations=1"])     # --set on the run's own config, not on the defaults
    assert res.exit_code == 0 and load_checkpoint(tmp_path / "re" / "checkpoint.pt")["step"] == 4, res.output
    res = runner.invoke(cli, ["train", "encoder", *common, "--generator", str(ckpt), "--size", "64",
                              "--out", str(tmp_path / "bad"), "--steps", "1"])
    assert res.exit_code != 0 and "--size" in res.output
    res = runner.invoke(cli, ["train", "autoencoder", *common, "--config", str(TINY_AUTOENCODER),
                              "--set", "perceptual_weight=0", "--out", str(tmp_path / "ae"), "--steps", "2",
                              "--export", str(tmp_path / "ae.pt")])
    assert res.exit_code == 0, res.output
    assert "D" not in load_checkpoint(tmp_path / "ae.pt")["state"]
    assert load_codec(tmp_path / "ae.pt").encode(torch.zeros(1, 3, 32, 32)).shape[0] == 1
    # the data's modality is recorded, not implied by the channel count (a 3-channel X-ray codec read as fundus)
    trained = load_codec(tmp_path / "ae.pt").provenance["trained_on"]
    assert trained["modality"] == "fundus" and trained["modality_recorded"]
    # a resumable export: float16 weights and the discriminator, which a new run started from it continues
    res = runner.invoke(cli, ["train", "autoencoder", *common, "--out", str(tmp_path / "ae"), "--steps", "2",
                              "--resume", "--export", str(tmp_path / "ae16.pt"), "--export-float16",
                              "--export-discriminator"])
    assert res.exit_code == 0, res.output
    full, small = load_checkpoint(tmp_path / "ae" / "checkpoint.pt"), load_checkpoint(tmp_path / "ae16.pt")
    assert set(small["state"]) == {"E", "G", "D"} and small["extra"]["exported_from"]["float16"]
    for k in ("E", "G", "D"):
        for n, t in small["state"][k].items():
            ref = full["state"][k][n]
            assert t.dtype == (torch.float16 if ref.is_floating_point() else ref.dtype), n
            assert torch.allclose(t.float(), ref.float(), rtol=1e-3, atol=1e-4), n
    from medanon.train.autoencoder_init import init_from
    init = init_from(tmp_path / "ae16.pt", torch.device("cpu"))
    assert init["D"] is not None and init["E"] is not None
    res = runner.invoke(cli, ["train", "encoder", *common, "--out", str(tmp_path / "re"), "--steps", "3", "--resume",
                              "--export", str(tmp_path / "re-d.pt"), "--export-discriminator"])
    assert res.exit_code != 0 and "no such option" in res.output.lower()      # a ReStyle run has no D to keep


@pytest.mark.parametrize("kind, cls", [("encoder", EncoderConfig), ("autoencoder", AutoencoderConfig)])
def test_shipped_configs_load_and_validate(kind, cls):
    """Every YAML under configs/encoder and configs/autoencoder is a valid config of its trainer (an unknown field,
    a bad loss weight or a map that does not fit the generator fails here, not an hour into a run)."""
    paths = sorted((ROOT / "configs" / kind).glob("*.yaml"))
    assert len(paths) >= 3
    for path in paths:
        cfg = build(cls, path=path)
        assert cfg.batch >= 1, path
    with pytest.raises(ConfigError):
        build(cls, path=paths[0], overrides=["no_such_field=1"])


def test_an_encoder_is_not_trained_on_data_of_another_modality_than_its_generator(tmp_path):
    """Refused before any image is read (it trained to the end and failed only when the codec was used)."""
    root = Path(__file__).resolve().parents[1]
    xray = generate(PhantomConfig(modality="xray", patients=2, per_patient=1, size=32, workers=1), tmp_path / "xray",
                    progress=False)
    r = CliRunner().invoke(cli, ["train", "encoder", str(xray), "--generator",
                                 str(root / "checkpoints" / "stylegan2-fundus64.pt"), "--config",
                                 str(root / "configs" / "encoder" / "cpu64.yaml"), "--steps", "1",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code != 0 and "trained on fundus images" in r.output, r.output
    assert not (tmp_path / "run").exists()


def test_eval_data_holding_training_images_is_refused_before_training(tmp_path):
    """A copy of the training folder (or a phantom of the same people) is not held-out data: refused by content,
    not by path, and before any step is trained."""
    import shutil

    data = generate(PhantomConfig(patients=4, per_patient=2, size=32, workers=1), tmp_path / "fundus", progress=False)
    shutil.copytree(data, tmp_path / "copy")
    same_people = generate(PhantomConfig(patients=2, per_patient=1, size=32, workers=1, seed=0), tmp_path / "again",
                           progress=False)
    ckpt, _ = gan_checkpoint(tmp_path / "gan.pt")
    for held, said in ((tmp_path / "copy", "8 of its 8 images are training images"),
                       (same_people, "2 of its patients are training patients")):
        res = CliRunner().invoke(cli, ["--device", "cpu", "train", "encoder", "--data", str(data), "--generator",
                                       str(ckpt), "--config", str(TINY_ENCODER), "--steps", "1", "--eval-data",
                                       str(held), "--out", str(tmp_path / "re")])
        assert res.exit_code != 0 and said in res.output and "--eval-data" in res.output, res.output
        assert not (tmp_path / "re" / "checkpoint.pt").exists()


def test_resuming_another_commands_run_folder_says_whose_it_is(tmp_path):
    data = generate(PhantomConfig(patients=4, per_patient=2, size=32, workers=1), tmp_path / "fundus", progress=False)
    gan = ["--device", "cpu", "train", "gan", str(data), "--config", str(ROOT / "configs/stylegan/tiny32.yaml"),
           "--steps", "1", "--checkpoint-every", "1", "--out", str(tmp_path / "gan")]
    assert CliRunner().invoke(cli, gan).exit_code == 0
    for command in ("encoder", "autoencoder"):
        res = CliRunner().invoke(cli, ["--device", "cpu", "train", command, "--data", str(data), "--out",
                                       str(tmp_path / "gan"), "--resume", "--steps", "2"])
        assert res.exit_code != 0 and "holds a run of train gan, not of train " in res.output, res.output
        assert "unknown key" not in res.output
