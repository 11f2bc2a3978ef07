"""The trained vessel segmenter: a :class:`~medanon.models.unet.FullResUNet` checkpoint and its threshold.

A checkpoint of kind ``vessel-segmenter`` (written by :mod:`medanon.train.segmenter`) holds the
model's ``state_dict``, its constructor arguments, the image side it was trained at and the
probability threshold calibrated on its validation split (the one that maximised mean Dice).

Images of another side are resized to the training side for the network and the probabilities
resized back (with a warning): the network's filters are tuned to vessel widths in pixels at the
training side, so running it on much larger images directly would miss the wide vessels.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from medanon.checkpoint import load_checkpoint, load_weights, state_entry
from medanon.errors import ConfigError, user_stacklevel
from medanon.models.unet import FullResUNet

log = logging.getLogger(__name__)

KIND = "vessel-segmenter"
# The shipped checkpoint's name (checkpoints/README.md has the command that made it), found on the model search path
# ($MEDANON_MODELS, then a source checkout's checkpoints/) as every other model is.
SHIPPED = "unet-vessels64.pt"


class LearnedSegmenter:
    """Vessel probabilities from a trained full-resolution U-Net; follows the device of its inputs."""

    def __init__(self, model: FullResUNet, *, size: int, threshold: float, sha256: str = "",
                 batch_size: int = 64, crop: str | None = None):
        self.model = model.eval()
        self.size = size                        # image side the network was trained at
        self.crop = crop                        # how its training images were cropped (None: not recorded)
        self.threshold = threshold              # probability above which a pixel is a vessel
        self.sha256 = sha256                    # checksum of the checkpoint file (for manifests)
        self.batch_size = batch_size            # images per forward pass

    @classmethod
    def from_checkpoint(cls, path: str | Path | None = None, **kwargs) -> LearnedSegmenter:
        if path is None:                        # the shipped one, where the other models are found
            from medanon.errors import DataError
            from medanon.models_registry import ENV, find_model

            try:
                path = find_model(SHIPPED)
            except DataError as e:
                raise ConfigError(f"the shipped vessel segmenter {SHIPPED} is not on medanon's model search path "
                                  f"({', '.join(e.files) or 'no folder'})",
                                  fix=f"set {ENV} to a folder holding the shipped checkpoints, pass checkpoint=, or "
                                      "train one with `medanon train segmenter` (checkpoints/README.md)") from None
        path = Path(path)
        blob = load_checkpoint(path, kind=KIND)
        cfg = blob["config"]
        model = FullResUNet(**cfg["model"])
        load_weights(model, state_entry(blob, "model"), path)
        return cls(model, size=int(cfg["size"]), threshold=round(float(blob["extra"]["threshold"]), 6),
                   sha256=blob["sha256"], crop=cfg.get("crop"), **kwargs)

    @torch.inference_mode()
    def probability(self, images: torch.Tensor, fov: torch.Tensor | None = None) -> torch.Tensor:
        """Vessel probability (N, 1, H, W) in [0, 1]; zero outside ``fov`` when given."""
        if images.shape[1] != self.model.in_channels:
            raise ConfigError(f"the vessel segmenter takes {self.model.in_channels}-channel images, got "
                              f"{images.shape[1]}",
                              fix=f"open the dataset with channels={self.model.in_channels}, or train a segmenter "
                                  "for them")
        side = images.shape[-1]
        if side != self.size or images.shape[-2] != self.size:
            warnings.warn(f"vessel segmenter trained at {self.size} px applied to {tuple(images.shape[-2:])} images: "
                          f"resizing to {self.size} px and back (train one at this size for sharper masks)",
                          stacklevel=user_stacklevel())
        dev = images.device
        self.model.to(dev)
        out = []
        for chunk in images.split(self.batch_size):
            x = chunk.float()
            resized = x.shape[-2:] != (self.size, self.size)
            if resized:
                x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", antialias=True,
                                  align_corners=False)
            p = torch.sigmoid(self.model(x))
            if resized:
                p = F.interpolate(p, size=chunk.shape[-2:], mode="bilinear", align_corners=False)
            out.append(p)
        prob = torch.cat(out)
        return prob * fov.to(dev) if fov is not None else prob

    def binarize(self, prob: torch.Tensor, fov: torch.Tensor | None = None) -> torch.Tensor:
        mask = prob >= self.threshold
        return mask & fov.to(mask.device) if fov is not None else mask
