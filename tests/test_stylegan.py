"""StyleGAN2-ADA: shapes, modulated convolution, augmentation, ADA, training, checkpoints, CLI (tiny, CPU)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from medanon.checkpoint import load_checkpoint
from medanon.cli import cli
from medanon.config import build, to_dict
from medanon.errors import ConfigError
from medanon.models.stylegan import AUGMENTS, AdaController, AugmentPipe, Discriminator, Generator, StyleGANConfig
from medanon.models.stylegan.layers import modulated_conv2d
from medanon.train.gan import (
    StyleGANTrainer,
    export_checkpoint,
    load_discriminator,
    load_generator,
    resume_changes,
    train_stylegan,
)
from medanon.train.random_state import restore_generator

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "stylegan"


def tiny(**kw) -> StyleGANConfig:
    base = dict(resolution=16, channels=3, z_dim=16, w_dim=16, channel_base=128, channel_max=16, batch=4,
                mbstd_group=2, r1_gamma=0.1, r1_interval=2, ema_kimg=0.01, ada_interval=1, ada_kimg=1)
    return StyleGANConfig(**{**base, **kw})


@pytest.mark.parametrize("channels", [1, 3])
def test_mapping_and_synthesis_shapes(channels):
    torch.manual_seed(0)
    G = Generator.from_config(tiny(channels=channels))
    assert (G.num_ws, G.w_dim, G.z_dim, G.img_channels, G.img_resolution) == (6, 16, 16, channels, 16)
    z = torch.randn(3, G.z_dim)
    ws = G.mapping(z)
    assert ws.shape == (3, G.num_ws, G.w_dim) and ws.dtype == torch.float32
    assert torch.equal(ws[:, 0], ws[:, -1])                      # one w broadcast to every style
    with torch.no_grad():
        for name, p in G.named_parameters():
            if name.endswith("noise_strength"):                  # starts at 0; make the noise visible
                p.fill_(0.5)
    img = G.synthesis(ws, noise_mode="const")
    assert img.shape == (3, channels, 16, 16) and img.dtype == torch.float32 and img.isfinite().all()
    assert torch.equal(img, G.synthesis(ws, noise_mode="const"))
    assert not torch.equal(G.synthesis(ws, noise_mode="random"), G.synthesis(ws, noise_mode="random"))
    assert not torch.equal(G.synthesis(ws, noise_mode="none"), img)
    G.mapping.w_avg.normal_()
    assert torch.allclose(G.mapping(z, truncation_psi=0)[:, 0], G.w_avg.expand(3, -1))
    assert Discriminator.from_config(tiny(channels=channels))(img).shape == (3, 1)
    with pytest.raises(ValueError, match="shape"):
        G.synthesis(ws[:, :-1])
    with pytest.raises(ValueError, match="noise_mode"):
        G.synthesis(ws, noise_mode="fixed")


def test_a_training_step_runs_under_bf16_autocast():
    """A user's own loop may run the whole step under bf16 autocast: the mapping's w_avg update must keep its
    float32 buffer (w is bf16 there) and the step must stay finite."""
    trainer = StyleGANTrainer(tiny(), torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8), torch.device("cpu"))
    before = trainer.G.mapping.w_avg.clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = trainer.step()
    w_avg = trainer.G.mapping.w_avg
    assert w_avg.dtype == torch.float32 and not torch.equal(w_avg, before)
    assert all(math.isfinite(v) for v in out.values())


def test_demodulation_gives_unit_variance():
    torch.manual_seed(0)
    x = torch.randn(8, 64, 16, 16)
    weight = torch.randn(32, 64, 3, 3)
    styles = torch.rand(8, 64) * 4 + 0.1                        # very different per-channel scales
    y = modulated_conv2d(x, weight, styles)
    assert 0.85 < float(y.std()) < 1.15
    raw = modulated_conv2d(x, weight, styles, demodulate=False)
    assert float(raw.std()) > 10


def test_modulated_conv_equals_per_sample_weights():
    """The scale -> shared conv -> rescale form equals convolving with each sample's modulated weight."""
    torch.manual_seed(1)
    x, weight, styles = torch.randn(2, 4, 8, 8), torch.randn(5, 4, 3, 3), torch.rand(2, 4) + 0.5
    y = modulated_conv2d(x, weight, styles)
    for n in range(2):
        w = weight * styles[n][None, :, None, None]
        w = w / w.square().sum(dim=[1, 2, 3], keepdim=True).sqrt()
        ref = torch.nn.functional.conv2d(x[n:n + 1], w, padding=1)
        assert torch.allclose(y[n:n + 1], ref, atol=1e-4)


