"""The synthesis network: ws (N, num_ws, w_dim) -> images (N, C, H, W), StyleGAN2 skip architecture.

A learned 4x4 constant is refined block by block up to the output resolution; every block has
two modulated 3x3 convolutions (the first upsamples) with per-pixel noise, and a 1x1 ``toRGB``
whose output is added to the upsampled image of the blocks before it.

**Spatial latent map** (optional, ``map_resolution``/``map_channels``; 0 = StyleGAN2 as published). A
W+ latent of ``num_ws`` styles cannot place a patient's 1–2 px vessel tree: a codec trained to memorise
32 images with it reached a vessel AUROC of only 0.71 (docs/experiments.md). With a map, the latent gets
``map_rows`` more rows of ``w_dim`` values that hold a (map_channels, map_resolution, map_resolution)
feature map; a 1×1 convolution (``map_in``, zero at initialisation, so an untrained map changes nothing)
lifts it to the block's feature maps, which it is added to before that block's ``toRGB``. This is the
idea of the Feature-Style encoder (Yao et al., ECCV 2022: styles plus a mid-resolution feature map),
small enough to stay a bottleneck (the shipped 32 x 32 x 2 = 2,048 values against 12,288 pixel values at 64 px
RGB; docs/backbone.md).
Latents of ``num_ws`` rows (the mapping network's) render with a zero map.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from medanon.models.stylegan.config import check_map
from medanon.models.stylegan.layers import Conv2d, FullyConnected, lrelu, modulated_conv2d, upsample2x

NOISE_MODES = ("random", "const", "none")


class SynthesisLayer(nn.Module):
    """Modulated 3x3 convolution with demodulation, per-pixel noise, bias and leaky ReLU."""

    def __init__(self,
        in_channels: int,                       # input feature maps
        out_channels: int,                      # output feature maps
        w_dim: int,                             # intermediate latent (w) dimensionality
        resolution: int,                        # output side in pixels
        up: bool = False,                       # upsample 2x first
        kernel_size: int = 3,                   # convolution kernel side
    ):
        super().__init__()
        self.up = up
        self.resolution = resolution
        self.affine = FullyConnected(w_dim, in_channels, bias_init=1.0)
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size, kernel_size))
        self.weight_gain = 1.0 / math.sqrt(in_channels * kernel_size * kernel_size)
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.noise_strength = nn.Parameter(torch.zeros([]))
        self.register_buffer("noise_const", torch.randn(resolution, resolution))

    def forward(self, x: torch.Tensor, w: torch.Tensor, noise_mode: str = "random") -> torch.Tensor:
        add = self.bias[None, :, None, None]
        if noise_mode == "const":                 # (1, C, R, R): folded into the convolution's output scaling
            add = (add + self.noise_const * self.noise_strength).contiguous(memory_format=torch.channels_last)
        x = modulated_conv2d(x, self.weight * self.weight_gain, self.affine(w), up=self.up, add=add)
        if noise_mode == "random":
            noise = torch.randn(x.shape[0], 1, self.resolution, self.resolution, device=x.device, dtype=x.dtype)
            x = x + noise * self.noise_strength
        return lrelu(x)


class ToRGBLayer(nn.Module):
    """Modulated 1x1 convolution (no demodulation) from feature maps to image channels."""

    def __init__(self,
        in_channels: int,                       # input feature maps
        img_channels: int,                      # output image channels
        w_dim: int,                             # intermediate latent (w) dimensionality
    ):
        super().__init__()
        self.affine = FullyConnected(w_dim, in_channels, bias_init=1.0)
        self.weight = nn.Parameter(torch.randn(img_channels, in_channels, 1, 1))
        self.bias = nn.Parameter(torch.zeros(img_channels))
        self.weight_gain = 1.0 / math.sqrt(in_channels)

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        styles = self.affine(w) * self.weight_gain
        return modulated_conv2d(x, self.weight, styles, demodulate=False, add=self.bias[None, :, None, None])


class SynthesisBlock(nn.Module):
    """One resolution: (const | upsampling conv) -> conv -> toRGB added to the upsampled image."""

    def __init__(self,
        in_channels: int,                       # input feature maps; 0 for the first block (learned constant)
        out_channels: int,                      # feature maps of this block
        w_dim: int,                             # intermediate latent (w) dimensionality
        resolution: int,                        # side of this block's output
        img_channels: int,                      # output image channels
    ):
        super().__init__()
        self.resolution = resolution
        if in_channels == 0:
            self.const = nn.Parameter(torch.randn(out_channels, resolution, resolution))
            self.conv0 = None
        else:
            self.const = None
            self.conv0 = SynthesisLayer(in_channels, out_channels, w_dim, resolution, up=True)
        self.conv1 = SynthesisLayer(out_channels, out_channels, w_dim, resolution)
        self.torgb = ToRGBLayer(out_channels, img_channels, w_dim)
        self.num_conv = 1 if self.conv0 is None else 2

    def forward(self, x: torch.Tensor | None, img: torch.Tensor | None, ws: torch.Tensor,
                noise_mode: str, residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``ws`` holds this block's ``num_conv + 1`` styles (the last one is for toRGB); ``residual`` (N, C, R, R),
        if given, is added to the block's features before toRGB (the spatial latent map)."""
        if self.conv0 is None:
            x = self.const[None].expand(ws.shape[0], -1, -1, -1)
            x = self.conv1(x, ws[:, 0], noise_mode)
        else:
            x = self.conv0(x, ws[:, 0], noise_mode)
            x = self.conv1(x, ws[:, 1], noise_mode)
        if residual is not None:
            x = x + residual
        y = self.torgb(x, ws[:, self.num_conv])
        img = y if img is None else upsample2x(img) + y
        return x, img


