"""The reconstruction loss of the inversion trainers, and its detail term (issue 12)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.ndimage import gaussian_filter

from medanon.errors import ConfigError
from medanon.train.autoencoder import AutoencoderConfig
from medanon.train.encoder import EncoderConfig
from medanon.train.recon_loss import ReconstructionLoss, check_encoder_fields, high_pass


@pytest.mark.parametrize("sigma", [0.7, 1.0, 2.0])
def test_high_pass_is_image_minus_scipy_gaussian(sigma):
    x = torch.rand(2, 3, 20, 24, generator=torch.Generator().manual_seed(0))
    ref = x.numpy() - gaussian_filter(x.numpy().astype(np.float64), sigma=(0, 0, sigma, sigma), mode="mirror",
                                      truncate=3.0)
    assert np.abs(high_pass(x, sigma).numpy() - ref).max() < 1e-5


def test_detail_of_a_thin_line_sits_on_the_line():
    x = torch.zeros(1, 1, 32, 32)
    x[..., 16, :] = 1.0                                    # a one-pixel vessel
    hp = high_pass(x, 1.0)[0, 0]
    assert float(hp[16].mean()) > 0.5                      # most of the line survives as detail
    assert float(hp[:10].abs().max()) < 1e-6               # far from it: none


def _loss_cfg(**kw):
    base = dict(pixel_weight=1.0, perceptual_weight=0.0, perceptual_layers=(), perceptual_network="efficientnet-lite0",
                perceptual_input_size=0, detail_weight=0.0, detail_sigma=1.0)
    return SimpleNamespace(**{**base, **kw})


def test_detail_weight_zero_is_the_old_loss_and_the_term_penalises_a_missing_vessel():
    target = torch.zeros(2, 3, 16, 16)
    target[..., 8, :] = -0.6                               # a dark vessel on a flat background
    blurred = torch.full_like(target, float(target.mean()))   # a smooth disc: right mean, no vessel
    old, parts = ReconstructionLoss(_loss_cfg(), torch.device("cpu"))(blurred, target)
    assert "detail" not in parts and torch.isclose(old, (blurred - target).square().mean())
    new, parts = ReconstructionLoss(_loss_cfg(detail_weight=5.0), torch.device("cpu"))(blurred, target)
    assert parts["detail"] > 0 and float(new) > float(old)
    same, parts = ReconstructionLoss(_loss_cfg(detail_weight=5.0), torch.device("cpu"))(target, target)
    assert float(same) == 0.0 and parts["detail"] == 0.0


def test_configs_default_to_no_detail_term_and_refuse_bad_values():
    for cls in (EncoderConfig, AutoencoderConfig):
        assert cls().detail_weight == 0.0
        with pytest.raises(ConfigError, match="detail_weight"):
            check_encoder_fields(cls(detail_weight=-1.0))
        with pytest.raises(ConfigError, match="detail_sigma"):
            check_encoder_fields(cls(detail_sigma=0.0))
    check_encoder_fields(AutoencoderConfig(pixel_weight=0.0, perceptual_weight=0.0, detail_weight=1.0))
