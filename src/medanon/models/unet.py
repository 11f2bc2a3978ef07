"""A small full-resolution U-Net for retinal vessel segmentation, in the spirit of FR-UNet.

FR-UNet (Liu et al., IEEE JBHI 26(9), 2022) keeps a full-resolution branch alive through the
whole network and lets every resolution exchange features with its neighbours at every stage,
instead of U-Net's single trip down and up: thin vessels, one or two pixels wide, never have to
survive a round trip through a coarse level. The VS-Snow paper (VS-Snow §2.3) changed its
input aggregation to a depth-wise convolution over the RGB channels.

This module keeps those ideas at a size a CPU trains in minutes:

* stem: a depth-wise 3×3 convolution per input channel (the VS-Snow change), then a 1×1 mix;
* ``levels`` resolutions (1, 1/2, 1/4, ...) with widths ``width · 2^l``, all alive from the start;
* ``stages`` exchange stages: each level adds its upper neighbour (strided 3×3 convolution) and
  its lower neighbour (1×1 convolution, bilinear upsampling), then runs a residual block;
* the logits are the mean of one 1×1 head per stage on the full-resolution branch (FR-UNet's
  multi-output averaging), so every stage is supervised through the mean.

It is *not* the published FR-UNet: far fewer channels, and no dual-threshold iteration (a
hysteresis threshold; it did not help on phantoms, so one threshold calibrated on validation data
is used, see docs/snow.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.LeakyReLU(0.1, inplace=True))


class ResidualBlock(nn.Module):
    """Two 3×3 conv-BN layers with a skip connection."""

    def __init__(self, channels: int, dropout: float = 0.0):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels),
            nn.LeakyReLU(0.1, inplace=True), nn.Dropout2d(dropout),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x + self.body(x), 0.1)


class FullResUNet(nn.Module):
    """Images (N, C, H, W) in [-1, 1] -> vessel logits (N, 1, H, W). H and W must be divisible by
    ``2 ** (levels - 1)``."""

    def __init__(self,
        in_channels: int = 3,                   # 3 for colour fundus, 1 for red-free / grayscale
        width: int = 8,                         # channels of the full-resolution branch
        levels: int = 3,                        # resolutions kept alive (1, 1/2, 1/4, ...)
        stages: int = 3,                        # cross-resolution exchange stages
        dropout: float = 0.1,                   # channel dropout inside the residual blocks
    ):
        super().__init__()
        if levels < 1 or stages < 1 or width < 1:
            raise ValueError(f"levels={levels}, stages={stages}, width={width} must all be at least 1")
        self.in_channels, self.levels, self.stages = in_channels, levels, stages
        widths = [width * 2 ** level for level in range(levels)]
        mult = max(1, -(-width // in_channels))
        self.stem = nn.Sequential(_conv_bn(in_channels, in_channels * mult, groups=in_channels),
                                  _conv_bn(in_channels * mult, width, k=1))
        self.init_down = nn.ModuleList([_conv_bn(widths[i], widths[i + 1], stride=2) for i in range(levels - 1)])
        self.down = nn.ModuleList()
        self.up = nn.ModuleList()
        self.blocks = nn.ModuleList()
        for _ in range(stages):
            self.down.append(nn.ModuleList([_conv_bn(widths[i], widths[i + 1], stride=2) for i in range(levels - 1)]))
            self.up.append(nn.ModuleList([_conv_bn(widths[i + 1], widths[i], k=1) for i in range(levels - 1)]))
            self.blocks.append(nn.ModuleList([ResidualBlock(w, dropout) for w in widths]))
        self.heads = nn.ModuleList([nn.Conv2d(width, 1, 1) for _ in range(stages)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        step = 2 ** (self.levels - 1)
        if x.shape[-1] % step or x.shape[-2] % step:
            raise ValueError(f"image side {tuple(x.shape[-2:])} must be divisible by {step} for {self.levels} levels")
        feats = [self.stem(x)]
        for down in self.init_down:
            feats.append(down(feats[-1]))
        logits = []
        for s in range(self.stages):
            new = []
            for lvl, f in enumerate(feats):
                if lvl > 0:
                    f = f + self.down[s][lvl - 1](feats[lvl - 1])
                if lvl < self.levels - 1:
                    up = self.up[s][lvl](feats[lvl + 1])
                    f = f + F.interpolate(up, size=f.shape[-2:], mode="bilinear", align_corners=False)
                new.append(self.blocks[s][lvl](f))
            feats = new
            logits.append(self.heads[s](feats[0]))
        return torch.stack(logits).mean(0)
