"""A projected discriminator (Sauer et al., "Projected GANs Converge Faster", NeurIPS 2021) on the frozen
EfficientNet-Lite0 the project already ships for k-SALSA's style loss.

The image goes through the frozen feature network at ``2 x resolution`` pixels (so that thin structures
survive its stride-2 stem); four of its feature maps (``block1``, ``block2``, ``block3``, ``block5``: 1/2,
1/4, 1/8 and 1/16 of that side) are projected by **fixed random** 1x1 convolutions (the paper's cross-channel
mixing, CCM) and mixed top-down (cross-scale mixing, CSM: each coarser mix, upsampled bilinearly through
another fixed random 1x1 projection, is added to the finer one). Only the four small discriminators on the
mixed maps learn; each ends in a map of patch logits, and the image's logit is the sum over scales of their
means. The frozen network is **not** part of this module's parameters or state: checkpoints stay the size
of the heads, and the network is rebuilt from its packaged weights (checksum-verified) when loaded.

The paper's heads normalise their inputs with batch normalisation. Here real and generated batches pass D
separately, and per-batch statistics hid their mean colour from D, so each mixed map is instead divided by a
**fixed** scale: its root mean square on real images, measured once before training (:meth:`calibrate`,
saved with the heads). Without it the maps' RMS is 8-30 and D's logits reached 50-90 within 50 steps.
Checkpoints from before the scale load with a scale of 1 (what they were trained with).

Departures from the paper, stated: the loss is the trainer's (``loss: hinge`` is the paper's; StyleGAN2's
non-saturating loss is the default) and so is the augmentation (ADA's pipeline, or a fixed ``augment_p``
with ``ada_target: 0``, instead of DiffAugment); R1 can stay on (``r1_gamma``) but the projected presets turn
it off, as the paper does.

Images are ``(N, C, H, W)`` in ``[-1, 1]``; one channel is repeated to three by the feature network.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

LAYERS = ("block1", "block2", "block3", "block5")     # EfficientNet-Lite0 maps at 1/2 ... 1/16 of the input side
CHANNELS = (16, 24, 40, 112)                           # their channels
PROJ = (32, 64, 128, 256)                              # channels after the fixed random projections


def _fixed(cin: int, cout: int, seed: int) -> torch.Tensor:
    """A fixed random 1x1 projection (Kaiming-normal), (cout, cin, 1, 1), from its own generator."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(cout, cin, 1, 1, generator=g) * (2.0 / cin) ** 0.5


class _Head(nn.Module):
    """A small discriminator on one mixed map: spectrally normalised stride-2 convolutions (as the paper's heads)
    down to 4x4 (or less), then a 1x1 logit. No batch normalisation: real and generated batches pass D
    separately, and per-batch statistics hid their mean colour from D (with it, samples drifted to the
    complementary colours within 5 kimg)."""

    def __init__(self, cin: int, side: int, width: int):
        super().__init__()
        layers: list[nn.Module] = []
        c = cin
        while side > 4:
            layers += [spectral_norm(nn.Conv2d(c, width, 4, 2, 1)), nn.LeakyReLU(0.2)]
            c, side = width, side // 2
        layers.append(spectral_norm(nn.Conv2d(c, 1, 1)))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).mean(dim=(1, 2, 3))


class ProjectedDiscriminator(nn.Module):
    """D(img) -> logits (N, 1), on fixed random projections of frozen EfficientNet-Lite0 features."""

    def __init__(self,
        img_resolution: int,                    # input side in pixels
        img_channels: int,                      # input image channels (1 or 3)
        width: int = 64,                        # feature maps of each head's convolutions
        seed: int = 0,                          # seeds the fixed random projections
        features: nn.Module | None = None,      # the frozen feature network (default: the packaged one)
    ):
        super().__init__()
        self.img_resolution, self.img_channels = img_resolution, img_channels
        self.input_size = 2 * img_resolution
        if features is None:
            from medanon.models.features import get_feature_network

            features = get_feature_network("efficientnet-lite0", input_size=self.input_size)
        features.requires_grad_(False)
        self._features = [features]             # a list: not a submodule, so neither trained nor saved
        for i, (c, p) in enumerate(zip(CHANNELS, PROJ, strict=True)):
            self.register_buffer(f"ccm{i}", _fixed(c, p, seed * 100 + i))
            if i + 1 < len(PROJ):
                self.register_buffer(f"csm{i}", _fixed(PROJ[i + 1], p, seed * 100 + 50 + i))
        self.register_buffer("scale", torch.ones(len(PROJ)))   # 1 / RMS of each mixed map on real images
        sides = [self.input_size // 2 ** (i + 1) for i in range(3)] + [self.input_size // 16]
        self.heads = nn.ModuleList(_Head(p, s, width) for p, s in zip(PROJ, sides, strict=True))

    @classmethod
    def from_config(cls, cfg) -> ProjectedDiscriminator:
        return cls(cfg.resolution, cfg.channels, seed=cfg.seed)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        state_dict.setdefault(prefix + "scale", torch.ones(len(PROJ)))   # checkpoints from before the scale
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @torch.no_grad()
    def calibrate(self, real: torch.Tensor) -> None:
        """Fix each mixed map's scale to 1 / its root mean square on ``real`` images (a few dozen suffice)."""
        self.scale.fill_(1.0)
        rms = torch.stack([m.float().pow(2).mean().sqrt() for m in self._mixed(real)])
        self.scale.copy_(1.0 / rms.clamp_min(1e-6))

    def _mixed(self, img: torch.Tensor) -> list[torch.Tensor]:
        net = self._features[0]
        feats = net(img, layers=list(LAYERS))
        proj = [F.conv2d(feats[name], getattr(self, f"ccm{i}")) for i, name in enumerate(LAYERS)]
        mixed = [proj[-1]]
        for i in range(len(proj) - 2, -1, -1):           # coarse to fine: add the upsampled coarser mix
            up = F.interpolate(F.conv2d(mixed[0], getattr(self, f"csm{i}")), size=proj[i].shape[-2:],
                               mode="bilinear", align_corners=False)
            mixed.insert(0, proj[i] + up)
        return mixed

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        mixed = self._mixed(img)
        return sum(h(m * self.scale[i]) for i, (h, m) in enumerate(zip(self.heads, mixed, strict=True)))[:, None]