@pytest.mark.parametrize("channels", [1, 3])
def test_augmentations_identity_at_zero_and_differentiable(channels):
    x = torch.rand(6, channels, 16, 16, requires_grad=True)
    assert AugmentPipe(AUGMENTS, p=0.0)(x) is x
    y = AugmentPipe(AUGMENTS, p=1.0)(x, torch.Generator().manual_seed(0))
    assert y.shape == x.shape and y.isfinite().all() and not torch.allclose(y, x)
    (grad,) = torch.autograd.grad((y * torch.randn_like(y)).sum(), x)
    assert grad.isfinite().all() and grad.abs().sum() > 0


def test_flip_and_rot90_are_exact():
    x = torch.rand(16, 3, 8, 8)
    y = AugmentPipe(["xflip"], p=1.0)(x, torch.Generator().manual_seed(0))
    flipped = [torch.allclose(a, b.flip(-1), atol=1e-5) for a, b in zip(y, x, strict=True)]
    same = [torch.allclose(a, b, atol=1e-5) for a, b in zip(y, x, strict=True)]
    assert all(f or s for f, s in zip(flipped, same, strict=True)) and any(flipped) and any(same)
    y = AugmentPipe(["rotate90"], p=1.0)(x, torch.Generator().manual_seed(1))
    assert all(any(torch.allclose(a, torch.rot90(b, k, dims=(1, 2)), atol=1e-5) for k in range(4))
               for a, b in zip(y, x, strict=True))


def test_ada_p_follows_overfitting_heuristic():
    pipe = AugmentPipe(["xflip"], p=0.0)
    ada = AdaController(pipe, target=0.6, interval=1, kimg=1, batch=100)  # 0.1 per update
    for _ in range(3):
        ada.update(0.95)                                         # D too sure about reals: augment more
    assert pipe.p == pytest.approx(0.3)
    ada.update(0.2)
    assert pipe.p == pytest.approx(0.2)
    for _ in range(5):
        ada.update(0.0)
    assert pipe.p == 0.0                                         # clamped at 0
    ada = AdaController(pipe, target=0.6, interval=2, kimg=1, batch=100)
    for _ in range(2):                                           # through the logits, every `interval` steps
        ada.accumulate(torch.ones(100, 1))
        ada.step()
    assert pipe.p == pytest.approx(0.2) and ada.last_rt == 1.0


def test_training_learns_the_data():
    """On a one-colour dataset the generated images move towards that colour within a few steps."""
    target = torch.tensor([0.8, -0.6, 0.2])[None, :, None, None]
    images = target.expand(16, 3, 16, 16)
    cfg = tiny(g_lr=0.01, d_lr=0.01, augment=(), style_mixing=0.0)
    trainer = StyleGANTrainer(cfg, ((images + 1) * 127.5).round().to(torch.uint8), torch.device("cpu"))
    z = torch.randn(16, cfg.z_dim)

    def error() -> float:
        with torch.no_grad():
            return float((trainer.G(z, noise_mode="const") - target).abs().mean())

    before = error()
    losses = [trainer.step() for _ in range(20)]
    assert error() < 0.75 * before
    assert all(math.isfinite(v) for step in losses for v in step.values())


