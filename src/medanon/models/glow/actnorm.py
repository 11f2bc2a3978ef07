"""Activation normalisation: a per-channel affine map initialised from the first batch it sees."""

from __future__ import annotations

import torch
from torch import nn


class ActNorm(nn.Module):
    """``y = (x + bias) * exp(logs)`` per channel; log-determinant ``H * W * sum(logs)``.

    On the first forward call in training mode the bias and scale are set so that the batch has
    zero mean and unit variance per channel (data-dependent initialisation). Whether this has
    happened is a buffer, so it survives checkpoints and ``--resume``.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.logs = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))

    @torch.no_grad()
    def _init_from(self, x: torch.Tensor) -> None:
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
