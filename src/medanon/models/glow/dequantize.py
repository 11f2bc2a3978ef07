"""Between 8-bit images in [-1, 1] and the flow's continuous inputs y in [-0.5, 0.5], and bits/dim.

A pixel value v in {0, ..., 255} is stored as x = v / 127.5 - 1. The flow models the density of
y = (v + u) / 256 - 0.5 with u ~ U(0, 1) (uniform dequantisation), so that for 8-bit data
``log P(v) >= E_u[log p(y)] - D log 256`` and bits/dim = -(log p(y) - D log 256) / (D log 2).
:func:`image_to_flow` is the affine map with u = 1/2 (the bin centre): exact and invertible for
any real x, which is what encoding and DP-GLOW use.
"""

from __future__ import annotations

import math

import torch

N_BINS = 256


def image_to_flow(x: torch.Tensor) -> torch.Tensor:
    """x in [-1, 1] -> y = ((x + 1) * 127.5 + 0.5) / 256 - 0.5 (the bin centre for 8-bit x)."""
    return ((x + 1.0) * 127.5 + 0.5) / N_BINS - 0.5


def flow_to_image(y: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`image_to_flow` (not clamped: a decoded latent may leave [-1, 1])."""
    return ((y + 0.5) * N_BINS - 0.5) / 127.5 - 1.0


def dequantize(x: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """Training input: quantise x to 8 bits, add uniform noise within the bin, map to y."""
    v = torch.round((x + 1.0) * 127.5).clamp_(0, N_BINS - 1)
    u = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    return (v + u) / N_BINS - 0.5


def bits_per_dim(log_prob_y: torch.Tensor, dims: int) -> torch.Tensor:
    """Discrete bits per dimension of 8-bit data from the flow's log density of y (nats)."""
    return (-log_prob_y + dims * math.log(N_BINS)) / (dims * math.log(2.0))