def test_save_load_export_and_resume(tmp_path: Path):
    torch.manual_seed(0)
    images = torch.rand(12, 3, 16, 16) * 2 - 1
    cfg = tiny()
    whole = train_stylegan(images, cfg, tmp_path / "whole", steps=4, progress=False)
    part = train_stylegan(images, cfg, tmp_path / "part", steps=2, progress=False)
    saved = load_checkpoint(part, kind="stylegan2")
    resumed = StyleGANTrainer(cfg, torch.zeros(1, 3, 16, 16, dtype=torch.uint8), torch.device("cpu"))
    resumed.load(saved)
    assert resumed.step_count == 2 and resumed.augment.p == saved["extra"]["ada_p"]
    for name in ("opt_G", "opt_D"):                              # optimizer state restored tensor for tensor
        restored = getattr(resumed, name).state_dict()["state"]
        for k, st in saved["state"][name]["state"].items():
            assert all(torch.equal(v, restored[k][s]) for s, v in st.items())
    with pytest.raises(ConfigError, match="resume"):
        train_stylegan(images, cfg, tmp_path / "part", steps=4, progress=False)
    train_stylegan(images, cfg, tmp_path / "part", steps=4, resume=True, progress=False)
    a, b = load_checkpoint(whole), load_checkpoint(part)
    assert a["step"] == b["step"] == 4 and a["extra"]["ada_state"] == b["extra"]["ada_state"]
    for net in ("G", "D", "G_ema"):                              # the resumed run ends where the whole one did
        assert all(torch.equal(v, b["state"][net][k]) for k, v in a["state"][net].items())
    assert all(torch.equal(v, b["state"]["opt_D"]["state"][k]["exp_avg_sq"])
               for k, v in ((k, s["exp_avg_sq"]) for k, s in a["state"]["opt_D"]["state"].items()))
    with pytest.raises(ConfigError, match="differs"):
        train_stylegan(images, dataclasses.replace(cfg, r1_gamma=1.0), tmp_path / "part", steps=5, resume=True,
                       progress=False)

    small = export_checkpoint(whole, tmp_path / "small.pt")
    assert small.stat().st_size < whole.stat().st_size / 2
    z = torch.randn(3, cfg.z_dim)
    outputs = [load_generator(p)(z, noise_mode="const") for p in (whole, small)]
    assert torch.equal(outputs[0], outputs[1])
    D = load_discriminator(small)
    assert all(torch.equal(v, a["state"]["D"][k]) for k, v in D.state_dict().items())
    with pytest.raises(ConfigError, match="exported"):
        StyleGANTrainer(cfg, torch.zeros(1, 3, 16, 16, dtype=torch.uint8), torch.device("cpu")).load(
            load_checkpoint(small))


def test_retune_changes_training_settings_of_a_resumed_run_and_records_them(tmp_path: Path):
    """resume + retune: the learning rates (and other training settings) take effect from the resumed step, with the
    optimizer moments, EMA and ADA state kept; the change is recorded; architecture and seed never change."""
    torch.manual_seed(0)
    images = torch.rand(12, 3, 16, 16) * 2 - 1
    cfg = tiny()
    part = train_stylegan(images, cfg, tmp_path / "run", steps=2, progress=False)
    before = load_checkpoint(part)
    slow = dataclasses.replace(cfg, g_lr=cfg.g_lr / 10, d_lr=cfg.d_lr / 4, ema_kimg=0.05)
    with pytest.raises(ConfigError, match="retune=True"):                    # a change is never silent
        train_stylegan(images, slow, tmp_path / "run", steps=3, resume=True, progress=False)
    with pytest.raises(ConfigError, match="resume=True"):
        train_stylegan(images, slow, tmp_path / "other", steps=3, retune=True, progress=False)
    for fixed in ({"channel_max": 8}, {"seed": 1}):                          # refused even with retune
        with pytest.raises(ConfigError, match="cannot change"):
            train_stylegan(images, dataclasses.replace(slow, **fixed), tmp_path / "run", steps=3, resume=True,
                           retune=True, progress=False)
    trainer = StyleGANTrainer(slow, torch.zeros(1, 3, 16, 16, dtype=torch.uint8), torch.device("cpu"))
    trainer.load(before)
    assert [g["lr"] for g in trainer.opt_G.param_groups] == [slow.g_lr]    # the new rates, not the saved ones
    assert [g["lr"] for g in trainer.opt_D.param_groups] == [slow.d_lr]
    path = train_stylegan(images, slow, tmp_path / "run", steps=3, resume=True, retune=True, progress=False)
    after = load_checkpoint(path)
    changes = {c["field"]: c for c in after["extra"]["config_changes"]}
    assert set(changes) == {"g_lr", "d_lr", "ema_kimg"} and changes["g_lr"]["step"] == 2
    assert changes["g_lr"]["from"] == cfg.g_lr and changes["g_lr"]["to"] == slow.g_lr
    assert after["config"]["g_lr"] == slow.g_lr and after["step"] == 3
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config_changes"] == after["extra"]["config_changes"]
    assert after["state"]["opt_G"]["param_groups"][0]["lr"] == slow.g_lr
    # the record is kept over later resumes with the (now the run's own) retuned config
    again = train_stylegan(images, slow, tmp_path / "run", steps=4, resume=True, progress=False)
    assert load_checkpoint(again)["extra"]["config_changes"] == after["extra"]["config_changes"]


