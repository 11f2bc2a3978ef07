"""``GlowCodec``: a trained flow as a :class:`~medanon.codecs.base.LatentCodec` between images and ``eps``.

``encode`` maps images (N, C, H, W) in [-1, 1] to the standardised latent ``eps`` (N, D), D = C*H*W,
which is N(0, I) under the model; ``decode`` is its exact inverse, clamped to [-1, 1] (a latent that
was changed, e.g. by the Laplace mechanism, may decode slightly outside the image range).

Where the inverse flow diverges on an unusual latent (decoded values beyond ±4 or not finite: the
inverse of a coupling divides by its learned scale, and off the data the scales are not
controlled), ``decode`` retries that image's latent shrunk towards the prior's mode, ``t * eps`` for
t = 0.9, 0.8, ..., 0, and keeps the first that decodes; :attr:`GlowCodec.diverged` counts such
images and :meth:`GlowCodec.decode_checked` says which they were. This is a deterministic function of
the latent alone, so for a privatised latent it is post-processing and keeps the differential-privacy
guarantee.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from medanon.models.glow.dequantize import flow_to_image, image_to_flow
from medanon.models.glow.model import Glow

log = logging.getLogger(__name__)

DIVERGED = 4.0                                  # a decoded value beyond ±4 (image range ±1): the inverse diverged
SHRINK = tuple(round(0.9 - 0.1 * i, 1) for i in range(10))     # 0.9, 0.8, ..., 0.0: retries towards the mode


def _diverged(x: torch.Tensor) -> torch.Tensor:
    return (~(torch.isfinite(x) & (x.abs() <= DIVERGED))).flatten(1).any(1)


class GlowCodec(nn.Module):
    name = "glow"
    latent_space = "eps"

    def __init__(self, flow: Glow, *, sha256: str = "", calibration: Any = None,
                 trained_on: dict[str, Any] | None = None):
        super().__init__()
        self.flow = flow.eval()
        self.sha256 = sha256                    # checksum of the checkpoint the flow came from
        # what the checkpoint stores beside the weights, kept with the loaded flow so that passing it as an object
        # decides as passing its path does: the clip box's statistics of the flow's training latents
        # (medanon.anonymize.ldp.ClipCalibration) and the record of its training data (which images it saw)
        self.calibration = calibration
        self.trained_on = trained_on
        self.diverged = 0                       # images whose decoding diverged so far (see module docstring)

    @property
    def dims(self) -> int:
        return self.flow.dims

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        return self.flow.encode(image_to_flow(images))

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return self.decode_checked(latents)[0]

    @torch.no_grad()
    def decode_checked(self, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The images of ``latents`` (N, D) and which of them diverged (N bools): those decoded from their latent
        shrunk towards the prior's mode (see the module docstring)."""
        x = flow_to_image(self.flow.decode(latents))
        bad = _diverged(x)
        diverged = bad.clone()
        if bad.any():
            self.diverged += int(bad.sum())
            log.debug("the inverse flow diverged on %d of %d latents (values beyond ±%g or not finite); "
                        "decoding them shrunk towards the prior's mode", int(bad.sum()), len(x), DIVERGED)
            for t in SHRINK:
                idx = bad.nonzero().flatten()
                if not len(idx):
                    break
                retry = flow_to_image(self.flow.decode(latents[idx] * t))
                ok = ~_diverged(retry)
                x[idx[ok]] = retry[ok]
                bad[idx[ok]] = False
        return torch.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0).clamp_(-1.0, 1.0), diverged

    def describe(self) -> dict[str, Any]:
        c = self.flow.cfg
        return {"name": self.name, "latent_space": self.latent_space, "dims": self.dims,
                "architecture": f"glow L={c.levels} K={c.depth} hidden={list(c.hidden)} learn_top={c.learn_top}",
                "sha256": self.sha256}
