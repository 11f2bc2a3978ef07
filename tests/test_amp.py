"""Mixed precision of the StyleGAN codec (``amp``): bf16 autocast on the CPU, fp16 refused there.

The tolerance of bf16 against float32 with the shipped models is measured by ``benchmarks/amp.py``
(docs/distributed.md, "Mixed precision"); here a tiny random codec checks the mechanics.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from medanon.cli import cli
from medanon.codecs.stylegan import NOISE_MODE, StyleGANCodec, check_amp
from medanon.errors import ConfigError
from medanon.models.encoder import Encoder
from medanon.models.stylegan import Generator


def codec(amp=None) -> StyleGANCodec:
    torch.manual_seed(0)
    g = Generator(z_dim=16, w_dim=16, img_resolution=16, img_channels=3, channel_base=128, channel_max=16)
    e = Encoder(16, 3, g.num_ws, g.w_dim, iterative=True, channel_base=128, channel_max=16, head_dim=16)
    return StyleGANCodec(g, e, iterations=2, amp=amp)


def test_bf16_runs_under_autocast_within_tolerance_and_returns_float32():
    x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(1)) * 2 - 1
    full, half = codec(), codec("bf16")
    ws_full, ws_half = full.encode(x), half.encode(x)
    img_full, img_half = full.decode(ws_full), half.decode(ws_full)
    assert ws_half.dtype == img_half.dtype == torch.float32
    d_img, d_ws = (img_full - img_half).abs().max().item(), (ws_full - ws_half).abs().max().item()
    assert 0 < d_img < 0.05 and 0 < d_ws < 0.05       # bf16 really ran (8 mantissa bits), and stayed close
    ws = ws_full.clone().requires_grad_(True)       # the optimisations (k-SALSA, GMIA) differentiate render
    half.render(ws).square().mean().backward()
    assert ws.grad.dtype == torch.float32 and torch.isfinite(ws.grad).all() and ws.grad.abs().sum() > 0
    assert half.describe()["amp"] == "bf16" and "amp" not in full.describe()
    from medanon.anonymize.ksame import KSameConfig, manifest_params

    assert manifest_params(KSameConfig(method="kcentroid"), codec=half)["codec"]["amp"] == "bf16"   # the manifest


def test_without_amp_the_codec_is_the_float32_generator_bit_for_bit():
    c = codec()
    ws = torch.randn(2, c.generator.num_ws, c.generator.w_dim, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(c.render(ws), c.generator.synthesis(ws, noise_mode=NOISE_MODE))


def test_fp16_only_on_cuda_and_unknown_settings_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="CUDA GPUs only"):
        codec("fp16")
    with pytest.raises(ConfigError, match="not one of"):
        check_amp("int8", "cpu")
    assert check_amp("off", "cpu") is None and check_amp("bf16", "cpu") == "bf16"
    assert check_amp("fp16", "cuda") == "fp16"      # accepted for a CUDA device (no GPU needed to decide)
    c = codec()
    with pytest.raises(ConfigError, match="CUDA GPUs only"):
        c.amp = "fp16"                              # set later (as the CLI does): checked when it runs
        c.decode(torch.zeros(1, c.generator.num_ws, c.generator.w_dim))
    shipped = Path(__file__).resolve().parents[1] / "checkpoints" / "restyle-fundus64.pt"
    (tmp_path / "data").mkdir()
    res = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", "inverted", str(tmp_path / "data"), "--model",
                                   str(shipped), "--amp", "fp16", "--out", str(tmp_path / "out")])
    assert res.exit_code == 1 and "--amp fp16 runs on CUDA GPUs only" in res.output, res.output
    assert not (tmp_path / "out").exists()
