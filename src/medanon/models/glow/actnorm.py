"""Activation normalisation: a per-channel affine map initialised from the first batch it sees."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class ActNorm(nn.Module):
    """``y = (x + bias) * exp(logs)`` per channel; log-determinant ``H * W * sum(logs)``.

    On the first forward call in training mode the bias and scale are set so that the batch has
    zero mean and unit variance per channel (data-dependent initialisation). Whether this has
    happened is a buffer, so it survives checkpoints and ``--resume``.

    With ``sync`` set (:func:`sync_actnorm`, by data-parallel training) the mean and variance are
    those of the batch across all ranks of the default process group (every rank must call forward).
    """

    sync: bool = False

    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.logs = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))

    @torch.no_grad()
    def _init_from(self, x: torch.Tensor) -> None:
        if self.sync and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            mean, std = _global_mean_std(x)
        else:
            mean = x.mean(dim=(0, 2, 3), keepdim=True)
            std = x.std(dim=(0, 2, 3), keepdim=True, unbiased=False)
        self.bias.copy_(-mean)
        self.logs.copy_(-torch.log(std + 1e-6))
        self.initialized.fill_(1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.training and not bool(self.initialized):
            self._init_from(x)
        logdet = self.logs.sum() * (x.shape[2] * x.shape[3])
        return (x + self.bias) * torch.exp(self.logs), logdet.expand(x.shape[0])

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        return y * torch.exp(-self.logs) - self.bias


def _global_mean_std(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and (biased) standard deviation of ``x`` over every rank's batch (two passes)."""
    c = x.shape[1]
    t = torch.cat([x.sum(dim=(0, 2, 3)), x.new_tensor([x.numel() / c])])
    dist.all_reduce(t)
    count = t[c]
    mean = (t[:c] / count).view(1, c, 1, 1)
    sq = (x - mean).square().sum(dim=(0, 2, 3))
    dist.all_reduce(sq)
    return mean, (sq / count).sqrt().view(1, c, 1, 1)


def sync_actnorm(module: nn.Module, enabled: bool = True) -> nn.Module:
    """Make every :class:`ActNorm` in ``module`` initialise from the batch of all ranks (or stop doing so)."""
    for m in module.modules():
        if isinstance(m, ActNorm):
            m.sync = enabled
    return module
