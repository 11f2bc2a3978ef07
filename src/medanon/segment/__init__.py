"""Retinal vessel segmentation, for VS-Snow and for its evaluation.

Two segmenters, one front:

- :mod:`.vesselness`  Frangi / Sato vesselness on the green channel with a per-image threshold (no training);
- :mod:`.learned`     a trained full-resolution U-Net (:mod:`medanon.models.unet`, trained by
                      ``medanon train segmenter``), with the threshold calibrated on its validation split;
- :mod:`.mask_files`  masks the user provides, paired with their images and aligned with their crop;
- :mod:`.vessels`     ``segment_vessels(images, method=...)`` and :class:`VesselSource` for all of them;
- :mod:`.metrics`     Dice and AUROC inside the field of view.
"""

from medanon.segment.metrics import auroc, dice
from medanon.segment.vessels import SEGMENTERS, SOURCES, VesselSource, get_segmenter, segment_vessels

__all__ = ["SEGMENTERS", "SOURCES", "VesselSource", "auroc", "dice", "get_segmenter", "segment_vessels"]