class SynthesisNetwork(nn.Module):
    """ws (N, num_ws, w_dim) -> images (N, img_channels, img_resolution, img_resolution) in about [-1, 1].

    ``num_ws = 2 * log2(img_resolution) - 2``: one style per convolution plus one for the last toRGB
    (each block's toRGB shares its style with the next block's first convolution, as in StyleGAN2).
    """

    def __init__(self,
        w_dim: int,                             # intermediate latent (w) dimensionality
        img_resolution: int,                    # output side in pixels (power of two)
        img_channels: int,                      # output image channels
        channel_base: int = 16384,              # feature maps at resolution r: min(channel_base // r, channel_max)
        channel_max: int = 512,                 # most feature maps in any layer
        map_resolution: int = 0,                # side of the spatial latent map (0 = none; see the module docstring)
        map_channels: int = 0,                  # its channels
    ):
        super().__init__()
        check_map(map_resolution, map_channels, resolution=img_resolution, w_dim=w_dim)
        self.w_dim = w_dim
        self.img_resolution = img_resolution
        self.img_channels = img_channels
        self.block_resolutions = [2 ** i for i in range(2, int(math.log2(img_resolution)) + 1)]
        channels = {r: min(channel_base // r, channel_max) for r in self.block_resolutions}
        self.blocks = nn.ModuleList()
        self.num_ws = 0
        for r in self.block_resolutions:
            block = SynthesisBlock(channels[r // 2] if r > 4 else 0, channels[r], w_dim, r, img_channels)
            self.blocks.append(block)
            self.num_ws += block.num_conv
        self.num_ws += 1
        self.map_resolution, self.map_channels = map_resolution, map_channels
        self.map_rows = map_channels * map_resolution ** 2 // w_dim if map_resolution else 0
        self.num_rows = self.num_ws + self.map_rows   # rows of a full latent: styles, then the map
        self.map_in = None
        if map_resolution:
            self.map_in = Conv2d(map_channels, channels[map_resolution], 1, activation=False)
            nn.init.zeros_(self.map_in.weight)

    def split(self, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Latents (N, num_rows, w_dim) -> styles (N, num_ws, w_dim) and the map (N, C, R, R) (None without one)."""
        if not self.map_rows or latents.shape[1] == self.num_ws:
            return latents, None
        m = latents[:, self.num_ws:].reshape(-1, self.map_channels, self.map_resolution, self.map_resolution)
        return latents[:, :self.num_ws], m

    def forward(self, ws: torch.Tensor, noise_mode: str = "random") -> torch.Tensor:
        """Render ``ws`` (N, num_ws, w_dim), or with a map (N, num_rows, w_dim); ``noise_mode`` is 'random' (fresh
        noise), 'const' (fixed per layer) or 'none'."""
        if noise_mode not in NOISE_MODES:
            raise ValueError(f"noise_mode={noise_mode!r} must be one of {NOISE_MODES}")
        if ws.ndim != 3 or ws.shape[2] != self.w_dim or ws.shape[1] not in {self.num_ws, self.num_rows}:
            rows = f"{self.num_ws}" + (f" or {self.num_rows}" if self.map_rows else "")
            raise ValueError(f"ws must have shape (N, {rows}, {self.w_dim}), got {tuple(ws.shape)}")
        ws, fmap = self.split(ws)
        x = img = None
        i = 0
        for block in self.blocks:
            res = None
            if fmap is not None and block.resolution == self.map_resolution:
                res = self.map_in(fmap.to(memory_format=torch.channels_last))
            x, img = block(x, img, ws[:, i:i + block.num_conv + 1], noise_mode, res)
            i += block.num_conv
        return img.contiguous()                 # the blocks run channels-last (layers.py); callers get NCHW