def test_a_run_resumes_only_on_images_of_its_modality(tmp_path: Path):
    """retune may change the training images, not what the model is of: a fundus run continued on X-rays (made RGB
    by the loader) is refused; the modality is recorded with the images, and a run that recorded none resumes."""
    torch.manual_seed(0)
    images = torch.rand(12, 3, 16, 16) * 2 - 1
    cfg = tiny()
    part = train_stylegan(images, cfg, tmp_path / "run", steps=1, progress=False, modality="fundus")
    assert load_checkpoint(part)["extra"]["training_images"]["modality"] == "fundus"
    other = torch.rand(12, 3, 16, 16) * 2 - 1
    with pytest.raises(ConfigError, match="trained on fundus images; these are xray images"):
        train_stylegan(other, cfg, tmp_path / "run", steps=2, resume=True, retune=True, progress=False,
                       modality="xray")
    kept = train_stylegan(images, cfg, tmp_path / "run", steps=2, resume=True, progress=False)  # none given: kept
    assert load_checkpoint(kept)["extra"]["training_images"]["modality"] == "fundus"
    train_stylegan(other, cfg, tmp_path / "run", steps=3, resume=True, retune=True, progress=False,
                   modality="fundus")


def test_retune_changes_the_batch_and_images_seen_are_counted(tmp_path: Path):
    """A CPU run continued at a GPU's larger batch: kimg counts the images each step actually saw, in the
    checkpoint, the metrics and the manifest, and the change is recorded."""
    torch.manual_seed(0)
    images = torch.rand(12, 3, 16, 16) * 2 - 1
    cfg = tiny()
    train_stylegan(images, cfg, tmp_path / "run", steps=2, progress=False, log_every=1)
    big = dataclasses.replace(cfg, batch=2 * cfg.batch)
    with pytest.raises(ConfigError, match="retune=True"):
        train_stylegan(images, big, tmp_path / "run", steps=3, resume=True, progress=False)
    path = train_stylegan(images, big, tmp_path / "run", steps=4, resume=True, retune=True, progress=False,
                          log_every=1)
    blob = load_checkpoint(path)
    nimg = 2 * cfg.batch + 2 * big.batch
    assert blob["step"] == 4 and blob["extra"]["nimg"] == nimg and blob["extra"]["kimg"] == nimg / 1000
    assert [c["field"] for c in blob["extra"]["config_changes"]] == ["batch"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["kimg"] for r in rows] == [n / 1000 for n in (cfg.batch, 2 * cfg.batch, 2 * cfg.batch + big.batch,
                                                             nimg)]
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["kimg"] == nimg / 1000
    # a checkpoint from before images were counted (one batch size throughout): kimg = steps x batch / 1000
    del blob["extra"]["nimg"]
    trainer = StyleGANTrainer(big, torch.zeros(1, 3, 16, 16, dtype=torch.uint8), torch.device("cpu"))
    trainer.load(blob)
    assert trainer.nimg == nimg


def test_resume_notices_other_training_images(tmp_path: Path):
    """Resuming on other images is refused (naming both datasets' digests); with retune it continues on them and
    records the change."""
    torch.manual_seed(0)
    images = torch.rand(12, 3, 16, 16) * 2 - 1
    cfg = tiny()
    first = load_checkpoint(train_stylegan(images, cfg, tmp_path / "run", steps=2, progress=False))
    assert first["extra"]["training_images"]["count"] == 12
    other = images[:10]
    with pytest.raises(ConfigError, match=r"(?s)other images \(12 images.*\(10 images.*retune=True"):
        train_stylegan(other, cfg, tmp_path / "run", steps=3, resume=True, progress=False)
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["step"] == 2          # nothing trained or written
    with pytest.warns(UserWarning, match=r"other images .*retune continues on these images from step 2 on"):
        blob = load_checkpoint(train_stylegan(other, cfg, tmp_path / "run", steps=3, resume=True, retune=True,
                                              progress=False))                     # said, not only recorded
    (change,) = blob["extra"]["config_changes"]
    assert change["field"] == "training_images" and change["step"] == 2
    assert change["from"] == first["extra"]["training_images"] and change["to"]["count"] == 10
    assert blob["extra"]["training_images"] == change["to"]
    train_stylegan(other, cfg, tmp_path / "run", steps=4, resume=True, progress=False)   # now the run's own images


