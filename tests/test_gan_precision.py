"""StyleGAN training with ``precision: bf16``: the forward passes under bf16 autocast follow float32's gradients,
the training state stays float32, and the setting is part of the run's config (tiny, CPU)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from script_module import load_script

from medanon.checkpoint import load_checkpoint
from medanon.config import validate
from medanon.errors import ConfigError
from medanon.models.stylegan import StyleGANConfig
from medanon.train.autoencoder import AutoencoderConfig
from medanon.train.gan import StyleGANTrainer, train_stylegan


def tiny(**kw) -> StyleGANConfig:
    base = dict(resolution=16, channels=3, z_dim=16, w_dim=16, channel_base=256, channel_max=32, batch=8,
                mbstd_group=2, r1_gamma=0.1, r1_interval=2, ema_kimg=0.01, ada_interval=1, ada_kimg=1, augment_p=0.5)
    return StyleGANConfig(**{**base, **kw})


def images(n: int = 16) -> torch.Tensor:
    return torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def test_bf16_forward_passes_follow_the_float32_gradients():
    """The tolerance the precision setting is held to (``benchmarks/gan_precision.py`` measures the same at a
    training state): from one state, G's and D's gradients under bf16 point where float32's do (cosine >= 0.99),
    and the losses and R1 are within 5 %."""
    torch.manual_seed(0)
    trainer = StyleGANTrainer(tiny(), images(), torch.device("cpu"))
    got = load_script("benchmarks/gan_precision.py").gradient_agreement(trainer)
    assert got["cos_G"] >= 0.99 and got["cos_D"] >= 0.99
    assert 0 < got["rel_diff_G"] < 0.15 and 0 < got["rel_diff_D"] < 0.15      # bf16 really ran: the rounding differs
    for name in ("loss_G", "loss_D", "r1"):
        assert abs(got[name]["bf16"] - got[name]["fp32"]) <= 0.05 * abs(got[name]["fp32"]), name


def test_bf16_training_keeps_a_float32_state_and_the_setting_is_part_of_the_run(tmp_path: Path):
    data = images().float() / 127.5 - 1
    cfg = tiny(precision="bf16")
    path = train_stylegan(data, cfg, tmp_path / "run", steps=3, progress=False)
    blob = load_checkpoint(path)
    assert blob["config"]["precision"] == "bf16"
    state = blob["state"]
    for part in ("G", "D", "G_ema"):
        assert all(t.dtype == torch.float32 for t in state[part].values() if t.is_floating_point()), part
    for opt in ("opt_G", "opt_D"):
        moments = [t for s in state[opt]["state"].values() for k, t in s.items() if k != "step"]
        assert moments and all(t.dtype == torch.float32 and t.isfinite().all() for t in moments)
    with pytest.raises(ConfigError, match="precision"):     # a precision change is a retune, never silent
        train_stylegan(data, tiny(), tmp_path / "run", steps=4, resume=True, progress=False)
    again = train_stylegan(data, tiny(), tmp_path / "run", steps=4, resume=True, retune=True, progress=False)
    changes = load_checkpoint(again)["extra"]["config_changes"]
    assert [(c["field"], c["from"], c["to"]) for c in changes] == [("precision", "bf16", "fp32")]


def test_bf16_sharded_steps_run_and_float32_stays_the_default():
    assert StyleGANConfig().precision == "fp32"
    trainer = StyleGANTrainer(tiny(precision="bf16"), images(), torch.device("cpu"), accumulation=2)
    assert trainer.amp == torch.bfloat16
    out = trainer.step()
    assert all(math.isfinite(v) for v in out.values())
    assert trainer.G.mapping.w_avg.dtype == torch.float32


def test_bf16_warns_where_the_device_emulates_it(monkeypatch):
    import medanon.train.gan as gan

    monkeypatch.setattr(gan, "native_bf16", lambda device: False)
    with pytest.warns(RuntimeWarning, match="slower than float32"):
        StyleGANTrainer(tiny(precision="bf16"), images(), torch.device("cpu"))


def test_unknown_precisions_and_cotraining_in_bf16_are_refused():
    with pytest.raises(ConfigError, match="precision"):
        validate(tiny(precision="fp16"))
    cfg = AutoencoderConfig(generator=dataclasses.replace(StyleGANConfig(), precision="bf16"))
    with pytest.raises(ConfigError, match="co-training runs in float32"):
        validate(cfg)
