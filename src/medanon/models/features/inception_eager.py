"""The FID Inception-v3 as plain PyTorch modules, built from the TorchScript file's own weights.

The TorchScript file (:mod:`medanon.models.features.inception`) runs every convolution as three operations
(convolution, batch norm, ReLU) and makes each branch of a mixed block contiguous before concatenating: with
channels-last inputs, oneDNN's preferred layout on the CPU, that costs a layout copy per branch and an average
pool on the slow layout (10x slower for 768 × 17 × 17 maps on the development machine). :func:`eager_body` walks
the file's module tree once and builds the same network from its tensors:

- each ``Conv2dLayer`` (convolution without bias, batch norm with γ = 1 and ε = 0.001, ReLU) becomes one
  convolution with the batch norm folded into its weights and bias, then an in-place ReLU;
- pools keep their kernel, stride, padding and ``count_include_pad``;
- mixed blocks concatenate their branches in the order the file's code does (``InceptionE`` has two split
  towers); no layout is forced, so channels-last stays channels-last.

Folding changes float rounding only; ``tests/test_features.py`` compares the result with the file's own
``forward`` (pool features within 1e-4). A module tree this code does not know is an error, not a guess.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

BN_EPS = 1e-3                   # the file's batch norms: F.batch_norm(x, mean, var, None, beta, False, 0.1, 0.001)

# the order in which each mixed block's code concatenates its branches
_BRANCHES = {"InceptionA": ("conv", "tower", "tower_1", "tower_2"),
             "InceptionB": ("conv", "tower", "pool"),
             "InceptionC": ("conv", "tower", "tower_1", "tower_2"),
             "InceptionD": ("tower", "tower_1", "pool")}
SPLIT_PARTS = ("conv", "tower_conv", "tower_mixed_conv", "tower_mixed_conv_1", "tower_1_conv", "tower_1_conv_1",
               "tower_1_mixed_conv", "tower_1_mixed_conv_1", "tower_2_pool", "tower_2_conv")


class FoldedConv(nn.Conv2d):
    """Convolution with the batch norm folded in, then ReLU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu_(super().forward(x))


class Branches(nn.Module):
    """Parallel branches concatenated along channels, in registration order."""

    def __init__(self, branches: OrderedDict[str, nn.Module]):
        super().__init__()
        for name, m in branches.items():
            self.add_module(name, m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([m(x) for m in self.children()], 1)


class SplitBlock(Branches):
    """``InceptionE``: two towers whose last step splits into a 1×3 and a 3×1 convolution."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.tower_conv(x)
        b = self.tower_1_conv_1(self.tower_1_conv(x))
        return torch.cat([self.conv(x), self.tower_mixed_conv(a), self.tower_mixed_conv_1(a),
                          self.tower_1_mixed_conv(b), self.tower_1_mixed_conv_1(b),
                          self.tower_2_conv(self.tower_2_pool(x))], 1)


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def folded_conv(layer: torch.nn.Module) -> FoldedConv:
    """One ``Conv2dLayer`` of the file as a :class:`FoldedConv` (float32 weights, on the CPU)."""
    w = layer.weight.detach().float().cpu()
    scale = torch.rsqrt(layer.var.detach().float().cpu() + BN_EPS)
    out_c, in_c, kh, kw = w.shape
    conv = FoldedConv(in_c, out_c, (kh, kw), stride=_pair(layer.stride), padding=_pair(layer.padding), bias=True)
    with torch.no_grad():
        conv.weight.copy_(w * scale[:, None, None, None])
        conv.bias.copy_(layer.beta.detach().float().cpu() - layer.mean.detach().float().cpu() * scale)
    return conv


def convert(m: torch.nn.Module) -> nn.Module:
    """The eager twin of one module of the file's tree."""
    kind = m.original_name
    if kind == "Conv2dLayer":
        return folded_conv(m)
    if kind == "MaxPool2d":
        return nn.MaxPool2d(m.kernel_size, m.stride, m.padding, m.dilation, ceil_mode=m.ceil_mode)
    if kind == "AvgPool2d":
        return nn.AvgPool2d(m.kernel_size, m.stride, m.padding, ceil_mode=m.ceil_mode,
                            count_include_pad=m.count_include_pad)
    children = dict(m.named_children())
    if kind == "Sequential":
        return nn.Sequential(OrderedDict((name, convert(c)) for name, c in children.items()))
    if kind in _BRANCHES and set(children) == set(_BRANCHES[kind]):
        return Branches(OrderedDict((name, convert(children[name])) for name in _BRANCHES[kind]))
    if kind == "InceptionE" and set(children) == set(SPLIT_PARTS):
        return SplitBlock(OrderedDict((name, convert(c)) for name, c in children.items()))
    raise ValueError(f"the Inception file holds a module medanon does not know how to run eagerly: {kind} "
                     f"with children {sorted(children)}")


def eager_body(layers: torch.nn.Module) -> nn.Sequential:
    """The file's ``net.layers`` as an eager ``nn.Sequential`` with the same child names (``conv`` ... ``pool2``)."""
    return convert(layers)