def test_resuming_a_checkpoint_that_records_no_images_never_claims_it_trained_on_these_alone(tmp_path: Path):
    """A checkpoint from before training images were recorded (the shipped resumable GAN) was resumed on any data
    with no word, and the next checkpoint said it was trained on those images alone."""
    from medanon.checkpoint import save_checkpoint

    torch.manual_seed(0)
    images = torch.rand(12, 3, 16, 16) * 2 - 1
    cfg = tiny()
    path = train_stylegan(images, cfg, tmp_path / "run", steps=2, progress=False)
    old = load_checkpoint(path)
    del old["extra"]["training_images"]                                    # as written before the record existed
    save_checkpoint(path, kind=old["kind"], config=old["config"], state=old["state"], step=old["step"],
                    extra=old["extra"])
    with pytest.warns(UserWarning, match="does not record the images it was trained on"):
        blob = load_checkpoint(train_stylegan(images[:10], cfg, tmp_path / "run", steps=3, resume=True, retune=True,
                                              progress=False))
    record = blob["extra"]["training_images"]
    assert record["count"] == 10 and record["since_step"] == 2 and record["earlier_steps"].startswith("not recorded")
    (change,) = blob["extra"]["config_changes"]
    assert change["field"] == "training_images" and change["from"] == record["earlier_steps"]
    again = load_checkpoint(train_stylegan(images[:10], cfg, tmp_path / "run", steps=4, resume=True, progress=False))
    assert again["extra"]["training_images"]["since_step"] == 2                  # kept over later resumes


def test_resume_across_device_kinds_restarts_the_random_stream_with_a_warning(tmp_path: Path):
    """A checkpoint written on a GPU holds a CUDA generator's 16-byte state, which cannot set a CPU generator (nor a
    CPU state a CUDA one): the run resumes on a fixed new stream (seed + step) and says so, instead of crashing."""
    torch.manual_seed(0)
    images = torch.rand(12, 3, 16, 16) * 2 - 1
    cfg = tiny()
    blob = load_checkpoint(train_stylegan(images, cfg, tmp_path / "run", steps=2, progress=False))
    blob["state"]["rng"]["latents"] = torch.zeros(16, dtype=torch.uint8)     # what a CUDA generator saves
    trainer = StyleGANTrainer(cfg, torch.zeros(1, 3, 16, 16, dtype=torch.uint8), torch.device("cpu"))
    with pytest.warns(UserWarning, match="another kind of device"):
        trainer.load(blob)
    assert torch.equal(trainer.rng.get_state(), torch.Generator().manual_seed(cfg.seed + 1 + 2).get_state())
    assert trainer.step_count == 2
    gen = torch.Generator().manual_seed(5)
    state = gen.get_state()
    same = torch.Generator()
    assert restore_generator(same, state, seed=0, step=0) and torch.equal(same.get_state(), state)  # restored exactly


def test_the_gpu_preset_continues_a_cpu_wide_run():
    """configs/stylegan/gpu64-wide.yaml is what a cpu64-wide run retunes to on a GPU: the same networks and seed, so
    `--resume --retune --config gpu64-wide.yaml` is accepted, and it differs in the batch and its settings only."""
    cpu, gpu = (build(StyleGANConfig, path=CONFIGS / f"{n}.yaml") for n in ("cpu64-wide", "gpu64-wide"))
    blob = {"config": to_dict(cpu), "step": 7}
    changes = resume_changes(gpu, blob, retune=True)
    assert {c["field"] for c in changes} == {"batch", "r1_gamma", "ema_kimg"}
    assert gpu.r1_gamma == pytest.approx(0.0002 * gpu.resolution ** 2 / gpu.batch)   # the StyleGAN2-ADA heuristic
    assert gpu.ema_kimg == pytest.approx(gpu.batch * 10 / 32)


