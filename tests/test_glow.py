"""GLOW: invertibility, exact log-determinants against brute-force Jacobians, training, resume, checkpoints."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from medanon.checkpoint import save_checkpoint
from medanon.config import build
from medanon.errors import ConfigError
from medanon.models.glow import Glow, GlowConfig, bits_per_dim, dequantize, flow_to_image, image_to_flow
from medanon.models.glow.actnorm import ActNorm
from medanon.models.glow.invconv import InvConv1x1LU
from medanon.models.glow.squeeze import squeeze, unsqueeze
from medanon.train.flow import evaluate_bpd, load_flow, train_flow

ROOT = Path(__file__).resolve().parents[1]


def random_flow(channels: int, resolution: int, *, levels: int = 2, depth: int = 2, dtype=torch.float32,
                seed: int = 0, noise: float = 0.05) -> Glow:
    """A flow with data-dependent init done and every parameter moved away from its (identity) init
    (by ``noise`` * N(0, 1): larger moves give ill-conditioned flows no training produces)."""
    flow = Glow(GlowConfig(resolution=resolution, channels=channels, levels=levels, depth=depth, hidden=8,
                           seed=seed)).to(dtype)
    g = torch.Generator().manual_seed(seed)
    flow.train()
    flow.log_prob(torch.rand(8, channels, resolution, resolution, generator=g, dtype=dtype) - 0.5)
    with torch.no_grad():
        for p in flow.parameters():
            p.add_(noise * torch.randn(p.shape, generator=g, dtype=dtype))
    return flow.eval()


def smooth_images(n: int, channels: int, size: int, seed: int = 0) -> torch.Tensor:
    """Blobs on a dark background in [-1, 1], 8-bit valued: a tiny learnable image distribution."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    c = torch.rand(n, 2, generator=g) - 0.5
    r = 0.3 + 0.3 * torch.rand(n, generator=g)
    d = ((xx - c[:, 0, None, None]) ** 2 + (yy - c[:, 1, None, None]) ** 2) / r[:, None, None] ** 2
    img = (torch.exp(-d) * 1.6 - 0.8)[:, None].expand(n, channels, size, size).clone()
    return torch.round((img + 1) * 127.5) / 127.5 - 1


# ------------------------------------------------------------------------------------------------ layers


def test_squeeze_round_trip_and_layout():
    x = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    s = squeeze(x)
    assert s.shape == (2, 12, 2, 2)
    assert torch.equal(unsqueeze(s), x)
    assert torch.equal(s[0, :4, 0, 0], torch.tensor([0.0, 1.0, 4.0, 5.0]))   # one 2x2 block -> 4 channels


def test_actnorm_data_dependent_init_and_persistence():
    x = torch.randn(64, 3, 5, 5) * torch.tensor([2.0, 0.5, 3.0])[None, :, None, None] + 4.0
    an = ActNorm(3).train()
    y, logdet = an(x)
    assert torch.allclose(y.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)
    assert torch.allclose(y.std(dim=(0, 2, 3), unbiased=False), torch.ones(3), atol=1e-4)
    assert torch.allclose(logdet, an.logs.sum() * 25 * torch.ones(64))
    again = ActNorm(3)
    again.load_state_dict(an.state_dict())
    again.train()(x * 10)                      # already initialised: must not re-initialise on new data
    assert torch.equal(again.bias, an.bias)
    assert torch.allclose(an.inverse(y), x, atol=1e-5)


def test_invconv_lu_logdet_matches_slogdet():
    conv = InvConv1x1LU(6, generator=torch.Generator().manual_seed(3)).double()
    with torch.no_grad():
        for p in conv.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(2, 6, 3, 4, dtype=torch.float64)
    y, logdet = conv(x)
    assert torch.allclose(logdet, torch.linalg.slogdet(conv.weight())[1] * 12)
    assert torch.allclose(conv.inverse(y), x, atol=1e-12)


# ------------------------------------------------------------------------------------------------ flow


@pytest.mark.parametrize("channels", [1, 3])
def test_invertible_in_float32(channels: int):
    flow = random_flow(channels, 16, levels=3)
    x = torch.rand(5, channels, 16, 16, generator=torch.Generator().manual_seed(1)) * 2 - 1
    with torch.no_grad():
        eps = flow.encode(image_to_flow(x))
        back = flow_to_image(flow.decode(eps))
    assert eps.shape == (5, channels * 16 * 16)
    assert (back - x).abs().max() < 1e-4


