"""The multi-scale GLOW flow: y -> eps (standardised latent) and back, with exact log-likelihood.

::

    y (C, H, W) ─ level 1: squeeze, K x [actnorm, 1x1 conv, coupling], split ─> eps_1 (2C, H/2, W/2)
                  level 2: squeeze, K x step, split                        ─> eps_2 (4C, H/4, W/4)
                  ...
                  level L: squeeze, K x step, learned top prior             ─> eps_L

Every latent is standardised by its (learned) prior, so ``eps`` is N(0, I) under the model and
``log p(y) = log N(eps; 0, I) + log |det d eps / d y|``. The flat latent concatenates the levels in
this order and has exactly D = C * H * W elements.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from medanon.models.glow.actnorm import ActNorm
from medanon.models.glow.config import GlowConfig
from medanon.models.glow.coupling import AffineCoupling
from medanon.models.glow.invconv import InvConv1x1LU
from medanon.models.glow.squeeze import Split, TopPrior, squeeze, unsqueeze

LOG_2PI = math.log(2.0 * math.pi)


class FlowStep(nn.Module):
    """One step of flow: actnorm, invertible 1x1 convolution, affine coupling."""

    def __init__(self, channels: int, hidden: int, *, generator: torch.Generator | None = None):
        super().__init__()
        self.actnorm = ActNorm(channels)
        self.invconv = InvConv1x1LU(channels, generator=generator)
        self.coupling = AffineCoupling(channels, hidden)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, ld1 = self.actnorm(x)
        x, ld2 = self.invconv(x)
        x, ld3 = self.coupling(x)
        return x, ld1 + ld2 + ld3

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        return self.actnorm.inverse(self.invconv.inverse(self.coupling.inverse(y)))


class Glow(nn.Module):
    """GLOW (Kingma & Dhariwal 2018) on flow inputs ``y`` in [-0.5, 0.5] (see :mod:`.dequantize`)."""

    def __init__(self, cfg: GlowConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(cfg.seed)
        c, r = cfg.channels, cfg.resolution
        self.steps = nn.ModuleList()
        self.splits = nn.ModuleList()
        self.shapes: list[tuple[int, int, int]] = []      # shape of each level's latent, in flat order
        with torch.random.fork_rng(devices=[]):           # coupling conv init: seeded, global RNG untouched
            torch.manual_seed(cfg.seed)
            for level in range(cfg.levels):
                c, r = c * 4, r // 2
                width = cfg.hidden_at(level)
                self.steps.append(nn.ModuleList(FlowStep(c, width, generator=gen) for _ in range(cfg.depth)))
                if level < cfg.levels - 1:
                    self.splits.append(Split(c))
                    self.shapes.append((c - c // 2, r, r))
                    c = c // 2
        self.shapes.append((c, r, r))
        self.top = TopPrior((c, r, r), learn=cfg.learn_top)

    @property
    def dims(self) -> int:
        return self.cfg.dims

    # ------------------------------------------------------------------------------------------------ encode

    def encode_with_logdet(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """y (N, C, H, W) -> eps (N, D) and log |det d eps / d y| (N,)."""
        self._check_input(y)
        h, logdet, parts = y, y.new_zeros(y.shape[0]), []
        for level, steps in enumerate(self.steps):
            h = squeeze(h)
            for step in steps:
                h, ld = step(h)
                logdet = logdet + ld
            if level < len(self.splits):
                h, eps, ld = self.splits[level](h)
                parts.append(eps.flatten(1))
                logdet = logdet + ld
        eps, ld = self.top(h)
        parts.append(eps.flatten(1))
        return torch.cat(parts, dim=1), logdet + ld

    def encode(self, y: torch.Tensor) -> torch.Tensor:
        """The standardised latent ``eps`` (N, D) of flow inputs ``y``."""
        return self.encode_with_logdet(y)[0]

    def log_prob(self, y: torch.Tensor) -> torch.Tensor:
        """Exact log density of ``y`` in nats, per image (N,)."""
        eps, logdet = self.encode_with_logdet(y)
        return -0.5 * (eps.square() + LOG_2PI).sum(1) + logdet

    # ------------------------------------------------------------------------------------------------ decode

    def decode(self, eps: torch.Tensor) -> torch.Tensor:
        """eps (N, D) -> y (N, C, H, W); the exact inverse of :meth:`encode`."""
        if eps.ndim != 2 or eps.shape[1] != self.dims:
            raise ValueError(f"latent must be (N, {self.dims}), got {tuple(eps.shape)}")
        sizes = [math.prod(s) for s in self.shapes]
        parts = [p.reshape(-1, *s) for p, s in zip(eps.split(sizes, dim=1), self.shapes, strict=True)]
        h = self.top.inverse(parts[-1])
        for level in reversed(range(len(self.steps))):
            if level < len(self.splits):
                h = self.splits[level].inverse(h, parts[level])
            for step in reversed(self.steps[level]):
                h = step.inverse(h)
            h = unsqueeze(h)
        return h

    def sample(self, n: int, *, temperature: float = 0.7, generator: torch.Generator | None = None) -> torch.Tensor:
        """``n`` flow inputs drawn from the model at ``temperature`` (std of eps)."""
        dev = self.top.mean.device
        eps = torch.randn(n, self.dims, generator=generator, device=dev) * temperature
        return self.decode(eps)

    def _check_input(self, y: torch.Tensor) -> None:
        c, r = self.cfg.channels, self.cfg.resolution
        if y.ndim != 4 or tuple(y.shape[1:]) != (c, r, r):
            raise ValueError(f"this flow takes (N, {c}, {r}, {r}) inputs, got {tuple(y.shape)}")
