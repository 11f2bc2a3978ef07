"""``GlowConfig``: architecture and training settings of a GLOW flow, in one dataclass.

The YAML files in ``configs/glow/`` hold named presets (``tiny32`` for tests, ``cpu64`` for a CPU
workstation, ``paper512`` for the DP-GLOW paper's network on a GPU). A checkpoint stores the config
as a plain dict, so a flow is always rebuilt from its checkpoint alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from medanon.errors import ConfigError


@dataclass
class GlowConfig:
    # architecture (Kingma & Dhariwal 2018)
    resolution: int = 64                        # image side in pixels (power of two)
    channels: int = 1                           # image channels: 1 (X-ray) or 3 (fundus)
    levels: int = 3                             # multi-scale levels L (each squeezes 2x; all but the last split)
    depth: int = 8                              # flow steps K per level (actnorm, 1x1 conv, affine coupling)
    hidden: tuple[int, ...] = (64,)             # coupling-network feature maps: one value, or one per level
    learn_top: bool = True                      # learn the top-level prior's mean and scale (else N(0, 1))
    # optimisation
    batch: int = 16                             # images per step
    lr: float = 1e-3                            # Adam learning rate after warm-up
    warmup_steps: int = 200                     # linear learning-rate warm-up
    steps: int = 4000                           # optimisation steps in total
    grad_clip: float = 50.0                     # clip the gradient norm to this (0 = off)
    checkpoint_every: int = 200                 # steps between checkpoints (and validation bits/dim)
    seed: int = 0                               # seeds weights, batch order and dequantisation noise

    def __post_init__(self) -> None:
        if isinstance(self.hidden, int):
            self.hidden = (self.hidden,)
        self.hidden = tuple(self.hidden)

    def validate(self) -> None:
        r = self.resolution
        if r < 4 or r > 1024 or r & (r - 1):
            raise ConfigError(f"resolution={r} must be a power of two between 4 and 1024")
        if self.channels not in (1, 3):
            raise ConfigError(f"channels={self.channels} must be 1 (grayscale) or 3 (RGB)")
        if self.levels < 1 or r >> self.levels < 1:
            raise ConfigError(f"levels={self.levels} squeezes a {r}-pixel image below one pixel",
                              fix=f"use 1 <= levels <= {r.bit_length() - 1}")
        if len(self.hidden) not in (1, self.levels) or min(self.hidden, default=0) < 1:
            raise ConfigError(f"hidden={list(self.hidden)} must be one positive width or one per level "
                              f"({self.levels})")
        for name in ("depth", "batch", "steps", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be at least 1")
        if self.lr <= 0 or self.warmup_steps < 0 or self.grad_clip < 0:
            raise ConfigError("lr must be positive, warmup_steps and grad_clip non-negative")

    def hidden_at(self, level: int) -> int:
        """Coupling-network width at ``level`` (0-based)."""
        return self.hidden[level] if len(self.hidden) > 1 else self.hidden[0]

    @property
    def dims(self) -> int:
        """Elements of an image, and of its latent: D = C * H * W."""
        return self.channels * self.resolution * self.resolution