@pytest.mark.parametrize("channels,size,levels", [(1, 8, 2), (3, 4, 1), (1, 4, 2)])
def test_logdet_matches_brute_force_jacobian(channels: int, size: int, levels: int):
    flow = random_flow(channels, size, levels=levels, dtype=torch.float64, seed=channels, noise=0.2)
    y = torch.rand(1, channels, size, size, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) - 0.5
    eps, logdet = flow.encode_with_logdet(y)
    jac = torch.autograd.functional.jacobian(lambda t: flow.encode(t.reshape(y.shape)).reshape(-1), y.reshape(-1))
    sign, ref = torch.linalg.slogdet(jac)
    assert sign != 0
    assert float(logdet.detach()) == pytest.approx(float(ref), abs=1e-8)
    # change of variables with a standard-normal base: the model's log-density
    d = eps.numel()
    manual = -0.5 * (eps.square().sum() + d * np.log(2 * np.pi)) + ref
    assert float(flow.log_prob(y).detach()) == pytest.approx(float(manual.detach()), abs=1e-8)


def test_standardised_latent_is_standard_normal_for_model_samples():
    flow = random_flow(1, 8, levels=2)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        eps = torch.randn(256, 64, generator=gen)
        again = flow.encode(flow.decode(eps))
    assert torch.allclose(again, eps, atol=1e-3)


def test_dequantisation_and_bits_per_dim():
    x = torch.tensor([-1.0, 0.0 / 127.5 - 1, 1.0]).reshape(1, 1, 1, 3)
    y = image_to_flow(x)
    assert torch.allclose(y, torch.tensor([0.5 / 256 - 0.5, 0.5 / 256 - 0.5, 255.5 / 256 - 0.5]).reshape(1, 1, 1, 3))
    noisy = dequantize(x, generator=torch.Generator().manual_seed(0))
    v = torch.round((x + 1) * 127.5)
    assert ((noisy + 0.5) * 256 >= v).all() and ((noisy + 0.5) * 256 < v + 1).all()
    # a uniform density on [-0.5, 0.5]^D has log p = 0: exactly 8 bits per dimension
    assert float(bits_per_dim(torch.zeros(1), 12)) == pytest.approx(8.0)


def test_config_validation_and_presets():
    for name in ("tiny32", "cpu64", "paper512"):
        cfg = build(GlowConfig, path=ROOT / "configs" / "glow" / f"{name}.yaml")
        assert cfg.dims == cfg.channels * cfg.resolution**2
    with pytest.raises(ConfigError, match="squeezes"):
        GlowConfig(resolution=8, levels=4).validate()
    with pytest.raises(ConfigError, match="one per level"):
        GlowConfig(levels=3, hidden=(8, 8)).validate()
    with pytest.raises(ValueError, match=r"\(N, 1, 8, 8\)"):
        Glow(GlowConfig(resolution=8, levels=2, depth=1, hidden=4)).log_prob(torch.zeros(2, 3, 8, 8))


# ------------------------------------------------------------------------------------------------ training


def tiny_cfg(**kw) -> GlowConfig:
    base = dict(resolution=16, channels=1, levels=2, depth=2, hidden=(16,), batch=8, lr=3e-3, warmup_steps=5,
                steps=60, checkpoint_every=20, seed=0)
    return GlowConfig(**{**base, **kw})


def test_training_lowers_bits_per_dim_and_stores_calibration(tmp_path: Path):
    images = smooth_images(48, 1, 16)
    cfg = tiny_cfg()
    before = evaluate_bpd(Glow(cfg), images)
    res = train_flow(cfg, images, val_images=smooth_images(16, 1, 16, seed=1), out=tmp_path / "run", progress=False)
    assert res.steps == 60
    assert res.train_bpd < before - 1.0, (before, res.train_bpd)
    codec, cal, blob = load_flow(res.path)
    assert blob["extra"]["train_bpd"] == pytest.approx(res.train_bpd)
    assert cal is not None and cal.count == 48 and cal.space == "glow-eps"
    assert blob["extra"]["calibration_sha256"] == cal.checksum()
    assert evaluate_bpd(codec.flow, images) == pytest.approx(res.train_bpd, rel=1e-6)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 4 and '"val_bpd_subset"' in lines[0]


def test_resume_continues_exactly(tmp_path: Path):
    images = smooth_images(32, 1, 16)
    straight = train_flow(tiny_cfg(steps=20, checkpoint_every=10), images, out=tmp_path / "a", progress=False)
    train_flow(tiny_cfg(steps=10, checkpoint_every=10), images, out=tmp_path / "b", progress=False)
    with pytest.raises(ConfigError, match="resume=True"):
        train_flow(tiny_cfg(steps=20, checkpoint_every=10), images, out=tmp_path / "b", progress=False)
    with pytest.raises(ConfigError, match=r"another config \(lr .* -> 0\.01\)"):     # names what changed
        train_flow(tiny_cfg(steps=20, checkpoint_every=10, lr=1e-2), images, out=tmp_path / "b", resume=True,
                   progress=False)
    resumed = train_flow(tiny_cfg(steps=20, checkpoint_every=10), images, out=tmp_path / "b", resume=True,
                         progress=False)
    a, b = load_flow(straight.path)[0].flow.state_dict(), load_flow(resumed.path)[0].flow.state_dict()
    assert all(torch.allclose(a[k].float(), b[k].float(), atol=1e-6) for k in a)
    metrics = (tmp_path / "b" / "metrics.jsonl").read_text()
    again = train_flow(tiny_cfg(steps=20, checkpoint_every=10), images, out=tmp_path / "b", resume=True,
                       progress=False)                                  # finished: nothing done or logged again
    assert (again.path, again.steps, again.train_bpd) == (resumed.path, 20, resumed.train_bpd)
    assert (tmp_path / "b" / "metrics.jsonl").read_text() == metrics


