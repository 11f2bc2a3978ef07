"""One front for every way of getting vessel masks: ``segment_vessels(images, method=...)`` and
:class:`VesselSource` (which adds masks read from the dataset's layout or from the user's files).

========  ==========================================================================================
method    where the mask comes from
========  ==========================================================================================
unet      the trained full-resolution U-Net (:mod:`medanon.segment.learned`), shipped checkpoint by
          default, threshold calibrated on its validation split
frangi    Frangi vesselness on the green channel, top ``fraction`` of the FOV (:mod:`.vesselness`)
sato      Sato vesselness, likewise
dataset   the masks the dataset layout provides (the phantoms' ground truth, a generic CSV's mask column)
files     one mask file per image in a folder (:mod:`medanon.segment.mask_files`)
========  ==========================================================================================
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from medanon.data.records import Record
from medanon.errors import ConfigError, DataError, user_stacklevel
from medanon.segment.learned import LearnedSegmenter
from medanon.segment.mask_files import MaskIndex, load_aligned_mask
from medanon.segment.vesselness import DEFAULT_FRACTION, Vesselness

SEGMENTERS = ("unet", "frangi", "sato")
ALIGNED_BUDGET = 256 * 2**20          # bytes of aligned mask files kept between check() and masks()
SOURCES = (*SEGMENTERS, "dataset", "files")


def get_segmenter(method: str = "unet", *, checkpoint: str | Path | None = None,
                  fraction: float = DEFAULT_FRACTION) -> LearnedSegmenter | Vesselness:
    """A segmenter with ``probability(images, fov)`` and ``binarize(prob, fov)``. For ``unet``, ``checkpoint`` is a
    path (default: the shipped one) or a loaded :class:`LearnedSegmenter`, used as it is."""
    if method == "unet":
        if isinstance(checkpoint, LearnedSegmenter):
            return checkpoint
        if isinstance(checkpoint, torch.nn.Module):
            raise ConfigError(f"checkpoint= is a bare {type(checkpoint).__name__}: a vessel segmenter needs the "
                              "threshold and image size its checkpoint records",
                              fix="pass the checkpoint's path or LearnedSegmenter.from_checkpoint(path)")
        return LearnedSegmenter.from_checkpoint(checkpoint)
    if method in ("frangi", "sato"):
        if checkpoint is not None:
            raise ConfigError(f"checkpoint= is for the unet segmenter, not {method}")
        return Vesselness(method=method, fraction=fraction)
    raise ConfigError(f"vessel segmenter {method!r} is not one of {SEGMENTERS}")


def segment_vessels(images: torch.Tensor, *, method: str = "unet", fov: torch.Tensor | None = None,
                    checkpoint: str | Path | None = None,
                    segmenter: LearnedSegmenter | Vesselness | None = None) -> torch.Tensor:
    """Boolean vessel masks (N, 1, H, W) of images (N, C, H, W) in [-1, 1], on the images' device.

    Pass a ``segmenter`` from :func:`get_segmenter` to avoid reloading a checkpoint in a loop.
    """
    seg = segmenter or get_segmenter(method, checkpoint=checkpoint)
    return seg.binarize(seg.probability(images, fov), fov)


NO_MASK_FIX = "use vessels='unet', 'frangi' or 'sato', or vessels='files' with masks_dir="


class VesselSource:
    """Vessel masks for batches of a dataset, from any of :data:`SOURCES`."""

    def __init__(self, method: str = "unet", *,
                 checkpoint: str | Path | None = None,       # unet: checkpoint (default: the shipped one)
                 masks_dir: str | Path | None = None,        # files: folder with one mask per image
                 fraction: float = DEFAULT_FRACTION):        # frangi / sato: share of FOV labelled vessel
        if method not in SOURCES:
            raise ConfigError(f"vessels={method!r} is not one of {SOURCES}")
        if (method == "files") != (masks_dir is not None):
            raise ConfigError("masks_dir= goes with vessels='files' (and only with it)",
                              fix="pass both vessels='files' and masks_dir=, or neither")
        if checkpoint is not None and method != "unet":
            raise ConfigError(f"checkpoint= is for vessels='unet', not {method!r}")
        if method not in ("frangi", "sato") and fraction != DEFAULT_FRACTION:
            raise ConfigError(f"vessel_fraction={fraction} is for vessels='frangi' or 'sato', not {method!r}: it "
                              "would change nothing", fix="leave vessel_fraction out, or pass vessels='frangi' or "
                                                          "'sato'")
        self.method = method
        self.segmenter = get_segmenter(method, checkpoint=checkpoint, fraction=fraction) \
            if method in SEGMENTERS else None
        self.index = MaskIndex(masks_dir) if masks_dir is not None else None
        self._aligned: dict[tuple[str, int, str], Any] = {}    # (image, size, crop) -> its mask as read (check)
        self._crop_warned = False

    def bind(self, records: Sequence[Record]) -> None:
        """Pair every record's image with its mask now (``files``: its mask file; ``dataset``: the layout's mask):
        all missing masks in one error, before any work."""
        if self.index is not None:
            self.index.bind([r.path for r in records])
        no_mask = sum(r.mask_path is None for r in records) if self.method == "dataset" else 0
        if no_mask:
            raise DataError(f"vessels='dataset': {no_mask} of the {len(records)} images have no vessel mask in the "
                            "dataset's layout", fix=NO_MASK_FIX)

    def check(self, records: Sequence[Record], *, size: int, crop: str) -> None:
        """``files``: read every mask of ``records`` now and align it with its image as the dataset reads it
        (``size``, ``crop``), so that an unreadable, non-binary or mis-sized mask is one error listing them all
        before any image is released, not a failure after the images before it were written. The aligned masks are
        kept (within :data:`ALIGNED_BUDGET` bytes) for :meth:`masks`, which then reads none of them again. Call after
        :meth:`bind`. Other sources: nothing to do (the dataset's masks are decoded with their images)."""
        if self.index is None:
            return
        from medanon.segment.mask_files import align_mask, read_mask

        bad: list[str] = []
        reason = ""
        kept = 0
        for rec, path in zip(records, self.index.pair([r.path for r in records]), strict=True):
            try:
                m = read_mask(path)
            except DataError as e:
                bad.append(str(path))
                reason = reason or e.message
                continue
            try:
                aligned = align_mask(m, path, rec.path, size=size, crop=crop)
            except DataError as e:
                if str(path) in e.files:                # the mask does not fit its image
                    bad.append(str(path))
                    reason = reason or e.message
                continue                                # the image's own fault: the dataset's decoding names it
            if kept + aligned.nbytes <= ALIGNED_BUDGET:
                self._aligned[(str(rec.path), size, crop)] = aligned
                kept += aligned.nbytes
        if bad:
            raise DataError(f"{len(bad)} of the {len(records)} vessel mask(s) in {self.index.folder} cannot be used "
                            f"(the first: {reason}):", files=bad,
                            fix="give each image a readable binary mask of its size (vessels white on black)")

    def mask_digest(self, records: Sequence[Record], root: Path | None) -> dict[str, Any] | None:
        """One checksum over the mask files read (``files``, ``dataset``; after :meth:`bind`), named relative to
        their folder: part of a release's private source digest, so that a resume with edited or other masks is
        refused. None for masks computed from the images."""
        from medanon.runtime import files_digest

        if self.index is not None:
            return files_digest(self.index.bound.values(), root=self.index.folder)
        if self.method == "dataset":
            return files_digest([r.mask_path for r in records if r.mask_path is not None], root=root)
        return None

    def reads(self) -> list[Path]:
        """The files and folders this source reads besides the dataset (never to be written over)."""
        return [self.index.folder] if self.index is not None else []

    def _warn_other_crop(self, crop: str) -> None:
        """A trained segmenter meets images cropped otherwise than its training images (once per source): a
        field of view cropped to its circle and a centre square place the vessels at other scales and positions."""
        trained = getattr(self.segmenter, "crop", None)
        if trained is None or trained == crop or self._crop_warned:
            return
        self._crop_warned = True
        warnings.warn(f"the vessel segmenter was trained on images cropped with crop={trained!r} and is applied to "
                      f"images cropped with crop={crop!r}: the vessels sit at other places and scales than it learnt, "
                      f"and its masks may miss them (VS-Snow then perturbs other pixels); read the images with "
                      f"crop={trained!r}, or train a segmenter with crop={crop!r}", UserWarning,
                      stacklevel=user_stacklevel())

    def describe(self) -> dict[str, Any]:
        """What goes into a release manifest about the masks."""
        d: dict[str, Any] = {"method": self.method}
        if isinstance(self.segmenter, LearnedSegmenter):
            d.update(checkpoint_sha256=self.segmenter.sha256, threshold=self.segmenter.threshold,
                     trained_size=self.segmenter.size, trained_crop=self.segmenter.crop)
        elif isinstance(self.segmenter, Vesselness):
            d.update(fraction=self.segmenter.fraction, sigmas_at_64px=list(self.segmenter.sigmas))
        return d

    def masks(self, images: torch.Tensor, fov: torch.Tensor, *, records: Sequence[Record],
              layout_masks: torch.Tensor | None, size: int, crop: str) -> torch.Tensor:
        """(N, 1, H, W) bool on the images' device for the batch ``images`` of ``records``."""
        if self.segmenter is not None:
            self._warn_other_crop(crop)
            return segment_vessels(images, fov=fov, segmenter=self.segmenter)
        if self.method == "dataset":
            if layout_masks is None:
                raise DataError("vessels='dataset': this dataset's layout provides no masks", fix=NO_MASK_FIX)
            return layout_masks.to(images.device).bool()
        assert self.index is not None
        paths = self.index.pair([r.path for r in records])
        kept = [self._aligned.get((str(r.path), size, crop)) for r in records]
        out = [torch.from_numpy(k if k is not None else load_aligned_mask(m, r.path, size=size, crop=crop))
               for k, m, r in zip(kept, paths, records, strict=True)]
        return torch.stack(out)[:, None].to(images.device)
