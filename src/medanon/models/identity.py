"""The project's identity network: images -> unit-length identity embeddings.

A :class:`~medanon.models.classifier.ResNet` backbone, a linear projection with batch norm, and L2
normalisation (Deng et al., ArcFace, CVPR 2019). During training an :class:`ArcFaceHead` adds an
additive angular margin ``m`` to the angle between an embedding and its patient's class centre and
scales the cosines by ``s``; at evaluation only :meth:`IdentityNet.embed` is used, so the network
verifies patients it never saw in training (open set). Trained on the repeated acquisitions of real
patients by :mod:`medanon.train.identity`; the same network is the attacker of the linkability and
singling-out evaluations, and GMIA's identity encoder ``E_id``.

Checkpoints have kind ``"identity"`` (:func:`save_identity` / :func:`load_identity`); they hold
the backbone config, the embedding size, the input size and the patient-set digest, not the head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from medanon.checkpoint import load_checkpoint, load_weights, save_checkpoint, state_entry
from medanon.models.classifier import ResNet, ResNetConfig

KIND = "identity"


@dataclass
class IdentityConfig:
    backbone: ResNetConfig                      # feature extractor (its num_classes is ignored: no head)
    embed_dim: int = 128                        # identity embedding size
    image_size: int = 64                        # side the network expects; embed() resizes other inputs

    def to_dict(self) -> dict[str, Any]:
        return {"backbone": self.backbone.to_dict(), "embed_dim": self.embed_dim, "image_size": self.image_size}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IdentityConfig:
        return cls(backbone=ResNetConfig.from_dict(d["backbone"]), embed_dim=int(d["embed_dim"]),
                   image_size=int(d["image_size"]))


class IdentityNet(nn.Module):
    """``forward(x)`` -> unnormalised embeddings (training); ``embed(images)`` -> unit vectors (N, D), batched
    and without gradients; ``embedding(images)`` -> unit vectors with gradients (for identity losses)."""

    def __init__(self, cfg: IdentityConfig):
        super().__init__()
        bb = ResNetConfig.from_dict({**cfg.backbone.to_dict(), "num_classes": 0})
        self.cfg = cfg
        self.backbone = ResNet(bb)
        self.project = nn.Sequential(nn.Linear(self.backbone.feature_dim, cfg.embed_dim, bias=False),
                                     nn.BatchNorm1d(cfg.embed_dim))

    @property
    def in_channels(self) -> int:
        return self.cfg.backbone.in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(self.backbone.features(x))

    def prepare(self, images: torch.Tensor) -> torch.Tensor:
        """Match the channels and size the network was trained on (area resize, like the data loader)."""
        if images.ndim != 4:
            raise ValueError(f"images must be (N, C, H, W), got shape {tuple(images.shape)}")
        c = images.shape[1]
        if c != self.in_channels:
            if c == 3 and self.in_channels == 1:
                images = images.mean(dim=1, keepdim=True)
            elif c == 1 and self.in_channels == 3:
                images = images.expand(-1, 3, -1, -1)
            else:
                raise ValueError(f"images have {c} channels, the identity network expects {self.in_channels}")
        s = self.cfg.image_size
        if images.shape[-1] != s or images.shape[-2] != s:
            images = F.interpolate(images, size=(s, s), mode="area" if images.shape[-1] > s else "bilinear",
                                   align_corners=None if images.shape[-1] > s else False)
        return images

    def embedding(self, images: torch.Tensor) -> torch.Tensor:
        """Differentiable unit embeddings ``(N, embed_dim)`` on the input's device, in the current mode.

        For losses that need gradients with respect to the images (GMIA's identity loss
        ``max(0, cos(E_id(x_r), E_id(x_a)) - m)``): put the network in eval mode and freeze it first.
        """
        return F.normalize(self(self.prepare(images)), dim=1)

    @torch.no_grad()
    def embed(self, images: torch.Tensor, *, batch: int = 256) -> torch.Tensor:
        """Unit-length identity embeddings ``(N, embed_dim)`` (float32, on the CPU).

        Runs in eval mode on the network's device; ``images`` are ``(N, C, H, W)`` in ``[-1, 1]``.
        """
        was = self.training
        self.eval()
        dev = next(self.parameters()).device
        out = []
        for i in range(0, len(images), batch):
            x = self.prepare(images[i:i + batch].to(dev, torch.float32))
            out.append(F.normalize(self(x), dim=1).cpu())
        self.train(was)
        return torch.cat(out) if out else torch.empty(0, self.cfg.embed_dim)


class ArcFaceHead(nn.Module):
    """Additive angular margin logits: ``s * cos(theta_y + m)`` for the true class, ``s * cos(theta_j)`` else."""

    def __init__(self,
        embed_dim: int,                         # embedding size
        num_classes: int,                       # patients in the training set
        s: float = 30.0,                        # scale of the cosines
        m: float = 0.5,                         # additive angular margin, radians
    ):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_classes, embed_dim))
        nn.init.xavier_uniform_(self.weight)
        self.s, self.m = float(s), float(m)
        self.cos_m, self.sin_m = math.cos(m), math.sin(m)
        self.th = math.cos(math.pi - m)          # beyond this angle theta + m would pass pi:
        self.mm = math.sin(math.pi - m) * m      # fall back to a linear penalty (keeps the logit monotone)

    def forward(self, emb: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        cos = F.linear(F.normalize(emb, dim=1), F.normalize(self.weight, dim=1)).clamp(-1 + 1e-7, 1 - 1e-7)
        sin = torch.sqrt(1.0 - cos * cos)
        phi = cos * self.cos_m - sin * self.sin_m
        phi = torch.where(cos > self.th, phi, cos - self.mm)
        onehot = F.one_hot(target, cos.shape[1]).to(cos.dtype)
        return self.s * (onehot * phi + (1.0 - onehot) * cos)


def save_identity(path: str | Path, net: IdentityNet, *, extra: dict[str, Any] | None = None,
                  state: dict[str, Any] | None = None, step: int = 0) -> Path:
    """Write the network (and optional training state for resuming) as a kind-``identity`` checkpoint."""
    return save_checkpoint(path, kind=KIND, config=net.cfg.to_dict(), state={"net": net.state_dict(),
                                                                           **(state or {})},
                           step=step, extra=extra)


def load_identity(path: str | Path, *, map_location: str | torch.device = "cpu") -> tuple[IdentityNet, dict]:
    """Rebuild an :class:`IdentityNet` from its checkpoint; returns ``(net in eval mode, checkpoint blob)``."""
    blob = load_checkpoint(path, kind=KIND, map_location="cpu")   # copied into the net, then moved
    net = IdentityNet(IdentityConfig.from_dict(blob["config"]))
    load_weights(net, state_entry(blob, "net"), path)
    return net.to(map_location).eval(), blob
