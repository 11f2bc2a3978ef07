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
                perceptual_input_size=0, detail_weight=0.0, detail_sigma=1.0, task_weight=0.0, task_network="")
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


def _classifier(path, seed: int = 0):
    from medanon.models.classifier import ResNet, ResNetConfig, save_classifier
    torch.manual_seed(seed)
    return save_classifier(path, ResNet(ResNetConfig(in_channels=3, widths=(8, 16), blocks=(1, 1))),
                           extra={"label": "grade"})


def test_task_term_compares_a_classifiers_features_and_is_refused_without_one(tmp_path):
    """The task term is 0 on the source itself, positive on a reconstruction that lost a lesion, carries a gradient
    to the reconstruction only, and names its network (sha256) for the manifest; a weight without a network, a
    missing file and a negative weight are refused."""
    net = _classifier(tmp_path / "grade.pt")
    cfg = _loss_cfg(task_weight=2.0, task_network=str(net))
    loss_fn = ReconstructionLoss(cfg, torch.device("cpu"))
    target = torch.zeros(2, 3, 16, 16)
    target[:, 0, 6:8, 6:8] = 0.9                            # a small red lesion
    same, parts = loss_fn(target, target)
    assert float(same) == 0.0 and parts["task"] == 0.0
    recon = torch.zeros(2, 3, 16, 16, requires_grad=True)   # the lesion is gone
    loss, parts = loss_fn(recon, target)
    assert parts["task"] > 0
    loss.backward()
    assert recon.grad is not None and float(recon.grad.abs().sum()) > 0
    assert all(p.grad is None for p in loss_fn.task.parameters())          # the classifier stays frozen
    desc = loss_fn.describe()["task"]
    assert desc["weight"] == 2.0 and len(desc["network"]["sha256"]) == 64
    for c in (EncoderConfig, AutoencoderConfig):
        assert c().task_weight == 0.0
        with pytest.raises(ConfigError, match="task_network"):
            check_encoder_fields(c(task_weight=1.0))
        with pytest.raises(ConfigError, match="task_weight"):
            check_encoder_fields(c(task_weight=-1.0, task_network=str(net)))
    with pytest.raises(ConfigError, match="is not a file"):
        ReconstructionLoss(_loss_cfg(task_weight=1.0, task_network=str(tmp_path / "none.pt")), torch.device("cpu"))


def test_a_run_with_a_task_term_refuses_to_resume_with_another_classifier(tmp_path):
    import dataclasses

    from test_encoders import TINY_AUTOENCODER, gan_checkpoint, generated_images

    from medanon.config import build
    from medanon.train.autoencoder import train_autoencoder
    net = _classifier(tmp_path / "grade.pt")
    ckpt, G = gan_checkpoint(tmp_path / "gan.pt")
    images = generated_images(G, 8, seed=1)
    cfg = dataclasses.replace(build(AutoencoderConfig, path=TINY_AUTOENCODER), perceptual_weight=0.0,
                              task_weight=1.0, task_network=str(net))
    run = train_autoencoder(images, cfg, tmp_path / "run", steps=1, init_ckpt=ckpt, progress=False)
    from medanon.checkpoint import load_checkpoint
    assert load_checkpoint(run)["extra"]["losses"]["task"]["weight"] == 1.0
    train_autoencoder(images, cfg, tmp_path / "run", steps=2, resume=True, progress=False)   # same file: fine
    _classifier(tmp_path / "grade.pt", seed=1)                                              # replaced
    with pytest.raises(ConfigError, match="has changed since the run started"):
        train_autoencoder(images, cfg, tmp_path / "run", steps=3, resume=True, progress=False)


def test_task_network_of_another_modality_is_refused_and_a_sensitive_one_warns(tmp_path):
    from medanon.models.classifier import ResNet, ResNetConfig, save_classifier
    gray = save_classifier(tmp_path / "xray.pt", ResNet(ResNetConfig(in_channels=1, widths=(8,), blocks=(1,))),
                           extra={"label": "pneumonia"})
    with pytest.raises(ConfigError, match="trained on 1-channel images; the codec renders 3-channel"):
        ReconstructionLoss(_loss_cfg(task_weight=1.0, task_network=str(gray)), torch.device("cpu"), channels=3)
    sex = save_classifier(tmp_path / "sex.pt", ResNet(ResNetConfig(in_channels=3, num_classes=2, widths=(8,),
                                                                   blocks=(1,))), extra={"label": "sex"})
    with pytest.warns(UserWarning, match="KEEP that sensitive attribute"):
        ReconstructionLoss(_loss_cfg(task_weight=1.0, task_network=str(sex)), torch.device("cpu"), channels=3)
