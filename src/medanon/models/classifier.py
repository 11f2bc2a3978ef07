"""A small ResNet in plain torch: the downstream classifier, the attribute attacker and the identity backbone.

The layout follows He et al. (2016): a stem, stages of basic residual blocks (two 3x3 convolutions
with batch norm and a projection shortcut where the shape changes), global average pooling and a
linear head. ``ResNetConfig.preset("resnet18")`` gives the ResNet-18 layout (widths 64-512, two
blocks per stage, 7x7 stem with max pooling); the default is a narrower net sized for 32-64 px
images on a CPU. Images are ``(N, C, H, W)`` in ``[-1, 1]``, any side that survives the strides.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from medanon.errors import ConfigError

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"widths": (8, 16, 32, 64), "blocks": (1, 1, 1, 1), "stem": "3x3"},
    "small": {"widths": (16, 32, 64, 128), "blocks": (1, 1, 1, 1), "stem": "3x3"},
    "resnet10": {"widths": (32, 64, 128, 256), "blocks": (1, 1, 1, 1), "stem": "3x3"},
    "resnet18": {"widths": (64, 128, 256, 512), "blocks": (2, 2, 2, 2), "stem": "7x7"},
}


@dataclass
class ResNetConfig:
    in_channels: int = 3                        # image channels: 1 (X-ray) or 3 (fundus)
    num_classes: int = 5                        # logits of the linear head (0 = features only, no head)
    widths: tuple[int, ...] = field(default=(16, 32, 64, 128))  # feature maps of each stage
    blocks: tuple[int, ...] = field(default=(1, 1, 1, 1))       # basic blocks in each stage
    stem: str = "3x3"                           # "3x3": stride-2 3x3 conv (small images); "7x7": ResNet stem + max pool
    dropout: float = 0.0                        # dropout before the head

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ResNetConfig:
        if name not in PRESETS:
            raise ConfigError(f"unknown classifier architecture {name!r}", fix=f"use one of {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def validate(self) -> None:
        if self.in_channels not in (1, 3):
            raise ConfigError(f"in_channels={self.in_channels} must be 1 (X-ray) or 3 (fundus)")
        if self.num_classes < 0:
            raise ConfigError(f"num_classes={self.num_classes} must be >= 0")
        if not self.widths or len(self.widths) != len(self.blocks) or min(self.widths) < 1 or min(self.blocks) < 1:
            raise ConfigError(f"widths={self.widths} and blocks={self.blocks} must be positive and of equal length")
        if self.stem not in ("3x3", "7x7"):
            raise ConfigError(f"stem={self.stem!r} must be '3x3' or '7x7'")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout={self.dropout} must be in [0, 1)")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["widths"], d["blocks"] = list(self.widths), list(self.blocks)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResNetConfig:
        return cls(**{**d, "widths": tuple(d["widths"]), "blocks": tuple(d["blocks"])})


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (projected when stride or width change)."""

    def __init__(self,
        cin: int,                               # input feature maps
        cout: int,                              # output feature maps
        stride: int = 1,                        # stride of the first convolution
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.short is None else self.short(x)))


class ResNet(nn.Module):
    """``features(x) -> (N, widths[-1])`` pooled features; ``forward(x) -> (N, num_classes)`` logits."""

    def __init__(self, cfg: ResNetConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        w0 = cfg.widths[0]
        if cfg.stem == "7x7":
            self.stem = nn.Sequential(nn.Conv2d(cfg.in_channels, w0, 7, 2, 3, bias=False), nn.BatchNorm2d(w0),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        else:
            self.stem = nn.Sequential(nn.Conv2d(cfg.in_channels, w0, 3, 2, 1, bias=False), nn.BatchNorm2d(w0),
                                      nn.ReLU(inplace=True))
        stages, cin = [], w0
        for i, (w, n) in enumerate(zip(cfg.widths, cfg.blocks, strict=True)):
            blocks = [BasicBlock(cin, w, stride=1 if i == 0 else 2)]
            blocks += [BasicBlock(w, w) for _ in range(n - 1)]
            stages.append(nn.Sequential(*blocks))
            cin = w
        self.stages = nn.Sequential(*stages)
        self.dropout = nn.Dropout(cfg.dropout) if cfg.dropout > 0 else nn.Identity()
        self.head = nn.Linear(cin, cfg.num_classes) if cfg.num_classes > 0 else None
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        for m in self.modules():                # zero-init the last BN of each block: blocks start as identity
            if isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)

    @property
    def feature_dim(self) -> int:
        return self.cfg.widths[-1]

    def features(self, x: torch.Tensor) -> torch.Tensor:
        # channels-last: oneDNN's CPU convolutions then need no layout reorders; training the evaluation's
        # classifier is 1.24x faster on 2 threads (`python benchmarks/evaluation.py`); outputs equal up to
        # float rounding (3e-8)
        return self.stages(self.stem(x.contiguous(memory_format=torch.channels_last))).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.head is None:
            raise RuntimeError("this ResNet has no head (num_classes=0): call features()")
        return self.head(self.dropout(self.features(x)))


@torch.no_grad()
def predict_proba(model: ResNet, images: torch.Tensor, *, batch: int = 256) -> torch.Tensor:
    """Softmax probabilities ``(N, num_classes)`` in eval mode, on the model's device, returned on the CPU."""
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = [torch.softmax(model(images[i:i + batch].to(dev)), dim=1).cpu() for i in range(0, len(images), batch)]
    model.train(was)
    return torch.cat(out) if out else torch.empty(0, model.cfg.num_classes)


def save_classifier(path, model: ResNet, *, step: int = 0, extra: dict[str, Any] | None = None):
    """Write a kind-``classifier`` checkpoint (state_dict + architecture config); ``step``: the optimiser steps it
    was trained for."""
    from medanon.checkpoint import save_checkpoint

    return save_checkpoint(path, kind="classifier", config=model.cfg.to_dict(), state={"model": model.state_dict()},
                           step=step, extra=extra)


def load_classifier(path, *, map_location: str | torch.device = "cpu") -> tuple[ResNet, dict]:
    """Rebuild a :class:`ResNet` from a kind-``classifier`` checkpoint; returns ``(model in eval mode, blob)``."""
    from medanon.checkpoint import load_checkpoint, load_weights, state_entry

    blob = load_checkpoint(path, kind="classifier", map_location="cpu")   # copied into the model, then moved
    model = ResNet(ResNetConfig.from_dict(blob["config"]))
    load_weights(model, state_entry(blob, "model"), path)
    return model.to(map_location).eval(), blob
