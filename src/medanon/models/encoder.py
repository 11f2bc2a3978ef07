"""The inversion encoder: images -> a latent offset ``(N, num_ws, w_dim)`` in a StyleGAN's W+ space.

One network serves both inversion schemes of the backbone (docs/design.md §2, codecs):

* **ReStyle** (Alaluf et al. 2021, the k-SALSA choice): ``iterative=True``; the input is the
  image concatenated with the generator's current reconstruction of it (``2 C`` channels) and the
  output is a residual update of the current ``ws``.
* **GMIA co-training** (Li et al. 2025, §2.1): ``iterative=False``; the input is the image alone and
  the output is the offset of ``ws`` from the generator's ``w_avg``.

Architecture ("pSp-lite"): a residual trunk that mirrors the StyleGAN2 discriminator (a 1×1
``fromIMG``, then per resolution two 3×3 convolutions and a 1×1 skip, both downsampling with the
[1, 3, 3, 1] filter; the GMIA paper's encoder is this shape) down to 4×4, and a feature-pyramid head
as in pSp: the coarse styles (layers at 4–8 px) are read from the 4×4 features, the middle styles
(16–32 px) from the 8×8 features and the fine styles (64 px and up) from the 16×16 features, each
pooled to 4×4 and mapped by two fully connected layers. The last layer starts at a tenth of its
usual scale so that an untrained encoder predicts small offsets (a ReStyle encoder starts at w_avg).

For a generator with a spatial latent map (``map_resolution``, ``map_channels``; see
:mod:`medanon.models.stylegan.synthesis`) a convolutional head reads the trunk's features at the map's
resolution (a 3×3 and a 1×1 convolution) and the map is appended to the styles as ``map_rows`` more rows
of ``w_dim`` values: the output is then (N, num_ws + map_rows, w_dim), the generator's latent layout.

Example:
    >>> E = Encoder(img_resolution=32, img_channels=3, num_ws=8, w_dim=64, iterative=True,
    ...             channel_base=512, channel_max=64, head_dim=64)
    >>> E(torch.zeros(2, 6, 32, 32)).shape
    torch.Size([2, 8, 64])
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from medanon.models.stylegan.config import check_map
from medanon.models.stylegan.discriminator import DiscriminatorBlock as ResidualDownBlock
from medanon.models.stylegan.layers import Conv2d, FullyConnected

# Upper bounds of the three style groups, by the resolution of the synthesis layer a style drives.
COARSE_MAX, MIDDLE_MAX = 8, 32
# Which trunk level feeds each group.
GROUP_LEVELS = {"coarse": 4, "middle": 8, "fine": 16}
HEAD_POOL = 4                                   # every level is pooled to HEAD_POOL × HEAD_POOL
OUT_INIT_SCALE = 0.1                            # initial scale of the last layer of every head


def style_resolutions(num_ws: int) -> list[int]:
    """Resolution of the synthesis layer that each of the ``num_ws`` styles drives.

    In the StyleGAN2 synthesis network style 0 drives the 4×4 convolution, styles ``2k - 1`` and
    ``2k`` the two convolutions at ``2^(k+2)`` px (the first also the previous block's toRGB), and
    the last style the final toRGB.
    """
    res = [4] + [2 ** (2 + (i + 1) // 2) for i in range(1, num_ws - 1)]
    return [*res, res[-1]] if num_ws > 1 else res


def style_groups(num_ws: int) -> dict[str, list[int]]:
    """Style indices of the coarse (≤ 8 px), middle (16–32 px) and fine (≥ 64 px) groups; empty ones dropped."""
    groups: dict[str, list[int]] = {"coarse": [], "middle": [], "fine": []}
    for i, r in enumerate(style_resolutions(num_ws)):
        groups["coarse" if r <= COARSE_MAX else "middle" if r <= MIDDLE_MAX else "fine"].append(i)
    return {k: v for k, v in groups.items() if v}


class StyleHead(nn.Module):
    """Feature map (N, C, h, w) -> ``count`` styles (N, count, w_dim): pool to 4×4, two FC layers."""

    def __init__(self,
        in_channels: int,                       # feature maps of the trunk level read
        count: int,                             # styles predicted
        w_dim: int,                             # style dimensionality
        head_dim: int,                          # hidden width
    ):
        super().__init__()
        self.count = count
        self.w_dim = w_dim
        self.fc = FullyConnected(in_channels * HEAD_POOL * HEAD_POOL, head_dim, activation=True)
        self.out = FullyConnected(head_dim, count * w_dim)
        with torch.no_grad():
            self.out.weight.mul_(OUT_INIT_SCALE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != HEAD_POOL:
            x = F.adaptive_avg_pool2d(x, HEAD_POOL)
        return self.out(self.fc(x.flatten(1))).view(-1, self.count, self.w_dim)


class Encoder(nn.Module):
    """Residual pyramid encoder: images (N, in_channels, R, R) -> latent offsets (N, num_ws [+ map_rows], w_dim)."""

    def __init__(self,
        img_resolution: int,                    # input side in pixels (power of two, >= 8)
        img_channels: int,                      # channels of the images to invert (1 or 3)
        num_ws: int,                            # styles of the generator (G.num_ws)
        w_dim: int,                             # style dimensionality (G.w_dim)
        iterative: bool = True,                 # ReStyle: input is concat(image, reconstruction) (2 C channels)
        channel_base: int = 4096,               # feature maps at resolution r: min(channel_base // r, channel_max)
        channel_max: int = 256,                 # most feature maps in any layer
        head_dim: int = 256,                    # hidden width of each style head
        map_resolution: int = 0,                # the generator's spatial latent map side (0 = none)
        map_channels: int = 0,                  # and its channels
    ):
        super().__init__()
        if img_resolution < 8 or img_resolution & (img_resolution - 1):
            raise ValueError(f"img_resolution={img_resolution} must be a power of two >= 8")
        if img_channels not in (1, 3):
            raise ValueError(f"img_channels={img_channels} must be 1 or 3")
        self.kwargs = {"img_resolution": img_resolution, "img_channels": img_channels, "num_ws": num_ws,
                       "w_dim": w_dim, "iterative": bool(iterative), "channel_base": channel_base,
                       "channel_max": channel_max, "head_dim": head_dim}   # rebuilds this encoder (checkpoints)
        if map_resolution:
            self.kwargs.update(map_resolution=map_resolution, map_channels=map_channels)
        self.img_resolution = img_resolution
        self.img_channels = img_channels
        self.num_ws = num_ws
        self.w_dim = w_dim
        self.iterative = bool(iterative)
        self.in_channels = img_channels * (2 if iterative else 1)
        levels = [2 ** i for i in range(int(math.log2(img_resolution)), 1, -1)]   # R, R/2, ..., 4
        ch = {r: min(channel_base // r, channel_max) for r in levels}
        self.from_img = Conv2d(self.in_channels, ch[img_resolution], 1)
        self.blocks = nn.ModuleList([ResidualDownBlock(ch[r], ch[r // 2]) for r in levels[:-1]])
        self.block_out_res = levels[1:]
        self.groups = style_groups(num_ws)
        self.heads = nn.ModuleDict()
        for name, idx in self.groups.items():
            level = min(GROUP_LEVELS[name], img_resolution)
            self.heads[name] = StyleHead(ch[level], len(idx), w_dim, head_dim)
        self.head_levels = {name: min(GROUP_LEVELS[name], img_resolution) for name in self.groups}
        order = torch.cat([torch.tensor(idx) for idx in self.groups.values()])
        self.register_buffer("_unpermute", torch.argsort(order), persistent=False)
        check_map(map_resolution, map_channels, resolution=img_resolution, w_dim=w_dim)
        self.map_resolution, self.map_channels = map_resolution, map_channels
        self.map_rows = map_channels * map_resolution ** 2 // w_dim if map_resolution else 0
        self.map_head = None
        if map_resolution:
            c = ch[map_resolution]
            self.map_head = nn.Sequential(Conv2d(c, c, 3), Conv2d(c, map_channels, 1, activation=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1:] != (self.in_channels, self.img_resolution, self.img_resolution):
            what = "concat(image, reconstruction)" if self.iterative else "images"
            raise ValueError(f"encoder expects {what} of shape (N, {self.in_channels}, {self.img_resolution}, "
                             f"{self.img_resolution}), got {tuple(x.shape)}")
        feats: dict[int, torch.Tensor] = {}
        h = self.from_img(x.contiguous(memory_format=torch.channels_last))   # the trunk runs channels-last (layers.py)
        feats[self.img_resolution] = h
        for block, r in zip(self.blocks, self.block_out_res, strict=True):
            h = block(h)
            feats[r] = h
        styles = torch.cat([self.heads[name](feats[self.head_levels[name]]) for name in self.groups], dim=1)
        styles = styles[:, self._unpermute]
        if self.map_head is None:
            return styles
        fmap = self.map_head(feats[self.map_resolution]).contiguous()     # (N, map_channels, R, R), NCHW order
        return torch.cat([styles, fmap.reshape(x.shape[0], self.map_rows, self.w_dim)], dim=1)
