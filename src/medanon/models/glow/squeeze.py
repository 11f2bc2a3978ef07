"""Squeeze (space to depth, 2x2 -> 4 channels) and the split that factors out half the latent.

The factored-out half ``z`` gets a *learned conditional prior* N(mean(h), exp(logs(h))) computed
from the half ``h`` that flows on; the split returns ``z`` already standardised,
``eps = (z - mean) / exp(logs)``, and the log-determinant of that standardisation.
"""

from __future__ import annotations

import torch
from torch import nn

from medanon.models.glow.coupling import ZeroConv2d


def squeeze(x: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) -> (N, 4C, H/2, W/2)."""
    n, c, h, w = x.shape
    x = x.reshape(n, c, h // 2, 2, w // 2, 2)
    return x.permute(0, 1, 3, 5, 2, 4).reshape(n, c * 4, h // 2, w // 2)


def unsqueeze(x: torch.Tensor) -> torch.Tensor:
    """(N, 4C, H, W) -> (N, C, 2H, 2W); the inverse of :func:`squeeze`."""
    n, c, h, w = x.shape
    x = x.reshape(n, c // 4, 2, 2, h, w)
    return x.permute(0, 1, 4, 2, 5, 3).reshape(n, c // 4, h * 2, w * 2)


class Split(nn.Module):
    """Factor out half the channels as a latent with a prior conditioned on the other half."""

    def __init__(self, channels: int):
        super().__init__()
        self.keep = channels // 2               # channels that flow on to the next level
        self.prior = ZeroConv2d(self.keep, 2 * (channels - self.keep))

    def _mean_logs(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.prior(h)
        return p[:, 0::2], p[:, 1::2]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns (h, eps, log|det d eps / d z|)."""
        h, z = x[:, : self.keep], x[:, self.keep:]
        mean, logs = self._mean_logs(h)
        eps = (z - mean) * torch.exp(-logs)
        return h, eps, -logs.flatten(1).sum(1)

    def inverse(self, h: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        mean, logs = self._mean_logs(h)
        return torch.cat([h, mean + torch.exp(logs) * eps], dim=1)


class TopPrior(nn.Module):
    """Prior of the last level's latent: N(mean, exp(logs)) per element, learned if ``learn`` (else N(0, 1))."""

    def __init__(self, shape: tuple[int, int, int], *, learn: bool):
        super().__init__()
        if learn:
            self.mean = nn.Parameter(torch.zeros(1, *shape))
            self.logs = nn.Parameter(torch.zeros(1, *shape))
        else:
            self.register_buffer("mean", torch.zeros(1, *shape))
            self.register_buffer("logs", torch.zeros(1, *shape))

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        eps = (z - self.mean) * torch.exp(-self.logs)
        return eps, (-self.logs.flatten(1).sum(1)).expand(z.shape[0])

    def inverse(self, eps: torch.Tensor) -> torch.Tensor:
        return self.mean + torch.exp(self.logs) * eps
