"""Adaptive discriminator augmentation (ADA, Karras et al. 2020) in plain PyTorch.

:class:`AugmentPipe` applies each enabled augmentation to each image independently with
probability ``p``. Every operation is differentiable with respect to the images, so the generator
learns through it, and at ``p = 0`` the pipe returns its input unchanged. Because the discriminator
only ever sees augmented images, real and generated alike, the augmentations do not "leak" into
generated images as long as ``p`` stays clearly below 1.

:class:`AdaController` adjusts ``p`` from the overfitting heuristic ``r_t = E[sign(D(real))]``:
up when the discriminator is too sure about real images (``r_t`` above the target), down otherwise.

Which augmentations make sense depends on the modality: a horizontal flip swaps a left and a right
eye (fundus) or mimics situs inversus (X-ray), and arbitrary rotations are natural for fundus
photographs but not for chest X-rays. Choose the list per dataset (``StyleGANConfig.augment``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from medanon.models.stylegan.config import AUGMENTS
from medanon.models.stylegan.warp import warp

COLOUR = ("brightness", "contrast", "saturation")


class AugmentPipe(nn.Module):
    """Differentiable, per-image random augmentations, each applied with probability ``p``."""

    def __init__(self,
        augments: Sequence[str],                # names from AUGMENTS, applied in the order of AUGMENTS
        p: float = 0.0,                         # probability of applying each augmentation to each image
        translate_max: float = 0.125,           # largest integer shift, as a fraction of the image side
        scale_std: float = 0.2,                 # log2 standard deviation of isotropic scaling
        rotate_max: float = 1.0,                # largest rotation, as a fraction of 180 degrees
        brightness_std: float = 0.2,            # standard deviation of the added brightness
        contrast_std: float = 0.5,              # log2 standard deviation of the contrast factor
        saturation_std: float = 1.0,            # log2 standard deviation of the saturation factor
        cutout_size: float = 0.5,               # side of the cut-out square, as a fraction of the image side
    ):
        super().__init__()
        unknown = sorted(set(augments) - set(AUGMENTS))
        if unknown:
            raise ValueError(f"unknown augmentation(s) {unknown}; choose from {AUGMENTS}")
        self.augments = frozenset(augments)
        self.p = float(p)
        self.translate_max = translate_max
        self.scale_std = scale_std
        self.rotate_max = rotate_max
        self.brightness_std = brightness_std
        self.contrast_std = contrast_std
        self.saturation_std = saturation_std
        self.cutout_size = cutout_size

    def forward(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Augment ``images`` (N, C, H, W); ``generator`` (on the images' device) makes it reproducible."""
        if self.p <= 0 or not self.augments:
            return images
        rand = _Sampler(images.shape[0], images.device, generator, self.p)
        x = self._geometric(images, rand)
        x = self._colour(x, rand)
        if "cutout" in self.augments:
            x = self._cutout(x, rand)
        return x

    def _geometric(self, x: torch.Tensor, rand: _Sampler) -> torch.Tensor:
        """Compose one affine matrix per image (output -> input coordinates) and resample once.

        Pixels from outside the image repeat the nearest edge pixel: black around a fundus, the
        film or body edge of an X-ray. (StyleGAN2-ADA reflects instead, which on a fundus puts
        mirrored pieces of the disc rim into the black corners.)
        """
        n, _, h, w = x.shape
        m = torch.eye(3, device=x.device).repeat(n, 1, 1)
        if "xflip" in self.augments:
            m = m @ _scale2d(1 - 2 * rand.gated(torch.floor(rand.uniform() * 2)), torch.ones(n, device=x.device))
        if "rotate90" in self.augments:
            m = m @ _rotate2d(rand.gated(torch.floor(rand.uniform() * 4)) * (math.pi / 2))
        if "translate" in self.augments:
            tx = torch.round((rand.uniform() * 2 - 1) * self.translate_max * w) * (2 / w)  # whole pixels
            ty = torch.round((rand.uniform() * 2 - 1) * self.translate_max * h) * (2 / h)
            m = m @ _translate2d(rand.gated(tx), rand.gated(ty))
        if "scale" in self.augments:
            s = torch.exp2(rand.gated(rand.normal() * self.scale_std))
            m = m @ _scale2d(s, s)
        if "rotate" in self.augments:
            m = m @ _rotate2d(rand.gated((rand.uniform() * 2 - 1) * math.pi * self.rotate_max))
        if torch.equal(m, torch.eye(3, device=x.device).expand(n, 3, 3)):
            return x
        grid = F.affine_grid(m[:, :2].to(x.dtype), list(x.shape), align_corners=False)
        return warp(x, grid)                     # grid_sample, twice differentiable on GPUs too (R1 through ADA)

    def _colour(self, x: torch.Tensor, rand: _Sampler) -> torch.Tensor:
        """Brightness, contrast and (RGB only) saturation as one affine colour transform per image."""
        n, c = x.shape[:2]
        if not any(a in self.augments for a in COLOUR):
            return x
        scale = torch.eye(c, device=x.device).repeat(n, 1, 1)
        offset = torch.zeros(n, c, device=x.device)
        if "brightness" in self.augments:
            offset = offset + rand.gated(rand.normal() * self.brightness_std)[:, None]
        if "contrast" in self.augments:
            k = torch.exp2(rand.gated(rand.normal() * self.contrast_std))
            scale, offset = scale * k[:, None, None], offset * k[:, None]
        if "saturation" in self.augments and c == 3:
            v = torch.full((3, 1), 1 / math.sqrt(3), device=x.device)
            luma = v @ v.t()
            s = torch.exp2(rand.gated(rand.normal() * self.saturation_std))
            sat = luma + (torch.eye(3, device=x.device) - luma) * s[:, None, None]
            scale, offset = sat @ scale, (sat @ offset[:, :, None])[:, :, 0]
        if torch.equal(scale, torch.eye(c, device=x.device).expand(n, c, c)) and not bool(offset.any()):
            return x
        y = scale.to(x.dtype) @ x.flatten(2) + offset.to(x.dtype)[:, :, None]
        return y.reshape(x.shape)

    def _cutout(self, x: torch.Tensor, rand: _Sampler) -> torch.Tensor:
        """Set a random square (``cutout_size`` of the side) to zero, i.e. mid-grey in [-1, 1]."""
        h, w = x.shape[2:]
        on = rand.uniform() < self.p
        if not bool(on.any()):
            return x
        cx, cy = rand.uniform(), rand.uniform()
        xs = (torch.arange(w, device=x.device) + 0.5) / w
        ys = (torch.arange(h, device=x.device) + 0.5) / h
        outside = (((xs[None, None, :] - cx[:, None, None]).abs() >= self.cutout_size / 2)
                   | ((ys[None, :, None] - cy[:, None, None]).abs() >= self.cutout_size / 2))
        keep = outside | ~on[:, None, None]
        return x * keep[:, None].to(x.dtype)


