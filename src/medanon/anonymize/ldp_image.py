"""The image-domain LDP baseline of DP-GLOW (paper §4.1): the Laplace mechanism on clipped pixels.

Reported exactly like DP-GLOW (:mod:`medanon.anonymize.ldp`). By default the clip box is the
public pixel range [-1, 1] (Δ_k = 2, α = 1: nothing is clipped that is not outside the range, and no
private image enters the mechanism); optionally per-pixel min and max over a calibration set give
Δ_k and the clip box (α = 0.4 by default), as in the paper, at the price of leakage the bound does
not cover. The budget ε of an image is spread over its D = C*H*W pixel values, noise scale Δ_k·D/ε.

Example:
    >>> import torch, warnings
    >>> cal = calibrate_pixels(torch.rand(16, 1, 8, 8) * 2 - 1)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     ldp = ImageLDP(cal, epsilon=10.0, per_element=True)
    >>> out = ldp(torch.zeros(2, 1, 8, 8), generator=torch.Generator().manual_seed(0))
    >>> out.shape, bool(out.abs().max() <= 1)
    (torch.Size([2, 1, 8, 8]), True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from medanon.anonymize.ldp import ClipCalibration, LaplaceMechanism, calibrate
from medanon.errors import ConfigError

SPACE = "pixel values in [-1, 1] (D = C*H*W elements)"


def calibrate_pixels(images: torch.Tensor, *, batch: int = 256) -> ClipCalibration:
    """Per-pixel min and max over calibration images (N, C, H, W)."""
    return calibrate((images[i:i + batch].flatten(1) for i in range(0, len(images), batch)), space="pixel")


class ImageLDP:
    """Images -> ε-LDP images by the Laplace mechanism on their clipped pixels."""

    def __init__(self, calibration: ClipCalibration | None = None, *,
                 epsilon: float,                # privacy budget (per image, or per pixel value with per_element)
                 alpha: float | None = None,    # clip width / range: None = 1 (public box) or 0.4 (calibrated)
                 per_element: bool = False,     # epsilon is per pixel value (image budget = epsilon * D)
                 clip: bool = True,             # clip before and after the noise (off only with epsilon=inf)
                 dims: int | None = None,       # C*H*W, needed only for the public box (no calibration)
                 sampler: str = "exact"):       # secret noise: exact discrete Laplace | float (see ldp.py)
        if calibration is None:
            if dims is None:
                raise ConfigError("the public pixel box needs dims = C*H*W", fix="pass dims=, or a calibration")
            calibration = ClipCalibration.public_box("pixel", dims)
        if calibration.space != "pixel":
            raise ConfigError(f"image-domain LDP needs pixel calibration statistics, got {calibration.space!r}")
        self.mechanism = LaplaceMechanism(calibration, epsilon=epsilon, alpha=alpha, per_element=per_element,
                                          clip=clip, sampler=sampler)

    def __call__(self, images: torch.Tensor, *,
                 generator: torch.Generator | Sequence[torch.Generator] | None = None) -> torch.Tensor:
        if images[0].numel() != self.mechanism.dims:
            raise ConfigError(f"images have {images[0].numel()} values each but the calibration has "
                              f"{self.mechanism.dims}", fix="calibrate on images of the same size and channels")
        out = self.mechanism(images.flatten(1), generator=generator)
        return out.reshape(images.shape).clamp_(-1.0, 1.0)

    def privacy(self) -> dict[str, Any]:
        return self.mechanism.privacy(space_description=SPACE)
