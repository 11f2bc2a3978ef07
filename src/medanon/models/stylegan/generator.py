"""The StyleGAN2 generator: ``mapping(z) -> ws`` and ``synthesis(ws) -> img``.

The attributes other modules rely on (encoders, latent codecs, k-SALSA averaging)::

    G.mapping(z, c=None, truncation_psi=1)   z (N, z_dim) -> ws (N, num_ws, w_dim)
    G.synthesis(ws, noise_mode="const")      ws -> images (N, img_channels, R, R) in about [-1, 1]
    G.z_dim, G.w_dim, G.num_ws, G.img_channels, G.img_resolution
    G.map_rows, G.num_rows                   rows a spatial latent map adds (0 without one), num_ws + map_rows
    G.w_avg                                  (w_dim,) mean w over training, the truncation centre

Example:
    >>> G = Generator(z_dim=32, w_dim=32, img_resolution=16, img_channels=1, channel_base=256, channel_max=32)
    >>> ws = G.mapping(torch.randn(2, G.z_dim))
    >>> ws.shape, G.synthesis(ws, noise_mode="const").shape
    (torch.Size([2, 6, 32]), torch.Size([2, 1, 16, 16]))
"""

from __future__ import annotations

import torch
from torch import nn

from medanon.models.stylegan.config import StyleGANConfig
from medanon.models.stylegan.mapping import MappingNetwork
from medanon.models.stylegan.synthesis import SynthesisNetwork


class Generator(nn.Module):
    """Mapping network + synthesis network; ``forward(z)`` chains them."""

    def __init__(self,
        z_dim: int,                             # input latent (z) dimensionality
        w_dim: int,                             # intermediate latent (w) dimensionality
        img_resolution: int,                    # output side in pixels (power of two)
        img_channels: int,                      # output image channels (1 or 3)
        mapping_layers: int = 2,                # fully connected layers in the mapping network
        mapping_lr_mult: float = 0.01,          # learning-rate multiplier of the mapping network
        channel_base: int = 16384,              # feature maps at resolution r: min(channel_base // r, channel_max)
        channel_max: int = 512,                 # most feature maps in any layer
        map_resolution: int = 0,                # spatial latent map side (0 = none; models/stylegan/synthesis.py)
        map_channels: int = 0,                  # its channels
    ):
        super().__init__()
        self.z_dim = z_dim
        self.w_dim = w_dim
        self.img_resolution = img_resolution
        self.img_channels = img_channels
        self.synthesis = SynthesisNetwork(w_dim, img_resolution, img_channels, channel_base, channel_max,
                                          map_resolution, map_channels)
        self.num_ws = self.synthesis.num_ws
        self.map_rows = self.synthesis.map_rows     # latent rows of the spatial map (0 without one)
        self.num_rows = self.synthesis.num_rows     # num_ws + map_rows
        self.mapping = MappingNetwork(z_dim, w_dim, self.num_ws, mapping_layers, mapping_lr_mult)

    @classmethod
    def from_config(cls, cfg: StyleGANConfig) -> Generator:
        return cls(cfg.z_dim, cfg.w_dim, cfg.resolution, cfg.channels, cfg.mapping_layers, cfg.mapping_lr_mult,
                   cfg.channel_base, cfg.channel_max, cfg.map_resolution, cfg.map_channels)

    @property
    def w_avg(self) -> torch.Tensor:
        """The tracked mean of w (w_dim,), towards which truncation pulls."""
        return self.mapping.w_avg

    def forward(self, z: torch.Tensor, c: torch.Tensor | None = None, truncation_psi: float = 1.0,
                noise_mode: str = "random") -> torch.Tensor:
        return self.synthesis(self.mapping(z, c, truncation_psi), noise_mode=noise_mode)
