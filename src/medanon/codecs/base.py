"""The codec protocol shared by StyleGAN inversion encoders, flows and any future latent model."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class LatentCodec(Protocol):
    """An image <-> latent map.

    ``encode`` takes images (N, C, H, W) in [-1, 1] and returns latents whose shape the codec
    documents (StyleGAN: ``ws`` (N, num_ws, w_dim); flows: ``eps``). ``decode`` inverts it as well as
    the codec can (exactly for flows, approximately for GAN inversion). Both follow the device of
    their inputs' module and never change model weights. ``describe`` returns what a release
    manifest records about the codec (name, latent space, checkpoint sha256s).
    """

    name: str                                   # e.g. "restyle", "cotrained", "glow"
    latent_space: str                           # "ws" | "eps" | ...

    def encode(self, images: torch.Tensor) -> torch.Tensor: ...

    def decode(self, latents: torch.Tensor) -> torch.Tensor: ...

    def describe(self) -> dict[str, Any]: ...
