"""The Snow and VS-Snow mechanisms on tensors (VS-Snow Eqs. 1 and 2), and their randomness.

What they do and why is told in :mod:`medanon.anonymize.snow`; this module computes it for a batch
``(N, C, H, W)`` in [-1, 1], on the batch's device. Randomness comes only from the generators
passed in (:func:`image_generators`: one per image, from ``(seed, index)``); a release draws the
seed secretly (:func:`medanon.anonymize.snow_release.snow_sweep`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from medanon.errors import ConfigError

Generator = torch.Generator | np.random.Generator
Generators = Generator | Sequence[Generator]


def count_for(p: float, n: int) -> int:
    """``round(p·n)``, halves rounded up (not to even), as the number of pixels to replace."""
    return math.floor(p * n + 0.5)


def count_for_each(p: float, n: torch.Tensor) -> torch.Tensor:
    """:func:`count_for` of each element of ``n`` (a tensor of pixel counts), as int64."""
    return torch.floor(p * n.double() + 0.5).long()


def check_p(p: float) -> None:
    if not 0 < p <= 1:
        raise ConfigError(f"p={p} must be in (0, 1]", fix="the fraction of pixels replaced, e.g. p=0.1")


def image_generators(seed: int, indices: Sequence[int]) -> list[np.random.Generator]:
    """One generator per image, from ``(seed, index)``: independent PCG64 streams that keep every bit of the seed
    (a torch CPU generator would keep 32 of them)."""
    return [np.random.default_rng(np.random.SeedSequence([int(seed) % 2**63, int(i)])) for i in indices]


def random_order(n: int, h: int, w: int, *, generator: Generators, device: torch.device | str = "cpu"
                 ) -> torch.Tensor:
    """A uniformly random permutation of the H·W pixel positions of each of n images: (n, H·W) int64, from one
    generator for the batch or one per image (numpy's ``permutation``, or ``torch.randperm`` on a torch generator's
    device), then moved to ``device``."""
    gens = [generator] * n if isinstance(generator, torch.Generator | np.random.Generator) else list(generator)
    if len(gens) != n:
        raise ValueError(f"{len(gens)} generators for {n} images")
    if n == 0:
        return torch.empty(0, h * w, dtype=torch.long, device=device)
    return torch.stack([torch.from_numpy(g.permutation(h * w)) if isinstance(g, np.random.Generator) else
                        torch.randperm(h * w, generator=g, device=g.device) for g in gens]).to(device)


def snow_selection(order: torch.Tensor, p: float, h: int, w: int) -> torch.Tensor:
    """The first ``round(p·H·W)`` positions of each image's random ``order`` as a (n, 1, H, W) bool mask."""
    check_p(p)
    k = count_for(p, h * w)
    sel = torch.zeros(order.shape, dtype=torch.bool, device=order.device)
    sel.scatter_(1, order[:, :k], True)
    return sel.view(-1, 1, h, w)


def snow(images: torch.Tensor, *, p: float, means: torch.Tensor | Sequence[float], generator: Generators,
         order: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 1: exactly ``round(p·H·W)`` random positions per image set to ``means`` (C,) in every channel.

    ``order`` (from :func:`random_order`) can be passed to reuse one draw for several p (nested subsets).
    """
    n, c, h, w = images.shape
    means = torch.as_tensor(means, dtype=images.dtype, device=images.device).reshape(1, c, 1, 1)
    order = random_order(n, h, w, generator=generator, device=images.device) if order is None else order
    sel = snow_selection(order, p, h, w)
    return torch.where(sel, means.expand_as(images), images)


def neighbour_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the 8 neighbours of every pixel of (N, C, H, W), positions outside the image counting zero."""
    h, w = x.shape[-2:]
    padded = F.pad(x, (1, 1, 1, 1))
    out = torch.zeros_like(x)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            if (dy, dx) != (1, 1):
                out += padded[..., dy:dy + h, dx:dx + w]
    return out


def vessel_neighbour_mean(images: torch.Tensor, vessels: torch.Tensor) -> torch.Tensor:
    """Per pixel and channel, the mean of the input values of its vessel 8-neighbours; the mean of all
    its in-image 8-neighbours where it has no vessel neighbour. (N, C, H, W)."""
    v = vessels.to(images.dtype)
    vessel_sum, vessel_count = neighbour_sum(images * v), neighbour_sum(v)
    all_sum, all_count = neighbour_sum(images), neighbour_sum(torch.ones_like(v))
    return torch.where(vessel_count > 0, vessel_sum / vessel_count.clamp(min=1), all_sum / all_count)


def vs_snow_selection(vessels: torch.Tensor, p: float, *, generator: Generators,
                      order: torch.Tensor | None = None) -> torch.Tensor:
    """Exactly ``round(p·|V_i|)`` random vessel pixels of each image: (N, 1, H, W) bool inside ``vessels``:
    the first vessel pixels met along each image's random ``order`` (from :func:`random_order`; pass one
    to reuse a draw for several p, which nests the subsets)."""
    check_p(p)
    n, _, h, w = vessels.shape
    v = vessels.reshape(n, h * w).bool()
    order = random_order(n, h, w, generator=generator, device=vessels.device) if order is None else order
    v_along = v.gather(1, order)                                        # vessel flags in the random order
    k = count_for_each(p, v.sum(dim=1, keepdim=True))
    take = v_along & (v_along.long().cumsum(dim=1) <= k)
    sel = torch.zeros_like(v)
    sel.scatter_(1, order, take)
    return sel.view(n, 1, h, w)


def vs_snow(images: torch.Tensor, vessels: torch.Tensor, *, p: float, generator: Generators,
            order: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 2: a random fraction p of each image's vessel pixels take the mean of their vessel neighbours."""
    if vessels.shape != (images.shape[0], 1, *images.shape[-2:]):
        raise ValueError(f"vessel masks {tuple(vessels.shape)} do not match images {tuple(images.shape)}")
    vessels = vessels.to(images.device).bool()
    sel = vs_snow_selection(vessels, p, generator=generator, order=order)
    return torch.where(sel, vessel_neighbour_mean(images, vessels), images)


class ChannelMean:
    """Running per-channel mean of images (float64), over every pixel: ``update(batch)``, ``compute()``."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total: torch.Tensor | None = None
        self.count = 0

    def update(self, images: torch.Tensor) -> None:
        s = images.detach().double().sum(dim=(0, 2, 3)).cpu()
        self.total = s if self.total is None else self.total + s
        self.count += images.shape[0] * images.shape[2] * images.shape[3]

    def compute(self) -> torch.Tensor:
        if self.total is None:
            raise ValueError("no images seen")
        return self.total / self.count

