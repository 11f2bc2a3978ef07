"""Classical vessel segmentation: Frangi or Sato vesselness on the green channel, then a threshold.

Retinal vessels are dark ridges, and most contrasted in the green channel. Per image:

1. take the green channel (the only channel of a grayscale image) in [0, 1];
2. outside the field of view, replace the pixels by the mean inside it, so the dark surround does
   not make the FOV rim a ridge;
3. compute scikit-image's ``frangi`` (β = 0.5, γ automatic) or ``sato`` vesselness for dark ridges at
   ``sigmas`` (pixels; by default 0.5, 1, 1.5, 2 scaled by side / 64, so vessels of the same
   anatomical width are found at any resolution);
4. set it to zero within ``rim`` pixels of the FOV border (2 at 64 px, scaled) and divide by its
   maximum: a vesselness in [0, 1], usable as a score (AUROC);
5. threshold it per image at the quantile that keeps the ``fraction`` of FOV pixels with the
   highest response.

Why a per-image fraction, not a fixed level: vesselness scales with each image's contrast, which
changes from camera to camera and image to image; the share of the FOV covered by vessels is
stable (about 10 % of the FOV on the 64 px phantoms, 12 % on DRIVE at full resolution). On phantoms
at 64 px, fractions of 0.08 / 0.10 / 0.12 gave mean Dice 0.65 / 0.66 / 0.65 (Frangi); Otsu's
threshold 0.64 with four scales but 0.36 with two, and hysteresis (two quantiles) was worse
(0.59–0.64). See docs/snow.md for the full numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy import ndimage

from medanon.errors import ConfigError

METHODS = ("frangi", "sato")


def green_channel(images: torch.Tensor) -> np.ndarray:
    """(N, C, H, W) in [-1, 1] -> (N, H, W) float64 in [0, 1]: green for RGB, the channel for grayscale."""
    ch = images[:, 1] if images.shape[1] == 3 else images[:, 0]
    return (ch.detach().cpu().double().numpy() + 1.0) / 2.0


def estimate_fov(images: torch.Tensor, *, level: float = -0.9) -> torch.Tensor:
    """Field of view where none is given: pixels whose brightest channel is above ``level`` (about
    13 / 255), the black surround of a fundus photograph being below it. (N, 1, H, W) bool."""
    return images.amax(dim=1, keepdim=True) > level


DEFAULT_FRACTION = 0.10                         # share of the field of view labelled vessel, per image


@dataclass(frozen=True)
class Vesselness:
    """Frangi or Sato vesselness with a per-image fraction threshold (see the module docstring)."""

    method: str = "frangi"                      # frangi | sato
    fraction: float = DEFAULT_FRACTION          # share of FOV pixels labelled vessel, per image
    sigmas: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0)  # filter scales in pixels at 64 px (scaled with the side)
    rim: float = 2.0                            # FOV border band ignored, in pixels at 64 px (scaled)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"vesselness method {self.method!r} is not one of {METHODS}")
        if not 0 < self.fraction < 1:
            raise ConfigError(f"vessel_fraction={self.fraction} must be in (0, 1)", fix="e.g. vessel_fraction=0.10")

    def probability(self, images: torch.Tensor, fov: torch.Tensor | None = None) -> torch.Tensor:
        """Vesselness in [0, 1] (N, 1, H, W), zero outside the (eroded) field of view."""
        from skimage.filters import frangi, sato

        fov = estimate_fov(images) if fov is None else fov
        g = green_channel(images)
        f = fov[:, 0].detach().cpu().numpy().astype(bool)
        scale = images.shape[-1] / 64
        sigmas = [max(0.3, s * scale) for s in self.sigmas]
        rim = max(1, round(self.rim * scale))
        out = np.zeros_like(g)
        for i in range(len(g)):
            if not f[i].any():
                continue
            x = g[i].copy()
            x[~f[i]] = x[f[i]].mean()
            if self.method == "frangi":
                r = frangi(x, sigmas=sigmas, black_ridges=True, beta=0.5, gamma=None)
            else:
                r = sato(x, sigmas=sigmas, black_ridges=True)
            r[~ndimage.binary_erosion(f[i], iterations=rim)] = 0.0
            top = r.max()
            out[i] = r / top if top > 0 else r
        return torch.from_numpy(out[:, None].astype(np.float32)).to(images.device)

    def binarize(self, prob: torch.Tensor, fov: torch.Tensor | None = None) -> torch.Tensor:
        """Keep the ``fraction`` of FOV pixels with the highest vesselness, per image."""
        fov = torch.ones_like(prob, dtype=torch.bool) if fov is None else fov.to(prob.device)
        out = torch.zeros_like(prob, dtype=torch.bool)
        for i in range(len(prob)):
            inside = prob[i][fov[i]]
            if inside.numel() == 0:
                continue
            level = torch.quantile(inside.float(), 1.0 - self.fraction)
            out[i] = (prob[i] > level) & fov[i]
        return out