def test_load_flow_refuses_other_checkpoints(tmp_path: Path):
    p = save_checkpoint(tmp_path / "x.pt", kind="stylegan", config={}, state={})
    with pytest.raises(ConfigError, match="expected glow"):
        load_flow(p)
    with pytest.raises(ConfigError, match="fewer than one batch"):
        train_flow(tiny_cfg(batch=64), smooth_images(8, 1, 16), out=tmp_path / "r", progress=False)


def test_cli_trains_a_filtered_flow_and_resumes(tmp_path: Path, monkeypatch):
    from click.testing import CliRunner

    from medanon.cli import cli
    from medanon.config import PhantomConfig
    from medanon.phantoms.generate import generate

    data = generate(PhantomConfig(modality="xray", patients=12, per_patient=2, size=16, workers=1, seed=2,
                                  pneumonia_rate=0.5), tmp_path / "xray", progress=False)
    args = ["--device", "cpu", "train", "flow", str(data), "--config", str(ROOT / "configs/glow/tiny32.yaml"),
            "--size", "16", "--batch", "4", "--set", "checkpoint_every=2", "--where", "pneumonia=0",
            "--out", str(tmp_path / "run")]
    runner = CliRunner()
    res = runner.invoke(cli, [*args, "--steps", "2"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, [*args, "--steps", "4", "--resume"])
    assert res.exit_code == 0, res.output
    _, cal, blob = load_flow(tmp_path / "run" / "flow.pt")
    assert blob["step"] == 4 and blob["extra"]["data"]["where"] == {"pneumonia": 0.0}
    assert blob["config"]["resolution"] == 16 and cal.count == blob["extra"]["train_images"]
    inputs = json.loads((tmp_path / "run" / "manifest.json").read_text())["inputs"]
    assert inputs["data"]["path"] == str(data) and inputs["data"]["images"] == 24, inputs   # the data, named
    res = runner.invoke(cli, [*args[:5], *args[7:], "--steps", "6", "--resume"])   # no --config: the run's own
    assert res.exit_code == 0 and load_flow(tmp_path / "run" / "flow.pt")[2]["step"] == 6, res.output
    from medanon.data.dataset import ImageDataset

    decoded, tensors = [], ImageDataset.tensors
    monkeypatch.setattr(ImageDataset, "tensors", lambda self, *a, **k: decoded.append(1) or tensors(self, *a, **k))
    res = runner.invoke(cli, [*args, "--steps", "8", "--resume", "--set", "lr=0.0005"])
    assert res.exit_code != 0 and "another config (lr " in res.output and decoded == [], res.output   # before decoding
    monkeypatch.undo()
    res = runner.invoke(cli, [*args[:-2], "--where", "nosuch=1", "--out", str(tmp_path / "r2")])
    assert res.exit_code != 0 and "unknown label" in res.output
    # swap two images' labels: the same counts, another selection (and the same images): a resume refuses it
    whole = [*args[:-2], "--subset", "all", "--out", str(tmp_path / "r3")]
    assert runner.invoke(cli, [*whole, "--steps", "2"]).exit_code == 0
    # the same files read with another crop are other training images: refused, and the crop named (a phantom's
    # square images read alike either way, so the run's record of the crop says it, not the pixels')
    res = runner.invoke(cli, [*whole, "--steps", "4", "--resume", "--crop", "pad"])
    assert res.exit_code != 0 and "(changed since: crop 'center' -> 'pad')" in res.output, res.output
    rows = (data / "labels.csv").read_text().splitlines()
    col = rows[0].split(",").index("pneumonia")
    cells = [r.split(",") for r in rows[1:]]
    one = next(i for i, c in enumerate(cells) if c[col] == "1")
    zero = next(i for i, c in enumerate(cells) if c[col] == "0")
    cells[one][col], cells[zero][col] = "0", "1"
    (data / "labels.csv").write_text("\n".join([rows[0], *(",".join(c) for c in cells)]) + "\n")
    res = runner.invoke(cli, [*whole, "--steps", "4", "--resume"])
    assert res.exit_code != 0 and "trained on other data (changed since: " in res.output \
        and "records.train '" in res.output, res.output

