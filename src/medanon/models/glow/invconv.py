"""Invertible 1x1 convolution with an LU-decomposed weight (Glow §3.2)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class InvConv1x1LU(nn.Module):
    """``W = P L (U + diag(sign(s) * exp(log|s|)))``: log-determinant ``H * W * sum(log|s|)`` in O(c).

    ``P`` (a permutation) and ``sign(s)`` are fixed at initialisation from a random rotation; ``L``
    (unit lower triangular), ``U`` (strictly upper triangular) and ``log|s|`` are learned.
    """

    def __init__(self, channels: int, *, generator: torch.Generator | None = None):
        super().__init__()
        q, _ = torch.linalg.qr(torch.randn(channels, channels, generator=generator, dtype=torch.float64))
        p, lower, upper = torch.linalg.lu(q)
        s = torch.diagonal(upper)
        self.register_buffer("perm", p.float())
        self.register_buffer("sign_s", torch.sign(s).float())
        self.register_buffer("lower_mask", torch.tril(torch.ones(channels, channels), -1))
        self.register_buffer("eye", torch.eye(channels))
        self.lower = nn.Parameter(lower.float())
        self.upper = nn.Parameter(torch.triu(upper, 1).float())
        self.log_s = nn.Parameter(torch.log(torch.abs(s)).float())

    def weight(self) -> torch.Tensor:
        lower = self.lower * self.lower_mask + self.eye
        upper = self.upper * self.lower_mask.T + torch.diag(self.sign_s * torch.exp(self.log_s))
        return self.perm @ lower @ upper

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.weight()
        logdet = self.log_s.sum() * (x.shape[2] * x.shape[3])
        return F.conv2d(x, w[:, :, None, None]), logdet.expand(x.shape[0])

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        w_inv = torch.linalg.inv(self.weight().double()).to(y.dtype)   # c x c: exact enough in float64
        return F.conv2d(y, w_inv[:, :, None, None])
