"""Codecs: image <-> latent maps that the anonymisers work through (docs/design.md §2).

Every codec follows :class:`medanon.codecs.base.LatentCodec`: ``encode(images) -> latents``
and ``decode(latents) -> images``, images being (N, C, H, W) float tensors in [-1, 1].
"""

from medanon.codecs.base import LatentCodec

__all__ = ["LatentCodec"]