class _Sampler:
    """Per-image random numbers for one call, and the gate that applies an augmentation with probability p."""

    def __init__(self, n: int, device: torch.device, generator: torch.Generator | None, p: float):
        self.n, self.device, self.generator, self.p = n, device, generator, p

    def uniform(self) -> torch.Tensor:
        return torch.rand(self.n, device=self.device, generator=self.generator)

    def normal(self) -> torch.Tensor:
        return torch.randn(self.n, device=self.device, generator=self.generator)

    def gated(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` where this image is augmented (probability p), else 0 (the identity parameter)."""
        return torch.where(self.uniform() < self.p, value, torch.zeros_like(value))


def _scale2d(sx: torch.Tensor, sy: torch.Tensor) -> torch.Tensor:
    m = torch.zeros(sx.shape[0], 3, 3, device=sx.device)
    m[:, 0, 0], m[:, 1, 1], m[:, 2, 2] = sx, sy, 1
    return m


def _translate2d(tx: torch.Tensor, ty: torch.Tensor) -> torch.Tensor:
    m = torch.eye(3, device=tx.device).repeat(tx.shape[0], 1, 1)
    m[:, 0, 2], m[:, 1, 2] = tx, ty
    return m


def _rotate2d(theta: torch.Tensor) -> torch.Tensor:
    m = torch.eye(3, device=theta.device).repeat(theta.shape[0], 1, 1)
    cos, sin = torch.cos(theta), torch.sin(theta)
    m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = cos, -sin, sin, cos
    return m


class AdaController:
    """Keeps ``pipe.p`` so that ``r_t = E[sign(D(real))]`` stays near ``target``.

    Call :meth:`accumulate` with the discriminator's logits on (augmented) real images every step
    and :meth:`step` once per step; every ``interval`` steps ``p`` moves by
    ``sign(r_t - target) * batch * interval / (kimg * 1000)``, so it can cross [0, 1] in ``kimg``
    thousand images at the fastest.
    """

    def __init__(self,
        pipe: AugmentPipe,                      # the pipe whose p is adjusted
        target: float = 0.6,                    # r_t to aim for
        interval: int = 4,                      # steps between updates
        kimg: float = 100.0,                    # thousands of images for p to move by 1
        batch: int = 32,                        # images per step
    ):
        self.pipe = pipe
        self.target = target
        self.interval = interval
        self.speed = batch * interval / (kimg * 1000)
        self._signs = 0.0
        self._count = 0
        self._steps = 0
        self.last_rt: float | None = None

    def accumulate(self, real_logits: torch.Tensor) -> None:
        self._signs += float(torch.sign(real_logits.detach()).sum())
        self._count += real_logits.numel()

    def step(self) -> None:
        """Count a step; every ``interval`` steps turn the accumulated signs into r_t and update p.

        With ``target = 0`` p stays fixed (r_t is still computed and reported).
        """
        self._steps += 1
        if self._steps % self.interval == 0 and self._count:
            self.update(self._signs / self._count)
            self._signs, self._count = 0.0, 0

    def update(self, rt: float) -> None:
        """Move p one notch towards keeping ``rt`` at the target (no move when the target is 0)."""
        self.last_rt = rt
        if self.target <= 0:
            return
        direction = (rt > self.target) - (rt < self.target)
        self.pipe.p = min(max(self.pipe.p + direction * self.speed, 0.0), 1.0)

    def state_dict(self) -> dict[str, float | int | None]:
        return {"p": self.pipe.p, "signs": self._signs, "count": self._count, "steps": self._steps,
                "last_rt": self.last_rt}

    def load_state_dict(self, state: dict[str, float | int | None]) -> None:
        self.pipe.p = float(state["p"])
        self._signs, self._count, self._steps = float(state["signs"]), int(state["count"]), int(state["steps"])
        self.last_rt = state["last_rt"]