def test_configs_load_and_validate():
    for path in sorted(CONFIGS.glob("*.yaml")):
        cfg = build(StyleGANConfig, path=path)
        assert cfg.channels_at(cfg.resolution) >= 1
    with pytest.raises(ConfigError, match="unknown augmentation"):
        build(StyleGANConfig, overrides=["augment=[xflip,warp]"])
    with pytest.raises(ConfigError, match="power of two"):
        build(StyleGANConfig, overrides=["resolution=48"])


def test_cli_trains_resumes_and_exports(tmp_path: Path, monkeypatch):
    runner = CliRunner()
    data, out = tmp_path / "ph", tmp_path / "run"
    r = runner.invoke(cli, ["phantom", "--modality", "xray", "--patients", "4", "--per-patient", "2", "--size", "32",
                            "--out", str(data), "--workers", "1"])
    assert r.exit_code == 0, r.output
    args = ["--device", "cpu", "train", "gan", "--data", str(data), "--out", str(out), "--threads", "1"]
    tiny32 = ["--config", str(CONFIGS / "tiny32.yaml"), "--set", "channels=1", "--set", "batch=4"]
    r = runner.invoke(cli, [*args, *tiny32, "--steps", "2", "--sample-every", "1"])
    assert r.exit_code == 0, r.output
    assert {p.name for p in out.iterdir()} >= {"checkpoint.pt", "config.yaml", "metrics.jsonl", "manifest.json"}
    assert sorted(p.name for p in (out / "samples").iterdir()) == ["step-0000001.png", "step-0000002.png"]
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"step", "kimg", "loss_G", "loss_D", "ada_p", "img_per_s"} <= set(row) and row["step"] == 2
    r = runner.invoke(cli, [*args, *tiny32, "--steps", "3"])
    assert r.exit_code == 1 and "--resume" in r.output and "Traceback" not in r.output
    r = runner.invoke(cli, [*args, "--resume", "--steps", "3", "--export", str(tmp_path / "g.pt")])
    assert r.exit_code == 0, r.output
    G = load_generator(tmp_path / "g.pt")
    assert G(torch.randn(2, G.z_dim)).shape == (2, 1, 32, 32)
    assert load_checkpoint(out / "checkpoint.pt")["step"] == 3
    from medanon.data.dataset import ImageDataset

    decoded, tensors = [], ImageDataset.tensors
    monkeypatch.setattr(ImageDataset, "tensors", lambda self, *a, **k: decoded.append(1) or tensors(self, *a, **k))
    r = runner.invoke(cli, [*args, "--resume", "--steps", "4", "--set", "g_lr=0.001"])    # a change needs --retune
    assert r.exit_code == 1 and "--retune" in r.output and "retune=True" not in r.output and "Traceback" not in r.output
    assert decoded == []                                        # refused before a single image was decoded
    r = runner.invoke(cli, [*args, "--resume", "--retune", "--steps", "4", "--set", "g_lr=0.001"])
    assert r.exit_code == 0, r.output
    assert load_checkpoint(out / "checkpoint.pt")["extra"]["config_changes"][0]["field"] == "g_lr"
    assert "g_lr: 0.001" in (out / "config.yaml").read_text()              # the run's own config from now on


