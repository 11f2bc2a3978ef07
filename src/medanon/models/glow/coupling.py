"""Affine coupling: half the channels are scaled and shifted by a network of the other half."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ZeroConv2d(nn.Module):
    """A 3x3 convolution initialised to output zero, with a learned per-channel log-scale (x3) as in Glow."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        nn.init.zeros_(self.conv.weight)
        nn.init.zeros_(self.conv.bias)
        self.logs = nn.Parameter(torch.zeros(1, out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * torch.exp(self.logs * 3.0)


class AffineCoupling(nn.Module):
    """``y_b = (x_b + t(x_a)) * sigmoid(s(x_a) + 2)``, ``y_a = x_a``; log-determinant ``sum log sigmoid``.

    The sigmoid keeps every scale in (0, 1), which makes training stable; the zero-initialised
    last layer makes each step start as the identity.
    """

    def __init__(self, channels: int, hidden: int):
        super().__init__()
        self.ca = channels // 2                 # channels passed through (conditioning half)
        cb = channels - self.ca                 # channels transformed
        self.net = nn.Sequential(
            nn.Conv2d(self.ca, hidden, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(hidden, hidden, 1), nn.ReLU(inplace=True),
            ZeroConv2d(hidden, 2 * cb),
        )

    def _shift_scale(self, xa: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.net(xa)
        shift, raw = h[:, 0::2], h[:, 1::2]
        return shift, raw + 2.0

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xa, xb = x[:, : self.ca], x[:, self.ca:]
        shift, raw = self._shift_scale(xa)
        yb = (xb + shift) * torch.sigmoid(raw)
        logdet = F.logsigmoid(raw).flatten(1).sum(1)
        return torch.cat([xa, yb], dim=1), logdet

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        ya, yb = y[:, : self.ca], y[:, self.ca:]
        shift, raw = self._shift_scale(ya)
        return torch.cat([ya, yb * torch.exp(-F.logsigmoid(raw)) - shift], dim=1)
