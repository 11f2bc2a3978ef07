"""GMIA's loss networks: E_id (identity embeddings) and E_ut (utility features), differentiable, and
:func:`frozen`, which keeps every network's weights and batch-norm statistics fixed during the
optimisation (:class:`medanon.anonymize.gmia.GMIA`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from medanon.data.tensors import resize_to
from medanon.errors import ConfigError
from medanon.models.classifier import ResNet, load_classifier
from medanon.models.identity import IdentityNet, load_identity


def _match_channels(images: torch.Tensor, want: int, what: str) -> torch.Tensor:
    c = images.shape[1]
    if c == want:
        return images
    if c == 3 and want == 1:
        return images.mean(dim=1, keepdim=True)
    if c == 1 and want == 3:
        return images.expand(-1, 3, -1, -1)
    raise ConfigError(f"the {what} expects {want}-channel images, got {c} channels")


class IdentityEncoder(nn.Module):
    """E_id: images (N, C, H, W) in [-1, 1] -> unit identity embeddings (N, D), differentiable.

    Wraps the project's :class:`~medanon.models.identity.IdentityNet` (its ``embed`` runs without
    gradients; this runs the same preparation and projection with them).
    """

    def __init__(self,
        net: IdentityNet,                       # the identity network (ArcFace embeddings)
        *,
        provenance: dict[str, Any] | None = None,  # checkpoint path / sha256, reported in the manifest
    ):
        super().__init__()
        self.net = net
        self.provenance = dict(provenance or {})

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, map_location: str | torch.device = "cpu") -> IdentityEncoder:
        net, blob = load_identity(path, map_location=map_location)
        trained = (blob.get("extra") or {}).get("train_config")
        return cls(net, provenance={"kind": "identity", "path": str(path), "sha256": blob["sha256"],
                                    "embed_dim": net.cfg.embed_dim, "image_size": net.cfg.image_size,
                                    **({"train_config": trained} if trained else {})})

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.net(self.net.prepare(images)), dim=1)


class UtilityEncoder(nn.Module):
    """E_ut: images (N, C, H, W) in [-1, 1] -> the classifier's penultimate features (N, F), differentiable.

    The features are the globally pooled output of the last residual stage, the input of the
    classifier's linear head (:meth:`ResNet.features`). Images are resized to the side the
    classifier was trained at, as :mod:`medanon.train.classifier` does.
    """

    def __init__(self,
        model: ResNet,                          # a classifier trained on the utility label
        *,
        image_size: int | None = None,          # side the classifier was trained at (None: as given)
        label: str | None = None,               # the label it predicts (reported, checked against sensitive ones)
        provenance: dict[str, Any] | None = None,  # checkpoint path / sha256, reported in the manifest
    ):
        super().__init__()
        self.model = model
        self.image_size = image_size
        self.label = label
        self.provenance = {"label": label, "image_size": image_size, **(provenance or {})}

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, map_location: str | torch.device = "cpu") -> UtilityEncoder:
        model, blob = load_classifier(path, map_location=map_location)
        extra = blob.get("extra", {})
        size = extra.get("train_config", {}).get("image_size")
        return cls(model, image_size=int(size) if size else None, label=extra.get("label"),
                   provenance={"kind": "classifier", "path": str(path), "sha256": blob["sha256"],
                               "feature_dim": model.feature_dim})

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = _match_channels(images, self.model.cfg.in_channels, "utility classifier")
        if self.image_size:
            x = resize_to(x, self.image_size)
        return self.model.features(x)


_FROZEN_LOCK = threading.Lock()
_FROZEN: dict[int, list] = {}          # id(module) -> [holders, its submodules' modes, its parameters' flags]


@contextlib.contextmanager
def frozen(*modules: nn.Module | None) -> Iterator[None]:
    """Eval mode and no weight gradients for ``modules`` inside the block; every flag restored after.

    Re-entrant across threads: GMIA's CPU path privatises two batches at once (``side_by_side``), each inside this
    block over the same networks. The first to enter saves the flags and freezes; only the last to leave restores
    them. (Each restoring on its own exit put the networks back in training mode while the other batch still ran:
    batch norm then normalised by that batch's statistics and updated its running ones, so a release changed from
    run to run and changed the identity network it was made with.)"""
    mods = list({id(m): m for m in modules if m is not None}.values())
    with _FROZEN_LOCK:
        for m in mods:
            held = _FROZEN.get(id(m))
            if held is not None:
                held[0] += 1
                continue
            _FROZEN[id(m)] = [1, [(sub, sub.training) for sub in m.modules()],
                              [(p, p.requires_grad) for p in m.parameters()]]
            m.eval()
            m.requires_grad_(False)
    try:
        yield
    finally:
        with _FROZEN_LOCK:
            for m in mods:
                held = _FROZEN[id(m)]
                held[0] -= 1
                if held[0]:
                    continue
                del _FROZEN[id(m)]
                for sub, training in held[1]:
                    sub.training = training
                for p, flag in held[2]:
                    p.requires_grad_(flag)
