"""The reconstruction loss both inversion trainers (ReStyle, co-training) minimise, and its checks.

``L = pixel_weight · MSE(x̂, x) + perceptual_weight · feature distance(x̂, x) + detail_weight · MSE(hp(x̂), hp(x))``

* the feature distance is :func:`medanon.evaluate.reconstruction.perceptual_distance` (EfficientNet-Lite0
  ImageNet features by default; **not LPIPS**, see docs/backbone.md);
* ``hp(x) = x − gaussian_blur(x, detail_sigma)`` is the image's fine detail: in a fundus photograph the
  vessel tree, microaneurysms and exudates; in a chest X-ray rib edges, lines and devices. A plain MSE
  barely rewards drawing a vessel one or two pixels wide (it is a small share of the pixels and of the
  error), so a codec trained on it alone paints a smooth disc. The detail term, an encoder loss
  that weights thin structures, weights exactly those pixels, needs no vessel mask (a user's
  data has none), and works for any modality. ``detail_sigma`` is in pixels at the training resolution;
  scale it with the resolution (1 px at 64 px ≈ 8 px at 512 px for the same anatomy).

``L += task_weight · ‖f(x̂) − f(x)‖² / ‖f(x)‖²`` (optional): ``f`` is the penultimate (pooled) feature
vector of a classifier the user trained on a clinical label (``task_network``: a ``medanon train classifier``
checkpoint, e.g. of the DR grade), the same features GMIA's E_ut compares. It asks the codec to keep what that
classifier looks at (lesions that are a pixel or two wide and that pixel losses soften), scale-free (relative to the
source's own features). It is ours, not the papers': k-SALSA's and GMIA's codecs are trained on pixels, perceptual
features and D. Measure what it keeps with a classifier it was *not* trained with (`benchmarks/backbone_targets.py
--classifier`), or the measurement is the loss itself.

``detail_weight = 0`` and ``task_weight = 0`` (the defaults) give the plain reconstruction loss, without either term.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from medanon.errors import ConfigError, user_stacklevel
from medanon.evaluate.reconstruction import feature_distance_name, gaussian_kernel1d, perceptual_distance


def check_encoder_fields(cfg: Any) -> None:
    """Validation shared by the encoder and autoencoder configs (architecture, losses, batch)."""
    for name in ("channel_base", "channel_max", "head_dim", "batch"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name}={getattr(cfg, name)} must be at least 1")
    if cfg.pixel_weight < 0 or cfg.perceptual_weight < 0 or cfg.detail_weight < 0 or cfg.task_weight < 0:
        raise ConfigError("pixel_weight, perceptual_weight, detail_weight and task_weight must not be negative")
    if cfg.task_weight > 0 and not cfg.task_network:
        raise ConfigError(f"task_weight={cfg.task_weight} needs task_network",
                          fix="set task_network to a `medanon train classifier` checkpoint, or task_weight=0")
    if cfg.pixel_weight == 0 and cfg.perceptual_weight == 0 and cfg.detail_weight == 0 and cfg.task_weight == 0:
        raise ConfigError("pixel_weight, perceptual_weight, detail_weight and task_weight are all 0: nothing to learn",
                          fix="set pixel_weight=1 (and perceptual_weight=0.8)")
    if cfg.detail_sigma <= 0:
        raise ConfigError(f"detail_sigma={cfg.detail_sigma} must be positive (pixels of the Gaussian blur)")
    if cfg.perceptual_weight > 0 and not cfg.perceptual_layers:
        raise ConfigError("perceptual_layers is empty", fix="name feature layers, e.g. [block1, block2, block3]")
    if cfg.perceptual_input_size != 0 and cfg.perceptual_input_size < 32:
        raise ConfigError(f"perceptual_input_size={cfg.perceptual_input_size} must be 0 (unchanged) or >= 32")


def high_pass(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """``images − gaussian_blur(images, sigma)`` per channel, reflect-padded: (N, C, H, W) -> same shape.

    >>> x = torch.ones(1, 3, 16, 16)
    >>> float(high_pass(x, 1.0).abs().max()) < 1e-6      # a flat image has no detail
    True
    """
    k = gaussian_kernel1d(sigma, truncate=3.0, dtype=images.dtype, device=images.device)   # scipy's radius rule
    c, r = images.shape[1], (len(k) - 1) // 2
    pad = min(r, images.shape[-1] - 1, images.shape[-2] - 1)
    if pad < r:                                  # images smaller than the kernel: truncate it
        k = k[r - pad:r + pad + 1] / k[r - pad:r + pad + 1].sum()
    blurred = F.pad(images, (pad, pad, pad, pad), mode="reflect")
    blurred = F.conv2d(blurred, k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    blurred = F.conv2d(blurred, k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)
    return images - blurred


class ReconstructionLoss:
    """``pixel_weight · MSE + perceptual_weight · feature distance + detail_weight · MSE of the detail``.

    With ``perceptual_weight = 0`` no feature network is loaded.
    """

    def __init__(self, cfg: Any, device: torch.device, *, channels: int | None = None):
        self.pixel_weight = cfg.pixel_weight
        self.perceptual_weight = cfg.perceptual_weight
        self.detail_weight = cfg.detail_weight
        self.detail_sigma = cfg.detail_sigma
        self.layers = tuple(cfg.perceptual_layers)
        self.network = None
        self.task_weight = cfg.task_weight
        self.task = None
        if cfg.task_weight > 0:
            self.task = task_network(cfg.task_network, device, channels=channels)
        if cfg.perceptual_weight > 0:
            from medanon.models.features import get_feature_network

            self.network = get_feature_network(cfg.perceptual_network, device=device,
                                               input_size=cfg.perceptual_input_size or None)
            bad = [layer for layer in self.layers if layer not in self.network.layers]
            if bad:
                raise ConfigError(f"perceptual_layers {bad} are not layers of {cfg.perceptual_network}",
                                  fix=f"choose from {', '.join(self.network.layers)}")

    def __call__(self, recon: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        pixel = (recon - target).square().mean()
        loss = self.pixel_weight * pixel
        mse = float(pixel.detach())
        parts = {"pixel": mse, "psnr": 10 * math.log10(4.0 / max(mse, 1e-12))}
        if self.network is not None:
            perceptual = perceptual_distance(recon, target, network=self.network, layers=self.layers).mean()
            loss = loss + self.perceptual_weight * perceptual.to(loss.dtype)
            parts["perceptual"] = float(perceptual.detach())
        if self.detail_weight > 0:
            detail = (high_pass(recon, self.detail_sigma) - high_pass(target, self.detail_sigma)).square().mean()
            loss = loss + self.detail_weight * detail
            parts["detail"] = float(detail.detach())
        if self.task is not None:
            f_r, f_x = self.task(recon), self.task(target).detach()
            task = ((f_r - f_x).square().sum(1) / f_x.square().sum(1).clamp_min(1e-8)).mean()
            loss = loss + self.task_weight * task
            parts["task"] = float(task.detach())
        return loss, parts

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pixel": {"kind": "mean squared error", "weight": self.pixel_weight}}
        if self.network is not None:
            out["perceptual"] = {"kind": feature_distance_name(self.network), "not": "LPIPS",
                                 "weight": self.perceptual_weight, "layers": list(self.layers),
                                 "network": self.network.describe()}
        if self.detail_weight > 0:
            out["detail"] = {"kind": "mean squared error of x - gaussian_blur(x)", "sigma_px": self.detail_sigma,
                             "weight": self.detail_weight}
        if self.task is not None:
            out["task"] = {"kind": "relative squared distance of a classifier's penultimate features",
                           "weight": self.task_weight, "network": dict(self.task.provenance)}
        return out


def task_network(path: str, device: torch.device, *, channels: int | None = None):
    """The frozen feature network of the task term: a classifier checkpoint's penultimate features.

    Refused when the classifier was trained on images of another channel count than the codec renders (a fundus
    classifier on chest X-rays would be fed grey images copied to RGB without a word); a warning when it predicts a
    sensitive attribute, which the term would then teach the codec to keep."""
    import warnings

    from medanon.anonymize.gmia_networks import UtilityEncoder
    from medanon.release.labels import SENSITIVE_LABELS

    if not Path(path).is_file():
        raise ConfigError(f"task_network={path} is not a file", fix="give a `medanon train classifier` checkpoint")
    net = UtilityEncoder.from_checkpoint(path, map_location=device).eval().requires_grad_(False)
    trained = net.model.cfg.in_channels
    if channels is not None and trained != channels:
        raise ConfigError(f"task_network={path} was trained on {trained}-channel images; the codec renders "
                          f"{channels}-channel images", fix="use a classifier trained on the codec's modality")
    if net.label in SENSITIVE_LABELS:
        warnings.warn(f"task_network={path} predicts {net.label!r}: the task term teaches the codec to KEEP that "
                      "sensitive attribute in its reconstructions", stacklevel=user_stacklevel())
    return net


def check_task_network_unchanged(blob: dict[str, Any], cfg: Any) -> None:
    """On resume: the task network's file must be the one the run was trained with (same sha256)."""
    if getattr(cfg, "task_weight", 0) <= 0:
        return
    from medanon.checkpoint import load_checkpoint

    then = (blob["extra"].get("losses", {}).get("task") or {}).get("network", {}).get("sha256")
    now = load_checkpoint(cfg.task_network, kind="classifier")["sha256"]
    if then is not None and then != now:
        raise ConfigError(f"task_network={cfg.task_network} has changed since the run started (sha256 {now[:12]}…, "
                          f"trained with {then[:12]}…)", fix="resume with the classifier the run was trained with")
