"""The StyleGAN2 residual discriminator: images (N, C, H, W) -> logits (N, 1)."""

from __future__ import annotations

import math

import torch
from torch import nn

from medanon.models.stylegan.config import StyleGANConfig
from medanon.models.stylegan.layers import Conv2d, FullyConnected

SQRT_HALF = math.sqrt(0.5)


class DiscriminatorBlock(nn.Module):
    """Two 3x3 convolutions (the second downsamples) plus a downsampling 1x1 skip, averaged."""

    def __init__(self,
        in_channels: int,                       # input feature maps
        out_channels: int,                      # output feature maps (at half the resolution)
    ):
        super().__init__()
        self.conv0 = Conv2d(in_channels, in_channels, 3)
        self.conv1 = Conv2d(in_channels, out_channels, 3, down=True)
        self.skip = Conv2d(in_channels, out_channels, 1, bias=False, activation=False, down=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.skip(x, gain=SQRT_HALF) + self.conv1(self.conv0(x), gain=SQRT_HALF)


class MinibatchStd(nn.Module):
    """Appends the standard deviation of features across groups of samples as extra feature maps.

    It lets the discriminator see a batch's variety, which discourages mode collapse.
    """

    def __init__(self,
        group_size: int,                        # samples per group (the batch size is rounded to a divisor)
        num_channels: int = 1,                  # statistics appended (feature maps are split this many ways)
    ):
        super().__init__()
        self.group_size = group_size
        self.num_channels = num_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        g = math.gcd(self.group_size, n)
        f = self.num_channels
        y = x.reshape(g, -1, f, c // f, h, w)
        y = (y - y.mean(dim=0)).square().mean(dim=0).add(1e-8).sqrt()  # std over each group
        y = y.mean(dim=[2, 3, 4]).reshape(-1, f, 1, 1).repeat(g, 1, h, w)
        return torch.cat([x, y], dim=1)


class Discriminator(nn.Module):
    """fromRGB at full resolution, residual blocks down to 4x4, then minibatch-std, conv, two FC layers."""

    def __init__(self,
        img_resolution: int,                    # input side in pixels (power of two)
        img_channels: int,                      # input image channels (1 or 3)
        channel_base: int = 16384,              # feature maps at resolution r: min(channel_base // r, channel_max)
        channel_max: int = 512,                 # most feature maps in any layer
        mbstd_group: int = 4,                   # minibatch-std group size (0 = no minibatch-std layer)
    ):
        super().__init__()
        self.img_resolution = img_resolution
        self.img_channels = img_channels
        resolutions = [2 ** i for i in range(int(math.log2(img_resolution)), 1, -1)]
        ch = {r: min(channel_base // r, channel_max) for r in resolutions}
        self.from_rgb = Conv2d(img_channels, ch[img_resolution], 1)
        self.blocks = nn.Sequential(*[DiscriminatorBlock(ch[r], ch[r // 2]) for r in resolutions[:-1]])
        self.mbstd = MinibatchStd(mbstd_group) if mbstd_group else nn.Identity()
        c4 = ch[4]
        self.conv = Conv2d(c4 + (1 if mbstd_group else 0), c4, 3)
        self.fc = FullyConnected(c4 * 16, c4, activation=True)
        self.out = FullyConnected(c4, 1)

    @classmethod
    def from_config(cls, cfg: StyleGANConfig) -> Discriminator:
        return cls(cfg.resolution, cfg.channels, cfg.channel_base, cfg.channel_max, cfg.mbstd_group)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.from_rgb(img.contiguous(memory_format=torch.channels_last)))  # faster on CPUs (layers.py)
        x = self.conv(self.mbstd(x))
        return self.out(self.fc(x.flatten(1)))