def test_projected_discriminator_heads_learn_on_frozen_features(tmp_path: Path):
    """Sauer et al.'s projected D: only its heads are parameters and state; gradients reach the image (for G);
    the fixed random projections are seeded; a run trains, resumes to the same state, and its checkpoint
    holds no feature-network weights."""
    pytest.importorskip("efficientnet_lite_pytorch")
    from medanon.models.stylegan import ProjectedDiscriminator, make_discriminator

    cfg = tiny(discriminator="projected", r1_gamma=0.0, mbstd_group=0)
    D = make_discriminator(cfg)
    assert isinstance(D, ProjectedDiscriminator) and D.input_size == 32
    net = D._features[0]
    assert not any(p.requires_grad for p in net.parameters())
    own = {id(p) for p in D.parameters()}
    assert own and not own & {id(p) for p in net.parameters()}
    assert all(k.startswith(("heads.", "ccm", "csm", "scale")) for k in D.state_dict())
    assert torch.equal(D.ccm0, ProjectedDiscriminator(16, 3, features=net).ccm0)      # seeded, not random
    img = (torch.rand(4, 3, 16, 16) * 2 - 1).requires_grad_(True)
    out = D(img)
    assert out.shape == (4, 1)
    out.sum().backward()
    assert img.grad is not None and img.grad.abs().sum() > 0
    assert all(p.grad is not None for p in D.heads.parameters())
    with pytest.raises(ConfigError, match="discriminator='patch'"):
        tiny(discriminator="patch").validate()
    # the fixed feature scale: each scaled mixed map has unit RMS on the calibration images; a state saved before
    # the scale existed loads with scale 1 (what it was trained with)
    calib = torch.rand(6, 3, 16, 16) * 2 - 1
    D.calibrate(calib)
    rms = [float((m * D.scale[i]).pow(2).mean().sqrt()) for i, m in enumerate(D._mixed(calib))]
    assert rms == pytest.approx([1.0] * 4, rel=1e-4) and not torch.equal(D.scale, torch.ones(4))
    old = {k: v for k, v in D.state_dict().items() if k != "scale"}
    D.load_state_dict(old)
    assert torch.equal(D.scale, torch.ones(4))

    images = torch.rand(12, 3, 16, 16) * 2 - 1
    whole = train_stylegan(images, cfg, tmp_path / "whole", steps=3, progress=False)
    train_stylegan(images, cfg, tmp_path / "part", steps=2, progress=False)
    part = train_stylegan(images, cfg, tmp_path / "part", steps=3, resume=True, progress=False)
    a, b = load_checkpoint(whole), load_checkpoint(part)
    assert not any("blocks" in k or "stem" in k for k in a["state"]["D"])
    for name in ("G", "D"):
        assert all(torch.allclose(v.float(), b["state"][name][k].float(), atol=1e-6)
                   for k, v in a["state"][name].items())
    assert isinstance(load_discriminator(whole), ProjectedDiscriminator)


def test_a_run_from_before_the_discriminator_setting_resumes():
    """A run saved before ``discriminator`` existed (its config lacks the key, as the committed resume state's did)
    resumes as a StyleGAN2-discriminator run."""
    from medanon.train.gan import config_diff
    from medanon.train.gan_checkpoint import load_config

    blob = load_checkpoint(CONFIGS.parents[1] / "checkpoints" / "stylegan2-fundus64-wide.resume.pt", kind="stylegan2")
    blob["config"].pop("discriminator", None)                  # as every run before the setting was saved
    cfg = load_config(blob)
    assert cfg.discriminator == "stylegan" and config_diff(cfg, blob) == []
    assert config_diff(dataclasses.replace(cfg, discriminator="projected"), blob) == ["discriminator"]


def test_hinge_loss_is_the_papers():
    """``loss="hinge"``: D minimises relu(1 - D(real)) + relu(1 + D(fake)), G minimises -D(fake) (Lim & Ye 2017);
    the default stays StyleGAN2's non-saturating loss; an unknown loss is refused."""
    from medanon.train.gan_loss import discriminator_loss, generator_loss

    class Fixed(torch.nn.Module):          # D(x) = the image's mean, so the expected losses are known by hand
        def forward(self, x):
            return x.mean(dim=(1, 2, 3))[:, None]

    def aug(x, generator=None):
        return x

    real = torch.tensor([2.0, 0.5]).reshape(2, 1, 1, 1).expand(2, 1, 2, 2)
    fake = torch.tensor([-3.0, 0.25]).reshape(2, 1, 1, 1).expand(2, 1, 2, 2)
    loss, stats = discriminator_loss(Fixed(), aug, real, fake, loss="hinge")
    assert float(stats["loss_real"]) == pytest.approx((0.0 + 0.5) / 2)
    assert float(stats["loss_fake"]) == pytest.approx((0.0 + 1.25) / 2)
    assert float(loss) == pytest.approx(0.25 + 0.625)
    assert float(generator_loss(Fixed(), aug, fake, loss="hinge")) == pytest.approx(-(-3.0 + 0.25) / 2)
    ns, _ = discriminator_loss(Fixed(), aug, real, fake)
    expected = torch.nn.functional.softplus(torch.tensor([-3.0, 0.25])).mean() + \
        torch.nn.functional.softplus(-torch.tensor([2.0, 0.5])).mean()
    assert float(ns) == pytest.approx(float(expected))
    with pytest.raises(ConfigError, match="loss='wasserstein'"):
        generator_loss(Fixed(), aug, fake, loss="wasserstein")
    with pytest.raises(ConfigError, match="loss='wasserstein'"):
        tiny(loss="wasserstein").validate()
